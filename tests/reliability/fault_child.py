"""The training run the fault-injection test kills: the toy task, logging and checkpointing every step.

Every step writes a metrics line, weights/last, a snapshot and a training state, so that a
SIGKILL at a random moment lands inside a step, a metrics write or a checkpoint write alike.
Run in a killable process (`killable_processes`) by tests/reliability/test_fault_injection.py and
test_write_faults.py; also runnable by hand:

    python tests/reliability/fault_child.py RUN STEPS [--resume]
"""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))

import torch  # noqa: E402
from toy_task import ToyRegression  # noqa: E402

from attnkit.storage import RunFolder  # noqa: E402
from attnkit.training import Budget, LoopConfig, Trainer  # noqa: E402

CONFIG = LoopConfig(log_every_steps=1, eval_every_steps=4, checkpoint_every_steps=1,
                    checkpoint_every_minutes=None, average_last=3)


def killable_processes():
    """The multiprocessing context of the runs the tests kill, or None without fork(): processes forked from
    a fork server that has torch and attnkit imported, so each start costs a fork rather than an
    interpreter's start, and the kill is a real SIGKILL of another process. Not forked from the test
    process: a process forked from one that has run autograd on a GPU cannot run autograd."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "attnkit.training", "fault_child"])
    return context


def train(path: Path, steps: int, resume: bool = False) -> ToyRegression:
    """Train the toy task in run folder PATH to STEPS steps (continuing the run there if RESUME)."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        torch.manual_seed(99)  # dropout draws from the global generator: resume must restore it
        task = ToyRegression(batches_per_epoch=5)
        run = RunFolder.create(path, "toy", {"lr": 1e-2}, resume=resume)
        Trainer(task, run, Budget(steps=steps), CONFIG, progress=False).fit(resume=resume)
    finally:  # the tests run this in the test process too: leave its settings as they were
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    return task


if __name__ == "__main__":
    train(Path(sys.argv[1]), int(sys.argv[2]), resume="--resume" in sys.argv[3:])
