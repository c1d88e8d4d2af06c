"""`deformable_sampling` (values laid out per level, each point's samples added into the output in place) against the
per-level form it replaced, on random inputs, with and without autograd."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.detection.variants.multi_scale_deformable_attention import deformable_sampling

SHAPES = [(7, 9), (4, 5), (2, 3)]


def per_level_reference(value: Tensor, shapes: Sequence[tuple[int, int]], locations: Tensor,
                        weights: Tensor) -> Tensor:
    """The former implementation: all values laid out at once, each level's map copied again, weighted out of place."""
    batch, _, heads, head_dim = value.shape
    queries, levels, points = locations.shape[1], locations.shape[3], locations.shape[4]
    grids = (2 * locations - 1).permute(3, 0, 2, 4, 1, 5).flatten(1, 2).contiguous()
    weights = weights.permute(3, 0, 2, 4, 1).reshape(levels, batch * heads, 1, points, queries).contiguous()
    value = value.permute(0, 2, 3, 1).reshape(batch * heads, head_dim, -1)
    output = None
    for value_level, shape, grid, weight in zip(value.split([h * w for h, w in shapes], dim=-1), shapes, grids,
                                                weights):
        sampled = F.grid_sample(value_level.unflatten(-1, shape).contiguous(), grid, mode="bilinear",
                                padding_mode="zeros", align_corners=False)
        level_sum = (sampled * weight).sum(2)
        output = level_sum if output is None else output + level_sum
    assert output is not None
    return output.view(batch, heads * head_dim, queries).transpose(1, 2)


def random_inputs(batch: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    generator = torch.Generator().manual_seed(seed)
    keys, heads, head_dim, queries, points = sum(h * w for h, w in SHAPES), 3, 4, 11, 2
    value = torch.randn(batch, keys, heads, head_dim, generator=generator)
    locations = torch.rand(batch, queries, heads, len(SHAPES), points, 2, generator=generator) * 1.2 - 0.1
    weights = torch.rand(batch, queries, heads, len(SHAPES), points, generator=generator)
    return value, locations, weights


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("grad", [False, True])
def test_deformable_sampling_matches_the_per_level_reference(batch: int, grad: bool) -> None:
    value, locations, weights = random_inputs(batch, seed=batch)
    expected = per_level_reference(value, SHAPES, locations, weights)
    with torch.set_grad_enabled(grad):
        out = deformable_sampling(value, SHAPES, locations, weights)
    assert out.shape == (batch, 11, 12)
    assert expected.abs().max() > 0.1  # the points read real values
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)


def test_deformable_sampling_in_inference_mode_leaves_its_inputs_and_matches() -> None:
    value, locations, weights = random_inputs(2, seed=5)
    copies = [t.clone() for t in (value, locations, weights)]
    with torch.inference_mode():
        out = deformable_sampling(value, SHAPES, locations, weights)
    for given, copy in zip((value, locations, weights), copies):
        assert torch.equal(given, copy)
    torch.testing.assert_close(out, per_level_reference(value, SHAPES, locations, weights), rtol=1e-5, atol=1e-6)


def test_deformable_sampling_gradients_match_the_per_level_reference() -> None:
    value, locations, weights = random_inputs(2, seed=7)
    grads = []
    for sampling in (deformable_sampling, per_level_reference):
        v, w = value.clone().requires_grad_(), weights.clone().requires_grad_()
        sampling(v, SHAPES, locations, w).square().sum().backward()
        grads.append((v.grad, w.grad))
    for ours, reference in zip(*grads):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
