"""A run's checkpoints, written and read back: weights/last, weights/best, weights/average and the training state.

weights/average is the mean of the last `average_last` checkpoints ("a single model obtained by
averaging the last 5 checkpoints, which were written at 10-minute intervals", Vaswani et al. 2017,
section 6.1). The training state holds everything `fit(resume=True)` needs to continue as if never
stopped: weights, optimizer, scheduler, loss scaler, the loop's counters, the task's own state and
every random generator.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.optim.lr_scheduler import LRScheduler

from attnkit.errors import CheckpointError
from attnkit.storage import RunFolder, check_state_dict, save_weights
from attnkit.training import distributed
from attnkit.training.averaging import average_weights
from attnkit.training.budget import LoopConfig
from attnkit.training.ema import WeightsEma
from attnkit.training.loop_state import LoopState, with_world_size
from attnkit.training.messages import note
from attnkit.training.rng import capture_rng, restore_rng
from attnkit.training.task import TrainingTask


class Checkpoints:
    """The files of RUN that hold TASK's training (written on rank 0 only; every rank restores)."""

    def __init__(self, run: RunFolder, task: TrainingTask, scheduler: LRScheduler,
                 scaler: torch.amp.GradScaler | None, config: LoopConfig, ema: WeightsEma | None = None) -> None:
        self.run, self.task, self.scheduler, self.scaler, self.config = run, task, scheduler, scaler, config
        self.ema = ema  # the moving average of the weights, if the loop keeps one

    def save(self, state: LoopState) -> None:
        """weights/last, a snapshot for the average, weights/ema and the training state (the old ones rotated out)."""
        run, keep = self.run, self.config.average_last
        state.last_checkpoint_step = state.step
        weights = self.task.model.state_dict()
        metadata = {"kind": run.kind, "step": state.step, "epoch": state.epoch}
        save_weights(run.last_weights, weights, metadata)
        if keep >= 2:
            save_weights(run.snapshot_path(state.step), weights, metadata)
            for old in run.snapshots()[:-keep]:
                old.unlink(missing_ok=True)
        if self.ema is not None:
            save_weights(run.ema_weights, self.ema.weights(), {**metadata, "ema_decay": self.ema.decay})
        self.save_state(state)

    def save_state(self, state: LoopState) -> None:
        self.run.save_state(state.step, self._training_state(state), keep=self.config.keep_states)

    def save_best(self, state: LoopState, metric: str, weights: dict[str, Tensor], source: str) -> None:
        """weights/best: WEIGHTS, which scored `state.best_value` on METRIC; SOURCE: "model" or "ema"."""
        save_weights(self.run.best_weights, weights,
                     {"kind": self.run.kind, "step": state.step, metric: state.best_value, "weights": source})

    def write_average(self) -> None:
        snapshots = self.run.snapshots()[-self.config.average_last:] if self.config.average_last >= 2 else []
        if len(snapshots) >= 2:
            steps = [_step_of(path) for path in snapshots]
            save_weights(self.run.average_weights, average_weights(snapshots),
                         {"kind": self.run.kind, "averaged_steps": steps})

    def _training_state(self, state: LoopState) -> dict[str, Any]:
        return {
            "loop": asdict(state),
            "model": self.task.model.state_dict(),
            "optimizer": self.task.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "task": self.task.state(),
            "rng": capture_rng(),
            "ema": self.ema.state_dict() if self.ema is not None else None,
        }

    def restore(self) -> LoopState:
        """Everything the newest intact training state holds, back in place; a fresh state if there is none."""
        found = self.run.load_newest_state()
        if found is None:
            note(f"{self.run.path} has no training state yet; starting from step 0")
            if distributed.is_main():
                self._forget_after(step=0)
            return LoopState(world_size=distributed.world_size())
        path, saved = found
        task = self.task
        check_state_dict(saved["model"], task.model, source=str(path))
        task.model.load_state_dict(saved["model"])
        _load_component(task.optimizer, saved["optimizer"], "optimizer", path)
        lay_out_like_parameters(task.optimizer)
        if saved["scheduler"] is not None:
            _load_component(self.scheduler, saved["scheduler"], "learning-rate scheduler", path)
        if self.scaler is not None and saved["scaler"] is not None:
            self.scaler.load_state_dict(saved["scaler"])
        if saved["task"] is not None:  # None: written by a task with no state of its own
            task.load_state(saved["task"])
        self._restore_ema(saved.get("ema"), path)
        state = with_world_size(LoopState(**saved["loop"]), distributed.world_size())
        if distributed.is_main():
            self._forget_after(state.step)
        restore_rng(saved["rng"])  # last: nothing above may draw from the restored generators
        note(f"resuming {self.run.path} from step {state.step} (epoch {state.epoch})")
        return state

    def _restore_ema(self, saved: dict[str, Any] | None, path: Path) -> None:
        """The moving average as the state holds it; one that held none starts the average afresh."""
        if self.ema is None:
            return
        if saved is None:
            note(f"{path} holds no moving average of the weights; the EMA starts from the next step")
            return
        check_state_dict(saved["weights"], self.ema.averaged.module, source=f"{path} (ema)")
        self.ema.load_state_dict(saved)

    def _forget_after(self, step: int) -> None:
        """Drop the metrics and weight snapshots an interrupted run wrote after `step`: they are redone."""
        self.run.truncate_metrics(after_step=step)
        for snapshot in self.run.snapshots():
            if _step_of(snapshot) > step:
                snapshot.unlink()


def _step_of(snapshot: Path) -> int:
    return int(snapshot.stem.split("-")[1])  # step-00000400.safetensors


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


def _load_component(component: Any, state_dict: dict[str, Any], what: str, path: Path) -> None:
    try:
        component.load_state_dict(state_dict)
    except (ValueError, KeyError, IndexError, RuntimeError) as error:
        raise CheckpointError(f"the {what} state in {path} does not fit this run's {what} ({error})") from None
