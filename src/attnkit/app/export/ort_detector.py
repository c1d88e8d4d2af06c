"""`OrtDetector`: the exported detector run by ONNX Runtime, with `Detector.predict`'s interface and results."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import torch

from attnkit.app.export.backends import ort_session
from attnkit.app.export.int8 import graph_file
from attnkit.app.export.onnx_export import DETECTOR_FILE, read_manifest
from attnkit.detection.config import DetectionConfig
from attnkit.detection.pipeline import DetectionPipeline, Detections, ImageInput


class OrtDetector:
    """An export folder's detector.onnx in an ONNX Runtime session, preprocessing as `Detector`'s."""

    def __init__(self, folder: Path | str, threads: int | None = None, quantize: str | None = None) -> None:
        """QUANTIZE="int8": the graph's int8 twin (`int8.py`; written into FOLDER on first use)."""
        manifest = read_manifest(Path(folder), "detection")
        self.config = DetectionConfig.from_dict(manifest["config"])
        self.session = ort_session(graph_file(Path(folder), manifest, DETECTOR_FILE, quantize), threads)
        self.pipeline = DetectionPipeline(self.config)

    def predict(self, images: ImageInput | Sequence[ImageInput], threshold: float = 0.5) -> list[Detections]:
        """Detections with score >= THRESHOLD for each image, most confident first (as `Detector.predict`)."""
        if not isinstance(images, (list, tuple)):
            images = [cast(ImageInput, images)]  # one image
        results = []
        for image in images:
            prepared = self.pipeline.prepare(image)
            inputs = {"images": prepared.batch.numpy(), "mask": prepared.mask.numpy(),
                      "image_sizes": prepared.size.numpy()}
            scores, labels, boxes = (torch.from_numpy(a[0]) for a in self.session.run(None, inputs))
            results.append(self.pipeline.select(scores, labels, boxes, threshold)[0])
        return results
