"""The key/value cache of incremental decoding.

At inference the decoder produces one position at a time (Vaswani et al. 2017, section 3.1:
"auto-regressive, consuming the previously generated symbols as additional input"). Its
self-attention keys and values for the positions already produced do not change, so they are
kept here and each step projects only the new position. Cross-attention keys and values come from
the encoder's output, so they are computed once (`static=True`) and reused at every step.

A cache that starts empty keeps its positions in a buffer with room to spare, doubled when full,
and writes each step's in place: appending by concatenation would copy the whole cache at every
step (quadratic in the output length). With gradients on it concatenates, so autograd sees no
in-place writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Projected keys and values per head: each (batch, heads, length, head_dim)."""

    key: Tensor | None = None
    value: Tensor | None = None
    static: bool = False  # True: computed once from a fixed memory (cross-attention), never appended
    _buffers: tuple[Tensor, Tensor] | None = field(default=None, repr=False)  # key and value with room to spare

    @property
    def length(self) -> int:
        return 0 if self.key is None else self.key.size(-2)

    @property
    def filled(self) -> bool:
        return self.key is not None

    def extend(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Append the new positions' keys and values; return the whole sequence's."""
        if self.static or (self.key is None and torch.is_grad_enabled()):
            self.key, self.value = key, value
        elif self.key is None or self._buffers is not None and not torch.is_grad_enabled():
            self._write(key, value)
        else:
            assert self.value is not None  # set together with the key
            self.key = torch.cat([self.key, key], dim=-2)
            self.value = torch.cat([self.value, value], dim=-2)
            self._buffers = None
        assert self.key is not None and self.value is not None  # every branch above sets both
        return self.key, self.value

    def _write(self, key: Tensor, value: Tensor) -> None:
        """Write the new positions into the buffers (doubled if full); key and value become views of the filled part."""
        start, end = self.length, self.length + key.size(-2)
        if self._buffers is None or end > self._buffers[0].size(-2):
            room = max(2 * end, 16)
            grown_key, grown_value = (x.new_empty(*x.shape[:-2], room, x.size(-1)) for x in (key, value))
            if start:
                assert self.key is not None and self.value is not None  # start is the length of the cached key
                grown_key[..., :start, :], grown_value[..., :start, :] = self.key, self.value
            self._buffers = grown_key, grown_value
        buffer_key, buffer_value = self._buffers
        buffer_key[..., start:end, :], buffer_value[..., start:end, :] = key, value
        self.key, self.value = buffer_key[..., :end, :], buffer_value[..., :end, :]

    def reorder(self, batch_indices: Tensor) -> None:
        """Select batch rows (beam search keeps the surviving hypotheses' caches)."""
        if self._buffers is not None:
            key_buffer, value_buffer = (x.index_select(0, batch_indices) for x in self._buffers)
            self._buffers = key_buffer, value_buffer
            self.key, self.value = (x[..., :self.length, :] for x in self._buffers)
        elif self.key is not None:
            assert self.value is not None  # set together with the key
            self.key = self.key.index_select(0, batch_indices)
            self.value = self.value.index_select(0, batch_indices)
