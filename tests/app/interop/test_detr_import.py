"""DETR in and out: Hugging Face folders and official-layout checkpoints give the same logits and boxes."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
import torch
from detr_models import hf_detr, random_images
from torch.testing import assert_close

from attnkit.app.interop.detr_import import COCO_91, hf_to_official, import_detr
from attnkit.app.interop.hf_export import export_hf
from attnkit.detection.architectures import build_model
from attnkit.detection.config import DetectionConfig, preset
from attnkit.errors import CheckpointError, ConfigError
from attnkit.storage import RunFolder, load_weights, save_weights

transformers = pytest.importorskip("transformers")


def run_model(run) -> torch.nn.Module:
    folder = RunFolder.open(run.path, "detection")
    model = build_model(DetectionConfig.from_dict(folder.config).model)
    load_weights(folder.best_weights, model)
    return model.eval()


def assert_same_detections(model, hf_model, atol=1e-4) -> None:
    images, mask = random_images()
    with torch.no_grad():
        ours = model(images, mask)
        theirs = hf_model(pixel_values=images, pixel_mask=(~mask).long())
    assert_close(ours.logits, theirs.logits, atol=atol, rtol=0)
    assert_close(ours.boxes, theirs.pred_boxes, atol=atol, rtol=0)


def test_hugging_face_folder_imports_with_the_same_logits_and_boxes(tmp_path):
    hf_model = hf_detr("basic")
    hf_model.save_pretrained(tmp_path / "hf")
    run = import_detr(tmp_path / "hf", tmp_path / "run")
    config = DetectionConfig.from_dict(run.config)
    assert (config.model.backbone, config.model.num_heads, config.model.num_classes) == ("resnet18", 4, 5)
    assert config.class_names == tuple(hf_model.config.id2label[i] for i in range(5))
    assert_same_detections(run_model(run), hf_model)


def test_official_checkpoint_layout_imports_with_the_same_logits_and_boxes(tmp_path):
    hf_model = hf_detr("bottleneck", seed=3)  # R50, as the released checkpoints
    official = hf_to_official(hf_model.state_dict())  # the published rename table, inverted
    assert "transformer.decoder.layers.1.multihead_attn.in_proj_weight" in official
    assert "backbone.0.body.layer3.5.conv3.weight" in official
    torch.save({"model": official}, tmp_path / "detr-r50-test.pth")
    run = import_detr(tmp_path / "detr-r50-test.pth", tmp_path / "run", num_heads=4)
    assert run.config["model"]["backbone"] == "resnet50"
    assert_same_detections(run_model(run), hf_model)


def test_official_91_class_checkpoint_gets_coco_names(tmp_path):
    model = build_model(dataclasses.replace(preset("tiny")[0], num_classes=91, frozen_batchnorm=True))
    torch.save({"model": model.state_dict()}, tmp_path / "detr.pth")
    run = import_detr(tmp_path / "detr.pth", tmp_path / "run", num_heads=preset("tiny")[0].num_heads)
    config = DetectionConfig.from_dict(run.config)
    assert config.model.num_classes == 80 and "N/A" not in config.class_names
    assert config.class_names[0] == "person" and config.category_ids[0] == 1
    assert config.class_names[-1] == "toothbrush" and config.category_ids[-1] == 90
    imported = run_model(run)  # the 80 categories' rows and "no object", in order
    keep = [i for i, name in enumerate(COCO_91) if name != "N/A"] + [91]
    assert_close(imported.class_embed.weight, model.class_embed.weight[keep])


def test_a_checkpoint_that_needs_unpickling_is_refused(tmp_path):
    model = build_model(preset("tiny")[0])
    torch.save({"model": model.state_dict(), "args": argparse.Namespace(lr=1e-4)}, tmp_path / "train.pth")
    with pytest.raises(CheckpointError, match="refused"):
        import_detr(tmp_path / "train.pth", tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_mis_shaped_and_unexpected_tensors_are_named_and_nothing_is_written(tmp_path):
    state = dict(hf_to_official(hf_detr("basic").state_dict()))
    state["input_proj.weight"] = state["input_proj.weight"][:, :100]
    state["extra.weight"] = torch.zeros(3)
    torch.save({"model": state}, tmp_path / "bad.pth")
    with pytest.raises(CheckpointError, match=r"input_proj\.weight.*|extra\.weight") as error:
        import_detr(tmp_path / "bad.pth", tmp_path / "run", num_heads=4)
    assert "input_proj.weight" in str(error.value) and "extra.weight" in str(error.value)
    assert not (tmp_path / "run").exists()


def test_export_round_trip_loads_in_transformers_with_the_same_outputs(tmp_path):
    hf_model = hf_detr("basic", seed=5)
    hf_model.save_pretrained(tmp_path / "hf")
    run = import_detr(tmp_path / "hf", tmp_path / "run")
    export_hf(run.path, tmp_path / "exported")
    reloaded = transformers.DetrForObjectDetection.from_pretrained(tmp_path / "exported").eval()
    assert_same_detections(run_model(run), reloaded)
    assert_same_detections(run_model(run), hf_model)


def test_a_model_trained_here_exports_to_transformers(tmp_path):
    torch.manual_seed(0)
    model_config = dataclasses.replace(preset("tiny")[0], num_classes=3)
    model = build_model(model_config).eval()
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("running_var"):
                buffer.uniform_(0.5, 1.5)
    config = DetectionConfig(model=model_config, class_names=("circle", "square", "triangle"))
    run = RunFolder.create(tmp_path / "run", "detection", config.to_dict())
    save_weights(run.last_weights, model.state_dict())
    export_hf(run.path, tmp_path / "exported", weights="last")
    reloaded = transformers.DetrForObjectDetection.from_pretrained(tmp_path / "exported").eval()
    assert reloaded.config.id2label[1] == "square"
    assert_same_detections(model, reloaded)


def test_fine_tuning_keeps_everything_but_a_resized_class_head(tmp_path):
    from attnkit.app.interop.finetune import init_from_run

    hf_model = hf_detr("basic", seed=7)
    hf_model.save_pretrained(tmp_path / "hf")
    run = import_detr(tmp_path / "hf", tmp_path / "run")
    imported = run_model(run)
    torch.manual_seed(0)
    model = build_model(dataclasses.replace(DetectionConfig.from_dict(run.config).model, num_classes=2))
    before = model.class_embed.weight.clone()
    assert init_from_run(model, run.path) == ["class_embed.weight", "class_embed.bias"]
    assert torch.equal(model.class_embed.weight, before)  # re-initialised head: (3, hidden)
    assert_close(model.query_embed.weight, imported.query_embed.weight)
    assert_close(model.backbone[0].body.layer4[1].conv2.weight, imported.backbone[0].body.layer4[1].conv2.weight)


def test_transformers_4_key_layout_with_a_timm_style_backbone_imports(tmp_path):
    """facebook/detr-resnet-50 on the Hub: `out_proj`, `fc1`, and torchvision names under conv_encoder."""
    import json

    from safetensors.torch import save_file

    from attnkit.app.interop.detr_import import hf_resnet_to_torchvision

    hf_model = hf_detr("basic", seed=9)
    old = {}
    for name, tensor in hf_model.state_dict().items():
        name = name.replace(".o_proj.", ".out_proj.").replace(".mlp.fc", ".fc")
        if name.startswith("model.backbone.model."):
            name = "model.backbone.conv_encoder.model." + hf_resnet_to_torchvision(name[len("model.backbone.model."):])
        old[name] = tensor.contiguous()
    assert "model.backbone.conv_encoder.model.layer2.0.downsample.0.weight" in old
    (tmp_path / "hf").mkdir()
    save_file(old, str(tmp_path / "hf" / "model.safetensors"))
    (tmp_path / "hf" / "config.json").write_text(json.dumps(hf_model.config.to_dict()))
    run = import_detr(tmp_path / "hf", tmp_path / "run")
    assert_same_detections(run_model(run), hf_model)


# ---------------------------------------------------------------- backbones of any layout, greyscale, timm
def small_detr(backbone_config=None, num_channels: int = 3, seed: int = 0, **options):
    """A small DetrForObjectDetection as transformers' DetrModelTester builds them (BACKBONE_CONFIG: a ResNetConfig;
    None with `backbone=NAME` in OPTIONS: a timm ResNet), random batch-norm statistics."""
    torch.manual_seed(seed)
    config = transformers.DetrConfig(
        backbone_config=backbone_config, num_channels=num_channels, use_pretrained_backbone=False, d_model=32,
        encoder_layers=2, decoder_layers=2, encoder_attention_heads=8, decoder_attention_heads=8,
        encoder_ffn_dim=16, decoder_ffn_dim=16, num_queries=12, num_labels=4, **options)
    model = transformers.DetrForObjectDetection(config).eval()
    with torch.no_grad():  # random statistics and affine terms, so the frozen batch norms are not the identity
        for name, tensor in model.state_dict().items():
            if name.endswith("running_mean") or (name.endswith("bias") and "backbone" in name):
                tensor.normal_(0, 0.1)
            elif name.endswith("running_var") or (name.endswith("weight") and "backbone" in name and tensor.dim() == 1):
                tensor.uniform_(0.5, 1.5)
    return model


def small_resnet(layer_type: str = "bottleneck", depths=(1, 1, 2, 1), hidden_sizes=(10, 20, 30, 40),
                  embedding_size: int = 64, num_channels: int = 3, **options):
    """DetrModelTester's ResNet: bottleneck, depths [1, 1, 2, 1], hidden sizes [10, 20, 30, 40], three outputs."""
    return transformers.ResNetConfig(layer_type=layer_type, depths=list(depths), hidden_sizes=list(hidden_sizes),
                                     embedding_size=embedding_size, num_channels=num_channels,
                                     out_features=[f"stage{i + 1}" for i in range(len(depths))][-3:], **options)


