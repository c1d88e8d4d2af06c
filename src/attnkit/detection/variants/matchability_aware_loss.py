"""The matchability-aware loss (Huang et al. 2025, DEIM, section 3.3, Eq. 5): IoU-aware classification that
keeps learning from poor matches.

The varifocal loss (`variants.varifocal_loss`) weighs a matched query's class term by q, its box's IoU with
the target: a match whose box barely overlaps (q near 0) is hardly trained at all, so the queries that most
need a better score learn least, and such matches are many early in training. MAL trains every match at full
weight towards q^gamma, and weighs the negatives by p^gamma without VFL's alpha:

    MAL(p, q) = -(q^gamma log p + (1 - q^gamma) log(1 - p))     for a matched query's target class
              = -p^gamma log(1 - p)                               for every other (query, class)   gamma = 1.5

summed over every (query, class) pair and divided by the batch's number of target boxes, weight 1 (DEIM's
`loss_mal`, gamma 1.5). The matching, the box terms and the matched IoUs are the varifocal criterion's.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from attnkit.detection.config import DetectionTrainConfig, DetrConfig
from attnkit.detection.variants.varifocal_loss import VarifocalSetCriterion, build_varifocal_criterion

GAMMA = 1.5  # DEIM's (deim_*.yml: DEIMCriterion gamma 1.5, loss_mal 1)


def matchability_aware_loss(logits: Tensor, positive: Tensor, scores: Tensor, gamma: float = GAMMA) -> Tensor:
    """Elementwise MAL of LOGITS, the {0, 1} POSITIVE pairs (each matched query's class) and their target
    SCORES q (IoUs; 0 elsewhere), all of one shape. Unlike VFL, a positive whose box misses (q = 0) is trained
    towards 0 at full weight."""
    weight = logits.detach().sigmoid().pow(gamma) * (1 - positive) + positive
    return F.binary_cross_entropy_with_logits(logits, scores.pow(gamma), weight=weight, reduction="none")


class MatchabilityAwareSetCriterion(VarifocalSetCriterion):
    """The varifocal set criterion whose classification term is MAL."""

    def iou_aware_loss(self, logits: Tensor, positive: Tensor, scores: Tensor) -> Tensor:
        return matchability_aware_loss(logits, positive, scores)


def build_matchability_aware_criterion(config: DetrConfig, train: DetectionTrainConfig) -> VarifocalSetCriterion:
    """The varifocal criterion's matching and weights, with MAL as its classification term."""
    varifocal = build_varifocal_criterion(config, train)
    return MatchabilityAwareSetCriterion(varifocal.num_classes, varifocal.cost, varifocal.weights,
                                         varifocal.alpha, varifocal.gamma)
