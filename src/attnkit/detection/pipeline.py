"""One image through a detector: preprocess -> model -> postprocess -> threshold (Carion et al. 2020, section 3.2).

The steps around the model are written once here and shared by every way of running it: the
PyTorch `Detector`, the ONNX Runtime backend, the attention pictures and the server. Each image
is resized and normalised as in evaluation and run alone (no padding); its detections come back
in the original image's pixels, most confident first, with the dataset's class names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image
from torch import Tensor
from torchvision.transforms.v2 import functional as F

from attnkit.detection.config import DetectionConfig
from attnkit.detection.data import read_image
from attnkit.detection.transforms import inference_transforms
from attnkit.errors import DataError

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


@dataclass(frozen=True)
class Prepared:
    """One image ready for the model, and its original size for the postprocessing."""
    batch: Tensor  # (1, channels, height, width) resized and normalised (the model's channels: 3, or 1 greyscale)
    mask: Tensor  # (1, height, width) True at padding: all False, the image runs alone
    size: Tensor  # (1, 2) the original (height, width)


class DetectionPipeline:
    """The preprocessing and the selection of detections of a detection run's config."""

    def __init__(self, config: DetectionConfig) -> None:
        self.class_names = list(config.class_names) or [str(i) for i in range(config.model.num_classes)]
        self.category_ids = list(config.category_ids) or list(range(1, config.model.num_classes + 1))
        self.transform = inference_transforms(config.train.val_size, config.train.max_size, config.model.num_channels)

    def prepare(self, image: ImageInput) -> Prepared:
        """IMAGE resized and normalised as in evaluation, with an all-False padding mask."""
        pixels = to_uint8_tensor(image)  # (3, height, width)
        batch = self.transform(pixels).unsqueeze(0).float()  # (1, channels, H, W)
        return Prepared(batch, torch.zeros(1, *batch.shape[-2:], dtype=torch.bool), torch.tensor([pixels.shape[-2:]]))

    def select(self, scores: Tensor, labels: Tensor, boxes: Tensor, threshold: float,
               at_least: int = 0) -> tuple[Detections, Tensor]:
        """(the queries with score >= THRESHOLD, most confident first; their indices).

        scores, labels: (queries,); boxes: (queries, 4) in pixels (`postprocess`). With AT_LEAST, the
        AT_LEAST most confident queries when fewer pass the threshold (pictures of an early run).
        """
        scores, labels, boxes = scores.cpu(), labels.cpu(), boxes.cpu()
        queries = (scores >= threshold).nonzero().flatten()
        if len(queries) < at_least:
            queries = scores.argsort(descending=True)[:at_least]
        queries = queries[scores[queries].argsort(descending=True)]
        kept = labels[queries]
        return Detections(boxes[queries], scores[queries], kept, [self.class_names[i] for i in kept.tolist()],
                          [self.category_ids[i] for i in kept.tolist()]), queries


def to_uint8_tensor(image: ImageInput) -> Tensor:
    """(3, height, width) uint8 from a path, a PIL image or a tensor (uint8, or float in [0, 1]; a greyscale
    (1, height, width) one as RGB). A greyscale model's transform then makes it grey (`inference_transforms`)."""
    if isinstance(image, (str, Path)):
        image = read_image(Path(image))
    if isinstance(image, Image.Image):
        return F.pil_to_tensor(image.convert("RGB"))
    if isinstance(image, Tensor):
        if image.dim() != 3 or image.shape[0] not in (1, 3):
            raise DataError(f"expected an image tensor (3, height, width), got {tuple(image.shape)} (a grey one: "
                            f"(1, height, width))")
        image = image.expand(3, -1, -1)  # grey as RGB: its luma is the grey again
        return image if image.dtype == torch.uint8 else (image.clamp(0, 1) * 255).round().to(torch.uint8)
    raise DataError(f"cannot read an image from {type(image).__name__}; give a path, a PIL image or a tensor")
