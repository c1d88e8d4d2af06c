"""The built-in `crowd` dataset: many small objects, written in COCO layout and found by `split_paths`."""

import json
import random

from attnkit.detection import sources
from attnkit.detection.crowd import MAX_OBJECTS, SIZE, draw_crowd, write_crowd
from attnkit.detection.shapes import ShapesConfig


def test_objects_are_small_many_and_inside() -> None:
    rng = random.Random(0)
    counts = []
    for _ in range(20):
        image, objects = draw_crowd(rng)
        assert image.size == (SIZE, SIZE)
        counts.append(len(objects))
        for label, (x0, y0, x1, y1) in objects:
            assert 0 <= label < 5
            assert 0 <= x0 < x1 <= SIZE and 0 <= y0 < y1 <= SIZE
            assert max(x1 - x0, y1 - y0) <= 0.13 * SIZE  # small: at most 12% of the width, and a rounding
    assert max(counts) <= MAX_OBJECTS and sum(counts) / len(counts) >= 6


def test_written_once_and_registered_as_data_name(tmp_path, monkeypatch) -> None:
    root = write_crowd(tmp_path / "crowd", train_images=3, val_images=2)
    coco = json.loads((root / "annotations" / "instances_val.json").read_text())
    assert len(coco["images"]) == 2 and len(list((root / "val").iterdir())) == 2
    assert [c["name"] for c in coco["categories"]] == ["circle", "square", "triangle", "star", "hexagon"]
    stamp = (root / "crowd.json").stat().st_mtime_ns
    write_crowd(root, train_images=3, val_images=2)
    assert (root / "crowd.json").stat().st_mtime_ns == stamp  # the same settings: not written again
    monkeypatch.setattr(sources, "write_crowd", lambda out: write_crowd(out, train_images=3, val_images=2))
    source = sources.split_paths("crowd", "val", tmp_path / "run", ShapesConfig())
    assert source.images == tmp_path / "run" / "data" / "crowd" / "val"
