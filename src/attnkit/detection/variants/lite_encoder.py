"""An encoder that updates the coarse levels only (Li et al. 2023, Lite DETR, section 3).

In the multi-scale encoder most tokens are the finest level's (C3: 16 of every 21 tokens at
strides 8, 16, 32), yet Lite DETR finds that the high-level maps carry most of the gain from
encoding: it updates the small, coarse maps in every layer and the large, fine map rarely. Here the
fine map is never updated: every layer's queries are the coarser levels' tokens (C4, C5), their
deformable attention still reads all levels, C3 included, and C3's tokens leave the encoder as the
input projection made them. The encoder's cost falls to the coarse tokens' share (about a quarter),
and the decoder and the proposals read all levels as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from attnkit.detection.variants.deformable_transformer import DeformableEncoder


class LiteEncoder(DeformableEncoder):
    """The deformable encoder whose layers update every level's tokens but the finest one's."""

    def first_updated(self, shapes: Sequence[tuple[int, int]]) -> int:
        """The finest level's tokens come first: the first key after them (0 with a single level)."""
        height, width = shapes[0]
        return height * width if len(shapes) > 1 else 0
