"""Pictures of where a detector's AP goes: each class's precision-recall curve, the confusion matrix, its worst
false positives and missed objects, and the distributions of scores and box sizes.

The curves are COCOeval's interpolated precision at its 101 recall thresholds (the area under the
IoU-0.5 curve is the class's AP50), at IoU 0.5 and 0.75: a gap between the two is localisation, a
low curve at 0.5 is classification or missed objects. The confusion matrix's rows are the true
classes and background, its columns the detected ones; each row is coloured by its share of the
row's count, so a class's recall reads off the diagonal, and the background row counts the false
detections.

The galleries show those false detections and missed objects one by one (detection/outcomes.py):
each a tile of the image zoomed around its box. The score histogram shows whether a higher
threshold would drop false positives more than true ones; the size histogram which sizes the
misses are.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from PIL import Image  # noqa: E402

from attnkit.detection.data import read_image  # noqa: E402
from attnkit.detection.draw import PALETTE  # noqa: E402
from attnkit.detection.evaluate import Diagnostics  # noqa: E402
from attnkit.detection.outcomes import SIZES, Found, Outcomes  # noqa: E402

COLUMNS = 5  # PR panels per row
ANNOTATED = 20  # confusion matrices up to this many classes show their counts
GALLERY_COLUMNS = 4  # tiles per row of the false-positive and missed-object galleries
ZOOM_CONTEXT = 24  # pixels of context a tile shows around a box besides its own size again
SIZE_BINS = 20  # bins of the box-size histogram (equal on a log scale)
SIZE_TICKS = (4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)  # pixels
HEADROOM = 1.4  # histograms' height over their highest bar: room for the legend
OUTSIDE = "#d0d0d0"  # a gallery tile beyond the image's edge


def save_pr_curves(diagnostics: Diagnostics, path: Path) -> Path:
    """One panel per class: precision against recall at IoU 0.5 and 0.75, titled with its AP50 and AP."""
    names = diagnostics.names
    columns = min(COLUMNS, len(names))
    rows = -(-len(names) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(2.7 * columns, 2.5 * rows), dpi=100, squeeze=False,
                                sharex=True, sharey=True)
    for ax, name in zip(axes.flat, names):
        curves, scores = diagnostics.precision[name], diagnostics.per_class[name]
        if scores["AP"] is None:
            ax.text(0.5, 0.5, "no objects", ha="center", va="center", color="gray", transform=ax.transAxes)
        for (iou, curve), style in zip(curves.items(), ("-", "--")):
            if curve is not None:
                ax.plot(diagnostics.recall, curve, style, linewidth=1.4, label=f"IoU {iou:g}")
        ax.set_title(name if scores["AP"] is None else f"{name}: AP50 {scores['AP50']:.2f}, AP {scores['AP']:.2f}",
                     fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("recall")
    for ax in axes[:, 0]:
        ax.set_ylabel("precision")
    drawn = [ax for ax in axes.flat if ax.lines]
    if drawn:
        drawn[0].legend(fontsize=7, loc="lower left")
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    figure.tight_layout()
    figure.savefig(path, format="png")
    plt.close(figure)
    return path


def save_confusion_matrix(diagnostics: Diagnostics, path: Path) -> Path:
    """The confusion matrix as a heat map, rows normalised, counts written when there are few classes."""
    counts = diagnostics.confusion.numpy()
    labels = [*diagnostics.names, "background"]
    shares = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    size = 2.5 + 0.45 * len(labels)
    figure, ax = plt.subplots(figsize=(size + 1.2, size), dpi=100)
    image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlabel("detected as")
    ax.set_ylabel("true class")
    ax.set_title(f"score >= {diagnostics.score_threshold:g}, IoU >= {diagnostics.iou_threshold:g}", fontsize=9)
    if len(labels) <= ANNOTATED + 1:
        for (row, column), count in np.ndenumerate(counts):
            if row == column == len(labels) - 1:
                continue  # background found as background: not counted
            ax.text(column, row, str(count), ha="center", va="center", fontsize=8,
                    color="white" if shares[row, column] > 0.6 else "black")
    figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="share of the row")
    figure.tight_layout()
    figure.savefig(path, format="png")
    plt.close(figure)
    return path


def save_gallery(found: Sequence[Found], names: Sequence[str], images: Path, path: Path) -> Path:
    """FOUND (false positives or missed objects, detection/outcomes.py), one tile each: the image of IMAGES around
    the box, the box in its class colour (dashed: the object of another class a false positive was matched to),
    titled with the class and score (or size), the best IoU and the file name."""
    columns = min(GALLERY_COLUMNS, max(len(found), 1))
    rows = max(-(-len(found) // columns), 1)
    figure, axes = plt.subplots(rows, columns, figsize=(2.6 * columns, 3.0 * rows), dpi=100, squeeze=False,
                                layout="constrained")
    opened: dict[str, Image.Image] = {}
    for ax, item in zip(axes.flat, found):
        if item.file_name not in opened:
            opened[item.file_name] = read_image(images / item.file_name)
        image = opened[item.file_name]
        ax.imshow(image, extent=(0, image.width, image.height, 0), interpolation="nearest")
        (left, right), (top, bottom) = _window(item.box, image.width, image.height)
        ax.set_xlim(left, right)
        ax.set_ylim(bottom, top)
        if item.true_box is not None and item.true_label is not None:
            ax.add_patch(_outline(item.true_box, item.true_label, "--"))
        ax.add_patch(_outline(item.box, item.label, "-"))
        ax.set_title(_caption(item, names), fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_facecolor(OUTSIDE)
    for ax in list(axes.flat)[len(found):]:
        ax.axis("off")
    figure.savefig(path, format="png", bbox_inches="tight", pad_inches=0.1)
    plt.close(figure)
    return path


def _window(box: tuple[float, ...], width: int, height: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """(left, right), (top, bottom) of a square around BOX with as much context again (at least ZOOM_CONTEXT
    pixels), moved to stay inside the image where it fits."""
    x0, y0, x1, y1 = box
    side = 2 * max(x1 - x0, y1 - y0) + ZOOM_CONTEXT
    spans = []
    for low, high, limit in ((x0, x1, width), (y0, y1, height)):
        start = (low + high - side) / 2
        start = min(max(start, 0.0), limit - side) if side <= limit else (limit - side) / 2
        spans.append((start, start + side))
    return spans[0], spans[1]


def _outline(box: tuple[float, ...], label: int, style: str) -> Rectangle:
    x0, y0, x1, y1 = box
    colour = tuple(c / 255 for c in PALETTE[label % len(PALETTE)])
    return Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, edgecolor=colour, linewidth=2, linestyle=style)


def _caption(item: Found, names: Sequence[str]) -> str:
    name = names[item.label]
    if item.score is None:
        first = f"{name}, {item.size:.0f} px"
    elif item.true_label is not None:
        first = f"{name} {item.score:.2f} on a {names[item.true_label]}"
    else:
        first = f"{name} {item.score:.2f}"
    file_name = item.file_name if len(item.file_name) <= 28 else "..." + item.file_name[-25:]
    return f"{first}\nbest IoU {item.best_iou:.2f}\n{file_name}"


def save_distributions(outcomes: Outcomes, path: Path) -> Path:
    """Two panels: the scores of true and false positives (score >= the threshold), and the sizes (sqrt(area))
    of the objects, the missed ones among them, and the detections, with COCO's small/medium/large bounds."""
    figure, (scores, sizes) = plt.subplots(1, 2, figsize=(10, 3.4), dpi=100)
    histogram = outcomes.score_histogram()
    edges = np.array(histogram["edges"])
    half = (edges[1] - edges[0]) / 2  # each bin: true positives in its left half, false ones in its right
    for side, (key, colour, label) in enumerate((("true_positives", "tab:green", "true positives"),
                                                 ("false_positives", "tab:red", "false positives"))):
        counts = histogram[key]
        scores.bar(edges[:-1] + side * half, counts, width=0.9 * half, align="edge", color=colour, alpha=0.8,
                   label=f"{label} ({sum(counts)})")
    scores.set_xlabel("score")
    scores.set_ylabel("detections")
    scores.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    scores.set_title(f"detection scores, IoU >= {outcomes.iou_threshold:g}", fontsize=9)
    scores.set_ylim(0, HEADROOM * max(max(histogram["true_positives"] + histogram["false_positives"]), 1))
    scores.legend(fontsize=8, loc="upper left")
    if not outcomes.true_positive_scores and not outcomes.false_positives:
        scores.text(0.5, 0.5, f"no detections with score >= {outcomes.score_threshold:g}", ha="center", va="center",
                    color="gray", transform=scores.transAxes)
    _plot_sizes(sizes, outcomes)
    figure.tight_layout()
    figure.savefig(path, format="png")
    plt.close(figure)
    return path


