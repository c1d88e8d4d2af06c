"""From the model's output to detections in pixels (DETR's `PostProcess`, Carion et al. 2020, section 3.2).

Each query's class is the most probable real class (the "no object" probability is dropped),
its score that class's probability; boxes go from normalised (cx, cy, w, h) to (x0, y0, x1, y1)
pixels of the original image.
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
    height, width = image_sizes.to(boxes.device).float().unbind(-1)
    scale = torch.stack([width, height, width, height], dim=-1)[:, None, :]  # (batch, 1, 4)
    pixels = box_convert(boxes.float(), "cxcywh", "xyxy") * scale  # (batch, queries, 4)
    return [{"scores": s, "labels": l, "boxes": b} for s, l, b in zip(scores, labels, pixels)]
