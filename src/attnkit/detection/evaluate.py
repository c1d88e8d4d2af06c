"""COCO box AP (Lin et al. 2014) with pycocotools, the official evaluator's code.

Besides COCO's six summary numbers: each class's AP and AP50, and its precision-recall curve, read
from the same evaluation (COCOeval's precision array), so they agree with the summary: the summary
AP is the mean of the classes' APs over the classes that have objects.

Detections are in COCO results format ({"image_id", "category_id", "bbox": [x, y, w, h],
"score"}, original-image pixels, the dataset's own category ids). The model is run on batches of
images that share one size, so no image is padded and the numbers do not depend on the batch size.
"""

from __future__ import annotations

import contextlib
import copy
import io
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from torch import Tensor, nn

from attnkit.detection.confusion import confusion_matrix
from attnkit.detection.data import CocoAnnotations, CocoDetection
from attnkit.detection.outcomes import Outcomes, detection_outcomes
from attnkit.detection.postprocess import pairs, postprocess
from attnkit.detection.transforms import collate

METRICS = ("AP", "AP50", "AP75", "APs", "APm", "APl")  # the first six numbers of COCOeval.stats


def coco_ground_truth(annotations: CocoAnnotations) -> COCO:
    """A pycocotools COCO object of the annotation file (`area` filled in from the box where absent)."""
    if annotations.raw is None:
        raise ValueError(f"{annotations.path} was loaded with keep_raw=False; load it again to evaluate")
    dataset = copy.deepcopy(annotations.raw)
    for entry in dataset["annotations"]:
        entry.setdefault("area", float(entry["bbox"][2] * entry["bbox"][3]))
        entry.setdefault("iscrowd", 0)
    dataset["annotations"] = [dict(entry, id=i + 1) for i, entry in enumerate(dataset["annotations"])]
    coco = COCO()
    coco.dataset = dataset
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco


def coco_evaluate(annotations: CocoAnnotations, results: Sequence[dict]) -> dict[str, float]:
    """AP, AP50, AP75, APs, APm, APl of RESULTS (COCO results format) against the annotations."""
    evaluator = run_cocoeval(annotations, results)
    if evaluator is None:
        return dict.fromkeys(METRICS, 0.0)
    return {name: float(value) for name, value in zip(METRICS, evaluator.stats[:6])}


def run_cocoeval(annotations: CocoAnnotations, results: Sequence[dict]) -> COCOeval | None:
    """pycocotools' box evaluation of RESULTS, accumulated and summarized; None when there are no results."""
    ground_truth = coco_ground_truth(annotations)
    if not results:
        return None
    with contextlib.redirect_stdout(io.StringIO()):
        detections = ground_truth.loadRes([dict(r) for r in results])
        evaluator = COCOeval(ground_truth, detections, iouType="bbox")
        evaluator.params.imgIds = sorted(ground_truth.getImgIds())
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return evaluator


def per_class_ap(evaluator: COCOeval | None, category_ids: Sequence[int]) -> dict[int, dict[str, float | None]]:
    """Category id -> {"AP": AP@[.5:.95], "AP50": AP@.5}: COCOeval's precision array averaged per class.

    precision: (IoU thresholds, recall thresholds, classes, areas, max detections), -1 where a class
    has no objects (its AP is then None); area "all", 100 detections, as the summary's AP. No
    results at all (EVALUATOR None): 0 for every class.
    """
    if evaluator is None:
        return {category: {"AP": 0.0, "AP50": 0.0} for category in category_ids}
    precision = evaluator.eval["precision"][:, :, :, 0, -1]  # (IoU thresholds, recall thresholds, classes)
    column = {category: k for k, category in enumerate(evaluator.params.catIds)}
    iou50 = int(np.argmin(np.abs(evaluator.params.iouThrs - 0.5)))
    return {category: {"AP": _mean_defined(precision[:, :, column[category]]),
                       "AP50": _mean_defined(precision[iou50, :, column[category]])}
            for category in category_ids}


def pr_curves(evaluator: COCOeval, category_ids: Sequence[int], iou: float = 0.5) -> dict[int, np.ndarray | None]:
    """Category id -> precision at COCO's 101 recall thresholds (evaluator.params.recThrs) at IoU IOU;
    0 beyond the highest recall reached; None for a class without objects."""
    t = int(np.argmin(np.abs(evaluator.params.iouThrs - iou)))
    precision = evaluator.eval["precision"][t, :, :, 0, -1]  # (recall thresholds, classes)
    column = {category: k for k, category in enumerate(evaluator.params.catIds)}
    curves: dict[int, np.ndarray | None] = {}
    for category in category_ids:
        curve = precision[:, column[category]]
        curves[category] = None if (curve < 0).all() else np.clip(curve, 0, None)
    return curves


def _mean_defined(precision: np.ndarray) -> float | None:
    defined = precision[precision > -1]
    return float(defined.mean()) if defined.size else None


