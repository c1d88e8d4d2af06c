"""One value projection for keys that several deformable attention layers read unchanged (`shared_values`).

Eq. 3 of Deformable DETR (Zhu et al. 2021) projects every key, W'_m x^l, in every layer, yet most
keys do not change between the layers that read them: the decoder's six layers all read the same
encoder memory, and the lite encoder's layers (`lite_encoder`) read the fine levels they never
update. At the paper's size (800 px: 13,125 keys of three levels, 100 queries) those projections
are most of the decoder's work and, with the encoder updating C5 alone, most of the encoder's:
twelve products of all keys by a 256 x 256 matrix, for some thousand sampled points per query set.
Here such keys are projected once, by one projection the layers share, and each layer projects
only the keys it updates (the encoder's own levels). The layers keep their own sampling offsets,
weights and output projections, so each still reads and mixes the shared values its own way.
No paper's technique: a simplification measured here (BENCHMARKS.md, "fast at the paper's size").
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from attnkit.detection.variants.multi_scale_deformable_attention import ValueProjection


class SharedValues(nn.Module):
    """W' x for the keys of the first levels, once, in the layout the sampling reads."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.value_proj = ValueProjection(d_model, d_model)
        nn.init.xavier_uniform_(self.value_proj.weight)  # as each layer's own (Deformable DETR's init)
        nn.init.zeros_(self.value_proj.bias)

    def forward(self, keys: Tensor, shapes: Sequence[tuple[int, int]], padding: Tensor | None) -> list[Tensor]:
        """keys: (batch, keys, d_model), the levels of SHAPES flattened one after the other; padding: (batch,
        keys) True on padding, or None -> per level (batch * heads, head_dim, height, width), zero on padding."""
        return self.value_proj.maps(keys, shapes, padding, self.num_heads)
