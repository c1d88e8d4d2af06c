"""Sigmoid focal classification (Lin et al. 2017, Eq. 5), as Deformable DETR trains it (Zhu et al. 2021).

DETR's softmax over K classes + "no object" makes the many unmatched queries dominate the
cross-entropy (hence its 0.1 weight on "no object"). Here every class is a separate sigmoid, and
the focal loss

    FL(p_t) = -alpha_t (1 - p_t)^gamma log(p_t)          alpha = 0.25, gamma = 2

lets the easy negatives fade. Matching uses the same form as its classification cost. The
classifier's bias starts at the prior -log((1 - 0.01) / 0.01), so training begins near "nothing".

For the shared post-processing, evaluation and drawing, the model also returns `pred_logits` in
DETR's (classes + 1) form: the best class keeps probability sigmoid(z_best), the rest is "no
object" (`softmax_form`), so DETR's post-processing reads score sigmoid(z_best) and that class.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from torchvision.ops import box_convert, generalized_box_iou, sigmoid_focal_loss as torchvision_focal_loss

from attnkit.detection.hungarian_matcher import Match, MatchCost, hungarian_match
from attnkit.detection.set_criterion import MatchIndex, SetCriterion, class_error, matched_targets

ALPHA, GAMMA = 0.25, 2.0
PRIOR_BIAS = -math.log((1 - 0.01) / 0.01)
FOCAL_WEIGHT = 2.0  # Deformable DETR's classification weight (cost and loss) relative to DETR's 1


def sigmoid_focal_loss(logits: Tensor, targets: Tensor, alpha: float = ALPHA, gamma: float = GAMMA) -> Tensor:
    """Elementwise FL of logits and {0, 1} targets of the same shape (torchvision's, with these defaults)."""
    return torchvision_focal_loss(logits, targets, alpha, gamma, reduction="none")


def focal_cost_matrix(logits: Tensor, boxes: Tensor, labels: Tensor, target_boxes: Tensor,
                      cost: MatchCost) -> Tensor:
    """L_match with the focal classification cost FL(positive) - FL(negative) of each object's class.

    logits: (queries, classes) sigmoid logits. Returns (queries, objects).
    """
    prob = logits.sigmoid()[:, labels]  # (queries, objects)
    positive = ALPHA * (1 - prob) ** GAMMA * -(prob + 1e-8).log()
    negative = (1 - ALPHA) * prob ** GAMMA * -(1 - prob + 1e-8).log()
    l1 = torch.cdist(boxes, target_boxes, p=1)  # (queries, objects)
    giou = generalized_box_iou(box_convert(boxes, "cxcywh", "xyxy"), box_convert(target_boxes, "cxcywh", "xyxy"))
    return cost.l1 * l1 - cost.giou * giou + FOCAL_WEIGHT * cost.cls * (positive - negative)


def softmax_form(logits: Tensor) -> Tensor:
    """(..., classes) sigmoid logits -> (..., classes + 1) logits whose softmax gives the best class
    sigmoid(z_best), the other classes 0 and "no object" 1 - sigmoid(z_best)."""
    best, index = logits.float().max(-1, keepdim=True)
    form = torch.full((*logits.shape[:-1], logits.shape[-1] + 1), -1e4, device=logits.device)
    form.scatter_(-1, index, F.logsigmoid(best))
    form[..., -1:] = F.logsigmoid(-best)
    return form


class FocalSetCriterion(SetCriterion):
    """DETR's set criterion with the focal classification loss and matching cost (reads `class_logits`)."""

    predictions = ("class_logits", "pred_boxes")

    def match(self, outputs: dict, targets: Sequence[dict[str, Tensor]]) -> list[Match]:
        return hungarian_match(outputs["class_logits"], outputs["pred_boxes"], targets, self.cost, focal_cost_matrix)

    def classification_terms(self, outputs: dict, targets: Sequence[dict[str, Tensor]], matches: Sequence[Match],
                             index: MatchIndex, num_boxes: float) -> dict[str, Tensor]:
        logits = outputs["class_logits"].float()  # (sets * batch, queries, classes)
        matched_labels = matched_targets(targets, matches, "labels").to(logits.device)
        onehot = torch.zeros_like(logits)
        onehot[index.batch, index.query, matched_labels] = 1.0
        loss = sigmoid_focal_loss(logits, onehot).view(index.sets, -1).sum(1) / num_boxes * FOCAL_WEIGHT
        return {"loss_ce": loss, "class_error": class_error(logits[index.batch, index.query], matched_labels, index)}
