"""A detector's confusion matrix: which class each object was detected as, with a background row and column.

Detections with score >= a threshold are matched to the ground-truth objects of their image one to
one, greedily by IoU (torchvision.ops.box_iou), highest first, whatever the classes, down to an IoU
threshold (0.5, PASCAL VOC's). A matched pair counts at (true class, detected class); an object
left unmatched at (true class, background): missed; a detection left unmatched at (background,
detected class): a false positive. Row sums are the objects per class (plus false positives in the
background row); the diagonal over them is each class's recall at that threshold.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from torchvision.ops import box_convert, box_iou

from attnkit.detection.data import CocoAnnotations, ImageRecord


def match_by_iou(iou: Tensor, threshold: float) -> list[tuple[int, int]]:
    """(object, detection) pairs, one to one, greedily by IoU (highest first) down to THRESHOLD.

    iou: (objects, detections).
    """
    objects, detections = (iou >= threshold).nonzero(as_tuple=True)
    order = iou[objects, detections].argsort(descending=True, stable=True)
    pairs, used_objects, used_detections = [], set(), set()
    for o, d in zip(objects[order].tolist(), detections[order].tolist()):
        if o not in used_objects and d not in used_detections:
            pairs.append((o, d))
            used_objects.add(o)
            used_detections.add(d)
    return pairs


def image_pairs(true_boxes: Tensor, boxes: Tensor, iou_threshold: float = 0.5) -> tuple[Tensor, list[tuple[int, int]]]:
    """One image's IoU, (objects, detections), and its (object, detection) pairs (`match_by_iou`).

    Boxes xyxy: true_boxes (objects, 4), boxes (detections, 4)."""
    iou = box_iou(true_boxes.float(), boxes.float())
    return iou, match_by_iou(iou, iou_threshold)


def image_confusion(true_boxes: Tensor, true_labels: Tensor, boxes: Tensor, labels: Tensor, num_classes: int,
                    iou_threshold: float = 0.5) -> Tensor:
    """One image's counts, (num_classes + 1, num_classes + 1): rows true class, columns detected class, the
    last row and column background. Boxes xyxy: true_boxes (objects, 4), boxes (detections, 4)."""
    matrix = torch.zeros(num_classes + 1, num_classes + 1, dtype=torch.long)
    pairs = image_pairs(true_boxes, boxes, iou_threshold)[1]
    for o, d in pairs:
        matrix[true_labels[o], labels[d]] += 1
    missed = torch.ones(len(true_labels), dtype=torch.bool)
    missed[[o for o, _ in pairs]] = False
    false = torch.ones(len(labels), dtype=torch.bool)
    false[[d for _, d in pairs]] = False
    matrix[:, num_classes].index_add_(0, true_labels[missed].long(), torch.ones(int(missed.sum()), dtype=torch.long))
    matrix[num_classes].index_add_(0, labels[false].long(), torch.ones(int(false.sum()), dtype=torch.long))
    return matrix


@dataclass(frozen=True)
class ImageDetections:
    """One image's objects (its record) and its detections with score >= the threshold."""
    record: ImageRecord
    results: list[dict]  # COCO results format
    boxes: Tensor  # (detections, 4) xyxy pixels
    labels: Tensor  # (detections,) labels 0..K-1


def detections_by_image(annotations: CocoAnnotations, results: Sequence[dict],
                        score_threshold: float = 0.5) -> Iterator[ImageDetections]:
    """Each annotated image with its RESULTS (COCO results format) of score >= SCORE_THRESHOLD."""
    by_image: dict[int, list[dict]] = defaultdict(list)
    for result in results:
        if result["score"] >= score_threshold:
            by_image[result["image_id"]].append(result)
    for record in annotations.records:
        found = by_image.get(record.image_id, [])
        boxes = box_convert(torch.tensor([r["bbox"] for r in found], dtype=torch.float).reshape(-1, 4), "xywh", "xyxy")
        labels = torch.tensor([annotations.label_of[r["category_id"]] for r in found], dtype=torch.long)
        yield ImageDetections(record, found, boxes, labels)


def confusion_matrix(annotations: CocoAnnotations, results: Sequence[dict], score_threshold: float = 0.5,
                     iou_threshold: float = 0.5) -> Tensor:
    """Counts over a dataset, (classes + 1, classes + 1) (see the module docstring), of RESULTS (COCO results
    format) with score >= SCORE_THRESHOLD against the annotations' usable (non-crowd) objects."""
    matrix = torch.zeros(annotations.num_classes + 1, annotations.num_classes + 1, dtype=torch.long)
    for image in detections_by_image(annotations, results, score_threshold):
        matrix += image_confusion(image.record.boxes, image.record.labels, image.boxes, image.labels,
                                  annotations.num_classes, iou_threshold)
    return matrix
