"""The fixed sinusoidal positional encoding (Vaswani et al. 2017, section 3.5).

    PE(pos, 2i)   = sin(pos / base^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / base^(2i / d_model))

Attention alone is order-blind, so a position vector e_i of the embedding's size is added to
each embedding a_i. Each pair of dimensions is a sinusoid of its own wavelength (from 2 pi to
base * 2 pi), so PE(pos + k) is a linear function of PE(pos) for any fixed offset k.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class SinusoidalPositionalEncoding(nn.Module):
    """PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(...); any length, no parameters.

    `forward(x, offset)` returns the encoding of positions offset, offset + 1, ... for x's length,
    (1, length, d_model) in x's dtype and device; the caller adds it: `x + pe(x)`.
    """

    def __init__(self, d_model: int, base: float = 10000.0) -> None:
        super().__init__()
        if d_model <= 0:
            raise ValueError(f"d_model must be positive, got {d_model}")
        self.d_model, self.base = d_model, base

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: (batch, length, d_model) -> (1, length, d_model); offset: position of x's first element."""
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(f"expected x of shape (batch, length, d_model={self.d_model}), got {tuple(x.shape)}")
        return self.encoding(x.size(1), offset, dtype=x.dtype, device=x.device).unsqueeze(0)

    def encoding(self, length: int, offset: int = 0, dtype: torch.dtype = torch.float32,
                 device: torch.device | None = None) -> Tensor:
        """PE(pos) for pos in [offset, offset + length): (length, d_model)."""
        exact = torch.float64 if dtype == torch.float64 else torch.float32  # compute in at least fp32
        positions = torch.arange(offset, offset + length, dtype=exact, device=device).unsqueeze(1)  # (length, 1)
        two_i = torch.arange(0, self.d_model, 2, dtype=exact, device=device)  # 2i: (ceil(d_model / 2),)
        angles = positions / self.base ** (two_i / self.d_model)  # pos / base^(2i/d): (length, ceil(d_model / 2))
        pe = torch.empty(length, self.d_model, dtype=exact, device=device)
        pe[:, 0::2] = angles.sin()
        pe[:, 1::2] = angles[:, : self.d_model // 2].cos()
        return pe.to(dtype)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, base={self.base}"
