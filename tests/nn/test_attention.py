"""Scaled dot-product attention: the literal formula, hand values, and the fast path held to it."""

import math

import pytest
import torch
from torch.testing import assert_close

from attnkit.nn import causal_mask, reference_attention, scaled_dot_product_attention


def test_reference_matches_hand_computed_values():
    query = torch.tensor([[1.0, 0.0]])
    key = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    value = torch.tensor([[10.0], [20.0]])
    outputs, weights = reference_attention(query, key, value)
    # scores = [1/sqrt(2), 0]; softmax -> [e^s / (e^s + 1), 1 / (e^s + 1)]
    s = math.exp(1 / math.sqrt(2))
    expected = torch.tensor([[s / (s + 1), 1 / (s + 1)]])
    assert_close(weights, expected)
    assert_close(outputs, expected @ value)


def test_rows_sum_to_one_and_masked_keys_get_zero_weight():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    allowed = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    allowed[0, ..., 5:] = False
    _, weights = reference_attention(q, k, v, mask=allowed)
    assert_close(weights.sum(-1), torch.ones(2, 3, 5))
    assert torch.all(weights[0, ..., 5:] == 0)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float", "causal", "causal+bool"])
def test_fast_path_equals_reference(mask_kind):
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 4, 6, 16), torch.randn(2, 4, 6, 16), torch.randn(2, 4, 6, 8)
    mask = None
    if "bool" in mask_kind:
        mask = torch.rand(2, 1, 6, 6) > 0.3
        mask[..., 0] = True  # every query may attend somewhere
    elif mask_kind == "float":
        mask = torch.randn(6, 6)
    is_causal = mask_kind.startswith("causal")
    expected, _ = reference_attention(q, k, v, mask=mask, is_causal=is_causal)
    assert_close(scaled_dot_product_attention(q, k, v, mask=mask, is_causal=is_causal), expected)


def test_reference_gradcheck_float64():
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[True, True, False], [True, True, True], [True, False, True]])
    assert torch.autograd.gradcheck(lambda q, k, v: reference_attention(q, k, v, mask=mask)[0], (q, k, v))


def test_causal_mask_aligns_new_queries_at_the_end():
    assert torch.equal(causal_mask(3, 3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool))
    assert torch.equal(causal_mask(1, 4), torch.ones(1, 4, dtype=torch.bool))  # one step with 3 cached keys
    assert torch.equal(causal_mask(2, 4), torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_dtype_follows_inputs(dtype):
    q = torch.randn(2, 5, 8, dtype=dtype)
    assert scaled_dot_product_attention(q, q, q).dtype == dtype
    assert reference_attention(q, q, q)[1].dtype == dtype


def test_bad_inputs_name_the_shapes():
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 4)
    with pytest.raises(ValueError, match=r"\(2, 5, 8\).*\(2, 6, 7\)"):
        scaled_dot_product_attention(q, torch.randn(2, 6, 7), v)
    with pytest.raises(ValueError, match="lengths differ"):
        reference_attention(q, k, torch.randn(2, 5, 4))
    with pytest.raises(ValueError, match=r"mask of shape \(5, 7\)"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(5, 7, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool or floating"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(5, 6, dtype=torch.long))
