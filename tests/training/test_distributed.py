"""Data-parallel training: `attnkit train` under torchrun (2 CPU processes, gloo) against one process.

Two processes with per-process batch B step like one process accumulating two batches of B
(translation), or one process with batches of 2B (detection); a 2-process checkpoint resumes in
one process; bf16 autocast matches fp32 within bf16's tolerance.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch.testing import assert_close
from typer.testing import CliRunner

from attnkit.app.cli import load_commands
from attnkit.training import distributed

TINY_TRANSLATION = ["--preset", "tiny", "--set", "model.d_model=32", "--set", "model.num_heads=2",
                    "--set", "model.d_ff=64", "--set", "model.num_encoder_layers=1",
                    "--set", "model.num_decoder_layers=1", "--set", "vocab_size=200", "--set", "max_tokens=300",
                    "--set", "max_length=64", "--set", "eval_sentences=4", "--set", "model.dropout=0",
                    "--set", "label_smoothing=0"]
TINY_DETECTION = ["--preset", "tiny", "--shapes-train-images", "8", "--shapes-val-images", "2",
                  "--shapes-image-size", "64", "--eval-every-minutes", "10", "--no-flip", "--set", "model.dropout=0"]


def invoke(*args) -> str:
    result = CliRunner().invoke(load_commands(), [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def torchrun(*args, processes: int = 2) -> str:
    """The stderr of `attnkit ARGS` as PROCESSES processes started by torchrun on this machine (gloo, CPU; the
    one-process runs they are compared with say --device cpu too)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
               "--standalone", "-m", "attnkit", *map(str, args)]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=environment)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stderr  # the progress and messages (stdout carries results only)


def train_records(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record["split"] == "train"]


def assert_same_trajectory(a: Path, b: Path, rtol: float) -> None:
    first, second = train_records(a), train_records(b)
    assert [r["step"] for r in first] == [r["step"] for r in second]
    for key in ("loss", "grad_norm"):
        assert_close(torch.tensor([r[key] for r in first]), torch.tensor([r[key] for r in second]),
                     rtol=rtol, atol=0)


@pytest.fixture(scope="module")
def numbers(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("numbers")
    invoke("data", "numbers", "--out", data, "--lang", "fr", "--max-number", "120")
    return data


def test_two_processes_train_translation_like_one_accumulating_two_batches(numbers, tmp_path):
    torch.manual_seed(0)
    common = ["train", "translation", "--data", numbers, *TINY_TRANSLATION, "--set", "amp=off", "--device", "cpu"]
    output = torchrun(*common, "--out", tmp_path / "two", "--steps", "3")
    assert output.count("preset: tiny") == 1  # only rank 0 prints
    assert [p.name for p in (tmp_path / "two" / "state").iterdir()] == ["step-00000003.safetensors"]
    invoke(*common, "--out", tmp_path / "one", "--steps", "3", "--set", "accumulate=2")
    assert_same_trajectory(tmp_path / "two", tmp_path / "one", rtol=1e-5)

    resumed = invoke(*common, "--out", tmp_path / "two", "--steps", "5", "--resume")
    assert "resuming with 1 processes (the run had 2)" in resumed and "at step 5" in resumed
    steps = [record["step"] for record in train_records(tmp_path / "two")]
    assert steps == [3, 5] and all(map(math.isfinite, (r["loss"] for r in train_records(tmp_path / "two"))))


def test_two_processes_train_detection_like_one_with_the_global_batch(tmp_path):
    torch.manual_seed(0)
    import torchvision

    save_file(torchvision.models.resnet18().state_dict(), tmp_path / "resnet18.safetensors")  # frozen BatchNorm
    common = ["train", "detection", "--data", "shapes", *TINY_DETECTION, "--steps", "2", "--device", "cpu",
              "--backbone-weights", tmp_path / "resnet18.safetensors"]
    torchrun(*common, "--out", tmp_path / "two", "--set", "train.batch_size=2")
    assert (tmp_path / "two" / "weights" / "last.safetensors").is_file()
    invoke(*common, "--out", tmp_path / "one", "--set", "train.batch_size=4")
    # boxes are counted over both processes; only the weighted cross-entropy's mean is per process
    assert_same_trajectory(tmp_path / "two", tmp_path / "one", rtol=5e-2)


def test_bf16_autocast_matches_fp32_on_a_tiny_model(numbers, tmp_path):
    torch.manual_seed(0)
    common = ["train", "translation", "--data", numbers, *TINY_TRANSLATION, "--steps", "2"]
    invoke(*common, "--out", tmp_path / "fp32", "--set", "amp=off")
    invoke(*common, "--out", tmp_path / "bf16", "--set", "amp=bf16")
    assert_same_trajectory(tmp_path / "fp32", tmp_path / "bf16", rtol=3e-2)


def test_one_process_needs_no_process_group():
    assert not distributed.active() and distributed.world_size() == 1 and distributed.is_main()
    assert distributed.shard([1, 2, 3]) == [1, 2, 3]
    model = torch.nn.Linear(2, 2)
    assert distributed.wrap(model) is model
    assert distributed.average({"loss": 2.0, "items": 3.0}, summed=("items",)) == {"loss": 2.0, "items": 3.0}
