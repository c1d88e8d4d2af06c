"""`sampled_then_projected` (the keys sampled, the samples projected) against projecting every key and sampling the
values (`ValueProjection.maps`, then `deformable_sampling`): the same numbers, padding and points outside the maps
included, and the same gradients; and the module takes it exactly when `samples_pay` says so."""

from __future__ import annotations

import pytest
import torch

from attnkit.detection.variants import multi_scale_deformable_attention as msda
from attnkit.detection.variants.multi_scale_deformable_attention import (
    MultiScaleDeformableAttention,
    ValueProjection,
    bilinear_corners,
    deformable_sampling,
    sampled_then_projected,
)

SHAPES = [(7, 9), (4, 5), (2, 3)]
HEADS, D_MODEL, QUERIES, POINTS = 4, 16, 11, 2


def random_inputs(batch: int, seed: int, dtype: torch.dtype = torch.float32):
    generator = torch.Generator().manual_seed(seed)
    keys = torch.randn(batch, sum(h * w for h, w in SHAPES), D_MODEL, generator=generator, dtype=dtype)
    # some points fall outside their map (read as zeros), some on its border
    locations = torch.rand(batch, QUERIES, HEADS, len(SHAPES), POINTS, 2, generator=generator, dtype=dtype) * 1.4 - 0.2
    weights = torch.rand(batch, QUERIES, HEADS, len(SHAPES), POINTS, generator=generator, dtype=dtype)
    padding = torch.zeros(batch, keys.shape[1], dtype=torch.bool)
    if batch > 1:
        padding[1, :30] = True  # the second image's first rows of the finest map, and more, are padding
        padding[1, 63:66] = True
    projection = ValueProjection(D_MODEL, D_MODEL).to(dtype)
    torch.nn.init.normal_(projection.bias)  # a bias that is not zero: it must vanish outside the maps and on padding
    return keys, padding, locations, weights, projection


def projected_then_sampled(keys, padding, locations, weights, projection):
    return deformable_sampling(projection.maps(keys, SHAPES, padding, HEADS), SHAPES, locations, weights)


@pytest.mark.parametrize("batch", [1, 2])
def test_sampling_the_keys_equals_sampling_the_projected_values(batch: int) -> None:
    keys, padding, locations, weights, projection = random_inputs(batch, seed=batch)
    with torch.inference_mode():
        expected = projected_then_sampled(keys, padding, locations, weights, projection)
        out = sampled_then_projected(keys, padding, SHAPES, locations, weights, projection)
    assert out.shape == (batch, QUERIES, D_MODEL)
    assert expected.abs().max() > 0.1
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_corners_outside_the_map_weigh_nothing_and_inside_sum_to_one() -> None:
    locations = torch.tensor([[0.5, 0.5], [0.0, 0.0], [1.2, 0.5], [0.99, 0.01]]).view(4, 1, 1, 2)  # one level
    index, bilinear = bilinear_corners(locations, [(4, 6)])
    assert index.shape == bilinear.shape == (4, 1, 1, 4)
    assert index.min() >= 0 and index.max() < 24
    torch.testing.assert_close(bilinear[0].sum(), torch.tensor(1.0))  # the centre: four neighbours inside
    torch.testing.assert_close(bilinear[1].sum(), torch.tensor(0.25))  # the corner: one of four inside
    assert bilinear[2].sum() == 0  # past the right edge by more than half a pixel
    assert sorted(index[0, 0, 0].tolist()) == [8, 9, 14, 15]  # x 2.5, y 1.5 of 6 x 4: keys (1,2) (1,3) (2,2) (2,3)


def test_gradients_match_projecting_every_key() -> None:
    keys, padding, locations, weights, projection = random_inputs(2, seed=7, dtype=torch.float64)
    inputs = [t.requires_grad_() for t in (keys, locations, weights)]
    grads = []
    for form in (projected_then_sampled, lambda k, p, loc, w, proj: sampled_then_projected(k, p, SHAPES, loc, w, proj)):
        projection.zero_grad()
        out = form(keys, padding, locations, weights, projection)
        grads.append(torch.autograd.grad(out.square().sum(), [*inputs, projection.weight, projection.bias]))
    for got, expected in zip(*grads):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10)


def test_the_module_samples_first_at_inference_where_it_pays(monkeypatch) -> None:
    torch.manual_seed(0)
    shapes = [(40, 40), (20, 20), (10, 10)]  # 2,100 keys read by 6 queries: the projection costs 58x the neighbours
    module = MultiScaleDeformableAttention(D_MODEL, HEADS, len(shapes), POINTS).eval()
    torch.nn.init.normal_(module.sampling_offsets.weight, std=0.5)
    torch.nn.init.normal_(module.attention_weights.weight)
    query, value = torch.randn(2, 6, D_MODEL), torch.randn(2, 2100, D_MODEL)
    reference = torch.rand(2, 6, len(shapes), 4) * 0.6 + 0.2
    padding = torch.zeros(2, 2100, dtype=torch.bool)
    padding[1, 1500:1600] = True
    calls = []
    sampled_first = msda.sampled_then_projected
    monkeypatch.setattr(msda, "sampled_then_projected", lambda *a: calls.append(1) or sampled_first(*a))
    with torch.no_grad():
        fast = module(query, reference, value, shapes, padding)
    assert calls == [1]
    trained = module(query, reference, value, shapes, padding)  # with gradients: every key projected
    assert calls == [1]
    torch.testing.assert_close(fast, trained.detach(), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        module(query[:, :1].expand(2, 400, -1), reference[:, :1].expand(2, 400, -1, -1), value, shapes, padding)
    assert calls == [1]  # 400 queries: projecting the keys is cheaper
