"""The backbone's ResNet of any layout against references: torchvision's named ResNets (same weights drawn, same
features) and transformers' ResNet of any depths, widths, stem and input channels (its weights, mapped by name)."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch.testing import assert_close
from torchvision.ops.misc import FrozenBatchNorm2d

from attnkit.detection.backbone import Backbone
from attnkit.detection.config import RESNETS, DetrConfig, ResNetLayout
from attnkit.errors import ConfigError


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_a_named_resnet_draws_torchvisions_weights_and_computes_its_features(name):
    torch.manual_seed(0)
    reference = getattr(torchvision.models, name)(weights=None).eval()
    torch.manual_seed(0)
    backbone = Backbone(name).eval()
    expected = {k: v for k, v in reference.state_dict().items() if not k.startswith("fc.")}
    assert list(backbone.body.state_dict()) == list(expected)
    for key, value in expected.items():
        assert torch.equal(backbone.body.state_dict()[key], value), key
    images = torch.randn(1, 3, 64, 64)
    stem = torch.nn.Sequential(*list(reference.children())[:-2])  # without avgpool and fc
    with torch.no_grad():  # eval lays the weights out channels-last: other kernels, rounding of large activations
        assert_close(backbone(images), stem(images), atol=1e-3, rtol=1e-4)


def test_the_layout_of_a_named_resnet_is_its_own_and_resnet_takes_the_fields():
    assert DetrConfig(backbone="resnet34").resnet_layout == RESNETS["resnet34"]
    config = DetrConfig(backbone="resnet", backbone_block="bottleneck", backbone_depths=[1, 1, 2, 1],
                        backbone_widths=[12, 20, 32, 40], backbone_stem_width=10, num_channels=1)
    assert config.resnet_layout == ResNetLayout("bottleneck", (1, 1, 2, 1), (12, 20, 32, 40), 10, 1)
    assert config.backbone_depths == (1, 1, 2, 1)  # lists from config.json become tuples


@pytest.mark.parametrize("changes, field", [
    ({"backbone": "resnet"}, "backbone_block"),
    ({"backbone": "resnet", "backbone_block": "basic", "backbone_depths": [1, 1, 1]}, "backbone_depths"),
    ({"backbone_depths": [1, 1, 1, 1]}, "backbone_block, backbone_depths"),
    ({"num_channels": 4}, "num_channels"),
    ({"backbone": "resnet", "backbone_block": "basic", "backbone_depths": [1, 1, 1, 1],
      "backbone_widths": [8, 8, 8, 8], "dilation": True}, "dilation"),
])
def test_layouts_that_cannot_be_built_are_refused_with_the_field_named(changes, field):
    with pytest.raises(ConfigError, match=field):
        DetrConfig(**changes)


transformers = pytest.importorskip("transformers")


def hf_resnet(layer_type: str, depths, hidden_sizes, embedding_size: int, num_channels: int, seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.ResNetConfig(layer_type=layer_type, depths=depths, hidden_sizes=hidden_sizes,
                                       embedding_size=embedding_size, num_channels=num_channels,
                                       out_features=["stage4"])
    model = transformers.ResNetBackbone(config).eval()
    with torch.no_grad():  # batch norms that are not the identity
        for name, tensor in model.state_dict().items():
            if name.endswith(("running_mean", "bias")):
                tensor.normal_(0, 0.1)
            elif name.endswith(("running_var", "normalization.weight")):
                tensor.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("layer_type, depths, hidden_sizes, embedding_size, num_channels", [
    ("bottleneck", [1, 1, 2, 1], [10, 20, 30, 40], 64, 3),  # transformers' DetrModelTester's ResNet
    ("basic", [1, 1, 2, 1], [8, 16, 24, 32], 12, 3),
    ("basic", [2, 1, 1, 1], [16, 16, 32, 64], 16, 1),  # greyscale, a stage that keeps its width
    ("bottleneck", [1, 2, 1, 1], [64, 128, 256, 512], 64, 1),
])
def test_any_transformers_resnet_computes_the_same_features(layer_type, depths, hidden_sizes, embedding_size,
                                                             num_channels):
    from attnkit.app.interop.detr_import import hf_resnet_to_torchvision

    reference = hf_resnet(layer_type, depths, hidden_sizes, embedding_size, num_channels)
    layout = ResNetLayout(layer_type, tuple(depths), tuple(hidden_sizes), embedding_size, num_channels)
    backbone = Backbone(layout, frozen_batchnorm=True).eval()
    state = {hf_resnet_to_torchvision(k): v for k, v in reference.state_dict().items()
             if not k.endswith("num_batches_tracked")}
    backbone.body.load_state_dict(state, strict=True)
    assert all(isinstance(m, FrozenBatchNorm2d) for m in backbone.modules() if "BatchNorm" in type(m).__name__)
    images = torch.randn(2, num_channels, 64, 96)
    with torch.no_grad():
        assert_close(backbone(images), reference(images).feature_maps[-1], atol=1e-5, rtol=1e-4)
