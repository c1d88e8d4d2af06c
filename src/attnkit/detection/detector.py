"""`Detector`: a trained run folder as a Python object. `Detector.from_run(RUN).predict(images)`.

Images may be paths, PIL images or tensors (3, height, width), uint8 or float in [0, 1]. Each is
resized and normalised as in evaluation, run alone (no padding), and its detections come back in
the original image's pixels with the dataset's class names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from PIL import Image
from torch import Tensor

from attnkit.detection.architectures import build_model
from attnkit.detection.backbone import fold_batch_norms
from attnkit.detection.config import DetectionConfig
from attnkit.detection.output import DetectionOutput
from attnkit.detection.pipeline import DetectionPipeline, Detections, ImageInput
from attnkit.detection.postprocess import postprocess
from attnkit.errors import CheckpointError, ConfigError
from attnkit.nn.compiled import CompiledForward
from attnkit.nn.onednn_linear import onednn_linears


class Detector:
    """A trained detector and its pipeline (`attnkit.detection.pipeline`): reading images, naming classes."""

    def __init__(self, model: torch.nn.Module, config: DetectionConfig, device: torch.device | str = "cpu",
                 compile: bool = False) -> None:
        self.model, self.config, self.device = model.to(device).eval(), config, torch.device(device)
        self.pipeline = DetectionPipeline(config)
        # what `predict` runs: the model, or its forward compiled once per image size (`attnkit.nn.compiled`)
        self.forward: Callable[[Tensor, Tensor], DetectionOutput] = \
            CompiledForward(self.model) if compile else self.model

    @property
    def class_names(self) -> list[str]:
        """The name of each label 0..K-1 (the dataset's)."""
        return self.pipeline.class_names

    @property
    def category_ids(self) -> list[int]:
        """The dataset's category id of each label 0..K-1."""
        return self.pipeline.category_ids
    @classmethod
    def from_run(cls, run: str | Path, weights: str = "best", device: torch.device | str | None = None,
                 quantize: str | None = None, compile: bool = False) -> Detector:
        """Load RUN's config and its `best`, `last` or `average` weights (or a .safetensors path); quantize="int8":
        the Linear layers int8 (`attnkit.nn.quantize`: the transformer's and the heads', not the backbone; CPU only);
        compile: `predict` runs the forward compiled by torch.compile, once per image size (`attnkit.nn.compiled`:
        the fastest mode at batch 1 on a CPU, BENCHMARKS.md)."""
        from attnkit.nn.quantize import QUANTIZATIONS, quantize_int8
        from attnkit.storage import RunFolder, load_weights

        if quantize not in (None, *QUANTIZATIONS):
            raise ConfigError(f"quantize: {quantize!r} is not one of {', '.join(QUANTIZATIONS)}")
        if compile and quantize is not None:
            raise ConfigError("compile and quantize: choose one (torch.compile does not take the int8 layers)")

        folder = RunFolder.open(Path(run), "detection")
        config = DetectionConfig.from_dict(folder.config)
        paths = {"best": folder.best_weights, "last": folder.last_weights, "average": folder.average_weights,
                 "ema": folder.ema_weights}  # ema: the moving average of the weights, if training kept one
        path = paths.get(weights, Path(weights))
        if weights == "best" and not path.is_file():
            path = folder.last_weights
        if not path.is_file():
            raise CheckpointError(f"{path}: no weights file (choose --weights best, last or average)")
        device = torch.device(device or ("cuda" if torch.cuda.is_available() and quantize is None else "cpu"))
        model = build_model(config.model)
        load_weights(path, model)
        fold_batch_norms(model)  # inference only: the backbone's BatchNorms become its convolutions' weights
        if quantize is not None:
            if device.type != "cpu":
                raise ConfigError(f"quantize={quantize!r} runs on the CPU, not {device}")
            model = quantize_int8(model)
        else:
            onednn_linears(model)  # on the CPU the Linears run oneDNN's product where it pays (float32, inference)
        return cls(model, config, device, compile)

    @torch.no_grad()
    def predict(self, images: ImageInput | Sequence[ImageInput], threshold: float = 0.5) -> list[Detections]:
        """Detections with score >= THRESHOLD for each image (a single image gives a list of one)."""
        if isinstance(images, (str, Path, Image.Image, Tensor)):
            images = [images]
        results = []
        for image in images:
            prepared = self.pipeline.prepare(image)
            outputs = self.forward(prepared.batch.to(self.device), prepared.mask.to(self.device))
            found = postprocess(outputs.logits, outputs.boxes, prepared.size)[0]
            results.append(self.pipeline.select(found["scores"], found["labels"], found["boxes"], threshold)[0])
        return results
