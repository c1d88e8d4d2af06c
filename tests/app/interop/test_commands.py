"""`attnkit import` and `attnkit export`: one command each way, `error: ...` and exit 2 on bad input."""

from __future__ import annotations

import torch
from typer.testing import CliRunner

from attnkit.app.cli import load_commands

runner = CliRunner()


def test_import_marian_then_translate_and_export(marian_folder, tmp_path):
    app = load_commands()
    result = runner.invoke(app, ["import", "marian", str(marian_folder), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "imported Marian" in result.output
    result = runner.invoke(app, ["translate", str(tmp_path / "run"), "twenty-one"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["export", "hf", str(tmp_path / "run"), "--out", str(tmp_path / "hf")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "hf" / "config.json").is_file() and (tmp_path / "hf" / "vocab.json").is_file()


def test_bad_input_is_one_error_line_and_exit_2(tmp_path):
    app = load_commands()
    torch.save({"model": {"query_embed.weight": torch.zeros(3, 4)}}, tmp_path / "partial.pth")
    for argv in (["import", "detr", str(tmp_path / "missing.pth"), "--out", str(tmp_path / "a")],
                 ["import", "detr", str(tmp_path / "partial.pth"), "--out", str(tmp_path / "b")],
                 ["import", "marian", str(tmp_path), "--out", str(tmp_path / "c")],
                 ["export", "hf", str(tmp_path / "no-run"), "--out", str(tmp_path / "d")]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 2, (argv, result.output)
        assert "error:" in result.output and "Traceback" not in result.output
