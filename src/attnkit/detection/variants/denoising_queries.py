"""Denoising queries (Li et al. 2022, DN-DETR, section 3; Zhang et al. 2023, DINO, section 3.3).

Hungarian matching is unstable early in training: a query matched to one object at one step may
be matched to another at the next, so its target keeps moving. Denoising adds, in training only,
queries whose answer is known without matching: noised copies of the ground truth. Each copy's
content is the embedding of its label (flipped to a random class with probability `label_noise`),
its reference box is the true box with every corner moved by up to

    |delta| < lambda * (w / 2, h / 2)                     positive: reconstruct the object
    lambda * (w / 2, h / 2) <= |delta| < 2 lambda (...)   negative: predict "no object" (DINO's contrastive DN)

and the decoder must return the true class and box (positives) or nothing (negatives), with the
same losses as the matched queries and a fixed assignment. `groups` groups of copies are made per
batch, each of 2 * (most objects in an image) queries; an image with fewer objects repeats them
(fresh noise each time), an image without objects gets random boxes, all negatives. An attention
mask keeps each group to itself and hides them from the matching queries, so at inference (no
targets, no denoising queries) the model is the same set predictor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torchvision.ops import box_convert

from attnkit.detection.hungarian_matcher import Match
from attnkit.detection.output import SetPrediction
from attnkit.detection.set_criterion import SetCriterion, global_box_count


@dataclass(frozen=True)
class DenoisingQueries:
    """One batch's denoising queries, placed before the matching queries."""
    content: Tensor  # (batch, count, d_model) embeddings of the noised labels
    boxes: Tensor  # (batch, count, 4) noised reference boxes cx, cy, w, h
    matches: list[Match]  # per image: which query reconstructs which object (the positives)
    groups: int
    group_size: int

    @property
    def count(self) -> int:
        return self.groups * self.group_size


def noised_boxes(boxes: Tensor, scale: float, low: float, high: float) -> Tensor:
    """boxes (n, 4) cx, cy, w, h in [0, 1] -> each corner moved by a random sign times
    uniform(LOW, HIGH) * SCALE * half the box's size, clipped to the image; (n, 4)."""
    corners = box_convert(boxes, "cxcywh", "xyxy")
    half = boxes[:, 2:].repeat(1, 2) / 2  # (n, 4) w/2, h/2, w/2, h/2
    sign = torch.randint(0, 2, corners.shape, device=boxes.device) * 2 - 1
    size = low + (high - low) * torch.rand(corners.shape, device=boxes.device)
    corners = (corners + sign * size * scale * half).clamp(0, 1)
    low_corner, high_corner = corners[:, :2], torch.maximum(corners[:, 2:], corners[:, :2] + 1e-3)
    return box_convert(torch.cat([low_corner, high_corner], -1), "xyxy", "cxcywh")


class DenoisingGenerator(nn.Module):
    """Makes the denoising queries of a batch from its targets: a label embedding and the noise settings."""

    def __init__(self, num_classes: int, d_model: int, groups: int, label_noise: float = 0.25,
                 box_noise: float = 1.0) -> None:
        super().__init__()
        self.label_embed = nn.Embedding(num_classes, d_model)
        self.num_classes, self.groups = num_classes, groups
        self.label_noise, self.box_noise = label_noise, box_noise

    def forward(self, targets: Sequence[dict[str, Tensor]]) -> DenoisingQueries:
        """targets: per image {"labels": (objects,), "boxes": (objects, 4)}. A batch without objects still
        gets groups of negatives, so the label embedding takes part in every step (as DDP requires)."""
        most = max(1, *(len(t["labels"]) for t in targets))
        device = self.label_embed.weight.device
        size = 2 * most  # positives, then negatives
        labels, boxes, matches = [], [], []
        for target in targets:
            count = len(target["labels"])
            objects = torch.arange(self.groups * most, device=device) % max(count, 1)  # repeat to fill
            if count:
                true_labels, true_boxes = target["labels"].to(device)[objects], target["boxes"].to(device)[objects]
                positive = noised_boxes(true_boxes, self.box_noise, 0.0, 1.0)
                negative = noised_boxes(true_boxes, self.box_noise, 1.0, 2.0)
            else:  # nothing to reconstruct: random boxes, all negatives
                true_labels = torch.randint(0, self.num_classes, objects.shape, device=device)
                positive = negative = torch.cat([torch.rand(len(objects), 2, device=device),
                                                 0.05 + 0.45 * torch.rand(len(objects), 2, device=device)], -1)
            flip = torch.rand(objects.shape, device=device) < self.label_noise
            noisy = torch.where(flip, torch.randint_like(true_labels, self.num_classes), true_labels)
            # per group: most positives, then most negatives (batch-major view below)
            labels.append(noisy.view(self.groups, most).repeat(1, 2).flatten())
            boxes.append(torch.stack([positive.view(self.groups, most, 4), negative.view(self.groups, most, 4)],
                                     1).flatten(0, 2))
            slots = (torch.arange(self.groups, device=device)[:, None] * size
                     + torch.arange(most, device=device)[None]).flatten()  # the positives' places
            matches.append(Match(slots.cpu(), objects.cpu()) if count else
                           Match(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)))
        return DenoisingQueries(self.label_embed(torch.stack(labels)), torch.stack(boxes), matches,
                                self.groups, size)


def denoising_attention_mask(denoising: DenoisingQueries, matching_mask: Tensor | None, matching: int,
                             device: torch.device) -> Tensor:
    """(count + matching, count + matching) bool, True where a query may NOT attend: each denoising
    group sees only itself, the matching queries see none of them (and MATCHING_MASK among themselves)."""
    total = denoising.count + matching
    mask = torch.ones(total, total, dtype=torch.bool, device=device)
    group = torch.arange(denoising.count, device=device) // denoising.group_size
    mask[:denoising.count, :denoising.count] = group[:, None] != group[None, :]
    mask[denoising.count:, denoising.count:] = False if matching_mask is None else matching_mask
    return mask


@dataclass(frozen=True)
class DenoisingOutput:
    """The denoising queries' predictions in training: every decoder layer's, and the fixed assignment."""
    layers: list[SetPrediction]  # decoder layers 1 .. L in order, each (batch, count, ...)
    matches: list[Match]  # per image: which query reconstructs which object (the positives)


def denoising_losses(criterion: SetCriterion, denoising: DenoisingOutput,
                     targets: Sequence[dict[str, Tensor]]) -> tuple[dict[str, Tensor], Tensor]:
    """CRITERION's terms of every layer of DENOISING under its fixed assignment, averaged over the positive
    queries (as the set loss over the objects). Returns the last layer's terms, suffixed `_dn` (detached: logged),
    and the weighted sum over the layers."""
    device = denoising.layers[-1].boxes.device
    num_boxes = global_box_count(sum(len(m.queries) for m in denoising.matches), device)
    scores, boxes = criterion.stacked(denoising.layers)  # no matching: every layer under the fixed assignment
    terms = criterion.terms(scores, boxes, targets, denoising.matches * len(denoising.layers), num_boxes)  # (layers,)
    return {f"{k}_dn": v[-1].detach() for k, v in terms.items()}, criterion.weighted(terms)
