"""stdout carries results only: one translation per sentence, one line per image, one JSON object; progress and
messages (the one-time ONNX export's included) go to stderr, on first use as on later ones."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnkit.app.cli import load_commands


def invoke(*args):
    result = CliRunner().invoke(load_commands(), [str(a) for a in args])  # stdout and stderr apart
    assert result.exit_code == 0, result.output
    return result


def attnkit(*args) -> subprocess.CompletedProcess:
    """A real process: output written below Python (ONNX, onnxruntime) is caught too."""
    done = subprocess.run([sys.executable, "-m", "attnkit", *map(str, args)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done


def test_translate_pytorch_prints_one_line_per_sentence(translation_run):
    result = invoke("translate", translation_run, "one two", "three", "four five six")
    assert len(result.stdout.splitlines()) == 3 and result.stderr == ""


def test_translate_onnxruntime_keeps_the_export_off_stdout(translation_run, tmp_path):
    pytest.importorskip("onnxruntime")
    run = shutil.copytree(translation_run, tmp_path / "run")
    first = attnkit("translate", run, "--backend", "onnxruntime", "one two", "three")
    assert len(first.stdout.splitlines()) == 2, first.stdout
    assert f"exporting {run} to ONNX" in first.stderr
    second = attnkit("translate", run, "--backend", "onnxruntime", "one two", "three")
    assert second.stdout == first.stdout and "exporting" not in second.stderr


def test_detect_prints_one_line_per_image_and_the_json_file(detection_run, tmp_path):
    from PIL import Image

    paths = [tmp_path / "a.png", tmp_path / "b.png"]
    for path in paths:
        Image.new("RGB", (48, 40), (20, 30, 40)).save(path)
    result = invoke("detect", detection_run, *paths, "--out", tmp_path / "out", "--threshold", "0", "--json")
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and lines[0].startswith(f"{paths[0]}: ") and lines[1].startswith(f"{paths[1]}: ")
    assert lines[2] == f"detections: {tmp_path / 'out' / 'detections.json'}"


def test_eval_json_is_the_only_stdout_line(detection_run, tmp_path: Path, coco_writer):
    images = [{"id": 1, "file_name": "a.png", "width": 48, "height": 40}]
    boxes = [{"id": 1, "image_id": 1, "category_id": 2, "bbox": [4, 6, 20, 10], "iscrowd": 0}]
    categories = [{"id": 1, "name": "disc"}, {"id": 2, "name": "square"}]
    folder, annotations = coco_writer(tmp_path, images, boxes, categories)
    result = invoke("eval", "detection", detection_run, "--images", folder, "--annotations", annotations, "--json",
                    "--device", "cpu")
    assert len(result.stdout.splitlines()) == 1 and json.loads(result.stdout)["images"] == 1
    assert "data: " in result.stderr  # the dataset summary is a message
