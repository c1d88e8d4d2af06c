"""The training loop every long job runs: `Trainer(task, run, budget, config).fit(resume)`.

A task (translation, detection, a test's toy regression) supplies the model and what one step
means; the loop supplies everything else:

  - mixed precision (`amp="bf16"` on CPU or CUDA; `"fp16"` on CUDA only, with a GradScaler),
    gradient accumulation over `accumulate` batches, gradient clipping, optimizer and LR scheduler
    steps; with `compile`, training runs through `torch.compile` of the module `train_step` calls
    (checkpoints keep the uncompiled module's names, without `_orig_mod.`);
  - a step whose loss (or gradient norm) is not finite is skipped and counted; `max_nonfinite` of
    them in a row stop the run with TrainingDiverged, keeping the last good checkpoint;
  - training metrics every `log_every_steps` steps and validation every `eval_every_steps` steps
    or `eval_every_minutes` minutes and at the end, appended to the run's metrics.jsonl;
  - checkpoints every `checkpoint_every_steps` steps or `checkpoint_every_minutes` minutes and
    at the end: weights/last, weights/best (by the task's `best_metric`), weights/average (the
    mean of the last `average_last` checkpoints) and the training state;
  - at the end of every run, whatever the caller asks for (`at_end`: the command line writes the
    run report there);
  - stops on the budget (steps, epochs or minutes, whichever comes first) or on Ctrl-C: the step
    under way finishes, the state is saved, then KeyboardInterrupt is raised as usual (a second
    Ctrl-C aborts at once, without saving);
  - `fit(resume=True)` restores weights, optimizer, scheduler, scaler, step, epoch, position in
    the epoch, RNG states and the task's own state, so the losses that follow are those of an
    uninterrupted run (bit for bit on CPU).

The resume guarantee asks one thing of the task: `batches(epoch)` must yield the same batches in
the same order whenever it is called for the same epoch (shuffle with a generator seeded from
the seed and the epoch, not the global RNG), because resuming calls it again and skips the
batches the interrupted run had used.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from itertools import islice
from typing import Any, Literal, Protocol

import torch
from torch import nn

from attnkit.errors import CheckpointError, ConfigError, DataError, UserError
from attnkit.training import distributed
from attnkit.training.averaging import average_weights
from attnkit.storage.checkpoint import check_state_dict, save_weights
from attnkit.training.progress import Progress, estimate_eta, format_duration
from attnkit.training.rng import capture_rng, isolated_rng, restore_rng
from attnkit.storage.run_folder import RunFolder


class TrainingDiverged(UserError):
    """Too many non-finite losses in a row: the run stopped; its last good checkpoint is kept."""


@dataclass(frozen=True)
class Budget:
    """How long to train: the first of `steps` optimizer steps, `epochs` passes over the data, `minutes`.

    All three count from the start of the run, across resumptions: a run stopped at step 400 and
    resumed with `Budget(steps=1000)` trains 600 more steps; minutes are training time, not wall time.
    """

    steps: int | None = None
    epochs: int | None = None
    minutes: float | None = None

    def __post_init__(self) -> None:
        if self.steps is None and self.epochs is None and self.minutes is None:
            raise ConfigError("a training budget needs at least one of steps, epochs or minutes")
        for name in ("steps", "epochs", "minutes"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"budget {name} must be positive, got {value}")


@dataclass(frozen=True)
class LoopConfig:
    """The loop's settings (the task's own hyper-parameters live in the task's config)."""

    eval_every_steps: int | None = None
    eval_every_minutes: float | None = None
    log_every_steps: int = 10
    grad_clip: float | None = None  # max global L2 norm of the gradient
    accumulate: int = 1  # batches per optimizer step
    amp: Literal["off", "bf16", "fp16"] = "off"
    checkpoint_every_steps: int | None = None
    checkpoint_every_minutes: float | None = 10.0  # the Transformer paper's checkpoint interval
    average_last: int = 5  # checkpoints averaged into weights/average (0 or 1: no average)
    keep_states: int = 2  # training states kept, so resume can fall back on a damaged newest one
    max_nonfinite: int = 10  # non-finite losses in a row before the run stops
    compile: bool = False  # train through torch.compile(task.train_model); saved weights stay uncompiled
    compile_backend: str | Callable[..., Any] = "inductor"  # torch.compile's backend ("aot_eager": no kernels)

    def __post_init__(self) -> None:
        if self.amp not in ("off", "bf16", "fp16"):
            raise ConfigError(f"amp must be 'off', 'bf16' or 'fp16', got {self.amp!r}")
        if self.compile and not self.compile_backend:
            raise ConfigError("compile needs a compile_backend, e.g. 'inductor'")
        for name in ("eval_every_steps", "eval_every_minutes", "grad_clip", "checkpoint_every_steps",
                     "checkpoint_every_minutes"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be positive (or None), got {value}")
        for name in ("log_every_steps", "accumulate", "keep_states", "max_nonfinite"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.average_last < 0:
            raise ConfigError(f"average_last must be 0 or more, got {self.average_last}")


class TrainingTask(Protocol):
    """What a task gives the loop. Optional attributes, read with getattr:

    - `best_metric: tuple[str, str]`: the validation metric that picks weights/best and "max" or
      "min", e.g. ("bleu", "max"); default ("loss", "min");
    - `items_name: str`: what `items` counts, for the throughput display ("tokens", "images");
    - `state() -> dict` / `load_state(dict)`: extra state to checkpoint (tensors, numbers, strings,
      lists, dicts);
    - `train_model: nn.Module`: the module `train_step` calls (`model`, or DDP around it); with
      `LoopConfig.compile` the loop replaces it by its `torch.compile`d form, so a task that trains
      through `model` directly cannot be compiled;
    - `budget_spent: float`: if the task has it, the loop sets it before every update to the
      fraction of the budget spent once that update is done (0 to 1: steps, epochs or minutes,
      whichever ends first), for
      learning-rate schedules that follow the budget rather than a fixed number of steps.
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any  # a torch.optim.lr_scheduler.LRScheduler, or None

    def batches(self, epoch: int) -> Iterable[Any]:
        """The batches of one epoch, the same ones in the same order for the same epoch (see above)."""

    def train_step(self, batch: Any) -> dict[str, Any]:
        """{"loss": scalar tensor, not yet backwarded, "items": tokens or images, other scalars...}."""

    def evaluate(self) -> dict[str, float]:
        """Validation metrics (run under torch.no_grad with the model in eval mode)."""


@dataclass
class LoopState:
    """Where training is; saved as JSON inside the training state."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0  # the epoch being read
    position: int = 0  # batches of `epoch` already used
    elapsed_s: float = 0.0  # training time so far, across resumptions
    nonfinite_total: int = 0
    nonfinite_in_a_row: int = 0
    best_value: float | None = None
    best_step: int | None = None
    last_eval_step: int | None = None
    last_checkpoint_step: int | None = None
    window: dict[str, float] = field(default_factory=dict)  # sums since the last training log
    world_size: int = 1  # processes that trained (`position` counts each one's batches)


@dataclass(frozen=True)
class FitResult:
    """What `Trainer.fit` did: why it stopped and where it got."""

    stop_reason: Literal["steps", "epochs", "minutes", "interrupted", "diverged"]
    step: int
    epoch: int
    elapsed_s: float
    last_loss: float | None
    best_metric: str
    best_value: float | None
    best_step: int | None
    nonfinite_total: int

    def summary(self, run: RunFolder) -> str:
        reasons = {"steps": "step budget reached", "epochs": "epoch budget reached",
                   "minutes": "time budget reached", "interrupted": "interrupted (continue with --resume)",
                   "diverged": "stopped: too many non-finite losses in a row"}
        loss = "?" if self.last_loss is None else f"{self.last_loss:.4g}"
        best = "" if self.best_value is None else \
            f", best {self.best_metric} {self.best_value:.4g} at step {self.best_step}"
        skipped = f", {self.nonfinite_total} non-finite steps skipped" if self.nonfinite_total else ""
        return (f"{run.kind} run {run.path}: {reasons[self.stop_reason]} at step {self.step} "
                f"(epoch {self.epoch}) after {format_duration(self.elapsed_s)}; train loss {loss}{best}{skipped}")


class _BatchStream:
    """Batches across epochs, `take(n)` at a time, keeping `state.epoch` and `state.position` current."""

    def __init__(self, task: TrainingTask, state: LoopState, max_epochs: int | None) -> None:
        self.task, self.state, self.max_epochs = task, state, max_epochs
        self._iterator: Iterator[Any] | None = None
        self.epoch_length: int | None = None

    def take(self, count: int) -> list[Any]:
        group: list[Any] = []
        while len(group) < count:
            if self.max_epochs is not None and self.state.epoch >= self.max_epochs:
                break
            if self._iterator is None:
                self._iterator = self._open_epoch()
            try:
                group.append(next(self._iterator))
                self.state.position += 1
            except StopIteration:
                if self.state.position == 0:
                    raise DataError(f"the training data produced no batches for epoch {self.state.epoch}") from None
                self.state.epoch, self.state.position, self._iterator = self.state.epoch + 1, 0, None
        return group

    def _open_epoch(self) -> Iterator[Any]:
        batches = self.task.batches(self.state.epoch)
        self.epoch_length = len(batches) if hasattr(batches, "__len__") else None
        iterator = iter(batches)
        skipped = sum(1 for _ in islice(iterator, self.state.position))
        if skipped < self.state.position:
            raise DataError(f"cannot resume: epoch {self.state.epoch} has {skipped} batches but the checkpoint had "
                            f"used {self.state.position}; the training data changed since")
        return iterator


@contextlib.contextmanager
def _ctrl_c_as_flag() -> Iterator[threading.Event]:
    """The first Ctrl-C sets the flag (the loop stops at the end of the step); a second aborts at once."""
    pressed = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield pressed
        return

    def handler(signum: int, frame: Any) -> None:
        if pressed.is_set():
            raise KeyboardInterrupt
        pressed.set()
        print("\nCtrl-C: stopping after this step and saving the training state (again to abort)", flush=True)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)


class Trainer:
    """Trains `task` in `run` until `budget` is spent; see the module docstring for what it does."""

    def __init__(self, task: TrainingTask, run: RunFolder, budget: Budget, config: LoopConfig = LoopConfig(),
                 progress: bool = True, at_end: Sequence[Callable[[RunFolder], None]] = ()) -> None:
        missing = [name for name in ("model", "optimizer", "scheduler", "batches", "train_step", "evaluate")
                   if not hasattr(task, name)]
        if missing:
            raise TypeError(f"{type(task).__name__} is not a TrainingTask: it has no {', '.join(missing)}")
        self.task, self.run, self.budget, self.config, self.show_progress = task, run, budget, config, progress
        self.at_end = at_end  # called with the run folder once training stops, saved (the run report)
        parameter = next(task.model.parameters(), None)
        self.device = parameter.device if parameter is not None else torch.device("cpu")
        if config.amp == "fp16" and self.device.type != "cuda":
            raise ConfigError(f"amp='fp16' needs a CUDA device (the model is on {self.device}); use 'bf16'")
        self.scaler = torch.amp.GradScaler("cuda") if config.amp == "fp16" else None
        self._epoch_length: int | None = None  # batches in an epoch, once the first epoch is open
        self.best_metric, self.best_mode = getattr(task, "best_metric", ("loss", "min"))
        if self.best_mode not in ("max", "min"):
            raise ConfigError(f"best_metric mode must be 'max' or 'min', got {self.best_mode!r}")
        self.items_name = getattr(task, "items_name", "items")
        self.state = LoopState()
        self.last_loss: float | None = None
        self.synced = getattr(task, "train_model", task.model)  # DDP (for no_sync), before any compilation
        self._compile_pending = config.compile  # until the first compiled step has run
        if config.compile:
            self._compile_train_model()

    # ------------------------------------------------------------ the loop
    def fit(self, resume: bool = False) -> FitResult:
        """Train until the budget is spent and return what happened.

        Ctrl-C: saves, then raises KeyboardInterrupt. Divergence: raises TrainingDiverged.
        """
        with distributed.main_first():  # rank 0 repairs the run folder before the others read it
            self.state = self._restore() if resume else LoopState(world_size=distributed.world_size())
        self._started, self._elapsed_before = time.monotonic(), self.state.elapsed_s
        self._last_eval_time = self._last_checkpoint_time = self._window_time = time.monotonic()
        stream = _BatchStream(self.task, self.state, self.budget.epochs)
        progress = Progress(self.budget.steps, self.state.step, self.items_name,
                            enabled=self.show_progress and distributed.is_main())
        try:
            with _ctrl_c_as_flag() as interrupted:
                reason = self._run(stream, progress, interrupted)
            result = self._finish(reason, stream, progress)
        finally:
            progress.close()
        print(result.summary(self.run), flush=True)
        if distributed.is_main():
            for callback in self.at_end:
                callback(self.run)
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

    def _run(self, stream: _BatchStream, progress: Progress, interrupted: threading.Event) -> str:
        state = self.state
        while True:
            reason = self._budget_spent() or ("interrupted" if interrupted.is_set() else None)
            reason = _REASONS[distributed.from_main(_REASONS.index(reason))]  # rank 0's clock decides for all
            if reason:
                return reason
            group = stream.take(self.config.accumulate)
            if not group:
                return "epochs"
            self._epoch_length = stream.epoch_length
            if progress.total is None and self.budget.epochs is not None and stream.epoch_length:
                progress.set_total(self._steps_in_budget(stream.epoch_length))
            with self._compile_errors():
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
            if not distributed.is_main():  # rank 0 logs, validates and checkpoints
                continue
            if state.step % self.config.log_every_steps == 0:
                self._log_training(progress, stream)
            if self._due(self.config.eval_every_steps, self.config.eval_every_minutes, self._last_eval_time):
                self._outside_window(self._evaluate, progress)
            if self._due(self.config.checkpoint_every_steps, self.config.checkpoint_every_minutes,
                         self._last_checkpoint_time):
                self._outside_window(self._checkpoint)

    def _finish(self, reason: str, stream: _BatchStream, progress: Progress) -> FitResult:
        state = self.state
        if not distributed.is_main():
            return FitResult(reason, state.step, state.epoch, self.elapsed, self.last_loss, self.best_metric,
                             state.best_value, state.best_step, state.nonfinite_total)
        if state.window.get("steps"):
            self._log_training(progress, stream)
        if reason != "diverged":
            if state.last_checkpoint_step != state.step:
                self._checkpoint()  # before the last validation, so that a Ctrl-C during it loses nothing
            if reason != "interrupted" and state.last_eval_step != state.step:
                self._evaluate(progress)
                self._save_state()  # again, now with the validation's best metric
        self._write_average()
        if self.run.metrics_path.is_file():
            from attnkit.training.curves import plot_run_curves

            plot_run_curves(self.run)
        return FitResult(reason, state.step, state.epoch, self.elapsed, self.last_loss, self.best_metric,
                         state.best_value, state.best_step, state.nonfinite_total)

    @property
    def elapsed(self) -> float:
        return self._elapsed_before + time.monotonic() - self._started

    def _budget_spent(self) -> str | None:
        if self.budget.steps is not None and self.state.step >= self.budget.steps:
            return "steps"
        if self.budget.minutes is not None and self.elapsed >= 60 * self.budget.minutes:
            return "minutes"
        return None

    def _budget_fraction(self, steps: int) -> float:
        """How much of the budget STEPS updates spend, 0 to 1: the largest of the steps, epochs and minutes fractions."""
        fractions = [0.0]
        if self.budget.steps is not None:
            fractions.append(steps / self.budget.steps)
        if self.budget.epochs is not None and self._epoch_length:
            fractions.append(steps / self._steps_in_budget(self._epoch_length))
        if self.budget.minutes is not None:
            fractions.append(self.elapsed / (60 * self.budget.minutes))
        return min(max(fractions), 1.0)

    def _steps_in_budget(self, epoch_length: int) -> int:
        """Optimizer steps the epoch budget allows (the step budget, if smaller)."""
        steps = math.ceil(self.budget.epochs * epoch_length / self.config.accumulate)
        return min(steps, self.budget.steps) if self.budget.steps is not None else steps

    def _due(self, every_steps: int | None, every_minutes: float | None, since: float) -> bool:
        by_steps = every_steps is not None and self.state.step % every_steps == 0
        by_time = every_minutes is not None and time.monotonic() - since >= 60 * every_minutes
        return by_steps or by_time

    # ------------------------------------------------------------ one step
    def _compile_train_model(self) -> None:
        """task.train_model becomes torch.compile(task.train_model); task.model (saved, evaluated) stays eager."""
        if not hasattr(self.task, "train_model"):
            raise ConfigError(f"compile: {type(self.task).__name__} has no train_model (the module its train_step "
                              "calls), so there is nothing to compile")
        self.task.train_model = torch.compile(self.task.train_model, backend=self.config.compile_backend)

    @contextlib.contextmanager
    def _compile_errors(self) -> Iterator[None]:
        """Compilation happens at the first step: its failure becomes one UserError instead of a compiler's trace."""
        if not self._compile_pending:
            yield
            return
        try:
            yield
        except Exception as error:
            if not _from_compiler(error):
                raise
            cause = getattr(error, "inner_exception", None) or error  # a backend's own error, if Dynamo wrapped it
            reason = (str(cause).strip().splitlines() or [""])[0][:300]
            backend = getattr(self.config.compile_backend, "__name__", self.config.compile_backend)
            raise UserError(f"--compile: torch.compile (backend {backend}) failed at the first training step on "
                            f"this machine ({type(cause).__name__}: {reason}); train without --compile (add --resume "
                            f"to use {self.run.path} again)") from None
        self._compile_pending = False

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.config.amp == "off":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.config.amp == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def _step(self, group: list[Any]) -> dict[str, float] | None:
        """Forward and backward over the group's batches, then one update; None if skipped as non-finite."""
        self.task.model.train()
        sums: dict[str, float] = {"loss": 0.0, "items": 0.0}
        for index, batch in enumerate(group):
            # gradients are averaged across processes once per update, at the group's last batch
            with distributed.no_sync(self.synced) if index < len(group) - 1 else contextlib.nullcontext():
                with self._autocast():
                    output = self.task.train_step(batch)
                loss = output["loss"]
                value = float(loss.detach())
                if not distributed.all_true(math.isfinite(value)):  # every process skips, or none
                    self.task.optimizer.zero_grad(set_to_none=True)
                    return None
                scaled = loss / len(group)  # the mean over the group's batches
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            for key, item in output.items():
                sums[key] = sums.get(key, 0.0) + (value if key == "loss" else float(item))
        sums = distributed.average(sums, summed=("items",))  # the global batch's means; items of all processes
        lr = float(self.task.optimizer.param_groups[0]["lr"])
        if hasattr(self.task, "budget_spent"):  # as it will be once this update is done
            self.task.budget_spent = self._budget_fraction(self.state.step + 1)
        grad_norm = self._update()
        if grad_norm is None:
            return None
        means = {key: total / len(group) for key, total in sums.items() if key != "items"}
        return {**means, "items": sums["items"], "lr": lr, "grad_norm": grad_norm}

    def _update(self) -> float | None:
        """Clip, step the optimizer and the scheduler; the gradient norm, or None if it was not finite."""
        optimizer, scheduler = self.task.optimizer, self.task.scheduler
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
        if stepped and scheduler is not None:
            scheduler.step()
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

    def _log_training(self, progress: Progress, stream: _BatchStream) -> None:
        window, now = self.state.window, time.monotonic()
        steps, seconds = window.pop("steps"), max(now - self._window_time, 1e-9)
        items = window.pop("items", 0.0)
        record = {key: (value if key == "lr" else value / steps) for key, value in window.items()}
        record[f"{self.items_name}_per_s"] = items / seconds
        self.run.log({"step": self.state.step, "split": "train", "epoch": self.state.epoch,
                      "elapsed_s": round(self.elapsed, 2), **record})
        self.last_loss = record["loss"]
        progress.report(self.state.step, record["loss"], record.get("lr", math.nan), items / seconds,
                        self._eta(seconds / steps, stream))
        self.state.window, self._window_time = {}, now

    def _outside_window(self, action: Any, *args: Any) -> None:
        """Run `action` (validation, a checkpoint) without counting its time in the logged throughput."""
        started = time.monotonic()
        try:
            action(*args)
        finally:
            self._window_time += time.monotonic() - started

    def _eta(self, seconds_per_step: float, stream: _BatchStream) -> float | None:
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
        model.train()
        state.last_eval_step, self._last_eval_time = state.step, time.monotonic()
        if not metrics:  # the task has no validation data
            return
        self.run.log({"step": state.step, "split": "valid", "epoch": state.epoch, **metrics})
        progress.write(f"step {state.step} validation: " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
        if self.best_metric not in metrics:
            progress.warn(f"no {self.best_metric!r} among the validation metrics, so weights/best is not written")
            return
        value = metrics[self.best_metric]
        better = state.best_value is None or (value > state.best_value if self.best_mode == "max"
                                              else value < state.best_value)
        if math.isfinite(value) and better:
            state.best_value, state.best_step = value, state.step
            save_weights(self.run.best_weights, model.state_dict(),
                         {"kind": self.run.kind, "step": state.step, self.best_metric: value})

    # ------------------------------------------------------------ checkpoints
    def _checkpoint(self) -> None:
        """weights/last, a snapshot for the average, and the training state (the old ones rotated out)."""
        state, run = self.state, self.run
        state.last_checkpoint_step = state.step
        weights = self.task.model.state_dict()
        metadata = {"kind": run.kind, "step": state.step, "epoch": state.epoch}
        save_weights(run.last_weights, weights, metadata)
        if self.config.average_last >= 2:
            save_weights(run.snapshot_path(state.step), weights, metadata)
            for old in run.snapshots()[:-self.config.average_last]:
                old.unlink(missing_ok=True)
        self._save_state()
        self._last_checkpoint_time = time.monotonic()

    def _save_state(self) -> None:
        self.state.elapsed_s = self.elapsed
        self.run.save_state(self.state.step, self._training_state(), keep=self.config.keep_states)

    def _training_state(self) -> dict[str, Any]:
        task = self.task
        return {
            "loop": asdict(self.state),
            "model": task.model.state_dict(),
            "optimizer": task.optimizer.state_dict(),
            "scheduler": task.scheduler.state_dict() if task.scheduler is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "task": task.state() if hasattr(task, "state") else None,
            "rng": capture_rng(),
        }

    def _write_average(self) -> None:
        snapshots = self.run.snapshots()[-self.config.average_last:] if self.config.average_last >= 2 else []
        if len(snapshots) >= 2:
            steps = [int(path.stem.split("-")[1]) for path in snapshots]
            save_weights(self.run.average_weights, average_weights(snapshots),
                         {"kind": self.run.kind, "averaged_steps": steps})

    def _restore(self) -> LoopState:
        """Everything the newest intact training state holds, back in place; a fresh state if there is none."""
        found = self.run.load_newest_state()
        if found is None:
            print(f"{self.run.path} has no training state yet; starting from step 0", flush=True)
            if distributed.is_main():
                self._forget_after(step=0)
            return LoopState(world_size=distributed.world_size())
        path, saved = found
        task = self.task
        check_state_dict(saved["model"], task.model, source=str(path))
        task.model.load_state_dict(saved["model"])
        _load_component(task.optimizer, saved["optimizer"], "optimizer", path)
        lay_out_like_parameters(task.optimizer)
        if task.scheduler is not None and saved["scheduler"] is not None:
            _load_component(task.scheduler, saved["scheduler"], "learning-rate scheduler", path)
        if self.scaler is not None and saved["scaler"] is not None:
            self.scaler.load_state_dict(saved["scaler"])
        if hasattr(task, "load_state") and saved["task"] is not None:
            task.load_state(saved["task"])
        state = _with_world_size(LoopState(**saved["loop"]), distributed.world_size())
        if distributed.is_main():
            self._forget_after(state.step)
        restore_rng(saved["rng"])  # last: nothing above may draw from the restored generators
        print(f"resuming {self.run.path} from step {state.step} (epoch {state.epoch})", flush=True)
        return state

    def _forget_after(self, step: int) -> None:
        """Drop the metrics and weight snapshots an interrupted run wrote after `step`: they are redone."""
        self.run.truncate_metrics(after_step=step)
        for snapshot in self.run.snapshots():
            if int(snapshot.stem.split("-")[1]) > step:
                snapshot.unlink()


_REASONS = (None, "steps", "minutes", "interrupted")  # why the loop stops before a step, as rank 0 says


def _with_world_size(state: LoopState, size: int) -> LoopState:
    """The state, its position in the epoch converted to `size` processes' shards (resuming on another count).

    `position` batches on each of the saved run's processes are `position * world_size` batches of
    the epoch; each of `size` processes skips its share of those, rounded down (so at most
    `size - 1` batches of the epoch are read a second time, none is left out).
    """
    if state.world_size != size:
        print(f"resuming with {size} processes (the run had {state.world_size}): epoch {state.epoch} continues "
              f"after {state.position * state.world_size} of its batches", flush=True)
        state.position = state.position * state.world_size // size
        state.world_size = size
    return state


def _scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The metrics that are single numbers (Python numbers or one-element tensors), as floats."""
    return {key: float(value) for key, value in metrics.items()
            if isinstance(value, (int, float)) or (isinstance(value, torch.Tensor) and value.numel() == 1)}


def _from_compiler(error: Exception) -> bool:
    """Whether `error` comes from torch.compile's machinery (Dynamo, Inductor, a backend) rather than the task."""
    from torch._dynamo.exc import TorchDynamoException

    return isinstance(error, TorchDynamoException) or type(error).__module__.startswith(
        ("torch._dynamo", "torch._inductor", "torch._functorch"))


def lay_out_like_parameters(optimizer: torch.optim.Optimizer) -> None:
    """Give each per-parameter state tensor (Adam's moments) its parameter's memory layout again.

    Training states are written contiguous, and `load_state_dict` keeps that layout; for a
    channels-last parameter (the detection backbone's weights) the moments would then be laid out
    differently from the parameter and its gradient, and fused optimizer kernels, which pair elements by
    memory position, would update each weight with another element's moments."""
    for parameter, state in optimizer.state.items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.shape == parameter.shape and \
                    value.stride() != parameter.stride():
                state[key] = torch.empty_like(parameter, dtype=value.dtype).copy_(value)


def _load_component(component: Any, state_dict: dict[str, Any], what: str, path: Any) -> None:
    try:
        component.load_state_dict(state_dict)
    except (ValueError, KeyError, IndexError, RuntimeError) as error:
        raise CheckpointError(f"the {what} state in {path} does not fit this run's {what} ({error})") from None
