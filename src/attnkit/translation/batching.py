"""Batches by token count: "sentence pairs were batched together by approximate sequence length.
Each training batch contained a set of sentence pairs containing approximately 25000 source tokens
and 25000 target tokens" (Vaswani et al. 2017, section 5.1).

Pairs are sorted by length (ties broken at random, differently each epoch), cut into batches whose
padded size `sentences * longest` stays within the token budget, and the batches are shuffled.
The sort is two stable radix passes over the small length keys (bytes, for sentences under 255
tokens) of a shuffled row order, and the batches are (start, stop) ranges into that one order
array (`TokenBatches`): a corpus of millions of pairs (`encoded_pairs.py`) is batched without a
Python object per pair or an index array per batch, in memory that is a few bytes a pair.
Sentences in one batch then have nearly the same length, so little compute goes to padding;
`padding_fraction` reports how little.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from attnkit.translation.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass(frozen=True)
class Example:
    """One tokenized pair: source ids + </s>, target ids (without <s> and </s>)."""

    source: list[int]
    target: list[int]

    @property
    def lengths(self) -> tuple[int, int]:
        return len(self.source), len(self.target) + 1  # the decoder reads <s> y and predicts y </s>


@dataclass
class Batch:
    source: Tensor         # (batch, source_length) ids, PAD after each sentence's </s>
    target_input: Tensor   # (batch, target_length): <s> y_1 ... y_n, then PAD
    target_output: Tensor  # (batch, target_length): y_1 ... y_n </s>, then PAD

    @property
    def source_padding_mask(self) -> Tensor:
        return self.source == PAD_ID  # (batch, source_length), True at padding (torch's convention)

    @property
    def target_padding_mask(self) -> Tensor:
        return self.target_input == PAD_ID  # (batch, target_length)

    @property
    def target_tokens(self) -> int:
        return int((self.target_output != PAD_ID).sum())

    @property
    def source_tokens(self) -> int:
        return int((self.source != PAD_ID).sum())

    def to(self, device: torch.device | str) -> Batch:
        return Batch(*(t.to(device, non_blocking=True) for t in (self.source, self.target_input, self.target_output)))


def make_examples(sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                  max_length: int) -> tuple[list[Example], int]:
    """Pairs of token ids -> examples, dropping pairs with a side over `max_length` tokens; returns (kept, dropped)."""
    examples = [Example(list(s) + [EOS_ID], list(t)) for s, t in zip(sources, targets)]
    kept = [e for e in examples if max(e.lengths) <= max_length]
    return kept, len(examples) - len(kept)


class TokenBatches(Sequence[np.ndarray]):
    """An epoch's batches: batch i is `order[starts[i]:stops[i]]`, a view of the one order array."""

    def __init__(self, order: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> None:
        self.order = order                         # (pairs,) positions, by length
        self.starts, self.stops = starts, stops    # (batches,) each, in the epoch's batch order

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, key: int | slice) -> np.ndarray:  # type: ignore[override]
        if isinstance(key, slice):  # a share of the batches (`distributed.shard`), still ranges
            return TokenBatches(self.order, self.starts[key], self.stops[key])  # type: ignore[return-value]
        return self.order[self.starts[key]:self.stops[key]]

    def __iter__(self) -> Iterator[np.ndarray]:
        for start, stop in zip(self.starts.tolist(), self.stops.tolist()):
            yield self.order[start:stop]


