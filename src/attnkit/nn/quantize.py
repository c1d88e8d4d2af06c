"""int8 dynamic quantization of a model's linear layers, for CPU inference.

Dynamic quantization (PyTorch's `torch.ao.quantization.quantize_dynamic`; Jacob et al. 2018 for
the integer arithmetic) stores each `nn.Linear` weight as int8 with one scale per tensor and
quantizes the activations on the fly, per batch, so it needs no calibration data. It replaces the
modules that are *called as modules*: the feed-forward's W1 and W2, attention's output projection
W^O (`out_proj`, which torch marks as not dynamically quantizable only because its own
`nn.MultiheadAttention` reads the weight directly; attnkit's `MultiHeadAttention` calls it), and
any other Linear (DETR's class and box heads). Weights read as tensors stay float32: attention's
packed W^Q, W^K, W^V (`in_proj_weight`, used with `F.linear`), deformable attention's value
projections (written straight into the sampling's layout), convolutions and embeddings.
`int8_linear` makes an int8 Linear from a weight read as a tensor: a model whose output projection
is tied to its embedding (section 3.4 of Vaswani et al. 2017) gets an int8 copy for the projection
and keeps the float embedding for lookups; at a 58k vocabulary that projection is the largest
matrix product of a decoding step. `int8_attention` gives attention modules int8 copies of the
parts of their packed projection that decoding reads (self-attention's W^Q|W^K|W^V, cross-attention's
W^Q and W^K|W^V). The result runs on the CPU only.

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
    return _quantized(module, per_row=False)


def _quantized(module: Model, per_row: bool) -> Model:
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear
    from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

    mapping: dict = {nn.Linear: DynamicInt8Linear, NonDynamicallyQuantizableLinear: DynamicInt8Linear}
    qconfig = per_channel_dynamic_qconfig if per_row else default_dynamic_qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*", category=UserWarning)
        return quantize_dynamic(module.cpu().eval(), dict.fromkeys(mapping, qconfig), mapping=mapping)


def int8_linear(weight: torch.Tensor, bias: torch.Tensor | None = None) -> nn.Module:
    """x -> x WEIGHT^T + BIAS with WEIGHT (out_features, in_features) in int8, one scale per output row (its own
    range: an embedding's rows differ in norm); copies, WEIGHT itself is left as it is (CPU, eval mode)."""
    linear = nn.Linear(weight.size(1), weight.size(0), bias=bias is not None)
    with torch.no_grad():
        linear.weight.copy_(weight)
        if bias is not None:
            linear.bias.copy_(bias)
    return _quantized(nn.Sequential(linear), per_row=True)[0]


def int8_attention(module: Model) -> Model:
    """MODULE (in place) with every attention module of one packed projection given int8 copies of its parts
    (`MultiHeadAttention.int8_projections`: "qkv", "q", "kv"), one scale per output row; the float weights stay
    for anything else that reads them."""
    from attnkit.nn.multi_head_attention import MultiHeadAttention

    for attention in module.modules():
        if not isinstance(attention, MultiHeadAttention) or attention.in_proj_weight is None:
            continue
        weight, bias, width = attention.in_proj_weight, attention.in_proj_bias, attention.embed_dim
        parts = {"qkv": slice(None), "q": slice(0, width), "kv": slice(width, None)}
        attention.int8_projections = nn.ModuleDict(
            {name: int8_linear(weight[rows], None if bias is None else bias[rows]) for name, rows in parts.items()})
    return module


def int8_share(module: nn.Module) -> float:
    """The fraction of MODULE's projection weights (every Linear's, and attention's packed W^Q, W^K, W^V) in int8;
    an attention module's int8 copies of its packed projection count once, as its packed weight."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    from attnkit.nn.multi_head_attention import MultiHeadAttention

    attentions = [a for a in module.modules() if isinstance(a, MultiHeadAttention)]
    copies = {id(m) for a in attentions if a.int8_projections is not None for m in a.int8_projections.modules()}
    int8 = sum(m.in_features * m.out_features for m in module.modules()
               if isinstance(m, DynamicInt8Linear) and id(m) not in copies)
    float32 = sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))
    for attention in attentions:  # the packed W^Q, W^K, W^V: int8 where the module has its copies
        packed = sum(p.numel() for name, p in attention.named_parameters(recurse=False) if name.endswith("proj_weight"))
        int8, float32 = (int8 + packed, float32) if attention.int8_projections is not None else (int8, float32 + packed)
    return int8 / max(int8 + float32, 1)
