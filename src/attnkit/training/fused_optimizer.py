"""Adam's fused kernel: one kernel updates every parameter, instead of a loop of small tensor ops.

With a few hundred parameter tensors, Adam's default per-tensor loop costs more than the update
itself (the detector's step is several times faster fused: BENCHMARKS.md). The update is the same
(Kingma & Ba 2015, Algorithm 1); only the kernel differs.
"""

from __future__ import annotations

import functools
from typing import Any

import torch


@functools.cache
def fused_supported(device_type: str) -> bool:
    """Whether this torch build has the fused Adam kernel for DEVICE_TYPE (CUDA; CPU from torch 2.4)."""
    try:
        torch.optim.Adam([torch.zeros(1, device=device_type, requires_grad=True)], fused=True)
    except (RuntimeError, TypeError, ValueError):
        return False
    return True


def fused_options(device: torch.device | str) -> dict[str, Any]:
    """Keyword arguments for torch.optim.Adam/AdamW: `fused=True` where supported, else nothing."""
    return {"fused": True} if fused_supported(torch.device(device).type) else {}
