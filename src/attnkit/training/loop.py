"""The training loop every long job runs: `Trainer(task, run, budget, config).fit(resume)`.

A task (`TrainingTask`: translation, detection, a test's toy regression) supplies the model, the
optimizer, the data and what one step means; the loop supplies everything else:

  - data parallelism: each process reads its shard of every epoch (`distributed.shard`) and trains
    through DistributedDataParallel around the task's model (`distributed.wrap`); with `compile`,
    through `torch.compile` of that (checkpoints keep the eager module's names, without `_orig_mod.`);
  - mixed precision (`amp="bf16"` on CPU or CUDA; `"fp16"` on CUDA only, with a GradScaler),
    gradient accumulation over `accumulate` batches, gradient clipping, the optimizer step, and the
    learning-rate schedule: a LambdaLR of the task's `lr_factor(step, budget_spent)`;
  - a step whose loss (or gradient norm) is not finite is skipped and counted; `max_nonfinite` of
    them in a row stop the run with TrainingDiverged, keeping the last good checkpoint;
  - training metrics every `log_every_steps` steps and validation every `eval_every_steps` steps
    or `eval_every_minutes` minutes and at the end, appended to the run's metrics.jsonl;
  - checkpoints every `checkpoint_every_steps` steps or `checkpoint_every_minutes` minutes and
    at the end (`checkpointing.py`): weights/last, weights/best (by the task's `best_metric`),
    weights/average and the training state;
  - with `ema_decay`, a moving average of the weights updated after every optimizer step (`ema.py`),
    validated too (logged as ema_<metric>) and saved as weights/ema and in the training state; weights/best
    is then whichever of the model and the average scored best (its metadata says which);
  - once it stops, the `at_end` callbacks (`callbacks.py`: RUN/curves.png by default; the command
    line adds the run report);
  - stops on the budget (steps, epochs or minutes, whichever comes first) or on Ctrl-C: the step
    under way finishes, the state is saved, then KeyboardInterrupt is raised as usual (a second
    Ctrl-C aborts at once, without saving);
  - `fit(resume=True)` restores weights, optimizer, scheduler, scaler, step, epoch, position in
    the epoch, RNG states and the task's own state, so the losses that follow are those of an
    uninterrupted run (bit for bit on CPU).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from attnkit.errors import ConfigError
from attnkit.storage import RunFolder
from attnkit.training import distributed
from attnkit.training.batch_stream import BatchStream
from attnkit.training.budget import Budget, LoopConfig, spent_fraction, steps_in_epochs
from attnkit.training.callbacks import AtEnd, plot_curves
from attnkit.training.checkpointing import Checkpoints
from attnkit.training.compilation import compile_errors
from attnkit.training.ema import WeightsEma, weights_swapped
from attnkit.training.interrupt import ctrl_c_as_flag
from attnkit.training.loop_state import LoopState
from attnkit.training.messages import note
from attnkit.training.progress import Progress, estimate_eta
from attnkit.training.result import FitResult, StopReason, TrainingDiverged
from attnkit.training.rng import isolated_rng
from attnkit.training.task import TrainingTask, check_task

_REASONS: tuple[StopReason | None, ...] = (None, "steps", "minutes", "interrupted")  # as rank 0 says, before a step


class Trainer:
    """Trains `task` in `run` until `budget` is spent; see the module docstring for what it does.

    at_end: called on rank 0 with the run folder and the `FitResult` once training stops, whatever the
    reason; the default draws RUN/curves.png (pass `plot_curves` along with callbacks of your own to keep it).
    """

    def __init__(self, task: TrainingTask, run: RunFolder, budget: Budget,
                 config: LoopConfig = LoopConfig(),  # noqa: B008 - frozen
                 progress: bool = True, at_end: Sequence[AtEnd] = (plot_curves,)) -> None:
        check_task(task)
        self.task, self.run, self.budget, self.config, self.show_progress = task, run, budget, config, progress
        self.at_end = at_end  # called on rank 0 once training stops, saved
        self.best_metric, self.best_mode = task.best_metric
        if self.best_mode not in ("max", "min"):
            raise ConfigError(f"best_metric mode must be 'max' or 'min', got {self.best_mode!r}")
        parameter = next(task.model.parameters(), None)
        self.device = parameter.device if parameter is not None else torch.device("cpu")
        if config.amp == "fp16" and self.device.type != "cuda":
            raise ConfigError(f"amp='fp16' needs a CUDA device (the model is on {self.device}); use 'bf16'")
        self.scaler = torch.amp.GradScaler("cuda") if config.amp == "fp16" else None
        self.budget_spent = 0.0  # of the budget, once the update under way is done: what `lr_factor` is given
        self.scheduler = LambdaLR(task.optimizer, lambda step: task.lr_factor(step, self.budget_spent))
        self.synced = distributed.wrap(task.model)  # DDP around the model when several processes train
        self.train_module = cast(nn.Module, torch.compile(self.synced, backend=config.compile_backend)) \
            if config.compile else self.synced  # what `train_step` runs
        self._compile_pending = config.compile  # until the first compiled step has run
        self.ema = WeightsEma(task.model, config.ema_decay) if config.ema_decay is not None else None
        self.state = LoopState()
        self.last_loss: float | None = None
        self._epoch_steps: int | None = None  # optimizer steps the epoch budget allows, once an epoch is open

    @property
    def checkpoints(self) -> Checkpoints:
        """The run's checkpoint files for this trainer's task, scheduler and (current) loss scaler."""
        return Checkpoints(self.run, self.task, self.scheduler, self.scaler, self.config, self.ema)

    # ------------------------------------------------------------ the loop
    def fit(self, resume: bool = False) -> FitResult:
        """Train until the budget is spent and return what happened.

        Ctrl-C: saves, then raises KeyboardInterrupt. Divergence: raises TrainingDiverged.
        """
        with distributed.main_first():  # rank 0 repairs the run folder before the others read it
            self.state = self.checkpoints.restore() if resume else LoopState(world_size=distributed.world_size())
        self._started, self._elapsed_before = time.monotonic(), self.state.elapsed_s
        if resume:  # the task hears where the budget stands before it draws the first epoch's batches
            self.budget_spent = spent_fraction(self.budget, self.state.step, self.state.elapsed_s, None)
            self.task.lr_factor(self.state.step, self.budget_spent)
        self._last_eval_time = self._last_checkpoint_time = self._window_time = time.monotonic()
        stream = BatchStream(self.task, self.state, self.budget.epochs)
        progress = Progress(self.budget.steps, self.state.step, self.task.items_name,
                            enabled=self.show_progress and distributed.is_main())
        try:
            with ctrl_c_as_flag() as interrupted:
                reason = self._run(stream, progress, interrupted)
            result = self._finish(reason, stream, progress)
        finally:
            progress.close()
        note(result.summary(self.run))
        if distributed.is_main():
            for callback in self.at_end:
                callback(self.run, result)
        if reason == "interrupted":  # saved: now behave like any Ctrl-C (the CLI exits with code 130)
            raise KeyboardInterrupt
        if reason == "diverged":
            last = self.state.last_checkpoint_step
            kept = "no checkpoint had been written yet" if last is None else \
                f"the last good checkpoint (step {last}) is kept in {self.run.path}"
            raise TrainingDiverged(
                f"{self.config.max_nonfinite} non-finite losses in a row at step {self.state.step}; {kept}. "
                "Lower the learning rate, clip gradients (grad_clip) or turn off fp16.")
        return result

    def _run(self, stream: BatchStream, progress: Progress, interrupted: threading.Event) -> StopReason:
        state = self.state
        while True:
            reason = self._out_of_budget() or ("interrupted" if interrupted.is_set() else None)
            reason = _REASONS[distributed.from_main(_REASONS.index(reason))]  # rank 0's clock decides for all
            if reason:
                return reason
            group = stream.take(self.config.accumulate)
            if not group:
                return "epochs"
            if self.budget.epochs is not None and stream.epoch_length:
                self._epoch_steps = steps_in_epochs(self.budget, stream.epoch_length, self.config.accumulate)
                if progress.total is None:
                    progress.set_total(self._epoch_steps)
            outcome = self._step(group)
            if outcome is None:
                state.nonfinite_total += 1
                state.nonfinite_in_a_row += 1
                progress.warn(f"step {state.step + 1}: non-finite loss or gradient, step skipped "
                              f"({state.nonfinite_in_a_row} in a row, {state.nonfinite_total} in all)")
                if state.nonfinite_in_a_row >= self.config.max_nonfinite:
                    return "diverged"
                continue
            state.nonfinite_in_a_row = 0
            state.step += 1
            progress.advance()
            self._add_to_window(outcome)
            if distributed.is_main():  # rank 0 logs, validates and checkpoints
                self._after_step(progress, stream)

    def _after_step(self, progress: Progress, stream: BatchStream) -> None:
        config = self.config
        if self.state.step % config.log_every_steps == 0:
            self._log_training(progress, stream)
        if self._due(config.eval_every_steps, config.eval_every_minutes, self._last_eval_time):
            self._outside_window(lambda: self._evaluate(progress))
        if self._due(config.checkpoint_every_steps, config.checkpoint_every_minutes, self._last_checkpoint_time):
            self._outside_window(self._checkpoint)

    def _finish(self, reason: StopReason, stream: BatchStream, progress: Progress) -> FitResult:
        state = self.state
        if distributed.is_main():
            if state.window.get("steps"):
                self._log_training(progress, stream)
            if reason != "diverged" and state.last_checkpoint_step != state.step:
                self._checkpoint()  # before the last validation, so that a Ctrl-C during it loses nothing
            if reason not in ("diverged", "interrupted") and state.last_eval_step != state.step:
                self._evaluate(progress)
                self._save_state()  # again, now with the validation's best metric
            self.checkpoints.write_average()
        return FitResult(reason, state.step, state.epoch, self.elapsed, self.last_loss, self.best_metric,
                         state.best_value, state.best_step, state.nonfinite_total)

    @property
    def elapsed(self) -> float:
        return self._elapsed_before + time.monotonic() - self._started

    def _out_of_budget(self) -> StopReason | None:
        if self.budget.steps is not None and self.state.step >= self.budget.steps:
            return "steps"
        if self.budget.minutes is not None and self.elapsed >= 60 * self.budget.minutes:
            return "minutes"
        return None

    def _due(self, every_steps: int | None, every_minutes: float | None, since: float) -> bool:
        by_steps = every_steps is not None and self.state.step % every_steps == 0
        by_time = every_minutes is not None and time.monotonic() - since >= 60 * every_minutes
        return by_steps or by_time

    # ------------------------------------------------------------ one step
    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.config.amp == "off":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.config.amp == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def _step(self, group: list[Any]) -> dict[str, float] | None:
        """Forward and backward over the group's batches, then one update; None if skipped as non-finite."""
        self.task.model.train()
        with compile_errors(self.config.compile_backend, self.run.path) if self._compile_pending \
                else contextlib.nullcontext():
            sums = self._forward_backward(group)
        self._compile_pending = False
        if sums is None:
            return None
        lr = float(self.task.optimizer.param_groups[0]["lr"])
        grad_norm = self._update()
        if grad_norm is None:
            return None
        means = {key: total / len(group) for key, total in sums.items() if key != "items"}
        return {**means, "items": sums["items"], "lr": lr, "grad_norm": grad_norm}

    def _forward_backward(self, group: list[Any]) -> dict[str, float] | None:
        """The gradients of the group's mean loss; the sums of the outputs, or None if a loss was not finite."""
        sums: dict[str, float] = {"loss": 0.0, "items": 0.0}
        for index, batch in enumerate(group):
            # gradients are averaged across processes once per update, at the group's last batch
            with distributed.no_sync(self.synced) if index < len(group) - 1 else contextlib.nullcontext():
                with self._autocast():
                    output = self.task.train_step(self.train_module, batch)
                loss = output["loss"]
                value = float(loss.detach())
                if not distributed.all_true(math.isfinite(value)):  # every process skips, or none
                    self.task.optimizer.zero_grad(set_to_none=True)
                    return None
                scaled = loss / len(group)  # the mean over the group's batches
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            for key, item in output.items():
                sums[key] = sums.get(key, 0.0) + (value if key == "loss" else float(item))
        return distributed.average(sums, summed=("items",))  # the global batch's means; items of all processes

    def _update(self) -> float | None:
        """Clip, step the optimizer and the scheduler; the gradient norm, or None if it was not finite."""
        optimizer = self.task.optimizer
        parameters = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)
        if self.config.grad_clip is not None:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(parameters, self.config.grad_clip))
        else:
            grad_norm = float(torch.nn.utils.get_total_norm([p.grad for p in parameters]))
        stepped = True
        if self.scaler is not None:  # the scaler skips steps with inf/nan gradients and lowers its scale
            scale = self.scaler.get_scale()
            self.scaler.step(optimizer)
            self.scaler.update()
            stepped = self.scaler.get_scale() >= scale
        elif not math.isfinite(grad_norm):
            optimizer.zero_grad(set_to_none=True)
            return None
        else:
            optimizer.step()
        if stepped:  # the learning rates of the next update, as the budget will be once this one is done
            self.budget_spent = spent_fraction(self.budget, self.state.step + 1, self.elapsed, self._epoch_steps)
            self.scheduler.step()
            if self.ema is not None:
                self.ema.update(self.task.model)
        optimizer.zero_grad(set_to_none=True)
        return grad_norm

    # ------------------------------------------------------------ metrics
    def _add_to_window(self, outcome: dict[str, float]) -> None:
        window = self.state.window
        window["steps"] = window.get("steps", 0) + 1
        for key, value in outcome.items():
            if key == "lr":
                window["lr"] = value  # the latest, not a mean
            elif math.isfinite(value):
                window[key] = window.get(key, 0.0) + value

    def _log_training(self, progress: Progress, stream: BatchStream) -> None:
        window, now = self.state.window, time.monotonic()
        steps, seconds = window.pop("steps"), max(now - self._window_time, 1e-9)
        items = window.pop("items", 0.0)
        record = {key: (value if key == "lr" else value / steps) for key, value in window.items()}
        record[f"{self.task.items_name}_per_s"] = items / seconds
        self.run.log({"step": self.state.step, "split": "train", "epoch": self.state.epoch,
                      "elapsed_s": round(self.elapsed, 2), **record})
        self.last_loss = record["loss"]
        progress.report(self.state.step, record["loss"], record.get("lr", math.nan), items / seconds,
                        self._eta(seconds / steps, stream))
        self.state.window, self._window_time = {}, now

    def _outside_window(self, action: Any) -> None:
        """Run `action` (validation, a checkpoint) without counting its time in the logged throughput."""
        started = time.monotonic()
        try:
            action()
        finally:
            self._window_time += time.monotonic() - started

    def _eta(self, seconds_per_step: float, stream: BatchStream) -> float | None:
        budget, state = self.budget, self.state
        by_steps = None if budget.steps is None else (budget.steps - state.step) * seconds_per_step
        by_minutes = None if budget.minutes is None else 60 * budget.minutes - self.elapsed
        by_epochs = None
        if budget.epochs is not None and stream.epoch_length:
            batches_left = (budget.epochs - state.epoch) * stream.epoch_length - state.position
            by_epochs = batches_left / self.config.accumulate * seconds_per_step
        return estimate_eta([by_steps, by_minutes, by_epochs])

    def _evaluate(self, progress: Progress) -> None:
        """Validation metrics, without moving the training run's random generators."""
        model, state = self.task.model, self.state
        model.eval()
        with isolated_rng(), torch.no_grad():
            metrics = _scalars(self.task.evaluate())
        if self.ema is not None:  # the average's scores beside the model's; weights/best is the better of the two
            with isolated_rng(), torch.no_grad(), weights_swapped(model, self.ema.weights()):
                metrics |= {f"ema_{key}": value for key, value in _scalars(self.task.evaluate()).items()}
        model.train()
        state.last_eval_step, self._last_eval_time = state.step, time.monotonic()
        if not metrics:  # the task has no validation data
            return
        self.run.log({"step": state.step, "split": "valid", "epoch": state.epoch, **metrics})
        progress.write(f"step {state.step} validation: " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
        if self.best_metric not in metrics:
            progress.warn(f"no {self.best_metric!r} among the validation metrics, so weights/best is not written")
            return
        value, source = metrics[self.best_metric], "model"
        ema_value = metrics.get(f"ema_{self.best_metric}")
        if ema_value is not None and math.isfinite(ema_value) and not self._better_or_equal(value, ema_value):
            value, source = ema_value, "ema"  # the average scored better: weights/best holds it
        if math.isfinite(value) and (state.best_value is None or not self._better_or_equal(state.best_value, value)):
            state.best_value, state.best_step = value, state.step
            weights = self.ema.weights() if source == "ema" and self.ema is not None else model.state_dict()
            self.checkpoints.save_best(state, self.best_metric, weights, source)

    def _better_or_equal(self, value: float, other: float) -> bool:
        """VALUE of the best metric is at least as good as OTHER (False if VALUE is not finite)."""
        return math.isfinite(value) and (value >= other if self.best_mode == "max" else value <= other)

    def _checkpoint(self) -> None:
        self.state.elapsed_s = self.elapsed
        self.checkpoints.save(self.state)
        self._last_checkpoint_time = time.monotonic()

    def _save_state(self) -> None:
        self.state.elapsed_s = self.elapsed
        self.checkpoints.save_state(self.state)


def _scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The metrics that are single numbers (Python numbers or one-element tensors), as floats."""
    return {key: float(value) for key, value in metrics.items()
            if isinstance(value, (int, float)) or (isinstance(value, torch.Tensor) and value.numel() == 1)}
