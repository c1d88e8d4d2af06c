"""`make demo`'s task parts run end to end (a few seconds of training each) and write what the README lists."""

from __future__ import annotations

from pathlib import Path

from attnkit.app.demo import demo_parts


def test_the_demo_runs_every_registered_task_after_the_attention_core():
    assert [name for name, _ in demo_parts()] == ["attention core", "detection", "translation"]


def test_the_detection_part_trains_and_draws_its_pictures(tmp_path: Path, capsys):
    from attnkit.app.detection.demo_part import detection_demo

    detection_demo(tmp_path, minutes=0.05)
    run = tmp_path / "run"
    assert (run / "report.html").is_file() and (run / "weights" / "last.safetensors").is_file()
    assert len(list((tmp_path / "pictures").glob("*.png"))) == 6
    assert "ground truth (left) | predictions" in capsys.readouterr().out


def test_the_translation_part_trains_scores_and_draws_its_attention(tmp_path: Path, capsys):
    from attnkit.app.translation.demo_part import translation_demo

    translation_demo(tmp_path, minutes=0.05)
    assert (tmp_path / "run" / "report.html").is_file() and (tmp_path / "cross_attention.png").is_file()
    out = capsys.readouterr().out
    assert "test, 500 unseen numbers, beam 4: exact match" in out and "seventy-one -> " in out
