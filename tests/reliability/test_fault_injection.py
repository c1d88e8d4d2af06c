"""Fault injection: a training run killed with SIGKILL at random moments, then resumed, ends where an
uninterrupted run ends: the same losses at every step, the same weights; no partial file is ever loaded.

The run is forked from a fork server with torch and attnkit imported (fault_child.killable_processes),
so each kill costs a fraction of a second instead of a fresh interpreter's start; the kill is a real
SIGKILL of another process all the same.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest
from fault_child import killable_processes, train
from torch.testing import assert_close

from attnkit.errors import CheckpointError
from attnkit.storage import RunFolder, load_training_state, read_weights

STEPS = 40
KILLS = 3
MARGIN = 5  # steps kept free after each kill's target: a loaded machine may kill a few steps late
_fork = killable_processes()
pytestmark = pytest.mark.skipif(_fork is None, reason="needs fork() to kill a training process")


def _train_records(run: RunFolder) -> list[dict]:
    """What must match an uninterrupted run: each step's losses, learning rate, gradient norm, validation."""
    kept = ("step", "split", "loss", "lr", "grad_norm", "noise")
    return [{key: record[key] for key in kept if key in record} for record in run.metrics()]


def _logged_steps(run_path: Path) -> int:
    try:
        return (run_path / "metrics.jsonl").read_bytes().count(b'"split": "train"')
    except FileNotFoundError:
        return 0


def _kill_at(run_path: Path, step: int, extra_s: float, resume: bool) -> int:
    """Start (or resume) the run, SIGKILL it `extra_s` seconds after it logs step `step`; its exit code."""
    process = _fork.Process(target=train, args=(run_path, STEPS, resume), daemon=True)
    process.start()
    deadline = time.monotonic() + 60
    while _logged_steps(run_path) < step and process.is_alive() and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(extra_s)
    os.kill(process.pid, signal.SIGKILL)  # no-op effect if it has already finished
    process.join(30)
    return process.exitcode


def _assert_every_file_is_whole(run_path: Path) -> None:
    """Whatever the kill interrupted, every checkpoint file in the folder reads back and verifies."""
    run = RunFolder.open(run_path, "toy")
    for path in run.training_states():
        load_training_state(path)  # CheckpointError if partial or corrupt
    for path in [*run.snapshots(), run.last_weights, run.best_weights, run.average_weights]:
        if path.exists():
            read_weights(path)
    run.metrics()  # a half-written last line is tolerated, anything else raises


def test_sigkill_at_random_moments_then_resume_matches_an_uninterrupted_run(tmp_path):
    reference = train(tmp_path / "reference", STEPS)  # in this process, before any fork
    reference_run = RunFolder.open(tmp_path / "reference", "toy")
    rng = random.Random(2026)
    run_path, resumed_from = tmp_path / "killed", 0
    for kill in range(KILLS):
        latest = STEPS - MARGIN * (KILLS - kill)
        step = rng.randint(min(resumed_from + 1, latest), latest)
        exit_code = _kill_at(run_path, step, rng.uniform(0.0, 0.05), resume=kill > 0)
        assert exit_code == -signal.SIGKILL, f"kill {kill} at step {step}: the run had already ended"
        _assert_every_file_is_whole(run_path)
        states = RunFolder.open(run_path, "toy").training_states()
        resumed_from = int(states[-1].stem.split("-")[1]) if states else 0
    resumed = train(run_path, STEPS, resume=True)  # in this process, to read its weights directly
    run = RunFolder.open(run_path, "toy")
    assert not list((run_path / "state").glob("*.damaged")), "a training state was damaged by a kill"
    assert _train_records(run) == _train_records(reference_run)
    for name, tensor in reference.model.state_dict().items():
        assert_close(resumed.model.state_dict()[name], tensor, rtol=0, atol=0)
    for which in ("last", "best", "average"):
        saved, _ = read_weights(run.weights_path(which))
        expected, _ = read_weights(reference_run.weights_path(which))
        for name, tensor in expected.items():
            assert_close(saved[name], tensor, rtol=0, atol=0, msg=lambda m, n=name, w=which: f"{w} {n}: {m}")


def test_a_checkpoint_truncated_on_purpose_is_named_and_resume_falls_back(tmp_path, capsys):
    train(tmp_path / "run", 6)
    run = RunFolder.open(tmp_path / "run", "toy")
    previous, newest = run.training_states()[-2:]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=newest.name):
        load_training_state(newest)
    found_path, state = run.load_newest_state()
    assert found_path == previous and state["loop"]["step"] == 5
    assert f"{newest.name} is truncated" in capsys.readouterr().err
    assert (newest.parent / f"{newest.name}.damaged").exists()
    weights = run.last_weights
    weights.write_bytes(weights.read_bytes()[:-7])
    with pytest.raises(CheckpointError, match="last.safetensors is truncated"):
        read_weights(weights)
