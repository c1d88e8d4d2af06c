"""Fine-grained distribution refinement: D-FINE's weighting function, box decoding and localization loss against
transformers' D-FINE, and the refinement inside `fast`."""

import pytest
import torch
from torch.testing import assert_close

from attnkit.detection.architectures import build_criterion, build_model
from attnkit.detection.config import DetectionTrainConfig, FastDetrConfig, preset, with_arch
from attnkit.detection.hungarian_matcher import Match
from attnkit.detection.output import SetPrediction
from attnkit.detection.variants.box_refinement import LayerBoxes
from attnkit.detection.variants.distribution_refinement import (
    BINS,
    REG_SCALE,
    UP,
    DistributionQueries,
    bin_targets,
    boxes_to_edges,
    edges_to_boxes,
    fine_grained_localization,
    weighting_function,
)
from attnkit.errors import ConfigError


def _d_fine():
    return pytest.importorskip("transformers.loss.loss_d_fine")


def test_weighting_function_is_d_fines():
    weights = weighting_function()
    assert weights.shape == (BINS + 1,) and weights[BINS // 2] == 0
    assert_close(weights, -weights.flip(0))  # symmetric about the middle bin
    assert (weights.diff() > 0).all() and weights[-1] == 2 * UP * REG_SCALE
    middle, outer = weights[BINS // 2 + 1] - weights[BINS // 2], weights[-2] - weights[-3]
    assert middle < outer / 2  # fine steps near 0 (small corrections), coarse at the ends
    assert_close(weights, _d_fine().weighting_function(BINS, torch.tensor([UP]), REG_SCALE).float())


def test_edges_decode_as_d_fine_and_invert():
    torch.manual_seed(0)
    anchors = torch.rand(5, 4) * 0.4 + 0.3
    offsets = torch.randn(5, 4)
    boxes = edges_to_boxes(anchors, offsets)
    theirs = pytest.importorskip("transformers.models.d_fine.modeling_d_fine").distance2bbox(anchors, offsets,
                                                                                              REG_SCALE)
    assert_close(boxes, theirs)
    assert_close(boxes_to_edges(anchors, boxes), offsets, atol=1e-5, rtol=1e-5)
    assert_close(edges_to_boxes(anchors, torch.zeros(5, 4)), anchors)  # no offset: the anchor itself


def test_bin_targets_are_d_fines_including_offsets_past_the_ends():
    weights = weighting_function()
    offsets = torch.tensor([-9.0, -4.0, -0.3, 0.0, 0.01, 1.7, 3.99, 4.0, 7.0])
    left, right_weight = bin_targets(offsets, weights)
    indices, theirs_right, theirs_left = _d_fine().translate_gt(offsets, BINS, REG_SCALE, torch.tensor([UP]))
    assert_close(left, indices.long())
    assert_close(right_weight, theirs_right)
    assert_close(1 - right_weight, theirs_left)
    inside = (offsets > weights[0]) & (offsets < weights[-1])
    interpolated = weights[left] * (1 - right_weight) + weights[left + 1] * right_weight
    assert_close(interpolated[inside], offsets[inside])  # the two bins place the offset exactly


def test_fine_grained_localization_equals_d_fines_loss_fgl():
    """The same edge logits, anchors, boxes, targets and matching as transformers' DFineLoss.loss_local."""
    d_fine = _d_fine()
    import transformers

    torch.manual_seed(0)
    anchors = torch.rand(2, 5, 4) * 0.4 + 0.3
    corners = torch.randn(2, 5, 4, BINS + 1)
    boxes = edges_to_boxes(anchors, corners.softmax(-1) @ weighting_function())
    targets = [{"labels": torch.tensor([0, 2]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.7, 0.6, 0.3, 0.2]])},
               {"labels": torch.tensor([1]), "boxes": torch.tensor([[0.5, 0.4, 0.2, 0.3]])}]
    matches = [Match(torch.tensor([3, 1]), torch.tensor([1, 0])), Match(torch.tensor([4]), torch.tensor([0]))]
    prediction = SetPrediction(torch.zeros(2, 5, 4), boxes, None, corners, anchors)
    ours = fine_grained_localization([prediction], targets, matches, 3.0, weighting_function())

    flat = corners.flatten(2)  # (batch, queries, 4 * (bins + 1)), D-FINE's layout
    theirs = d_fine.DFineLoss(transformers.DFineConfig(num_labels=3)).loss_local(
        {"pred_corners": flat, "ref_points": anchors, "pred_boxes": boxes, "teacher_corners": flat,
         "teacher_logits": torch.zeros(2, 5, 3)},
        [{"class_labels": t["labels"], "boxes": t["boxes"]} for t in targets],
        [(m.queries, m.objects) for m in matches], 3.0)["loss_fgl"]
    assert_close(ours, theirs.reshape(1))


