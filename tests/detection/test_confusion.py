"""The confusion matrix with a background row and column, against counts worked out by hand."""

from __future__ import annotations

import torch
from torch.testing import assert_close

from attnkit.detection.confusion import confusion_matrix, image_confusion, match_by_iou
from attnkit.detection.data import load_annotations


def test_one_image_by_hand():
    true_boxes = torch.tensor([[0.0, 0, 10, 10], [20, 20, 30, 30], [40, 40, 50, 50]])
    true_labels = torch.tensor([0, 1, 1])
    boxes = torch.tensor([[0.0, 0, 10, 10],    # the class-0 object, called class 1
                          [20, 20, 30, 31],    # the first class-1 object, IoU 100/110
                          [60, 60, 70, 70]])   # nothing there, called class 0; the last object is missed
    labels = torch.tensor([1, 1, 0])
    expected = torch.tensor([[0, 1, 0],    # true class 0: detected as 1
                             [0, 1, 1],    # true class 1: one right, one missed (background column)
                             [1, 0, 0]])   # background: one false class-0 detection
    assert_close(image_confusion(true_boxes, true_labels, boxes, labels, num_classes=2), expected)


def test_matching_is_one_to_one_highest_iou_first():
    # object 0 overlaps both detections, object 1 only detection 1: the highest IoU (0.9) goes first, so
    # object 1 is left without a detection and detection 0 unmatched
    iou = torch.tensor([[0.6, 0.9],
                        [0.0, 0.7]])
    assert match_by_iou(iou, 0.5) == [(0, 1)]
    assert match_by_iou(torch.tensor([[0.4]]), 0.5) == []
    true_boxes, boxes = torch.tensor([[0.0, 0, 10, 10]]), torch.tensor([[0.0, 0, 10, 10], [0, 0, 10, 9]])
    # a second detection of one object is a false positive
    assert_close(image_confusion(true_boxes, torch.tensor([0]), boxes, torch.tensor([0, 0]), 1),
                 torch.tensor([[1, 0], [1, 0]]))


def test_over_a_dataset_with_a_score_threshold(small_coco):
    coco = load_annotations(small_coco[1])  # labels: category 3 -> 0, 7 -> 1; a crowd object is not counted
    results = [{"image_id": 10, "category_id": 7, "bbox": [4, 6, 20, 10], "score": 0.9},    # right
               {"image_id": 10, "category_id": 7, "bbox": [30, 20, 16, 16], "score": 0.8},  # a 3 called 7
               {"image_id": 11, "category_id": 3, "bbox": [10, 10, 30, 20], "score": 0.3},  # below the threshold
               {"image_id": 12, "category_id": 3, "bbox": [1, 1, 9, 9], "score": 0.6}]      # an empty image
    expected = torch.tensor([[0, 1, 1],    # the 3s: one called 7, one missed
                             [0, 1, 0],    # the 7: right
                             [1, 0, 0]])   # background: a 3 where there is nothing
    assert_close(confusion_matrix(coco, results, score_threshold=0.5), expected)
    expected[0, 0], expected[0, 2] = 1, 0  # the low-scored one now counts
    assert_close(confusion_matrix(coco, results, score_threshold=0.2), expected)
