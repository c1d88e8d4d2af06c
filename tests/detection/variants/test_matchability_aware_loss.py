"""DEIM's matchability-aware loss against hand-computed values and DEIM's own (transformers' DEIMv2 loss)."""

import math

import pytest
import torch
from torch.testing import assert_close

from attnkit.detection.config import DetectionTrainConfig, FastDetrConfig
from attnkit.detection.hungarian_matcher import Match
from attnkit.detection.variants.fast_detr import build_fast_criterion
from attnkit.detection.variants.matchability_aware_loss import MatchabilityAwareSetCriterion, matchability_aware_loss
from attnkit.errors import ConfigError


def _criterion() -> MatchabilityAwareSetCriterion:
    criterion = build_fast_criterion(FastDetrConfig(num_classes=3, matchability_aware=True),
                                     DetectionTrainConfig()).criterion
    assert isinstance(criterion, MatchabilityAwareSetCriterion)
    return criterion


def test_hand_computed_elements():
    """p = 0.5 everywhere: a positive with IoU q costs the cross-entropy towards q^1.5 at full weight, a negative
    0.5^1.5 log 2, and a missed positive (q = 0) log 2 (the varifocal loss gives it nothing)."""
    logits = torch.zeros(3)
    positive = torch.tensor([1.0, 0.0, 1.0])
    scores = torch.tensor([0.6, 0.0, 0.0])
    target = 0.6 ** 1.5
    assert_close(matchability_aware_loss(logits, positive, scores),
                 torch.tensor([-(target * math.log(0.5) + (1 - target) * math.log(0.5)), 0.5 ** 1.5 * math.log(2),
                               math.log(2)]))


def test_the_matched_class_is_trained_towards_its_iou_to_the_gamma():
    """A single matched query whose box has IoU 0.5: the loss is least where sigmoid(logit) = 0.5^1.5."""
    box = torch.tensor([[[0.3, 0.3, 0.2, 0.1]]])  # (1 image, 1 query, 4): half the target's height, IoU 0.5
    targets = [{"labels": torch.tensor([1]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.2]])}]
    logit = torch.zeros(1, 1, 3, requires_grad=True)
    logit.data[0, 0, 1] = torch.logit(torch.tensor(0.5 ** 1.5))
    loss = _criterion().terms(logit, box, targets, [Match(torch.tensor([0]), torch.tensor([0]))], 1.0)["loss_ce"]
    loss.sum().backward()
    assert logit.grad is not None
    assert abs(logit.grad[0, 0, 1].item()) < 1e-6
    assert (logit.grad[0, 0, [0, 2]] > 0).all()  # the other classes are pushed down


def test_matches_deim_loss_labels_mal():
    """The same predictions, targets and matching as transformers' Deimv2Loss.loss_labels_mal with DEIM's gamma
    1.5: the same loss."""
    transformers = pytest.importorskip("transformers")
    from transformers.loss.loss_deimv2 import Deimv2Loss

    torch.manual_seed(0)
    logits, boxes = torch.randn(2, 5, 3), torch.rand(2, 5, 4) * 0.4 + 0.3
    targets = [{"labels": torch.tensor([0, 2]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.7, 0.6, 0.3, 0.2]])},
               {"labels": torch.tensor([1]), "boxes": torch.tensor([[0.5, 0.4, 0.2, 0.3]])}]
    matches = [Match(torch.tensor([3, 1]), torch.tensor([1, 0])), Match(torch.tensor([4]), torch.tensor([0]))]
    ours = _criterion().terms(logits, boxes, targets, matches, 3.0)["loss_ce"]

    config = transformers.Deimv2Config(num_labels=3, focal_loss_gamma=1.5)
    theirs = Deimv2Loss(config).loss_labels_mal(
        {"logits": logits, "pred_boxes": boxes},
        [{"class_labels": t["labels"], "boxes": t["boxes"]} for t in targets],
        [(m.queries, m.objects) for m in matches], 3.0)["loss_mal"]
    assert_close(ours, theirs.reshape(1))


def test_weighs_one_and_needs_the_iou_aware_sigmoid_classifier():
    criterion = _criterion()
    assert criterion.weights.ce == 1.0 and (criterion.alpha, criterion.gamma) == (0.25, 2.0)  # matching unchanged
    with pytest.raises(ConfigError, match="iou_aware"):
        FastDetrConfig(matchability_aware=True, iou_aware=False)
    with pytest.raises(ConfigError, match="iou_aware"):
        FastDetrConfig(matchability_aware=True, focal_loss=False)
