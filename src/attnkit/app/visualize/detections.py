"""DETR's attention pictures (Carion et al. 2020): what each detected object looks at, and what the encoder does.

  objects  for each detected object, its box and its object query's decoder attention over the image
           (last layer, mean over heads), upsampled and overlaid on the image: the paper's Figure 6,
           where the decoder attends to an object's extremities (edges, legs, heads);
  encoder  encoder self-attention of a few reference cells of the feature map, each shown as a map
           over the image with the cell marked: the paper's Figure 3, where the encoder already
           separates instances.

Boxes are drawn with the detection system's own `draw_boxes`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from PIL import Image  # noqa: E402
from torch import Tensor  # noqa: E402

from attnkit.detection.draw import PALETTE, draw_boxes  # noqa: E402


def upsample(attention: Tensor, height: int, width: int) -> Tensor:
    """(h, w) attention over feature-map cells -> (height, width) over pixels (bilinear), kept in [0, max]."""
    return F.interpolate(attention[None, None].float(), size=(height, width), mode="bilinear",
                         align_corners=False)[0, 0].clamp(min=0)


def plot_object_attention(image: Image.Image, boxes: Sequence[Sequence[float]], labels: Sequence[int],
                          names: Sequence[str], scores: Sequence[float], maps: Tensor, path: Path,
                          max_objects: int = 6, caption: str | None = None) -> Path:
    """The image with all boxes, then one panel per object: its attention map (objects, h, w) over the image.

    Each map is scaled to its own maximum (the colour bar reads "fraction of this object's peak");
    the object's box is drawn in its class colour. CAPTION titles the first panel.
    """
    count = min(len(boxes), max_objects)
    columns = min(count + 1, 4)
    rows = math.ceil((count + 1) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.3 * columns + 0.8, 3.3 * rows + 0.4), dpi=100, squeeze=False)
    flat = list(axes.flat)
    flat[0].imshow(draw_boxes(image, boxes[:count], labels[:count], names[:count], scores[:count]))
    shown = f", {count} shown" if count < len(boxes) else ""
    if caption is None:
        caption = f"{len(boxes)} detection(s)" if len(boxes) else "no detection above the threshold"
    flat[0].set_title(caption + shown, fontsize=9)
    uniform = 1.0 / maps[0].numel() if count else 0.0
    overlay = None
    for index in range(count):
        ax = flat[index + 1]
        attention = upsample(maps[index], image.height, image.width)
        attention = attention / attention.max().clamp(min=1e-12)
        ax.imshow(image.convert("L"), cmap="gray", alpha=1.0)
        overlay = ax.imshow(attention.numpy(), cmap="inferno", alpha=0.6, vmin=0.0, vmax=1.0)
        x0, y0, x1, y1 = (float(v) for v in boxes[index])
        colour = tuple(c / 255 for c in PALETTE[int(labels[index]) % len(PALETTE)])
        ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, edgecolor=colour, linewidth=2))
        ax.set_title(f"{names[index]} {float(scores[index]):.2f}: peak weight {float(maps[index].max()):.2g}\n"
                     f"(uniform would be {uniform:.2g})", fontsize=9)
    for ax in flat:
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in flat[count + 1:]:
        ax.axis("off")
    if overlay is not None:
        fig.colorbar(overlay, ax=axes, fraction=0.025, pad=0.02, label="attention (fraction of the object's peak)")
    fig.suptitle("DETR decoder: where each object query looks (last layer, mean over heads)", fontsize=10)
    return _save(fig, path)


def reference_cells(height: int, width: int, count: int = 4) -> list[tuple[int, int]]:
    """COUNT (row, column) cells spread over an (height, width) feature map: corners inward, then the centre."""
    candidates = [(height // 4, width // 4), (height // 4, (3 * width) // 4), ((3 * height) // 4, width // 4),
                  ((3 * height) // 4, (3 * width) // 4), (height // 2, width // 2)]
    unique = list(dict.fromkeys(candidates))
    return unique[:count]


def plot_encoder_attention(image: Image.Image, weights: Tensor, feature_size: tuple[int, int], path: Path,
                           cells: Sequence[tuple[int, int]] | None = None) -> Path:
    """Encoder self-attention (cells, cells), mean over heads, of a few reference cells, as maps over the image."""
    height, width = feature_size
    cells = list(cells) if cells is not None else reference_cells(height, width)
    fig, grid = plt.subplots(1, len(cells) + 1, figsize=(3.2 * (len(cells) + 1) + 0.8, 3.6), dpi=100, squeeze=False)
    axes = list(grid.flat)
    axes[0].imshow(image)
    axes[0].set_title("reference points", fontsize=9)
    cell_h, cell_w = image.height / height, image.width / width
    overlay = None
    for index, (row, column) in enumerate(cells):
        colour = tuple(c / 255 for c in PALETTE[index % len(PALETTE)])
        centre = ((column + 0.5) * cell_w, (row + 0.5) * cell_h)
        axes[0].plot(*centre, "o", color=colour, markersize=9, markeredgecolor="white")
        attention = weights[row * width + column].reshape(height, width)  # the cell's row of weights
        attention = upsample(attention, image.height, image.width)
        attention = attention / attention.max().clamp(min=1e-12)
        ax = axes[index + 1]
        ax.imshow(image.convert("L"), cmap="gray")
        overlay = ax.imshow(attention.numpy(), cmap="inferno", alpha=0.6, vmin=0.0, vmax=1.0)
        ax.plot(*centre, "o", color=colour, markersize=9, markeredgecolor="white")
        peak = float(weights[row * width + column].max())
        ax.set_title(f"point {index + 1} (cell {row}, {column}): peak {peak:.2g}\n"
                     f"(uniform would be {1 / (height * width):.2g})", fontsize=9)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    if overlay is not None:
        fig.colorbar(overlay, ax=axes, fraction=0.02, pad=0.02, label="attention (fraction of the peak)")
    fig.suptitle("DETR encoder self-attention of reference points (last layer, mean over heads)", fontsize=10)
    return _save(fig, path)


def detect_with_attention(detector, image: Image.Image, threshold: float = 0.7, at_least: int = 0, capture=None):
    """Run a `Detector` on one image with capture: (its `Detections` above THRESHOLD, their query indices, weights).

    Detections come as `Detector.predict` gives them (its pipeline's); when fewer than AT_LEAST pass the
    threshold, the AT_LEAST most confident queries are returned instead. CAPTURE(model, images, mask) keeps
    the weights: `capture_detection` (DETR's dense attention) unless given (`capture_deformable`).
    """
    from attnkit.app.visualize.capture import capture_detection
    from attnkit.detection.postprocess import postprocess

    prepared = detector.pipeline.prepare(image)
    weights = (capture or capture_detection)(detector.model, prepared.batch.to(detector.device),
                                             prepared.mask.to(detector.device))
    found = postprocess(weights.outputs.logits, weights.outputs.boxes, prepared.size)[0]
    detections, queries = detector.pipeline.select(found["scores"], found["labels"], found["boxes"], threshold,
                                                   at_least)
    return detections, queries, weights


FALLBACK_QUERIES = 3  # shown when nothing passes the threshold (an early run): what the queries look at anyway


def save_detection_maps(detector, image: Image.Image, out: Path, stem: str, threshold: float = 0.7) -> list[Path]:
    """<stem>_objects.png (boxes + per-object decoder attention) and <stem>_encoder.png into OUT."""
    detections, queries, weights = detect_with_attention(detector, image, threshold, at_least=FALLBACK_QUERIES)
    maps = weights.cross[-1][0].mean(0)[queries.to(weights.cross[-1].device)].cpu()  # (objects, h, w)
    below = len(queries) and float(detections.scores[0]) < threshold
    caption = f"no detection >= {threshold:g}: the {len(queries)} most confident queries" if below else \
        f"{len(queries)} detection(s) with score >= {threshold:g}"
    paths = [plot_object_attention(image, detections.boxes.tolist(), detections.labels.tolist(),
                                   detections.names, detections.scores.tolist(), maps,
                                   out / f"{stem}_objects.png", caption=caption)]
    if weights.encoder:
        paths.append(plot_encoder_attention(image, weights.encoder[-1][0].mean(0).cpu(), weights.feature_size,
                                            out / f"{stem}_encoder.png"))
    return paths


def _save(fig, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path