def channel_images(channels: int, seed: int = 1):
    """Two images (2, CHANNELS, 64, 96), the second padded on the right: (images, mask True on padding)."""
    images, mask = random_images(seed)
    return images[:, :channels], mask


def import_and_compare(tmp_path, hf_model, channels: int = 3):
    """Import HF_MODEL's folder; attnkit's logits and boxes are transformers' on the same images (eval)."""
    hf_model.save_pretrained(tmp_path / "hf")
    run = import_detr(tmp_path / "hf", tmp_path / "run")
    images, mask = channel_images(channels)
    with torch.no_grad():
        ours = run_model(run)(images, mask)
        theirs = hf_model(pixel_values=images, pixel_mask=(~mask).long())
    assert_close(ours.logits, theirs.logits, atol=1e-4, rtol=0)
    assert_close(ours.boxes, theirs.pred_boxes, atol=1e-4, rtol=0)
    return run


@pytest.mark.parametrize("resnet, expected", [
    (dict(), ("bottleneck", [1, 1, 2, 1], [10, 20, 30, 40], 64)),  # DetrModelTester's own
    (dict(layer_type="basic", depths=(1, 1, 2, 1), hidden_sizes=(8, 16, 24, 32), embedding_size=12),
     ("basic", [1, 1, 2, 1], [8, 16, 24, 32], 12)),
    (dict(layer_type="basic", depths=(1, 2, 1, 1), hidden_sizes=(64, 128, 256, 512)),
     ("basic", [1, 2, 1, 1], [64, 128, 256, 512], 64)),  # torchvision's widths, other depths
])
def test_a_resnet_of_any_depths_and_widths_imports_with_the_same_outputs(tmp_path, resnet, expected):
    run = import_and_compare(tmp_path, small_detr(small_resnet(**resnet)))
    model = run.config["model"]
    assert model["backbone"] == "resnet" and model["num_channels"] == 3
    assert [model[f"backbone_{k}"] for k in ("block", "depths", "widths", "stem_width")] == list(expected)


