"""Command-line config overrides (`--set KEY=VALUE`) with random keys and values: a config or a ConfigError."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from attnkit.detection import config as detection_config
from attnkit.errors import ConfigError
from attnkit.translation import config as translation_config

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
values = st.sampled_from(["-1", "0", "0.5", "1e9", "nan", "inf", "true", "none", "[]", "[1, 2]", "{}", '"x"', "",
                          "abc", "[\"a\"]", "1.5", "-0.0", "[16, 8]", "{\"a\": 1}"]) | st.text(max_size=5)


def _translation_keys() -> list[str]:
    values_ = translation_config.preset(translation_config.PRESET_NAMES[0]).to_dict()
    return [k for k in values_ if k != "model"] + [f"model.{k}" for k in values_["model"]] + ["unknown", "model."]


def _detection_keys() -> list[str]:
    model, train = detection_config.preset("tiny")
    return [f"model.{k}" for k in model.__dataclass_fields__] + [f"train.{k}" for k in train.__dataclass_fields__]


@SETTINGS
@given(data=st.data())
def test_translation_overrides_give_a_config_or_a_config_error(data):
    keys = st.sampled_from(_translation_keys())
    assignments = data.draw(st.lists(st.builds("{}={}".format, keys, values), min_size=1, max_size=3))
    base = translation_config.preset(translation_config.PRESET_NAMES[0])
    try:
        translation_config.override(base, assignments)
    except ConfigError as error:
        assert str(error)


@SETTINGS
@given(data=st.data())
def test_detection_overrides_give_a_config_or_a_config_error(data):
    keys = st.sampled_from(_detection_keys())
    assignments = data.draw(st.lists(st.builds("{}={}".format, keys, values), min_size=1, max_size=3))
    model, train = detection_config.preset("tiny")
    base = detection_config.DetectionConfig(model=model, train=train)
    try:
        detection_config.override(base, assignments)
    except ConfigError as error:
        assert str(error)
