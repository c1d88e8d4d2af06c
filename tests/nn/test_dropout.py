"""Dropout's CPU mask: the drop rate, the expectation, the gradient, reproducibility, torch's behaviour elsewhere."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from attnkit.nn import Dropout
from attnkit.nn.dropout import dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_drops_each_element_with_probability_p_and_keeps_the_expectation(p):
    torch.manual_seed(0)
    y = dropout(torch.ones(400_001), p)  # odd: the last draw gives one of its two integers
    dropped = (y == 0).double().mean().item()
    assert abs(dropped - p) < 5 * (p * (1 - p) / y.numel()) ** 0.5 + 2**-16  # five standard deviations
    assert_close(y[y != 0], torch.full_like(y[y != 0], 1 / (1 - p)), rtol=1e-4, atol=0)
    assert abs(y.double().mean().item() - 1) < 0.01


def test_masks_of_neighbouring_elements_are_independent():
    torch.manual_seed(1)
    kept = (dropout(torch.ones(200_000), 0.5) > 0).double()
    first, second = kept[: len(kept) // 2], kept[len(kept) // 2:]  # the two integers of each draw
    for a, b in ((first, second), (kept[:-1], kept[1:])):
        correlation = torch.corrcoef(torch.stack([a, b]))[0, 1].item()
        assert abs(correlation) < 0.02


def test_gradient_is_the_mask_over_the_keep_probability():
    x = torch.randn(3, 5, 7, requires_grad=True)
    torch.manual_seed(2)
    y = dropout(x, 0.3)
    y.backward(torch.ones_like(y))
    assert_close(x.grad, torch.where(y != 0, y / x, torch.zeros_like(y)).detach())
    assert y.shape == x.shape and y.dtype == x.dtype


def test_same_seed_same_mask_and_bf16_stays_bf16():
    x = torch.randn(64, 33, dtype=torch.bfloat16)
    torch.manual_seed(3)
    a = dropout(x, 0.1)
    torch.manual_seed(3)
    b = dropout(x, 0.1)
    assert a.dtype == torch.bfloat16 and torch.equal(a, b)


def test_identity_when_not_training_and_torchs_kernel_at_the_edges():
    x = torch.randn(4, 4)
    assert dropout(x, 0.5, training=False) is x and dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    assert dropout(torch.empty(0, 3), 0.5).shape == (0, 3)
    module = Dropout(0.2)
    assert isinstance(module, torch.nn.Dropout) and module.eval()(x) is x
    with pytest.raises(ValueError):
        dropout(x, 1.5)


def test_module_matches_torchs_statistics():
    torch.manual_seed(4)
    ours = Dropout(0.25).train()(torch.ones(100_000))
    theirs = F.dropout(torch.ones(100_000), 0.25)
    assert abs((ours == 0).float().mean() - (theirs == 0).float().mean()) < 0.01
