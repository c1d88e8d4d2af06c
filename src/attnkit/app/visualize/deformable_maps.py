"""Deformable DETR's attention pictures (Zhu et al. 2021, Figure 6 and appendix A.5): where queries sample.

  objects    for each detected object, its box, the reference box its query's last decoder layer
             samples around (dashed; its centre a cross, the paper's reference point), and
             that layer's sampling points of every head and level: a dot each, coloured and sized by
             its weight A_mlqk, one marker per level. The paper finds the points on the object's
             extremities (its left, right, top and bottom edges), as DETR's dense attention is;
  encoder    the same for a few pixels of the finest level the encoder updates (the last layer):
             where a pixel's self-attention reads, DETR's Figure 3 for sampling attention;
  proposals  two-stage (`query_selection`): the K best encoder proposals coloured by their selection
             score, and each detected object's proposal (dashed) next to its final box.

Coordinates come from `capture_deformable` in [0, 1] of the image; points outside it read zeros and
are left out (counted in the title).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402
from PIL import Image  # noqa: E402
from torch import Tensor  # noqa: E402

from attnkit.app.visualize.deformable_capture import DeformableWeights, Sampling, capture_deformable  # noqa: E402
from attnkit.app.visualize.detections import FALLBACK_QUERIES, _save, detect_with_attention, reference_cells  # noqa: E402
from attnkit.detection.draw import PALETTE, draw_boxes  # noqa: E402
from attnkit.detection.pipeline import Detections  # noqa: E402

MARKERS = ("o", "s", "^", "D")  # one per feature level, finest first
CMAP = "plasma"
REFERENCE = "cyan"  # the reference point and box


def level_names(shapes: Sequence[tuple[int, int]]) -> list[str]:
    """A legend label per level: its index (1 = finest) and its map's cells."""
    return [f"level {index + 1} ({height}x{width})" for index, (height, width) in enumerate(shapes)]


def draw_sampling(ax, locations: Tensor, weights: Tensor, size: tuple[int, int], vmax: float):
    """One query's points on AX: LOCATIONS (heads, levels, points, 2) in [0, 1] of the image, WEIGHTS
    (heads, levels, points); SIZE the image's (width, height). Heavier points are drawn larger and on top.
    Returns the last scatter (for a colour bar) and how many points fell outside the image."""
    width, height = size
    inside = ((locations >= 0) & (locations <= 1)).all(-1)  # (heads, levels, points)
    scatter = None
    for level in range(locations.shape[1]):
        points, weight = locations[:, level][inside[:, level]], weights[:, level][inside[:, level]]  # (n, 2), (n,)
        order = weight.argsort()  # light first: the heavy points stay visible
        points, weight = points[order], weight[order]
        scatter = ax.scatter(points[:, 0] * width, points[:, 1] * height, c=weight.numpy(), cmap=CMAP, vmin=0.0,
                             vmax=vmax, s=(6 + 70 * weight / vmax).numpy(), marker=MARKERS[level % len(MARKERS)],
                             edgecolors="white", linewidths=0.4, zorder=3)
    return scatter, int((~inside).sum())


def draw_reference(ax, reference: Tensor, size: tuple[int, int]) -> None:
    """The reference point (a cross, the paper's green one in cyan: the class colours include green) and, for a
    box (cx, cy, w, h), the box dashed, above the detection's box."""
    width, height = size
    cx, cy = float(reference[0]) * width, float(reference[1]) * height
    if len(reference) == 4:
        w, h = float(reference[2]) * width, float(reference[3]) * height
        ax.add_patch(Rectangle((cx - w / 2, cy - h / 2), w, h, fill=False, edgecolor=REFERENCE, linewidth=1.4,
                               linestyle="--", zorder=2.5))
    ax.plot(cx, cy, "x", color=REFERENCE, markersize=9, markeredgewidth=2.2, zorder=4)


def level_legend(fig, shapes: Sequence[tuple[int, int]], reference: str) -> None:
    """One legend for the figure: a marker per level, the reference's cross."""
    handles = [Line2D([], [], marker=MARKERS[i % len(MARKERS)], linestyle="", color="grey", markeredgecolor="white",
                      markersize=8, label=name) for i, name in enumerate(level_names(shapes))]
    handles.append(Line2D([], [], marker="x", linestyle="", color=REFERENCE, markeredgewidth=2, markersize=8,
                          label=reference))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)


def _panels(count: int, aspect: float, max_columns: int = 4):
    """COUNT panels, MAX_COLUMNS a row, each 3.4 inches wide and ASPECT (image height / width) as high."""
    columns = min(count, max_columns)
    rows = -(-count // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.0 * columns + 1.0, (3.0 * aspect + 0.5) * rows + 0.9), dpi=100,
                             squeeze=False, layout="constrained")
    flat = list(axes.flat)
    for ax in flat:
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in flat[count:]:
        ax.axis("off")
    return fig, axes, flat


