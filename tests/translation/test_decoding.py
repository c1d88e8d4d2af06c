"""Beam search finds the best-scoring hypothesis on a hand-built model; beam 1 equals greedy."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from attnkit.translation.decoding import Hypothesis, beam_search, greedy_decode, length_penalty
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


def brute_force_best(model: BigramModel, max_tokens: int, alpha: float) -> Hypothesis:
    best = Hypothesis([], float("-inf"))
    for length in range(max_tokens):
        for tokens in itertools.product((A, B, C), repeat=length):
            score = model.sequence_log_prob(list(tokens)) / length_penalty(length + 1, alpha)
            if score > best.score:
                best = Hypothesis(list(tokens), score)
    return best


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_search_finds_the_best_hypothesis(alpha):
    model = BigramModel(TABLE)
    source = torch.tensor([[A, EOS_ID]])  # 2 source tokens, + 3 = at most 5 output tokens with </s>
    found = beam_search(model, source, beam_size=3, alpha=alpha, extra_length=3)[0]
    expected = brute_force_best(model, max_tokens=5, alpha=alpha)
    assert found.tokens == expected.tokens == [B]
    assert found.score == pytest.approx(expected.score)
    assert greedy_decode(model, source, use_cache=False, extra_length=3)[0][0] == A  # greedy misses it


def test_beam_one_equals_greedy_and_limit_is_respected():
    torch.manual_seed(0)
    model = BigramModel({last: dict(zip(range(2, VOCAB), torch.rand(VOCAB - 2).softmax(0).tolist()))
                         for last in range(VOCAB)})
    source = torch.tensor([[A, B, EOS_ID], [A, EOS_ID, 0]])
    greedy = greedy_decode(model, source, use_cache=False, extra_length=4)
    beam = [h.tokens for h in beam_search(model, source, beam_size=1, alpha=0.6, extra_length=4)]
    assert beam == greedy
    assert all(len(g) <= limit - 1 for g, limit in zip(greedy, (3 + 4, 2 + 4)))  # </s> is the last allowed token