def token_batches(lengths: Sequence[tuple[int, int]] | np.ndarray, max_tokens: int, seed: int = 0,
                  shuffle: bool = True) -> TokenBatches:
    """Batches of positions, each batch's `sentences * longest side` <= max_tokens (a longer pair gets a batch alone).

    LENGTHS: (pairs, 2) source and target lengths, a list or an array (the prepared corpus's small
    unsigned type: the sorts are then radix sorts); about a second for an epoch of 4M pairs.
    """
    lengths = np.asarray(lengths).reshape(-1, 2)  # (pairs, 2), an array's own integer type (not copied)
    rng = np.random.default_rng(seed)
    order = np.arange(len(lengths), dtype=np.int32 if len(lengths) < 2**31 else np.int64)  # (pairs,)
    if shuffle:
        rng.shuffle(order)  # ties at random: the sorts below are stable
    longest = np.maximum(lengths[:, 0], lengths[:, 1])  # (pairs,)
    order = order[np.argsort(lengths[order, 0], kind="stable")]  # by source length, then (stable) by longest
    order = order[np.argsort(longest[order], kind="stable")]
    stops = _batch_ends(longest[order], max_tokens)  # (batches,)
    starts = np.concatenate([[0], stops])[:-1]
    if shuffle:
        permutation = rng.permutation(len(stops))
        starts, stops = starts[permutation], stops[permutation]
    return TokenBatches(order, starts, stops)


def _batch_ends(longest: np.ndarray, max_tokens: int) -> np.ndarray:
    """Where each greedy batch of LONGEST (nondecreasing, per pair) ends: a batch takes pairs while its padded
    size `sentences * longest` stays within max_tokens (at least one pair).

    Run by run of equal lengths (a few hundred), not batch by batch: inside a run of length L the
    batches are `max_tokens // L` pairs; only the batch open across a run's start mixes lengths.
    """
    if len(longest) == 0:
        return np.zeros(0, dtype=np.int64)
    runs = np.concatenate([[0], np.flatnonzero(longest[1:] != longest[:-1]) + 1, [len(longest)]])  # (runs + 1,)
    ends: list[np.ndarray] = []
    open_count = 0  # pairs in the batch still open (all shorter than the run now)
    for start, stop in zip(runs[:-1].tolist(), runs[1:].tolist()):
        per_batch = max(max_tokens // max(int(longest[start]), 1), 1)
        taken = 0
        if open_count:
            taken = min(max(per_batch - open_count, 0), stop - start)  # this run's pairs that join the open batch
            if taken == stop - start and open_count + taken < per_batch:
                open_count += taken  # the whole run joined, and the batch has room left
                continue
            ends.append(np.array([start + taken]))
        full, open_count = divmod(stop - start - taken, per_batch)
        ends.append(start + taken + per_batch * np.arange(1, full + 1))
    if open_count:
        ends.append(np.array([len(longest)]))
    return np.concatenate(ends).astype(np.int64)


def padding_fraction(batches: Sequence[Sequence[int] | np.ndarray], lengths: Sequence[tuple[int, int]] | np.ndarray
                     ) -> float:
    """Share of the padded source and target tensors that is padding."""
    members = [np.asarray(batch).reshape(-1) for batch in batches]  # views, for `TokenBatches`
    sizes = np.array([len(batch) for batch in members], dtype=np.int64)  # (batches,)
    if not sizes.any():
        return 0.0
    rows = np.asarray(lengths).reshape(-1, 2)[np.concatenate(members)]  # (pairs, 2), batch after batch
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])[sizes > 0]
    longest = np.maximum.reduceat(rows, starts, axis=0).astype(np.int64)  # (batches, 2): each batch's padded length
    padded = int((longest.sum(axis=1) * sizes[sizes > 0]).sum())
    return 1.0 - int(rows.sum(dtype=np.int64)) / max(padded, 1)


def collate(examples: Sequence[Example]) -> Batch:
    """Pad one batch of examples into tensors."""
    source = pad_ids([e.source for e in examples])
    target_input = pad_ids([[BOS_ID] + e.target for e in examples])
    target_output = pad_ids([e.target + [EOS_ID] for e in examples])
    return Batch(source, target_input, target_output)


def pad_ids(sequences: Sequence[Sequence[int]]) -> Tensor:
    out = torch.full((len(sequences), max(len(s) for s in sequences)), PAD_ID, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        out[row, :len(sequence)] = torch.as_tensor(sequence, dtype=torch.long)
    return out  # (batch, longest)
