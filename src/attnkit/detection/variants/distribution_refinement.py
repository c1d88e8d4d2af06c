"""Fine-grained distribution refinement, FDR (Peng et al. 2024, D-FINE, section 3.1, Eqs. 1-4).

Box refinement (`box_refinement`) moves a box by one correction per layer. D-FINE instead has each
decoder layer l predict, for each of the box's four edges, a probability distribution Pr^l(n) over
N + 1 bins of offsets, residually in logit space (the layer adds its logits to the previous layer's),
and places the edge at the distribution's expectation under a non-uniform weighting function W(n):

    b^l = b^0 + {H, H, W, W} / c * sum_n W(n) Pr^l(n)       (Eq. 2; each edge from half of b^0's size)
    W(n) = sign(n - N/2) ((a c + 1)^(2 |n - N/2| / (N - 2)) - 1),  W(0) = -2ac,  W(N) = 2ac   (Eq. 3)

so the middle bins are finely spaced (small corrections of a good box) and the outer ones coarse.
b^0 is the first layer's box, predicted as in Eq. 5 of Deformable DETR (`box_refinement`) and
trained as one more auxiliary prediction; every layer's edges are measured from it (detached).

The fine-grained localization loss (Eq. 4) trains each edge's distribution towards the target
edge's position between its two nearest bins (a distribution focal loss), weighted by the IoU of
the layer's box with its target:

    L_FGL = sum_edges IoU * (omega_left CE(Pr, n_left) + omega_right CE(Pr, n_right)) / number of boxes

N = 32 bins, a = 0.5 (`up`), c = 4 (`reg_scale`) and the weight 0.15 are D-FINE's (transformers'
`DFineConfig` defaults). D-FINE's self-distillation between layers (GO-LSD) is `localization_distillation`.
Not taken from D-FINE: its edge heads also read the previous layer's (detached) hidden state, and its
localization quality estimate adds a term from the distributions' peaks to the class scores.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.ops import box_convert

from attnkit.detection.detr import MLP
from attnkit.detection.hungarian_matcher import Match
from attnkit.detection.output import SetPrediction
from attnkit.detection.set_criterion import flat_indices, matched_targets
from attnkit.detection.variants.box_refinement import AnchorBoxQueries, LayerBoxes
from attnkit.detection.variants.varifocal_loss import paired_iou

BINS, UP, REG_SCALE, WEIGHT = 32, 0.5, 4.0, 0.15  # D-FINE's (max_num_bins, up, reg_scale, weight_loss_fgl)


def weighting_function(bins: int = BINS, up: float = UP, reg_scale: float = REG_SCALE) -> Tensor:
    """W(n), n = 0 .. BINS (Eq. 3): (bins + 1,) increasing offsets, 0 in the middle, +-2 up reg_scale at the ends,
    the steps between them growing geometrically away from the middle."""
    bound = up * reg_scale
    step = (bound + 1) ** (2 / (bins - 2))
    inner = step ** torch.arange(1, bins // 2, dtype=torch.float64) - 1  # (bins / 2 - 1,) the right side's
    values = torch.cat([-2 * bound * torch.ones(1), -inner.flip(0), torch.zeros(1), inner, 2 * bound * torch.ones(1)])
    return values.float()


def edges_to_boxes(anchors: Tensor, offsets: Tensor, reg_scale: float = REG_SCALE) -> Tensor:
    """Eq. 2: ANCHORS (..., 4) cx, cy, w, h and edge OFFSETS (..., 4) left, top, right, bottom in units of the
    anchor's size / REG_SCALE, from half its size -> boxes (..., 4) cx, cy, w, h (0 offsets: the anchor)."""
    centre, size = anchors[..., :2], anchors[..., 2:] / reg_scale
    top_left = centre - (0.5 * reg_scale + offsets[..., :2]) * size
    bottom_right = centre + (0.5 * reg_scale + offsets[..., 2:]) * size
    return box_convert(torch.cat([top_left, bottom_right], -1), "xyxy", "cxcywh")


def boxes_to_edges(anchors: Tensor, boxes: Tensor, reg_scale: float = REG_SCALE) -> Tensor:
    """`edges_to_boxes` inverted: the offsets (..., 4) that place BOXES' (..., 4) cx, cy, w, h edges from ANCHORS."""
    corners = box_convert(boxes, "cxcywh", "xyxy")
    size = anchors[..., 2:] / reg_scale + 1e-16
    left_top = (anchors[..., :2] - corners[..., :2]) / size
    right_bottom = (corners[..., 2:] - anchors[..., :2]) / size
    return torch.cat([left_top, right_bottom], -1) - 0.5 * reg_scale


def bin_targets(offsets: Tensor, weights: Tensor) -> tuple[Tensor, Tensor]:
    """Each offset's left neighbour among the bins' WEIGHTS W(n) and its interpolation weight towards the right one:
    OFFSETS (...,) -> the left bins (...,) int64 in 0 .. N - 1 and the right bins' weights (...,) in [0, 1]
    (offsets past either end go wholly to the end bin)."""
    bins = len(weights) - 1
    left = (torch.bucketize(offsets, weights, right=True) - 1).clamp(0, bins - 1)
    right_weight = (offsets - weights[left]) / (weights[left + 1] - weights[left])
    return left, right_weight.clamp(0, 1)


