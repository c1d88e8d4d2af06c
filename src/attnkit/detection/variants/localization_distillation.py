"""Localization self-distillation, GO-LSD (Peng et al. 2024, D-FINE, section 3.2, Eq. 5).

With distribution refinement (`distribution_refinement`) every decoder layer predicts its edges
as distributions that move towards the same targets, and the last layer's are the best. GO-LSD
distils them into the earlier layers: each earlier layer's edge distributions are trained towards
the last layer's (detached), with the decoupled distillation focal loss

    L_DDF = T^2 ( sqrt(K_m) mean_m[w KL(Pr_last || Pr_l)] + sqrt(K_u) mean_u[w KL(...)] ) / (sqrt(K_m) + sqrt(K_u))

over the queries' edges, K_m of them matched (w: the layer's box's IoU with its target) and K_u not
(w: the last layer's highest class confidence), each count per image, so that neither the few
matched queries nor the many others dominate; temperature T = 5, weight 1.5 (D-FINE's).
The last layer itself is not distilled (its term is 0).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.detection.hungarian_matcher import Match
from attnkit.detection.output import SetPrediction
from attnkit.detection.set_criterion import flat_indices, matched_targets
from attnkit.detection.variants.varifocal_loss import paired_iou

TEMPERATURE, WEIGHT = 5.0, 1.5  # D-FINE's (loss_local's T, weight_loss_ddf)


def confidence(prediction: SetPrediction) -> Tensor:
    """(batch, queries) each query's highest class probability: sigmoid (the focal loss) or softmax."""
    if prediction.class_logits is not None:
        return prediction.class_logits.float().sigmoid().amax(-1)
    return prediction.logits.float().softmax(-1)[..., :-1].amax(-1)


def decoupled_distillation(student: Tensor, teacher: Tensor, weight: Tensor, matched: Tensor, images: int,
                           temperature: float = TEMPERATURE) -> Tensor:
    """L_DDF of STUDENT and TEACHER edge logits (edges, bins + 1), WEIGHT (edges,) and MATCHED (edges,) bool, over
    IMAGES images (the counts K_m and K_u are per image)."""
    kl = F.kl_div(F.log_softmax(student.float() / temperature, -1), F.softmax(teacher.float() / temperature, -1),
                  reduction="none").sum(-1)  # (edges,)
    loss = weight * temperature ** 2 * kl
    total, norm = loss.new_zeros(()), loss.new_zeros(())
    for part in (matched, ~matched):
        if part.any():
            share = (part.sum() / images).sqrt()
            total, norm = total + share * loss[part].mean(), norm + share
    return total / norm.clamp(min=1e-12)


def localization_distillation(sets: Sequence[SetPrediction], targets: Sequence[dict[str, Tensor]],
                              matches: Sequence[Match]) -> Tensor:
    """L_DDF (sets,) of each of SETS towards its `teacher` (its query group's last layer): 0 for a set without edge
    distributions or teacher. MATCHES: one per (set, image), set after set."""
    losses = []
    for number, prediction in enumerate(sets):
        teacher = prediction.teacher
        if prediction.corners is None or teacher is None or teacher.corners is None:
            losses.append(prediction.boxes.new_zeros((), dtype=torch.float32))
            continue
        own = matches[number * len(targets):(number + 1) * len(targets)]
        batch, query = flat_indices(own)
        weight = confidence(teacher)  # (batch, queries): the unmatched queries'
        weight[batch, query] = paired_iou(prediction.boxes[batch, query], matched_targets(targets, own, "boxes"))
        matched = torch.zeros_like(weight, dtype=torch.bool)
        matched[batch, query] = True
        edges = prediction.corners.shape[-2]  # each query's 4 edges share its weight
        losses.append(decoupled_distillation(prediction.corners.flatten(0, 2), teacher.corners.flatten(0, 2),
                                             weight.detach().repeat_interleave(edges),
                                             matched.repeat_interleave(edges), len(targets)))
    return torch.stack(losses)


class LocalizationDistillation:
    """L_DDF as a further term of the set criterion (`SetCriterion.extra_terms`), weight 1.5 (D-FINE's)."""

    name, weight = "loss_ddf", WEIGHT

    def __call__(self, sets: Sequence[SetPrediction], targets: Sequence[dict[str, Tensor]], matches: Sequence[Match],
                 num_boxes: float) -> Tensor:
        return localization_distillation(sets, targets, matches)
