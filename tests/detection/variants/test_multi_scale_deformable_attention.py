import math

import torch
from torch.testing import assert_close

from attnkit.detection.variants.multi_scale_deformable_attention import (
    MultiScaleDeformableAttention,
    ValueProjection,
    deformable_sampling,
    sampling_locations,
    short_softmax,
    value_maps,
)


def _bilinear(value_map, x, y):
    """Hand-written bilinear read of value_map (dim, h, w) at (x, y) in [0, 1], pixel centres at (i + 0.5) / size."""
    _, height, width = value_map.shape
    px, py = x * width - 0.5, y * height - 0.5
    x0, y0 = math.floor(px), math.floor(py)
    total = torch.zeros(value_map.shape[0], dtype=value_map.dtype)
    for xi in (x0, x0 + 1):
        for yi in (y0, y0 + 1):
            if 0 <= xi < width and 0 <= yi < height:
                total += (1 - abs(px - xi)) * (1 - abs(py - yi)) * value_map[:, yi, xi]
    return total


def test_deformable_sampling_equals_a_loop_over_points():
    torch.manual_seed(0)
    shapes = [(4, 5), (2, 3), (3, 1)]
    batch, queries, heads, head_dim, points = 2, 5, 2, 4, 6
    value = torch.randn(batch, sum(h * w for h, w in shapes), heads, head_dim, dtype=torch.float64)
    # inside, near the edges and far outside (where a point must not read a neighbouring level)
    locations = torch.rand(batch, queries, heads, len(shapes), points, 2, dtype=torch.float64) * 3 - 1
    weights = torch.rand(batch, queries, heads, len(shapes), points, dtype=torch.float64)
    out = deformable_sampling(value, shapes, locations, weights)
    expected = torch.zeros(batch, queries, heads * head_dim, dtype=torch.float64)
    maps = value.split([h * w for h, w in shapes], dim=1)
    for b in range(batch):
        for q in range(queries):
            for m in range(heads):
                for level, (h, w) in enumerate(shapes):
                    value_map = maps[level][b, :, m].T.reshape(head_dim, h, w)
                    for k in range(points):
                        x, y = locations[b, q, m, level, k].tolist()
                        expected[b, q, m * head_dim:(m + 1) * head_dim] += weights[b, q, m, level, k] * _bilinear(
                            value_map, x, y)
    torch.testing.assert_close(out, expected)


def test_a_point_at_a_pixel_centre_reads_that_pixel():
    value = torch.arange(12.0).view(1, 12, 1, 1)  # one level 3 x 4, one head, one channel
    location = torch.tensor([(2 + 0.5) / 4, (1 + 0.5) / 3]).view(1, 1, 1, 1, 1, 2)
    out = deformable_sampling(value, [(3, 4)], location, torch.ones(1, 1, 1, 1, 1))
    torch.testing.assert_close(out, torch.tensor([[[6.0]]]))  # row 1, column 2


def test_box_references_scale_offsets_by_half_the_box():
    reference = torch.tensor([0.5, 0.5, 0.2, 0.4]).view(1, 1, 1, 4)
    offsets = torch.tensor([2.0, -2.0]).view(1, 1, 1, 1, 1, 2).expand(1, 1, 1, 1, 2, 2)  # 2 points
    locations = sampling_locations(reference, offsets, [(8, 8)])
    torch.testing.assert_close(locations[0, 0, 0, 0, 0], torch.tensor([0.5 + 2 / 2 * 0.1, 0.5 - 2 / 2 * 0.2]))


