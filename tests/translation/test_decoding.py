"""Beam search finds the best-scoring hypothesis on a hand-built model under either length penalty;
beam 1 equals greedy; each decoding rule (limits, bans, n-grams, ending without </s> or on a forced
token) holds."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from attnkit.translation.decoding import DecodingConfig, Hypothesis, beam_search, greedy_decode, length_penalty
from attnkit.translation.tokenizer import BOS_ID, EOS_ID

A, B, C = 4, 5, 6  # three word ids after the specials <pad> <s> </s> <unk>
VOCAB = 7


class Rows:
    def __init__(self, count: int) -> None:
        self.count = count

    def select(self, rows: torch.Tensor) -> Rows:
        return Rows(len(rows))


class BigramModel:
    """P(next | last token) from a fixed table: a real (if tiny) encoder-decoder for the protocol."""

    def __init__(self, table: dict[int, dict[int, float]]) -> None:
        self.log_probs = torch.full((VOCAB, VOCAB), -1e9)
        for last, nexts in table.items():
            for token, p in nexts.items():
                self.log_probs[last, token] = math.log(p)

    def encode(self, source, source_padding_mask):
        return Rows(source.size(0))

    def start_cache(self, encoded):
        return None

    def decode_step(self, prefix, encoded, cache):
        return self.log_probs[prefix[:, -1]].clone()  # (batch, vocab)

    def sequence_log_prob(self, tokens: list[int]) -> float:
        path = [BOS_ID, *tokens, EOS_ID]
        return sum(float(self.log_probs[a, b]) for a, b in zip(path, path[1:]))


# greedy takes A (0.5) and then wanders; the best sentence starts with the less likely B
TABLE = {BOS_ID: {A: 0.5, B: 0.4, EOS_ID: 0.1},
         A: {A: 0.35, C: 0.35, EOS_ID: 0.3},
         B: {EOS_ID: 0.9, C: 0.1},
         C: {C: 0.5, EOS_ID: 0.5}}


def brute_force_best(model: BigramModel, max_tokens: int, alpha: float, form: str = "gnmt") -> Hypothesis:
    best = Hypothesis([], float("-inf"))
    for length in range(max_tokens):
        for tokens in itertools.product((A, B, C), repeat=length):
            score = model.sequence_log_prob(list(tokens)) / length_penalty(length + 1, alpha, form)
            if score > best.score:
                best = Hypothesis(list(tokens), score)
    return best


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize(("form", "early_stopping"), [("gnmt", True), ("power", True), ("power", "never")])
def test_beam_search_finds_the_best_hypothesis(alpha, form, early_stopping):
    model = BigramModel(TABLE)
    source = torch.tensor([[A, EOS_ID]])  # 2 source tokens, + 3 = at most 5 output tokens with </s>
    rules = DecodingConfig(length_penalty_form=form, early_stopping=early_stopping)
    found = beam_search(model, source, beam_size=3, alpha=alpha, extra_length=3, rules=rules)[0]
    expected = brute_force_best(model, max_tokens=5, alpha=alpha, form=form)
    assert found.tokens == expected.tokens == [B]
    assert found.score == pytest.approx(expected.score)
    assert greedy_decode(model, source, use_cache=False, extra_length=3)[0][0] == A  # greedy misses it


def test_power_penalty_is_length_to_the_alpha():
    assert length_penalty(4, 0.5, "power") == pytest.approx(2.0)
    assert length_penalty(4, 0.6, "gnmt") == pytest.approx(1.5 ** 0.6)  # ((5 + 4) / 6)^0.6


# A model that prefers long outputs: A then C forever, </s> always possible.
LONG = {BOS_ID: {A: 0.6, B: 0.25, EOS_ID: 0.15}, A: {C: 0.7, EOS_ID: 0.3}, B: {C: 0.7, EOS_ID: 0.3},
        C: {C: 0.7, EOS_ID: 0.3}}


def test_a_fixed_limit_and_ending_there_without_eos():
    model = BigramModel(LONG)
    source = torch.tensor([[A, B, EOS_ID], [A, EOS_ID, 0]])
    forced = DecodingConfig(max_output_length=4)
    assert greedy_decode(model, source, rules=forced) == [[A, C, C]] * 2  # </s> is the 4th token
    free = DecodingConfig(max_output_length=4, forced_at_limit=None)
    assert greedy_decode(model, source, rules=free) == [[A, C, C, C]] * 2  # 4 tokens, no </s>
    best = beam_search(model, source, beam_size=2, alpha=1.0, rules=DecodingConfig("power", False, 4,
                                                                                    forced_at_limit=None))
    assert [h.tokens for h in best] == [[A, C, C, C]] * 2  # log(.6 .7 .7 .7) / 4 beats every ending with </s>
    assert best[0].score == pytest.approx(math.log(0.6 * 0.7 ** 3) / 4)


def test_a_token_other_than_eos_forced_at_the_limit_ends_the_hypothesis_by_length():
    """transformers' forced_eos_token_id may name any id (MarianConfig's default 0 is not </s> in every vocabulary):
    the last allowed token is that one, at log-probability 0, and the hypothesis ends there without </s>."""
    model = BigramModel(LONG)
    source = torch.tensor([[A, B, EOS_ID], [A, EOS_ID, 0]])
    forced_b = DecodingConfig("power", False, max_output_length=4, forced_at_limit=B)
    assert greedy_decode(model, source, rules=forced_b) == [[A, C, C, B]] * 2
    banned_too = DecodingConfig(max_output_length=4, forced_at_limit=B, banned_outputs=(B,))
    assert greedy_decode(model, source, rules=banned_too) == [[A, C, C, B]] * 2  # forced after the bans, as generate
    best = beam_search(model, source, beam_size=2, alpha=1.0, rules=forced_b)
    # by hand, log P / |Y|: A C C B log(.6 .7 .7 1) / 4 = -0.31 beats B C C B log(.25 .7 .7 1) / 4 = -0.52,
    # A C </s> log(.6 .7 .3) / 3 = -0.69 and A </s> log(.6 .3) / 2 = -0.86
    assert [h.tokens for h in best] == [[A, C, C, B]] * 2
    assert best[0].score == pytest.approx(math.log(0.6 * 0.7 * 0.7) / 4)
    eos = beam_search(model, source, beam_size=2, alpha=1.0, rules=DecodingConfig("power", False, 4))
    assert [h.tokens for h in eos] == [[A, C, C]] * 2  # </s> forced in B's place: the same score, one token fewer
    assert eos[0].score == pytest.approx(best[0].score)


def test_banned_outputs_minimum_length_and_repeated_ngrams():
    model = BigramModel(LONG)
    source = torch.tensor([[A, EOS_ID]])
    assert greedy_decode(model, source, rules=DecodingConfig(banned_outputs=(A,)), extra_length=3) == [[B, C, C, C]]
    short = BigramModel({BOS_ID: {EOS_ID: 0.9, A: 0.1}, A: {EOS_ID: 0.9, C: 0.1}, C: {EOS_ID: 0.9, C: 0.1}})
    assert greedy_decode(short, source, rules=DecodingConfig(min_output_length=3)) == [[A, C]]
    no_bigram_twice = DecodingConfig(no_repeat_ngram_size=2, max_output_length=6)
    # C C is seen once, so after C comes </s> (the only other choice): A C C </s>
    assert greedy_decode(model, source, rules=no_bigram_twice) == [[A, C, C]]
    assert greedy_decode(model, source, rules=DecodingConfig(no_repeat_ngram_size=1)) == [[A, C]]


def test_beam_one_equals_greedy_and_limit_is_respected():
    torch.manual_seed(0)
    model = BigramModel({last: dict(zip(range(2, VOCAB), torch.rand(VOCAB - 2).softmax(0).tolist()))
                         for last in range(VOCAB)})
    source = torch.tensor([[A, B, EOS_ID], [A, EOS_ID, 0]])
    greedy = greedy_decode(model, source, use_cache=False, extra_length=4)
    beam = [h.tokens for h in beam_search(model, source, beam_size=1, alpha=0.6, extra_length=4,
                                          rules=DecodingConfig(early_stopping=True))]
    assert beam == greedy
    assert all(len(g) <= limit - 1 for g, limit in zip(greedy, (3 + 4, 2 + 4)))  # </s> is the last allowed token


@pytest.mark.parametrize("rules", [DecodingConfig(), DecodingConfig(banned_outputs=(A,), min_output_length=3),
                                   DecodingConfig(no_repeat_ngram_size=2), DecodingConfig(renormalize=True,
                                                                                          min_output_length=3)])
@pytest.mark.parametrize("step", [0, 1, 4])  # limit 5: step 4 forces </s>
def test_best_candidates_equal_the_top_of_every_beam_and_token_scored(rules, step):
    from attnkit.translation.decoding import _best_candidates, constrain

    torch.manual_seed(step)
    live, beam, vocab = 3, 4, 50
    logits = torch.randn(live * beam, vocab) * 3  # (live * beam, vocab)
    scores = torch.randn(live, beam) - 5
    scores[0, 2:] = float("-inf")  # a sentence with two live beams
    prefix = torch.randint(4, 9, (live * beam, step + 1))  # (rows, step + 1): few ids, so n-grams repeat
    limits = torch.full((live,), 5)
    log_probs = constrain(logits.log_softmax(-1), prefix, step, limits.repeat_interleave(beam), rules)
    if rules.renormalize:
        log_probs = log_probs.log_softmax(-1)
    expected_scores, expected_indices = (scores.view(-1, 1) + log_probs).view(live, beam * vocab).topk(2 * beam)
    got_scores, got_indices = _best_candidates(logits, scores, prefix, step, limits, rules)
    torch.testing.assert_close(got_scores, expected_scores)
    finite = expected_scores > float("-inf")
    assert torch.equal(got_indices[finite], expected_indices[finite])
