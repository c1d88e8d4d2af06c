from dataclasses import replace

import pytest
import torch
import torchvision
from torchvision.ops.misc import FrozenBatchNorm2d

from attnkit.detection.architectures import ARCHITECTURES, build_model
from attnkit.detection.backbone import Backbone
from attnkit.detection.config import DetrConfig, preset, with_arch
from attnkit.detection.set_criterion import SetCriterion
from attnkit.errors import CheckpointError, ConfigError


def _tiny(**changes) -> DetrConfig:
    return replace(preset("tiny")[0], num_classes=3, **changes)


def test_parameter_names_follow_facebookresearch_detr():
    names = set(build_model(_tiny(dec_layers=2)).state_dict())
    for name in ("backbone.0.body.conv1.weight", "backbone.0.body.bn1.running_mean",
                 "backbone.0.body.layer4.1.conv2.weight", "input_proj.weight", "query_embed.weight",
                 "transformer.encoder.layers.0.self_attn.in_proj_weight",
                 "transformer.decoder.layers.1.multihead_attn.out_proj.weight", "transformer.decoder.norm.weight",
                 "class_embed.weight", "bbox_embed.layers.0.weight", "bbox_embed.layers.2.bias"):
        assert name in names, name
    assert not any(n.startswith(("transformer.encoder.norm", "backbone.0.body.fc")) for n in names)


def test_detr_r50_has_the_papers_size():
    config = replace(preset("detr-r50")[0], num_classes=91)
    parameters = sum(p.numel() for p in build_model(config).parameters())
    assert 41.0e6 < parameters < 41.7e6  # the paper's DETR: 41M


def test_outputs_shapes_ranges_and_auxiliary_layers():
    torch.manual_seed(0)
    model = build_model(_tiny(dec_layers=3)).eval()
    images, mask = torch.randn(2, 3, 64, 96), torch.zeros(2, 64, 96, dtype=torch.bool)
    mask[1, :, 64:] = True  # the second image is 64 x 64, padded
    outputs = model(images, mask)
    assert outputs.logits.shape == (2, 10, 4) and outputs.boxes.shape == (2, 10, 4)
    assert 0 <= outputs.boxes.min() and outputs.boxes.max() <= 1
    assert len(outputs.aux) == 2 and outputs.class_logits is None
    assert outputs.aux[0].boxes.shape == (2, 10, 4) and outputs.aux[0].logits.shape == (2, 10, 4)


def test_gradients_flow_to_all_heads_and_the_backbone():
    torch.manual_seed(0)
    model = build_model(_tiny(dec_layers=2))
    images, mask = torch.randn(2, 3, 64, 64), torch.zeros(2, 64, 64, dtype=torch.bool)
    targets = [{"labels": torch.tensor([0, 2]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.2], [0.6, 0.6, 0.3, 0.4]])},
               {"labels": torch.tensor([1]), "boxes": torch.tensor([[0.5, 0.5, 0.5, 0.5]])}]
    SetCriterion(3)(model(images, mask), targets)["loss"].backward()
    for prefix in ("class_embed.", "bbox_embed.layers.0.", "bbox_embed.layers.2.", "query_embed.", "input_proj.",
                   "transformer.encoder.layers.0.", "transformer.decoder.layers.0.", "transformer.decoder.norm.",
                   "backbone.0.body.conv1.", "backbone.0.body.layer4."):
        grads = [p.grad for n, p in model.named_parameters() if n.startswith(prefix)]
        assert grads and all(g is not None for g in grads), prefix
        assert sum(g.abs().sum() for g in grads) > 0, prefix


def test_pretrained_backbone_file_is_loaded_with_frozen_batchnorm(tmp_path):
    torch.manual_seed(0)
    reference = torchvision.models.resnet18(weights=None)
    torch.save(reference.state_dict(), tmp_path / "resnet18.pth")
    backbone = Backbone("resnet18", weights=tmp_path / "resnet18.pth").eval()
    assert isinstance(backbone.body.bn1, FrozenBatchNorm2d)
    assert not backbone.body.conv1.weight.requires_grad and backbone.body.layer2[0].conv1.weight.requires_grad
    reference.eval()
    images = torch.randn(1, 3, 64, 64)
    expected = torch.nn.Sequential(*list(reference.children())[:-2])(images)
    torch.testing.assert_close(backbone(images), expected)


def test_channels_last_weights_compute_the_same_and_save_contiguous(tmp_path):
    from attnkit.storage.checkpoint import load_weights, save_weights

    torch.manual_seed(0)
    model = build_model(replace(preset("tiny")[0], num_classes=2)).eval()
    weight = model.backbone[0].body.layer4[0].conv1.weight
    assert weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()
    images, mask = torch.randn(2, 3, 64, 64), torch.zeros(2, 64, 64, dtype=torch.bool)
    plain = build_model(replace(preset("tiny")[0], num_classes=2)).eval()
    plain.backbone[0].body.to(memory_format=torch.contiguous_format)
    save_weights(tmp_path / "w.safetensors", model.state_dict())
    load_weights(tmp_path / "w.safetensors", plain)  # written contiguous, read into either layout
    with torch.no_grad():
        torch.testing.assert_close(plain(images, mask).boxes, model(images, mask).boxes)


def test_bad_backbone_files_and_configs_are_user_errors(tmp_path):
    (tmp_path / "junk.pth").write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="junk.pth"):
        Backbone("resnet18", weights=tmp_path / "junk.pth")
    torch.save(torchvision.models.resnet34(weights=None).state_dict(), tmp_path / "r34.pth")
    with pytest.raises(CheckpointError, match="does not fit"):
        Backbone("resnet18", weights=tmp_path / "r34.pth")
    with pytest.raises(ConfigError, match="backbone"):
        DetrConfig(backbone="vgg16")
    with pytest.raises(ConfigError, match="architecture"):
        with_arch(_tiny(), "nope")
    assert "detr" in ARCHITECTURES
