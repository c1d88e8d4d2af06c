"""The `medium` preset: `small`'s model and recipe at 320 px, with more queries for more objects per image."""

from dataclasses import replace

import torch

from attnkit.detection.architectures import build_model
from attnkit.detection.config import DetectionConfig, preset


def test_medium_is_small_at_320_px_with_30_queries() -> None:
    small, small_train = preset("small")
    model, train = preset("medium")
    assert replace(model, num_queries=small.num_queries) == small and model.num_queries == 30
    assert (train.train_scales, train.val_size, train.max_size) == ((320,), 320, 533)
    assert replace(train, train_scales=small_train.train_scales, max_size=small_train.max_size,
                   val_size=small_train.val_size) == small_train
    assert DetectionConfig.from_dict(DetectionConfig(model, train, preset="medium").to_dict()).model == model


def test_medium_predicts_its_queries_at_320_px() -> None:
    model, _ = preset("medium")
    torch.manual_seed(0)
    detector = build_model(replace(model, num_classes=5)).eval()
    with torch.inference_mode():
        output = detector(torch.randn(1, 3, 320, 320), torch.zeros(1, 320, 320, dtype=torch.bool))
    assert output.boxes.shape == (1, 30, 4) and output.class_logits.shape == (1, 30, 5)
    assert bool(((output.boxes >= 0) & (output.boxes <= 1)).all())
