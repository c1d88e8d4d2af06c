"""DETR's data augmentation (Carion et al. 2020, section 4 / appendix A.4) with torchvision.transforms.v2.

Training: optional horizontal flip, then either a multi-scale resize of the shortest side (with a
cap on the longest side) or a resize, a random crop that keeps boxes consistent, and a multi-scale
resize; then normalisation. Evaluation: one resize. v2 moves the `BoundingBoxes` with the
pixels; `SanitizeBoundingBoxes` drops boxes a crop removed, with their labels. Targets end as
normalised (cx, cy, w, h) boxes, the form the model predicts; `batch_images` pads a batch to
one size and returns the padding mask.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torchvision.ops import box_convert
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# one channel (a greyscale model, num_channels=1): the grey (ITU-R 601 luma, as v2.Grayscale) of ImageNet's
# channel means, and the channels' mean standard deviation (an approximation: grey's own spread is not recorded)
GREY_MEAN = (0.2989 * 0.485 + 0.587 * 0.456 + 0.114 * 0.406,)
GREY_STD = (sum(IMAGENET_STD) / 3,)


class RandomSizeCrop(v2.Transform):
    """Crop a random window whose sides are each a uniform fraction in [min_fraction, 1] of the image's."""

    def __init__(self, min_fraction: float = 0.5) -> None:
        super().__init__()
        self.min_fraction = min_fraction

    def make_params(self, flat_inputs: list[Any]) -> dict[str, Any]:
        height, width = v2.query_size(flat_inputs)
        crop_h = random.randint(max(1, int(self.min_fraction * height)), height)
        crop_w = random.randint(max(1, int(self.min_fraction * width)), width)
        return {"top": random.randint(0, height - crop_h), "left": random.randint(0, width - crop_w),
                "height": crop_h, "width": crop_w}

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        return self._call_kernel(F.crop, inpt, **params)


class ToDetrTarget(v2.Transform):
    """Last step: boxes become a plain (objects, 4) tensor of normalised (cx, cy, w, h); adds "size"."""

    def forward(self, image: Tensor, target: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        height, width = image.shape[-2:]
        boxes = box_convert(target["boxes"].as_subclass(Tensor), "xyxy", "cxcywh")  # (objects, 4) pixels
        scale = torch.tensor([width, height, width, height], dtype=boxes.dtype)
        return image.as_subclass(Tensor), {**target, "boxes": boxes / scale, "size": torch.tensor([height, width])}


def train_transforms(scales: Sequence[int], max_size: int, flip: bool = True,
                     crop_min_fraction: float = 0.5, channels: int = 3) -> v2.Compose:
    """DETR's training augmentation: shortest side drawn from SCALES, longest side at most MAX_SIZE; CHANNELS 1:
    greyscale."""
    resize = v2.RandomShortestSize(list(scales), max_size=max_size)
    steps: list[Any] = [v2.RandomHorizontalFlip()] if flip else []
    steps += [
        v2.RandomChoice([resize, v2.Compose([RandomSizeCrop(crop_min_fraction), resize])]),
        v2.SanitizeBoundingBoxes(min_size=1.0),
        *_normalise(channels),
    ]
    return v2.Compose(steps)


def eval_transforms(size: int, max_size: int, channels: int = 3) -> v2.Compose:
    """Resize the shortest side to SIZE (longest at most MAX_SIZE) and normalise (CHANNELS 1: greyscale)."""
    return v2.Compose([v2.Resize(size, max_size=max_size), *_normalise(channels)])


def inference_transforms(size: int, max_size: int, channels: int = 3) -> v2.Compose:
    """Evaluation's resize and normalisation for an image alone: (3, height, width) uint8 -> (CHANNELS, H, W) float."""
    return v2.Compose([v2.Resize(size, max_size=max_size), *_normalise(channels)[:-1]])


def _normalise(channels: int = 3) -> list[v2.Transform]:
    """RGB images -> float, normalised with ImageNet's statistics; CHANNELS 1: converted to grey first."""
    if channels == 1:
        return [v2.Grayscale(1), v2.ToDtype(torch.float32, scale=True), v2.Normalize(GREY_MEAN, GREY_STD),
                ToDetrTarget()]
    return [v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD), ToDetrTarget()]


def batch_images(images: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """Pad images to the batch's largest height and width (bottom and right, with zeros).

    Returns images (batch, channels, height, width) and mask (batch, height, width), True on padding
    (DETR's convention: True = not a pixel of the image).
    """
    height = max(image.shape[-2] for image in images)
    width = max(image.shape[-1] for image in images)
    batch = images[0].new_zeros(len(images), images[0].shape[0], height, width)  # (batch, channels, height, width)
    mask = torch.ones(len(images), height, width, dtype=torch.bool)  # (batch, height, width)
    for i, image in enumerate(images):
        batch[i, :, : image.shape[-2], : image.shape[-1]] = image
        mask[i, : image.shape[-2], : image.shape[-1]] = False
    return batch, mask


def collate(samples: Sequence[tuple[Tensor, dict[str, Any]]]) -> tuple[Tensor, Tensor, list[dict[str, Any]]]:
    """DataLoader collate_fn: (images, mask, targets) with padding; targets stay a list."""
    images, mask = batch_images([image for image, _ in samples])
    return images, mask, [target for _, target in samples]
