"""Batches by token count: "sentence pairs were batched together by approximate sequence length.
Each training batch contained a set of sentence pairs containing approximately 25000 source tokens
and 25000 target tokens" (Vaswani et al. 2017, section 5.1).

Pairs are sorted by length (ties broken at random, differently each epoch), cut into batches whose
padded size `sentences * longest` stays within the token budget, and the batches are shuffled.
Sentences in one batch then have nearly the same length, so little compute goes to padding;
`padding_fraction` reports how little.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


def token_batches(lengths: Sequence[tuple[int, int]], max_tokens: int, seed: int = 0,
                  shuffle: bool = True) -> list[list[int]]:
    """Index lists, each batch's `sentences * longest side` <= max_tokens (a longer pair gets a batch alone)."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(lengths), generator=generator).tolist() if shuffle else list(range(len(lengths)))
    order.sort(key=lambda i: lengths[i])  # stable: equal lengths stay in random order
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for index in order:
        longest_if_added = max(longest, *lengths[index])
        if current and longest_if_added * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest_if_added = [], max(lengths[index])
        current.append(index)
        longest = longest_if_added
    if current:
        batches.append(current)
    if shuffle:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return batches


def padding_fraction(batches: Sequence[Sequence[int]], lengths: Sequence[tuple[int, int]]) -> float:
    """Share of the padded source and target tensors that is padding."""
    real = padded = 0
    for batch in batches:
        for side in (0, 1):
            side_lengths = [lengths[i][side] for i in batch]
            real += sum(side_lengths)
            padded += max(side_lengths) * len(side_lengths)
    return 1.0 - real / max(padded, 1)


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
