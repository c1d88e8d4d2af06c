"""`attnkit train translation --amp / --accumulate`: shorthands for the config keys, checked before anything is
written."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from attnkit.app.cli import load_commands

SMALL = ["--preset", "tiny", "--set", "model.d_model=16", "--set", "model.num_heads=2", "--set", "model.d_ff=32",
         "--set", "model.num_encoder_layers=1", "--set", "model.num_decoder_layers=1", "--set", "vocab_size=100",
         "--set", "max_tokens=100", "--set", "max_length=32", "--set", "eval_sentences=4"]


def invoke(*args):
    return CliRunner().invoke(load_commands(), [str(a) for a in args])


@pytest.mark.parametrize("options, message", [
    (["--amp", "fp16"], "amp fp16 needs a CUDA device"),
    (["--amp", "fp8"], "amp must be auto, off, bf16 or fp16"),
    (["--accumulate", "0"], "accumulate must be at least 1, got 0"),
])
def test_bad_speed_options_are_one_error_line_and_write_nothing(tmp_path, options, message):
    if options[1] == "fp16" and torch.cuda.is_available():
        pytest.skip("fp16 is allowed on CUDA")
    result = invoke("train", "translation", "--data", "numbers:de", "--out", tmp_path / "run", "--device", "cpu",
                    *options)
    assert result.exit_code == 2, result.output
    assert "error: " in result.output and message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


def test_amp_and_accumulate_reach_the_config_and_resume_must_keep_them(tmp_path):
    data, out = tmp_path / "data", tmp_path / "run"
    assert invoke("data", "numbers", "--out", data, "--max-number", "60").exit_code == 0
    common = ["train", "translation", "--data", data, "--out", out, "--device", "cpu", *SMALL]
    result = invoke(*common, "--steps", "1", "--amp", "off", "--accumulate", "2")
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert (config["amp"], config["accumulate"]) == ("off", 2)
    refused = invoke(*common, "--steps", "2", "--resume", "--amp", "bf16")
    assert refused.exit_code == 2 and "which has amp 'off' (asked: 'bf16')" in refused.output, refused.output
    refused = invoke(*common, "--steps", "2", "--resume", "--set", "label_smoothing=0.3")  # any key it would ignore
    assert refused.exit_code == 2 and "which has label_smoothing 0.1 (asked: 0.3)" in refused.output, refused.output
    refused = invoke(*common, "--steps", "2", "--resume", "--arch", "rnn")  # named options too
    assert refused.exit_code == 2 and "which has arch 'transformer' (asked: 'rnn')" in refused.output, refused.output
    resumed = invoke(*common, "--steps", "2", "--resume", "--accumulate", "2")  # the run's own value: fine
    assert resumed.exit_code == 0 and "at step 2" in resumed.output, resumed.output
