import torch
from torch.testing import assert_close

from attnkit.detection.data import load_annotations
from attnkit.detection.evaluate import coco_evaluate, to_coco_results


def _ground_truth_as_results(coco):
    results = []
    for record in coco.records:
        detection = {"boxes": record.boxes, "scores": torch.ones(len(record.labels)), "labels": record.labels}
        results += to_coco_results(record.image_id, detection, coco.category_ids)
    return results


def test_ground_truth_as_predictions_gives_ap_one(small_coco):
    coco = load_annotations(small_coco[1])  # with a crowd object and an image without objects
    metrics = coco_evaluate(coco, _ground_truth_as_results(coco))
    torch.testing.assert_close(metrics["AP"], 1.0)
    torch.testing.assert_close(metrics["AP50"], 1.0)
    torch.testing.assert_close(metrics["AP75"], 1.0)


def test_results_map_labels_back_to_category_ids_and_xywh(small_coco):
    coco = load_annotations(small_coco[1])
    results = to_coco_results(10, {"boxes": torch.tensor([[4.0, 6, 24, 16]]), "scores": torch.tensor([0.5]),
                                   "labels": torch.tensor([1])}, coco.category_ids)
    assert results == [{"image_id": 10, "category_id": 7, "score": 0.5, "bbox": [4.0, 6.0, 20.0, 10.0]}]


def test_wrong_and_missing_detections_lower_ap(small_coco):
    coco = load_annotations(small_coco[1])
    results = _ground_truth_as_results(coco)
    metrics = coco_evaluate(coco, results[:1])  # one of three objects found
    assert 0.0 < metrics["AP"] < 1.0
    swapped = [dict(r, category_id=3 if r["category_id"] == 7 else 7) for r in results]
    torch.testing.assert_close(coco_evaluate(coco, swapped)["AP"], 0.0)
    assert coco_evaluate(coco, [])["AP"] == 0.0


def test_predictions_do_not_depend_on_the_batch_size_with_mixed_image_sizes(tmp_path, coco_writer):
    from dataclasses import replace

    from attnkit.detection.architectures import build_model
    from attnkit.detection.config import preset
    from attnkit.detection.data import CocoDetection
    from attnkit.detection.evaluate import predict_dataset, same_size_batches
    from attnkit.detection.transforms import eval_transforms

    torch.manual_seed(0)
    sizes = [(64, 48), (48, 64), (64, 48), (40, 40), (48, 64)]
    images = [{"id": i + 1, "file_name": f"{i}.png", "width": w, "height": h} for i, (w, h) in enumerate(sizes)]
    annotations = [{"id": i + 1, "image_id": i + 1, "category_id": 1, "bbox": [5, 5, 20, 20]} for i in range(5)]
    dataset = CocoDetection(*coco_writer(tmp_path, images, annotations, [{"id": 1, "name": "x"}]),
                            eval_transforms(48, 96))
    batches = list(same_size_batches(dataset, 8))
    assert sorted(map(sorted, batches)) == [[0, 2], [1, 4], [3]]
    model = build_model(replace(preset("tiny")[0], num_classes=1))
    one, many = predict_dataset(model, dataset, 1), predict_dataset(model, dataset, 8)
    key = lambda r: (r["image_id"], r["bbox"], r["score"])  # noqa: E731
    assert len(one) == 50
    for a, b in zip(sorted(one, key=key), sorted(many, key=key)):
        assert a["image_id"] == b["image_id"] and a["category_id"] == b["category_id"]
        torch.testing.assert_close(torch.tensor(a["bbox"] + [a["score"]]), torch.tensor(b["bbox"] + [b["score"]]),
                                   atol=2e-3, rtol=0)


def test_per_class_ap_by_hand(small_coco):
    from attnkit.detection.evaluate import per_class_ap, pr_curves, run_cocoeval

    coco = load_annotations(small_coco[1])  # category 7: one object (and a crowd one); category 3: two objects
    results = [  # 7: found, shifted by 3 px: IoU 17/23 = 0.74, a match at 5 of COCO's 10 IoU thresholds
               {"image_id": 10, "category_id": 7, "bbox": [7, 6, 20, 10], "score": 0.9},
               # 3: a false detection ranked first, then both objects: precision 0, 1/2, 2/3 at recall 0, 1/2, 1;
               # COCO's interpolated precision (the best at this recall or above) is 2/3 at every recall
               {"image_id": 12, "category_id": 3, "bbox": [1, 1, 9, 9], "score": 0.95},
               {"image_id": 10, "category_id": 3, "bbox": [30, 20, 16, 16], "score": 0.8},
               {"image_id": 11, "category_id": 3, "bbox": [10, 10, 30, 20], "score": 0.7}]
    evaluator = run_cocoeval(coco, results)
    classes = per_class_ap(evaluator, coco.category_ids)
    assert_close(classes[7]["AP50"], 1.0)
    assert_close(classes[7]["AP"], 0.5)
    assert_close(classes[3]["AP50"], 2 / 3)
    assert_close(classes[3]["AP"], 2 / 3)
    summary = coco_evaluate(coco, results)
    assert_close(summary["AP"], (0.5 + 2 / 3) / 2)
    assert_close(summary["AP50"], (1 + 2 / 3) / 2)
    curves = pr_curves(evaluator, coco.category_ids)
    assert_close(curves[3], torch.full((101,), 2 / 3, dtype=torch.float64).numpy())
    assert_close(curves[7], torch.ones(101, dtype=torch.float64).numpy())


def test_a_class_without_objects_has_no_ap(small_coco, coco_writer, tmp_path):
    from attnkit.detection.evaluate import per_class_ap, pr_curves, run_cocoeval

    images = [{"id": 1, "file_name": "a.png", "width": 32, "height": 32}]
    objects = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 2, 10, 10], "iscrowd": 0}]
    _, annotations = coco_writer(tmp_path, images, objects, [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    coco = load_annotations(annotations)
    evaluator = run_cocoeval(coco, [{"image_id": 1, "category_id": 1, "bbox": [2, 2, 10, 10], "score": 0.9}])
    classes = per_class_ap(evaluator, coco.category_ids)
    assert_close(classes[1], {"AP": 1.0, "AP50": 1.0})
    assert classes[2] == {"AP": None, "AP50": None}
    assert pr_curves(evaluator, coco.category_ids)[2] is None
