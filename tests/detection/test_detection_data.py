import json
from pathlib import Path

import pytest
import torch
from torchvision.ops import box_convert

from attnkit.detection.data import CocoDetection, load_annotations, resolve_coco
from attnkit.detection.transforms import IMAGENET_MEAN, IMAGENET_STD, collate, eval_transforms, train_transforms
from attnkit.errors import DataError


def test_categories_are_mapped_to_contiguous_labels_and_back(small_coco):
    coco = load_annotations(small_coco[1])
    assert coco.category_ids == [3, 7] and coco.names == ["three", "seven"]
    assert coco.label_of == {3: 0, 7: 1}
    record = coco.records[0]
    torch.testing.assert_close(record.labels, torch.tensor([1, 0]))
    torch.testing.assert_close(record.boxes, torch.tensor([[4.0, 6, 24, 16], [30, 20, 46, 36]]))


def test_crowd_objects_are_left_out_of_training_targets(small_coco):
    coco = load_annotations(small_coco[1])
    assert coco.crowd == 1
    torch.testing.assert_close(coco.records[1].labels, torch.tensor([0]))


def test_boxes_are_clamped_and_degenerate_ones_dropped_and_counted(tmp_path, coco_writer):
    images = [{"id": 1, "file_name": "a.png", "width": 32, "height": 32}]
    annotations = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [-5, 20, 15, 30]},  # clamped
                   {"id": 2, "image_id": 1, "category_id": 1, "bbox": [10, 10, 0, 5]},  # zero width
                   {"id": 3, "image_id": 1, "category_id": 1, "bbox": [40, 0, 5, 5]}]  # outside the image
    _, path = coco_writer(tmp_path, images, annotations, [{"id": 1, "name": "x"}], draw=False)
    coco = load_annotations(path)
    assert coco.degenerate == 2
    torch.testing.assert_close(coco.records[0].boxes, torch.tensor([[0.0, 20, 10, 32]]))


def test_empty_images_are_valid_samples(small_coco):
    dataset = CocoDetection(*small_coco, transforms=train_transforms([32, 40], 64))
    image, target = dataset[2]
    assert target["boxes"].shape == (0, 4) and target["labels"].shape == (0,)
    images, mask, targets = collate([dataset[0], dataset[2]])
    assert images.shape[0] == 2 and mask.shape == (2, *images.shape[-2:]) and len(targets[1]["labels"]) == 0


def test_collate_pads_and_masks_the_padding():
    images, mask = collate([(torch.ones(3, 4, 6), {}), (torch.ones(3, 5, 3), {})])[:2]
    assert images.shape == (2, 3, 5, 6)
    expected = torch.ones(2, 5, 6, dtype=torch.bool)
    expected[0, :4, :6] = False
    expected[1, :5, :3] = False
    torch.testing.assert_close(mask, expected)
    torch.testing.assert_close(images.sum(), torch.tensor(3.0 * (24 + 15)))


def _white_pixel_box(image: torch.Tensor) -> torch.Tensor:
    mean, std = torch.tensor(IMAGENET_MEAN)[:, None, None], torch.tensor(IMAGENET_STD)[:, None, None]
    white = (image * std + mean).mean(0) > 0.5  # (height, width)
    ys, xs = white.nonzero(as_tuple=True)
    return torch.stack([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]).float()


def test_augmentation_keeps_boxes_on_the_objects(tmp_path, coco_writer):
    torch.manual_seed(0)
    import random
    random.seed(0)
    images = [{"id": 1, "file_name": "a.png", "width": 80, "height": 60}]
    annotations = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 12, 30, 20]}]
    dataset = CocoDetection(*coco_writer(tmp_path, images, annotations, [{"id": 1, "name": "x"}]),
                            transforms=train_transforms([48, 64, 80], 120, crop_min_fraction=0.4))
    checked = 0
    for _ in range(30):
        image, target = dataset[0]
        if len(target["boxes"]) == 0:
            continue
        height, width = target["size"].tolist()
        box = box_convert(target["boxes"], "cxcywh", "xyxy")[0] * torch.tensor([width, height, width, height])
        torch.testing.assert_close(_white_pixel_box(image), box, atol=2.0, rtol=0)
        checked += 1
    assert checked >= 15


def test_eval_transforms_resize_boxes_with_the_image(small_coco):
    dataset = CocoDetection(*small_coco, transforms=eval_transforms(96, 200))
    image, target = dataset[0]
    assert image.shape[-2:] == (96, 128)
    torch.testing.assert_close(box_convert(target["boxes"], "cxcywh", "xyxy")[0],
                               torch.tensor([4 / 64, 6 / 48, 24 / 64, 16 / 48]))


def test_resolve_coco_finds_both_layouts(tmp_path):
    for name in ("val2017", "val"):
        root = tmp_path / name
        (root / name).mkdir(parents=True)
        (root / "annotations").mkdir()
        (root / "annotations" / f"instances_{name}.json").write_text("{}")
        assert resolve_coco(root, "val") == (root / name, root / "annotations" / f"instances_{name}.json")
    with pytest.raises(DataError, match="instances_train"):
        resolve_coco(tmp_path / "val", "train")


def _write_json(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "instances.json"
    path.write_text(content)
    return path


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"images": [], "annotations": []}', "'categories'"),
    ('{"images": [{"id": 1, "file_name": "a.png", "width": 4, "height": 4}], "categories": [{"id": 1}],'
     '"annotations": [{"image_id": 2, "category_id": 1, "bbox": [0, 0, 1, 1]}]}', r"annotations\[0\].*image_id 2"),
    ('{"images": [{"id": 1, "file_name": "a.png", "width": 4, "height": 4}], "categories": [{"id": 1}],'
     '"annotations": [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1]},'
     '{"image_id": 1, "category_id": 9, "bbox": [0, 0, 1, 1]}]}', r"annotations\[1\].*category_id 9"),
    ('{"images": [{"id": 1, "file_name": "a.png", "width": 4, "height": 4}], "categories": [{"id": 1}],'
     '"annotations": [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 1]}]}', r"annotations\[0\].*bbox"),
    ('{"images": [{"id": 1, "width": 4, "height": 4}], "categories": [{"id": 1}], "annotations": []}',
     r"images\[0\].*file_name"),
])
def test_bad_annotation_files_name_the_file_and_entry(tmp_path, content, message):
    path = _write_json(tmp_path, content)
    with pytest.raises(DataError, match=message) as error:
        load_annotations(path)
    assert str(path) in str(error.value)


def test_missing_and_unreadable_images_name_the_file(small_coco):
    images, annotations = small_coco
    (images / "a.png").unlink()
    (images / "b.png").write_bytes(b"not an image")
    dataset = CocoDetection(images, annotations)
    with pytest.raises(DataError, match=r"a\.png \(image id 10\): image file not found"):
        dataset[0]
    with pytest.raises(DataError, match=r"b\.png \(image id 11\): cannot read image"):
        dataset[1]
    with pytest.raises(DataError, match="annotation file not found"):
        load_annotations(annotations.parent / "missing.json")
    json.loads(annotations.read_text())  # the fixture itself stays valid
