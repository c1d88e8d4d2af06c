"""DETR's set prediction loss (Carion et al. 2020, section 3.1, Eq. 2 and appendix A.2).

    L_Hungarian(y, y_hat) = sum_i [ -log p_hat_sigma(i)(c_i) + 1{c_i != no-object} L_box(b_i, b_hat_sigma(i)) ]

after the optimal matching sigma of Eq. 1. The "no object" class is down-weighted by 0.1 in the
cross-entropy; L_box = 5 * L1 + 2 * (1 - GIoU), both normalised by the number of target boxes in
the batch (the global batch, over all processes, when several train). The same loss is added for
every decoder layer's predictions (auxiliary losses, section 3.2). The cardinality error (how far
the number of predicted objects is from the number of targets) is logged, not optimised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.ops import box_convert, generalized_box_iou_loss

from attnkit.detection.config import DetectionTrainConfig, DetrConfig
from attnkit.detection.hungarian_matcher import Match, MatchCost, hungarian_match
from attnkit.detection.output import DetectionOutput, SetPrediction
from attnkit.errors import ConfigError


def global_box_count(count: float, device: torch.device) -> float:
    """DETR's box normaliser: the boxes of the global batch / the number of processes, at least 1.

    Each process divides its loss by it and DDP averages the gradients, so the loss is normalised by
    the number of boxes in the global batch, as the official DETR does (its `SetCriterion.forward`).
    """
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return max(float(count), 1.0)
    total = torch.tensor([float(count)], dtype=torch.float64,
                         device=device if dist.get_backend() == "nccl" else "cpu")
    dist.all_reduce(total)
    return max(total.item() / dist.get_world_size(), 1.0)


@dataclass(frozen=True)
class LossWeights:
    """Weights of the loss terms; the defaults are the paper's."""
    ce: float = 1.0
    l1: float = 5.0
    giou: float = 2.0
    no_object: float = 0.1  # relative weight of the "no object" class in the cross-entropy

    def __post_init__(self) -> None:
        if min(self.ce, self.l1, self.giou, self.no_object) < 0:
            raise ConfigError(f"loss weights must be non-negative, got {self}")


@dataclass(frozen=True)
class MatchIndex:
    """Where the matched queries are in a stack of SETS sets of predictions: each match's (set, image) pair
    `batch`, its query, and its set."""
    batch: Tensor  # (matches,) int64
    query: Tensor  # (matches,) int64
    set: Tensor  # (matches,) int64
    sets: int


class SetTerm(Protocol):
    """A further loss term of sets of predictions under their matching, weighted into the total
    (variants.distribution_refinement's localization loss, variants.localization_distillation's)."""
    name: str
    weight: float

    def __call__(self, sets: Sequence[SetPrediction], targets: Sequence[dict[str, Tensor]], matches: Sequence[Match],
                 num_boxes: float) -> Tensor:
        """(sets,): the term of each of SETS, MATCHES one per (set, image), set after set."""
        ...


