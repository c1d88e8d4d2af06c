"""MultiHeadAttention against torch.nn.MultiheadAttention: same weights, same outputs, same masks."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from attnkit.nn import KVCache, MultiHeadAttention, RotaryEmbedding, causal_mask

E, H = 16, 4


def pair(batch_first=False, kdim=None, dropout=0.0, bias=True):
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(E, H, dropout=dropout, bias=bias, kdim=kdim, vdim=kdim,
                                         batch_first=batch_first)
    ours = MultiHeadAttention(E, H, dropout=dropout, bias=bias, kdim=kdim, vdim=kdim, batch_first=batch_first)
    ours.load_state_dict(theirs.state_dict())
    return ours.eval(), theirs.eval()


def inputs(batch_first, queries=5, keys=7, kdim=None, self_attention=False):
    q = torch.randn(3, queries, E)
    k = q if self_attention else torch.randn(3, keys, kdim or E)
    if not batch_first:
        q, k = q.transpose(0, 1), k.transpose(0, 1)
    return q, k


def masks(kind, queries, keys):
    padding = torch.zeros(3, keys, dtype=torch.bool)
    padding[0, -2:] = True
    padding[2, -1] = True
    blocked = torch.rand(queries, keys) > 0.7
    blocked[:, 0] = False
    return {
        "none": {},
        "key_padding": {"key_padding_mask": padding},
        "bool_attn": {"attn_mask": blocked},
        "float_attn": {"attn_mask": torch.randn(queries, keys)},
        "per_head_attn": {"attn_mask": torch.randn(3 * H, queries, keys)},
        "both_bool": {"attn_mask": blocked, "key_padding_mask": padding},
        "causal": {"attn_mask": torch.nn.Transformer.generate_square_subsequent_mask(queries), "is_causal": True},
    }[kind]


MASKS = ["none", "key_padding", "bool_attn", "float_attn", "per_head_attn", "both_bool"]


def test_state_dict_keys_are_torchs():
    for kdim in (None, 12):
        ours, theirs = pair(kdim=kdim)
        assert list(ours.state_dict()) == list(theirs.state_dict())


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("kdim", [None, 12])
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("need_weights", [True, False])
def test_cross_attention_matches_torch(batch_first, kdim, mask, need_weights):
    ours, theirs = pair(batch_first, kdim)
    q, k = inputs(batch_first, kdim=kdim)
    kwargs = masks(mask, 5, 7)
    expected, expected_weights = theirs(q, k, k, need_weights=need_weights, **kwargs)
    actual, weights = ours(q, k, k, need_weights=need_weights, **kwargs)
    assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    if need_weights:
        assert_close(weights, expected_weights, atol=1e-5, rtol=1e-5)
    else:
        assert weights is None


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("mask", MASKS + ["causal"])
def test_self_attention_matches_torch(batch_first, mask):
    ours, theirs = pair(batch_first)
    x, _ = inputs(batch_first, queries=6, self_attention=True)
    kwargs = masks(mask, 6, 6)
    for need_weights in (True, False):
        expected, _ = theirs(x, x, x, need_weights=need_weights, **kwargs)
        actual, _ = ours(x, x, x, need_weights=need_weights, **kwargs)
        assert_close(actual, expected, atol=1e-5, rtol=1e-5)


def test_per_head_weights_and_unbatched_input_match_torch():
    ours, theirs = pair()
    q, k = torch.randn(5, E), torch.randn(7, E)
    expected, expected_weights = theirs(q, k, k, average_attn_weights=False)
    actual, weights = ours(q, k, k, average_attn_weights=False)
    assert weights.shape == (H, 5, 7)
    assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    assert_close(weights, expected_weights, atol=1e-5, rtol=1e-5)


def test_gradients_match_torch_in_training_mode():
    ours, theirs = pair(batch_first=True)
    ours.train(), theirs.train()
    q, k = inputs(True)
    padding = masks("key_padding", 5, 7)["key_padding_mask"]
    ours(q, k, k, key_padding_mask=padding, need_weights=False)[0].square().sum().backward()
    theirs(q, k, k, key_padding_mask=padding, need_weights=False)[0].square().sum().backward()
    for (name, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-5, msg=name)


def test_fast_path_is_used_without_weights(monkeypatch):
    ours, _ = pair()
    calls = []
    original = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or original(*a, **k))
    q, k = inputs(False)
    ours(q, k, k, need_weights=False)
    assert calls == [1]
    ours(q, k, k, need_weights=True)
    assert calls == [1]


@pytest.mark.parametrize("rotary", [False, True])
def test_cached_step_by_step_equals_full_causal(rotary):
    torch.manual_seed(3)
    attention = MultiHeadAttention(E, H, batch_first=True, rotary=RotaryEmbedding(E // H) if rotary else None).eval()
    x = torch.randn(2, 6, E)
    full, _ = attention(x, x, x, need_weights=False, attn_mask=~causal_mask(6, 6), is_causal=True)
    cache, steps = KVCache(), []
    for t in range(6):
        step = x[:, t:t + 1]
        steps.append(attention(step, step, step, need_weights=False, cache=cache)[0])
    assert cache.length == 6
    assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    # a prefix of several positions at once, then single steps, gives the same too
    cache = KVCache()
    prefix = attention(x[:, :4], x[:, :4], x[:, :4], need_weights=True, is_causal=True, cache=cache)[0]
    rest = attention(x[:, 4:], x[:, 4:], x[:, 4:], need_weights=False, is_causal=True, cache=cache)[0]
    assert_close(torch.cat([prefix, rest], dim=1), full, atol=1e-5, rtol=1e-5)


def test_static_cache_projects_the_memory_once():
    attention = MultiHeadAttention(E, H, batch_first=True).eval()
    memory, query = torch.randn(2, 7, E), torch.randn(2, 1, E)
    cache = KVCache(static=True)
    first, _ = attention(query, memory, memory, cache=cache)
    second, _ = attention(query, torch.zeros_like(memory), torch.zeros_like(memory), cache=cache)  # memory ignored now
    assert_close(first, second)
    assert_close(first, attention(query, memory, memory)[0])
    cache.reorder(torch.tensor([1, 1]))
    assert_close(cache.key[0], cache.key[1])


def test_rotary_scores_depend_only_on_relative_position():
    torch.manual_seed(4)
    rotary = RotaryEmbedding(8)
    q, k = torch.randn(1, 1, 8), torch.randn(1, 1, 8)
    score = lambda m, n: (rotary(q, offset=m) * rotary(k, offset=n)).sum()  # noqa: E731
    assert_close(score(3, 1), score(12, 10))
    assert_close(rotary(q, offset=0), q)  # position 0 is the identity rotation


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_dtype_follows_module_and_inputs(dtype):
    attention = MultiHeadAttention(E, H, batch_first=True, dtype=dtype)
    x = torch.randn(2, 3, E, dtype=dtype)
    output, weights = attention(x, x, x)
    assert output.dtype == weights.dtype == dtype


def test_bad_input_raises_value_error_naming_the_shapes():
    with pytest.raises(ValueError, match=r"embed_dim \(10\).*num_heads \(4\)"):
        MultiHeadAttention(10, 4)
    attention = MultiHeadAttention(E, H, batch_first=True)
    x = torch.randn(2, 3, E)
    with pytest.raises(ValueError, match=r"key has 8 features, expected 16.*\(2, 3, 8\)"):
        attention(x, torch.randn(2, 3, 8), torch.randn(2, 3, 8))
    with pytest.raises(ValueError, match=r"key_padding_mask.*\(2, 3\).*\(2, 4\)"):
        attention(x, x, x, key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"attn_mask.*\(3, 3\).*\(4, 4\)"):
        attention(x, x, x, attn_mask=torch.zeros(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool and floating"):
        attention(x, x, x, attn_mask=torch.zeros(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="batch or length mismatch"):
        attention(x, torch.randn(5, 3, E), torch.randn(5, 3, E))
