"""Localization self-distillation: D-FINE's decoupled distillation focal loss against transformers' D-FINE, and the
distillation inside `fast`."""

import pytest
import torch
from torch.testing import assert_close

from attnkit.detection.architectures import build_criterion, build_model
from attnkit.detection.config import DetectionTrainConfig, FastDetrConfig, preset, with_arch
from attnkit.detection.hungarian_matcher import Match
from attnkit.detection.output import SetPrediction
from attnkit.detection.variants.distribution_refinement import BINS, edges_to_boxes, weighting_function
from attnkit.detection.variants.localization_distillation import decoupled_distillation, localization_distillation
from attnkit.errors import ConfigError

TARGETS = [{"labels": torch.tensor([0, 2]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.7, 0.6, 0.3, 0.2]])},
           {"labels": torch.tensor([1]), "boxes": torch.tensor([[0.5, 0.4, 0.2, 0.3]])}]


def test_a_layer_equal_to_its_teacher_costs_nothing_and_matched_and_unmatched_weigh_by_root_counts():
    torch.manual_seed(0)
    student, teacher = torch.zeros(6, BINS + 1), torch.randn(1, BINS + 1).expand(6, -1)  # every edge one KL, k
    matched = torch.tensor([True, False, False, False, False, False])
    assert decoupled_distillation(teacher, teacher, torch.ones(6), matched, 1).abs() < 1e-4
    k = decoupled_distillation(student[:1], teacher[:1], torch.ones(1), torch.tensor([True]), 1)
    loss = decoupled_distillation(student, teacher, torch.tensor([3.0, 1, 1, 1, 1, 1]), matched, 1)
    # the means 3k (one matched edge) and k (five others), shared sqrt(1) : sqrt(5), not 1 : 5
    assert_close(loss, k * (3 + 5 ** 0.5) / (1 + 5 ** 0.5))


def test_equals_d_fines_loss_ddf():
    """The same student and teacher edge logits, teacher classes, boxes and matching as transformers'
    DFineLoss.loss_local."""
    d_fine = pytest.importorskip("transformers.loss.loss_d_fine")
    import transformers

    torch.manual_seed(0)
    anchors = torch.rand(2, 5, 4) * 0.4 + 0.3
    student, teacher = torch.randn(2, 5, 4, BINS + 1), torch.randn(2, 5, 4, BINS + 1)
    boxes = edges_to_boxes(anchors, student.softmax(-1) @ weighting_function())
    class_logits = torch.randn(2, 5, 3)
    matches = [Match(torch.tensor([3, 1]), torch.tensor([1, 0])), Match(torch.tensor([4]), torch.tensor([0]))]
    last = SetPrediction(torch.zeros(2, 5, 4), boxes, class_logits, teacher)
    layer = SetPrediction(torch.zeros(2, 5, 4), boxes, None, student, anchors, teacher=last)
    ours = localization_distillation([layer, last], TARGETS, matches * 2)
    assert ours[1] == 0  # the last layer has no teacher

    theirs = d_fine.DFineLoss(transformers.DFineConfig(num_labels=3)).loss_local(
        {"pred_corners": student.flatten(2), "ref_points": anchors, "pred_boxes": boxes,
         "teacher_corners": teacher.flatten(2), "teacher_logits": class_logits},
        [{"class_labels": t["labels"], "boxes": t["boxes"]} for t in TARGETS],
        [(m.queries, m.objects) for m in matches], 3.0)["loss_ddf"]
    assert_close(ours[0], theirs)


def _tiny(**fields) -> FastDetrConfig:
    return with_arch(preset("tiny")[0], "fast", num_classes=3, dec_layers=2, last_stage=4,
                     distribution_refinement=True, localization_distillation=True, **fields)


def test_earlier_layers_learn_from_the_last_which_learns_nothing_from_them():
    torch.manual_seed(0)
    config = _tiny(query_groups=2)
    model, criterion = build_model(config), build_criterion(config, DetectionTrainConfig())
    assert [t.name for t in criterion.criterion.extra_terms] == ["loss_fgl", "loss_ddf"]
    with torch.no_grad():  # distributions that differ between the layers
        for head in model.decoder.queries.corner_embed:
            head.layers[-1].weight.normal_(0, 0.1)
    images, mask = torch.randn(2, 3, 64, 80), torch.zeros(2, 64, 80, dtype=torch.bool)
    outputs = model(images, mask, TARGETS)
    assert outputs.aux[1].teacher is not None and outputs.groups[0].aux[1].teacher is not None
    assert_close(outputs.groups[0].aux[1].teacher.corners, outputs.groups[0].corners)  # its own group's last
    losses = criterion(outputs, TARGETS)
    assert losses["loss_ddf"] == 0 and losses["loss_ddf_1"] > 0 and losses["loss_ddf_0"] == 0  # b^0 has no edges
    losses["loss_ddf_1"].backward()
    first, last = model.decoder.queries.corner_embed
    assert first.layers[-1].weight.grad.abs().sum() > 0
    assert last.layers[-1].weight.grad is None or last.layers[-1].weight.grad.abs().sum() == 0  # teacher detached


def test_localization_distillation_needs_distribution_refinement():
    with pytest.raises(ConfigError, match="localization_distillation"):
        FastDetrConfig(localization_distillation=True)
