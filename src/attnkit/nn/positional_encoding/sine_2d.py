"""The 2-D sine position embedding of DETR (Carion et al. 2020, section 3.2 and appendix A.4).

The fixed encoding of section 3.5 of Vaswani et al., applied separately to the row (y) and the
column (x) of each feature-map cell; each half has `num_pos_feats` channels and the two halves
are concatenated, (pos_y, pos_x). Positions count only non-padding cells (a cumulative sum of the
valid mask), so a padded image gets the same encoding as the unpadded one. With `normalize`,
positions are scaled to (0, scale]. This is exactly facebookresearch/detr's
`PositionEmbeddingSine` (models/position_encoding.py), so DETR checkpoints see the same inputs.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class PositionEmbeddingSine2D(nn.Module):
    """mask (batch, height, width), True = padding -> positions (batch, 2 * num_pos_feats, height, width)."""

    def __init__(self, num_pos_feats: int = 64, temperature: float = 10000, normalize: bool = False,
                 scale: float | None = None) -> None:
        super().__init__()
        if num_pos_feats <= 0 or num_pos_feats % 2:
            raise ValueError(f"num_pos_feats must be a positive even number, got {num_pos_feats}")
        if scale is not None and not normalize:
            raise ValueError("normalize should be True if scale is passed")
        self.num_pos_feats, self.temperature, self.normalize = num_pos_feats, temperature, normalize
        self.scale = 2 * math.pi if scale is None else scale

    def forward(self, mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """mask: bool (batch, height, width), True on padding; returns (batch, 2 * num_pos_feats, height, width)."""
        if mask.dim() != 3 or mask.dtype != torch.bool:
            raise ValueError(f"mask must be bool (batch, height, width), got {mask.dtype} {tuple(mask.shape)}")
        not_mask = ~mask
        y_embed = not_mask.cumsum(1, dtype=dtype)  # row index among valid cells, from 1: (batch, height, width)
        x_embed = not_mask.cumsum(2, dtype=dtype)  # column index among valid cells, from 1
        if self.normalize:
            eps = 1e-6
            y_embed = y_embed / (y_embed[:, -1:, :] + eps) * self.scale
            x_embed = x_embed / (x_embed[:, :, -1:] + eps) * self.scale
        dim_t = torch.arange(self.num_pos_feats, dtype=dtype, device=mask.device)
        dim_t = self.temperature ** (2 * (dim_t // 2) / self.num_pos_feats)  # (num_pos_feats,)
        pos_x = self._sin_cos(x_embed[:, :, :, None] / dim_t)  # (batch, height, width, num_pos_feats)
        pos_y = self._sin_cos(y_embed[:, :, :, None] / dim_t)
        return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)  # (batch, 2 * num_pos_feats, height, width)

    @staticmethod
    def _sin_cos(angles: Tensor) -> Tensor:
        # sin on even channels, cos on odd, interleaved: (..., num_pos_feats)
        return torch.stack((angles[..., 0::2].sin(), angles[..., 1::2].cos()), dim=4).flatten(3)

    def extra_repr(self) -> str:
        return (f"num_pos_feats={self.num_pos_feats}, temperature={self.temperature}, "
                f"normalize={self.normalize}, scale={self.scale}")
