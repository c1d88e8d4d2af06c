"""This process's batches across epochs: its shard of each epoch, the used ones skipped on resume."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from attnkit.errors import DataError
from attnkit.training import distributed
from attnkit.training.loop_state import LoopState
from attnkit.training.task import TrainingTask


class BatchStream:
    """Loaded batches, `take(n)` at a time, keeping `state.epoch` and `state.position` current.

    Each epoch's references (`task.batches(epoch)`) are sharded across processes
    (`distributed.shard`), the first `state.position` of this process's share skipped without
    loading, and the rest loaded by `task.load`.
    """

    def __init__(self, task: TrainingTask, state: LoopState, max_epochs: int | None) -> None:
        self.task, self.state, self.max_epochs = task, state, max_epochs
        self._iterator: Iterator[Any] | None = None
        self.epoch_length: int | None = None  # this process's batches in an epoch, once one is open

    def take(self, count: int) -> list[Any]:
        """Up to COUNT batches, continuing into the next epoch; fewer (or none) once the epoch budget is used."""
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
        epoch, position = self.state.epoch, self.state.position
        mine = distributed.shard(self.task.batches(epoch))
        if len(mine) < position:
            raise DataError(f"cannot resume: epoch {epoch} has {len(mine)} batches but the checkpoint had "
                            f"used {position}; the training data changed since")
        self.epoch_length = len(mine)
        return iter(self.task.load(mine[position:]))
