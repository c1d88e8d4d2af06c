"""Linear layers through oneDNN's inner product at CPU inference.

PyTorch computes a float32 `nn.Linear` on the CPU with MKL's matrix product. On AMD CPUs that runs at about
half the rate of oneDNN's inner product, which PyTorch ships too and uses for its convolutions (BENCHMARKS.md,
"Linear layers through oneDNN"): y = x W^T + b is the same product either way, summed in another order
(outputs equal within 1e-5). `onednn_linears` marks a model's Linear modules so that, without gradients,
on float32 CPU inputs large enough to pay (rows x inputs x outputs >= `ONEDNN_PAYS`), they call
`aten::mkldnn_linear` with the weight converted once, and PyTorch's own product otherwise (training, other
devices and dtypes, small products, traced, exported and compiled graphs). Parameters and state dicts are
unchanged: the modules stay `nn.Linear`s.
"""

from __future__ import annotations

from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ONEDNN_PAYS = 2 ** 23  # multiply-adds: below about this the conversions cost more than the faster product saves
Model = TypeVar("Model", bound=nn.Module)


class OneDnnLinear(nn.Linear):
    """An `nn.Linear` whose inference on float32 CPU tensors runs oneDNN's inner product when it pays."""

    _onednn: tuple[tuple[int, ...], Tensor, Tensor | None] | None = None  # ((address, version) of W and b, W, b)

    def forward(self, x: Tensor) -> Tensor:
        rows = x.numel() // max(x.shape[-1], 1)
        if (torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != torch.float32
                or self.weight.dtype != torch.float32 or rows * self.in_features * self.out_features < ONEDNN_PAYS
                or torch.jit.is_tracing() or torch.compiler.is_compiling() or torch.onnx.is_in_onnx_export()):
            return F.linear(x, self.weight, self.bias)
        weight, bias = self._onednn_weights()
        y = torch.ops.aten.mkldnn_linear(x.reshape(rows, self.in_features).to_mkldnn(), weight, bias)
        return y.to_dense().view(*x.shape[:-1], self.out_features)  # (..., out_features)

    def __getstate__(self) -> dict:
        """Copies and pickles leave the converted weights out (they are made again from W and b)."""
        return {k: v for k, v in super().__getstate__().items() if k != "_onednn"}

    def _onednn_weights(self) -> tuple[Tensor, Tensor | None]:
        """W and b in oneDNN's layout, converted again when an optimizer's step or loaded weights changed W."""
        version = (self.weight.data_ptr(), self.weight._version, *(() if self.bias is None else
                                                                   (self.bias.data_ptr(), self.bias._version)))
        if self._onednn is None or self._onednn[0] != version:
            self._onednn = (version, self.weight.detach().to_mkldnn(),
                            None if self.bias is None else self.bias.detach().to_mkldnn())
        return self._onednn[1], self._onednn[2]


def onednn_linears(module: Model) -> Model:
    """MODULE (in place) with each of its `nn.Linear`s (exactly that class: not quantized or other subclasses) an
    `OneDnnLinear`. Nothing changes where oneDNN is not in this build of PyTorch."""
    if not torch.backends.mkldnn.is_available():
        return module
    for layer in module.modules():
        if type(layer) is nn.Linear:
            layer.__class__ = OneDnnLinear
    return module
