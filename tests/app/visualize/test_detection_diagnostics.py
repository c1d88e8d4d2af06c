"""The run report's detection diagnostics: per-class AP table, precision-recall curves, confusion matrix."""

from __future__ import annotations

import re
from types import SimpleNamespace

from attnkit.app.detection.kind import report_diagnostics, report_samples
from attnkit.detection.data import load_annotations
from attnkit.detection.detector import Detector


def test_the_report_section_has_every_class_and_both_pictures(detection_run, tmp_path, coco_writer):
    images = [{"id": 1, "file_name": "a.png", "width": 48, "height": 40},
              {"id": 2, "file_name": "b.png", "width": 48, "height": 40}]
    objects = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [4, 6, 20, 10], "iscrowd": 0},
               {"id": 2, "image_id": 2, "category_id": 1, "bbox": [10, 10, 12, 12], "iscrowd": 0}]
    categories = [{"id": 1, "name": "disc"}, {"id": 2, "name": "square"}]
    folder, annotations = coco_writer(tmp_path, images, objects, categories)
    detector = Detector.from_run(detection_run, device="cpu")
    page = report_diagnostics(detector, {"images": str(folder), "annotations": str(annotations)}, tmp_path)
    rows = re.findall(r"<tr><td>(\w+)</td><td>([^<]*)</td><td>([^<]*)</td></tr>", page)
    assert [row[0] for row in rows] == ["disc", "square"]
    assert rows[1][1:] == ("&ndash;", "&ndash;")  # no squares in these images: no AP, not 0
    assert page.count("data:image/png;base64,") == 2 and "2 validation images" in page
    assert (tmp_path / "pr_curves.png").is_file() and (tmp_path / "confusion_matrix.png").is_file()


def test_the_samples_name_the_validation_split(tmp_path, small_coco):
    folder, annotations = small_coco
    task = SimpleNamespace(val_set=SimpleNamespace(images=folder, coco=load_annotations(annotations)))
    samples = report_samples(task)
    assert samples.evaluation == {"images": str(folder.resolve()), "annotations": str(annotations.resolve())}
    assert len(samples.images) == 3
