import json
from dataclasses import fields, replace
from pathlib import Path

import pytest
import torch

from attnkit.detection.architectures import build_model
from attnkit.detection.config import (
    PRESETS,
    DetectionConfig,
    DetectionTrainConfig,
    DetrConfig,
    FastDetrConfig,
    model_from_dict,
    override,
    preset,
    with_arch,
)
from attnkit.errors import ConfigError

OLD_RUNS = Path(__file__).parents[1] / "data" / "old_runs"  # config.json and state-dict layout of commit aa8ea38

# config.json of runs written before `fast` had its own config: every field flat under "model", whatever the arch
OLD_DETR_RUN = {
    "model": {"arch": "detr", "num_classes": 3, "backbone": "resnet18", "dilation": False, "frozen_batchnorm": True,
              "hidden_dim": 64, "num_heads": 4, "enc_layers": 2, "dec_layers": 3, "dim_feedforward": 128,
              "dropout": 0.1, "num_queries": 20, "pre_norm": False, "aux_loss": True, "feature_levels": 3,
              "last_stage": 4, "deformable_attention": True, "deformable_points": 4, "encoder_levels": 2,
              "box_refinement": True, "focal_loss": True, "query_groups": 3, "two_stage": True, "denoising_groups": 0},
    "train": {"lr": 0.0001, "lr_backbone": 1e-05, "weight_decay": 0.0001, "clip_max_norm": 0.1, "batch_size": 2,
              "lr_drop": 0.6666666666666666, "train_scales": [480, 512], "max_size": 1333, "val_size": 800,
              "flip": True, "crop_min_fraction": 0.5, "cost_class": 1.0, "cost_bbox": 5.0, "cost_giou": 2.0,
              "ce_loss_coef": 1.0, "bbox_loss_coef": 5.0, "giou_loss_coef": 2.0, "eos_coef": 0.1, "seed": 0,
              "accumulate": 1, "amp": "auto"},
    "preset": "detr-r50", "data": "shapes", "class_names": ["disc", "square", "triangle"], "category_ids": [1, 2, 3],
    "shapes": {}}
# older still: before last_stage, encoder_levels (`lite_encoder` instead), two-stage, denoising and the focal
# weights as fields; a learning-rate drop after N epochs
OLD_FAST_RUN = {
    "model": {"arch": "fast", "num_classes": 5, "backbone": "resnet18", "dilation": False, "frozen_batchnorm": False,
              "hidden_dim": 128, "num_heads": 8, "enc_layers": 2, "dec_layers": 2, "dim_feedforward": 512,
              "dropout": 0.0, "num_queries": 15, "pre_norm": False, "aux_loss": True, "feature_levels": 3,
              "deformable_attention": True, "deformable_points": 4, "lite_encoder": True, "box_refinement": True,
              "focal_loss": True, "query_groups": 3},
    "train": {"lr": 0.0003, "lr_backbone": 0.0003, "weight_decay": 0.0001, "clip_max_norm": 0.1, "batch_size": 4,
              "lr_drop_epochs": 100, "train_scales": [96], "max_size": 160, "val_size": 96, "flip": True,
              "crop_min_fraction": 1.0, "cost_class": 1.5, "cost_bbox": 5.0, "cost_giou": 2.0, "ce_loss_coef": 1.0,
              "bbox_loss_coef": 5.0, "giou_loss_coef": 2.0, "eos_coef": 0.1, "seed": 0},
    "preset": "small", "data": "shapes", "class_names": ["a", "b", "c", "d", "e"], "category_ids": [1, 2, 3, 4, 5],
    "shapes": {"image_size": 96}}


def test_detr_r50_preset_is_the_papers_configuration():
    model, train = preset("detr-r50")
    assert (model.backbone, model.hidden_dim, model.num_heads, model.enc_layers, model.dec_layers) == \
        ("resnet50", 256, 8, 6, 6)
    assert (model.dim_feedforward, model.num_queries, model.dropout, model.aux_loss) == (2048, 100, 0.1, True)
    assert (train.lr, train.lr_backbone, train.weight_decay, train.clip_max_norm) == (1e-4, 1e-5, 1e-4, 0.1)
    assert (train.cost_class, train.cost_bbox, train.cost_giou, train.eos_coef) == (1, 5, 2, 0.1)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_configs_round_trip_through_json(name):
    model, train = preset(name)
    config = DetectionConfig(model, train, preset=name, class_names=("a", "b"), category_ids=(3, 9))
    assert DetectionConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_overrides_and_their_errors():
    config = override(DetectionConfig(*preset("small")), ["model.num_queries=7", "train.flip=false", "train.lr=1e-3"])
    assert config.model.num_queries == 7 and config.train.flip is False and config.train.lr == 1e-3
    with pytest.raises(ConfigError, match="model.hidden_dim"):
        override(config, ["model.hidden=3"])
    with pytest.raises(ConfigError, match="divisible"):
        override(config, ["model.num_heads=3"])
    with pytest.raises(ConfigError, match="max_size"):
        DetectionTrainConfig(train_scales=(900,), max_size=800)
    with pytest.raises(ConfigError, match="unknown preset"):
        preset("huge")
    with pytest.raises(ConfigError, match="dropout"):
        DetrConfig(dropout=1.5)


def test_dilation_needs_a_bottleneck_resnet():
    assert DetrConfig(backbone="resnet50", dilation=True).dilation
    with pytest.raises(ConfigError, match="dilation.*resnet18"):
        DetrConfig(backbone="resnet18", dilation=True)