def _on_image(ax, image: Image.Image, grey: bool = True) -> None:
    ax.imshow(image.convert("L") if grey else image, cmap="gray" if grey else None, vmin=0, vmax=255)
    ax.set_xlim(-0.5, image.width - 0.5)
    ax.set_ylim(image.height - 0.5, -0.5)


def _level_shares(weights: Tensor) -> str:
    """WEIGHTS (heads, levels, points) -> the share of the total weight on each level, as text."""
    shares = weights.sum((0, 2)) / weights.sum()
    return " / ".join(f"{float(share):.0%}" for share in shares)


def plot_object_sampling(image: Image.Image, detections: Detections, sampling: Sampling,
                         shapes: Sequence[tuple[int, int]], path: Path, caption: str, max_objects: int = 7) -> Path:
    """The image with the detections, then per object its query's sampling (SAMPLING: one batch row per object,
    in image coordinates): reference box, points of every head and level coloured by weight."""
    count = min(len(detections), max_objects)
    fig, axes, flat = _panels(count + 1, image.height / image.width)
    flat[0].imshow(draw_boxes(image, detections.boxes[:count].tolist(), detections.labels[:count].tolist(),
                              detections.names[:count], detections.scores[:count].tolist()))
    flat[0].set_title(caption + (f", {count} shown" if count < len(detections) else ""), fontsize=9)
    scatter, size = None, (image.width, image.height)
    for index in range(count):
        ax, weights = flat[index + 1], sampling.weights[index]  # (heads, levels, points)
        _on_image(ax, image)
        draw_reference(ax, sampling.reference[index, 0], size)
        x0, y0, x1, y1 = (float(v) for v in detections.boxes[index])
        colour = tuple(c / 255 for c in PALETTE[int(detections.labels[index]) % len(PALETTE)])
        ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, edgecolor=colour, linewidth=2, zorder=2))
        scatter, outside = draw_sampling(ax, sampling.locations[index], weights, size, float(weights.max()))
        ax.set_title(f"{detections.names[index]} {float(detections.scores[index]):.2f}; weight per level "
                     f"{_level_shares(weights)}" + (f"\n({outside} points outside the image)" if outside else ""),
                     fontsize=8)
    if scatter is not None:
        fig.colorbar(scatter, ax=axes, fraction=0.025, pad=0.02, label="weight A of the point (each head's sum to 1)")
        level_legend(fig, shapes, "reference point (dashed: reference box)")
    fig.suptitle("Deformable DETR decoder: where each object's query samples (last layer, every head and level)",
                 fontsize=10)
    return _save(fig, path)


def encoder_pixels(weights: DeformableWeights, count: int = 4) -> list[tuple[int, int, int]]:
    """COUNT (level, row, column) pixels spread over the finest level the encoder updates (`reference_cells`)."""
    level = weights.encoder_levels()[0]
    return [(level, row, column) for row, column in reference_cells(*weights.shapes[level], count)]


def plot_encoder_sampling(image: Image.Image, weights: DeformableWeights, path: Path,
                          pixels: Sequence[tuple[int, int, int]] | None = None) -> Path:
    """The last encoder layer's sampling of a few PIXELS ((level, row, column), default `encoder_pixels`);
    WEIGHTS on the CPU (`DeformableWeights.cpu`), as in `plot_proposals`."""
    pixels = list(pixels) if pixels is not None else encoder_pixels(weights)
    sampling = weights.encoder[-1].in_image(weights.valid_ratios)
    fig, axes, flat = _panels(len(pixels) + 1, image.height / image.width, max_columns=5)
    _on_image(flat[0], image, grey=False)
    flat[0].set_title("the pixels (queries) drawn", fontsize=9)
    scatter, size = None, (image.width, image.height)
    for index, (level, row, column) in enumerate(pixels):
        query = weights.encoder_query(level, row, column)
        reference, point_weights = sampling.reference[0, query, 0], sampling.weights[0, query]
        x, y = float(reference[0]) * image.width, float(reference[1]) * image.height
        flat[0].plot(x, y, "x", color=REFERENCE, markersize=9, markeredgewidth=2.2)
        flat[0].annotate(str(index + 1), (x, y), xytext=(4, 4), textcoords="offset points", color=REFERENCE, fontsize=9,
                         fontweight="bold")
        ax = flat[index + 1]
        _on_image(ax, image)
        scatter, outside = draw_sampling(ax, sampling.locations[0, query], point_weights, size,
                                         float(point_weights.max()))
        draw_reference(ax, reference, size)
        ax.set_title(f"pixel {index + 1}: level {level + 1}, cell ({row}, {column})\nweight per level "
                     f"{_level_shares(point_weights)}" + (f", {outside} outside" if outside else ""), fontsize=8)
    if scatter is not None:
        fig.colorbar(scatter, ax=axes, fraction=0.02, pad=0.02, label="weight A of the point (each head's sum to 1)")
        level_legend(fig, weights.shapes, "the pixel (query)")
    fig.suptitle("Deformable DETR encoder: where a pixel's self-attention samples (last layer, every head and level)",
                 fontsize=10)
    return _save(fig, path)


