import json
import random

import numpy as np
import torch

from attnkit.detection.data import CocoDetection, load_annotations, resolve_coco
from attnkit.detection.shapes import CLASSES, ShapesConfig, draw_image, write_shapes


def test_shapes_writes_a_readable_coco_layout(tmp_path):
    config = ShapesConfig(image_size=48, train_images=6, val_images=3, max_objects=3, seed=1)
    root = write_shapes(tmp_path / "shapes", config)
    for split, count in (("train", 6), ("val", 3)):
        images, annotations = resolve_coco(root, split)
        dataset = CocoDetection(images, annotations)
        assert len(dataset) == count and dataset.coco.names == list(CLASSES) and dataset.coco.degenerate == 0
        image, target = dataset[0]
        assert image.shape == (3, 48, 48)
        assert ((target["boxes"] >= 0) & (target["boxes"] <= 48)).all()


def test_shapes_is_deterministic_and_skips_rewriting(tmp_path):
    config = ShapesConfig(image_size=40, train_images=3, val_images=2)
    first = write_shapes(tmp_path / "a", config)
    second = write_shapes(tmp_path / "b", config)
    for split in ("train", "val"):
        a = json.loads((first / "annotations" / f"instances_{split}.json").read_text())
        b = json.loads((second / "annotations" / f"instances_{split}.json").read_text())
        assert a == b
    stamp = (first / "train" / "000000.png").stat().st_mtime_ns
    write_shapes(first, config)
    assert (first / "train" / "000000.png").stat().st_mtime_ns == stamp


def test_shape_boxes_are_exact():
    from PIL import Image, ImageDraw

    from attnkit.detection.shapes import shape_box, shape_outline
    for kind in CLASSES:
        for angle in (0.0, 0.4, 1.3, 2.9):
            image = Image.new("L", (100, 100))
            points = shape_outline(kind, 50.0, 45.0, 30.0, angle)
            if kind == "circle":
                ImageDraw.Draw(image).ellipse([20, 15, 80, 75], fill=255)
            else:
                ImageDraw.Draw(image).polygon(points, fill=255)
            ys, xs = (torch.from_numpy(np.array(image)) > 0).nonzero(as_tuple=True)
            drawn = torch.tensor([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], dtype=torch.float32)
            box = torch.tensor(shape_box(kind, 50.0, 45.0, 30.0, points, 100), dtype=torch.float32)
            torch.testing.assert_close(drawn, box, atol=1.5, rtol=0)


def test_images_have_objects_inside_the_image():
    rng = random.Random(3)
    for _ in range(5):
        _, objects = draw_image(rng, 64, 4)
        assert all(0 <= v <= 64 for _, box in objects for v in box)
        assert all(box[2] > box[0] and box[3] > box[1] for _, box in objects)


def test_categories_are_the_classes(tmp_path):
    root = write_shapes(tmp_path, ShapesConfig(image_size=32, train_images=1, val_images=1))
    coco = load_annotations(root / "annotations" / "instances_val.json")
    assert coco.category_ids == [1, 2, 3, 4, 5] and coco.names == list(CLASSES)