def _tiny(**fields) -> FastDetrConfig:
    return with_arch(preset("tiny")[0], "fast", num_classes=3, dec_layers=2, last_stage=4,
                     distribution_refinement=True, **fields)


def _inputs():
    images, mask = torch.randn(2, 3, 64, 80), torch.zeros(2, 64, 80, dtype=torch.bool)
    targets = [{"labels": torch.tensor([0, 2]), "boxes": torch.tensor([[0.5, 0.5, 0.3, 0.2], [0.2, 0.3, 0.1, 0.2]])},
               {"labels": torch.tensor([1]), "boxes": torch.tensor([[0.6, 0.4, 0.2, 0.3]])}]
    return images, mask, targets


def test_every_layer_starts_at_the_first_layers_box_and_adds_its_logits():
    torch.manual_seed(0)
    model = build_model(_tiny(query_groups=1, two_stage=False)).eval()
    images, mask, _ = _inputs()
    queries = model.decoder.queries
    anchors = queries.anchors.sigmoid().expand(2, -1, -1)
    outputs = model(images, mask)  # zero heads: b^0 is the anchor, the distributions uniform (offset 0)
    assert [layer.boxes.shape for layer in outputs.aux] == [(2, 10, 4)] * 2  # b^0, then layer 1
    for boxes in (outputs.aux[0].boxes, outputs.aux[1].boxes, outputs.boxes):
        assert_close(boxes, anchors)
    with torch.no_grad():
        bias = queries.corner_embed[0].layers[-1].bias.view(4, BINS + 1)
        bias[2, BINS] = 30.0  # layer 1 puts every right edge at the last bin: W(N) = 2 a c from its half width
    outputs = model(images, mask)
    right = anchors[..., 0] + (0.5 * REG_SCALE + 2 * UP * REG_SCALE) * anchors[..., 2] / REG_SCALE
    inside = (right < 1) & (outputs.aux[1].boxes[..., 2] < 1)  # boxes are clamped to the image (cx, cy, w, h)
    assert inside.sum() >= 5
    assert_close((outputs.aux[1].boxes[..., 0] + outputs.aux[1].boxes[..., 2] / 2)[inside], right[inside])
    assert_close(outputs.boxes, outputs.aux[1].boxes)  # layer 2 adds zero logits to layer 1's: the same box


def test_the_localization_loss_weighs_0_15_and_is_off_by_default():
    config = _tiny(query_groups=1)
    criterion = build_criterion(config, DetectionTrainConfig())
    assert [(t.name, t.weight) for t in criterion.criterion.extra_terms] == [("loss_fgl", 0.15)]
    assert build_criterion(FastDetrConfig(num_classes=3), DetectionTrainConfig()).criterion.extra_terms == ()
    torch.manual_seed(0)
    model = build_model(config)
    images, mask, targets = _inputs()
    outputs = model(images, mask, targets)
    with_term = criterion(outputs, targets)
    assert with_term["loss_fgl"] > 0 and with_term["loss_fgl_1"] > 0  # the last and the middle layer
    assert with_term["loss_fgl_0"] == 0  # b^0 is a box, not distributions
    criterion.criterion.extra_terms = ()
    without = criterion(outputs, targets)
    fgl = with_term["loss_fgl"] + with_term["loss_fgl_0"] + with_term["loss_fgl_1"] + with_term["loss_fgl_enc"]
    assert_close(with_term["loss"] - without["loss"], 0.15 * fgl)


def test_distribution_refinement_needs_box_refinement():
    with pytest.raises(ConfigError, match="distribution_refinement"):
        FastDetrConfig(distribution_refinement=True, box_refinement=False, two_stage=False)


def test_boxes_are_computed_in_float32_under_bf16_autocast():
    """bf16 would round an edge to about 1/256 of the image: the edges' expectation and the boxes are float32."""
    torch.manual_seed(0)
    queries = DistributionQueries(10, 32, 2)  # the second layer's edge head is zero: it adds nothing
    previous = LayerBoxes(torch.rand(1, 10, 4), torch.randn(1, 10, 4, BINS + 1) * 3, torch.rand(1, 10, 4) * 0.5 + 0.2)
    hidden = torch.randn(1, 10, 32)
    exact = queries.boxes(1, hidden, previous.boxes, previous).boxes
    with torch.autocast("cpu", torch.bfloat16):
        autocast = queries.boxes(1, hidden, previous.boxes, previous).boxes
    assert autocast.dtype == torch.float32
    assert_close(autocast, exact)
