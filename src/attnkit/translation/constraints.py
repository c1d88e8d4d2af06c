"""What a search may not propose next: masks on next-token scores (logits in greedy search,
log-probabilities in beam search). Each is one of transformers' logits processors, so that a model
imported with its generation config (`attnkit import marian`) decodes as `generate` does:

  ban                  NoBadWordsLogitsProcessor (single-token bad words), MinLengthLogitsProcessor (</s>)
  ban_repeated_ngrams  NoRepeatNGramLogitsProcessor: no n-gram twice (Paulus et al. 2017, section 2.5)
  force_at_limit       ForcedEOSTokenLogitsProcessor: the last allowed token is forced_eos_token_id (</s>, or any id)

scores: (rows, vocab); a masked entry is -inf.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnkit.translation.tokenizer import EOS_ID


def ban_(scores: Tensor, ids: Sequence[int]) -> Tensor:
    """SCORES with the columns IDS at -inf, written in place (a step's scores are the caller's own: a copy of a
    (beams, 58k) matrix at every step costs more than the masking)."""
    scores[:, list(ids)] = float("-inf")
    return scores


def ban_repeated_ngrams(scores: Tensor, prefix: Tensor, n: int) -> Tensor:
    """-inf for every token that would complete an n-gram PREFIX already holds. prefix: (rows, length), the start
    token included (as transformers counts it)."""
    if prefix.size(1) < n:
        return scores
    tail = prefix[:, prefix.size(1) + 1 - n:]                     # (rows, n - 1): what the next n-gram starts with
    windows = prefix.unfold(1, n, 1)                              # (rows, windows, n)
    seen = (windows[..., :-1] == tail.unsqueeze(1)).all(dim=-1)   # (rows, windows): starts like the next one
    vocab = scores.size(-1)
    banned = torch.zeros(scores.size(0), vocab + 1, dtype=torch.bool, device=scores.device)
    banned.scatter_(1, torch.where(seen, windows[..., -1], vocab), True)  # unmatched windows: a spare column
    return scores.masked_fill(banned[:, :vocab], float("-inf"))


def force_at_limit(scores: Tensor, step: int, limits: Tensor, token: int = EOS_ID) -> Tensor:
    """Rows whose next token is the last one allowed (step + 1 >= limit) may only produce TOKEN, at score 0
    (its log-probability once the others are excluded); whatever TOKEN is, the hypothesis then ends by length.
    limits: (rows,)."""
    at_limit = step + 1 >= limits  # (rows,)
    if not bool(at_limit.any()):
        return scores
    only_token = torch.full_like(scores, float("-inf"))
    only_token[:, token] = 0.0
    return torch.where(at_limit.unsqueeze(1), only_token, scores)