def test_an_old_detr_run_loads_as_the_papers_model_without_the_technique_fields():
    config = DetectionConfig.from_dict(json.loads(json.dumps(OLD_DETR_RUN)))
    assert type(config.model) is DetrConfig and config.model.arch == "detr"
    assert config.model == DetrConfig(num_classes=3, backbone="resnet18", frozen_batchnorm=True, hidden_dim=64,
                                      num_heads=4, enc_layers=2, dec_layers=3, dim_feedforward=128, num_queries=20)
    assert config.train.focal_cost_class == 2.0 and config.train.focal_loss_coef == 2.0
    assert config.class_names == ("disc", "square", "triangle") and config.train.train_scales == (480, 512)
    saved = config.to_dict()["model"]
    added = {"num_channels": 3, "backbone_block": "", "backbone_depths": (), "backbone_widths": (),
             "backbone_stem_width": 64}  # fields added since, at their defaults (a torchvision ResNet, RGB)
    assert saved == {**{k: v for k, v in OLD_DETR_RUN["model"].items() if k in saved}, **added}  # DETR's fields
    assert saved["arch"] == "detr" and "feature_levels" not in saved


def test_an_old_fast_run_loads_with_the_settings_it_trained_with():
    config = DetectionConfig.from_dict(json.loads(json.dumps(OLD_FAST_RUN)))
    model = config.model
    assert type(model) is FastDetrConfig and model.arch == "fast"
    assert model == FastDetrConfig(num_classes=5, backbone="resnet18", hidden_dim=128, enc_layers=2, dec_layers=2,
                                   dim_feedforward=512, dropout=0.0, num_queries=15, last_stage=5,
                                   encoder_levels=2, two_stage=False, denoising_groups=0,
                                   iou_aware=False)  # lite: all but C3; the focal loss it trained with
    train = config.train
    assert train.lr_drop == 1.0 and train.cost_class == 1.5
    assert (train.focal_cost_class, train.focal_loss_coef) == (3.0, 2.0)  # FOCAL_WEIGHT (2) x cost_class, ce_loss_coef
    assert DetectionConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert config.to_dict()["model"]["arch"] == "fast"


@pytest.mark.parametrize("name", sorted(p for p in PRESETS if (OLD_RUNS / f"detection-{p}.json").is_file()))
def test_presets_build_the_models_they_built_before_fast_had_its_own_config(name):
    old = json.loads((OLD_RUNS / f"detection-{name}.json").read_text())
    model, _ = preset(name)
    assert model.arch == old["config"]["model"]["arch"]
    with torch.device("meta"):
        built = build_model(replace(model, num_classes=old["config"]["model"]["num_classes"]))
    assert {name: list(tensor.shape) for name, tensor in built.state_dict().items()} == old["state_dict"]


def test_detr_has_the_papers_fields_only_and_fast_adds_its_techniques():
    detr = {f.name for f in fields(DetrConfig)}
    assert not detr & {"feature_levels", "last_stage", "focal_loss", "query_groups", "two_stage", "denoising_groups"}
    assert detr < {f.name for f in fields(FastDetrConfig)}
    DetrConfig(num_queries=7)  # nothing of fast's is checked for DETR
    with pytest.raises(TypeError):
        DetrConfig(query_groups=2)


def test_with_arch_keeps_detrs_fields_and_takes_the_others_defaults():
    small, _ = preset("small")
    detr = with_arch(small, "detr")
    assert type(detr) is DetrConfig and (detr.hidden_dim, detr.num_queries, detr.backbone) == (128, 15, "resnet18")
    fast = with_arch(detr, "fast", query_groups=1)
    assert fast == replace(small, last_stage=5, query_groups=1, encoder_levels=1)  # technique fields: fast's defaults
    with pytest.raises(ConfigError, match="unknown detector architecture 'nope'; choose one of detr, fast"):
        with_arch(small, "nope")
    with pytest.raises(ConfigError, match="unknown detector architecture"):
        DetectionConfig.from_dict({**OLD_DETR_RUN, "model": {**OLD_DETR_RUN["model"], "arch": "nope"}})


def test_overrides_switch_the_architecture_both_ways():
    small = DetectionConfig(*preset("small"), preset="small")
    detr = override(small, ["model.arch=detr"])
    assert type(detr.model) is DetrConfig and detr.model.hidden_dim == 128
    fast = override(detr, ["model.arch=fast"])
    assert type(fast.model) is FastDetrConfig and fast.model.last_stage == 5
    with pytest.raises(ConfigError, match="model.query_groups"):  # not a field of DETR's
        override(detr, ["model.query_groups=1"])


def test_focal_weights_are_checked():
    with pytest.raises(ConfigError, match="focal_alpha"):
        DetectionTrainConfig(focal_alpha=1.5)
    with pytest.raises(ConfigError, match="focal_gamma"):
        DetectionTrainConfig(focal_gamma=-1)


def test_runs_saved_with_shared_values_off_load_and_runs_trained_with_them_are_refused():
    """`shared_values` was removed: every fast run saved while it existed has it (off, unless trained with it)."""
    saved = {"arch": "fast", "encoder_levels": 2, "two_stage": True, "iou_aware": True, "shared_values": False}
    assert model_from_dict(saved) == FastDetrConfig(encoder_levels=2)
    assert model_from_dict({"arch": "detr", "shared_values": False}) == DetrConfig()  # older runs saved it for DETR
    with pytest.raises(ConfigError, match="trained with model.shared_values"):
        model_from_dict({"arch": "fast", "shared_values": True})