def test_greyscale_images_import_with_the_same_outputs(tmp_path):
    run = import_and_compare(tmp_path, small_detr(small_resnet(num_channels=1), num_channels=1, seed=2), channels=1)
    assert run.config["model"]["num_channels"] == 1


def test_a_named_resnet_with_one_channel_keeps_its_name(tmp_path):
    resnet = small_resnet(layer_type="basic", depths=(2, 2, 2, 2), hidden_sizes=(64, 128, 256, 512), num_channels=1)
    run = import_and_compare(tmp_path, small_detr(resnet, num_channels=1, seed=4), channels=1)
    assert (run.config["model"]["backbone"], run.config["model"]["num_channels"]) == ("resnet18", 1)


@pytest.mark.parametrize("resnet, channels", [
    (dict(), 3),
    (dict(layer_type="basic", depths=(1, 1, 2, 1), hidden_sizes=(8, 16, 24, 32), embedding_size=12, num_channels=1), 1),
])
def test_any_layout_exports_back_to_transformers_with_the_same_outputs(tmp_path, resnet, channels):
    hf_model = small_detr(small_resnet(**resnet), num_channels=channels, seed=6)
    run = import_and_compare(tmp_path, hf_model, channels)
    export_hf(run.path, tmp_path / "exported")
    reloaded = transformers.DetrForObjectDetection.from_pretrained(tmp_path / "exported").eval()
    backbone = reloaded.config.backbone_config
    assert (list(backbone.depths), list(backbone.hidden_sizes)) == (list(hf_model.config.backbone_config.depths),
                                                                    list(hf_model.config.backbone_config.hidden_sizes))
    images, mask = channel_images(channels)
    with torch.no_grad():
        ours = run_model(run)(images, mask)
        theirs = reloaded(pixel_values=images, pixel_mask=(~mask).long())
    assert_close(ours.logits, theirs.logits, atol=1e-4, rtol=0)
    assert_close(ours.boxes, theirs.pred_boxes, atol=1e-4, rtol=0)


