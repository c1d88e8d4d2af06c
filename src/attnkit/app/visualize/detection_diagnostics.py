"""Pictures of where a detector's AP goes: each class's precision-recall curve and the confusion matrix.

The curves are COCOeval's interpolated precision at its 101 recall thresholds (the area under the
IoU-0.5 curve is the class's AP50), at IoU 0.5 and 0.75: a gap between the two is localisation, a
low curve at 0.5 is classification or missed objects. The confusion matrix's rows are the true
classes and background, its columns the detected ones; each row is coloured by its share of the
row's count, so a class's recall reads off the diagonal, and the background row counts the false
detections.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from attnkit.detection.evaluate import Diagnostics  # noqa: E402

COLUMNS = 5  # PR panels per row
ANNOTATED = 20  # confusion matrices up to this many classes show their counts


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
