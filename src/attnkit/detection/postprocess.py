"""From the model's output to detections in pixels (DETR's `PostProcess`, Carion et al. 2020, section 3.2).

Each query's class is the most probable real class (the "no object" probability is dropped),
its score that class's probability; boxes go from normalised (cx, cy, w, h) to (x0, y0, x1, y1)
pixels of the original image.

A detector with sigmoid classes (its output's `class_logits`, the focal loss) scores every (query, class) pair
on its own; for evaluation, `pairs` keeps the 100 best pairs of each image, so a query whose
class is in doubt counts once per likely class (Deformable DETR's `PostProcess`; COCO AP reads at
most 100 detections per image). Either way there is no NMS.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.ops import box_convert


@torch.no_grad()
def postprocess(logits: Tensor, boxes: Tensor, image_sizes: Tensor) -> list[dict[str, Tensor]]:
    """logits: (batch, queries, classes + 1); boxes: (batch, queries, 4); image_sizes: (batch, 2) as
    (height, width). Returns per image {"scores": (queries,), "labels": (queries,), "boxes": (queries, 4)}."""
    prob = logits.float().softmax(-1)[..., :-1]  # (batch, queries, classes)
    scores, labels = prob.max(-1)  # (batch, queries)
    pixels = pixel_boxes(boxes, image_sizes)  # (batch, queries, 4)
    return [{"scores": s, "labels": c, "boxes": b} for s, c, b in zip(scores, labels, pixels)]


def pixel_boxes(boxes: Tensor, image_sizes: Tensor) -> Tensor:
    """(batch, queries, 4) normalised cx, cy, w, h -> x0, y0, x1, y1 in pixels of (batch, 2) (height, width)."""
    height, width = image_sizes.to(boxes.device).float().unbind(-1)
    scale = torch.stack([width, height, width, height], dim=-1)[:, None, :]  # (batch, 1, 4)
    return box_convert(boxes.float(), "cxcywh", "xyxy") * scale


@torch.no_grad()
def pairs(class_logits: Tensor, boxes: Tensor, image_sizes: Tensor, keep: int = 100) -> list[dict[str, Tensor]]:
    """class_logits: (batch, queries, classes) sigmoid logits -> per image the KEEP best (query, class)
    pairs as `postprocess` returns detections: {"scores", "labels", "boxes"}, each (min(KEEP, pairs), ...)."""
    queries, classes = class_logits.shape[1:]
    scores, index = class_logits.float().sigmoid().flatten(1).topk(min(keep, queries * classes), dim=1)
    labels, query = index % classes, index // classes  # (batch, kept)
    pixels = pixel_boxes(boxes, image_sizes)  # (batch, queries, 4)
    return [{"scores": s, "labels": c, "boxes": b[q]} for s, c, q, b in zip(scores, labels, query, pixels)]
