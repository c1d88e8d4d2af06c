"""Tokenized sentence pairs as flat token arrays, as fairseq binarises a corpus (Ott et al. 2019).

Each side is one array of every sentence's token ids end to end, an offsets array (sentence i is
`ids[offsets[i]:offsets[i] + lengths[i]]`) and the lengths, in memory or read from a prepared
corpus (`prepared_corpus.py`): there the ids and offsets stay in their files, read by position a
batch at a time (`file_vector.py`), and only the lengths (a byte or two a sentence) are in the
process. `keep` selects pairs (the ones within `max_length`) by an index array, without copying
the ids.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnkit.translation.batching import Batch, Example
from attnkit.translation.file_vector import FileVector
from attnkit.translation.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass(frozen=True)
class RaggedIds:
    """Sentences of token ids: sentence i is ids[offsets[i]:offsets[i] + lengths[i]]."""

    ids: np.ndarray | FileVector      # (tokens,) uint16 or int32
    offsets: np.ndarray | FileVector  # (sentences + 1,) int64, offsets[0] == 0
    lengths: np.ndarray               # (sentences,) the smallest unsigned type that holds the longest + 1

    @classmethod
    def from_lists(cls, sentences: Sequence[Sequence[int]]) -> RaggedIds:
        lengths = np.fromiter((len(s) for s in sentences), dtype=np.int64, count=len(sentences))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        ids = np.fromiter((i for s in sentences for i in s), dtype=np.int32, count=int(offsets[-1]))
        return cls(ids, offsets, lengths.astype(length_type(int(lengths.max(initial=0)))))

    def __len__(self) -> int:
        return len(self.lengths)

    def sentence(self, index: int) -> np.ndarray:
        start = int(self.offsets[index])
        return self.ids[start:start + int(self.lengths[index])]


def length_type(longest: int) -> type:
    """uint8, uint16 or uint32: the smallest that holds LONGEST + 1 (a length with </s> or <s> added)."""
    return next(t for t in (np.uint8, np.uint16, np.uint32) if longest + 1 <= np.iinfo(t).max)


class EncodedPairs:
    """Training pairs as token arrays; a `Sequence[Example]` (for code that wants examples) that batches itself.

    Source sentences get </s> appended, the target <s> in front (input) and </s> behind (output),
    when a batch is made (`batch`), as `batching.collate` does for `Example`s.
    """

    def __init__(self, source: RaggedIds, target: RaggedIds, index: np.ndarray | None = None) -> None:
        self.source, self.target = source, target
        self.index = index  # (pairs,) the rows kept, int32; None: every row, without an array of millions

    @classmethod
    def from_lists(cls, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]) -> EncodedPairs:
        return cls(RaggedIds.from_lists(sources), RaggedIds.from_lists(targets))

    @property
    def lengths(self) -> np.ndarray:
        """(pairs, 2): the source with </s>, the target with <s> or </s> (what `Example.lengths` says), in the
        smallest type that holds them (a byte a side while every sentence is under 255 tokens)."""
        source, target = self._kept(self.source.lengths), self._kept(self.target.lengths)
        longest = int(max(source.max(initial=0), target.max(initial=0)))
        lengths: np.ndarray = np.empty((len(source), 2), dtype=length_type(longest))
        np.add(source, 1, out=lengths[:, 0], casting="unsafe")  # the type holds longest + 1
        np.add(target, 1, out=lengths[:, 1], casting="unsafe")
        return lengths

    def keep(self, max_length: int) -> tuple[EncodedPairs, int]:
        """The pairs whose sides are within MAX_LENGTH tokens, and how many were dropped."""
        kept = self._kept(self.source.lengths) < max_length  # with </s> or <s>: length + 1 <= max_length
        kept &= self._kept(self.target.lengths) < max_length
        if kept.all():
            return self, 0
        rows = np.flatnonzero(kept) if self.index is None else self.index[kept]
        return EncodedPairs(self.source, self.target, rows.astype(_row_type(len(self.source)))), int((~kept).sum())

    def __len__(self) -> int:
        return len(self.source) if self.index is None else len(self.index)

    def __getitem__(self, position: int | slice) -> Example | EncodedPairs:
        if isinstance(position, slice):
            return EncodedPairs(self.source, self.target, self._rows(np.arange(len(self))[position]))
        if not -len(self) <= position < len(self):
            raise IndexError(f"pair {position} of {len(self)}")
        row = int(self._rows(np.asarray(position % len(self))))
        return Example(self.source.sentence(row).tolist() + [EOS_ID], self.target.sentence(row).tolist())

    def _kept(self, lengths: np.ndarray) -> np.ndarray:
        """A side's LENGTHS of the kept rows (the array itself when every row is kept)."""
        return lengths if self.index is None else lengths[self.index]

    def _rows(self, positions: np.ndarray) -> np.ndarray:
        """The rows of the arrays at POSITIONS among the kept pairs."""
        return positions if self.index is None else self.index[positions]

    def __iter__(self) -> Iterator[Example]:
        for position in range(len(self)):
            yield self[position]  # type: ignore[misc]

    def batch(self, positions: Sequence[int] | np.ndarray) -> Batch:
        """The padded tensors of the pairs at POSITIONS, read from the arrays directly."""
        rows = self._rows(np.asarray(positions, dtype=np.int64))
        sources = [self.source.sentence(row) for row in rows]
        targets = [self.target.sentence(row) for row in rows]
        source = _padded(sources, before=None, after=EOS_ID)         # (batch, source_length)
        target_input = _padded(targets, before=BOS_ID, after=None)   # (batch, target_length)
        target_output = _padded(targets, before=None, after=EOS_ID)  # (batch, target_length)
        return Batch(source, target_input, target_output)


def _row_type(rows: int) -> type:
    return np.int32 if rows < 2**31 else np.int64  # int32: half the memory of millions of pairs


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
