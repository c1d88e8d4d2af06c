"""`OrtDetector`: the exported detector run by ONNX Runtime, with `Detector.predict`'s interface and results."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import torch

from attnkit.app.export.int8 import graph_file
from attnkit.app.export.onnx_export import DETECTOR_FILE, read_manifest
from attnkit.detection.config import DetectionConfig
from attnkit.detection.pipeline import DetectionPipeline, Detections, ImageInput


class OrtDetector:
    """An export folder's detector.onnx in an ONNX Runtime session, preprocessing as `Detector`'s."""

    def __init__(self, folder: Path | str, threads: int | None = None, quantize: str | None = None) -> None:
        """QUANTIZE="int8": the graph's int8 twin (`int8.py`; written into FOLDER on first use)."""
        import onnxruntime

        manifest = read_manifest(Path(folder), "detection")
        self.config = DetectionConfig.from_dict(manifest["config"])
        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        # the preprocessing runs in torch, whose threads spin a while when idle, as ORT's do by default: with
        # both spinning, a call took up to 3.4x as long (BENCHMARKS.md, "Deploy")
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        graph = graph_file(Path(folder), manifest, DETECTOR_FILE, quantize)
        self.session = onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
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
