"""Dense one-to-one matching by mosaics (Huang et al. 2025, DEIM, section 3.2; Bochkovskiy et al. 2020, YOLOv4).

One-to-one matching gives each object one positive query, so an image with few objects trains few
queries towards objects. DEIM raises the number of objects per training image instead of the
number of matches per object: with some probability an image is replaced by a mosaic, itself and
three random others at the same scale on a 2 x 2 canvas, moved and scaled at random (an affine of
translation +-10% and scale 0.5-1.5; no rotation, which loosens axis-aligned boxes), then augmented and resized
like any image, so each quarter and its objects end at about half their size. A mosaic with more
objects than the model has queries is not made (DEIM skips those above 75 of 300 queries). The
mosaics stop at the learning-rate drop, so the last part of a run trains on single images again
(DEIM turns them off for its last epochs).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torchvision import tv_tensors
from torchvision.transforms import v2

from attnkit.detection.data import CocoDetection, Sample

TRANSLATE = (0.1, 0.1)  # DEIM's affine after the mosaic: shifts up to 10% of the canvas
SCALE = (0.5, 1.5)


@dataclass(frozen=True)
class Mosaic:
    """probability: of an image becoming a mosaic; max_objects: none is made with more objects (the queries)."""
    probability: float
    max_objects: int


def training_sample(dataset: CocoDetection, index: int, mosaic: Mosaic | None) -> Sample:
    """DATASET[INDEX], or with MOSAIC's probability the mosaic of it and three random samples of DATASET, through
    the dataset's transforms. The draws use `random` and `torch`'s generator, so a batch's seed decides them."""
    if mosaic is None or random.random() >= mosaic.probability:
        return dataset[index]
    samples = [dataset.sample(i) for i in (index, *(random.randrange(len(dataset)) for _ in range(3)))]
    if sum(len(target["labels"]) for _, target in samples) > mosaic.max_objects:
        image, target = samples[0]  # already read: not decoded twice
    else:
        image, target = shift_and_scale(*tile(samples))
    return dataset.transforms(image, target) if dataset.transforms is not None else (image, target)


def tile(samples: Sequence[Sample]) -> Sample:
    """Four samples on a 2 x 2 canvas, each resized to the first's shortest side, in cells of the largest height and
    width (zeros between); boxes moved with their images, labels joined, the first sample's id and size kept."""
    side = min(samples[0][0].shape[-2:])
    resized = [v2.Resize(side, antialias=True)(image, target) for image, target in samples]
    cell_h = max(image.shape[-2] for image, _ in resized)
    cell_w = max(image.shape[-1] for image, _ in resized)
    canvas = torch.zeros(resized[0][0].shape[0], 2 * cell_h, 2 * cell_w, dtype=torch.uint8)  # (3, height, width)
    boxes, labels = [], []
    for quarter, (image, piece) in enumerate(resized):
        top, left = cell_h * (quarter // 2), cell_w * (quarter % 2)
        canvas[:, top:top + image.shape[-2], left:left + image.shape[-1]] = image
        boxes.append(piece["boxes"].as_subclass(torch.Tensor) + torch.tensor([left, top, left, top]))
        labels.append(piece["labels"])
    target: dict[str, Any] = {**samples[0][1], "labels": torch.cat(labels),
                              "boxes": tv_tensors.BoundingBoxes(torch.cat(boxes), format="XYXY",
                                                                canvas_size=tuple(canvas.shape[-2:]))}
    return tv_tensors.Image(canvas), target


def shift_and_scale(image: tv_tensors.Image, target: dict[str, Any]) -> Sample:
    """DEIM's random affine of a mosaic (translation and scale, fill 0); torchvision clips the boxes to the canvas,
    and the training transforms' `SanitizeBoundingBoxes` drops those left empty, with their labels."""
    return v2.RandomAffine(degrees=0, translate=TRANSLATE, scale=SCALE)(image, target)
