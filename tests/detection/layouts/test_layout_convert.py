"""Conversions between layouts: round trips keep boxes and class names; the three layouts of one dataset read
the same, record for record, and score the same AP."""

import hashlib
from pathlib import Path

import pytest
import torch

from attnkit.detection.evaluate import coco_evaluate, to_coco_results
from attnkit.detection.layouts import find_layout, read_split
from attnkit.detection.layouts.convert import convert
from attnkit.detection.shapes import ShapesConfig, write_shapes
from attnkit.errors import ConfigError

CATEGORIES = [{"id": 3, "name": "cat"}, {"id": 7, "name": "big dog"}]
IMAGES = [{"id": 11, "file_name": "a.png", "width": 97, "height": 61},
          {"id": 12, "file_name": "b.png", "width": 64, "height": 64}]
ANNOTATIONS = [{"id": 1, "image_id": 11, "category_id": 7, "bbox": [10.25, 5.5, 30.125, 20.75]},
               {"id": 2, "image_id": 11, "category_id": 3, "bbox": [0.0, 0.0, 97.0, 61.0]},
               {"id": 3, "image_id": 12, "category_id": 3, "bbox": [1 / 3, 2 / 3, 40.1, 7.7]}]


def _tree(root: Path) -> dict[str, str]:
    return {str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(root.rglob("*")) if f.is_file()}


def _records(root: Path, split: str):
    return read_split(find_layout(root).source(split))


def test_coco_to_yolo_to_voc_to_coco_keeps_boxes_and_names(tmp_path, coco_writer):
    source = tmp_path / "coco"
    for split in ("train", "val"):
        coco_writer(source, IMAGES, ANNOTATIONS, CATEGORIES, split=split)
    before = _tree(source)
    convert(source, "yolo", tmp_path / "yolo")
    convert(tmp_path / "yolo", "voc", tmp_path / "voc")
    convert(tmp_path / "voc", "coco", tmp_path / "back")
    assert _tree(source) == before  # nothing of the user's changed
    for split in ("train", "val"):
        first, last = _records(source, split), _records(tmp_path / "back", split)
        assert last.names == first.names == ["cat", "big dog"]
        for a, b in zip(first.records, last.records, strict=True):
            torch.testing.assert_close(b.boxes, a.boxes, rtol=0, atol=1e-4)
            assert b.labels.tolist() == a.labels.tolist() and (b.width, b.height) == (a.width, a.height)
    # cx = (1/3 + 40.1/2) / 64, cy = (2/3 + 7.7/2) / 64, w = 40.1 / 64, h = 7.7 / 64: 10 decimals, no trailing zeros
    label = (tmp_path / "yolo" / "labels" / "val" / "b.txt").read_text()
    assert label == "0 0.3184895833 0.0705729167 0.6265625 0.1203125\n"


def test_crowd_objects_survive_voc_as_difficult_and_are_named_when_yolo_drops_them(tmp_path, coco_writer):
    source = tmp_path / "coco"
    crowd = [*ANNOTATIONS, {"id": 4, "image_id": 12, "category_id": 7, "bbox": [5, 5, 10, 10], "iscrowd": 1}]
    for split in ("train", "val"):
        coco_writer(source, IMAGES, crowd, CATEGORIES, split=split)
    assert "train: 1 crowd objects left out (YOLO has no crowd or difficult flag)" in \
        convert(source, "yolo", tmp_path / "yolo")
    convert(source, "voc", tmp_path / "voc")
    assert _records(tmp_path / "voc", "val").crowd == 1


def test_refuses_a_non_empty_out_and_one_inside_the_dataset(tmp_path, coco_writer):
    source = tmp_path / "coco"
    coco_writer(source, IMAGES, ANNOTATIONS, CATEGORIES)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    with pytest.raises(ConfigError, match="exists and is not empty"):
        convert(source, "yolo", tmp_path / "full")
    with pytest.raises(ConfigError, match="inside the dataset"):
        convert(source, "yolo", source / "yolo")
    convert(source, "voc", tmp_path / "empty")  # an empty OUT is fine
    assert (tmp_path / "full" / "x").read_text() == "mine" and not (source / "yolo").exists()


def test_yolo_and_voc_folders_read_as_their_coco_folder_and_score_the_same_ap(tmp_path):
    source = write_shapes(tmp_path / "coco", ShapesConfig(image_size=64, train_images=3, val_images=4, seed=1))
    convert(source, "yolo", tmp_path / "yolo")
    convert(source, "voc", tmp_path / "voc")
    reference = _records(source, "val")
    generator = torch.Generator().manual_seed(0)
    jitter = [torch.rand(r.boxes.shape, generator=generator) * 4 - 2 for r in reference.records]
    aps = []
    for name in ("coco", "yolo", "voc"):
        coco = _records(tmp_path / name, "val")
        assert coco.names == reference.names and coco.category_ids == reference.category_ids
        results = []
        for record, noise, expected in zip(coco.records, jitter, reference.records, strict=True):
            torch.testing.assert_close(record.boxes, expected.boxes, rtol=0, atol=1e-4)
            assert torch.equal(record.labels, expected.labels)
            scores = torch.linspace(0.9, 0.5, len(record.labels))
            results += to_coco_results(record.image_id, {"boxes": record.boxes + noise, "scores": scores,
                                                         "labels": record.labels}, coco.category_ids)
        aps.append(coco_evaluate(coco, results)["AP"])
    assert 0 < aps[0] < 1 and aps[1] == pytest.approx(aps[0], abs=1e-6) and aps[2] == pytest.approx(aps[0], abs=1e-6)
