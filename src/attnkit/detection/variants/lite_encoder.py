"""An encoder that updates the coarse levels only (Li et al. 2023, Lite DETR, section 3).

In the multi-scale encoder most tokens are the fine levels' (C3: 16 of every 21 tokens at
strides 8, 16, 32), yet Lite DETR finds that the high-level maps carry most of the gain from
encoding: it updates the small, coarse maps in every layer and the large, fine map rarely (and
RT-DETR, Zhao et al. 2024, section 4.2, runs its encoder's attention on the coarsest map alone).
Here the layers update the tokens of the coarsest N levels only (`encoder_levels`; the default 1:
C5 alone, as RT-DETR; `small`'s 2: C4 and C5), their deformable attention still reads all levels, and the finer levels'
tokens leave the encoder as the input projection made them. The encoder's cost falls to the updated
tokens' share (C4 and C5: 45 of 189 tokens at 96 px; C5: 9), and the decoder and the proposals read
all levels as before.
"""

from __future__ import annotations

from attnkit.detection.variants.deformable_transformer import DeformableEncoder, DeformableEncoderLayer


class LiteEncoder(DeformableEncoder):
    """The deformable encoder whose layers update the coarsest UPDATED_LEVELS levels' tokens only."""

    def __init__(self, layers: list[DeformableEncoderLayer], updated_levels: int) -> None:
        super().__init__(layers)
        self.updated_levels = updated_levels

    def fixed_levels(self, count: int) -> int:
        """The levels come finest first: all but the coarsest UPDATED_LEVELS (none if that is all of them)."""
        return max(count - self.updated_levels, 0)