class SetCriterion(nn.Module):
    """Hungarian matching, then the set loss on the final and every auxiliary decoder output.

    The layers' predictions are predictions of the same targets: they are matched and scored as one
    batch of (layer, image) pairs (`set_terms`), which gives each layer's terms as if it were scored
    alone, with one matching and one pass of each loss for all of them.
    """

    class_weight: Tensor  # a buffer: (classes + 1,), the no-object weight last

    def __init__(self, num_classes: int, cost: MatchCost = MatchCost(), weights: LossWeights = LossWeights()) -> None:
        super().__init__()
        self.num_classes, self.cost, self.weights = num_classes, cost, weights
        self.extra_terms: tuple[SetTerm, ...] = ()  # scored by `set_terms` (not under a fixed assignment)
        class_weight = torch.ones(num_classes + 1)
        class_weight[-1] = weights.no_object
        self.register_buffer("class_weight", class_weight, persistent=False)

    def forward(self, output: DetectionOutput, targets: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
        """Returns the weighted total "loss" over the layers (Eq. 2 each) and each term (final layer unsuffixed,
        auxiliary layer i suffixed `_i`), with the logged class and cardinality errors."""
        num_boxes = global_box_count(sum(len(t["labels"]) for t in targets), output.boxes.device)
        terms = self.set_terms([output, *output.aux], targets, num_boxes)  # each (layers,)
        return {**self.named(terms, output, targets), "loss": self.weighted(terms)}

    def named(self, terms: dict[str, Tensor], output: DetectionOutput,
              targets: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
        """OUTPUT's terms by name, from TERMS (each (sets,), OUTPUT's final layer first, then its `aux`): the final
        layer's unsuffixed, auxiliary layer i's suffixed `_i`, and the final layer's cardinality error."""
        losses = {k: v[0] for k, v in terms.items()}
        losses["cardinality_error"] = cardinality_error(output.logits, targets)
        for i in range(len(output.aux)):
            losses.update({f"{k}_{i}": v[i + 1] for k, v in terms.items()})
        return losses

    def weighted(self, terms: dict[str, Tensor]) -> Tensor:
        """The sum over the sets of TERMS (each (sets,)) of lambda_cls L_cls + lambda_L1 L1 + lambda_iou L_GIoU."""
        w = self.weights
        total = w.ce * terms["loss_ce"].sum() + w.l1 * terms["loss_bbox"].sum() + w.giou * terms["loss_giou"].sum()
        for term in self.extra_terms:
            if term.name in terms:  # not under a fixed assignment (`terms`)
                total = total + term.weight * terms[term.name].sum()
        return total

    def set_terms(self, sets: Sequence[SetPrediction], targets: Sequence[dict[str, Tensor]],
                  num_boxes: float) -> dict[str, Tensor]:
        """Each term of each of SETS (predictions of TARGETS, of one shape), as (sets,) tensors, after the optimal
        matching of Eq. 1: the sets are stacked as one batch of (set, image) pairs and matched together."""
        scores, boxes = self.stacked(sets)
        matches = self.match(scores, boxes, targets)
        return {**self.terms(scores, boxes, targets, matches, num_boxes),
                **{t.name: t(sets, targets, matches, num_boxes) for t in self.extra_terms}}

    def stacked(self, sets: Sequence[SetPrediction]) -> tuple[Tensor, Tensor]:
        """SETS as one batch, set after set: their class scores (sets * batch, queries, ...) and boxes
        (sets * batch, queries, 4)."""
        return _stack([self.class_scores(s) for s in sets]), _stack([s.boxes for s in sets])

    def class_scores(self, prediction: SetPrediction) -> Tensor:
        """What the classification term and the matching cost read: the softmax logits (batch, queries, classes + 1)."""
        return prediction.logits

    def match(self, scores: Tensor, boxes: Tensor, targets: Sequence[dict[str, Tensor]]) -> list[Match]:
        """The optimal assignment sigma of Eq. 1 of each (set, image) of the stacked (sets * batch) predictions."""
        return hungarian_match(scores, boxes, targets, self.cost)

    def terms(self, scores: Tensor, boxes: Tensor, targets: Sequence[dict[str, Tensor]], matches: Sequence[Match],
              num_boxes: float) -> dict[str, Tensor]:
        """Per set (sets,): the classification and box terms of the stacked predictions SCORES (sets * batch,
        queries, ...) and BOXES (sets * batch, queries, 4) under MATCHES, one per (set, image)."""
        sets = len(matches) // len(targets)
        every = list(targets) * sets  # the targets of each (set, image) pair
        batch_index, query_index = flat_indices(matches)
        index = MatchIndex(batch_index, query_index, batch_index // len(targets), sets)
        return {**self.classification_terms(scores, boxes, every, matches, index, num_boxes),
                **box_terms(boxes, every, matches, index, num_boxes)}

    def classification_terms(self, logits: Tensor, boxes: Tensor, targets: Sequence[dict[str, Tensor]],
                             matches: Sequence[Match], index: MatchIndex, num_boxes: float) -> dict[str, Tensor]:
        """Per set: the weighted cross-entropy ("no object" for unmatched queries; the weighted mean over the
        set's queries) and the matched queries' class error. logits: (sets * batch, queries, classes + 1); the
        BOXES (sets * batch, queries, 4) are for IoU-aware classifications (variants.varifocal_loss)."""
        batch_index, query_index = index.batch, index.query
        target_classes = torch.full(logits.shape[:2], self.num_classes, dtype=torch.int64, device=logits.device)
        matched_labels = matched_targets(targets, matches, "labels").to(logits.device)
        target_classes[batch_index, query_index] = matched_labels  # (sets * batch, queries), no-object elsewhere
        weight = self.class_weight.to(logits.device)
        ce = F.cross_entropy(logits.float().transpose(1, 2), target_classes, weight, reduction="none")
        loss_ce = ce.view(index.sets, -1).sum(1) / weight[target_classes].view(index.sets, -1).sum(1)
        return {"loss_ce": loss_ce, "class_error": class_error(logits[batch_index, query_index], matched_labels, index)}


def build_set_criterion(config: DetrConfig, train: DetectionTrainConfig) -> SetCriterion:
    """DETR's loss with the training config's matching costs and loss weights."""
    return SetCriterion(config.num_classes, *criterion_weights(train))


def criterion_weights(train: DetectionTrainConfig) -> tuple[MatchCost, LossWeights]:
    """The matching costs and loss weights of TRAIN (the paper's by default)."""
    return (MatchCost(train.cost_class, train.cost_bbox, train.cost_giou),
            LossWeights(train.ce_loss_coef, train.bbox_loss_coef, train.giou_loss_coef, train.eos_coef))


def box_terms(boxes: Tensor, targets: Sequence[dict[str, Tensor]], matches: Sequence[Match], index: MatchIndex,
              num_boxes: float) -> dict[str, Tensor]:
    """Per set: L1 and 1 - GIoU of the matched boxes, each summed and divided by the batch's number of target
    boxes.

    boxes: (sets * batch, queries, 4) normalised cx, cy, w, h; TARGETS and MATCHES: one per (set, image).
    """
    matched = boxes[index.batch, index.query].float()  # (matches, 4)
    target_boxes = matched_targets(targets, matches, "boxes").to(matched)
    l1 = (matched - target_boxes).abs().sum(-1)  # (matches,)
    giou = generalized_box_iou_loss(box_convert(matched, "cxcywh", "xyxy"), box_convert(target_boxes, "cxcywh", "xyxy"))
    sums = matched.new_zeros(index.sets, 2).index_add_(0, index.set, torch.stack([l1, giou], -1)) / num_boxes
    return {"loss_bbox": sums[:, 0], "loss_giou": sums[:, 1]}


@torch.no_grad()
def class_error(matched_logits: Tensor, matched_labels: Tensor, index: MatchIndex) -> Tensor:
    """Per set (sets,): 100 - accuracy (%) of the matched queries' most likely class; 0 without matches."""
    correct = (matched_logits.argmax(-1) == matched_labels).float()  # (matches,)
    right = correct.new_zeros(index.sets).index_add_(0, index.set, correct)
    count = correct.new_zeros(index.sets).index_add_(0, index.set, torch.ones_like(correct))
    return torch.where(count > 0, 100 - 100 * right / count.clamp(min=1), 0.0)


@torch.no_grad()
def cardinality_error(logits: Tensor, targets: Sequence[dict[str, Tensor]]) -> Tensor:
    """Mean over images of |number of queries not predicting "no object" - number of objects|."""
    predicted = (logits.argmax(-1) != logits.shape[-1] - 1).sum(1).float()  # (batch,)
    expected = torch.tensor([float(len(t["labels"])) for t in targets], device=logits.device)
    return F.l1_loss(predicted, expected)


def _stack(tensors: Sequence[Tensor]) -> Tensor:
    """Sets of predictions (batch, queries, ...) as one batch (sets * batch, queries, ...), set after set."""
    return torch.cat(list(tensors)) if len(tensors) > 1 else tensors[0]


def flat_indices(matches: Sequence[Match]) -> tuple[Tensor, Tensor]:
    """(batch index, query index) of every match, image after image."""
    batch = torch.cat([torch.full_like(m.queries, i) for i, m in enumerate(matches)])
    return batch, torch.cat([m.queries for m in matches])


def matched_targets(targets: Sequence[dict[str, Tensor]], matches: Sequence[Match], key: str) -> Tensor:
    """TARGETS' KEY ("labels" or "boxes") of every match, in `flat_indices`' order."""
    return torch.cat([t[key][m.objects] for t, m in zip(targets, matches)])
