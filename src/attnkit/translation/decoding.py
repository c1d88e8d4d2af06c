"""Decoding: greedy and beam search over any encoder-decoder (Vaswani et al. 2017, section 6.1:
"we used beam search with a beam size of 4 and length penalty alpha = 0.6 ... maximum output
length during inference to input length + 50, but terminate early when possible").

Both searches talk to the model only through the small `EncoderDecoder` protocol below, so the
Transformer and an RNN encoder-decoder (Bahdanau et al. 2015) share them:
  * `encode(source, source_padding_mask)` -> an encoded source with `select(rows)`;
  * `start_cache(encoded)` -> the decoder's incremental state (key/value caches, or an RNN's
    hidden state) with `reorder(rows)`, or None when the model keeps none;
  * `decode_step(prefix, encoded, cache)` -> next-token logits (batch, vocab), a tensor of the
    step's own (the search masks it in place). With a cache the model reads only the last token
    of `prefix` and extends the cache, so a step costs one position; with `cache=None` it
    recomputes the whole prefix (the uncached reference).

How a search scores, ends and constrains hypotheses besides its beam size and alpha is a
`DecodingConfig`. Its defaults are transformers' `generate` defaults for beam search: score
log P(Y|X) / |Y|^alpha ("power"; alpha, the recipes' `length_penalty`, 1.0 as there and in
CTranslate2 and fairseq), the best `beam` ended hypotheses kept, and `early_stopping` False: a
sentence is over when the best live prefix, normalised at its current length, cannot beat the
worst kept one (or no live prefix can beat the best ended one); </s> forced at source length + 50
(section 6.1). CTranslate2 differs only in stopping: over once `beam` hypotheses have ended
(patience 1; `early_stopping` True here). The paper's alpha 0.6 is tensor2tensor's GNMT penalty
((5 + |Y|) / 6)^alpha (Wu et al. 2016, Eq. 14; "gnmt"): on the same weights its outputs are
shorter and score lower BLEU than either peer's rules (BENCHMARKS.md, "Beam search against the
peers"); runs saved with it keep it. A model imported with its generation config carries the rules
that make these searches give `generate`'s output (`attnkit import marian`): |Y|^alpha;
`early_stopping` True / False / "never" (the best live prefix normalised at the limit instead);
every hypothesis ends at the limit, on the token forced there (forced_eos_token_id: </s>, or
another id, which ends it by length, not as </s> does) or on any token when none is forced; masks
applied to the log-probabilities after the softmax, as transformers' logits processors are in
beam search.

|Y| counts </s>, as transformers, fairseq and CTranslate2 count it (CTranslate2 scores a hypothesis
with its </s>, then drops the token from the result unless return_end_token). A step is one model
call for every live beam, one top-k over each sentence's beam x vocabulary scores and one row
selection of the cache; a sentence whose search is over leaves the batch, as in CTranslate2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import torch
from torch import Tensor

from attnkit.errors import ConfigError
from attnkit.translation.constraints import ban_, ban_repeated_ngrams, force_at_limit
from attnkit.translation.tokenizer import BOS_ID, EOS_ID, PAD_ID

EXTRA_LENGTH = 50  # max output length = source length + 50 (section 6.1)


@dataclass(frozen=True)
class DecodingConfig:
    """A search's rules besides beam size and alpha; lengths count output tokens with </s>, without the start.

    The defaults are transformers' `generate`'s (see the module's docstring); its names in brackets.
    """

    length_penalty_form: Literal["gnmt", "power"] = "power"  # power: |Y|^alpha; gnmt: ((5 + |Y|) / 6)^alpha
    early_stopping: bool | Literal["never"] = False  # True: over with `beam` ended; else the heuristics above
    max_output_length: int | None = None  # None: source length + 50  [max_length - 1, max_new_tokens]
    min_output_length: int = 0            # </s> is not proposed before this length  [min_length]
    forced_at_limit: int | None = EOS_ID  # the token forced last; None: none  [forced_eos_token_id]
    banned_outputs: tuple[int, ...] = ()  # never proposed  [bad_words_ids of one token]
    no_repeat_ngram_size: int = 0         # no n-gram twice, the start token included  [no_repeat_ngram_size]
    renormalize: bool = False             # log-softmax again after the masks  [renormalize_logits]
    start_token: int = BOS_ID             # the id the start token counts as in n-grams (a model's own start token)

    def __post_init__(self) -> None:
        object.__setattr__(self, "banned_outputs", tuple(int(i) for i in self.banned_outputs))
        if self.length_penalty_form not in ("gnmt", "power"):
            raise ConfigError(f"decoding.length_penalty_form must be gnmt or power, got '{self.length_penalty_form}'")
        if self.early_stopping not in (True, False, "never"):
            raise ConfigError(f"decoding.early_stopping must be true, false or never, got {self.early_stopping!r}")
        if self.max_output_length is not None and self.max_output_length < 1:
            raise ConfigError(f"decoding.max_output_length must be at least 1, got {self.max_output_length}")
        if self.min_output_length < 0 or self.no_repeat_ngram_size < 0:
            raise ConfigError("decoding.min_output_length and decoding.no_repeat_ngram_size must be at least 0")
        if EOS_ID in self.banned_outputs:
            raise ConfigError("decoding.banned_outputs may not hold </s> (2): no hypothesis could end")
        forced = self.forced_at_limit
        if forced is not None and (isinstance(forced, bool) or not isinstance(forced, int) or forced < 0):
            raise ConfigError(f"decoding.forced_at_limit must be a token id or none, got {forced!r}")


def saved_rules(values: dict[str, Any]) -> dict[str, Any]:
    """A saved `decoding` section in today's keys: `force_eos_at_limit` true / false (written before the forced
    token had an id) is `forced_at_limit` </s> / none; a section without `length_penalty_form` and
    `early_stopping` (or none at all) was written when GNMT's penalty and True were the defaults, and keeps them."""
    values = dict(values)
    values.setdefault("length_penalty_form", "gnmt")
    values.setdefault("early_stopping", True)
    if "force_eos_at_limit" in values:
        if "forced_at_limit" in values:
            raise ConfigError("decoding sets both force_eos_at_limit and forced_at_limit; keep forced_at_limit")
        values["forced_at_limit"] = EOS_ID if values.pop("force_eos_at_limit") else None
    return values


