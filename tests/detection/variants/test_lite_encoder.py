import torch

from attnkit.detection.variants.deformable_transformer import (
    DeformableEncoder,
    DeformableEncoderLayer,
    encoder_reference_points,
)
from attnkit.detection.variants.lite_encoder import LiteEncoder
from attnkit.detection.variants.multi_scale_features import FlatLevels, LevelGeometry

SHAPES = ((4, 4), (2, 2), (1, 1))  # 16 fine tokens, then 4 + 1 coarse ones


def _encoders(levels: int = 3, updated: int = 2):
    torch.manual_seed(0)
    layers = [DeformableEncoderLayer(16, 4, 32, 0.0, levels, 2) for _ in range(2)]
    full, lite = DeformableEncoder(layers), LiteEncoder(layers, updated)
    return full, lite


def _inputs(shapes=SHAPES):
    keys = sum(h * w for h, w in shapes)
    return (torch.randn(2, keys, 16), torch.randn(2, keys, 16), torch.zeros(2, keys, dtype=torch.bool), shapes,
            torch.ones(2, len(shapes), 2))


def _levels(src, pos, padding, shapes, ratios) -> FlatLevels:
    return FlatLevels(src, pos, LevelGeometry((), padding, shapes, ratios))


def test_the_finest_level_is_read_but_not_updated():
    _, lite = _encoders()
    src, pos, padding, shapes, ratios = _inputs()
    src.requires_grad_(True)
    out = lite(_levels(src, pos, padding, shapes, ratios))
    assert out.shape == src.shape
    torch.testing.assert_close(out[:, :16], src[:, :16])  # C3 leaves as it came
    assert not torch.allclose(out[:, 16:], src[:, 16:])
    out[:, 16:].sum().backward()  # the coarse tokens' update reads the fine map
    assert src.grad[:, :16].abs().sum() > 0


def test_its_coarse_tokens_equal_a_full_layer_reading_the_same_keys():
    full, lite = _encoders()
    src, pos, padding, shapes, ratios = _inputs()
    layer = full.layers[0]
    reference = encoder_reference_points(shapes, ratios)
    every = layer(src, pos, reference, shapes, padding)  # one layer updating all tokens
    coarse = layer(src, pos, reference, shapes, padding, first=16)
    torch.testing.assert_close(coarse[:, 16:], every[:, 16:])  # per query, the same computation
    torch.testing.assert_close(coarse[:, :16], src[:, :16])


def test_with_one_level_it_is_the_deformable_encoder():
    full, lite = _encoders(levels=1)
    levels = _levels(*_inputs(((3, 3),)))
    torch.testing.assert_close(lite(levels), full(levels))


def test_with_one_updated_level_only_the_coarsest_tokens_change_reading_every_level():
    _, lite = _encoders(updated=1)
    src, pos, padding, shapes, ratios = _inputs()
    src.requires_grad_(True)
    out = lite(_levels(src, pos, padding, shapes, ratios))
    torch.testing.assert_close(out[:, :20], src[:, :20])  # C3 and C4 leave as they came
    assert not torch.allclose(out[:, 20:], src[:, 20:])
    out[:, 20:].sum().backward()
    assert src.grad[:, :16].abs().sum() > 0 and src.grad[:, 16:20].abs().sum() > 0  # reads both finer maps


def test_updating_every_level_is_the_deformable_encoder():
    full, lite = _encoders(updated=3)
    levels = _levels(*_inputs())
    assert lite.fixed_levels(len(SHAPES)) == 0
    torch.testing.assert_close(lite(levels), full(levels))
