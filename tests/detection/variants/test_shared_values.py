"""`shared_values`: one value projection for the keys that layers read unchanged. With the shared projection
equal to each layer's own, the layers compute what they computed with their own (the sharing is a constraint on
the weights, not another computation)."""

import pytest
import torch

from attnkit.detection.architectures import build_model
from attnkit.detection.config import FastDetrConfig, model_from_dict, preset, with_arch
from attnkit.detection.variants.deformable_transformer import DeformableEncoderLayer
from attnkit.detection.variants.lite_encoder import LiteEncoder
from attnkit.detection.variants.multi_scale_deformable_attention import MultiScaleDeformableAttention
from attnkit.detection.variants.multi_scale_features import FlatLevels, LevelGeometry
from attnkit.detection.variants.shared_values import SharedValues
from attnkit.errors import ConfigError

SHAPES = ((4, 4), (2, 2), (1, 1))  # 16 fine tokens, then 4 + 1 coarse ones


def _padding() -> torch.Tensor:
    padding = torch.zeros(2, 21, dtype=torch.bool)
    padding[1, 12:16] = True  # the second image's last fine row, and its coarse cells' share of it
    padding[1, 18:20] = True
    return padding


def test_given_values_are_what_the_module_projects_itself():
    torch.manual_seed(0)
    attention = MultiScaleDeformableAttention(16, 4, 3, 2)
    with torch.no_grad():
        attention.sampling_offsets.weight.normal_(0, 0.3)
    shared = SharedValues(16, 4)
    shared.value_proj.load_state_dict(attention.value_proj.state_dict())
    query, reference, value, padding = torch.randn(2, 5, 16), torch.rand(2, 5, 3, 2), torch.randn(2, 21, 16), _padding()
    own = attention(query, reference, value, SHAPES, padding)
    given = shared(value[:, :16], SHAPES[:1], padding[:, :16])  # the finest level given, the others its own
    torch.testing.assert_close(attention(query, reference, value[:, 16:], SHAPES, padding[:, 16:], given), own)
    every = shared(value, SHAPES, padding)
    torch.testing.assert_close(attention(query, reference, value[:, :0], SHAPES, None, every), own)
    assert given[0].shape == (2 * 4, 4, 4, 4)  # (batch * heads, head_dim, height, width)
    assert given[0].view(2, 16, 16)[1, :, 12:].abs().sum() == 0  # padding reads zeros


def test_the_lite_encoder_with_shared_fixed_values_equal_to_its_layers_own():
    torch.manual_seed(0)
    layers = [DeformableEncoderLayer(16, 4, 32, 0.0, 3, 2) for _ in range(2)]
    shared = SharedValues(16, 4)
    for layer in layers:  # every layer's own projection set to the shared one
        layer.self_attn.value_proj.load_state_dict(shared.value_proj.state_dict())
        with torch.no_grad():
            layer.self_attn.sampling_offsets.weight.normal_(0, 0.3)
    src, pos, padding = torch.randn(2, 21, 16), torch.randn(2, 21, 16), _padding()
    levels = FlatLevels(src, pos, LevelGeometry((), padding, SHAPES, torch.ones(2, 3, 2)))
    for updated in (1, 2):
        expected = LiteEncoder(layers, updated)(levels)
        got = LiteEncoder(layers, updated, shared)(levels)
        torch.testing.assert_close(got, expected)
        assert not torch.allclose(got[:, -1], src[:, -1])


def test_fast_with_shared_values_drops_the_decoders_own_projections_and_trains_the_shared_ones():
    config = with_arch(preset("tiny")[0], "fast", num_classes=3, last_stage=4, shared_values=True, encoder_levels=1,
                       dec_layers=3)
    torch.manual_seed(0)
    model = build_model(config)
    assert all(layer.cross_attn.value_proj is None for layer in model.decoder.layers)
    images, mask = torch.randn(2, 3, 64, 64), torch.zeros(2, 64, 64, dtype=torch.bool)
    mask[1, 48:] = True
    out = model(images, mask)
    (out.boxes.sum() + out.logits.sum()).backward()
    assert model.decoder.shared.value_proj.weight.grad.abs().sum() > 0
    assert model.encoder.shared.value_proj.weight.grad.abs().sum() > 0
    unshared = build_model(with_arch(config, "fast", shared_values=False))
    saved = sum(p.numel() for p in unshared.parameters()) - sum(p.numel() for p in model.parameters())
    d = config.hidden_dim
    assert saved == (config.dec_layers - 2) * (d * d + d)  # the decoder's own, less the two shared ones


def test_shared_values_need_deformable_attention_and_old_runs_keep_their_own():
    with pytest.raises(ConfigError, match="shared_values"):
        FastDetrConfig(shared_values=True, deformable_attention=False, encoder_levels=3)
    assert not model_from_dict({"arch": "fast", "encoder_levels": 2}).shared_values
