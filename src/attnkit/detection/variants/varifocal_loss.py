"""IoU-aware classification: the varifocal loss (Zhang et al. 2021, VarifocalNet, Eq. 2), as RT-DETR trains it
(Zhao et al. 2024, section 4.3).

The focal loss trains a matched query's class towards 1 whatever its box, so a query's score says
"an object is here" but not "my box fits it", and AP, which ranks detections by score, pays for the
loose boxes ranked first. The varifocal loss trains the matched query's class towards q, the IoU of
its predicted box with its target (detached), and down-weights the negatives as the focal loss does:

    VFL(p, q) = -q (q log p + (1 - q) log(1 - p))     for a matched query's target class
              = -alpha p^gamma log(1 - p)               for every other (query, class)  alpha = 0.75, gamma = 2

summed over every (query, class) pair and divided by the batch's number of target boxes, weight 1
against the boxes' 5 and 2 (RT-DETR's `loss_vfl`; it stands in for train.focal_loss_coef). Matching
keeps the focal cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.ops import box_area, box_convert

from attnkit.detection.config import DetectionTrainConfig, DetrConfig
from attnkit.detection.hungarian_matcher import Match
from attnkit.detection.set_criterion import MatchIndex, matched_targets
from attnkit.detection.variants.focal_loss import FocalSetCriterion, build_focal_criterion

ALPHA, GAMMA, WEIGHT = 0.75, 2.0, 1.0  # RT-DETR's (rtdetr_r18vd_6x_coco.yml: alpha, gamma, loss_vfl)


def varifocal_loss(logits: Tensor, positive: Tensor, scores: Tensor, alpha: float = ALPHA,
                   gamma: float = GAMMA) -> Tensor:
    """Elementwise VFL of LOGITS, the {0, 1} POSITIVE pairs (each matched query's class) and their target
    SCORES q (IoUs; 0 elsewhere), all of one shape. A positive whose box misses (q = 0) weighs nothing."""
    weight = alpha * logits.detach().sigmoid().pow(gamma) * (1 - positive) + scores
    return F.binary_cross_entropy_with_logits(logits, scores, weight=weight, reduction="none")


@torch.no_grad()
def paired_iou(boxes: Tensor, targets: Tensor) -> Tensor:
    """(pairs,) IoU of each of BOXES (pairs, 4) with its TARGETS' (pairs, 4) box, both normalised cx, cy, w, h."""
    first = box_convert(boxes.float(), "cxcywh", "xyxy")
    second = box_convert(targets.to(first), "cxcywh", "xyxy")
    corners = torch.min(first[:, 2:], second[:, 2:]) - torch.max(first[:, :2], second[:, :2])
    inter = corners.clamp(min=0).prod(-1)  # (pairs,)
    return inter / (box_area(first) + box_area(second) - inter)


def matched_iou(boxes: Tensor, targets: Sequence[dict[str, Tensor]], matches: Sequence[Match],
                index: MatchIndex) -> Tensor:
    """(matches,) IoU of each matched query's box with its target's. boxes: (sets * batch, queries, 4)."""
    return paired_iou(boxes[index.batch, index.query], matched_targets(targets, matches, "boxes"))


class VarifocalSetCriterion(FocalSetCriterion):
    """The focal set criterion whose classification term is the varifocal loss (its alpha and gamma are the
    focal matching cost's)."""

    def pair_loss(self, logits: Tensor, onehot: Tensor, boxes: Tensor, targets: Sequence[dict[str, Tensor]],
                  matches: Sequence[Match], index: MatchIndex) -> Tensor:
        """VFL of every (query, class) pair: each matched query's class towards its box's IoU, the rest towards 0."""
        scores = onehot.clone()  # (sets * batch, queries, classes)
        scores[index.batch, index.query] *= matched_iou(boxes, targets, matches, index)[:, None]
        return self.iou_aware_loss(logits, onehot, scores)

    def iou_aware_loss(self, logits: Tensor, positive: Tensor, scores: Tensor) -> Tensor:
        """The elementwise loss of LOGITS against the POSITIVE pairs' IoU SCORES (variants.matchability_aware_loss
        puts its own here)."""
        return varifocal_loss(logits, positive, scores)


def build_varifocal_criterion(config: DetrConfig, train: DetectionTrainConfig) -> VarifocalSetCriterion:
    """The focal set criterion's matching and box weights, with the varifocal classification term at RT-DETR's
    weight."""
    focal = build_focal_criterion(config, train)
    return VarifocalSetCriterion(focal.num_classes, focal.cost, replace(focal.weights, ce=WEIGHT),
                                 focal.alpha, focal.gamma)
