"""A greyscale detector (model.num_channels=1): its ResNet reads one channel, and the pipeline and transforms give it
grey images (PIL's own grey conversion as the reference)."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from PIL import Image
from torch.testing import assert_close
from torchvision import tv_tensors

from attnkit.detection.architectures import build_model
from attnkit.detection.config import DetectionConfig, preset
from attnkit.detection.pipeline import DetectionPipeline
from attnkit.detection.transforms import GREY_MEAN, GREY_STD, batch_images, eval_transforms, train_transforms


def grey_config() -> DetectionConfig:
    model, train = preset("tiny")
    return DetectionConfig(model=dataclasses.replace(model, num_channels=1, num_classes=2), train=train)


def colour_image(seed: int = 0) -> Image.Image:
    pixels = torch.randint(0, 256, (40, 56, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    return Image.fromarray(pixels.numpy())


def test_the_pipeline_gives_a_greyscale_model_the_images_grey_value_normalised():
    config = grey_config()
    image = colour_image()
    prepared = DetectionPipeline(config).prepare(image)
    size = config.train.val_size
    assert prepared.batch.shape == (1, 1, size, int(56 * size / 40))
    grey = image.resize(tuple(prepared.batch.shape[:-3:-1]), Image.BILINEAR).convert("L")  # resized, then grey
    expected = (torch.from_numpy(np.array(grey)).float() / 255 - GREY_MEAN[0]) / GREY_STD[0]
    # PIL's luma weights are 0.299, not 0.2989, and it rounds the resized colours first: a grey level apart at most
    assert_close(prepared.batch[0, 0], expected, atol=1.01 / 255 / GREY_STD[0], rtol=0)
    model = build_model(config.model).eval()
    assert model.backbone[0].body.conv1.in_channels == 1
    with torch.no_grad():
        output = model(prepared.batch, prepared.mask)
    assert output.logits.shape == (1, config.model.num_queries, 3)


def test_grey_and_colour_tensors_prepare_alike_for_a_greyscale_model():
    pipeline = DetectionPipeline(grey_config())
    grey = torch.randint(0, 256, (1, 40, 56), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    assert_close(pipeline.prepare(grey).batch, pipeline.prepare(grey.expand(3, -1, -1).clone()).batch)


def test_training_and_evaluation_transforms_make_one_channel_and_batches_keep_it():
    image = tv_tensors.Image(torch.randint(0, 256, (3, 40, 56), dtype=torch.uint8))
    target = {"boxes": tv_tensors.BoundingBoxes(torch.tensor([[4.0, 6.0, 30.0, 20.0]]), format="XYXY",
                                                canvas_size=(40, 56)), "labels": torch.tensor([1])}
    evaluated, evaluated_target = eval_transforms(64, 96, channels=1)(image, target)
    trained, _ = train_transforms([64], 96, flip=False, crop_min_fraction=1.0, channels=1)(image, target)
    assert evaluated.shape[0] == trained.shape[0] == 1
    assert_close(evaluated_target["boxes"], torch.tensor([[17 / 56, 13 / 40, 26 / 56, 14 / 40]]))
    colour, _ = eval_transforms(64, 96)(image, target)
    assert colour.shape[0] == 3
    images, mask = batch_images([evaluated, evaluated[:, :32]])
    assert images.shape == (2, 1, *evaluated.shape[-2:]) and mask[1, 32:].all()
