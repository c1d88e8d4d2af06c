"""The deformable Transformer's encoder and decoder layers (Zhu et al. 2021, section 4.1 and appendix A.2).

Encoder: every pixel of every level is a query; self-attention is multi-scale deformable
attention around the pixel's own position, so its cost is linear in the number of pixels.
Decoder: self-attention among the object queries is ordinary multi-head attention; the
cross-attention to the image is deformable, around each query's reference point or box.
Both are post-norm, as DETR: LayerNorm(x + Sublayer(x)).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.detection.variants.multi_scale_deformable_attention import MultiScaleDeformableAttention
from attnkit.detection.variants.multi_scale_features import FlatLevels
from attnkit.detection.variants.query_groups import stack_groups, unstack_groups
from attnkit.nn import MultiHeadAttention
from attnkit.nn.dropout import Dropout


class FeedForward(nn.Module):
    """FFN(x) = LayerNorm(x + W_2 dropout(ReLU(W_1 x)))."""

    def __init__(self, d_model: int, dim_feedforward: int, dropout: float) -> None:
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, dim_feedforward), nn.Linear(dim_feedforward, d_model)
        self.dropout, self.norm = Dropout(dropout), nn.LayerNorm(d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x + self.dropout(self.linear2(self.dropout(F.relu(self.linear1(x))))))


class DeformableEncoderLayer(nn.Module):
    """Deformable self-attention over all levels' pixels, then FFN."""

    def __init__(self, d_model: int, num_heads: int, dim_feedforward: int, dropout: float, num_levels: int,
                 num_points: int) -> None:
        super().__init__()
        self.self_attn = MultiScaleDeformableAttention(d_model, num_heads, num_levels, num_points)
        self.dropout, self.norm = Dropout(dropout), nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, dim_feedforward, dropout)

    def forward(self, x: Tensor, pos: Tensor, reference: Tensor, shapes: Sequence[tuple[int, int]],
                padding: Tensor | None, first: int = 0) -> Tensor:
        """x, pos: (batch, keys, d_model); reference: (batch, keys, levels, 2); padding: (batch, keys) or None.
        first: the keys before it are read (as values) but not updated (`variants.lite_encoder`)."""
        updated = self.update(x, pos, reference, shapes, padding, first)
        return torch.cat([x[:, :first], updated], 1) if first else updated  # (batch, keys, d_model)

    def update(self, x: Tensor, pos: Tensor, reference: Tensor, shapes: Sequence[tuple[int, int]],
               padding: Tensor | None, first: int = 0) -> Tensor:
        """`forward`'s updated keys alone: (batch, keys - first, d_model)."""
        query = x[:, first:]  # (batch, updated keys, d_model)
        query = self.norm(query + self.dropout(self.self_attn(query + pos[:, first:], reference[:, first:], x, shapes,
                                                              padding)))
        return self.ffn(query)


def encoder_reference_points(shapes: Sequence[tuple[int, int]], valid_ratios: Tensor) -> Tensor:
    """Each pixel's centre, normalised by its level's unpadded size, seen from every level.

    valid_ratios: (batch, levels, 2) -> (batch, keys, levels, 2) as (x, y) in [0, 1] of each map.
    """
    points = []
    for level, (height, width) in enumerate(shapes):
        y, x = torch.meshgrid(torch.arange(height, dtype=valid_ratios.dtype, device=valid_ratios.device) + 0.5,
                              torch.arange(width, dtype=valid_ratios.dtype, device=valid_ratios.device) + 0.5,
                              indexing="ij")
        ratio = valid_ratios[:, None, level]  # (batch, 1, 2)
        points.append(torch.stack([x.flatten() / (ratio[..., 0] * width), y.flatten() / (ratio[..., 1] * height)],
                                  -1))  # (batch, h * w, 2)
    return torch.cat(points, 1)[:, :, None] * valid_ratios[:, None]  # (batch, keys, levels, 2)


class DeformableEncoder(nn.Module):
    """A stack of deformable encoder layers (no final norm: post-norm layers end normalised)."""

    def __init__(self, layers: list[DeformableEncoderLayer]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, levels: FlatLevels) -> Tensor:
        """levels: the flattened keys -> memory (batch, keys, d_model)."""
        reference = levels.geometry.derive("encoder_reference_points",
                                           lambda: encoder_reference_points(levels.shapes, levels.valid_ratios))
        fixed, src, padding = self.fixed_levels(len(levels.shapes)), levels.src, levels.key_padding
        first = sum(height * width for height, width in levels.shapes[:fixed])
        if first and not torch.is_grad_enabled():  # at inference each layer's update is written into one copy of
            src = src.clone()  # the keys, where each layer joined it to the fixed keys anew (a copy of all keys)
            for layer in self.layers:
                src[:, first:] = cast(DeformableEncoderLayer, layer).update(src, levels.pos, reference,
                                                                            levels.shapes, padding, first)
            return src  # (batch, keys, d_model)
        for layer in self.layers:
            src = layer(src, levels.pos, reference, levels.shapes, padding, first)
        return src  # (batch, keys, d_model)

    def fixed_levels(self, count: int) -> int:
        """Of COUNT levels (finest first), how many the layers read but do not update: none here."""
        return 0


class DeformableDecoderLayer(nn.Module):
    """Self-attention among queries (positions on queries and keys), deformable cross-attention, FFN."""

    def __init__(self, d_model: int, num_heads: int, dim_feedforward: int, dropout: float, num_levels: int,
                 num_points: int) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout, batch_first=True)
        self.cross_attn = MultiScaleDeformableAttention(d_model, num_heads, num_levels, num_points)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self.ffn = FeedForward(d_model, dim_feedforward, dropout)

    def forward(self, x: Tensor, query_pos: Tensor, reference: Tensor, memory: Tensor, pos: Tensor,
                padding: Tensor | None, shapes: Sequence[tuple[int, int]], self_mask: Tensor | None,
                groups: int = 1) -> Tensor:
        """x, query_pos: (batch, queries, d_model); reference: (batch, queries, levels, 2 or 4); memory:
        (batch, keys, d_model); self_mask: (queries, queries) True = not allowed, or GROUPS > 1 groups of
        consecutive queries, each attending within its own group only. `pos` is unused: the sampling
        locations carry the positions."""
        q = stack_groups(x + query_pos, groups)  # (batch * groups, queries / groups, d_model)
        attended = self.self_attn(q, q, stack_groups(x, groups), attn_mask=self_mask, need_weights=False)[0]
        x = self.norm1(x + self.dropout1(unstack_groups(attended, groups)))
        x = self.norm2(x + self.dropout2(self.cross_attn(x + query_pos, reference, memory, shapes, padding)))
        return self.ffn(x)  # (batch, queries, d_model)
