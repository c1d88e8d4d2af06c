"""Helpers for the detection tests: tiny COCO-format datasets written on the fly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image


def write_coco(root: Path, images: list[dict], annotations: list[dict], categories: list[dict],
               split: str = "train", draw: bool = True) -> tuple[Path, Path]:
    """Write images (plain colour squares with white boxes drawn) and the JSON; return (images dir, json)."""
    image_dir = root / split
    image_dir.mkdir(parents=True, exist_ok=True)
    for entry in images:
        if draw:
            image = Image.new("RGB", (entry["width"], entry["height"]), (0, 0, 0))
            for ann in annotations:
                if ann["image_id"] == entry["id"]:
                    x, y, w, h = ann["bbox"]
                    image.paste((255, 255, 255), (int(x), int(y), int(x + w), int(y + h)))
            image.save(image_dir / entry["file_name"])
    (root / "annotations").mkdir(exist_ok=True)
    path = root / "annotations" / f"instances_{split}.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return image_dir, path


@pytest.fixture
def coco_writer():
    """The `write_coco` function, for tests that build their own dataset."""
    return write_coco


@pytest.fixture
def small_coco(tmp_path: Path) -> tuple[Path, Path]:
    """Three images: two objects with category ids 7 and 3 (non-contiguous), a crowd object, an empty image."""
    images = [{"id": 10, "file_name": "a.png", "width": 64, "height": 48},
              {"id": 11, "file_name": "b.png", "width": 64, "height": 48},
              {"id": 12, "file_name": "c.png", "width": 64, "height": 48}]
    annotations = [
        {"id": 1, "image_id": 10, "category_id": 7, "bbox": [4, 6, 20, 10], "iscrowd": 0},
        {"id": 2, "image_id": 10, "category_id": 3, "bbox": [30, 20, 16, 16], "iscrowd": 0},
        {"id": 3, "image_id": 11, "category_id": 3, "bbox": [10, 10, 30, 20], "iscrowd": 0},
        {"id": 4, "image_id": 11, "category_id": 7, "bbox": [40, 30, 20, 12], "iscrowd": 1},
    ]
    categories = [{"id": 7, "name": "seven"}, {"id": 3, "name": "three"}]
    return write_coco(tmp_path, images, annotations, categories)
