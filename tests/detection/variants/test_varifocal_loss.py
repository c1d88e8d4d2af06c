"""IoU-aware classification: the varifocal loss against hand-computed values and RT-DETR's own (transformers')."""

import math

import pytest
import torch
from torch.testing import assert_close

from attnkit.detection.config import DetectionTrainConfig, FastDetrConfig
from attnkit.detection.hungarian_matcher import Match
from attnkit.detection.set_criterion import SetCriterion
from attnkit.detection.variants.fast_detr import build_fast_criterion
from attnkit.detection.variants.focal_loss import FocalSetCriterion
from attnkit.detection.variants.varifocal_loss import VarifocalSetCriterion, varifocal_loss


def _targets():
    return [{"labels": torch.tensor([0, 2]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.7, 0.6, 0.3, 0.2]])},
            {"labels": torch.tensor([1]), "boxes": torch.tensor([[0.5, 0.4, 0.2, 0.3]])}]


def _criterion(**changes) -> VarifocalSetCriterion:
    criterion = build_fast_criterion(FastDetrConfig(num_classes=3, iou_aware=True, **changes),
                                     DetectionTrainConfig()).criterion
    assert isinstance(criterion, VarifocalSetCriterion)
    return criterion


def test_hand_computed_elements():
    """p = 0.5 everywhere: a positive with IoU q costs q log 2, a negative 0.75 * 0.5^2 log 2, a missed positive
    (q = 0) nothing."""
    logits = torch.zeros(3)
    positive = torch.tensor([1.0, 0.0, 1.0])
    scores = torch.tensor([0.6, 0.0, 0.0])
    assert_close(varifocal_loss(logits, positive, scores),
                 torch.tensor([0.6 * math.log(2), 0.75 * 0.25 * math.log(2), 0.0]))


def test_the_matched_class_is_trained_towards_its_iou():
    """A single matched query: the loss is least where sigmoid(logit) equals its box's IoU with the target."""
    criterion = _criterion()
    box = torch.tensor([[[0.3, 0.3, 0.2, 0.1]]])  # (1 image, 1 query, 4): half the target's height, IoU 0.5
    targets = [{"labels": torch.tensor([1]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.2]])}]
    match = [Match(torch.tensor([0]), torch.tensor([0]))]
    logit = torch.zeros(1, 1, 3, requires_grad=True)
    logit.data[0, 0, 1] = torch.logit(torch.tensor(0.5))
    loss = criterion.terms(logit, box, targets, match, 1.0)["loss_ce"].sum()
    loss.backward()
    assert logit.grad is not None
    assert abs(logit.grad[0, 0, 1].item()) < 1e-6  # sigmoid(0) = 0.5 = IoU: the matched class is at its target
    assert (logit.grad[0, 0, [0, 2]] > 0).all()  # the other classes are pushed down


def test_matches_rt_detr_loss_labels_vfl():
    """The same predictions, targets and matching as transformers' RTDetrLoss.loss_labels_vfl: the same loss."""
    transformers = pytest.importorskip("transformers")
    from transformers.loss.loss_rt_detr import RTDetrLoss

    torch.manual_seed(0)
    logits, boxes = torch.randn(2, 5, 3), torch.rand(2, 5, 4) * 0.4 + 0.3
    targets = _targets()
    matches = [Match(torch.tensor([3, 1]), torch.tensor([1, 0])), Match(torch.tensor([4]), torch.tensor([0]))]
    ours = _criterion().terms(logits, boxes, targets, matches, 3.0)["loss_ce"]

    theirs = RTDetrLoss(transformers.RTDetrConfig(num_labels=3)).loss_labels_vfl(
        {"logits": logits, "pred_boxes": boxes},
        [{"class_labels": t["labels"], "boxes": t["boxes"]} for t in targets],
        [(m.queries, m.objects) for m in matches], 3.0)["loss_vfl"]
    assert_close(ours, theirs.reshape(1))


def test_fast_criterion_weights_it_as_rt_detr_and_keeps_the_focal_matching():
    criterion = _criterion()
    assert criterion.weights.ce == 1.0 and criterion.weights.l1 == 5.0 and criterion.weights.giou == 2.0
    assert (criterion.alpha, criterion.gamma) == (0.25, 2.0)  # the matching cost's, as RT-DETR's matcher
    default = build_fast_criterion(FastDetrConfig(num_classes=3), DetectionTrainConfig()).criterion
    assert type(default) is VarifocalSetCriterion  # on by default (measured: BENCHMARKS.md)
    focal = build_fast_criterion(FastDetrConfig(num_classes=3, iou_aware=False), DetectionTrainConfig()).criterion
    assert type(focal) is FocalSetCriterion
    softmax = build_fast_criterion(FastDetrConfig(num_classes=3, focal_loss=False), DetectionTrainConfig()).criterion
    assert type(softmax) is SetCriterion  # IoU-aware classification is the sigmoid classifier's