def test_a_dilated_run_is_refused_by_the_export(tmp_path):
    config = DetectionConfig(model=dataclasses.replace(preset("tiny")[0], backbone="resnet50", dilation=True))
    run = RunFolder.create(tmp_path / "run", "detection", config.to_dict())
    save_weights(run.last_weights, build_model(config.model).state_dict())
    with pytest.raises(ConfigError, match="dilation"):
        export_hf(run.path, tmp_path / "exported", weights="last")


@pytest.mark.parametrize("name, channels, dilation", [("resnet18", 3, False), ("resnet18", 1, False),
                                                      ("resnet50", 3, True)])
def test_a_timm_backbone_imports_with_the_same_outputs(tmp_path, name, channels, dilation):
    """facebook/detr-resnet-50's default: transformers builds timm's ResNet (torchvision's names, output_stride 16
    with dilation)."""
    pytest.importorskip("timm")
    hf_model = small_detr(None, num_channels=channels, seed=8, backbone=name, use_timm_backbone=True,
                           dilation=dilation)
    assert hf_model.config.backbone_config.model_type == "timm_backbone"
    run = import_and_compare(tmp_path, hf_model, channels)
    model = run.config["model"]
    assert (model["backbone"], model["num_channels"], model["dilation"]) == (name, channels, dilation)


