"""Faults while a checkpoint is being written: a kill in the middle of the write, a full disk.

A kill inside a write leaves a temporary file next to the checkpoint; it is never loaded, resume
deletes it, and the run still ends as an uninterrupted one. A write that fails (no space, a file
size limit) is a CheckpointError naming the file, and the previous checkpoint stays intact.
"""

from __future__ import annotations

import errno
import os
import resource
import signal
from pathlib import Path

import pytest
from fault_child import killable_processes, train
from torch.testing import assert_close

from attnkit.errors import CheckpointError
from attnkit.storage import RunFolder, atomic_write, checkpoint as checkpoint_module, load_training_state, read_weights

STEPS = 8
_fork = killable_processes()
needs_fork = pytest.mark.skipif(_fork is None, reason="needs fork() to kill a training process")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted run of STEPS steps."""
    path = tmp_path_factory.mktemp("reliability") / "reference"
    train(path, STEPS)
    return path


def _die_inside_write(run_path: Path, call: int) -> None:
    """Train, and SIGKILL this process at safetensors write number CALL, half of the file written."""
    real_save_file, calls = checkpoint_module.save_file, [0]

    def save_file(tensors, filename, metadata=None):
        real_save_file(tensors, filename, metadata=metadata)
        calls[0] += 1
        if calls[0] == call:
            Path(filename).write_bytes(Path(filename).read_bytes()[: os.path.getsize(filename) // 2])
            os.kill(os.getpid(), signal.SIGKILL)

    checkpoint_module.save_file = save_file
    train(run_path, STEPS, resume=(run_path / "config.json").exists())


def _run_forked(target, *args) -> int:
    process = _fork.Process(target=target, args=args, daemon=True)
    process.start()
    process.join(60)
    return process.exitcode


def _assert_same_run(run_path: Path, reference_path: Path) -> None:
    run, reference = RunFolder.open(run_path, "toy"), RunFolder.open(reference_path, "toy")
    losses = lambda run: [(r["step"], r["loss"]) for r in run.metrics() if r["split"] == "train"]  # noqa: E731
    assert losses(run) == losses(reference)
    saved, _ = read_weights(run.last_weights)
    expected, _ = read_weights(reference.last_weights)
    for name, tensor in expected.items():
        assert_close(saved[name], tensor, rtol=0, atol=0)


@needs_fork
def test_a_kill_inside_a_checkpoint_write_leaves_a_temporary_file_that_is_never_loaded(tmp_path, reference):
    run_path = tmp_path / "killed"
    for call in (5, 9):  # writes per step: weights/last, a snapshot, the training state (+ best at validation)
        assert _run_forked(_die_inside_write, run_path, call) == -signal.SIGKILL
        partial = sorted(path.name for path in run_path.rglob(".*.tmp-*"))
        assert len(partial) == 1 and partial[0].startswith("."), partial
        for path in RunFolder.open(run_path, "toy").training_states():
            load_training_state(path)  # the files under their real names are whole
    train(run_path, STEPS, resume=True)
    assert not list(run_path.rglob(".*.tmp-*")), "resume deletes the leftovers of interrupted writes"
    _assert_same_run(run_path, reference)


def test_no_space_left_names_the_file_and_keeps_the_previous_one(tmp_path):
    path = tmp_path / "last.safetensors"
    path.write_bytes(b"the previous checkpoint")

    def fill_the_disk(temporary: Path) -> None:
        with open(temporary, "wb") as file:
            file.write(b"half of a checkpoint")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(temporary))

    with pytest.raises(CheckpointError, match=r"cannot write .*last\.safetensors: No space left on device; "
                                              r"the previous last\.safetensors is intact"):
        atomic_write(path, fill_the_disk)
    assert path.read_bytes() == b"the previous checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.safetensors"]


def _train_under_a_file_size_limit(run_path: Path, limit: int, message_path: Path) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    try:
        train(run_path, STEPS, resume=True)
    except CheckpointError as error:
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        message_path.write_text(str(error))
        os._exit(3)


@needs_fork
def test_a_training_state_the_disk_cannot_hold_stops_the_run_with_the_previous_state_intact(tmp_path, reference):
    run_path, message = tmp_path / "run", tmp_path / "message.txt"
    train(run_path, 3)
    state_size = RunFolder.open(run_path, "toy").training_states()[-1].stat().st_size
    assert _run_forked(_train_under_a_file_size_limit, run_path, state_size // 2, message) == 3
    assert "cannot write" in message.read_text() and "step-00000004.safetensors" in message.read_text()
    assert "File too large" in message.read_text()
    run = RunFolder.open(run_path, "toy")
    assert [p.name for p in run.training_states()][-1] == "step-00000003.safetensors"
    assert load_training_state(run.training_states()[-1])["loop"]["step"] == 3
    train(run_path, STEPS, resume=True)  # with room again, the run continues as if nothing happened
    _assert_same_run(run_path, reference)
