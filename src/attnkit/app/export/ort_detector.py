"""`OrtDetector`: the exported detector run by ONNX Runtime, with `Detector.predict`'s interface and results."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from attnkit.detection.config import DetectionConfig
from attnkit.detection.detector import Detections, ImageInput, to_uint8_tensor
from attnkit.detection.transforms import inference_transforms
from attnkit.app.export.onnx_export import DETECTOR_FILE, read_manifest


class OrtDetector:
    """An export folder's detector.onnx in an ONNX Runtime session, preprocessing as `Detector`'s."""

    def __init__(self, folder: Path | str, threads: int | None = None) -> None:
        import onnxruntime

        manifest = read_manifest(Path(folder), "detection")
        self.config = DetectionConfig.from_dict(manifest["config"])
        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        # the preprocessing runs in torch, whose threads spin a while when idle, as ORT's do by default: with
        # both spinning, a call took up to 3.4x as long (BENCHMARKS.md, "Deploy")
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(str(Path(folder) / DETECTOR_FILE), options,
                                                    providers=["CPUExecutionProvider"])
        self.class_names = list(self.config.class_names) or [str(i) for i in range(self.config.model.num_classes)]
        self.category_ids = list(self.config.category_ids) or list(range(1, self.config.model.num_classes + 1))
        self.transform = inference_transforms(self.config.train.val_size, self.config.train.max_size)

    def predict(self, images: ImageInput | Sequence[ImageInput], threshold: float = 0.5) -> list[Detections]:
        """Detections with score >= THRESHOLD for each image, most confident first (as `Detector.predict`)."""
        if not isinstance(images, (list, tuple)):
            images = [images]
        results = []
        for image in images:
            pixels = to_uint8_tensor(image)  # (3, height, width)
            batch = self.transform(pixels).unsqueeze(0).float()  # (1, 3, H, W)
            mask = np.zeros((1, *batch.shape[-2:]), dtype=bool)
            sizes = np.array([pixels.shape[-2:]], dtype=np.int64)
            scores, labels, boxes = (torch.from_numpy(a[0]) for a in self.session.run(
                None, {"images": batch.numpy(), "mask": mask, "image_sizes": sizes}))
            keep = scores >= threshold
            order = scores[keep].argsort(descending=True)
            kept = labels[keep][order]
            results.append(Detections(boxes[keep][order], scores[keep][order], kept,
                                      [self.class_names[i] for i in kept.tolist()],
                                      [self.category_ids[i] for i in kept.tolist()]))
        return results
