"""What the loop asks of a task (the `TrainingTask` protocol) and what it gives back: the fraction of the budget
spent to the learning-rate schedule, each process's shard of the batches, the end-of-run callbacks."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close
from toy_task import ToyRegression

from attnkit.storage import RunFolder
from attnkit.training import Budget, FitResult, LoopConfig, Trainer, TrainingDiverged, distributed
from attnkit.training.batch_stream import BatchStream
from attnkit.training.budget import spent_fraction, steps_in_epochs
from attnkit.training.loop_state import LoopState
from attnkit.training.task import MEMBERS

QUIET = LoopConfig(log_every_steps=1, checkpoint_every_minutes=None, average_last=0)


class Recorded:
    """TASK behind a proxy that notes the name of every attribute the loop reads."""

    def __init__(self, task: ToyRegression) -> None:
        object.__setattr__(self, "task", task)
        object.__setattr__(self, "used", set())

    def __getattr__(self, name: str):
        self.used.add(name)
        return getattr(self.task, name)

    def __dir__(self):
        return dir(self.task)


def test_the_protocol_declares_every_member_the_loop_uses_and_no_other(tmp_path):
    assert MEMBERS == ("model", "optimizer", "best_metric", "items_name", "lr_factor", "batches", "load",
                       "train_step", "evaluate", "state", "load_state")
    used: set[str] = set()
    for steps, resume in ((2, False), (4, True)):  # fit, then resume: every member, load_state included
        torch.manual_seed(0)
        task = Recorded(ToyRegression())
        run = RunFolder.create(tmp_path / "run", "toy", {}, resume=resume)
        config = LoopConfig(eval_every_steps=2, checkpoint_every_steps=2, checkpoint_every_minutes=None)
        Trainer(task, run, Budget(steps=steps), config, progress=False).fit(resume=resume)
        used |= task.used
    assert used == set(MEMBERS)


@pytest.mark.parametrize("member", MEMBERS)
def test_a_task_without_a_member_is_a_type_error_naming_it(tmp_path, member):
    class Partial:
        pass

    task, partial = ToyRegression(), Partial()
    for name in MEMBERS:
        if name != member:
            setattr(partial, name, getattr(task, name))
    with pytest.raises(TypeError, match=rf"^Partial is not a TrainingTask: it has no {member}$"):
        Trainer(partial, RunFolder.create(tmp_path / "run", "toy", {}), Budget(steps=1), progress=False)


def test_a_module_is_not_a_task(tmp_path):
    with pytest.raises(TypeError, match="^Linear is not a TrainingTask: it has no model, optimizer, best_metric, "
                                        "items_name, lr_factor, batches, load, train_step, evaluate, state, "
                                        "load_state$"):
        Trainer(torch.nn.Linear(1, 1), RunFolder.create(tmp_path / "x", "toy", {}), Budget(steps=1))


class Schedule(ToyRegression):
    """The toy task, remembering what the loop gave its learning-rate schedule."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.asked: list[tuple[int, float]] = []

    def lr_factor(self, step: int, budget_spent: float) -> float:
        self.asked.append((step, budget_spent))
        return 0.1 if budget_spent >= 0.5 else 1.0  # DETR's drop, after half the budget