def distribution_focal_loss(logits: Tensor, left: Tensor, right_weight: Tensor) -> Tensor:
    """(1 - omega) CE(logits, n_left) + omega CE(logits, n_left + 1): LOGITS (items, bins + 1), LEFT and
    RIGHT_WEIGHT (items,) -> (items,)."""
    log_prob = F.log_softmax(logits.float(), -1)
    at = log_prob.gather(-1, torch.stack([left, left + 1], -1))  # (items, 2)
    return -(at[:, 0] * (1 - right_weight) + at[:, 1] * right_weight)


class DistributionQueries(AnchorBoxQueries):
    """Anchor-box queries whose boxes are four edge distributions per layer, refined residually (Eq. 2);
    the first layer also predicts the box b^0 they are measured from (its own box head, Eq. 5)."""

    projection: Tensor  # a buffer: W(n), (bins + 1,)

    def __init__(self, num_queries: int, d_model: int, num_layers: int, learned_anchors: bool = True) -> None:
        super().__init__(num_queries, d_model, 1, learned_anchors)  # bbox_embed[0] predicts b^0
        head = MLP(d_model, d_model, 4 * (BINS + 1), 3)
        last = head.layers[-1]
        assert isinstance(last, nn.Linear)  # MLP's output layer
        nn.init.zeros_(last.weight)  # uniform distributions: each layer starts at b^0
        nn.init.zeros_(last.bias)
        self.corner_embed = nn.ModuleList(copy.deepcopy(head) for _ in range(num_layers))
        self.register_buffer("projection", weighting_function(), persistent=False)

    def boxes(self, layer: int, hidden: Tensor, reference: Tensor | None,
              previous: LayerBoxes | None = None) -> LayerBoxes:
        """This layer's edge logits (the previous layer's plus its own), and its boxes from b^0 and them."""
        corners = self.corner_embed[layer](hidden).unflatten(-1, (4, BINS + 1))  # (batch, queries, 4 edges, bins + 1)
        initial = None
        if previous is None:  # the first layer: b^0
            initial = super().boxes(0, hidden, reference).boxes  # (batch, queries, 4)
            anchors = initial.detach()
        else:
            assert previous.anchors is not None and previous.corners is not None  # set by the first layer
            anchors, corners = previous.anchors, corners + previous.corners
        # (batch, queries, 4) the expectation sum_n W(n) Pr(n), in float32 (autocast would round a matmul to bf16)
        offsets = (corners.float().softmax(-1) * self.projection).sum(-1)
        boxes = edges_to_boxes(anchors, offsets).clamp(0, 1)  # float32, as b^0 (bf16 would round edges to 1/256)
        return LayerBoxes(boxes, corners, anchors, initial)


def fine_grained_localization(sets: Sequence[SetPrediction], targets: Sequence[dict[str, Tensor]],
                              matches: Sequence[Match], num_boxes: float, weights: Tensor) -> Tensor:
    """L_FGL (Eq. 4) of each of SETS (sets,): 0 for a set without edge distributions (`corners`). MATCHES: one per
    (set, image), set after set; WEIGHTS: W(n)."""
    losses = []
    for number, prediction in enumerate(sets):
        if prediction.corners is None or prediction.anchors is None:
            losses.append(prediction.boxes.new_zeros((), dtype=torch.float32))
            continue
        own = matches[number * len(targets):(number + 1) * len(targets)]
        batch, query = flat_indices(own)
        target = matched_targets(targets, own, "boxes").to(prediction.anchors)  # (matches, 4)
        offsets = boxes_to_edges(prediction.anchors[batch, query].float(), target.float())  # (matches, 4)
        left, right_weight = bin_targets(offsets.flatten(), weights)
        iou = paired_iou(prediction.boxes[batch, query], target)  # (matches,)
        loss = distribution_focal_loss(prediction.corners[batch, query].flatten(0, 1), left, right_weight)
        losses.append((loss.view(-1, 4) * iou[:, None]).sum() / num_boxes)
    return torch.stack(losses)


class FineGrainedLocalization:
    """L_FGL as a further term of the set criterion (`SetCriterion.extra_terms`), weight 0.15 (D-FINE's)."""

    name, weight = "loss_fgl", WEIGHT

    def __init__(self) -> None:
        self.bin_weights = weighting_function()  # W(n), built once rather than at every training step

    def __call__(self, sets: Sequence[SetPrediction], targets: Sequence[dict[str, Tensor]], matches: Sequence[Match],
                 num_boxes: float) -> Tensor:
        self.bin_weights = self.bin_weights.to(sets[0].boxes.device)
        return fine_grained_localization(sets, targets, matches, num_boxes, self.bin_weights)
