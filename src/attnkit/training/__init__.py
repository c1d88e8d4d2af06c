"""Shared training infrastructure: the loop, the run folder and checkpoints, used by every task.

A task builds its model, optimizer and data, creates a run folder and hands both to the loop:

    run = RunFolder.create(out, kind="translation", config=asdict(config), resume=resume)
    task = MyTask(run.config)                      # on resume, build from the saved config
    Trainer(task, run, Budget(steps=10_000), LoopConfig(eval_every_steps=1000, amp="bf16")).fit(resume)

See `loop.py` for what a task provides (`TrainingTask`), `attnkit.storage` for the run folder's
layout and file formats (safetensors, no pickle).
"""

from attnkit.training.averaging import average_weights
from attnkit.training.loop import Budget, FitResult, LoopConfig, Trainer, TrainingDiverged, TrainingTask

__all__ = ["Budget", "FitResult", "LoopConfig", "Trainer", "TrainingDiverged", "TrainingTask", "average_weights"]
