"""Multi-scale feature maps (Zhu et al. 2021, Deformable DETR, section 4.1 and Figure 4).

DETR reads only the ResNet's stride-32 map (C5): on small images that is a few cells, and small
objects fall between them. Here the backbone returns the last L stages (L = 3: C3, C4, C5 at
strides 8, 16, 32); each is projected to d_model by a 1x1 convolution with GroupNorm, a learned
level embedding tells the levels apart, and the maps are flattened into one sequence of keys.
With one level this is DETR's input exactly: C5, a plain 1x1 convolution, no level embedding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.detection.backbone import Backbone
from attnkit.nn import PositionEmbeddingSine2D

STAGES = ("layer2", "layer3", "layer4")  # C3, C4, C5


@dataclass(frozen=True)
class FlatLevels:
    """The levels as one sequence of keys."""
    src: Tensor  # (batch, keys, d_model)
    pos: Tensor  # (batch, keys, d_model) sine positions (+ level embedding)
    padding: Tensor  # (batch, keys) True on padding
    shapes: tuple[tuple[int, int], ...]  # (height, width) of each level, keys = sum of h * w
    valid_ratios: Tensor  # (batch, levels, 2) the unpadded fraction (width, height) of each level's map


class MultiScaleJoiner(nn.Sequential):
    """Backbone returning the last LEVELS stages, and the sine positions; `backbone.0.body` as DETR's."""

    def __init__(self, backbone: Backbone, position_embedding: PositionEmbeddingSine2D, levels: int) -> None:
        super().__init__(backbone, position_embedding)
        backbone.body.return_layers = {stage: str(i) for i, stage in enumerate(STAGES[-levels:])}
        widths = {"layer2": 128, "layer3": 256, "layer4": 512}
        scale = 1 if backbone.num_channels == 512 else 4  # bottleneck ResNets are 4 times wider
        self.num_channels = [widths[stage] * scale for stage in STAGES[-levels:]]

    def forward(self, images: Tensor, mask: Tensor) -> list[tuple[Tensor, Tensor, Tensor]]:
        """images (batch, 3, H, W), mask (batch, H, W) True on padding -> per level, finest first:
        features (batch, channels, h, w), mask (batch, h, w), positions (batch, d_model, h, w)."""
        levels = []
        for features in self[0].body(images).values():
            level_mask = F.interpolate(mask[None].float(), size=features.shape[-2:])[0].bool()
            levels.append((features, level_mask, self[1](level_mask, dtype=torch.float32)))
        return levels


class LevelProjection(nn.Module):
    """Per level: 1x1 convolution to d_model (+ GroupNorm when multi-scale); level embeddings; flattening."""

    def __init__(self, in_channels: list[int], d_model: int) -> None:
        super().__init__()
        multi = len(in_channels) > 1
        self.proj = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, d_model, 1), *([nn.GroupNorm(32 if d_model % 32 == 0 else 8, d_model)]
                                                      if multi else [])) for c in in_channels)
        self.level_embed = nn.Parameter(torch.randn(len(in_channels), d_model) * 0.02) if multi else None

    def forward(self, levels: list[tuple[Tensor, Tensor, Tensor]]) -> FlatLevels:
        src, pos, padding, ratios = [], [], [], []
        for index, (features, mask, position) in enumerate(levels):
            src.append(self.proj[index](features).flatten(2).transpose(1, 2))  # (batch, h * w, d_model)
            position = position.flatten(2).transpose(1, 2)  # (batch, h * w, d_model)
            pos.append(position if self.level_embed is None else position + self.level_embed[index])
            padding.append(mask.flatten(1))
            ratios.append(valid_ratio(mask))
        shapes = tuple((m.shape[-2], m.shape[-1]) for _, m, _ in levels)
        return FlatLevels(torch.cat(src, 1), torch.cat(pos, 1), torch.cat(padding, 1), shapes, torch.stack(ratios, 1))


def valid_ratio(mask: Tensor) -> Tensor:
    """mask (batch, h, w), True on padding (bottom and right) -> (batch, 2): unpadded (width, height) fractions."""
    height = (~mask[:, :, 0]).sum(1).float() / mask.shape[1]
    width = (~mask[:, 0, :]).sum(1).float() / mask.shape[2]
    return torch.stack([width, height], -1).clamp(min=1e-3)
