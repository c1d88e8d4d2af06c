"""How `Trainer.fit` ends: its `FitResult`, or `TrainingDiverged`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from attnkit.errors import UserError
from attnkit.storage import RunFolder
from attnkit.training.progress import format_duration

StopReason = Literal["steps", "epochs", "minutes", "interrupted", "diverged"]
REASONS = {"steps": "step budget reached", "epochs": "epoch budget reached", "minutes": "time budget reached",
           "interrupted": "interrupted (continue with --resume)",
           "diverged": "stopped: too many non-finite losses in a row"}


class TrainingDiverged(UserError):
    """Too many non-finite losses in a row: the run stopped; its last good checkpoint is kept."""


@dataclass(frozen=True)
class FitResult:
    """What `Trainer.fit` did: why it stopped and where it got."""

    stop_reason: StopReason
    step: int
    epoch: int
    elapsed_s: float
    last_loss: float | None
    best_metric: str
    best_value: float | None
    best_step: int | None
    nonfinite_total: int

    def summary(self, run: RunFolder) -> str:
        loss = "?" if self.last_loss is None else f"{self.last_loss:.4g}"
        best = "" if self.best_value is None else \
            f", best {self.best_metric} {self.best_value:.4g} at step {self.best_step}"
        skipped = f", {self.nonfinite_total} non-finite steps skipped" if self.nonfinite_total else ""
        return (f"{run.kind} run {run.path}: {REASONS[self.stop_reason]} at step {self.step} "
                f"(epoch {self.epoch}) after {format_duration(self.elapsed_s)}; train loss {loss}{best}{skipped}")
