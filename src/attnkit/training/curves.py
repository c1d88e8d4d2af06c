"""Training and validation curves of a run, drawn from its metrics.jsonl records (matplotlib, Agg).

Drawn the way a practitioner reads them: the training loss smoothed (an exponential moving average,
debiased as TensorBoard's) over the raw values drawn faint, with the time elapsed on a second x
axis; then one panel per validation metric, or per family of COCO metrics (AP at IoU thresholds,
AP by object size), each point a marker with the latest value written beside it. Bookkeeping that
is logged with the validation (images, seconds, sentences) is not a metric and is not drawn, nor is
COCO's -1, which means "no objects of this size", not a score.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import EngFormatter, MaxNLocator  # noqa: E402

from attnkit.storage import RunFolder, atomic_write  # noqa: E402

NOT_METRICS = {"step", "time", "split", "epoch", "elapsed_s", "images", "seconds", "sentences", "items", "tokens",
               "skipped_images", "skipped_entries"}
STEP_TICKS = 6  # at most this many ticks on a step axis (MaxNLocator's nbins)
NO_SUCH_OBJECTS = -1.0  # COCOeval's value of a metric whose area range (or class) has no ground truth
FAMILIES = ((re.compile(r"AP\d*"), "AP by IoU threshold"), (re.compile(r"AP[sml]"), "AP by object size"))


def plot_curves(records: Sequence[dict[str, Any]], path: Path) -> Path:
    """One PNG (see the module docstring) of a run's metrics.jsonl RECORDS, written to PATH."""
    figure = curves_figure(records)
    figure.savefig(path, format="png")
    plt.close(figure)
    return path


def curves_figure(records: Sequence[dict[str, Any]]) -> Figure:
    """The figure: the training loss panel, then one panel per validation metric or family."""
    train = [record for record in records if record.get("split") == "train" and "loss" in record]
    valid = [record for record in records if record.get("split") == "valid"]
    panels = validation_panels(valid)
    columns = min(1 + len(panels), 3)
    rows = -(-(1 + len(panels)) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.4 * columns, 3.4 * rows), dpi=100, squeeze=False)
    flat = list(axes.flat)
    _loss_panel(flat[0], train, valid)
    for ax, (title, names) in zip(flat[1:], panels.items()):
        family = names != [title]  # a family's panel names its members in a legend
        for name in names:
            _series(ax, _points(valid, name), name if family else f"validation {name}")
        ax.set_title(title if family else f"validation {title}")
        if family:
            ax.legend(fontsize=7)
    for ax in flat[1 + len(panels):]:
        ax.axis("off")
    figure.tight_layout()
    return figure