ATTNKIT_RULES = DecodingConfig()


class EncodedSource(Protocol):
    def select(self, rows: Tensor) -> EncodedSource: ...


Encoded = TypeVar("Encoded", bound=EncodedSource)  # each model's own encoder output


class EncoderDecoder(Protocol[Encoded]):
    def encode(self, source: Tensor, source_padding_mask: Tensor) -> Encoded: ...

    def start_cache(self, encoded: Encoded) -> Any: ...

    def decode_step(self, prefix: Tensor, encoded: Encoded, cache: Any) -> Tensor: ...


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, without <s> and </s> (as many as the limit when it ended there without </s>)
    score: float       # log-probability (including </s>) divided by the length penalty


def length_penalty(length: int, alpha: float, form: str = "power") -> float:
    """gnmt: lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016, Eq. 14); power: |Y|^alpha (transformers'
    length_penalty); |Y| counting </s>."""
    return ((5.0 + length) / 6.0) ** alpha if form == "gnmt" else float(length) ** alpha


def max_lengths(source: Tensor, extra: int = EXTRA_LENGTH) -> Tensor:
    """Per sentence: source tokens (padding excluded) + extra. source: (batch, source_length)."""
    return (source != PAD_ID).sum(dim=1) + extra  # (batch,)


def output_limits(source: Tensor, extra: int, rules: DecodingConfig) -> Tensor:
    """Per sentence, the most output tokens (</s> included): RULES' fixed limit, or source length + extra."""
    if rules.max_output_length is None:
        return max_lengths(source, extra)
    return torch.full((source.size(0),), rules.max_output_length, dtype=torch.long, device=source.device)


