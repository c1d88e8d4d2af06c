"""COCO box AP (Lin et al. 2014) with pycocotools, the official evaluator's code.

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

import torch
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
from torch import Tensor, nn

from attnkit.detection.data import CocoAnnotations, CocoDetection
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
    ground_truth = coco_ground_truth(annotations)
    if not results:
        return dict.fromkeys(METRICS, 0.0)
    with contextlib.redirect_stdout(io.StringIO()):
        detections = ground_truth.loadRes([dict(r) for r in results])
        evaluator = COCOeval(ground_truth, detections, iouType="bbox")
        evaluator.params.imgIds = sorted(ground_truth.getImgIds())
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return {name: float(value) for name, value in zip(METRICS, evaluator.stats[:6])}


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
