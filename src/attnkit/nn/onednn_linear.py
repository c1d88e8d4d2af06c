"""Linear layers through oneDNN's matrix product at CPU inference.

PyTorch computes a float32 `nn.Linear` on the CPU with MKL's matrix product. On AMD CPUs that runs at about
half the rate of oneDNN's, which PyTorch ships too, for its convolutions and, through `torch.compile`, for
the Linears of compiled graphs (`mkldnn::_linear_pointwise`). y = x W^T + b is the same product either way,
summed in another order (outputs equal within float32 rounding). `onednn_linears` marks a model's Linear modules
and attention's packed projections so that, without gradients, on float32 CPU inputs large enough to pay
(rows x inputs x outputs >= `ONEDNN_PAYS`), they call that operator on the dense tensors as they are (no layout
conversions), and PyTorch's own product otherwise: training, other devices and dtypes, small products, traced,
exported and compiled graphs (BENCHMARKS.md, "Linear layers through oneDNN"). Parameters and state dicts are
unchanged: the modules stay `nn.Linear`s.
"""

from __future__ import annotations

from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

from attnkit.nn.multi_head_attention import MultiHeadAttention

ONEDNN_PAYS = 2 ** 20  # multiply-adds: about where oneDNN's product and MKL's take the same time on this CPU
Model = TypeVar("Model", bound=nn.Module)


def onednn_available() -> bool:
    """Whether this build of PyTorch has oneDNN and its dense Linear operator."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """F.linear(x, WEIGHT, BIAS): oneDNN's product where it pays (float32 on the CPU without gradients, outside
    traced, exported and compiled graphs), PyTorch's otherwise."""
    if (torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != torch.float32 or weight.dtype != torch.float32
            or x.numel() // max(x.shape[-1], 1) * weight.numel() < ONEDNN_PAYS
            or torch.jit.is_tracing() or torch.compiler.is_compiling() or torch.onnx.is_in_onnx_export()):
        return F.linear(x, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")  # (..., out_features)


class OneDnnLinear(nn.Linear):
    """An `nn.Linear` whose product is `linear`'s."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


def onednn_linears(module: Model) -> Model:
    """MODULE (in place) with each of its `nn.Linear`s (that class, or the attention's output projection's marker
    subclass; not quantized ones) an `OneDnnLinear`, and its `MultiHeadAttention`s' packed projections through
    `linear`. Nothing changes where this PyTorch lacks oneDNN."""
    if onednn_available():
        for layer in module.modules():
            if type(layer) in (nn.Linear, NonDynamicallyQuantizableLinear):
                layer.__class__ = OneDnnLinear
            elif isinstance(layer, MultiHeadAttention):
                layer.product = linear
    return module
