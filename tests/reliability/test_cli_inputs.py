"""Bad input through the command line: one `error: ...` line naming what is wrong, exit code 2, no traceback."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attnkit.app.cli import load_commands

runner = CliRunner()


def _fails_cleanly(argv: list[str], *expected: str) -> None:
    result = runner.invoke(load_commands(), [str(arg) for arg in argv])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "error: " in result.output, result.output
    for text in expected:
        assert text in result.output, result.output


def test_a_malformed_corpus_line_is_named(tmp_path):
    (tmp_path / "train.tsv").write_bytes(b"eins\tone\nzwei\xff\ttwo\n")
    (tmp_path / "valid.tsv").write_text("drei\tthree\n")
    _fails_cleanly(["train", "translation", "--data", tmp_path, "--out", tmp_path / "run", "--steps", "1",
                    "--device", "cpu"], "train.tsv, line 2: not valid UTF-8")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("assignment", ["lr_scale=abc", "model.d_model=[1]", "no_such_key=1"])
def test_a_config_value_of_the_wrong_type_is_named(tmp_path, assignment):
    (tmp_path / "train.tsv").write_text("eins\tone\n")
    (tmp_path / "valid.tsv").write_text("drei\tthree\n")
    _fails_cleanly(["train", "translation", "--data", tmp_path, "--out", tmp_path / "run", "--steps", "1",
                    "--device", "cpu", "--set", assignment], assignment.split("=")[0])


def test_a_run_folder_of_another_kind_or_version_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps({"kind": "detection", "format_version": 1}))
    _fails_cleanly(["eval", "translation", tmp_path / "run", "--data", "numbers:de"], "is a detection run")
    (tmp_path / "run" / "config.json").write_text(json.dumps({"kind": "translation", "format_version": 99}))
    _fails_cleanly(["eval", "translation", tmp_path / "run", "--data", "numbers:de"], "format_version 99")


def test_a_coco_file_name_outside_the_image_folder_is_refused(tmp_path):
    (tmp_path / "images").mkdir()
    annotations = tmp_path / "instances.json"
    annotations.write_text(json.dumps({"images": [{"id": 1, "file_name": "../../etc/passwd", "width": 8,
                                                   "height": 8}], "annotations": [], "categories": [{"id": 1}]}))
    _fails_cleanly(["train", "detection", "--images", tmp_path / "images", "--annotations", annotations,
                    "--out", tmp_path / "run", "--steps", "1", "--device", "cpu"],
                   "instances.json: images[0] (id 1) has file_name '../../etc/passwd'")
