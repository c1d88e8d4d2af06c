"""DETR's set prediction loss (Carion et al. 2020, section 3.1, Eq. 2 and appendix A.2).

    L_Hungarian(y, y_hat) = sum_i [ -log p_hat_sigma(i)(c_i) + 1{c_i != no-object} L_box(b_i, b_hat_sigma(i)) ]

after the optimal matching sigma of Eq. 1. The "no object" class is down-weighted by 0.1 in the
cross-entropy; L_box = 5 * L1 + 2 * (1 - GIoU), both normalised by the number of target boxes in
the batch (the global batch, over all processes, when several train). The same loss is added for every decoder layer's predictions (auxiliary losses,
section 3.2). The cardinality error (how far the number of predicted objects is from the number
of targets) is logged, not optimised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.ops import box_convert, generalized_box_iou

from attnkit.detection.hungarian_matcher import Match, MatchCost, hungarian_match
from attnkit.errors import ConfigError
from attnkit.training import distributed


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


class SetCriterion(nn.Module):
    """Hungarian matching, then the set loss on the final and every auxiliary decoder output."""

    def __init__(self, num_classes: int, cost: MatchCost = MatchCost(), weights: LossWeights = LossWeights()) -> None:
        super().__init__()
        self.num_classes, self.cost, self.weights = num_classes, cost, weights
        class_weight = torch.ones(num_classes + 1)
        class_weight[-1] = weights.no_object
        self.register_buffer("class_weight", class_weight, persistent=False)

    def forward(self, outputs: dict, targets: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
        """outputs: {"pred_logits": (batch, queries, classes + 1), "pred_boxes": (batch, queries, 4),
        "aux_outputs": [{...}, ...]}. Returns the weighted total "loss" and each term (final layer
        unsuffixed, auxiliary layer i suffixed `_i`)."""
        num_boxes = distributed.global_count(sum(len(t["labels"]) for t in targets), outputs["pred_boxes"].device)
        losses = self.layer_losses(outputs, targets, num_boxes)
        losses["cardinality_error"] = cardinality_error(outputs["pred_logits"], targets)
        for i, aux in enumerate(outputs.get("aux_outputs", [])):
            losses.update({f"{k}_{i}": v for k, v in self.layer_losses(aux, targets, num_boxes).items()})
        if "enc_outputs" in outputs:  # two-stage detectors' first-stage proposals (variants/query_selection)
            losses.update({f"{k}_enc": v for k, v in self.layer_losses(outputs["enc_outputs"], targets,
                                                                         num_boxes).items()})
        losses["loss"] = self.weighted(losses)
        return losses

    def weighted(self, losses: dict[str, Tensor]) -> Tensor:
        """The weighted sum of every `loss_ce*`, `loss_bbox*` and `loss_giou*` term in LOSSES."""
        w = self.weights
        return sum(w.ce * v for k, v in losses.items() if k.startswith("loss_ce")) \
            + sum(w.l1 * v for k, v in losses.items() if k.startswith("loss_bbox")) \
            + sum(w.giou * v for k, v in losses.items() if k.startswith("loss_giou"))

    def layer_losses(self, outputs: dict, targets: Sequence[dict[str, Tensor]], num_boxes: float,
                     matches: Sequence[Match] | None = None) -> dict[str, Tensor]:
        """One layer's classification and box terms, after the optimal matching (or the given MATCHES)."""
        matches = self.match(outputs, targets) if matches is None else matches
        return {**self.classification_losses(outputs, targets, matches, num_boxes),
                **box_losses(outputs["pred_boxes"], targets, matches, num_boxes)}

    def match(self, outputs: dict, targets: Sequence[dict[str, Tensor]]) -> list[Match]:
        """The optimal assignment sigma of Eq. 1 for one layer's predictions."""
        return hungarian_match(outputs["pred_logits"], outputs["pred_boxes"], targets, self.cost)

    def classification_losses(self, outputs: dict, targets: Sequence[dict[str, Tensor]], matches: Sequence[Match],
                              num_boxes: int) -> dict[str, Tensor]:
        """The weighted cross-entropy ("no object" for unmatched queries) and the matched queries' class error."""
        logits = outputs["pred_logits"]  # (batch, queries, classes + 1)
        batch_index, query_index = _flat_indices(matches)
        target_classes = torch.full(logits.shape[:2], self.num_classes, dtype=torch.int64, device=logits.device)
        matched_labels = torch.cat([t["labels"][m.objects] for t, m in zip(targets, matches)]).to(logits.device)
        target_classes[batch_index, query_index] = matched_labels  # (batch, queries), no-object elsewhere
        loss_ce = F.cross_entropy(logits.float().transpose(1, 2), target_classes, self.class_weight.to(logits.device))
        return {"loss_ce": loss_ce, "class_error": class_error(logits[batch_index, query_index], matched_labels)}


def box_losses(boxes: Tensor, targets: Sequence[dict[str, Tensor]], matches: Sequence[Match],
               num_boxes: int) -> dict[str, Tensor]:
    """L1 and 1 - GIoU of the matched boxes, each summed and divided by the batch's number of target boxes.

    boxes: (batch, queries, 4) normalised cx, cy, w, h.
    """
    batch_index, query_index = _flat_indices(matches)
    matched = boxes[batch_index, query_index].float()  # (matches, 4)
    target_boxes = torch.cat([t["boxes"][m.objects] for t, m in zip(targets, matches)]).to(matched)
    loss_bbox = F.l1_loss(matched, target_boxes, reduction="sum") / num_boxes
    giou = torch.diag(generalized_box_iou(box_convert(matched, "cxcywh", "xyxy"),
                                          box_convert(target_boxes, "cxcywh", "xyxy")))
    return {"loss_bbox": loss_bbox, "loss_giou": (1 - giou).sum() / num_boxes}


@torch.no_grad()
def class_error(matched_logits: Tensor, matched_labels: Tensor) -> Tensor:
    """100 - accuracy (%) of the matched queries' most likely class; 0 without matches."""
    if not len(matched_labels):
        return matched_logits.new_zeros(())
    return 100 - 100 * (matched_logits.argmax(-1) == matched_labels).float().mean()


@torch.no_grad()
def cardinality_error(logits: Tensor, targets: Sequence[dict[str, Tensor]]) -> Tensor:
    """Mean over images of |number of queries not predicting "no object" - number of objects|."""
    predicted = (logits.argmax(-1) != logits.shape[-1] - 1).sum(1).float()  # (batch,)
    expected = torch.tensor([float(len(t["labels"])) for t in targets], device=logits.device)
    return F.l1_loss(predicted, expected)


def _flat_indices(matches: Sequence[Match]) -> tuple[Tensor, Tensor]:
    batch = torch.cat([torch.full_like(m.queries, i) for i, m in enumerate(matches)])
    return batch, torch.cat([m.queries for m in matches])
