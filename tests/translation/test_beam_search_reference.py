"""Beam search on a tiny random Transformer against references: an exhaustive search where the beam
holds every prefix, a plain per-sentence beam search (no cache, no batch, no sentences leaving it),
the same search uncached, and transformers' length-penalty arithmetic on a hand example."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from attnkit.translation.decoding import DecodingConfig, Hypothesis, beam_search, greedy_decode, length_penalty
from attnkit.translation.model import Seq2SeqConfig, Seq2SeqTransformer
from attnkit.translation.tokenizer import BOS_ID, EOS_ID, PAD_ID


def tiny_model(vocab: int, seed: int = 0) -> Seq2SeqTransformer:
    torch.manual_seed(seed)
    config = Seq2SeqConfig(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=2, d_ff=32, dropout=0.0,
                           source_vocab_size=vocab, target_vocab_size=vocab)
    model = Seq2SeqTransformer(config).eval()
    with torch.no_grad():  # sharper distributions than the init's, so that searches disagree with greedy
        model.target_embedding.weight.mul_(6.0)
    return model


def sources(vocab: int, lengths: list[int], seed: int = 1) -> torch.Tensor:
    """A padded batch of sources ending in </s>: (batch, longest)."""
    generator = torch.Generator().manual_seed(seed)
    rows = [torch.randint(4, vocab, (n - 1,), generator=generator).tolist() + [EOS_ID] for n in lengths]
    return torch.tensor([row + [PAD_ID] * (max(lengths) - len(row)) for row in rows])


def log_prob(model: Seq2SeqTransformer, source: torch.Tensor, tokens: list[int], eos: bool = True) -> float:
    """log P(tokens [</s>] | source) by teacher forcing; source: (1, length)."""
    target = torch.tensor([[BOS_ID, *tokens] + ([EOS_ID] if eos else [])])
    with torch.no_grad():
        log_probs = model(source, target[:, :-1]).float().log_softmax(dim=-1)[0]  # (length, vocab)
    return float(log_probs.gather(1, target[0, 1:, None]).sum())


class Uncached:
    """The model without its key/value cache: every step recomputes the prefix."""

    def __init__(self, model: Seq2SeqTransformer) -> None:
        self.model = model

    def encode(self, source, mask):
        return self.model.encode(source, mask)

    def start_cache(self, encoded):
        return None

    def decode_step(self, prefix, encoded, cache):
        return self.model.decode_step(prefix, encoded, None)


def reference_beam_search(model: Seq2SeqTransformer, source: torch.Tensor, beam: int, alpha: float, limit: int,
                          form: str) -> Hypothesis:
    """One sentence, written plainly: expand every live prefix by every token, end the top-`beam` candidates that
    end (</s>, or any token at the limit), keep the best `beam` others; over once `beam` have ended."""
    live: list[tuple[list[int], float]] = [([], 0.0)]
    ended: list[Hypothesis] = []
    for step in range(limit):
        candidates = []
        for tokens, score in live:
            target = torch.tensor([[BOS_ID, *tokens]])
            with torch.no_grad():
                next_log_probs = model(source, target).float().log_softmax(dim=-1)[0, -1]
            if step + 1 >= limit:  # the token forced at the limit: </s>, at log-probability 0
                candidates.append((score, tokens, EOS_ID))
                continue
            candidates += [(score + float(p), tokens, token) for token, p in enumerate(next_log_probs.tolist())]
        candidates.sort(key=lambda c: -c[0])
        live = []
        for rank, (score, tokens, token) in enumerate(candidates[:2 * beam]):
            if token == EOS_ID:
                if rank < beam:
                    ended.append(Hypothesis(tokens, score / length_penalty(step + 1, alpha, form)))
            elif len(live) < beam:
                live.append(([*tokens, token], score))
        if len(ended) >= beam or not live:
            break
    return max(ended, key=lambda h: h.score)


@pytest.mark.parametrize("form", ["gnmt", "power"])
def test_a_beam_wide_enough_finds_what_exhaustive_search_finds(form):
    """Vocabulary 6 (5 tokens besides </s>) and at most 3 output tokens with </s>: 1 + 5 + 25 = 31 outputs. A beam
    of 32 keeps every prefix and every ending, so beam search must return the best of the 31 (each sentence's:
    their limits come at the same step here, their searches end at different ones)."""
    vocab, limit, alpha = 6, 3, 1.0
    model = tiny_model(vocab)
    source = sources(vocab, [5, 3])
    rules = DecodingConfig(form, max_output_length=limit)
    found = beam_search(model, source, beam_size=32, alpha=alpha, rules=rules)
    for sentence, hypothesis in enumerate(found):
        row = source[sentence:sentence + 1, :int((source[sentence] != PAD_ID).sum())]
        everything = [list(t) for n in range(limit) for t in itertools.product([0, 1, 3, 4, 5], repeat=n)]
        # </s> forced at the limit has log-probability 0 (transformers' ForcedEOSTokenLogitsProcessor)
        scored = [(log_prob(model, row, t, eos=len(t) + 1 < limit) / length_penalty(len(t) + 1, alpha, form), t)
                  for t in everything]
        best_score, best = max(scored)
        assert hypothesis.tokens == best
        assert hypothesis.score == pytest.approx(best_score, abs=1e-4)


@pytest.mark.parametrize(("form", "alpha"), [("gnmt", 0.6), ("power", 1.0), ("power", 0.0)])
def test_beam_search_equals_the_plain_reference_per_sentence(form, alpha):
    vocab, beam, limit = 12, 3, 6
    model = tiny_model(vocab, seed=2)
    source = sources(vocab, [7, 2, 5, 4], seed=3)
    rules = DecodingConfig(form, True, max_output_length=limit)  # over at `beam` ended, as the reference
    found = beam_search(model, source, beam_size=beam, alpha=alpha, rules=rules)
    for sentence, hypothesis in enumerate(found):
        row = source[sentence:sentence + 1, :int((source[sentence] != PAD_ID).sum())]
        expected = reference_beam_search(model, row, beam, alpha, limit, form)
        assert hypothesis.tokens == expected.tokens
        assert hypothesis.score == pytest.approx(expected.score, abs=1e-4)


def test_sentences_leaving_the_batch_change_no_output():
    """Sentences of different lengths end at different steps and leave the batch; each one's result is what it gets
    decoded alone, and what the uncached model (the whole prefix every step, nothing reordered) gets."""
    vocab = 40
    model = tiny_model(vocab, seed=4)
    source = sources(vocab, [9, 3, 6, 2, 8, 4], seed=5)
    together = beam_search(model, source, beam_size=4, extra_length=6)  # |Y|^1, over at 4 ended
    uncached = beam_search(Uncached(model), source, beam_size=4, extra_length=6)
    lengths = {len(h.tokens) for h in together}
    assert len(lengths) > 1  # they do end at different steps
    for sentence, hypothesis in enumerate(together):
        row = source[sentence:sentence + 1, :int((source[sentence] != PAD_ID).sum())]
        alone = beam_search(model, row, beam_size=4, extra_length=6)[0]
        assert hypothesis.tokens == alone.tokens == uncached[sentence].tokens
        assert hypothesis.score == pytest.approx(alone.score, abs=1e-4)
        assert hypothesis.score == pytest.approx(uncached[sentence].score, abs=1e-4)
        length = len(hypothesis.tokens) + 1
        forced = length == row.size(1) + 6  # </s> forced at the limit: log-probability 0
        assert hypothesis.score == pytest.approx(
            log_prob(model, row, hypothesis.tokens, eos=not forced) / length, abs=1e-4)
    greedy = greedy_decode(model, source, extra_length=6)
    assert greedy == greedy_decode(Uncached(model), source, extra_length=6)
    assert [len(g) for g in greedy] != [len(greedy[0])] * len(greedy)


def test_the_cache_moves_cross_attention_rows_only_when_sentences_leave():
    vocab = 20
    model = tiny_model(vocab, seed=6)
    source = sources(vocab, [4, 6], seed=7)
    encoded = model.encode(source, source == PAD_ID).select(torch.tensor([0, 0, 1, 1]))
    cache = model.start_cache(encoded)
    model.decode_step(torch.full((4, 1), BOS_ID), encoded, cache)
    cross = cache.layers[0].cross_attn.key
    assert cross is not None and cross.size(0) == 4
    cache.reorder(torch.tensor([1, 1, 3, 2]))  # within each sentence: the memory's keys stay where they are
    assert cache.layers[0].cross_attn.key is cross
    cache.reorder(torch.tensor([2, 3]))  # the first sentence leaves
    kept = cache.layers[0].cross_attn.key
    assert kept is not None and torch.equal(kept, cross[2:])


def test_scores_are_transformers_length_normalised_log_probabilities():
    """transformers' beam search scores an ended hypothesis sum(log p) / generated_length ** length_penalty, the
    length counting </s> (generation/utils.py: `topk_log_probs / ((cur_len + 1 - decoder_prompt_len) ** lp)`);
    "power" is that. By hand for one output of 3 tokens and </s>: 4 ** 1.0 and 4 ** 0.5."""
    vocab = 10
    model = tiny_model(vocab, seed=8)
    source = sources(vocab, [4], seed=9)
    for alpha in (1.0, 0.5):
        found = beam_search(model, source, beam_size=2, alpha=alpha,
                            rules=DecodingConfig("power", max_output_length=4, min_output_length=4))
        assert len(found[0].tokens) == 3  # </s> banned before the 4th token and forced there
        # the </s> forced there counts in the length, at log-probability 0 (ForcedEOSTokenLogitsProcessor)
        expected = log_prob(model, source, found[0].tokens, eos=False) / 4 ** alpha
        assert found[0].score == pytest.approx(expected, abs=1e-4)
    assert length_penalty(4, 1.0, "power") == 4.0
    assert length_penalty(4, 0.6, "gnmt") == pytest.approx(math.pow(9 / 6, 0.6))
