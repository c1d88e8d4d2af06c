"""What a run leaves on disk, read and written safely: the run folder's layout and its safetensors files.

The file formats are shared by the task libraries (a predictor loads a run's config and weights) and
the training loop (which writes them); see `run_folder.py` for the layout, `checkpoint.py` for the
formats (safetensors, no pickle, written atomically).
"""

from attnkit.storage.checkpoint import (
    atomic_write,
    atomic_write_text,
    check_state_dict,
    load_training_state,
    load_weights,
    read_weights,
    save_training_state,
    save_weights,
)
from attnkit.storage.run_folder import RunFolder

__all__ = ["RunFolder", "atomic_write", "atomic_write_text", "check_state_dict", "load_training_state",
           "load_weights", "read_weights", "save_training_state", "save_weights"]
