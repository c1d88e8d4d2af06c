"""CNN cross-scale fusion of the encoder's levels (Zhao et al. 2024, RT-DETR, section 4.2, CCFM, Figure 4).

RT-DETR's hybrid encoder runs attention on the coarsest map alone (here `encoder_levels=1`) and mixes
the scales with convolutions instead: a top-down pass (each coarser map, through a 1x1 convolution,
upsampled 2x and joined to the next finer one) and a bottom-up pass (each finer result, through a 3x3
stride-2 convolution, joined to the next coarser one), each join concatenated and reduced by a
fusion block:

    top-down:  F_l = Block([Up(Lateral(F_{l+1})), S_l])        from the coarsest level S_L = F_L
    bottom-up: P_l = Block([Down(P_{l-1}), Lateral(F_l)])      from the finest P_1 = F_1

The block is RT-DETR's CSPRepLayer: two 1x1 branches, one through 3 RepVGG blocks (a 3x3 and a 1x1
convolution summed), added and projected back; every convolution has BatchNorm, then SiLU (a RepVGG block's
after its sum). Here the fusion runs on the encoder's output, every level of it, and the decoder and the
proposals read the fused levels. Widths as RT-DETR-R18's (block expansion 0.5) at the model's d_model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.detection.variants.multi_scale_features import FlatLevels

BLOCKS, EXPANSION = 3, 0.5  # RepVGG blocks per fusion block and its inner width / d_model (rtdetr_r18vd.yml)


class ConvNorm(nn.Sequential):
    """A bias-free convolution and its BatchNorm (a pair `fold_batch_norms` folds), then SiLU if ACTIVATION."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int, stride: int = 1,
                 activation: bool = True) -> None:
        super().__init__(nn.Conv2d(in_channels, out_channels, kernel, stride, kernel // 2, bias=False),
                         nn.BatchNorm2d(out_channels))
        self.activation = activation

    def forward(self, x: Tensor) -> Tensor:
        x = super().forward(x)
        return F.silu(x) if self.activation else x


class RepVggBlock(nn.Module):
    """SiLU(BN(Conv3x3(x)) + BN(Conv1x1(x))) (Ding et al. 2021, RepVGG, in training form)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = ConvNorm(channels, channels, 3, activation=False)
        self.conv2 = ConvNorm(channels, channels, 1, activation=False)

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(self.conv1(x) + self.conv2(x))


class FusionBlock(nn.Module):
    """RT-DETR's CSPRepLayer: (batch, 2 d_model, h, w) -> (batch, d_model, h, w): two 1x1 branches, the first
    through the RepVGG blocks, added and projected."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        inner = int(d_model * EXPANSION)
        self.conv1 = ConvNorm(2 * d_model, inner, 1)
        self.conv2 = ConvNorm(2 * d_model, inner, 1)
        self.bottlenecks = nn.Sequential(*(RepVggBlock(inner) for _ in range(BLOCKS)))
        self.conv3 = ConvNorm(inner, d_model, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv3(self.bottlenecks(self.conv1(x)) + self.conv2(x))


class CrossScaleFusion(nn.Module):
    """The encoder's memory (batch, keys, d_model) over LEVELS maps -> the fused memory, same shape. The module
    names are RT-DETR's (its HybridEncoder's), so its weights map one to one."""

    def __init__(self, d_model: int, levels: int) -> None:
        super().__init__()
        self.lateral_convs = nn.ModuleList(ConvNorm(d_model, d_model, 1) for _ in range(levels - 1))
        self.fpn_blocks = nn.ModuleList(FusionBlock(d_model) for _ in range(levels - 1))
        self.downsample_convs = nn.ModuleList(ConvNorm(d_model, d_model, 3, stride=2) for _ in range(levels - 1))
        self.pan_blocks = nn.ModuleList(FusionBlock(d_model) for _ in range(levels - 1))

    def forward(self, memory: Tensor, levels: FlatLevels) -> Tensor:
        return torch.cat([m.flatten(2) for m in self.fuse(level_maps(memory, levels))], 2).transpose(1, 2)

    def fuse(self, maps: list[Tensor]) -> list[Tensor]:
        """Each level's map (batch, d_model, h, w), finest first -> the fused maps, the same shapes."""
        fused = [maps[-1]]  # the top-down pass, coarsest first
        for step, finer in enumerate(reversed(maps[:-1])):
            fused[-1] = self.lateral_convs[step](fused[-1])
            fused.append(self.fpn_blocks[step](torch.cat([resized(fused[-1], finer), finer], 1)))
        fused.reverse()  # finest first
        out = [fused[0]]  # the bottom-up pass, finest first
        for step, coarser in enumerate(fused[1:]):
            down = resized(self.downsample_convs[step](out[-1]), coarser)
            out.append(self.pan_blocks[step](torch.cat([down, coarser], 1)))
        return out


def level_maps(memory: Tensor, levels: FlatLevels) -> list[Tensor]:
    """memory (batch, keys, d_model) -> each level's map (batch, d_model, h, w), finest first."""
    sizes = [h * w for h, w in levels.shapes]
    return [part.transpose(1, 2).unflatten(2, shape)
            for part, shape in zip(memory.split(sizes, 1), levels.shapes)]


def resized(x: Tensor, like: Tensor) -> Tensor:
    """X (batch, channels, h, w) at LIKE's height and width, nearest (2x or 1/2 where the sizes halve exactly)."""
    return x if x.shape[-2:] == like.shape[-2:] else F.interpolate(x, size=like.shape[-2:], mode="nearest")
