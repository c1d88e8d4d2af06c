"""Checkpoint averaging: the mean of the last N checkpoints' weights.

"For the base models, we used a single model obtained by averaging the last 5 checkpoints, which
were written at 10-minute intervals" (Vaswani et al. 2017, section 6.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from attnkit.errors import CheckpointError
from attnkit.storage.checkpoint import read_weights


def average_weights(paths: Sequence[Path]) -> dict[str, Tensor]:
    """Element-wise mean of floating-point tensors over the weights files; other tensors (integer
    buffers such as step counters) are taken from the last file."""
    if not paths:
        raise ValueError("average_weights needs at least one weights file")
    total: dict[str, Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    first_names = None
    for path in paths:
        tensors, _ = read_weights(path)
        if first_names is None:
            first_names = set(tensors)
        elif set(tensors) != first_names:
            raise CheckpointError(f"cannot average {path} with {paths[0]}: they hold different tensors")
        for name, tensor in tensors.items():
            dtypes[name] = tensor.dtype
            if tensor.is_floating_point():
                total[name] = total.get(name, 0) + tensor.to(torch.float64)
            else:
                total[name] = tensor
    return {name: (tensor / len(paths)).to(dtypes[name]) if tensor.is_floating_point() else tensor
            for name, tensor in total.items()}
