"""Multi-scale feature maps (Zhu et al. 2021, Deformable DETR, section 4.1 and Figure 4).

DETR reads only the ResNet's stride-32 map (C5): on small images that is a few cells, and small
objects fall between them. Here the backbone returns its last L stages (L = 3: C3, C4, C5 at
strides 8, 16, 32); each is projected to d_model by a 1x1 convolution with GroupNorm, a learned
level embedding tells the levels apart, and the maps are flattened into one sequence of keys.
Levels beyond the backbone's last stage are made as Deformable DETR makes its fourth (C6): a 3x3
stride-2 convolution with GroupNorm on the last stage, then on each made level. A backbone that
stops after C4 (`last_stage=4`) thus still gives strides 8, 16, 32, the last from one convolution
instead of ResNet's layer4. With `stride4_level` the ResNet's C2 (stride 4) is read too, as the finest level
(the feature pyramids of small-object detectors; Lin et al. 2017, FPN, section 3, read C2 as P2).
With one level this is DETR's input exactly: C5, a plain 1x1 convolution, no level embedding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.detection.backbone import Backbone, stage_channels
from attnkit.nn import PositionEmbeddingSine2D

STAGES = ("layer2", "layer3", "layer4")  # C3, C4, C5


@dataclass(frozen=True)
class LevelGeometry:
    """What the padding masks decide about the levels: positions, padding, valid ratios, and the tensors
    other modules derive from these alone (`derive`). An unpadded batch of one size always has the
    same geometry, so it is computed once per size and kept (`MultiScaleJoiner.geometry`)."""
    positions: tuple[Tensor, ...]  # per level (batch, h * w, d_model) sine positions
    padding: Tensor  # (batch, keys) True on padding
    shapes: tuple[tuple[int, int], ...]  # (height, width) of each level, keys = sum of h * w
    valid_ratios: Tensor  # (batch, levels, 2) the unpadded fraction (width, height) of each level's map
    padded: bool = True  # False: no key is padding (the masks and ratios change nothing, and are skipped)
    derived: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def derive(self, name: str, compute: Callable[[], Any]) -> Any:
        """COMPUTE() the first time NAME is asked of this geometry, then the same value."""
        if name not in self.derived:
            self.derived[name] = compute()
        return self.derived[name]


def level_geometry(mask: Tensor, shapes: tuple[tuple[int, int], ...],
                   position: PositionEmbeddingSine2D, padded: bool = True) -> LevelGeometry:
    """mask (batch, H, W) True on padding, the levels' (h, w) -> their geometry.
    padded=False promises that MASK is all False."""
    masks = [F.interpolate(mask[None].float(), size=shape)[0].bool() for shape in shapes]  # (batch, h, w) each
    return LevelGeometry(tuple(position(m, dtype=torch.float32).flatten(2).transpose(1, 2) for m in masks),
                         torch.cat([m.flatten(1) for m in masks], 1), shapes,
                         torch.stack([valid_ratio(m) for m in masks], 1), padded)


@dataclass(frozen=True)
class FlatLevels:
    """The levels as one sequence of keys."""
    src: Tensor  # (batch, keys, d_model)
    pos: Tensor  # (batch, keys, d_model) sine positions (+ level embedding)
    geometry: LevelGeometry

    @property
    def padding(self) -> Tensor:
        return self.geometry.padding  # (batch, keys) True on padding

    @property
    def key_padding(self) -> Tensor | None:
        """`padding`, or None when no key is padding (attention then masks nothing)."""
        return self.geometry.padding if self.geometry.padded else None

    @property
    def shapes(self) -> tuple[tuple[int, int], ...]:
        return self.geometry.shapes

    @property
    def valid_ratios(self) -> Tensor:
        return self.geometry.valid_ratios  # (batch, levels, 2)


class MultiScaleJoiner(nn.Sequential):
    """Backbone returning its last LEVELS stages (or all it has, the rest `made_levels`), and C2 before them
    with STRIDE4, and the sine positions; `backbone.0.body` as DETR's."""

    def __init__(self, backbone: Backbone, position_embedding: PositionEmbeddingSine2D, levels: int,
                 stride4: bool = False) -> None:
        super().__init__(backbone, position_embedding)
        stages = [stage for stage in STAGES if stage in backbone.body][-levels:]
        stages = ["layer1", *stages] if stride4 else stages
        backbone.body.return_layers = {stage: str(i) for i, stage in enumerate(stages)}
        self.num_channels = [stage_channels(backbone.body, stage) for stage in stages]
        self.made_levels = levels + stride4 - len(stages)  # coarser levels, made by `LevelProjection`
        self._kept: dict[tuple, LevelGeometry] = {}

    def forward(  # type: ignore[override]  # a Sequential for DETR's parameter names, not for its forward
            self, images: Tensor, mask: Tensor) -> tuple[list[Tensor], LevelGeometry]:
        """images (batch, 3, H, W), mask (batch, H, W) True on padding -> per stage, finest first,
        features (batch, channels, h, w), and the geometry of all levels (the made ones halve the last)."""
        features = list(cast(Backbone, self[0]).body(images).values())
        shapes = [(f.shape[-2], f.shape[-1]) for f in features]
        for _ in range(self.made_levels):  # a 3x3 convolution of stride 2 and padding 1
            shapes.append(((shapes[-1][0] + 1) // 2, (shapes[-1][1] + 1) // 2))
        return features, self.geometry(mask, tuple(shapes))

    def geometry(self, mask: Tensor, shapes: tuple[tuple[int, int], ...]) -> LevelGeometry:
        """The levels' geometry; an unpadded batch's is kept per size and reused (it holds no gradients)."""
        if torch.compiler.is_compiling() or mask.any():
            return level_geometry(mask, shapes, cast(PositionEmbeddingSine2D, self[1]))
        key = (len(mask), shapes, mask.device, torch.is_inference_mode_enabled())
        geometry = self._kept.get(key)  # one lookup: another thread (a server's) may clear the dict meanwhile
        if geometry is None:
            if len(self._kept) >= 8:  # sizes seen lately; an image stream of many sizes does not grow it
                self._kept.clear()
            geometry = self._kept[key] = level_geometry(mask, shapes, cast(PositionEmbeddingSine2D, self[1]),
                                                        padded=False)
        return geometry


class LevelProjection(nn.Module):
    """Per stage: 1x1 convolution to d_model (+ GroupNorm when multi-scale); then MADE coarser levels, each a
    3x3 stride-2 convolution with GroupNorm of the level before (the last stage's features for the first);
    level embeddings; flattening."""

    def __init__(self, in_channels: list[int], d_model: int, made: int = 0) -> None:
        super().__init__()
        multi = len(in_channels) + made > 1

        def projection(conv: nn.Conv2d) -> nn.Sequential:
            return nn.Sequential(conv, *([nn.GroupNorm(32 if d_model % 32 == 0 else 8, d_model)] if multi else []))

        made_from = [in_channels[-1]] + [d_model] * (made - 1) if made else []
        self.proj = nn.ModuleList([projection(nn.Conv2d(c, d_model, 1)) for c in in_channels]
                                  + [projection(nn.Conv2d(c, d_model, 3, stride=2, padding=1)) for c in made_from])
        self.level_embed = nn.Parameter(torch.randn(len(self.proj), d_model) * 0.02) if multi else None

    def forward(self, inputs: tuple[list[Tensor], LevelGeometry]) -> FlatLevels:
        features, geometry = inputs
        maps = [proj(f) for proj, f in zip(self.proj, features)]  # (batch, d_model, h, w)
        made = features[-1]
        for proj in self.proj[len(features):]:  # each made level from the one before
            made = proj(made)
            maps.append(made)
        src = [m.flatten(2).transpose(1, 2) for m in maps]  # (batch, h * w, d_model)
        return FlatLevels(torch.cat(src, 1), self.positions(geometry), geometry)

    def positions(self, geometry: LevelGeometry) -> Tensor:
        """The sine positions plus each level's embedding, (batch, keys, d_model). Without gradients they are kept
        with the geometry while the embeddings stay as they are (an optimizer's step or loaded weights change their
        version): otherwise each call adds and joins every key's position anew, keys x d_model (13,125 x 256 at
        800 px). Embeddings made under inference mode keep no version: added each call."""
        embed = self.level_embed

        def compute() -> Tensor:
            pos = geometry.positions if embed is None else [p + e for p, e in zip(geometry.positions, embed)]
            return torch.cat(pos, 1)

        if torch.is_grad_enabled() or torch.compiler.is_compiling() or (embed is not None and embed.is_inference()):
            return compute()
        version = None if embed is None else (embed.data_ptr(), embed._version)
        kept = geometry.derived.get("positions")
        if kept is None or kept[0] != version:
            kept = geometry.derived["positions"] = (version, compute())
        return kept[1]


def valid_ratio(mask: Tensor) -> Tensor:
    """mask (batch, h, w), True on padding (bottom and right) -> (batch, 2): unpadded (width, height) fractions."""
    height = (~mask[:, :, 0]).sum(1).float() / mask.shape[1]
    width = (~mask[:, 0, :]).sum(1).float() / mask.shape[2]
    return torch.stack([width, height], -1).clamp(min=1e-3)
