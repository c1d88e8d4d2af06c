"""KVCache: appending in place (no gradients) gives what concatenation gives, across growth and reordering."""

from __future__ import annotations

import torch

from attnkit.nn import KVCache


def test_in_place_appends_equal_concatenation_across_growth_and_reorder():
    torch.manual_seed(0)
    steps = [(torch.randn(3, 2, n, 4), torch.randn(3, 2, n, 4)) for n in (1, 1, 5, 1, 20, 1)]
    cache = KVCache()
    with torch.no_grad():
        for index, (key, value) in enumerate(steps):
            keys, values = cache.extend(key, value)
            expected_keys = torch.cat([k for k, _ in steps[:index + 1]], dim=-2)
            expected_values = torch.cat([v for _, v in steps[:index + 1]], dim=-2)
            assert torch.equal(keys, expected_keys) and torch.equal(values, expected_values)
            assert cache.length == expected_keys.size(-2)
        order = torch.tensor([2, 0, 0])
        cache.reorder(order)
        assert torch.equal(cache.key, expected_keys[order]) and torch.equal(cache.value, expected_values[order])
        key, value = torch.randn(3, 2, 1, 4), torch.randn(3, 2, 1, 4)
        cache.extend(key, value)
        assert torch.equal(cache.key, torch.cat([expected_keys[order], key], dim=-2))


def test_with_gradients_it_concatenates_and_gradients_flow():
    key = torch.randn(1, 1, 2, 4, requires_grad=True)
    cache = KVCache()
    cache.extend(key, key * 2)
    keys, _ = cache.extend(key, key * 2)
    keys.sum().backward()
    assert torch.equal(key.grad, torch.full_like(key, 2.0))


def test_static_cache_is_replaced_not_appended():
    cache = KVCache(static=True)
    with torch.no_grad():
        cache.extend(torch.ones(1, 1, 3, 2), torch.ones(1, 1, 3, 2))
        keys, _ = cache.extend(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))
    assert keys.shape == (1, 1, 3, 2) and not keys.any()
