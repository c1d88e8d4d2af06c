"""Additive attention against the paper's formula evaluated pair by pair: e_ij = v^T tanh(W s_i + U h_j)."""

import torch
from torch.testing import assert_close

from attnkit.nn.additive_attention import AdditiveAttention


@torch.no_grad()
def reference(attention: AdditiveAttention, query, keys, padding):
    """Eq. 6 and the softmax of Eq. 5, one (i, j) pair at a time, with plain tensor arithmetic."""
    W, U, b, v = (attention.query_proj.weight, attention.key_proj.weight, attention.key_proj.bias,
                  attention.score.weight[0])
    batch, queries, keys_count = query.size(0), query.size(1), keys.size(1)
    weights = torch.zeros(batch, queries, keys_count)
    for n in range(batch):
        for i in range(queries):
            scores = [float(v @ torch.tanh(W @ query[n, i] + U @ keys[n, j] + b)) for j in range(keys_count)]
            allowed = [j for j in range(keys_count) if not padding[n, j]]
            total = sum(torch.exp(torch.tensor(scores[j])) for j in allowed)
            for j in allowed:
                weights[n, i, j] = torch.exp(torch.tensor(scores[j])) / total
    return weights @ keys, weights


def test_matches_the_formula_and_ignores_padding():
    torch.manual_seed(0)
    attention = AdditiveAttention(query_dim=5, key_dim=6, attention_dim=4)
    query, keys = torch.randn(3, 2, 5), torch.randn(3, 7, 6)
    padding = torch.zeros(3, 7, dtype=torch.bool)
    padding[0, 4:] = True
    padding[2, 6] = True
    with torch.no_grad():
        context, weights = attention(query, keys, padding)
    expected_context, expected_weights = reference(attention, query, keys, padding)
    assert_close(weights, expected_weights)
    assert_close(context, expected_context)
    assert torch.equal(weights[0, :, 4:], torch.zeros(2, 3))  # exactly zero on padding
    assert_close(weights.sum(-1), torch.ones(3, 2))


def test_precomputed_keys_give_the_same_result():
    torch.manual_seed(1)
    attention = AdditiveAttention(4, 8, 6)
    query, keys = torch.randn(2, 3, 4), torch.randn(2, 5, 8)
    direct = attention(query, keys)
    precomputed = attention(query, keys, projected_keys=attention.project_keys(keys))
    assert_close(precomputed[0], direct[0])
    assert_close(precomputed[1], direct[1])
