"""`Detector.from_run(RUN, quantize="int8")`: the transformer's and heads' Linears int8, the backbone float32,
and detections near float32's."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

from attnkit.detection.detector import Detector
from attnkit.errors import ConfigError
from attnkit.nn.onednn_linear import OneDnnLinear


def test_int8_detector_quantizes_linears_only_and_stays_close_to_float(detection_run):
    reference = Detector.from_run(detection_run, device="cpu")
    quantized = Detector.from_run(detection_run, quantize="int8")
    linears = [name for name, module in reference.model.named_modules()
               if type(module) in (nn.Linear, OneDnnLinear)]  # float32: oneDNN's product where it pays
    int8 = {name for name, module in quantized.model.named_modules() if isinstance(module, DynamicInt8Linear)}
    assert linears and set(linears) <= int8
    convolutions = [module for module in quantized.model.modules() if isinstance(module, nn.Conv2d)]
    assert convolutions and all(module.weight.dtype == torch.float32 for module in convolutions)  # backbone: float
    generator = torch.Generator().manual_seed(0)
    images, mask = torch.rand(2, 3, 64, 80, generator=generator), torch.zeros(2, 64, 80, dtype=torch.bool)
    with torch.no_grad():
        expected, got = reference.model(images, mask), quantized.model(images, mask)
    assert not torch.equal(got.logits, expected.logits)
    torch.testing.assert_close(got.logits, expected.logits, atol=0.1, rtol=0)
    torch.testing.assert_close(got.boxes, expected.boxes, atol=0.02, rtol=0)  # normalised cx, cy, w, h
    image = (torch.rand(3, 60, 70, generator=generator) * 255).to(torch.uint8)
    assert len(quantized.predict(image, threshold=0.0)[0]) == len(reference.predict(image, threshold=0.0)[0])


def test_int8_is_refused_on_another_device_and_other_schemes_by_name(detection_run):
    with pytest.raises(ConfigError, match="'int4'.*int8"):
        Detector.from_run(detection_run, quantize="int4")
    with pytest.raises(ConfigError, match="CPU"):
        Detector.from_run(detection_run, device="meta", quantize="int8")


def test_the_float32_detector_runs_its_linears_through_onednn(detection_run):
    from attnkit.nn.onednn_linear import onednn_available

    if not onednn_available():
        pytest.skip("this PyTorch has no oneDNN")
    model = Detector.from_run(detection_run, device="cpu").model
    assert any(type(module) is OneDnnLinear for module in model.modules())
    assert not any(type(module) is nn.Linear for module in model.modules())
