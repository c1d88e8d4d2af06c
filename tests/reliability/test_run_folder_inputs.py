"""Run folders and checkpoint files from strangers: another kind, another version, random bytes."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st
from torch import nn

from attnkit.errors import CheckpointError
from attnkit.storage import RunFolder, load_training_state, load_weights, save_weights

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                       max_size=3), max_leaves=8)
configs = st.fixed_dictionaries({}, optional={"kind": st.sampled_from(["toy", "detection"]) | json_values,
                                              "format_version": st.sampled_from([1, 2, 0, "1"]) | json_values})


def _folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="attnkit-reliability-"))


@SETTINGS
@given(document=configs | json_values | st.binary(max_size=32))
def test_random_config_json_opens_as_a_toy_run_or_raises_checkpoint_error(document):
    folder = _folder()
    text = document if isinstance(document, bytes) else json.dumps(document).encode()
    (folder / "config.json").write_bytes(text)
    try:
        run = RunFolder.open(folder, "toy")
    except CheckpointError as error:
        assert str(folder) in str(error)
        return
    assert run.kind == "toy" and isinstance(document, dict) and document["format_version"] == 1


@pytest.mark.parametrize(("kind", "version", "message"), [
    ("detection", 1, r"is a detection run, not a toy run"),
    ("toy", 2, r"has format_version 2; this attnkit reads version 1"),
    ("toy", None, r"has format_version None"),
])
def test_a_run_of_another_kind_or_version_is_refused_by_name(tmp_path, kind, version, message):
    (tmp_path / "config.json").write_text(json.dumps({"kind": kind, "format_version": version}))
    with pytest.raises(CheckpointError, match=message):
        RunFolder.open(tmp_path, "toy")
    with pytest.raises(CheckpointError, match=message):
        RunFolder.create(tmp_path, "toy", {}, resume=True)


@SETTINGS
@given(data=st.binary(max_size=300), keep=st.integers(0, 400))
def test_random_or_truncated_bytes_as_a_checkpoint_raise_checkpoint_error(data, keep):
    folder = _folder()
    torch.manual_seed(0)
    good = save_weights(folder / "good.safetensors", nn.Linear(3, 2).state_dict(), {"kind": "toy"})
    whole = good.read_bytes()
    for name, content in (("random.safetensors", data), ("cut.safetensors", whole[: keep % len(whole)]),
                          ("spliced.safetensors", whole[:keep % len(whole)] + data)):
        path = folder / name
        path.write_bytes(content)
        for load in (lambda p: load_weights(p, nn.Linear(3, 2)), load_training_state):
            with pytest.raises(CheckpointError, match=name):
                load(path)
