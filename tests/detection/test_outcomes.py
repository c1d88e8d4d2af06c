"""False positives, missed objects and the score and size counts, against outcomes worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from attnkit.detection.confusion import confusion_matrix
from attnkit.detection.data import load_annotations
from attnkit.detection.outcomes import detection_outcomes

# small_coco (tests/conftest.py): labels three -> 0, seven -> 1 (by category id); image 10 "a.png" holds a seven at
# xyxy (4, 6, 24, 16) and a three at (30, 20, 46, 36); image 11 "b.png" a three at (10, 10, 40, 30) (and a crowd
# seven, not counted); image 12 "c.png" nothing.
RESULTS = [
    {"image_id": 10, "category_id": 7, "bbox": [4, 6, 20, 10], "score": 0.92},   # the seven: true positive
    {"image_id": 10, "category_id": 7, "bbox": [30, 20, 16, 16], "score": 0.82},  # on the three: wrong class
    {"image_id": 10, "category_id": 7, "bbox": [4, 6, 20, 11], "score": 0.72},   # the seven again, IoU 200/220
    {"image_id": 11, "category_id": 3, "bbox": [10, 10, 30, 20], "score": 0.3},  # below the threshold: not counted
    {"image_id": 11, "category_id": 3, "bbox": [10, 10, 30, 8], "score": 0.62},  # the three, IoU 240/600 < 0.5
    {"image_id": 12, "category_id": 3, "bbox": [0, 0, 40, 40], "score": 0.62},   # nothing there
]


def test_false_positives_and_missed_objects_by_hand(small_coco):
    outcomes = detection_outcomes(load_annotations(small_coco[1]), RESULTS, score_threshold=0.5)
    assert outcomes.true_positive_scores == [0.92]
    worst = outcomes.false_positives  # highest score first; the two at 0.62 in the dataset's order
    assert [(f.file_name, f.label, f.score, f.true_label) for f in worst] == [
        ("a.png", 1, 0.82, 0), ("a.png", 1, 0.72, None), ("b.png", 0, 0.62, None), ("c.png", 0, 0.62, None)]
    assert [f.best_iou for f in worst] == pytest.approx([1.0, 200 / 220, 240 / 600, 0.0])
    assert worst[0].true_box == (30.0, 20.0, 46.0, 36.0)
    assert [(m.file_name, m.label, m.box, m.score) for m in outcomes.missed] == [("b.png", 0, (10.0, 10.0, 40.0, 30.0),
                                                                                  None)]
    assert outcomes.missed[0].best_iou == pytest.approx(0.4) and outcomes.missed[0].size == pytest.approx(600 ** 0.5)


def test_a_higher_threshold_misses_more_largest_first(small_coco):
    outcomes = detection_outcomes(load_annotations(small_coco[1]), RESULTS, score_threshold=0.9)
    assert outcomes.false_positives == [] and outcomes.true_positive_scores == [0.92]
    assert [(m.file_name, m.size) for m in outcomes.missed] == [("b.png", pytest.approx(math.sqrt(600))),
                                                                ("a.png", 16.0)]


def test_the_counts_are_the_confusion_matrix(small_coco):
    coco = load_annotations(small_coco[1])
    outcomes, matrix = detection_outcomes(coco, RESULTS), confusion_matrix(coco, RESULTS)
    numbers = outcomes.as_dict(coco.names)
    diagonal = int(matrix[:-1, :-1].trace())
    assert numbers["true_positives"] == diagonal == 1
    assert numbers["false_positives"] == int(matrix[:, :-1].sum()) - diagonal == 4
    assert numbers["wrong_class"] == int(matrix[:-1, :-1].sum()) - diagonal == 1
    assert numbers["missed"] == int(matrix[:-1, -1].sum()) == 1 and numbers["objects"] == 3


def test_score_histogram_and_sizes_by_hand(small_coco):
    coco = load_annotations(small_coco[1])
    numbers = detection_outcomes(coco, RESULTS).as_dict(coco.names)
    histogram = numbers["score_histogram"]  # ten bins of 0.05 from 0.5
    assert_close(torch.tensor(histogram["edges"]), torch.linspace(0.5, 1.0, 11), rtol=0, atol=1e-6)
    assert histogram["true_positives"] == [0, 0, 0, 0, 0, 0, 0, 0, 1, 0]  # 0.92
    assert histogram["false_positives"] == [0, 0, 2, 0, 1, 0, 1, 0, 0, 0]  # 0.62 twice, 0.72, 0.82
    # sizes sqrt(area): objects 14.1, 16, 24.5; detections 14.1, 16, 14.8, 15.5 and 40 (the one on nothing)
    assert numbers["by_size"] == {"small": {"objects": 3, "missed": 1, "detections": 4, "false_positives": 3},
                                  "medium": {"objects": 0, "missed": 0, "detections": 1, "false_positives": 1},
                                  "large": {"objects": 0, "missed": 0, "detections": 0, "false_positives": 0}}
    assert numbers["worst_false_positives"][0] == {"image_id": 10, "file_name": "a.png", "category": "seven",
                                                   "bbox": [30.0, 20.0, 16.0, 16.0], "best_iou": 1.0, "score": 0.82,
                                                   "true_category": "three"}
    assert numbers["missed_objects"] == [{"image_id": 11, "file_name": "b.png", "category": "three",
                                          "bbox": [10.0, 10.0, 30.0, 20.0], "best_iou": 0.4}]
