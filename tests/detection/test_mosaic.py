import random
from dataclasses import replace

import pytest
import torch

from attnkit.app.detection.recipe import DetectionTask
from attnkit.detection.config import DetectionConfig, DetectionTrainConfig, preset
from attnkit.detection.data import CocoDetection
from attnkit.detection.mosaic import Mosaic, shift_and_scale, tile, training_sample
from attnkit.detection.transforms import train_transforms
from attnkit.errors import ConfigError

# four images of three sizes, one white box each on black (write_coco draws them)
SIZES = [(64, 48), (32, 24), (48, 48), (64, 48)]  # (width, height)
BOXES = [[4, 6, 20, 10], [2, 2, 10, 12], [30, 8, 12, 30], [40, 20, 16, 16]]  # x, y, w, h


def _dataset(coco_writer, tmp_path, transforms=None) -> CocoDetection:
    images = [{"id": i + 1, "file_name": f"{i}.png", "width": w, "height": h} for i, (w, h) in enumerate(SIZES)]
    annotations = [{"id": i + 1, "image_id": i + 1, "category_id": 1 + i % 2, "bbox": box, "iscrowd": 0}
                   for i, box in enumerate(BOXES)]
    return CocoDetection(*coco_writer(tmp_path, images, annotations, [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]),
                         transforms)


def _white_in_boxes(image: torch.Tensor, boxes: torch.Tensor) -> tuple[list[float], int]:
    """The mean of each box's pixels (x0, y0, x1, y1 rounded inwards), and the white pixels outside every box."""
    grey = image.float().mean(0)  # (height, width)
    outside = grey > 128
    means = []
    for x0, y0, x1, y1 in boxes.tolist():
        x0, y0, x1, y1 = int(x0 + 0.99), int(y0 + 0.99), int(x1), int(y1)
        means.append(float(grey[y0:y1, x0:x1].mean()))
        outside[max(y0 - 1, 0):y1 + 1, max(x0 - 1, 0):x1 + 1] = False
    return means, int(outside.sum())


def test_tile_puts_each_image_at_the_first_ones_scale_in_its_quarter(coco_writer, tmp_path):
    dataset = _dataset(coco_writer, tmp_path)
    image, target = tile([dataset.sample(i) for i in range(4)])
    # each resized to a shortest side of 48: 64 x 48, 64 x 48 (twice 32 x 24), 48 x 48, 64 x 48: cells 64 x 48
    assert image.shape == (3, 96, 128)
    expected = torch.tensor([[4, 6, 24, 16],  # top left, as it was
                             [64 + 4, 4, 64 + 24, 28],  # top right, twice its size
                             [30, 48 + 8, 42, 48 + 38],  # bottom left
                             [64 + 40, 48 + 20, 64 + 56, 48 + 36]], dtype=torch.float)  # bottom right
    torch.testing.assert_close(target["boxes"].as_subclass(torch.Tensor).float(), expected)
    assert tuple(target["boxes"].canvas_size) == (96, 128)
    assert target["labels"].tolist() == [0, 1, 0, 1] and target["image_id"] == 1
    means, stray = _white_in_boxes(image, expected)
    assert min(means) > 230 and stray == 0  # the upscaled box blurs at its edges


@pytest.mark.parametrize("seed", range(4))
def test_the_boxes_follow_the_pixels_through_the_random_affine(coco_writer, tmp_path, seed):
    dataset = _dataset(coco_writer, tmp_path)
    torch.manual_seed(seed)
    image, target = shift_and_scale(*tile([dataset.sample(i) for i in range(4)]))
    assert image.shape == (3, 96, 128)  # the canvas keeps its size
    boxes = target["boxes"].as_subclass(torch.Tensor)
    assert (boxes >= 0).all() and (boxes[:, 0::2] <= 128).all() and (boxes[:, 1::2] <= 96).all()
    visible = boxes[((boxes[:, 2] - boxes[:, 0]) >= 3) & ((boxes[:, 3] - boxes[:, 1]) >= 3)]
    means, stray = _white_in_boxes(image, visible)
    assert len(visible) >= 2 and min(means) > 200 and stray == 0


def test_a_sample_is_a_mosaic_with_the_probability_and_under_the_object_cap(coco_writer, tmp_path):
    dataset = _dataset(coco_writer, tmp_path)
    plain = dataset[0][0]
    random.seed(0)
    assert torch.equal(training_sample(dataset, 0, None)[0], plain)
    assert torch.equal(training_sample(dataset, 0, Mosaic(0.0, 100))[0], plain)
    assert torch.equal(training_sample(dataset, 0, Mosaic(1.0, 3))[0], plain)  # 4 objects: over the cap
    image, target = training_sample(dataset, 0, Mosaic(1.0, 4))
    assert image.shape[-2:] == (96, 128) and len(target["labels"]) == 4
    assert sum(torch.equal(training_sample(dataset, 0, Mosaic(0.5, 4))[0], plain) for _ in range(40)) in range(8, 33)


def test_mosaics_go_through_the_training_transforms(coco_writer, tmp_path):
    dataset = _dataset(coco_writer, tmp_path, train_transforms((32,), 64))
    random.seed(1)
    torch.manual_seed(1)
    image, target = training_sample(dataset, 0, Mosaic(1.0, 10))
    assert min(image.shape[-2:]) == 32 and image.dtype == torch.float32  # resized and normalised
    boxes = target["boxes"]  # normalised cx, cy, w, h; the boxes the affine pushed out are gone, with their labels
    assert boxes.shape[0] == len(target["labels"]) and (boxes > 0).all() and (boxes <= 1).all()


def _task(coco_writer, tmp_path, mosaic: float) -> DetectionTask:
    model, train = preset("tiny")
    config = DetectionConfig(replace(model, num_classes=2), replace(train, batch_size=2, mosaic=mosaic))
    return DetectionTask(config, _dataset(coco_writer, tmp_path, train_transforms((32,), 64)), None)


def test_a_runs_batches_carry_mosaics_until_the_learning_rates_drop(coco_writer, tmp_path):
    task = _task(coco_writer, tmp_path, mosaic=0.5)
    assert all(ref.mosaic == Mosaic(0.5, task.config.model.num_queries) for ref in task.batches(0))
    first = [batch[0] for batch in task.load(task.batches(0))]
    again = [batch[0] for batch in task.load(task.batches(0))]  # the batch's seed decides its mosaics
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert task.lr_factor(10, 0.5) == 1.0 and task.batches(1)[0].mosaic is not None
    assert task.lr_factor(11, task.config.train.lr_drop) == 0.1
    assert all(ref.mosaic is None for ref in task.batches(2))
    assert all(ref.mosaic is None for ref in _task(coco_writer, tmp_path / "off", mosaic=0.0).batches(0))


@pytest.mark.parametrize("probability", [-0.1, 1.5])
def test_the_config_refuses_a_mosaic_probability_outside_0_1(probability):
    with pytest.raises(ConfigError, match="mosaic"):
        DetectionTrainConfig(mosaic=probability)
