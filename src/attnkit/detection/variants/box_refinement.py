"""Anchor-box queries refined layer by layer (Zhu et al. 2021, appendix A.4; Liu et al. 2022, DAB-DETR).

DETR's object queries are abstract vectors; here each query is a box (cx, cy, w, h) it starts
from. Its positional query is MLP(sine(box)) (DAB-DETR, Eq. 2), the deformable cross-attention
samples around the box, and every decoder layer d predicts a correction in inverse-sigmoid space:

    b_d = sigmoid(Delta_d(h_d) + sigmoid^-1(b_{d-1}))       (Deformable DETR, Eq. 5)

with b_{d-1} detached, as the paper does, so each layer learns its own correction.
`LearnedQueries` is DETR's form (learned query_pos, boxes from the hidden state alone), the
technique switched off.
"""

from __future__ import annotations

import copy
import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from attnkit.detection.detr import MLP


class LayerBoxes(NamedTuple):
    """A decoder layer's boxes, and what distribution refinement (variants.distribution_refinement) adds."""
    boxes: Tensor  # (batch, queries, 4) normalised cx, cy, w, h
    corners: Tensor | None = None  # (batch, queries, 4, bins + 1) logits of the edges' distributions
    anchors: Tensor | None = None  # (batch, queries, 4) the boxes the edges are measured from
    initial: Tensor | None = None  # (batch, queries, 4) the first layer's: those boxes, trained as a prediction


def inverse_sigmoid(x: Tensor, eps: float = 1e-5) -> Tensor:
    """sigmoid^-1(x) = log(x / (1 - x)), x clamped to [eps, 1 - eps] so that 0 and 1 stay finite."""
    return torch.logit(x, eps)


def sine_box_embedding(boxes: Tensor, frequencies: Tensor, phases: Tensor) -> Tensor:
    """boxes (..., 4) in [0, 1] -> (..., 4 * half): half sine features per coordinate (DAB-DETR);
    FREQUENCIES and PHASES (half,) from `sine_frequencies`."""
    return torch.addcmul(phases, boxes.float()[..., None], frequencies).sin().flatten(-2)


def sine_frequencies(half: int, temperature: float = 10000) -> tuple[Tensor, Tensor]:
    """sin(2 pi b / T^(2i / half)) at even features i, the cosine (sin(. + pi / 2)) at odd ones:
    (half,) angular frequencies 2 pi / T^(2 floor(i / 2) / half) and phases (0, pi / 2, 0, ...)."""
    index = torch.arange(half)
    return 2 * math.pi / temperature ** (2 * (index // 2) / half), (index % 2) * (math.pi / 2)


class AnchorBoxQueries(nn.Module):
    """Learned anchor boxes; positional queries from their sine embedding; one box head per decoder layer."""

    refines = True
    sine_frequencies: Tensor  # buffers: (d_model / 2,) each
    sine_phases: Tensor

    def __init__(self, num_queries: int, d_model: int, num_layers: int, learned_anchors: bool = True) -> None:
        """learned_anchors=False: the first boxes come from elsewhere (two-stage query selection)."""
        super().__init__()
        anchors = torch.rand(num_queries, 4)
        anchors[:, 2:] = 0.1 + 0.2 * anchors[:, 2:]  # start as middle-sized boxes spread over the image
        # (queries, 4) in inverse-sigmoid space
        self.anchors = nn.Parameter(inverse_sigmoid(anchors)) if learned_anchors else None
        self.position_head = MLP(2 * d_model, d_model, d_model, 2)
        head = MLP(d_model, d_model, 4, 3)
        last = head.layers[-1]
        assert isinstance(last, nn.Linear)  # MLP's output layer
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        self.bbox_embed = nn.ModuleList(copy.deepcopy(head) for _ in range(num_layers))
        frequencies, phases = sine_frequencies(d_model // 2)
        self.register_buffer("sine_frequencies", frequencies, persistent=False)
        self.register_buffer("sine_phases", phases, persistent=False)

    def initial(self, batch: int, queries: int) -> Tensor:
        assert self.anchors is not None  # only asked of learned anchors; two-stage queries start from proposals
        return self.anchors[:queries].sigmoid().unsqueeze(0).expand(batch, -1, -1)  # (batch, queries, 4)

    def query_pos(self, reference: Tensor | None, batch: int = 0, queries: int = 0) -> Tensor:
        assert reference is not None  # anchor queries always have boxes (None is LearnedQueries' case)
        embedding = sine_box_embedding(reference, self.sine_frequencies, self.sine_phases)  # (batch, queries, 2d)
        return self.position_head(embedding)  # (batch, queries, d_model)

    def boxes(self, layer: int, hidden: Tensor, reference: Tensor | None,
              previous: LayerBoxes | None = None) -> LayerBoxes:
        """Eq. 5: this layer's boxes (batch, queries, 4) from its output and the previous layer's boxes."""
        assert reference is not None  # anchor queries always have boxes
        return LayerBoxes((self.bbox_embed[layer](hidden) + inverse_sigmoid(reference)).sigmoid())


class LearnedQueries(nn.Module):
    """DETR's object queries: a learned query_pos, boxes = sigmoid(MLP(h)); a fixed reference point
    sigmoid(Linear(query_pos)) for deformable attention (Deformable DETR without refinement)."""

    refines = False

    def __init__(self, num_queries: int, d_model: int, with_reference: bool) -> None:
        super().__init__()
        self.query_embed = nn.Embedding(num_queries, d_model)
        self.bbox_embed = MLP(d_model, d_model, 4, 3)
        self.reference_points = nn.Linear(d_model, 2) if with_reference else None

    def initial(self, batch: int, queries: int) -> Tensor | None:
        if self.reference_points is None:
            return None
        return self.reference_points(self.query_embed.weight[:queries]).sigmoid().unsqueeze(0).expand(batch, -1, -1)

    def query_pos(self, reference: Tensor | None, batch: int = 0, queries: int = 0) -> Tensor:
        return self.query_embed.weight[:queries].unsqueeze(0).expand(batch, -1, -1)  # (batch, queries, d_model)

    def boxes(self, layer: int, hidden: Tensor, reference: Tensor | None,
              previous: LayerBoxes | None = None) -> LayerBoxes:
        return LayerBoxes(self.bbox_embed(hidden).sigmoid())  # (batch, queries, 4)
