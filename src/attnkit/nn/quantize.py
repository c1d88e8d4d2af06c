"""int8 dynamic quantization of a model's linear layers, for CPU inference.

Dynamic quantization (PyTorch's `torch.ao.quantization.quantize_dynamic`; Jacob et al. 2018 for
the integer arithmetic) stores each `nn.Linear` weight as int8 with one scale per tensor and
quantizes the activations on the fly, per batch, so it needs no calibration data. It replaces the
modules that are *called as modules*: the feed-forward's W1 and W2, attention's output projection
W^O (`out_proj`, which torch marks as not dynamically quantizable only because its own
`nn.MultiheadAttention` reads the weight directly; attnkit's `MultiHeadAttention` calls it), and
any other Linear (DETR's class and box heads). Weights read as tensors stay float32: attention's
packed W^Q, W^K, W^V (`in_proj_weight`, used with `F.linear`), convolutions, embeddings and a
tied output projection. The result runs on the CPU only.

torch.ao.quantization is marked deprecated (for torchao) but is what this torch ships and runs
with its fbgemm/oneDNN int8 kernels; its deprecation warnings are silenced here.
"""

from __future__ import annotations

import warnings
from typing import TypeVar

import torch
from torch import nn
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

QUANTIZATIONS = ("int8",)  # what `quantize=` accepts (None: float32, unchanged)
Model = TypeVar("Model", bound=nn.Module)


def quantize_int8(module: Model) -> Model:
    """A copy of MODULE with every Linear called as a module replaced by an int8 dynamic one (CPU, eval mode)."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear
    from torch.ao.quantization import quantize_dynamic

    mapping: dict = {nn.Linear: DynamicInt8Linear, NonDynamicallyQuantizableLinear: DynamicInt8Linear}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*", category=UserWarning)
        return quantize_dynamic(module.cpu().eval(), set(mapping), dtype=torch.qint8, mapping=mapping)


def int8_share(module: nn.Module) -> float:
    """The fraction of MODULE's projection weights (every Linear's, and attention's packed W^Q, W^K, W^V) in int8."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    int8 = sum(m.in_features * m.out_features for m in module.modules() if isinstance(m, DynamicInt8Linear))
    float32 = sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear)) + \
        sum(p.numel() for name, p in module.named_parameters() if name.endswith("proj_weight"))
    return int8 / max(int8 + float32, 1)
