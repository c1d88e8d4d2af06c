"""`Detector`: a trained run folder as a Python object. `Detector.from_run(RUN).predict(images)`.

Images may be paths, PIL images or tensors (3, height, width), uint8 or float in [0, 1]. Each is
resized and normalised as in evaluation, run alone (no padding), and its detections come back in
the original image's pixels with the dataset's class names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image
from torch import Tensor
from torchvision.transforms.v2 import functional as F

from attnkit.detection.architectures import build_model
from attnkit.detection.config import DetectionConfig
from attnkit.detection.data import read_image
from attnkit.detection.postprocess import postprocess
from attnkit.detection.transforms import inference_transforms
from attnkit.errors import CheckpointError, DataError

ImageInput = str | Path | Image.Image | Tensor


@dataclass(frozen=True)
class Detections:
    """One image's detections, most confident first."""
    boxes: Tensor  # (objects, 4) x0, y0, x1, y1 in pixels of the original image
    scores: Tensor  # (objects,)
    labels: Tensor  # (objects,) 0..K-1
    names: list[str]  # class name of each object
    category_ids: list[int]  # the dataset's category id of each object

    def __len__(self) -> int:
        return len(self.scores)


class Detector:
    """A trained detector and what it needs to read images and name classes."""

    def __init__(self, model: torch.nn.Module, config: DetectionConfig, device: torch.device | str = "cpu") -> None:
        self.model, self.config, self.device = model.to(device).eval(), config, torch.device(device)
        self.class_names = list(config.class_names) or [str(i) for i in range(config.model.num_classes)]
        self.category_ids = list(config.category_ids) or list(range(1, config.model.num_classes + 1))
        self.transform = inference_transforms(config.train.val_size, config.train.max_size)

    @classmethod
    def from_run(cls, run: str | Path, weights: str = "best", device: torch.device | str | None = None) -> Detector:
        """Load RUN's config and its `best`, `last` or `average` weights (or a .safetensors path)."""
        from attnkit.storage import RunFolder, load_weights

        folder = RunFolder.open(Path(run), "detection")
        config = DetectionConfig.from_dict(folder.config)
        paths = {"best": folder.best_weights, "last": folder.last_weights, "average": folder.average_weights}
        path = paths.get(weights, Path(weights))
        if weights == "best" and not path.is_file():
            path = folder.last_weights
        if not path.is_file():
            raise CheckpointError(f"{path}: no weights file (choose --weights best, last or average)")
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        model = build_model(config.model)
        load_weights(path, model)
        return cls(model, config, device)

    @torch.no_grad()
    def predict(self, images: ImageInput | Sequence[ImageInput], threshold: float = 0.5) -> list[Detections]:
        """Detections with score >= THRESHOLD for each image (a single image gives a list of one)."""
        if isinstance(images, (str, Path, Image.Image, Tensor)):
            images = [images]
        results = []
        for image in images:
            pixels = to_uint8_tensor(image)  # (3, height, width)
            batch = self.transform(pixels).unsqueeze(0).to(self.device)  # (1, 3, H, W)
            mask = torch.zeros(1, *batch.shape[-2:], dtype=torch.bool, device=self.device)
            outputs = self.model(batch, mask)
            size = torch.tensor([pixels.shape[-2:]])
            detection = postprocess(outputs.logits, outputs.boxes, size)[0]
            keep = detection["scores"] >= threshold
            order = detection["scores"][keep].argsort(descending=True)
            labels = detection["labels"][keep][order].cpu()
            results.append(Detections(detection["boxes"][keep][order].cpu(), detection["scores"][keep][order].cpu(),
                                      labels, [self.class_names[i] for i in labels.tolist()],
                                      [self.category_ids[i] for i in labels.tolist()]))
        return results


def to_uint8_tensor(image: ImageInput) -> Tensor:
    """(3, height, width) uint8 from a path, a PIL image or a tensor (uint8, or float in [0, 1])."""
    if isinstance(image, (str, Path)):
        image = read_image(Path(image))
    if isinstance(image, Image.Image):
        return F.pil_to_tensor(image.convert("RGB"))
    if isinstance(image, Tensor):
        if image.dim() != 3 or image.shape[0] != 3:
            raise DataError(f"expected an image tensor (3, height, width), got {tuple(image.shape)}")
        return image if image.dtype == torch.uint8 else (image.clamp(0, 1) * 255).round().to(torch.uint8)
    raise DataError(f"cannot read an image from {type(image).__name__}; give a path, a PIL image or a tensor")