@pytest.mark.parametrize("budget, steps", [(Budget(steps=4), 4), (Budget(epochs=1), 7), (Budget(epochs=2, steps=5), 5)])
def test_the_schedule_gets_the_fraction_of_the_budget_each_update_completes(tmp_path, budget, steps):
    """One call when the scheduler is made (step 0, nothing spent), then one per update: k of `steps` updates."""
    task = Schedule(lr=1e-2)  # 7 batches an epoch, one per step
    run = RunFolder.create(tmp_path / "run", "toy", {})
    Trainer(task, run, budget, QUIET, progress=False).fit()
    assert task.asked == [(k, k / steps) for k in range(steps + 1)]
    rates = [record["lr"] for record in run.metrics() if record["split"] == "train"]
    half = -(-steps // 2)  # the updates that leave less than half of the budget spent use the full rate
    assert_close(rates, [1e-2] * half + [1e-3] * (steps - half), rtol=1e-6, atol=0)


class Drawing(Schedule):
    """The schedule's toy task, remembering the last fraction it had heard of when each epoch was drawn."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.drawn_after: list[float] = []

    def batches(self, epoch: int):
        self.drawn_after.append(self.asked[-1][1] if self.asked else 0.0)
        return super().batches(epoch)


def test_a_resumed_run_tells_the_task_where_the_budget_stands_before_drawing_batches(tmp_path):
    """A task that draws its batches by the budget (mosaics until the learning-rate drop) must not see a
    fresh run's 0 on resume: 4 steps of 6 are spent, so the first epoch drawn is drawn after the drop."""
    Trainer(Schedule(lr=1e-2), RunFolder.create(tmp_path / "run", "toy", {}), Budget(steps=4), QUIET,
            progress=False).fit()
    task = Drawing(lr=1e-2)
    Trainer(task, RunFolder.open(tmp_path / "run"), Budget(steps=6), QUIET, progress=False).fit(resume=True)
    assert task.drawn_after[0] == pytest.approx(4 / 6)


def test_the_fraction_of_the_budget_is_the_largest_of_steps_epochs_and_minutes():
    assert spent_fraction(Budget(steps=8), 2, elapsed_s=1e6, epoch_steps=None) == 0.25
    assert spent_fraction(Budget(minutes=10), 2, elapsed_s=150.0, epoch_steps=None) == 0.25
    assert spent_fraction(Budget(steps=8, minutes=10), 2, elapsed_s=300.0, epoch_steps=None) == 0.5
    assert spent_fraction(Budget(epochs=3), 3, elapsed_s=0.0, epoch_steps=12) == 0.25
    assert spent_fraction(Budget(epochs=3), 3, elapsed_s=0.0, epoch_steps=None) == 0.0  # no epoch open yet
    assert spent_fraction(Budget(minutes=1), 3, elapsed_s=90.0, epoch_steps=None) == 1.0
    assert steps_in_epochs(Budget(epochs=3), epoch_length=7, accumulate=2) == 11  # ceil(21 / 2)
    assert steps_in_epochs(Budget(epochs=3, steps=5), epoch_length=7, accumulate=2) == 5


class Listed(ToyRegression):
    """Batches 0..6 of every epoch; `load` remembers which it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[list[int]] = []

    def batches(self, epoch: int):
        return [10 * epoch + i for i in range(7)]

    def load(self, batches):
        self.loaded.append(list(batches))
        return batches


def test_each_process_reads_its_shard_and_a_resume_loads_none_of_the_used_batches(monkeypatch):
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.setattr(distributed, "rank", lambda: 1)
    task = Listed()
    stream = BatchStream(task, LoopState(epoch=1, position=1, world_size=2), max_epochs=3)
    assert stream.take(2) == [13, 15] and stream.take(2) == [21, 23]  # the rest of epoch 1 (11 was used), epoch 2
    assert task.loaded == [[13, 15], [21, 23, 25]] and stream.epoch_length == 3  # x6: for no process


class Ending:
    """An at_end callback: what it was called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[RunFolder, FitResult]] = []

    def __call__(self, run: RunFolder, result: FitResult) -> None:
        self.calls.append((run, result))


def test_the_at_end_callbacks_get_the_run_and_the_result_whatever_the_ending(tmp_path):
    first, second = Ending(), Ending()
    run = RunFolder.create(tmp_path / "run", "toy", {})
    result = Trainer(ToyRegression(), run, Budget(steps=3), QUIET, progress=False, at_end=[first, second]).fit()
    assert first.calls == second.calls == [(run, result)] and result.stop_reason == "steps"
    assert not run.curves_path.exists()  # drawn by the default callback only, replaced here
    diverged, diverging = Ending(), ToyRegression(nan_steps=set(range(100)))
    run = RunFolder.create(tmp_path / "diverged", "toy", {})
    with pytest.raises(TrainingDiverged):
        Trainer(diverging, run, Budget(steps=3), LoopConfig(max_nonfinite=2, checkpoint_every_minutes=None),
                progress=False, at_end=[diverged]).fit()
    [(called_run, called_result)] = diverged.calls
    assert called_run is run and (called_result.stop_reason, called_result.nonfinite_total) == ("diverged", 2)


def test_by_default_the_end_draws_the_curves(tmp_path):
    run = RunFolder.create(tmp_path / "run", "toy", {})
    Trainer(ToyRegression(), run, Budget(steps=2), QUIET, progress=False).fit()
    assert run.curves_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
