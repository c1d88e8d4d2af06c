"""Run folders: creation, refusal to overwrite, kind checks, metrics log and curves."""

from __future__ import annotations

import json

import pytest

from attnkit.errors import CheckpointError, ConfigError, DataError
from attnkit.storage import RunFolder


def test_create_writes_config_with_kind_and_format_version(tmp_path):
    run = RunFolder.create(tmp_path / "run", "translation", {"d_model": 32, "betas": (0.9, 0.98)})
    document = json.loads(run.config_path.read_text())
    assert document == {"kind": "translation", "format_version": 1, "d_model": 32, "betas": [0.9, 0.98]}
    opened = RunFolder.open(tmp_path / "run", "translation")
    assert opened.kind == "translation" and opened.config == {"d_model": 32, "betas": [0.9, 0.98]}


def test_a_run_of_another_kind_is_refused(tmp_path):
    RunFolder.create(tmp_path / "run", "detection", {})
    with pytest.raises(CheckpointError, match="run is a detection run, not a translation run"):
        RunFolder.open(tmp_path / "run", "translation")
    with pytest.raises(CheckpointError, match="detection run, not a translation run"):
        RunFolder.create(tmp_path / "run", "translation", {}, resume=True)


def test_a_non_empty_folder_is_not_overwritten(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match=r"run already exists and is not empty; pass --resume"):
        RunFolder.create(tmp_path / "run", "translation", {})
    with pytest.raises(CheckpointError, match="not a run folder"):
        RunFolder.create(tmp_path / "run", "translation", {}, resume=True)
    with pytest.raises(CheckpointError, match="nothing to resume: .*absent does not exist"):
        RunFolder.create(tmp_path / "absent", "translation", {}, resume=True)
    (tmp_path / "empty").mkdir()
    RunFolder.create(tmp_path / "empty", "translation", {})  # an empty existing folder is fine
    with pytest.raises(CheckpointError, match="already exists"):
        RunFolder.create(tmp_path / "empty", "translation", {})
    with pytest.raises(ConfigError, match="reserved"):
        RunFolder.create(tmp_path / "other", "translation", {"kind": "x"})


def test_open_names_missing_and_malformed_config(tmp_path):
    with pytest.raises(CheckpointError, match="no run folder at"):
        RunFolder.open(tmp_path / "absent")
    (tmp_path / "run").mkdir()
    with pytest.raises(CheckpointError, match=r"config\.json is missing"):
        RunFolder.open(tmp_path / "run")
    (tmp_path / "run" / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"config\.json is not valid JSON"):
        RunFolder.open(tmp_path / "run")


def test_metrics_log_truncation(tmp_path):
    run = RunFolder.create(tmp_path / "run", "toy", {})
    for step in (1, 2, 3):
        run.log({"step": step, "split": "train", "loss": 1.0 / step, "lr": 0.1})
    run.log({"step": 3, "split": "valid", "loss": 0.5, "bleu": 12.5, "chrf": 30.0})
    records = run.metrics()
    assert [r["step"] for r in records] == [1, 2, 3, 3] and all("time" in r for r in records)
    assert records[-1]["bleu"] == 12.5
    with open(run.metrics_path, "a") as file:
        file.write('{"step": 4, "spl')  # a crash in the middle of the last write
    assert len(run.metrics()) == 4
    run.truncate_metrics(after_step=2)
    assert [r["step"] for r in run.metrics()] == [1, 2]
    run.metrics_path.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(DataError, match=r"metrics\.jsonl, line 2"):
        run.metrics()


def test_weights_path_names_what_the_run_has(tmp_path):
    run = RunFolder.create(tmp_path / "run", "toy", {})
    run.last_weights.parent.mkdir(parents=True)
    run.last_weights.write_bytes(b"")
    assert run.weights_path("last") == run.last_weights
    with pytest.raises(CheckpointError, match=r"no average weights .* it has: last"):
        run.weights_path("average")
    with pytest.raises(ConfigError, match="choose from best, last, average"):
        run.weights_path("newest")