def to_coco_results(image_id: int, detection: dict[str, Tensor], category_ids: Sequence[int]) -> list[dict]:
    """One image's postprocessed detection (xyxy pixels, labels 0..K-1) in COCO results format."""
    boxes = detection["boxes"].tolist()
    return [{"image_id": image_id, "category_id": category_ids[label], "score": round(score, 5),
             "bbox": [round(x0, 2), round(y0, 2), round(x1 - x0, 2), round(y1 - y0, 2)]}
            for (x0, y0, x1, y1), score, label in zip(boxes, detection["scores"].tolist(),
                                                        detection["labels"].tolist())]


def same_size_batches(dataset: CocoDetection, batch_size: int) -> Iterator[list[int]]:
    """Indices of the dataset in batches whose images all have one original size (so, no padding)."""
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for index, record in enumerate(dataset.coco.records):
        groups[(record.height, record.width)].append(index)
    for indices in groups.values():
        for start in range(0, len(indices), batch_size):
            yield indices[start:start + batch_size]


@torch.no_grad()
def predict_dataset(model: nn.Module, dataset: CocoDetection, batch_size: int = 8,
                    one_per_query: bool = False) -> list[dict]:
    """Run MODEL (in eval mode) over DATASET (with evaluation transforms); COCO results format.

    A sigmoid detector gives its best (query, class) pairs (`postprocess.pairs`), unless ONE_PER_QUERY
    (each query's best class only, as `attnkit detect` shows them)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    results: list[dict] = []
    try:
        for indices in same_size_batches(dataset, batch_size):
            images, mask, targets = collate([dataset[i] for i in indices])
            outputs = model(images.to(device), mask.to(device))
            sizes = torch.stack([t["orig_size"] for t in targets])
            detections = (pairs(outputs.class_logits, outputs.boxes, sizes)
                          if outputs.class_logits is not None and not one_per_query
                          else postprocess(outputs.logits, outputs.boxes, sizes))
            for target, detection in zip(targets, detections):
                results += to_coco_results(target["image_id"], detection, dataset.coco.category_ids)
    finally:
        model.train(was_training)
    return results


def evaluate_detector(model: nn.Module, dataset: CocoDetection, batch_size: int = 8) -> dict[str, float]:
    """COCO AP of MODEL on DATASET, with the number of images and the seconds it took."""
    start = time.perf_counter()
    metrics = coco_evaluate(dataset.coco, predict_dataset(model, dataset, batch_size))
    return {**metrics, "images": len(dataset), "seconds": round(time.perf_counter() - start, 3)}


@dataclass(frozen=True)
class Diagnostics:
    """Where a detector's AP goes: per class, its precision-recall curves, and which classes it confuses."""
    metrics: dict[str, float]  # COCO's six, images, seconds (as evaluate_detector)
    names: list[str]  # label -> class name
    per_class: dict[str, dict[str, float | None]]  # name -> {"AP", "AP50"}; None for a class without objects
    recall: np.ndarray  # (101,) COCO's recall thresholds
    precision: dict[str, dict[float, np.ndarray | None]]  # name -> IoU (0.5, 0.75) -> (101,) precision
    confusion: Tensor  # (classes + 1, classes + 1) counts, last row and column background (detection/confusion.py)
    score_threshold: float
    iou_threshold: float
    outcomes: Outcomes  # the confusion matrix's detections and objects one by one (detection/outcomes.py)

    def as_dict(self) -> dict:
        """metrics, with "per_class", "confusion" ({"labels", "matrix", "score_threshold", "iou_threshold"}) and
        "outcomes" (`Outcomes.as_dict`)."""
        return {**self.metrics, "per_class": self.per_class,
                "confusion": {"labels": [*self.names, "background"], "matrix": self.confusion.tolist(),
                              "score_threshold": self.score_threshold, "iou_threshold": self.iou_threshold},
                "outcomes": self.outcomes.as_dict(self.names)}


def diagnose_detector(model: nn.Module, dataset: CocoDetection, batch_size: int = 8, score_threshold: float = 0.5,
                      iou_threshold: float = 0.5) -> Diagnostics:
    """COCO AP of MODEL on DATASET (as evaluate_detector), per class, with PR curves, the confusion matrix and its
    false positives and missed objects one by one; the model runs once."""
    start = time.perf_counter()
    results = predict_dataset(model, dataset, batch_size)
    evaluator = run_cocoeval(dataset.coco, results)
    coco = dataset.coco
    metrics = ({name: float(value) for name, value in zip(METRICS, evaluator.stats[:6])} if evaluator is not None
               else dict.fromkeys(METRICS, 0.0))
    by_iou = {iou: pr_curves(evaluator, coco.category_ids, iou) if evaluator is not None
              else dict.fromkeys(coco.category_ids) for iou in (0.5, 0.75)}
    classes = per_class_ap(evaluator, coco.category_ids)
    confusion = confusion_matrix(coco, results, score_threshold, iou_threshold)
    metrics |= {"images": len(dataset), "seconds": round(time.perf_counter() - start, 3)}
    return Diagnostics(metrics, list(coco.names), {name: classes[c] for name, c in zip(coco.names, coco.category_ids)},
                       np.linspace(0, 1, 101), {name: {iou: by_iou[iou][c] for iou in by_iou}
                                                for name, c in zip(coco.names, coco.category_ids)},
                       confusion, score_threshold, iou_threshold,
                       detection_outcomes(coco, results, score_threshold, iou_threshold))
