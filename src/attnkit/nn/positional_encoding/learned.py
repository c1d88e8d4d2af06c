"""Learned absolute position embeddings (Gehring et al. 2017; compared in Vaswani et al. 2017, section 3.5).

One trained vector per position, e_pos = P[pos], added to the token embedding. The paper found it
"nearly identical" to the sinusoids on translation; unlike them it cannot go past `max_len`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class LearnedPositionalEmbedding(nn.Module):
    """e_pos = weight[pos], a trained (max_len, d_model) table; same forward contract as the sinusoids."""

    def __init__(self, max_len: int, d_model: int, device=None, dtype=None) -> None:
        super().__init__()
        if max_len <= 0 or d_model <= 0:
            raise ValueError(f"max_len and d_model must be positive, got max_len={max_len}, d_model={d_model}")
        self.max_len, self.d_model = max_len, d_model
        self.weight = nn.Parameter(torch.empty(max_len, d_model, device=device, dtype=dtype))  # (max_len, d_model)
        nn.init.normal_(self.weight, std=d_model ** -0.5)  # fairseq's initialisation of learned positions

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """x: (batch, length, d_model) -> (1, length, d_model) in x's dtype; positions offset, offset + 1, ..."""
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(f"expected x of shape (batch, length, d_model={self.d_model}), got {tuple(x.shape)}")
        end = offset + x.size(1)
        if offset < 0 or end > self.max_len:
            raise ValueError(f"positions [{offset}, {end}) of input {tuple(x.shape)} exceed the "
                             f"learned table's max_len={self.max_len}")
        return self.weight[offset:end].unsqueeze(0).to(device=x.device, dtype=x.dtype)

    def extra_repr(self) -> str:
        return f"max_len={self.max_len}, d_model={self.d_model}"
