"""What runs once training stops: `AtEnd` callbacks, given the run folder and the `FitResult`.

The loop calls them on rank 0 whatever the reason it stopped (budget, Ctrl-C, divergence), after
the last checkpoint and before raising KeyboardInterrupt or TrainingDiverged. The default draws
RUN/curves.png (`plot_curves`); the command line adds the run report (`attnkit.app.visualize.report`).
"""

from __future__ import annotations

from typing import Protocol

from attnkit.storage import RunFolder
from attnkit.training.result import FitResult


class AtEnd(Protocol):
    """Called once with the run folder and what `fit` did, when `fit` stops."""

    def __call__(self, run: RunFolder, result: FitResult, /) -> None: ...


def plot_curves(run: RunFolder, result: FitResult) -> None:
    """RUN/curves.png from the run's metrics.jsonl (matplotlib is imported here, not with attnkit.training)."""
    if run.metrics_path.is_file():
        from attnkit.training.curves import plot_run_curves

        plot_run_curves(run)
