"""`--device`: which torch device a command runs on."""

from __future__ import annotations

import torch

from attnkit.errors import ConfigError


def resolve_device(name: str | None) -> torch.device:
    """NAME as a torch.device; None: CUDA when available, else the CPU. ConfigError for cuda without CUDA or a typo."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: no CUDA device is available here")
    try:
        return torch.device(name)
    except RuntimeError:
        raise ConfigError(f"--device: unknown device '{name}' (cpu or cuda)") from None
