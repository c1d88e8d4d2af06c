"""DETR in and out: Hugging Face folders and official-layout checkpoints give the same logits and boxes."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
import torch
from conftest import hf_detr, random_images
from torch.testing import assert_close

from attnkit.detection.architectures import build_model
from attnkit.detection.config import DetectionConfig, preset
from attnkit.errors import CheckpointError
from attnkit.app.interop.detr_import import COCO_91, hf_to_official, import_detr
from attnkit.app.interop.hf_export import export_hf
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
    state = {k: v for k, v in hf_to_official(hf_detr("basic").state_dict()).items()}
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