def validation_panels(valid: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    """Panel title -> the validation metrics drawn in it; metrics with no drawable value get none."""
    names = sorted({key for record in valid for key, value in record.items()
                    if key.removeprefix("ema_") not in NOT_METRICS and key != "loss" and not key.endswith("_per_s")
                    and isinstance(value, (int, float)) and not isinstance(value, bool)}, key=_display_order)
    panels: dict[str, list[str]] = {}
    for name in names:
        if not _points(valid, name):
            continue
        title = next((family for pattern, family in FAMILIES if pattern.fullmatch(name)), name)
        panels.setdefault(title, []).append(name)
    return panels


def _display_order(name: str) -> tuple[str, int]:
    """Alphabetical, but COCO's sizes small, medium, large: APs, APm, APl."""
    if re.fullmatch(r"A[PR][sml]", name):
        return name[:2] + "~", "sml".index(name[2])
    return name, 0


def smooth(values: Sequence[float], weight: float) -> list[float]:
    """Exponential moving average s_t = w s_{t-1} + (1 - w) x_t, divided by 1 - w^t (no pull towards 0)."""
    average, smoothed = 0.0, []
    for t, value in enumerate(values, start=1):
        average = weight * average + (1 - weight) * value
        smoothed.append(average / (1 - weight ** t))
    return smoothed


def smoothing_weight(points: int) -> float:
    """EMA weight that averages over about a twentieth of the curve: 0 (none) up to 20 points."""
    return 1 - 1 / max(1.0, points / 20)


def _loss_panel(ax, train: Sequence[dict[str, Any]], valid: Sequence[dict[str, Any]]) -> None:
    points = _points(train, "loss")
    if points:
        steps, values = zip(*points)
        weight = smoothing_weight(len(values))
        if weight > 0:
            ax.plot(steps, values, color="tab:blue", alpha=0.25, linewidth=0.8, label="training loss (raw)")
        ax.plot(steps, smooth(values, weight), color="tab:blue", linewidth=1.6,
                label="training loss (smoothed)" if weight > 0 else "training loss")
    if _points(valid, "loss"):
        _series(ax, _points(valid, "loss"), "validation loss", color="tab:orange")
    ax.set_title("loss", pad=14 if _time_axis(ax, train) else 6)
    if ax.lines:
        ax.legend(fontsize=7)
    _steps_axis(ax)


def _series(ax, points: list[tuple[int, float]], label: str, **style: Any) -> None:
    """A validation series: markers joined by a line, the latest value written beside the last marker."""
    steps, values = zip(*points)
    (line,) = ax.plot(steps, values, marker="o", markersize=5, linewidth=1.2, label=label, **style)
    ax.set_xmargin(0.12)  # room for the value
    ax.set_ymargin(0.12)
    ax.annotate(f"{values[-1]:.3g}", (steps[-1], values[-1]), textcoords="offset points", xytext=(4, 4),
                fontsize=7, color=line.get_color())
    _steps_axis(ax)


def _points(records: Sequence[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    return [(record["step"], float(record[key])) for record in records
            if isinstance(record.get(key), (int, float)) and np.isfinite(record[key])
            and not (key.startswith(("AP", "AR")) and record[key] == NO_SUCH_OBJECTS)]


def _steps_axis(ax) -> None:
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(nbins=STEP_TICKS, integer=True))
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 12000 -> 12k
    ax.grid(alpha=0.3)


def _time_axis(ax, train: Sequence[dict[str, Any]]) -> bool:
    """Time elapsed (s, min or h) on the top axis, from the steps' elapsed_s (when both grow); whether drawn."""
    timed = [(record["step"], record["elapsed_s"]) for record in train
             if isinstance(record.get("elapsed_s"), (int, float))]
    if len(timed) < 2:
        return False
    steps, seconds = (np.asarray(column, dtype=float) for column in zip(*timed))
    if np.any(np.diff(steps) <= 0) or np.any(np.diff(seconds) <= 0):
        return False
    unit, size = ("s", 1) if seconds[-1] < 120 else ("min", 60) if seconds[-1] < 3 * 3600 else ("h", 3600)
    time_at = _line_through(steps, seconds / size)
    top = ax.secondary_xaxis("top")  # in steps, ticked where the step axis is, labelled with the time there
    top.xaxis.set_major_locator(MaxNLocator(nbins=STEP_TICKS, integer=True))
    top.xaxis.set_major_formatter(lambda step, _: f"{max(0.0, float(time_at(step))):.2g} {unit}")
    top.tick_params(labelsize=7)
    return True


def _line_through(xp: np.ndarray, fp: np.ndarray):
    """Piecewise-linear x -> f(x) through the points, continued straight beyond the first and last."""
    def f(x):
        x = np.asarray(x, dtype=float)
        before = fp[0] + (x - xp[0]) * (fp[1] - fp[0]) / (xp[1] - xp[0])
        after = fp[-1] + (x - xp[-1]) * (fp[-1] - fp[-2]) / (xp[-1] - xp[-2])
        return np.where(x < xp[0], before, np.where(x > xp[-1], after, np.interp(x, xp, fp)))
    return f


def plot_run_curves(run: RunFolder) -> Path:
    """RUN/curves.png from the run's metrics.jsonl, written atomically."""
    return atomic_write(run.curves_path, lambda temporary: plot_curves(run.metrics(), temporary))
