"""Which autocast a training run gets for `amp="auto"`, shared by `attnkit train translation` and `detection`."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import torch

from attnkit.errors import ConfigError
from attnkit.training.budget import Amp


def resolve_amp(amp: str, device: torch.device) -> Amp:
    """"auto": bf16 autocast on CUDA and on CPUs with native bf16 arithmetic (AVX512-BF16 or AMX), else off.

    ConfigError for fp16 off CUDA (its loss scaler needs CUDA), and for an unknown AMP.
    """
    if amp == "fp16" and device.type != "cuda":
        raise ConfigError(f"amp fp16 needs a CUDA device (loss scaling), and this run trains on {device.type}; "
                          "use --amp bf16 or --amp off")
    if amp == "auto":
        return "bf16" if device.type == "cuda" or (device.type == "cpu" and cpu_has_bf16()) else "off"
    for known in get_args(Amp):
        if amp == known:
            return known
    raise ConfigError(f"amp must be auto, off, bf16 or fp16, got {amp!r}")


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (elsewhere bf16 autocast is emulated and slower)."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split()
    except OSError:  # not Linux: stay in fp32
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags
