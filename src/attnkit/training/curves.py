"""Training and validation curves of a run, drawn from its metrics.jsonl records (matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from attnkit.storage import RunFolder, atomic_write  # noqa: E402

_NOT_METRICS = {"step", "time", "split", "epoch", "elapsed_s"}


def plot_curves(records: Sequence[dict[str, Any]], path: Path) -> Path:
    """One PNG: the training loss against step, then one panel per validation metric against step."""
    train = [record for record in records if record.get("split") == "train" and "loss" in record]
    valid = [record for record in records if record.get("split") == "valid"]
    names = sorted({key for record in valid for key, value in record.items()
                    if key not in _NOT_METRICS and isinstance(value, (int, float))})
    others = [name for name in names if name != "loss"]  # a validation loss shares the training loss panel
    panels = 1 + len(others)
    columns = min(panels, 3)
    rows = -(-panels // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.2 * rows), dpi=100, squeeze=False)
    flat = list(axes.flat)
    _panel(flat[0], train, "loss", "training loss", color="tab:blue")
    if any("loss" in record for record in valid):
        _panel(flat[0], valid, "loss", "validation loss", color="tab:orange", marker="o")
        flat[0].legend(fontsize=8)
    flat[0].set_title("loss")
    for ax, name in zip(flat[1:], others):
        _panel(ax, valid, name, f"validation {name}", color="tab:orange", marker="o")
        ax.set_title(f"validation {name}")
    for ax in flat[panels:]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def _panel(ax, records: Sequence[dict[str, Any]], key: str, label: str, **style: Any) -> None:
    points = [(record["step"], record[key]) for record in records if isinstance(record.get(key), (int, float))]
    if points:
        steps, values = zip(*points)
        ax.plot(steps, values, label=label, linewidth=1.2, markersize=3, **style)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)


def plot_run_curves(run: RunFolder) -> Path:
    """RUN/curves.png from the run's metrics.jsonl, written atomically."""
    return atomic_write(run.curves_path, lambda temporary: plot_curves(run.metrics(), temporary))
