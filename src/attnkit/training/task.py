"""What a task gives the training loop: the `TrainingTask` protocol, every member the loop uses.

The loop owns everything a task has no opinion about (devices' processes, DDP, torch.compile,
autocast, accumulation, clipping, the learning-rate scheduler, checkpoints); the task owns the
model, the optimizer, the data and what one step and one validation mean.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import torch
from torch import nn


class TrainingTask(Protocol):
    """A translation model, a detector, a test's toy regression: what `Trainer` trains.

    The resume guarantee asks one thing of the task: `batches(epoch)` must give the same batches in
    the same order whenever it is called for the same epoch (shuffle with a generator seeded from
    the seed and the epoch, not the global RNG), because resuming calls it again and skips the
    batches the interrupted run had used.
    """

    # read-only to the loop (so a task may narrow their types: AdamW, a TranslationModel)
    @property
    def model(self) -> nn.Module:
        """Saved and evaluated as it is; trained through DDP and torch.compile around it."""
        ...

    @property
    def optimizer(self) -> torch.optim.Optimizer: ...

    @property
    def best_metric(self) -> tuple[str, str]:
        """The validation metric that picks weights/best, and "max" or "min": ("bleu", "max")."""
        ...

    @property
    def items_name(self) -> str:
        """What a step's "items" count, for the throughput display: "tokens", "images"."""
        ...

    def lr_factor(self, step: int, budget_spent: float) -> float:
        """The optimizer's learning rates times this for the update after STEP updates, BUDGET_SPENT (0 to 1)
        of the budget being spent once they are done (the loop steps a LambdaLR with it)."""
        ...

    def batches(self, epoch: int) -> Sequence[Any]:
        """The batches of EPOCH, as cheap references (indices): the loop counts them, takes its process's
        share and, on resume, skips the used ones without loading them."""
        ...

    def load(self, batches: Sequence[Any]) -> Iterable[Any]:
        """BATCHES (some of `batches(epoch)`, in order) loaded, one by one; reading ahead is the task's choice."""
        ...

    def train_step(self, model: nn.Module, batch: Any) -> Mapping[str, Any]:
        """The forward pass of one loaded batch through MODEL (the task's model, or DDP or torch.compile around
        it): {"loss": scalar tensor, not yet backwarded, "items": tokens or images, other scalars...}."""
        ...

    def evaluate(self) -> Mapping[str, Any]:
        """Validation metrics, {} without validation data (the loop runs it under no_grad in eval mode)."""
        ...

    def state(self) -> dict[str, Any]:
        """Whatever else resuming needs (tensors, numbers, strings, lists, dicts); {} if nothing."""
        ...

    def load_state(self, state: dict[str, Any]) -> None:
        """Put back what `state()` returned."""
        ...


MEMBERS = tuple(name for name in vars(TrainingTask) if not name.startswith("_"))  # in the order declared


def check_task(task: object) -> None:
    """TypeError naming the `TrainingTask` members TASK lacks (what a type checker would have said)."""
    missing = [name for name in MEMBERS if name not in dir(task)]
    if missing:
        raise TypeError(f"{type(task).__name__} is not a TrainingTask: it has no {', '.join(missing)}")
