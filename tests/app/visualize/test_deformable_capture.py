"""Captured deformable sampling against what the module samples and the paper's formulas, outputs unchanged."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch.testing import assert_close

from attnkit.app.visualize import deformable_maps
from attnkit.app.visualize.deformable_capture import Sampling, capture_deformable
from attnkit.detection.architectures import build_model
from attnkit.detection.config import preset, with_arch
from attnkit.detection.variants import multi_scale_deformable_attention as msda
from attnkit.errors import UserError


def tiny_fast(**fields):
    """The tiny preset as `fast` (deformable attention, two-stage, the lite encoder), two decoder layers."""
    torch.manual_seed(0)
    config = with_arch(preset("tiny")[0], "fast", num_classes=3, dec_layers=2, last_stage=4,
                       **{"encoder_levels": 2, **fields})
    model = build_model(config).eval()
    with torch.no_grad():  # trained-looking projections: offsets and weights that depend on the query
        for module in model.modules():
            if isinstance(module, msda.MultiScaleDeformableAttention):
                module.sampling_offsets.weight.normal_(0, 0.05)
                module.attention_weights.weight.normal_(0, 0.2)
    return model


def inputs():
    images = torch.randn(2, 3, 64, 80)
    mask = torch.zeros(2, 64, 80, dtype=torch.bool)
    mask[1, 48:, :] = True  # the second image is smaller: padded below and right
    mask[1, :, 64:] = True
    return images, mask


def test_captured_sampling_is_what_the_module_samples(monkeypatch):
    model = tiny_fast()
    sampled = []  # every call's (locations, weights), in call order: encoder layer, then decoder layers

    def recording(value, shapes, locations, weights):
        sampled.append((locations, weights))
        return deformable_sampling(value, shapes, locations, weights)

    deformable_sampling = msda.deformable_sampling
    monkeypatch.setattr(msda, "deformable_sampling", recording)
    captured = capture_deformable(model, *inputs())
    assert len(captured.encoder) == 1 and len(captured.decoder) == 2 and len(sampled) == 3
    for sampling, (locations, weights) in zip([*captured.encoder, *captured.decoder], sampled):
        assert_close(sampling.locations, locations, rtol=0, atol=0)
        assert_close(sampling.weights, weights, rtol=0, atol=0)
        heads = sampling.weights.sum((-2, -1))  # (batch, queries, heads): Eq. 3's softmax over levels and points
        assert_close(heads, torch.ones_like(heads))


def record_calls(model):
    """The arguments of every deformable attention call, by module name."""
    calls, handles = {}, []
    for name, module in model.named_modules():
        if isinstance(module, msda.MultiScaleDeformableAttention):
            def hook(module, args, kwargs, name=name):
                calls[name] = inspect.signature(module.forward).bind(*args, **kwargs).arguments
            handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    return calls, handles


def by_hand(module, query, reference, shapes):
    """Eq. 3's sampling written out for one query: offsets and weights are linear in the query; a point
    reference moves by offsets in pixels of each level, a box reference by offsets * box / (2 K) (appendix A.4)."""
    heads, levels, points = module.num_heads, module.num_levels, module.num_points
    offsets = (module.sampling_offsets.weight @ query + module.sampling_offsets.bias).view(heads, levels, points, 2)
    logits = (module.attention_weights.weight @ query + module.attention_weights.bias).view(heads, levels * points)
    weights = (logits.exp() / logits.exp().sum(-1, keepdim=True)).view(heads, levels, points)
    locations = torch.empty(heads, levels, points, 2)
    for level, (height, width) in enumerate(shapes):
        x, y = reference[level, 0], reference[level, 1]
        if len(reference[level]) == 4:  # a box: offsets in units of half the box over K
            scale_x, scale_y = reference[level, 2] / (2 * points), reference[level, 3] / (2 * points)
        else:  # a point: offsets in pixels of the level's map
            scale_x, scale_y = 1 / width, 1 / height
        locations[:, level, :, 0] = x + offsets[:, level, :, 0] * scale_x
        locations[:, level, :, 1] = y + offsets[:, level, :, 1] * scale_y
    return locations, weights


def test_captured_sampling_equals_the_papers_formula():
    model = tiny_fast()
    calls, handles = record_calls(model)
    captured = capture_deformable(model, *inputs())
    for handle in handles:
        handle.remove()
    cases = [("encoder.layers.0.self_attn", captured.encoder[0]), ("decoder.layers.1.cross_attn", captured.decoder[1])]
    for name, sampling in cases:
        call, module = calls[name], model.get_submodule(name)
        for batch, query in [(0, 0), (1, 3), (1, sampling.locations.shape[1] - 1)]:
            locations, weights = by_hand(module, call["query"][batch, query], call["reference"][batch, query],
                                         call["shapes"])
            assert_close(sampling.locations[batch, query], locations)
            assert_close(sampling.weights[batch, query], weights)
            assert_close(sampling.reference[batch, query], call["reference"][batch, query])


def test_capture_leaves_the_outputs_and_no_hooks():
    model = tiny_fast()
    images, mask = inputs()
    with torch.no_grad():
        plain = model(images, mask)
    captured = capture_deformable(model, images, mask)
    assert_close(captured.outputs.logits, plain.logits, rtol=0, atol=0)
    assert_close(captured.outputs.boxes, plain.boxes, rtol=0, atol=0)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_the_decoder_starts_from_the_captured_proposals():
    model = tiny_fast()
    captured = capture_deformable(model, *inputs())
    first = captured.decoder[0].in_image(captured.valid_ratios)  # the first layer samples around the proposals
    assert captured.proposals is not None and captured.proposal_scores is not None
    assert captured.proposals.shape == (2, 10, 4)
    for level in range(len(captured.shapes)):
        assert_close(first.reference[:, :, level], captured.proposals)
    scores = captured.proposal_scores
    assert (scores[:, 1:] <= scores[:, :-1]).all()  # best first


def test_encoder_queries_are_the_updated_pixels_in_image_coordinates():
    captured = capture_deformable(tiny_fast(), *inputs())
    # 64 x 80 pixels: strides 8, 16, 32 give 8 x 10, 4 x 5, 2 x 3 maps; the lite encoder updates the last two
    assert captured.shapes == ((8, 10), (4, 5), (2, 3)) and captured.encoder_first == 80
    assert captured.encoder_levels() == [1, 2] and captured.encoder[0].locations.shape[1] == 20 + 6
    image = captured.encoder[0].in_image(captured.valid_ratios)
    # the second image's unpadded part is 48 x 64 pixels: cell (1, 2) of the 4 x 5 map (16 px cells) is centred
    # at x = 2.5 * 16 / 64, y = 1.5 * 16 / 48 of it
    query = captured.encoder_query(1, 1, 2)
    assert query == 7
    assert_close(image.reference[:, query, 1], torch.tensor([[2.5 / 5, 1.5 / 4], [2.5 * 16 / 64, 1.5 * 16 / 48]]))


def test_in_image_divides_by_the_valid_ratios():
    sampling = Sampling(torch.tensor([[[[0.4, 0.3, 0.2, 0.1]]]]), torch.tensor([[[[[[0.5, 0.25]]]]]]),
                        torch.ones(1, 1, 1, 1, 1))
    image = sampling.in_image(torch.tensor([[[0.5, 0.25]]]))  # the map's left half, its top quarter is the image
    assert_close(image.reference, torch.tensor([[[[0.8, 1.2, 0.4, 0.4]]]]))
    assert_close(image.locations, torch.tensor([[[[[[1.0, 1.0]]]]]]))


def test_a_dense_model_has_nothing_to_capture():
    model = tiny_fast(deformable_attention=False, encoder_levels=3, two_stage=False, box_refinement=False)
    with pytest.raises(UserError, match="no deformable attention"):
        capture_deformable(model, *inputs())


def test_points_outside_the_image_are_left_out_and_counted():
    import matplotlib.pyplot as plt

    locations = torch.tensor([[0.1, 0.2], [1.2, 0.5], [0.5, -0.1], [0.9, 0.9]]).view(1, 2, 2, 2)  # (heads, levels, ...)
    weights = torch.tensor([0.1, 0.2, 0.3, 0.4]).view(1, 2, 2)
    fig, ax = plt.subplots()
    try:
        _, outside = deformable_maps.draw_sampling(ax, locations, weights, (100, 50), 0.4)
        drawn = [collection.get_offsets().tolist() for collection in ax.collections]  # one scatter per level
    finally:
        plt.close(fig)
    assert outside == 2
    assert drawn == [[[10.0, 10.0]], [[90.0, 45.0]]]  # pixels of a 100 x 50 image
    assert deformable_maps._level_shares(weights) == "30% / 70%"
