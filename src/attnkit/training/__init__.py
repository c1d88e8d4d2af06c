"""Shared training infrastructure: the loop every task trains in, knowing no task.

A recipe (`attnkit.app.<task>.recipe`) builds its task, creates a run folder and hands both to the loop:

    run = RunFolder.create(out, kind="translation", config=config.to_dict(), resume=resume)
    task = MyTask(config)                          # a TrainingTask: model, optimizer, data, one step
    Trainer(task, run, Budget(steps=10_000), LoopConfig(eval_every_steps=1000, amp="bf16")).fit(resume)

`task.py` says what a task provides (`TrainingTask`), `loop.py` what the loop does with it,
`callbacks.py` what runs at the end (`AtEnd`); `attnkit.storage` holds the run folder's layout and
file formats (safetensors, no pickle).
"""

from attnkit.training.averaging import average_weights
from attnkit.training.budget import Budget, LoopConfig
from attnkit.training.callbacks import AtEnd, plot_curves
from attnkit.training.loop import Trainer
from attnkit.training.result import FitResult, TrainingDiverged
from attnkit.training.task import TrainingTask

__all__ = ["AtEnd", "Budget", "FitResult", "LoopConfig", "Trainer", "TrainingDiverged", "TrainingTask",
           "average_weights", "plot_curves"]
