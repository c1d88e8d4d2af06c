"""Tokenized sentence pairs as flat token arrays, as fairseq binarises a corpus (Ott et al. 2019).

Each side is one array of every sentence's token ids end to end plus an offsets array (sentence i
is `ids[offsets[i]:offsets[i + 1]]`), in memory or memory-mapped from a prepared corpus
(`prepared_corpus.py`): millions of pairs cost two numbers each in the process, not a Python list
each, and a batch reads only its own sentences from the files. `keep` selects pairs (the ones
within `max_length`) by an index array, without copying the ids.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnkit.translation.batching import Batch, Example
from attnkit.translation.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass(frozen=True)
class RaggedIds:
    """Sentences of token ids: sentence i is ids[offsets[i]:offsets[i + 1]]."""

    ids: np.ndarray      # (tokens,) uint16 or int32
    offsets: np.ndarray  # (sentences + 1,) int64, offsets[0] == 0

    @classmethod
    def from_lists(cls, sentences: Sequence[Sequence[int]]) -> RaggedIds:
        lengths = np.fromiter((len(s) for s in sentences), dtype=np.int64, count=len(sentences))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        ids = np.fromiter((i for s in sentences for i in s), dtype=np.int32, count=int(offsets[-1]))
        return cls(ids, offsets)

    @property
    def lengths(self) -> np.ndarray:
        """(sentences,) int32, without an int64 copy of millions of offsets: the offsets are cast to int32 in
        ufunc buffers, and a difference of two's-complement wrapped values is exact while a sentence fits."""
        return np.subtract(self.offsets[1:], self.offsets[:-1], dtype=np.int32, casting="unsafe")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def sentence(self, index: int) -> np.ndarray:
        return self.ids[self.offsets[index]:self.offsets[index + 1]]


class EncodedPairs:
    """Training pairs as token arrays; a `Sequence[Example]` (for code that wants examples) that batches itself.

    Source sentences get </s> appended, the target <s> in front (input) and </s> behind (output),
    when a batch is made (`batch`), as `batching.collate` does for `Example`s.
    """

    def __init__(self, source: RaggedIds, target: RaggedIds, index: np.ndarray | None = None) -> None:
        self.source, self.target = source, target
        rows = np.int32 if len(source) < 2**31 else np.int64  # int32: half the memory of millions of pairs
        self.index = np.arange(len(source), dtype=rows) if index is None else index  # (pairs,) rows kept

    @classmethod
    def from_lists(cls, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> EncodedPairs:
        return cls(RaggedIds.from_lists(sources), RaggedIds.from_lists(targets))

    @property
    def lengths(self) -> np.ndarray:
        """(pairs, 2): the source with </s>, the target with <s> or </s> (what `Example.lengths` says)."""
        lengths = np.empty((len(self.index), 2), dtype=np.int32)  # int32: half the memory of millions of pairs
        lengths[:, 0] = self.source.lengths[self.index] + 1
        lengths[:, 1] = self.target.lengths[self.index] + 1
        return lengths

    def keep(self, max_length: int) -> tuple[EncodedPairs, int]:
        """The pairs whose sides are within MAX_LENGTH tokens, and how many were dropped."""
        kept = self.source.lengths[self.index] < max_length  # with </s> or <s>: length + 1 <= max_length
        kept &= self.target.lengths[self.index] < max_length
        return EncodedPairs(self.source, self.target, self.index[kept]), int((~kept).sum())

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, position: int | slice) -> Example | EncodedPairs:
        if isinstance(position, slice):
            return EncodedPairs(self.source, self.target, self.index[position])
        row = int(self.index[position])
        return Example(self.source.sentence(row).tolist() + [EOS_ID], self.target.sentence(row).tolist())

    def __iter__(self) -> Iterator[Example]:
        for position in range(len(self)):
            yield self[position]  # type: ignore[misc]

    def batch(self, positions: Sequence[int] | np.ndarray) -> Batch:
        """The padded tensors of the pairs at POSITIONS, read from the arrays directly."""
        rows = self.index[np.asarray(positions, dtype=np.int64)]
        sources = [self.source.sentence(row) for row in rows]
        targets = [self.target.sentence(row) for row in rows]
        source = _padded(sources, before=None, after=EOS_ID)         # (batch, source_length)
        target_input = _padded(targets, before=BOS_ID, after=None)   # (batch, target_length)
        target_output = _padded(targets, before=None, after=EOS_ID)  # (batch, target_length)
        return Batch(source, target_input, target_output)


def _padded(sentences: Sequence[np.ndarray], before: int | None, after: int | None) -> torch.Tensor:
    extra = (before is not None) + (after is not None)
    out = np.full((len(sentences), max(len(s) for s in sentences) + extra), PAD_ID, dtype=np.int64)
    first = int(before is not None)
    for row, sentence in enumerate(sentences):
        if before is not None:
            out[row, 0] = before
        out[row, first:first + len(sentence)] = sentence
        if after is not None:
            out[row, first + len(sentence)] = after
    return torch.from_numpy(out)  # (batch, longest + specials)