def saved_folder(tmp_path, **changes):
    """A saved DETR folder (transformers' ResNet) whose config.json then gets CHANGES (backbone_config.* keys
    change the backbone's)."""
    import json

    folder = tmp_path / "hf"
    small_detr(small_resnet(layer_type="basic", hidden_sizes=(8, 16, 24, 32))).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        section, _, name = key.rpartition(".")
        (config[section] if section else config)[name] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("changes, message", [
    ({"backbone_config.hidden_act": "gelu"}, "backbone_config.hidden_act 'gelu'"),
    ({"backbone_config.downsample_in_first_stage": True}, "backbone_config.downsample_in_first_stage"),
    ({"backbone_config.out_features": ["stage2", "stage3"]}, "backbone_config.out_features"),
    ({"backbone_config.model_type": "convnext"}, "backbone_config.model_type 'convnext'"),
    ({"position_embedding_type": "learned"}, "position_embedding_type 'learned'"),
    ({"backbone_config": {"model_type": "timm_backbone", "backbone": "tf_mobilenetv3_small_075"}},
     "backbone 'tf_mobilenetv3_small_075'"),
    ({"backbone_config": {"model_type": "timm_backbone", "backbone": "resnet50d"}}, "backbone 'resnet50d'"),
    ({"backbone_config": {"model_type": "timm_backbone", "backbone": "resnet18", "output_stride": 8}},
     "backbone_config.output_stride 8"),
    ({"backbone_config": {"model_type": "timm_backbone", "backbone": "resnet18", "output_stride": 16}},
     "dilation .*basic"),  # a dilated basic-block ResNet
])
def test_what_cannot_map_is_refused_with_the_field_named_and_nothing_written(tmp_path, changes, message):
    with pytest.raises((CheckpointError, ConfigError), match=message):
        import_detr(saved_folder(tmp_path, **changes), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_backbone_of_three_stages_is_refused(tmp_path):
    small_detr(small_resnet(depths=(1, 1, 1), hidden_sizes=(8, 16, 32))).save_pretrained(tmp_path / "hf")
    with pytest.raises(CheckpointError, match=r"backbone_config.depths \[1, 1, 1\] \(attnkit's ResNet has 4"):
        import_detr(tmp_path / "hf", tmp_path / "run")


def test_an_official_layout_checkpoint_of_any_resnet_imports_with_the_same_outputs(tmp_path):
    hf_model = small_detr(small_resnet(num_channels=1), num_channels=1, seed=10)
    torch.save({"model": hf_to_official(hf_model.state_dict())}, tmp_path / "detr-grey.pth")
    run = import_detr(tmp_path / "detr-grey.pth", tmp_path / "run", num_heads=8)
    images, mask = channel_images(1)
    with torch.no_grad():
        ours = run_model(run)(images, mask)
        theirs = hf_model(pixel_values=images, pixel_mask=(~mask).long())
    assert_close(ours.logits, theirs.logits, atol=1e-4, rtol=0)
    assert_close(ours.boxes, theirs.pred_boxes, atol=1e-4, rtol=0)
    assert run.config["model"]["backbone_widths"] == [10, 20, 30, 40]


def test_an_imported_greyscale_model_of_any_layout_fine_tunes_and_detects(tmp_path):
    """`train detection --init`, `detect` and `eval detection` feed it grey images (model.num_channels, the
    transforms)."""
    from PIL import Image
    from typer.testing import CliRunner

    from attnkit.app.cli import load_commands

    hf_model = small_detr(small_resnet(num_channels=1), num_channels=1, seed=12)
    hf_model.save_pretrained(tmp_path / "hf")
    imported = import_detr(tmp_path / "hf", tmp_path / "imported").path
    runner = CliRunner()
    result = runner.invoke(load_commands(), [str(a) for a in (
        "train", "detection", "--preset", "tiny", "--data", "shapes", "--shapes-train-images", "4",
        "--shapes-val-images", "2", "--shapes-image-size", "64", "--eval-every-minutes", "10", "--steps", "2",
        "--init", imported, "--out", tmp_path / "run")])
    assert result.exit_code == 0, result.output
    trained = RunFolder.open(tmp_path / "run", "detection").config["model"]
    assert (trained["num_channels"], trained["backbone_widths"]) == (1, [10, 20, 30, 40])
    Image.new("RGB", (80, 60), (200, 30, 30)).save(tmp_path / "red.png")
    result = runner.invoke(load_commands(), ["detect", str(tmp_path / "run"), str(tmp_path / "red.png"), "--out",
                                             str(tmp_path / "detections")])
    assert result.exit_code == 0, result.output
    result = runner.invoke(load_commands(), ["eval", "detection", str(tmp_path / "run"), "--weights", "last"])
    assert result.exit_code == 0, result.output


def test_dilation_with_transformers_own_resnet_is_not_applied_as_transformers_does_not(tmp_path):
    hf_model = small_detr(small_resnet(), seed=14, dilation=True)  # ResNetBackbone has no dilation
    run = import_and_compare(tmp_path, hf_model)
    assert run.config["model"]["dilation"] is False


def test_the_import_command_names_the_layout_it_imported(tmp_path):
    from typer.testing import CliRunner

    from attnkit.app.cli import load_commands

    small_detr(small_resnet(num_channels=1), num_channels=1, seed=16).save_pretrained(tmp_path / "hf")
    result = CliRunner().invoke(load_commands(), ["import", "detr", str(tmp_path / "hf"), "--out",
                                                  str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "imported greyscale DETR ResNet (bottleneck blocks [1, 1, 2, 1], widths [10, 20, 30, 40]): 4 classes" \
        in result.output
