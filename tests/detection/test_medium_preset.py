"""The `medium` preset: `small`'s recipe at 320 px, with more queries for more objects per image and its ResNet-18 at
half width, its encoder updating the coarsest level alone (RT-DETR's attention on C5)."""

from dataclasses import replace

import torch

from attnkit.detection.architectures import build_model
from attnkit.detection.config import DetectionConfig, preset


def test_medium_is_small_at_320_px_with_30_queries_a_half_width_resnet18_and_the_encoder_on_c5() -> None:
    small, small_train = preset("small")
    model, train = preset("medium")
    narrow = {"backbone": "resnet", "backbone_block": "basic", "backbone_depths": (2, 2, 2, 2),
              "backbone_widths": (32, 64, 128, 256), "backbone_stem_width": 32, "encoder_levels": 1}
    assert model == replace(small, num_queries=30, **narrow)
    assert (train.train_scales, train.val_size, train.max_size) == ((320,), 320, 533)
    assert replace(train, train_scales=small_train.train_scales, max_size=small_train.max_size,
                   val_size=small_train.val_size) == small_train
    assert DetectionConfig.from_dict(DetectionConfig(model, train, preset="medium").to_dict()).model == model


def test_medium_predicts_its_queries_at_320_px_with_half_the_weights_of_small() -> None:
    model, _ = preset("medium")
    torch.manual_seed(0)
    detector = build_model(replace(model, num_classes=5)).eval()
    small = build_model(replace(preset("small")[0], num_classes=5))
    widths = [m.out_channels for m in detector.modules() if isinstance(m, torch.nn.Conv2d)][:1]
    assert widths == [32] and sum(p.numel() for p in detector.parameters()) < 0.5 * sum(
        p.numel() for p in small.parameters())
    with torch.inference_mode():
        output = detector(torch.randn(1, 3, 320, 320), torch.zeros(1, 320, 320, dtype=torch.bool))
    assert output.boxes.shape == (1, 30, 4) and output.class_logits.shape == (1, 30, 5)
    assert bool(((output.boxes >= 0) & (output.boxes <= 1)).all())
