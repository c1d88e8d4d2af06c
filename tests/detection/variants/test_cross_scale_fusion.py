"""RT-DETR's CNN cross-scale fusion: equal to transformers' RTDetrHybridEncoder (its top-down and bottom-up
passes, no attention layer) with the same weights, and shape-keeping on levels that do not halve exactly."""

import pytest
import torch
from torch.testing import assert_close

from attnkit.detection.config import FastDetrConfig
from attnkit.detection.variants.cross_scale_fusion import CrossScaleFusion
from attnkit.errors import ConfigError

D = 16


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_matches_rt_detr_hybrid_encoder_fusion(train, batch_norm_randomiser):
    transformers = pytest.importorskip("transformers")
    from transformers.models.rt_detr.modeling_rt_detr import RTDetrHybridEncoder

    torch.manual_seed(0)
    config = transformers.RTDetrConfig(encoder_hidden_dim=D, encoder_in_channels=[D] * 3, encode_proj_layers=[],
                                       encoder_layers=0, hidden_expansion=0.5, activation_function="silu")
    theirs = RTDetrHybridEncoder(config)
    batch_norm_randomiser(theirs)
    ours = CrossScaleFusion(D, 3)
    renamed = {k.replace(".conv.", ".0.").replace(".norm.", ".1."): v for k, v in theirs.state_dict().items()}
    ours.load_state_dict(renamed, strict=True)  # every weight has its counterpart, and no other
    theirs.train(train)
    ours.train(train)
    maps = [torch.randn(2, D, 8, 8), torch.randn(2, D, 4, 4), torch.randn(2, D, 2, 2)]  # finest first
    expected = theirs(inputs_embeds=[m.clone() for m in maps]).last_hidden_state
    got = ours.fuse(maps)
    assert len(got) == 3
    for mine, reference in zip(got, expected):
        assert_close(mine, reference)


def test_keeps_each_level_shape_when_the_sizes_do_not_halve():
    """7 x 5 -> 4 x 3 -> 2 x 2 (an image not a multiple of 32): upsampling and the stride-2 convolution are
    resized to the neighbour level, and every level leaves with its own shape."""
    fusion = CrossScaleFusion(D, 3).eval()
    maps = [torch.randn(1, D, 7, 5), torch.randn(1, D, 4, 3), torch.randn(1, D, 2, 2)]
    assert [m.shape for m in fusion.fuse(maps)] == [m.shape for m in maps]


def test_needs_several_levels():
    with pytest.raises(ConfigError, match="feature_levels"):
        FastDetrConfig(cross_scale_fusion=True, feature_levels=1)
