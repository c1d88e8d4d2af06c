import torch

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
