"""`fast`'s criterion: the focal set criterion (or DETR's) over query groups, proposals and denoising queries."""

import pytest
import torch
import torchvision
from torch.testing import assert_close

from attnkit.detection.config import DetectionTrainConfig, FastDetrConfig
from attnkit.detection.hungarian_matcher import Match, MatchCost, hungarian_match
from attnkit.detection.output import DetectionOutput, SetPrediction
from attnkit.detection.variants.denoising_queries import DenoisingOutput
from attnkit.detection.variants.fast_detr import FastDetrOutput, build_fast_criterion
from attnkit.detection.variants.focal_loss import FocalSetCriterion, focal_cost_matrix, softmax_form

# The losses of `_output(...)` recorded with the criterion before its weights were config fields (the focal
# classification weight a constant FOCAL_WEIGHT = 2.0 in the matching cost and the loss; `loss_ce` then
# included it, so it is half that value now, logged unweighted like DETR's)
RECORDED = {
    (True, 3, True, True): {"loss": 43.32609558105469, "loss_ce": 6.4587016105651855 / 2,
                            "loss_ce_0": 3.8130042552948 / 2, "loss_ce_enc": 6.211236476898193 / 2,
                            "loss_ce_dn": 4.5346760749816895 / 2, "loss_bbox": 0.45047786831855774,
                            "loss_bbox_0": 0.6428443193435669, "loss_bbox_enc": 0.592214047908783,
                            "loss_bbox_dn": 0.8371999859809875, "loss_giou": 0.7325214743614197,
                            "loss_giou_dn": 1.0111552476882935, "class_error": 100.0,
                            "class_error_0": 33.333335876464844, "cardinality_error": 3.5},
    (True, 3, True, False): {"loss": 21.474332809448242, "loss_ce": 6.4587016105651855 / 2},
    (True, 1, False, False): {"loss": 18.911340713500977, "loss_ce": 6.4587016105651855 / 2},
    (False, 3, True, True): {"loss": 31.369197845458984, "loss_ce": 1.669432282447815,
                             "loss_ce_dn": 1.5158751010894775, "loss_ce_enc": 2.188091993331909,
                             "loss_bbox_enc": 0.5211556553840637, "loss_giou_dn": 1.2344096899032593},
    (False, 1, True, False): {"loss": 17.944913864135742, "loss_ce_enc": 1.2177330255508423},
}


def _targets():
    return [{"labels": torch.tensor([0, 2]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.7, 0.6, 0.3, 0.2]])},
            {"labels": torch.tensor([1]), "boxes": torch.tensor([[0.5, 0.4, 0.2, 0.3]])}]


def _sets(count: int, queries: int, focal: bool) -> list[SetPrediction]:
    """COUNT random sets of 2 images x QUERIES predictions of 3 classes, sigmoid (with the softmax form) if FOCAL."""
    sets = []
    for _ in range(count):
        sigmoid_logits = torch.randn(2, queries, 3)
        boxes = torch.rand(2, queries, 4) * 0.4 + 0.3
        sets.append(SetPrediction(softmax_form(sigmoid_logits), boxes, sigmoid_logits) if focal
                    else SetPrediction(torch.randn(2, queries, 4), boxes))
    return sets


def _output(focal: bool, groups: int, two_stage: bool, denoising: bool) -> FastDetrOutput:
    """GROUPS query groups of 2 layers of 5 queries, 7 proposals (TWO_STAGE), 2 layers of 4 denoising queries."""
    torch.manual_seed(0)
    layers = [_sets(2, 5, focal) for _ in range(groups)]
    proposals = _sets(1, 7, focal)[0] if two_stage else None
    denoised = None
    if denoising:
        matches = [Match(torch.tensor([0, 1]), torch.tensor([1, 0])), Match(torch.tensor([2]), torch.tensor([0]))]
        denoised = DenoisingOutput(_sets(2, 4, focal), matches)
    return FastDetrOutput.from_layers(layers[0], groups=[DetectionOutput.from_layers(g) for g in layers[1:]],
                                      proposals=proposals, denoising=denoised)


@pytest.mark.parametrize("case", sorted(RECORDED), ids=lambda c: "focal={},groups={},two_stage={},dn={}".format(*c))
def test_the_default_weights_give_the_losses_recorded_before_they_were_config_fields(case):
    focal = case[0]
    config = FastDetrConfig(num_classes=3, focal_loss=focal, iou_aware=False)  # recorded with the focal loss
    criterion = build_fast_criterion(config, DetectionTrainConfig())
    losses = criterion(_output(*case), _targets())
    for name, value in RECORDED[case].items():
        assert_close(losses[name], torch.tensor(value), msg=name)


def test_the_focal_weights_reach_the_loss_and_the_matching_cost():
    train = DetectionTrainConfig(focal_cost_class=3.0, focal_loss_coef=4.0, focal_alpha=0.4, focal_gamma=1.5)
    criterion = build_fast_criterion(FastDetrConfig(num_classes=3, iou_aware=False), train).criterion
    assert isinstance(criterion, FocalSetCriterion) and (criterion.alpha, criterion.gamma) == (0.4, 1.5)
    assert criterion.cost == MatchCost(3.0, 5.0, 2.0) and (criterion.weights.ce, criterion.weights.l1) == (4.0, 5.0)
    output = _output(True, 1, False, False)
    losses = build_fast_criterion(FastDetrConfig(num_classes=3, iou_aware=False), train)(output, _targets())
    # the reference: the focal cost's matching, then torchvision's focal loss over every (query, class) pair
    cost = lambda *args: focal_cost_matrix(*args, alpha=0.4, gamma=1.5)  # noqa: E731
    matches = hungarian_match(output.class_logits, output.boxes, _targets(), MatchCost(3.0, 5.0, 2.0), cost)
    onehot = torch.zeros_like(output.class_logits)
    for image, (match, target) in enumerate(zip(matches, _targets())):
        onehot[image, match.queries, target["labels"][match.objects]] = 1.0
    expected = torchvision.ops.sigmoid_focal_loss(output.class_logits, onehot, 0.4, 1.5, reduction="sum") / 3
    assert_close(losses["loss_ce"], expected)
    layers = ("", "_0")
    total = sum(4.0 * losses[f"loss_ce{s}"] + 5 * losses[f"loss_bbox{s}"] + 2 * losses[f"loss_giou{s}"] for s in layers)
    assert_close(losses["loss"], total)


def test_the_proposals_count_with_the_first_group_and_the_denoising_queries_are_added():
    criterion = build_fast_criterion(FastDetrConfig(num_classes=3, iou_aware=False), DetectionTrainConfig())
    full = criterion(_output(True, 3, True, True), _targets())
    without_dn = criterion(_output(True, 3, True, False), _targets())
    groups_only = criterion(_output(True, 3, False, False), _targets())
    proposals = 2 * full["loss_ce_enc"] + 5 * full["loss_bbox_enc"] + 2 * full["loss_giou_enc"]
    assert_close(without_dn["loss"], groups_only["loss"] + proposals / 3)  # the mean over 3 groups
    denoising = _output(True, 3, True, True).denoising  # both layers, under the fixed assignment of 3 positives
    terms = criterion.criterion.terms(*criterion.criterion.stacked(denoising.layers), _targets(),
                                      denoising.matches * 2, 3.0)  # each (2,)
    assert_close(full["loss"], without_dn["loss"] + 2 * terms["loss_ce"].sum() + 5 * terms["loss_bbox"].sum()
                 + 2 * terms["loss_giou"].sum())
    assert_close(full["loss_giou_dn"], terms["loss_giou"][-1])  # the last layer's, logged
