"""The run report's detection diagnostics: per-class AP table, precision-recall curves, confusion matrix, the
galleries of false positives and missed objects, the score and size distributions."""

from __future__ import annotations

import re
from types import SimpleNamespace

from attnkit.app.detection.kind import report_diagnostics, report_outcomes, report_samples
from attnkit.app.visualize.detection_diagnostics import _window
from attnkit.detection.data import load_annotations
from attnkit.detection.detector import Detector
from attnkit.detection.outcomes import detection_outcomes


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
    assert "2 validation images" in page
    for heading in ("Precision-recall curves", "Confusion matrix", "Worst false positives", "Missed objects",
                    "Scores and sizes"):
        assert f"<h3>{heading}</h3>" in page
    pictures = {path.name for path in tmp_path.glob("*.png")}  # the galleries only where there is something to show
    assert {"pr_curves.png", "confusion_matrix.png", "scores_and_sizes.png"} <= pictures
    assert page.count("data:image/png;base64,") == len(pictures)


def test_the_galleries_show_the_false_positives_and_missed_objects(tmp_path, small_coco):
    coco = load_annotations(small_coco[1])  # image 10 "a.png": a seven and a three; 11 "b.png": a three
    results = [{"image_id": 10, "category_id": 7, "bbox": [4, 6, 20, 10], "score": 0.9},   # the seven
               {"image_id": 10, "category_id": 7, "bbox": [30, 20, 16, 16], "score": 0.8},  # the three, called 7
               {"image_id": 12, "category_id": 3, "bbox": [1, 1, 9, 9], "score": 0.6}]      # on an empty image
    found = SimpleNamespace(outcomes=detection_outcomes(coco, results), names=coco.names)
    page = report_outcomes(found, small_coco[0], tmp_path)
    assert "2 detections (score &ge; 0.5, IoU &ge; 0.5) are matched to no object" in page
    assert "1 of the 3 objects have no detection" in page  # the three of b.png
    assert "Scores of the 1 true and 2 false positives" in page
    assert page.count("data:image/png;base64,") == 3
    for name in ("false_positives.png", "missed_objects.png", "scores_and_sizes.png"):
        assert (tmp_path / name).is_file()


def test_no_false_positives_no_gallery(tmp_path, small_coco):
    coco = load_annotations(small_coco[1])
    results = [{"image_id": 10, "category_id": 7, "bbox": [4, 6, 20, 10], "score": 0.9}]
    page = report_outcomes(SimpleNamespace(outcomes=detection_outcomes(coco, results), names=coco.names),
                           small_coco[0], tmp_path)
    assert "0 detections (score &ge; 0.5, IoU &ge; 0.5) are matched to no object of their class by the confusion " \
           "matrix's matching.</p>" in page
    assert "2 of the 3 objects have no detection" in page and page.count("data:image/png;base64,") == 2
    assert not (tmp_path / "false_positives.png").exists()


def test_the_samples_name_the_validation_split(tmp_path, small_coco):
    folder, annotations = small_coco
    task = SimpleNamespace(val_set=SimpleNamespace(images=folder, coco=load_annotations(annotations)))
    samples = report_samples(task)
    assert samples.evaluation == {"images": str(folder.resolve()), "annotations": str(annotations.resolve())}
    assert len(samples.images) == 3


def test_a_tile_zooms_around_its_box_inside_the_image():
    # side: twice the box's longer side plus 24 pixels of context, centred, moved inside the image where it fits
    assert _window((100, 100, 120, 110), 640, 480) == ((78.0, 142.0), (73.0, 137.0))
    assert _window((0, 0, 20, 20), 640, 480) == ((0.0, 64.0), (0.0, 64.0))
    assert _window((10, 10, 40, 30), 64, 48) == ((-10.0, 74.0), (-18.0, 66.0))  # larger than the image: centred on it
