"""The key/value cache of incremental decoding.

At inference the decoder produces one position at a time (Vaswani et al. 2017, section 3.1:
"auto-regressive, consuming the previously generated symbols as additional input"). Its
self-attention keys and values for the positions already produced do not change, so they are
kept here and each step projects only the new position. Cross-attention keys and values come from
the encoder's output, so they are computed once (`static=True`) and reused at every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Projected keys and values per head: each (batch, heads, length, head_dim)."""

    key: Tensor | None = None
    value: Tensor | None = None
    static: bool = False  # True: computed once from a fixed memory (cross-attention), never appended

    @property
    def length(self) -> int:
        return 0 if self.key is None else self.key.size(-2)

    @property
    def filled(self) -> bool:
        return self.key is not None

    def extend(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Append the new positions' keys and values; return the whole sequence's."""
        if self.key is None or self.static:
            self.key, self.value = key, value
        else:
            self.key = torch.cat([self.key, key], dim=-2)
            self.value = torch.cat([self.value, value], dim=-2)
        return self.key, self.value

    def reorder(self, batch_indices: Tensor) -> None:
        """Select batch rows (beam search keeps the surviving hypotheses' caches)."""
        if self.key is not None:
            self.key = self.key.index_select(0, batch_indices)
            self.value = self.value.index_select(0, batch_indices)
