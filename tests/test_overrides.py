"""`--set`: one parser and one refusal rule for every task's config."""

from __future__ import annotations

import pytest

from attnkit import overrides
from attnkit.detection.config import (
    DetectionConfig,
    check_kept as check_detection_kept,
    override as override_detection,
    preset,
)
from attnkit.errors import ConfigError
from attnkit.translation.config import (
    check_kept as check_translation_kept,
    override as override_translation,
    preset as translation_preset,
)


def detection_config() -> DetectionConfig:
    model, train = preset("tiny")
    return DetectionConfig(model=model, train=train, preset="tiny")


@pytest.mark.parametrize("raw, value", [("3", 3), ("1e-4", 1e-4), ("true", True), ("False", False),
                                        ("none", None), ("NULL", None), ("[480, 512]", [480, 512]),
                                        ("resnet18", "resnet18"), ("", "")])
def test_values_read_as_json_none_or_the_string(raw, value):
    assert overrides.parse_value(raw) == value


def test_none_switches_clipping_off_in_both_tasks():
    assert override_translation(translation_preset("tiny"), ["grad_clip=none"]).grad_clip is None
    assert override_detection(detection_config(), ["train.clip_max_norm=none"]).train.clip_max_norm is None


@pytest.mark.parametrize("assignment, message", [("lr", "expected KEY=VALUE, got 'lr'"),
                                                 ("=3", "expected KEY=VALUE"),
                                                 ("model.colour=3", "unknown config key 'model.colour'"),
                                                 ("model=3", "unknown config key 'model'")])
def test_both_tasks_refuse_the_same_way(assignment, message):
    with pytest.raises(ConfigError, match=message):
        override_translation(translation_preset("tiny"), [assignment])
    with pytest.raises(ConfigError, match=message):
        override_detection(detection_config(), [assignment])


def test_detection_sets_only_model_and_train_keys():
    with pytest.raises(ConfigError, match="unknown config key 'data'"):
        override_detection(detection_config(), ["data=elsewhere"])


def test_a_value_of_the_wrong_type_is_a_config_error():
    with pytest.raises(ConfigError, match=r"--set model.num_queries=\[1, 2\]: "):
        override_detection(detection_config(), ["model.num_queries=[1, 2]"])


def test_a_resumed_run_refuses_changes_and_accepts_its_own_values():
    translation, detection = translation_preset("tiny"), detection_config()
    check_translation_kept(translation, [f"grad_clip={translation.grad_clip}"])
    check_detection_kept(detection, [f"train.lr={detection.train.lr}"])
    with pytest.raises(ConfigError, match=r"--resume continues with the run's config.json, which has grad_clip"):
        check_translation_kept(translation, ["grad_clip=none"])
    with pytest.raises(ConfigError, match=r"which has train.clip_max_norm"):
        check_detection_kept(detection, ["train.clip_max_norm=none"])


def test_the_architecture_applies_first_so_its_own_fields_can_be_set():
    config = override_detection(detection_config(), ["model.query_groups=1", "model.arch=fast"])
    assert config.model.arch == "fast" and config.model.query_groups == 1
    assert config.model.hidden_dim == detection_config().model.hidden_dim  # the preset's sizes are kept
    with pytest.raises(ConfigError, match="unknown config key 'model.query_groups'"):
        override_detection(detection_config(), ["model.query_groups=1"])  # tiny is DETR: no query groups
