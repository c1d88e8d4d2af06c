"""`LoopConfig.compile`: training through `torch.compile`, and its failure as one clear error.

The loop compiles the module it trains through (the task's model, or DDP around it); the task's
model itself stays eager, so checkpoints keep its parameter names (no `_orig_mod.`) and
validation runs without compiling.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from attnkit.errors import UserError
from attnkit.nn.compiled import compiler_reason, from_compiler


@contextlib.contextmanager
def compile_errors(backend: str | Callable[..., Any], run_path: Any) -> Iterator[None]:
    """Around the first compiled step (compilation happens there): a compiler's failure becomes one UserError
    instead of its trace; the task's own errors pass through."""
    try:
        yield
    except Exception as error:
        if not from_compiler(error):
            raise
        name = getattr(backend, "__name__", backend)
        raise UserError(f"--compile: torch.compile (backend {name}) failed at the first training step on "
                        f"this machine ({compiler_reason(error)}); train without --compile (add --resume "
                        f"to use {run_path} again)") from None