def test_module_shapes_gradients_and_padding():
    torch.manual_seed(0)
    attention = MultiScaleDeformableAttention(d_model=16, num_heads=4, num_levels=2, num_points=2)
    for linear in (attention.sampling_offsets, attention.attention_weights):  # zero at init: the query is not read
        torch.nn.init.normal_(linear.weight, std=0.2)
    shapes = [(6, 6), (3, 3)]
    query = torch.randn(2, 5, 16, requires_grad=True)
    value = torch.randn(2, 45, 16, requires_grad=True)
    reference = torch.rand(2, 5, 2, 2)
    padding = torch.zeros(2, 45, dtype=torch.bool)
    out = attention(query, reference, value, shapes, padding)
    assert out.shape == (2, 5, 16)
    out.sum().backward()
    assert query.grad.abs().sum() > 0 and value.grad.abs().sum() > 0
    assert all(p.grad is not None for p in attention.parameters())
    # padded keys are never read: changing them changes nothing
    padding[:, -9:] = True
    changed = value.detach().clone()
    changed[:, -9:] = 100.0
    torch.testing.assert_close(attention(query, reference, value, shapes, padding),
                               attention(query, reference, changed, shapes, padding))


def test_deformable_sampling_gradients_match_finite_differences():
    torch.manual_seed(0)
    shapes = [(3, 4), (2, 2)]
    value = torch.randn(1, 16, 2, 3, dtype=torch.float64, requires_grad=True)
    locations = torch.rand(1, 2, 2, 2, 2, 2, dtype=torch.float64) * 1.4 - 0.2
    weights = torch.rand(1, 2, 2, 2, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, w: deformable_sampling(v, shapes, locations, w), (value, weights))


def test_short_softmax_equals_softmax_in_float32_with_its_gradients():
    logits = (torch.randn(2, 5, 8, 12, dtype=torch.float64) * 30).requires_grad_()  # large: the shift matters
    expected = torch.softmax(logits, -1)
    got = short_softmax(logits)
    assert got.dtype == torch.float32
    assert_close(got, expected.float())
    half = logits.detach().bfloat16()
    assert_close(short_softmax(half), torch.softmax(half.float(), -1))  # bfloat16 logits, float32 weights
    upstream = torch.randn_like(expected)
    (grad,) = torch.autograd.grad(got, logits, upstream.float())
    (expected_grad,) = torch.autograd.grad(expected, logits, upstream)
    assert_close(grad, expected_grad, rtol=1e-4, atol=1e-5)


def test_bfloat16_values_are_sampled_in_float32_and_returned_in_bfloat16():
    torch.manual_seed(0)
    shapes = [(4, 5), (2, 3)]
    value = torch.randn(2, 26, 2, 4).bfloat16()
    locations = torch.rand(2, 3, 2, 2, 4, 2)
    weights = torch.rand(2, 3, 2, 2, 4)
    out = deformable_sampling(value, shapes, locations, weights)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, deformable_sampling(value.float(), shapes, locations, weights).bfloat16())


def test_value_projection_maps_are_the_linear_projection_laid_out_per_level():
    """Channel-major per level: the Linear's output, padding zeroed, in (batch * heads, head_dim, h, w), and
    the same gradients; under bf16 autocast as the Linear would be."""
    torch.manual_seed(0)
    shapes, heads = [(4, 5), (2, 3), (1, 1)], 4
    projection = ValueProjection(16, 16)
    keys = torch.randn(2, 27, 16, requires_grad=True)
    padding = torch.zeros(2, 27, dtype=torch.bool)
    padding[1, 15:20] = True
    padding[1, 24:26] = True
    expected = value_maps(torch.nn.Linear.forward(projection, keys).masked_fill(padding[..., None], 0.0)
                          .unflatten(-1, (heads, -1)), shapes)
    got = projection.maps(keys, shapes, padding, heads)
    assert [m.shape for m in got] == [(8, 4, 4, 5), (8, 4, 2, 3), (8, 4, 1, 1)]
    assert all(m.is_contiguous() for m in got)
    for a, b in zip(got, expected):
        assert_close(a, b)
    grads = [torch.autograd.grad(sum((m * m.detach().sin()).sum() for m in maps), (keys, projection.weight))
             for maps in (got, expected)]
    for a, b in zip(*grads):
        assert_close(a, b)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = projection.maps(keys, shapes, None, heads)
    assert low[0].dtype == torch.bfloat16
    assert_close(low[0].float(), projection.maps(keys, shapes, None, heads)[0], atol=0.05, rtol=0.02)