def plot_proposals(image: Image.Image, weights: DeformableWeights, detections: Detections, queries: Tensor,
                   path: Path) -> Path:
    """Two-stage: the K best proposals coloured by score; each detected object's proposal and its final box."""
    assert weights.proposals is not None and weights.proposal_scores is not None  # a two-stage model's capture
    scale = torch.tensor([image.width, image.height] * 2)
    boxes, scores = weights.proposals[0] * scale, weights.proposal_scores[0]  # (count, 4), (count,)
    fig, axes = plt.subplots(1, 2, figsize=(8.2, 4.2), dpi=100, squeeze=False)
    left, right = axes[0]
    _on_image(left, image)
    spread = (scores - scores.min()) / (scores.max() - scores.min()).clamp(min=1e-12)  # (count,) in [0, 1]
    colours = plt.get_cmap("viridis")(spread.numpy())
    for rank in reversed(range(len(boxes))):  # the best drawn last, on top
        cx, cy, w, h = boxes[rank].tolist()
        left.add_patch(Rectangle((cx - w / 2, cy - h / 2), w, h, fill=False, edgecolor=colours[rank],
                                 linewidth=2.2 if rank < 3 else 1.0))
    left.set_title(f"the {len(boxes)} best encoder proposals\n(colour: selection score "
                   f"{float(scores.min()):.2f} to {float(scores.max()):.2f})", fontsize=9)
    _on_image(right, image)
    for index, query in enumerate(queries.tolist()):
        colour = tuple(c / 255 for c in PALETTE[int(detections.labels[index]) % len(PALETTE)])
        cx, cy, w, h = boxes[query].tolist()
        x0, y0, x1, y1 = detections.boxes[index].tolist()
        right.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, edgecolor=colour, linewidth=2))
        right.add_patch(Rectangle((cx - w / 2, cy - h / 2), w, h, fill=False, edgecolor="white", linestyle="--",
                                  linewidth=1.4, zorder=3))  # above the final box, which often covers it
        right.add_patch(FancyArrowPatch((cx, cy), ((x0 + x1) / 2, (y0 + y1) / 2), arrowstyle="-|>", color=colour,
                                        mutation_scale=14, linewidth=1.5))
    right.set_title("each detection's proposal (white, dashed) moved by\nthe decoder to its final box (solid)",
                    fontsize=9)
    ranks = ", ".join(f"{name}: #{query + 1}" for name, query in zip(detections.names, queries.tolist()))
    right.set_xlabel(f"proposal rank of each detection: {ranks}", fontsize=8)
    for ax in (left, right):
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("Two-stage Deformable DETR: the proposals the decoder starts from", fontsize=10)
    return _save(fig, path)


def save_sampling_maps(detector, image: Image.Image, out: Path, stem: str, threshold: float = 0.7) -> list[Path]:
    """<stem>_objects.png, <stem>_encoder.png and (two-stage) <stem>_proposals.png into OUT."""
    detections, queries, weights = detect_with_attention(detector, image, threshold, at_least=FALLBACK_QUERIES,
                                                         capture=capture_deformable)
    below = len(queries) and float(detections.scores[0]) < threshold
    caption = f"no detection >= {threshold:g}:\nthe {len(queries)} most confident queries" if below else \
        f"{len(queries)} detection(s) with score >= {threshold:g}"
    weights = weights.cpu()
    last = weights.decoder[-1].in_image(weights.valid_ratios)
    objects = Sampling(last.reference[0, queries], last.locations[0, queries], last.weights[0, queries])
    paths = [plot_object_sampling(image, detections, objects, weights.shapes, out / f"{stem}_objects.png", caption)]
    if weights.encoder:
        paths.append(plot_encoder_sampling(image, weights, out / f"{stem}_encoder.png"))
    if weights.proposals is not None:
        paths.append(plot_proposals(image, weights, detections, queries, out / f"{stem}_proposals.png"))
    return paths
