"""DETR as one ONNX graph, post-processing included (Carion et al. 2020, section 3.2, `PostProcess`).

    images (batch, C, height, width)   resized and normalised as in evaluation (`DetectionPipeline.prepare`;
                                       C: model.num_channels, 3, or 1 for a greyscale model)
    mask (batch, height, width)        True on padding (all False for one image, or equal sizes)
    image_sizes (batch, 2)             (height, width) of the original images, for boxes in their pixels
    -> scores (batch, queries), labels (batch, queries), boxes (batch, queries, 4) x0, y0, x1, y1

Batch, height and width are dynamic axes; thresholding and sorting by score stay in Python.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn
from torchvision.ops import box_convert


class DetectorGraph(nn.Module):
    """The detector and its post-processing: the most probable real class per query, boxes in pixels."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: Tensor, mask: Tensor, image_sizes: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        outputs = self.model(images, mask)  # a DetectionOutput: the graph returns its tensors
        prob = outputs.logits.softmax(-1)[..., :-1]  # (batch, queries, classes): "no object" dropped
        scores, labels = prob.max(-1)  # (batch, queries)
        height, width = image_sizes.to(prob.dtype).unbind(-1)
        scale = torch.stack([width, height, width, height], dim=-1)[:, None, :]  # (batch, 1, 4)
        boxes = box_convert(outputs.boxes, "cxcywh", "xyxy") * scale  # (batch, queries, 4)
        return scores, labels, boxes


def export_detector(detector, out: Path) -> dict:
    """Write OUT/detector.onnx and OUT/export.json; returns the manifest."""
    import json

    from attnkit.app.export.onnx_export import DETECTOR_FILE, export_graph, write_manifest

    model = detector.model.float().cpu().eval()
    out = Path(out)
    images = torch.randn(2, detector.config.model.num_channels, 96, 128)  # (batch, channels, height, width)
    args = (images, torch.zeros(2, 96, 128, dtype=torch.bool), torch.tensor([[120, 160], [90, 100]]))
    export_graph(DetectorGraph(model), args, out / DETECTOR_FILE, ["images", "mask", "image_sizes"],
                 ["scores", "labels", "boxes"],
                 {"images": {0: "batch", 2: "height", 3: "width"}, "mask": {0: "batch", 1: "height", 2: "width"},
                  "image_sizes": {0: "batch"}, "scores": {0: "batch"}, "labels": {0: "batch"}, "boxes": {0: "batch"}})
    return json.loads(write_manifest(out, {"kind": "detection", "config": detector.config.to_dict(),
                                           "graphs": [DETECTOR_FILE]}).read_text())
