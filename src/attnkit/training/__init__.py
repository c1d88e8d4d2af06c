"""Shared training infrastructure: the loop, the run folder and checkpoints, used by every task.

A task builds its model, optimizer and data, creates a run folder and hands both to the loop:

    run = RunFolder.create(out, kind="translation", config=asdict(config), resume=resume)
    task = MyTask(run.config)                      # on resume, build from the saved config
    Trainer(task, run, Budget(steps=10_000), LoopConfig(eval_every_steps=1000, amp="bf16")).fit(resume)

See `loop.py` for what a task provides (`TrainingTask`), `run_folder.py` for the folder's layout,
`checkpoint.py` for the file formats (safetensors, no pickle).
"""

from attnkit.training.averaging import average_weights
from attnkit.training.checkpoint import (
    atomic_write,
    atomic_write_text,
    load_training_state,
    load_weights,
    read_weights,
    save_training_state,
    save_weights,
)
from attnkit.training.loop import Budget, FitResult, LoopConfig, Trainer, TrainingDiverged, TrainingTask
from attnkit.training.run_folder import RunFolder

__all__ = [
    "Budget", "FitResult", "LoopConfig", "RunFolder", "Trainer", "TrainingDiverged", "TrainingTask",
    "atomic_write", "atomic_write_text", "average_weights", "load_training_state", "load_weights",
    "read_weights", "save_training_state", "save_weights",
]
