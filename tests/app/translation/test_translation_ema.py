"""`attnkit train translation --ema DECAY`: the config field, weights/ema and ema_<metric> in validation."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from attnkit.app.cli import load_commands
from attnkit.storage import RunFolder

SMALL = ["--preset", "tiny", "--set", "model.d_model=16", "--set", "model.num_heads=2", "--set", "model.d_ff=32",
         "--set", "model.num_encoder_layers=1", "--set", "model.num_decoder_layers=1", "--set", "vocab_size=100",
         "--set", "max_tokens=100", "--set", "max_length=32", "--set", "eval_sentences=4"]


def invoke(*args):
    return CliRunner().invoke(load_commands(), [str(a) for a in args])


def test_ema_is_saved_validated_and_kept_in_the_config(tmp_path):
    data, out = tmp_path / "data", tmp_path / "run"
    assert invoke("data", "numbers", "--out", data, "--max-number", "60").exit_code == 0
    result = invoke("train", "translation", "--data", data, "--out", out, "--device", "cpu", *SMALL, "--steps", "2",
                    "--ema", "0.9")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "config.json").read_text())["ema_decay"] == 0.9
    assert RunFolder.open(out).weights_path("ema").is_file()
    valid = [r for r in RunFolder.open(out).metrics() if r["split"] == "valid"]
    assert {"ema_loss", "ema_bleu", "ema_chrf"} <= set(valid[-1])
    translated = invoke("translate", out, "seven", "--weights", "ema", "--beam-size", "1")
    assert translated.exit_code == 0, translated.output


def test_a_decay_outside_0_1_is_one_error_line(tmp_path):
    result = invoke("train", "translation", "--data", "numbers:de", "--out", tmp_path / "run", "--device", "cpu",
                    "--ema", "1.5")
    assert result.exit_code == 2 and "ema_decay must be between 0 and 1" in result.output, result.output
    assert not (tmp_path / "run").exists()