def constrain(scores: Tensor, prefix: Tensor, step: int, limits: Tensor, rules: DecodingConfig) -> Tensor:
    """SCORES (rows, vocab) of the token after PREFIX (rows, step + 1) with what RULES forbid masked, in the order
    of transformers' logits processors: repeated n-grams, banned outputs, early </s>, the token forced at the limit.
    SCORES may be written in place: pass a tensor of the step's own."""
    if rules.no_repeat_ngram_size:
        counted = prefix.clone()
        counted[:, 0] = rules.start_token  # the start token as the model's own vocabulary has it
        scores = ban_repeated_ngrams(scores, counted, rules.no_repeat_ngram_size)
    if rules.banned_outputs:
        scores = ban_(scores, rules.banned_outputs)
    if step + 1 < rules.min_output_length:
        scores = ban_(scores, (EOS_ID,))
    if rules.forced_at_limit is None:
        return scores
    return force_at_limit(scores, step, limits, rules.forced_at_limit)


@torch.no_grad()
def greedy_decode(model: EncoderDecoder[Any], source: Tensor, use_cache: bool = True,
                  extra_length: int = EXTRA_LENGTH, rules: DecodingConfig = ATTNKIT_RULES) -> list[list[int]]:
    """argmax at every step until </s> or the length limit; returns output ids per sentence.

    A sentence leaves the batch (its rows of the encoder output and the cache) once it has ended."""
    encoded = model.encode(source, source == PAD_ID)
    cache = model.start_cache(encoded) if use_cache else None
    limits = output_limits(source, extra_length, rules)  # (batch,)
    outputs: list[list[int]] = [[] for _ in range(source.size(0))]
    live = torch.arange(source.size(0), device=source.device)  # the sentences still decoded, in row order
    prefix = torch.full((source.size(0), 1), BOS_ID, dtype=torch.long, device=source.device)
    for step in range(int(limits.max())):
        logits = model.decode_step(prefix, encoded, cache)  # (live, vocab)
        logits = constrain(logits, prefix, step, limits[live], rules)
        token = logits.argmax(dim=-1)  # (live,)
        prefix = torch.cat([prefix, token.unsqueeze(1)], dim=1)
        ended = (token == EOS_ID) | (step + 1 >= limits[live])  # (live,)
        if not bool(ended.any()):
            continue
        for row in ended.nonzero().view(-1).tolist():
            outputs[int(live[row])] = _strip(prefix[row, 1:].tolist())
        going = (~ended).nonzero().view(-1)  # (still live,)
        if going.numel() == 0:
            break
        live, prefix, encoded = live[going], prefix[going], encoded.select(going)
        if cache is not None:
            cache.reorder(going)
    return outputs


