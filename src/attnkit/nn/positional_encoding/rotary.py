"""Rotary position embedding, RoPE (Su et al. 2021, "RoFormer", Eq. 34).

Instead of adding a position vector to the input, rotate each pair of query/key features
(x_{2i}, x_{2i+1}) by the angle pos * theta_i, theta_i = base^(-2i/d). The dot product of a
rotated query at position m and a rotated key at position n then depends only on m - n, so
attention sees relative positions. Applied inside attention, to q and k after projection.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RotaryEmbedding(nn.Module):
    """Rotates (..., length, head_dim) query or key tensors by their positions."""

    inv_freq: Tensor  # a buffer: (head_dim / 2,)

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embedding needs an even head_dim, got {head_dim}")
        self.head_dim = head_dim
        self.base = base
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # theta_i: (head_dim / 2,)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def angles(self, length: int, offset: int = 0, device: torch.device | None = None) -> Tensor:
        positions = torch.arange(offset, offset + length, device=device, dtype=torch.float32)
        return torch.outer(positions, self.inv_freq.to(device))  # (length, head_dim / 2)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: (..., length, head_dim), the positions being offset, offset + 1, ...; same shape out."""
        if x.size(-1) != self.head_dim:
            raise ValueError(f"rotary embedding built for head_dim {self.head_dim}, got input {tuple(x.shape)}")
        angles = self.angles(x.size(-2), offset, x.device)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]  # the pairs (x_{2i}, x_{2i+1}): (..., length, head_dim / 2)
        rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
        return rotated.flatten(-2)  # interleave back: (..., length, head_dim)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}"
