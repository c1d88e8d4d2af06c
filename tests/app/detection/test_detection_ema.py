"""`attnkit train detection --ema DECAY`: train.ema_decay reaches the loop; a bad decay is refused early."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from attnkit.app.cli import load_commands
from attnkit.app.detection.recipe import loop_config
from attnkit.detection.config import DetectionConfig, override, preset
from attnkit.detection.detector import Detector
from attnkit.errors import ConfigError
from attnkit.storage import RunFolder, read_weights


def test_train_ema_decay_is_the_loops():
    model, train = preset("tiny")
    config = override(DetectionConfig(model, train), ["train.ema_decay=0.99"])
    assert loop_config(config, torch.device("cpu")).ema_decay == 0.99
    assert loop_config(DetectionConfig(model, train), torch.device("cpu")).ema_decay is None  # off by default
    assert DetectionConfig.from_dict(config.to_dict()).train.ema_decay == 0.99
    with pytest.raises(ConfigError, match="ema_decay must be between 0 and 1"):
        override(DetectionConfig(model, train), ["train.ema_decay=1"])


def test_a_bad_ema_option_is_one_error_line_and_writes_nothing(tmp_path):
    result = CliRunner().invoke(load_commands(), ["train", "detection", "--data", "shapes", "--out",
                                                  str(tmp_path / "run"), "--device", "cpu", "--ema", "2"])
    assert result.exit_code == 2 and "ema_decay must be between 0 and 1" in result.output, result.output
    assert not (tmp_path / "run").exists()


def test_a_detector_trains_with_an_ema_validated_and_saved(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(load_commands(), [
        "train", "detection", "--data", "shapes", "--shapes-train-images", "4", "--shapes-val-images", "2",
        "--shapes-image-size", "64", "--preset", "tiny", "--steps", "2", "--eval-every-minutes", "10",
        "--device", "cpu", "--out", str(out), "--ema", "0.9"])
    assert result.exit_code == 0, result.output
    run = RunFolder.open(out)
    valid = [r for r in run.metrics() if r["split"] == "valid"][-1]
    assert {"AP", "ema_AP", "ema_AP50"} <= set(valid), valid
    ema, _ = read_weights(run.weights_path("ema"))
    last, _ = read_weights(run.last_weights)
    assert ema.keys() == last.keys()
    Detector.from_run(out, weights="ema", device="cpu")  # --weights ema loads
