"""A model's inference forward through `torch.compile`, with its weights frozen into the graph.

An eager forward dispatches every operator from Python: a detector at 96 px is about 2,000 small
operators per image, and at batch 1 their dispatch costs as much as their arithmetic. Inductor
(PyTorch 2's compiler) traces the forward once per input shape and fuses the elementwise chains into
generated C++ loops; with `freezing` it treats the weights as constants, as an inference engine does
with its graph: convolutions and linears pre-packed for oneDNN and MKL, with their activations fused,
constant subgraphs folded. The guards on the module's attributes are skipped (the weights are frozen
anyway); those on the inputs' shapes stay, so each new shape compiles once (tens of seconds on a
laptop CPU, fewer from Inductor's on-disk cache). `dynamic=False`: symbolic shapes gave kernels slower
than eager (BENCHMARKS.md, "Compiled inference"). On a GPU the compiled graph is also captured as a CUDA
graph (`mode="reduce-overhead"`'s `triton.cudagraphs`): a call then replays all its kernels with one
launch, where the eager forward launches each of its thousands; a call's outputs live in the graph's
memory until the next call, which the callers here have read by then. Inference only: a frozen graph no
longer reads the module's weights.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from attnkit.errors import UserError


class CompiledForward:
    """MODULE's forward compiled for inference; a compiler's failure (no C++ compiler, an unsupported
    operator) becomes one UserError that says to run without --compile."""

    def __init__(self, module: nn.Module) -> None:
        self.graphs = any(p.is_cuda for p in module.parameters())  # CUDA graphs where the weights are on a GPU
        self.forward: Callable[..., Any] = torch.compile(module.eval(), dynamic=False, options={
            "guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe, "triton.cudagraphs": self.graphs})
        self.shapes: set[tuple[tuple[int, ...], ...]] = set()  # the input shapes compiled so far

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch._inductor.config as inductor_config

        shapes = tuple(tuple(a.shape) for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor))
        if shapes not in self.shapes:  # stderr: results alone go to stdout
            print(f"compiling the model for inputs of shape {', '.join(map(str, shapes))} (once per shape)",
                  file=sys.stderr, flush=True)
            self.shapes.add(shapes)
        if self.graphs:  # a new inference step: the last call's outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        try:
            # freezing is read when a shape compiles, i.e. in this call (`torch.compile(options=...)` did not freeze)
            with torch.no_grad(), inductor_config.patch(freezing=True):
                return self.forward(*args, **kwargs)
        except Exception as error:
            if not from_compiler(error):
                raise
            raise UserError(f"--compile: torch.compile failed on this machine ({compiler_reason(error)}); "
                            "run without --compile") from None


def from_compiler(error: Exception) -> bool:
    """Whether ERROR comes from torch.compile's machinery (Dynamo, Inductor, a backend) rather than the model."""
    from torch._dynamo.exc import TorchDynamoException

    return isinstance(error, TorchDynamoException) or type(error).__module__.startswith(
        ("torch._dynamo", "torch._inductor", "torch._functorch"))


def compiler_reason(error: Exception) -> str:
    """The first line of a compiler's own error (Dynamo wraps a backend's), with its type."""
    cause = getattr(error, "inner_exception", None) or error
    reason = (str(cause).strip().splitlines() or [""])[0][:300]
    return f"{type(cause).__name__}: {reason}"