def _plot_sizes(ax: Any, outcomes: Outcomes) -> None:
    every = [*outcomes.object_sizes, *outcomes.detection_sizes]
    positive = [size for size in every if size > 0]
    if not positive:
        ax.text(0.5, 0.5, "no boxes", ha="center", va="center", color="gray", transform=ax.transAxes)
        return
    low, high = min(positive), max(positive)
    edges = np.geomspace(low / 1.05, high * 1.05, SIZE_BINS + 1)
    missed = [m.size for m in outcomes.missed]
    ax.hist(outcomes.object_sizes, edges, color="tab:blue", alpha=0.35, label=f"objects ({len(outcomes.object_sizes)})")
    ax.hist(missed, edges, color="tab:blue", alpha=0.9, label=f"missed objects ({len(missed)})")
    counts = [np.histogram(sizes, edges)[0].max() for sizes in (outcomes.object_sizes, outcomes.detection_sizes)]
    ax.set_ylim(0, HEADROOM * max(max(counts), 1))
    ax.hist(outcomes.detection_sizes, edges, histtype="step", color="black", linewidth=1.4,
            label=f"detections ({len(outcomes.detection_sizes)})")
    ax.set_xscale("log")
    ax.set_xticks([t for t in SIZE_TICKS if edges[0] <= t <= edges[-1]] or [round(low)])
    ax.xaxis.set_major_formatter(ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.yaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    for start, _ in list(SIZES.values())[1:]:
        if edges[0] < start < edges[-1]:
            ax.axvline(start, color="gray", linestyle=":", linewidth=1)
    ax.set_title("box sizes; COCO's small < 32 <= medium < 96 <= large", fontsize=9)
    ax.set_xlabel("sqrt(area), pixels")
    ax.set_ylabel("boxes")
    ax.legend(fontsize=8, loc="upper left")