@torch.no_grad()
def beam_search(model: EncoderDecoder[Any], source: Tensor, beam_size: int = 4, alpha: float = 1.0,
                extra_length: int = EXTRA_LENGTH, rules: DecodingConfig = ATTNKIT_RULES) -> list[Hypothesis]:
    """The best hypothesis per sentence by log P(Y|X) / lp(Y), keeping `beam_size` live prefixes.

    A sentence is over when RULES say so (see the module's docstring), or at its length limit; its
    beams then leave the batch (their rows of the encoder output and the cache), as in CTranslate2.
    One step is one call of the model for all live beams, one top-k over each sentence's beam x
    vocabulary scores, and one row selection of the cache; Python sees only the hypotheses that end.
    With beam_size 1 and early_stopping True this is greedy decoding.
    """
    batch, device = source.size(0), source.device
    rows = torch.arange(batch, device=device).repeat_interleave(beam_size)  # (batch * beam,): each beam's sentence
    encoded = model.encode(source, source == PAD_ID).select(rows)
    cache = model.start_cache(encoded)
    limits = output_limits(source, extra_length, rules)  # (batch,)
    live = torch.arange(batch, device=device)  # the sentences still searched, in row order
    scores = torch.full((batch, beam_size), float("-inf"), device=device)
    scores[:, 0] = 0.0  # one live prefix, <s>, at the start
    prefix = torch.full((batch * beam_size, 1), BOS_ID, dtype=torch.long, device=device)
    beams = _Beams(beam_size, alpha, rules, limits)
    for step in range(int(limits.max())):
        logits = model.decode_step(prefix, encoded, cache).float()  # (live * beam, vocab)
        vocab = logits.size(-1)
        top_scores, top_indices = _best_candidates(logits, scores, prefix, step, limits[live], rules)  # (live, 2 beam)
        keep, scores = beams.advance(top_scores, top_indices, vocab, prefix, step, live)
        going = (~beams.over(scores, step + 1, live)).nonzero().view(-1)  # (still live,) positions in `live`
        if going.numel() == 0:
            break
        keep = keep[going]  # (still live, beam): flat indices into each sentence's beam x vocabulary
        parent_rows = (going.unsqueeze(1) * beam_size + keep // vocab).view(-1)  # (still live * beam,)
        prefix = torch.cat([prefix[parent_rows], (keep % vocab).view(-1, 1)], dim=1)
        if going.numel() < live.size(0):
            live, encoded = live[going], encoded.select(_beam_rows(going, beam_size))
        scores = scores[going]
        if cache is not None:
            cache.reorder(parent_rows)
    return beams.best()


def _best_candidates(logits: Tensor, scores: Tensor, prefix: Tensor, step: int, limits: Tensor,
                     rules: DecodingConfig) -> tuple[Tensor, Tensor]:
    """The 2 beam best extensions of each sentence by score + log P(token), under RULES' masks, best first.

    logits: (live * beam, vocab); scores: (live, beam); limits: (live,). Returns their scores and flat indices
    into beam x vocabulary, each (live, 2 beam). A sentence's best 2 beam extensions are among each beam's own
    best 2 beam tokens, so where the masks only exclude tokens (every step but a forced one's) the log-softmax is
    not written out: each row's top 2 beam logits minus its log-sum-exp (before the masks, as log_softmax then
    masks). Only the step that forces a token, or renormalizing, scores the whole vocabulary.
    """
    live, beam = scores.shape
    row_limits = limits.repeat_interleave(beam)  # (live * beam,)
    vocab, width = logits.size(-1), min(2 * beam, beam * logits.size(-1))
    forced = rules.forced_at_limit is not None and bool((step + 1 >= row_limits).any())
    if forced or rules.renormalize:
        log_probs = constrain(logits.log_softmax(dim=-1), prefix, step, row_limits, rules)
        if rules.renormalize:
            log_probs = log_probs.log_softmax(dim=-1)
        return (scores.view(-1, 1) + log_probs).view(live, beam * vocab).topk(width, dim=-1)
    normalizer = logits.logsumexp(dim=-1, keepdim=True)  # (live * beam, 1)
    row_top, tokens = constrain(logits, prefix, step, row_limits, rules).topk(min(width, vocab), dim=-1)
    per_beam = tokens.size(-1)
    candidates = (scores.view(-1, 1) + (row_top - normalizer)).view(live, beam * per_beam)
    top_scores, positions = candidates.topk(width, dim=-1)  # (live, 2 beam): positions in beam x per_beam
    top_tokens = tokens.view(live, beam * per_beam).gather(1, positions)
    return top_scores, positions // per_beam * vocab + top_tokens


def _beam_rows(sentences: Tensor, beam_size: int) -> Tensor:
    """The rows of SENTENCES' beams, each sentence's `beam_size` rows together. sentences: (n,) -> (n * beam,)."""
    return (sentences.unsqueeze(1) * beam_size + torch.arange(beam_size, device=sentences.device)).view(-1)


class _Beams:
    """Each sentence's ended hypotheses (the best `beam_size`, best first) and whether its search is over."""

    def __init__(self, beam_size: int, alpha: float, rules: DecodingConfig, limits: Tensor) -> None:
        self.beam_size, self.alpha, self.rules = beam_size, alpha, rules
        self.limits, self.limit_list = limits, limits.tolist()  # (batch,)
        self.ended: list[list[Hypothesis]] = [[] for _ in self.limit_list]
        self.done = [False] * len(self.limit_list)

    def penalty(self, length: int) -> float:
        return length_penalty(length, self.alpha, self.rules.length_penalty_form)

    def advance(self, top_scores: Tensor, top_indices: Tensor, vocab: int, prefix: Tensor, step: int,
                live: Tensor) -> tuple[Tensor, Tensor]:
        """End the top candidates that end here (</s>, or any token at the limit: forced there, or not) if among
        the best `beam_size`, as fairseq and transformers do; keep the best `beam_size` others live.

        top_scores, top_indices: (live, 2 beam), best first; LIVE: the sentence of each row.
        Returns the kept candidates' flat indices (live, beam) and their scores (live, beam), -inf where fewer.
        """
        beam, candidates = self.beam_size, top_scores.size(1)
        token = top_indices % vocab  # (live, 2 beam)
        reachable = top_scores > float("-inf")
        ends = (token == EOS_ID) | (step + 1 >= self.limits[live]).unsqueeze(1)  # (live, 2 beam)
        stays = reachable & ~ends
        slot = stays.long().cumsum(dim=1) - 1  # (live, 2 beam): the live slot each staying candidate takes
        slot = torch.where(stays & (slot < beam), slot, beam)  # the others to a spare slot, dropped below
        keep = torch.zeros(live.size(0), beam + 1, dtype=torch.long, device=top_indices.device)
        kept_scores = torch.full((live.size(0), beam + 1), float("-inf"), dtype=top_scores.dtype,
                                 device=top_scores.device)
        keep.scatter_(1, slot, top_indices)
        kept_scores.scatter_(1, slot, top_scores)
        ranks = torch.arange(candidates, device=top_scores.device) < beam
        for row, rank in (reachable & ends & ranks).nonzero().tolist():  # the few that end: to Python
            sentence = int(live[row])
            if self.done[sentence]:
                continue
            index, end_token = int(top_indices[row, rank]), int(token[row, rank])
            tokens = prefix[row * beam + index // vocab, 1:].tolist() + ([] if end_token == EOS_ID else [end_token])
            self._end(sentence, Hypothesis(tokens, float(top_scores[row, rank]) / self.penalty(step + 1)))
        return keep[:, :beam], kept_scores[:, :beam]

    def _end(self, b: int, hypothesis: Hypothesis) -> None:
        ended = sorted(self.ended[b] + [hypothesis], key=lambda h: -h.score)  # stable: earlier first on ties
        self.ended[b] = ended[:self.beam_size]

    def over(self, live_scores: Tensor, generated: int, live: Tensor) -> Tensor:
        """Mark the LIVE sentences whose search is over after GENERATED tokens; returns which are, (live,) bool."""
        over = []
        for b, best_live in zip(live.tolist(), live_scores.max(dim=1).values.tolist()):
            self.done[b] = self.done[b] or self._sentence_over(self.ended[b], best_live, generated, self.limit_list[b])
            over.append(self.done[b])
        return torch.tensor(over, dtype=torch.bool, device=live_scores.device)

    def _sentence_over(self, ended: list[Hypothesis], best_live: float, generated: int, limit: int) -> bool:
        if best_live == float("-inf"):
            return True
        if len(ended) >= self.beam_size:
            if self.rules.early_stopping is True:
                return True
            # transformers' heuristic: the best live prefix at its current length (or at the limit) vs the worst kept
            at_limit = self.rules.early_stopping == "never" and self.alpha > 0
            if best_live / self.penalty(limit if at_limit else generated) <= ended[-1].score:
                return True
        if not ended:
            return False
        # log-probabilities only fall as a prefix grows; dividing by the largest penalty bounds its final score
        largest = max(self.penalty(generated + 1), self.penalty(limit))
        return ended[0].score >= (best_live / largest if best_live < 0 else best_live)

    def best(self) -> list[Hypothesis]:
        return [ended[0] if ended else Hypothesis([], float("-inf")) for ended in self.ended]


def _strip(tokens: list[int]) -> list[int]:
    """Output ids up to (not including) the first </s>."""
    return tokens[:tokens.index(EOS_ID)] if EOS_ID in tokens else tokens
