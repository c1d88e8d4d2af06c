"""fold_batch_norms: a detector's BatchNorms (the ResNet's, trainable or frozen, and the cross-scale fusion's)
folded into its convolutions give the same outputs with none left; Detector.from_run serves the folded model."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn
from torchvision.ops.misc import FrozenBatchNorm2d

from attnkit.detection.architectures import build_model
from attnkit.detection.backbone import fold_batch_norms
from attnkit.detection.config import preset, with_arch


@pytest.mark.parametrize(("arch", "changes"), [("fast", {}), ("detr", {}), ("fast", {"cross_scale_fusion": True})],
                         ids=["fast", "detr", "fast-cross-scale-fusion"])
@pytest.mark.parametrize("frozen", [False, True])
def test_folded_batch_norms_give_the_same_outputs(arch, changes, frozen, batch_norm_randomiser):
    torch.manual_seed(0)
    config = dataclasses.replace(with_arch(preset("small")[0], arch, **changes), num_classes=3)
    model = build_model(config).eval()
    norm = FrozenBatchNorm2d if frozen else nn.BatchNorm2d
    batch_norm_randomiser(model)  # statistics and affine terms away from the identity, so folding shows
    if frozen:
        _freeze(model)
    assert any(isinstance(m, norm) for m in model.modules())
    images, mask = torch.randn(2, 3, 64, 64), torch.zeros(2, 64, 64, dtype=torch.bool)
    with torch.no_grad():
        expected = model(images, mask)
        folded = fold_batch_norms(model)
        got = folded(images, mask)
    assert not any(isinstance(m, (nn.BatchNorm2d, FrozenBatchNorm2d)) for m in folded.modules())
    torch.testing.assert_close(got.logits, expected.logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.boxes, expected.boxes, atol=1e-4, rtol=1e-4)


def _freeze(model: nn.Module) -> None:
    """Every BatchNorm2d replaced by a FrozenBatchNorm2d holding its statistics and affine terms."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.BatchNorm2d):
                frozen = FrozenBatchNorm2d(child.num_features, eps=child.eps)
                for key in ("weight", "bias", "running_mean", "running_var"):
                    getattr(frozen, key).copy_(getattr(child, key).detach())
                setattr(parent, name, frozen)


def test_detector_from_run_serves_the_folded_model(detection_run):
    from attnkit.detection.detector import Detector

    detector = Detector.from_run(detection_run, device="cpu")
    assert not any(isinstance(m, (nn.BatchNorm2d, FrozenBatchNorm2d)) for m in detector.model.modules())
