"""Two-stage query selection (Zhu et al. 2021, Deformable DETR, section 4.2; Zhang et al. 2023, DINO, section 3.4).

Learned anchors start every image from the same boxes. Here every encoder token proposes an
object first: a box around its own position, an anchor of side 0.05 * 2^level (Deformable DETR's
proposals), corrected by a small head in inverse-sigmoid space, and class scores:

    proposal_k = sigmoid(MLP(z_k) + sigmoid^-1(anchor_k)),   z_k = LayerNorm(Linear(memory_k))

The proposals are a set prediction of their own, trained with the same matching and losses as
the decoder's outputs (the "first stage"), so every pixel of the backbone gets a detection signal
from the first step (`proposal_losses`). The K highest-scoring proposals, detached, become the
decoder's initial reference boxes ("mixed" query selection, DINO: the content queries stay
learned). At inference the first stage only ranks boxes; the decoder's outputs are the detections,
one set, no NMS.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from attnkit.detection.detr import MLP
from attnkit.detection.output import SetPrediction
from attnkit.detection.set_criterion import SetCriterion
from attnkit.detection.variants.box_refinement import inverse_sigmoid
from attnkit.detection.variants.focal_loss import PRIOR_BIAS
from attnkit.detection.variants.multi_scale_features import FlatLevels

ANCHOR_SIDE = 0.05  # the finest level's anchor side, as a fraction of the image; doubled at each coarser level


def token_anchors(levels: FlatLevels) -> tuple[Tensor, Tensor]:
    """Each key's anchor box (batch, keys, 4) cx, cy, w, h in the unpadded image's [0, 1] coordinates, and
    (batch, keys) True where it is usable (not padding, centre inside the image)."""
    per_level = []
    for index, (height, width) in enumerate(levels.shapes):
        ys, xs = torch.meshgrid(torch.arange(height, device=levels.src.device) + 0.5,
                                torch.arange(width, device=levels.src.device) + 0.5, indexing="ij")
        centres = torch.stack([xs / width, ys / height], -1).flatten(0, 1)  # (h * w, 2) in the padded map
        centres = centres[None] / levels.valid_ratios[:, None, index]  # (batch, h * w, 2) in the unpadded image
        sides = torch.full_like(centres, ANCHOR_SIDE * 2 ** index)
        per_level.append(torch.cat([centres, sides], -1))
    anchors = torch.cat(per_level, 1)  # (batch, keys, 4)
    usable = ~levels.padding & (anchors[..., :2] < 0.99).all(-1)
    return anchors, usable


def proposal_anchors(levels: FlatLevels) -> tuple[Tensor, Tensor]:
    """`token_anchors` with the anchors in inverse-sigmoid space, where the proposal head corrects them."""
    anchors, usable = token_anchors(levels)
    return inverse_sigmoid(anchors), usable


class EncoderProposals(nn.Module):
    """The first stage: a box and class scores per encoder token, and the best K boxes."""

    def __init__(self, d_model: int, num_classes: int, focal: bool) -> None:
        super().__init__()
        self.output = nn.Sequential(nn.Linear(d_model, d_model), nn.LayerNorm(d_model))
        self.class_embed = nn.Linear(d_model, num_classes + (0 if focal else 1))
        self.bbox_embed = MLP(d_model, d_model, 4, 3)
        self.focal = focal
        if focal:
            nn.init.constant_(self.class_embed.bias, PRIOR_BIAS)
        last = self.bbox_embed.layers[-1]
        assert isinstance(last, nn.Linear)  # MLP's output layer
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)

    def forward(self, memory: Tensor, levels: FlatLevels,
                count: int) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
        """memory (batch, keys, d_model) -> class logits (batch, keys, classes [+ 1]); every key's box
        (batch, keys, 4) in training (the first stage's loss reads them), None at inference; the selection
        score (batch, keys), -1 where a key proposes nothing (padding, outside); and the COUNT best keys'
        boxes (batch, count, 4), detached: the decoder's first references. At inference only those COUNT
        boxes are computed, and the unusable keys are zeroed for them alone (their scores are -1 whatever their
        logits: zeroing all keys' memory was a copy of it)."""
        anchors, usable = levels.geometry.derive("token_anchors", lambda: proposal_anchors(levels))
        z = self.output(memory.masked_fill(~usable[..., None], 0) if self.training else memory)  # (batch, keys, d)
        logits = self.class_embed(z)
        # the sigmoid is increasing: the best class's probability is the sigmoid of its logit (one per key)
        score = logits.max(-1).values.sigmoid() if self.focal else logits.softmax(-1)[..., :-1].max(-1).values
        score = score.masked_fill(~usable, -1.0)  # (batch, keys)
        best = best_keys(score, count)  # (batch, count)
        if self.training:
            boxes = (self.bbox_embed(z) + anchors).sigmoid()
            return logits, boxes, score, take(boxes, best).detach()
        z = self.output(take(memory, best).masked_fill(~usable.gather(1, best)[..., None], 0))  # (batch, count, d)
        return logits, None, score, (self.bbox_embed(z) + take(anchors, best)).sigmoid().detach()


def best_keys(score: Tensor, count: int) -> Tensor:
    """The COUNT highest-scoring keys (batch, count); with fewer keys than COUNT (a tiny image) the best repeat."""
    index = score.topk(min(count, score.shape[1]), dim=1).indices
    if index.shape[1] < count:
        index = index.repeat(1, -(-count // index.shape[1]))[:, :count]
    return index


def take(values: Tensor, index: Tensor) -> Tensor:
    """values (batch, keys, dim) at index (batch, count) -> (batch, count, dim)."""
    return values.gather(1, index[..., None].expand(-1, -1, values.shape[-1]))


def proposal_losses(criterion: SetCriterion, proposals: SetPrediction, targets: Sequence[dict[str, Tensor]],
                    num_boxes: float) -> tuple[dict[str, Tensor], Tensor]:
    """The first stage's loss: CRITERION's terms of the PROPOSALS (every encoder token's, (batch, keys, ...)),
    matched to TARGETS as one more set prediction; returns them by name, suffixed `_enc`, and their weighted sum."""
    terms = criterion.set_terms([proposals], targets, num_boxes)  # each (1,)
    return {f"{k}_enc": v[0] for k, v in terms.items()}, criterion.weighted(terms)
