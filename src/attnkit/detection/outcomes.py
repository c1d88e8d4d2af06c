"""Each detection's and each object's outcome under the confusion matrix's matching (detection/confusion.py).

Detections with score >= a threshold are matched one to one to the objects of their image,
greedily by IoU down to 0.5, whatever the classes (`image_pairs`, the same pairs the confusion
matrix counts). A detection matched to an object of its class is a true positive (the diagonal);
any other is a false positive: matched to an object of another class (off the diagonal) or to
nothing (the background row). An object no detection is matched to is missed (the background
column). The worst false positives are the highest-scored; the missed objects are listed largest
first. Each carries the highest IoU it has with any box on the other side, whatever the class or
the match: a false positive at IoU 0.8 is a duplicate or a localisation error, at 0 an object
that is not there; a missed object at 0.4 was found, but not well enough.

Sizes are sqrt(box area) in image pixels, in COCO's classes: small below 32, large above 96
(COCOeval uses the annotation's `area`, on COCO itself the mask's, so its APs/APm/APl may
count a few objects in another class).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from torch import Tensor

from attnkit.detection.confusion import detections_by_image, image_pairs
from attnkit.detection.data import CocoAnnotations

SIZES = {"small": (0.0, 32.0), "medium": (32.0, 96.0), "large": (96.0, math.inf)}  # sqrt(area), COCO's bounds
SHOWN = 8  # worst false positives and missed objects listed (as_dict) and drawn


@dataclass(frozen=True)
class Found:
    """One false positive (a detection: LABEL, SCORE) or one missed object (LABEL its class, SCORE None)."""
    image_id: int
    file_name: str
    box: tuple[float, float, float, float]  # x0, y0, x1, y1 pixels
    label: int
    score: float | None
    best_iou: float  # the highest IoU with any box on the other side: any object for a detection, and back
    true_label: int | None = None  # a false positive matched to an object of another class: that object's class
    true_box: tuple[float, float, float, float] | None = None  # and its box

    @property
    def size(self) -> float:
        """sqrt(area) of the box, pixels."""
        x0, y0, x1, y1 = self.box
        return math.sqrt(max(x1 - x0, 0.0) * max(y1 - y0, 0.0))


@dataclass(frozen=True)
class Outcomes:
    """Every detection's and object's outcome at one score and IoU threshold (see the module docstring)."""
    false_positives: list[Found]  # highest score first
    missed: list[Found]  # largest first
    true_positive_scores: list[float]
    object_sizes: list[float]  # every object's sqrt(area)
    detection_sizes: list[float]  # every detection's (score >= threshold) sqrt(area)
    score_threshold: float
    iou_threshold: float

    def score_histogram(self, bins: int = 10) -> dict[str, list]:
        """Counts of true- and false-positive scores in BINS equal bins from the threshold to 1 (the last one
        closed): {"edges": (bins + 1,), "true_positives": (bins,), "false_positives": (bins,)}."""
        edges = np.linspace(self.score_threshold, 1.0, bins + 1)
        return {"edges": [round(float(e), 4) for e in edges],
                "true_positives": np.histogram(self.true_positive_scores, edges)[0].tolist(),
                "false_positives": np.histogram([f.score or 0.0 for f in self.false_positives], edges)[0].tolist()}

    def by_size(self) -> dict[str, dict[str, int]]:
        """COCO size class -> counts of objects, missed objects, detections and false positives."""
        counted = {"objects": self.object_sizes, "missed": [m.size for m in self.missed],
                   "detections": self.detection_sizes, "false_positives": [f.size for f in self.false_positives]}
        return {name: {key: sum(low <= size < high for size in sizes) for key, sizes in counted.items()}
                for name, (low, high) in SIZES.items()}

    def as_dict(self, names: Sequence[str]) -> dict:
        """The counts, the score histogram, counts by size, the SHOWN worst false positives and missed objects
        (class NAMES, boxes [x, y, w, h] as COCO writes them)."""
        return {"score_threshold": self.score_threshold, "iou_threshold": self.iou_threshold,
                "true_positives": len(self.true_positive_scores), "false_positives": len(self.false_positives),
                "wrong_class": sum(f.true_label is not None for f in self.false_positives),
                "missed": len(self.missed), "objects": len(self.object_sizes),
                "score_histogram": self.score_histogram(), "by_size": self.by_size(),
                "worst_false_positives": [_entry(f, names) for f in self.false_positives[:SHOWN]],
                "missed_objects": [_entry(m, names) for m in self.missed[:SHOWN]]}


def _entry(found: Found, names: Sequence[str]) -> dict:
    x0, y0, x1, y1 = found.box
    entry = {"image_id": found.image_id, "file_name": found.file_name, "category": names[found.label],
             "bbox": [round(x0, 2), round(y0, 2), round(x1 - x0, 2), round(y1 - y0, 2)],
             "best_iou": round(found.best_iou, 3)}
    if found.score is not None:
        entry |= {"score": found.score,
                  "true_category": None if found.true_label is None else names[found.true_label]}
    return entry


def detection_outcomes(annotations: CocoAnnotations, results: Sequence[dict], score_threshold: float = 0.5,
                       iou_threshold: float = 0.5) -> Outcomes:
    """The outcome of each of RESULTS (COCO results format) with score >= SCORE_THRESHOLD and of each usable
    (non-crowd) object of the annotations, by the confusion matrix's matching."""
    false_positives, missed, true_scores, object_sizes, detection_sizes = [], [], [], [], []
    for image in detections_by_image(annotations, results, score_threshold):
        record = image.record
        iou, pairs = image_pairs(record.boxes, image.boxes, iou_threshold)  # iou: (objects, detections)
        object_of = {d: o for o, d in pairs}
        best_for_detection = _best(iou.T)
        for d, (result, label) in enumerate(zip(image.results, image.labels.tolist())):
            o = object_of.get(d)
            if o is not None and int(record.labels[o]) == label:
                true_scores.append(result["score"])
                continue
            false_positives.append(Found(
                record.image_id, record.file_name, _box(image.boxes[d]), label, result["score"],
                best_for_detection[d], None if o is None else int(record.labels[o]),
                None if o is None else _box(record.boxes[o])))
        best_for_object, matched = _best(iou), {o for o, _ in pairs}
        for o in (o for o in range(len(record.labels)) if o not in matched):
            missed.append(Found(record.image_id, record.file_name, _box(record.boxes[o]), int(record.labels[o]),
                                None, best_for_object[o]))
        object_sizes += _sizes(record.boxes)
        detection_sizes += _sizes(image.boxes)
    false_positives.sort(key=lambda f: -(f.score or 0.0))  # stable: ties keep the dataset's order
    missed.sort(key=lambda m: -m.size)
    return Outcomes(false_positives, missed, true_scores, object_sizes, detection_sizes, score_threshold,
                    iou_threshold)


def _best(iou: Tensor) -> list[float]:
    """Each row's highest IoU, 0 for a row of nothing; iou: (rows, columns)."""
    return iou.amax(dim=1).tolist() if iou.shape[1] else [0.0] * iou.shape[0]


def _box(box: Tensor) -> tuple[float, float, float, float]:
    x0, y0, x1, y1 = box.tolist()
    return (x0, y0, x1, y1)


def _sizes(boxes: Tensor) -> list[float]:
    """sqrt(area) of each of BOXES, (boxes, 4) xyxy."""
    return ((boxes[:, 2] - boxes[:, 0]).clamp(min=0) * (boxes[:, 3] - boxes[:, 1]).clamp(min=0)).sqrt().tolist()
