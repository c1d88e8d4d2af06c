"""TranslationConfig's decoding rules: saved and reloaded, defaulted for run folders written before
them, validated, and overridable with --set like any other key."""

from __future__ import annotations

import dataclasses

import pytest

from attnkit.errors import ConfigError
from attnkit.translation.config import TranslationConfig, override, preset
from attnkit.translation.decoding import DecodingConfig
from attnkit.translation.model import Seq2SeqConfig
from attnkit.translation.tokenizer import EOS_ID


def test_decoding_rules_round_trip_through_the_saved_dict():
    rules = DecodingConfig(length_penalty_form="power", early_stopping="never", max_output_length=11,
                           min_output_length=2, forced_at_limit=None, banned_outputs=(0, 5),
                           no_repeat_ngram_size=3, renormalize=True, start_token=0)
    config = dataclasses.replace(preset("tiny"), decoding=rules)
    again = TranslationConfig.from_dict(config.to_dict())
    assert again == config and again.decoding.banned_outputs == (0, 5)


def test_a_config_written_before_the_rules_loads_with_attnkits_search():
    saved = preset("tiny").to_dict()
    del saved["decoding"]
    saved["model"]["suppressed_outputs"] = [1, 0]  # a Marian import of before: <s> and pad excluded pre-softmax
    config = TranslationConfig.from_dict(saved)
    assert config.decoding == DecodingConfig("gnmt", True)  # the defaults when it was written
    assert (config.decoding.length_penalty_form, config.decoding.early_stopping, config.decoding.max_output_length,
            config.decoding.forced_at_limit) == ("gnmt", True, None, EOS_ID)
    assert config.model.suppressed_outputs == (1, 0)


@pytest.mark.parametrize(("saved", "forced"), [(True, EOS_ID), (False, None)])
def test_a_config_written_with_force_eos_at_limit_loads_with_the_same_rules(saved, forced):
    """config.json written before the forced token had an id: force_eos_at_limit true / false is </s> / none,
    and the config saves again in today's keys."""
    written = preset("tiny").to_dict()
    written["decoding"] = {"length_penalty_form": "power", "early_stopping": False, "max_output_length": 20,
                           "force_eos_at_limit": saved, "banned_outputs": [0]}
    config = TranslationConfig.from_dict(written)
    assert config.decoding == DecodingConfig(length_penalty_form="power", early_stopping=False, max_output_length=20,
                                             forced_at_limit=forced, banned_outputs=(0,))
    assert "force_eos_at_limit" not in config.to_dict()["decoding"]
    assert TranslationConfig.from_dict(config.to_dict()) == config
    written["decoding"]["forced_at_limit"] = 7
    with pytest.raises(ConfigError, match="force_eos_at_limit"):
        TranslationConfig.from_dict(written)


@pytest.mark.parametrize(("values", "message"), [
    ({"length_penalty_form": "linear"}, "length_penalty_form"), ({"early_stopping": "sometimes"}, "early_stopping"),
    ({"max_output_length": 0}, "max_output_length"), ({"banned_outputs": (2,)}, "banned_outputs"),
    ({"unknown": 1}, "decoding.unknown"),
    ({"forced_at_limit": -1}, "forced_at_limit"), ({"forced_at_limit": True}, "forced_at_limit")])
def test_bad_rules_are_refused_by_name(values, message):
    saved = preset("tiny").to_dict()
    saved["decoding"].update(values)
    with pytest.raises(ConfigError, match=message):
        TranslationConfig.from_dict(saved)


def test_rules_are_set_like_any_key():
    config = override(preset("tiny"), ["decoding.early_stopping=never", "decoding.max_output_length=30"])
    assert (config.decoding.early_stopping, config.decoding.max_output_length) == ("never", 30)


@pytest.mark.parametrize("activation", ["gelu_tanh", "quick_gelu", "identity"])
def test_activations_by_name(activation):
    assert Seq2SeqConfig(activation=activation).activation == activation
    with pytest.raises(ConfigError, match="activation"):
        Seq2SeqConfig(activation="prelu")
