"""Where training is (`LoopState`): the counters saved as JSON inside every training state."""

from __future__ import annotations

from dataclasses import dataclass, field

from attnkit.training.messages import note


@dataclass
class LoopState:
    """Where training is; saved as JSON inside the training state."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0  # the epoch being read
    position: int = 0  # batches of `epoch` already used (by each process)
    elapsed_s: float = 0.0  # training time so far, across resumptions
    nonfinite_total: int = 0
    nonfinite_in_a_row: int = 0
    best_value: float | None = None
    best_step: int | None = None
    last_eval_step: int | None = None
    last_checkpoint_step: int | None = None
    window: dict[str, float] = field(default_factory=dict)  # sums since the last training log
    world_size: int = 1  # processes that trained (`position` counts each one's batches)


def with_world_size(state: LoopState, size: int) -> LoopState:
    """The state, its position in the epoch converted to `size` processes' shards (resuming on another count).

    `position` batches on each of the saved run's processes are `position * world_size` batches of
    the epoch; each of `size` processes skips its share of those, rounded down (so at most
    `size - 1` batches of the epoch are read a second time, none is left out).
    """
    if state.world_size != size:
        note(f"resuming with {size} processes (the run had {state.world_size}): epoch {state.epoch} continues "
             f"after {state.position * state.world_size} of its batches")
        state.position = state.position * state.world_size // size
        state.world_size = size
    return state
