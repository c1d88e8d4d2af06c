"""`Detector.from_run(RUN, compile=True)` and `attnkit detect --compile`: the forward compiled by torch.compile
(frozen weights, one graph per image size) gives the eager model's detections; a compiler's failure is one
clear error."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from attnkit.app.cli import load_commands
from attnkit.detection.architectures import build_model
from attnkit.detection.config import DetectionConfig, FastDetrConfig, preset
from attnkit.detection.detector import Detector
from attnkit.errors import ConfigError, UserError
from attnkit.storage import RunFolder, save_weights


@pytest.fixture(scope="module")
def fast_run(tmp_path_factory):
    """A `fast` detector (the default architecture) with a small ResNet, three levels and random weights."""
    _, train = preset("tiny")
    model = FastDetrConfig(num_classes=2, backbone="resnet18", hidden_dim=32, num_heads=2, enc_layers=1,
                           dec_layers=1, dim_feedforward=64, num_queries=8)
    config = DetectionConfig(model=model, train=train, preset="tiny", data="explicit", class_names=("a", "b"),
                             category_ids=(1, 2))
    run = RunFolder.create(tmp_path_factory.mktemp("runs") / "fast", "detection", config.to_dict())
    torch.manual_seed(0)
    save_weights(run.best_weights, build_model(model).state_dict(), {"kind": "detection", "step": 1})
    return run.path


def test_compiled_detector_gives_the_eager_detections_and_compiles_once_per_size(fast_run, capsys):
    eager, compiled = Detector.from_run(fast_run, device="cpu"), Detector.from_run(fast_run, device="cpu", compile=True)
    image = (torch.rand(3, 50, 60, generator=torch.Generator().manual_seed(0)) * 255).to(torch.uint8)
    expected = eager.predict(image, threshold=0.0)[0]
    for _ in range(2):
        got = compiled.predict(image, threshold=0.0)[0]
        torch.testing.assert_close(got.scores, expected.scores, atol=1e-4, rtol=0)
        torch.testing.assert_close(got.boxes, expected.boxes, atol=1e-3, rtol=0)  # pixels
        assert got.labels.tolist() == expected.labels.tolist()
    assert capsys.readouterr().err.count("compiling the model") == 1  # the second image of that size: no compile
    with torch.no_grad():  # the weights are frozen into the graph (inductor's freezing): a later change is not read
        compiled.model.class_embed.bias.add_(5.0)
    torch.testing.assert_close(compiled.predict(image, threshold=0.0)[0].scores, expected.scores, atol=1e-4, rtol=0)


def test_a_compiler_failure_is_one_error_that_says_run_without_compile(fast_run, monkeypatch):
    import torch._inductor.config as inductor

    torch._dynamo.reset()
    monkeypatch.setattr(inductor, "fx_graph_cache", False)  # compile now, not from the cache the test above filled
    monkeypatch.setattr(inductor, "autotune_local_cache", False)
    monkeypatch.setattr(inductor.cpp, "cxx", ("no-such-c++-compiler",))
    detector = Detector.from_run(fast_run, device="cpu", compile=True)
    with pytest.raises(UserError, match="--compile: torch.compile failed on this machine.*without --compile"):
        detector.predict(torch.zeros(3, 40, 40, dtype=torch.uint8))
    torch._dynamo.reset()


def test_compile_is_refused_with_int8_and_with_onnxruntime(fast_run, tmp_path):
    with pytest.raises(ConfigError, match="choose one"):
        Detector.from_run(fast_run, quantize="int8", compile=True)
    result = CliRunner().invoke(load_commands(), ["detect", str(fast_run), str(tmp_path / "x.png"), "--out",
                                                  str(tmp_path / "out"), "--compile", "--backend", "onnxruntime"])
    assert result.exit_code == 2 and "--compile compiles the PyTorch model" in result.output
    assert "Traceback" not in result.output
