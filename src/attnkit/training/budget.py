"""How long a run trains (`Budget`) and how the loop runs it (`LoopConfig`); the fraction of the budget spent.

A budget counts optimizer steps, epochs or minutes of training, whichever ends first. Schedules
that follow the budget rather than a number of steps (DETR divides its learning rates by 10 after
200 of 300 epochs, Carion et al. 2020, section 4) read `spent_fraction`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from attnkit.errors import ConfigError

Amp = Literal["off", "bf16", "fp16"]  # the autocast: none, bfloat16, or float16 with a loss scaler (CUDA)


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
        for name, value in (("steps", self.steps), ("epochs", self.epochs), ("minutes", self.minutes)):
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
    amp: Amp = "off"
    checkpoint_every_steps: int | None = None
    checkpoint_every_minutes: float | None = 10.0  # the Transformer paper's checkpoint interval
    average_last: int = 5  # checkpoints averaged into weights/average (0 or 1: no average)
    keep_states: int = 2  # training states kept, so resume can fall back on a damaged newest one
    max_nonfinite: int = 10  # non-finite losses in a row before the run stops
    compile: bool = False  # train through torch.compile of the task's model; saved weights stay uncompiled
    compile_backend: str | Callable[..., Any] = "inductor"  # torch.compile's backend ("aot_eager": no kernels)
    ema_decay: float | None = None  # a moving average of the weights (`ema.py`), e.g. 0.999; None: none kept

    def __post_init__(self) -> None:
        if self.amp not in ("off", "bf16", "fp16"):
            raise ConfigError(f"amp must be 'off', 'bf16' or 'fp16', got {self.amp!r}")
        if self.ema_decay is not None and not 0.0 < self.ema_decay < 1.0:
            raise ConfigError(f"ema_decay must be between 0 and 1 (e.g. 0.999), or None, got {self.ema_decay}")
        if self.compile and not self.compile_backend:
            raise ConfigError("compile needs a compile_backend, e.g. 'inductor'")
        positive = {"eval_every_steps": self.eval_every_steps, "eval_every_minutes": self.eval_every_minutes,
                    "grad_clip": self.grad_clip, "checkpoint_every_steps": self.checkpoint_every_steps,
                    "checkpoint_every_minutes": self.checkpoint_every_minutes}
        for name, value in positive.items():
            if value is not None and value <= 0:
                raise ConfigError(f"{name} must be positive (or None), got {value}")
        at_least_one = {"log_every_steps": self.log_every_steps, "accumulate": self.accumulate,
                        "keep_states": self.keep_states, "max_nonfinite": self.max_nonfinite}
        for name, count in at_least_one.items():
            if count < 1:
                raise ConfigError(f"{name} must be at least 1, got {count}")
        if self.average_last < 0:
            raise ConfigError(f"average_last must be 0 or more, got {self.average_last}")


def steps_in_epochs(budget: Budget, epoch_length: int, accumulate: int) -> int:
    """Optimizer steps the epoch budget allows with EPOCH_LENGTH batches an epoch (the step budget, if smaller)."""
    assert budget.epochs is not None
    steps = math.ceil(budget.epochs * epoch_length / accumulate)
    return min(steps, budget.steps) if budget.steps is not None else steps


def spent_fraction(budget: Budget, steps: int, elapsed_s: float, epoch_steps: int | None) -> float:
    """How much of BUDGET STEPS optimizer steps and ELAPSED_S seconds spend, 0 to 1: the largest of the
    steps, epochs and minutes fractions (EPOCH_STEPS: `steps_in_epochs`, None before the first epoch's length)."""
    fractions = [0.0]
    if budget.steps is not None:
        fractions.append(steps / budget.steps)
    if budget.epochs is not None and epoch_steps:
        fractions.append(steps / epoch_steps)
    if budget.minutes is not None:
        fractions.append(elapsed_s / (60 * budget.minutes))
    return min(max(fractions), 1.0)
