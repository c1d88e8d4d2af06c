import random
from dataclasses import replace

import torch

from attnkit.app.detection.recipe import DetectionTask
from attnkit.detection.config import DetectionConfig, preset
from attnkit.detection.data import CocoDetection, resolve_coco
from attnkit.detection.evaluate import evaluate_detector, predict_dataset
from attnkit.detection.shapes import ShapesConfig, write_shapes
from attnkit.detection.transforms import eval_transforms


def test_tiny_detr_overfits_a_few_shapes_images(tmp_path):
    torch.manual_seed(0)
    random.seed(0)
    root = write_shapes(tmp_path, ShapesConfig(image_size=48, train_images=2, val_images=1, max_objects=2))
    model, train = preset("tiny")
    config = DetectionConfig(replace(model, num_classes=5),
                             replace(train, lr=2e-3, lr_backbone=2e-3, batch_size=2, train_scales=(48,), val_size=48,
                                     max_size=96, flip=False))
    dataset = CocoDetection(*resolve_coco(root, "train"), eval_transforms(48, 96))
    task = DetectionTask(config, dataset, dataset)
    for epoch in range(80):
        batch = next(iter(task.load(task.batches(epoch))))
        loss = task.train_step(task.model, batch)["loss"]
        task.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(task.model.parameters(), 0.1)
        task.optimizer.step()
    metrics = task.evaluate()
    assert metrics["AP50"] >= 0.9, metrics
    assert metrics["images"] == 2
    # evaluation does not depend on the batch size
    torch.testing.assert_close(evaluate_detector(task.model, dataset, batch_size=1)["AP"], metrics["AP"])
    assert predict_dataset(task.model, dataset, 1) == predict_dataset(task.model, dataset, 2)
