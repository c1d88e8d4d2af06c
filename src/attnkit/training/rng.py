"""The random number generators a training run consumes: Python's, NumPy's and PyTorch's (CPU, CUDA).

Their states are saved with each training state so that dropout and any other randomness after
`--resume` draw exactly what an uninterrupted run would have drawn. `isolated_rng()` runs a block
(the validation pass) without moving the training run's generators, so that evaluating or not
evaluating at a step never changes what training does next.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import numpy as np
import torch


def capture_rng() -> dict[str, Any]:
    """The current state of every generator, as tensors, numbers and lists (no pickle needed)."""
    version, internal, gauss_next = random.getstate()
    numpy_state = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state(legacy=True))
    kind, keys, position, has_gauss, cached_gaussian = numpy_state
    state: dict[str, Any] = {
        "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
        "numpy": {"kind": kind, "keys": keys.tolist(), "position": int(position),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put every generator back into the state `capture_rng` returned."""
    python = state["python"]
    random.setstate((python["version"], tuple(python["internal"]), python["gauss_next"]))
    numpy = state["numpy"]
    np.random.set_state((numpy["kind"], np.asarray(numpy["keys"], dtype=np.uint32), numpy["position"],
                         numpy["has_gauss"], numpy["cached_gaussian"]))
    torch.set_rng_state(state["torch"].to(torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        cuda_states = list(state["cuda"])[: torch.cuda.device_count()]
        torch.cuda.set_rng_state_all([cuda_state.to(torch.uint8) for cuda_state in cuda_states])


@contextmanager
def isolated_rng() -> Iterator[None]:
    """Run the block, then put every generator back where it was before the block."""
    saved = capture_rng()
    try:
        yield
    finally:
        restore_rng(saved)
