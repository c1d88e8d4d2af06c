"""Decoding: greedy and beam search over any encoder-decoder (Vaswani et al. 2017, section 6.1:
"we used beam search with a beam size of 4 and length penalty alpha = 0.6 ... maximum output
length during inference to input length + 50, but terminate early when possible").

Both searches talk to the model only through the small `EncoderDecoder` protocol below, so the
Transformer and an RNN encoder-decoder (Bahdanau et al. 2015) share them:
  * `encode(source, source_padding_mask)` -> an encoded source with `select(rows)`;
  * `start_cache(encoded)` -> the decoder's incremental state (key/value caches, or an RNN's
    hidden state) with `reorder(rows)`, or None when the model keeps none;
  * `decode_step(prefix, encoded, cache)` -> next-token logits (batch, vocab). With a cache the
    model reads only the last token of `prefix` and extends the cache, so a step costs one
    position; with `cache=None` it recomputes the whole prefix (the uncached reference).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import torch
from torch import Tensor

from attnkit.translation.tokenizer import BOS_ID, EOS_ID, PAD_ID

EXTRA_LENGTH = 50  # max output length = source length + 50 (section 6.1)


class EncodedSource(Protocol):
    def select(self, rows: Tensor) -> EncodedSource: ...


Encoded = TypeVar("Encoded", bound=EncodedSource)  # each model's own encoder output


class EncoderDecoder(Protocol[Encoded]):
    def encode(self, source: Tensor, source_padding_mask: Tensor) -> Encoded: ...

    def start_cache(self, encoded: Encoded) -> Any: ...

    def decode_step(self, prefix: Tensor, encoded: Encoded, cache: Any) -> Tensor: ...


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, without <s> and </s>
    score: float       # log-probability (including </s>) divided by the length penalty


def length_penalty(length: int, alpha: float) -> float:
    """lp(Y) = ((5 + |Y|) / 6)^alpha  (Wu et al. 2016, Eq. 14), |Y| counting </s>."""
    return ((5.0 + length) / 6.0) ** alpha


def max_lengths(source: Tensor, extra: int = EXTRA_LENGTH) -> Tensor:
    """Per sentence: source tokens (padding excluded) + extra. source: (batch, source_length)."""
    return (source != PAD_ID).sum(dim=1) + extra  # (batch,)


@torch.no_grad()
def greedy_decode(model: EncoderDecoder[Any], source: Tensor, use_cache: bool = True,
                  extra_length: int = EXTRA_LENGTH) -> list[list[int]]:
    """argmax at every step until </s> or the length limit; returns output ids per sentence."""
    encoded = model.encode(source, source == PAD_ID)
    cache = model.start_cache(encoded) if use_cache else None
    limits = max_lengths(source, extra_length)  # (batch,)
    shortest, longest = int(limits.min()), int(limits.max())
    tokens = torch.full((source.size(0), longest + 1), PAD_ID, dtype=torch.long, device=source.device)
    tokens[:, 0] = BOS_ID  # (batch, 1 + longest): <s>, then the outputs, written in place
    finished = torch.zeros(source.size(0), dtype=torch.bool, device=source.device)
    for step in range(longest):
        logits = model.decode_step(tokens[:, :step + 1], encoded, cache)  # (batch, vocab)
        if step + 1 >= shortest:
            logits = _force_eos_at_limit(logits, step, limits)
        token = logits.argmax(dim=-1).masked_fill(finished, PAD_ID)  # (batch,)
        tokens[:, step + 1] = token
        finished |= token == EOS_ID
        if bool(finished.all()):
            break
    prefix = tokens[:, :step + 2]
    return [_strip(row) for row in prefix[:, 1:].tolist()]


@torch.no_grad()
def beam_search(model: EncoderDecoder[Any], source: Tensor, beam_size: int = 4, alpha: float = 0.6,
                extra_length: int = EXTRA_LENGTH) -> list[Hypothesis]:
    """The best hypothesis per sentence by log P(Y|X) / lp(Y), keeping `beam_size` live prefixes.

    A sentence stops when `beam_size` hypotheses have ended, or when no live prefix can still beat
    the best ended one, or at its length limit. With beam_size 1 this is greedy decoding.
    """
    batch, device = source.size(0), source.device
    rows = torch.arange(batch, device=device).repeat_interleave(beam_size)  # sentence of each beam row
    encoded = model.encode(source, source == PAD_ID).select(rows)
    cache = model.start_cache(encoded)
    limits = max_lengths(source, extra_length)  # (batch,)
    scores = torch.full((batch, beam_size), float("-inf"), device=device)
    scores[:, 0] = 0.0  # one live prefix, <s>, at the start
    prefix = torch.full((batch * beam_size, 1), BOS_ID, dtype=torch.long, device=device)
    ended: list[list[Hypothesis]] = [[] for _ in range(batch)]
    done = [False] * batch
    for step in range(int(limits.max())):
        logits = _force_eos_at_limit(model.decode_step(prefix, encoded, cache), step, limits[rows])
        log_probs = logits.float().log_softmax(dim=-1)  # (batch * beam, vocab)
        vocab = log_probs.size(-1)
        candidates = (scores.view(-1, 1) + log_probs).view(batch, beam_size * vocab)
        top_scores, top_indices = candidates.topk(min(2 * beam_size, beam_size * vocab), dim=-1)  # (batch, 2 beam)
        keep, scores = _advance(top_scores, top_indices, vocab, beam_size, prefix, ended, done, step, alpha)
        parent, token = keep // vocab, keep % vocab  # (batch, beam)
        parent_rows = (torch.arange(batch, device=device).unsqueeze(1) * beam_size + parent).view(-1)
        prefix = torch.cat([prefix[parent_rows], token.view(-1, 1)], dim=1)
        if cache is not None:
            cache.reorder(parent_rows)
        done = [d or _cannot_improve(ended[b], scores[b], limits[b], alpha, beam_size) for b, d in enumerate(done)]
        if all(done):
            break
    return [max(hypotheses, key=lambda h: h.score) for hypotheses in ended]


def _advance(top_scores: Tensor, top_indices: Tensor, vocab: int, beam_size: int, prefix: Tensor,
             ended: list[list[Hypothesis]], done: list[bool], step: int, alpha: float) -> tuple[Tensor, Tensor]:
    """Move the top candidates that end in </s> to `ended`; keep the best `beam_size` others live.

    Returns the kept candidates' flat indices (batch, beam) and their scores (batch, beam).
    """
    keep = torch.zeros(top_indices.size(0), beam_size, dtype=torch.long, device=top_indices.device)
    kept_scores = torch.full_like(keep, float("-inf"), dtype=top_scores.dtype)
    for b, (row_scores, row_indices) in enumerate(zip(top_scores.tolist(), top_indices.tolist())):
        slot = 0
        for rank, (score, index) in enumerate(zip(row_scores, row_indices)):
            if slot == beam_size or score == float("-inf"):
                break
            if index % vocab == EOS_ID:  # ends only if among the best `beam_size` candidates (as fairseq)
                if rank < beam_size and not done[b] and len(ended[b]) < beam_size:
                    tokens = prefix[b * beam_size + index // vocab, 1:].tolist()
                    ended[b].append(Hypothesis(tokens, score / length_penalty(step + 1, alpha)))
                continue
            keep[b, slot], kept_scores[b, slot] = index, score
            slot += 1
    return keep, kept_scores


def _cannot_improve(ended: list[Hypothesis], live_scores: Tensor, limit: Tensor, alpha: float, beam_size: int) -> bool:
    """True when this sentence's search is over: enough ended, or no live prefix can win."""
    if len(ended) >= beam_size:
        return True
    if not ended:
        return False
    best_live = float(live_scores.max())
    if best_live == float("-inf"):
        return True
    # log-probabilities only fall as a prefix grows; dividing by the largest penalty bounds its final score
    bound = best_live / length_penalty(int(limit), alpha) if best_live < 0 else best_live
    return max(h.score for h in ended) >= bound


def _force_eos_at_limit(logits: Tensor, step: int, limits: Tensor) -> Tensor:
    """Rows whose next token is the last allowed one may only produce </s>."""
    at_limit = step + 1 >= limits  # (batch,)
    if not bool(at_limit.any()):
        return logits
    only_eos = torch.full_like(logits, float("-inf"))
    only_eos[:, EOS_ID] = 0.0
    return torch.where(at_limit.unsqueeze(1), logits + only_eos, logits)


def _strip(tokens: list[int]) -> list[int]:
    """Output ids up to (not including) the first </s>."""
    return tokens[:tokens.index(EOS_ID)] if EOS_ID in tokens else tokens
