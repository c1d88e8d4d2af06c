import json

import pytest

from attnkit.detection.config import PRESETS, DetectionConfig, DetectionTrainConfig, DetrConfig, override, preset
from attnkit.errors import ConfigError


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
