"""Sigmoid focal classification (Lin et al. 2017, Eq. 5), as Deformable DETR trains it (Zhu et al. 2021).

DETR's softmax over K classes + "no object" makes the many unmatched queries dominate the
cross-entropy (hence its 0.1 weight on "no object"). Here every class is a separate sigmoid, and
the focal loss

    FL(p_t) = -alpha_t (1 - p_t)^gamma log(p_t)          alpha = 0.25, gamma = 2 (train.focal_alpha, focal_gamma)

lets the easy negatives fade. Matching uses the same form as its classification cost. Both are
weighted 2 against the box terms (Deformable DETR's; `train.focal_cost_class`, `focal_loss_coef`),
where DETR's cross-entropy has 1. The classifier's bias starts at the prior -log((1 - 0.01) / 0.01),
so training begins near "nothing".

The sigmoid logits are the output's `class_logits`. For the shared post-processing, evaluation and
drawing, the model also returns `logits` in DETR's (classes + 1) form: the best class keeps
probability sigmoid(z_best), the rest is "no object" (`softmax_form`), so DETR's post-processing
reads score sigmoid(z_best) and that class.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.ops import box_convert, generalized_box_iou, sigmoid_focal_loss as torchvision_focal_loss

from attnkit.detection.config import DetectionTrainConfig, DetrConfig
from attnkit.detection.hungarian_matcher import Match, MatchCost, hungarian_match
from attnkit.detection.output import SetPrediction
from attnkit.detection.set_criterion import (
    LossWeights,
    MatchIndex,
    SetCriterion,
    class_error,
    criterion_weights,
    matched_targets,
)

ALPHA, GAMMA = 0.25, 2.0  # Lin et al. 2017's (section 5.1)
PRIOR_BIAS = -math.log((1 - 0.01) / 0.01)


def sigmoid_focal_loss(logits: Tensor, targets: Tensor, alpha: float = ALPHA, gamma: float = GAMMA) -> Tensor:
    """Elementwise FL of logits and {0, 1} targets of the same shape (torchvision's)."""
    return torchvision_focal_loss(logits, targets, alpha, gamma, reduction="none")


def focal_cost_matrix(logits: Tensor, boxes: Tensor, labels: Tensor, target_boxes: Tensor, cost: MatchCost,
                      alpha: float = ALPHA, gamma: float = GAMMA) -> Tensor:
    """L_match with the focal classification cost cost.cls * (FL(positive) - FL(negative)) of each object's class.

    logits: (queries, classes) sigmoid logits. Returns (queries, objects).
    """
    prob = logits.sigmoid()[:, labels]  # (queries, objects)
    positive = alpha * (1 - prob) ** gamma * -(prob + 1e-8).log()
    negative = (1 - alpha) * prob ** gamma * -(1 - prob + 1e-8).log()
    l1 = torch.cdist(boxes, target_boxes, p=1)  # (queries, objects)
    giou = generalized_box_iou(box_convert(boxes, "cxcywh", "xyxy"), box_convert(target_boxes, "cxcywh", "xyxy"))
    return cost.l1 * l1 - cost.giou * giou + cost.cls * (positive - negative)


def softmax_form(logits: Tensor) -> Tensor:
    """(..., classes) sigmoid logits -> (..., classes + 1) logits whose softmax gives the best class
    sigmoid(z_best), the other classes 0 and "no object" 1 - sigmoid(z_best)."""
    best, index = logits.float().max(-1, keepdim=True)
    form = torch.full((*logits.shape[:-1], logits.shape[-1] + 1), -1e4, device=logits.device)
    form.scatter_(-1, index, F.logsigmoid(best))
    form[..., -1:] = F.logsigmoid(-best)
    return form


class FocalSetCriterion(SetCriterion):
    """DETR's set criterion with the focal classification loss and matching cost (reads `class_logits`).

    The classification weights are COST.cls and WEIGHTS.ce (Deformable DETR: 2 each); WEIGHTS.no_object is
    unused (no class stands for "no object")."""

    def __init__(self, num_classes: int, cost: MatchCost, weights: LossWeights, alpha: float = ALPHA,
                 gamma: float = GAMMA) -> None:
        super().__init__(num_classes, cost, weights)
        self.alpha, self.gamma = alpha, gamma

    def class_scores(self, prediction: SetPrediction) -> Tensor:
        if prediction.class_logits is None:
            raise ValueError("the focal loss reads sigmoid class_logits, which these predictions lack")
        return prediction.class_logits  # (batch, queries, classes)

    def match(self, scores: Tensor, boxes: Tensor, targets: Sequence[dict[str, Tensor]]) -> list[Match]:
        return hungarian_match(scores, boxes, targets, self.cost,
                               partial(focal_cost_matrix, alpha=self.alpha, gamma=self.gamma))

    def classification_terms(self, logits: Tensor, boxes: Tensor, targets: Sequence[dict[str, Tensor]],
                             matches: Sequence[Match], index: MatchIndex, num_boxes: float) -> dict[str, Tensor]:
        """Per set: FL summed over every (query, class) pair, divided by the batch's number of target boxes."""
        logits = logits.float()  # (sets * batch, queries, classes)
        matched_labels = matched_targets(targets, matches, "labels").to(logits.device)
        onehot = torch.zeros_like(logits)
        onehot[index.batch, index.query, matched_labels] = 1.0
        loss = self.pair_loss(logits, onehot, boxes, targets, matches, index).view(index.sets, -1).sum(1) / num_boxes
        return {"loss_ce": loss, "class_error": class_error(logits[index.batch, index.query], matched_labels, index)}

    def pair_loss(self, logits: Tensor, onehot: Tensor, boxes: Tensor, targets: Sequence[dict[str, Tensor]],
                  matches: Sequence[Match], index: MatchIndex) -> Tensor:
        """The loss of every (query, class) pair of LOGITS, ONEHOT (1 at each matched query's class), same shape."""
        return sigmoid_focal_loss(logits, onehot, self.alpha, self.gamma)


def build_focal_criterion(config: DetrConfig, train: DetectionTrainConfig) -> FocalSetCriterion:
    """The focal set criterion with the training config's weights: `focal_*` for the classification, DETR's
    for the boxes."""
    cost, weights = criterion_weights(train)
    return FocalSetCriterion(config.num_classes, replace(cost, cls=train.focal_cost_class),
                             replace(weights, ce=train.focal_loss_coef), train.focal_alpha, train.focal_gamma)
