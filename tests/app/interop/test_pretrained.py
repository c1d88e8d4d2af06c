"""Pretrained sources (attnkit.app.interop.pretrained): local paths as they are, Hub ids from the Hugging Face cache
(HF_HUB_OFFLINE=1 and a cache laid out here: nothing is downloaded), and one clear message without the `hub` extra."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from attnkit.app.interop.pretrained import init_run, is_run_folder, local_source
from attnkit.errors import ConfigError

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cache_with(cache, repo_id: str, folder) -> None:
    """The Hugging Face cache layout of one snapshot of REPO_ID holding FOLDER's files."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    shutil.copytree(folder, repo / "snapshots" / COMMIT)


def test_local_paths_are_taken_as_they_are(tmp_path):
    assert local_source(tmp_path) == tmp_path
    missing = tmp_path / "runs" / "missing"  # not an owner/name id: left for the caller to name as missing
    assert local_source(missing) == missing


def test_a_hub_id_without_the_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # as if not installed
    message = r"needs huggingface_hub, of the optional extra `hub`: pip install 'attnkit\[hub\]'"
    with pytest.raises(ConfigError, match=message):
        local_source("facebook/detr-resnet-50")


def test_a_run_folder_is_used_as_it_is_and_a_marian_folder_is_imported(marian_folder, detection_run):
    assert is_run_folder(detection_run) and not is_run_folder(marian_folder)
    assert init_run(detection_run, "detection") == detection_run
    imported = init_run(marian_folder, "translation")
    assert is_run_folder(imported) and (imported / "source.spm").is_file()


def run_offline(tmp_path, *args):
    pytest.importorskip("huggingface_hub")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "attnkit", *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=300)


def test_import_marian_takes_a_hub_id_from_the_cache(marian_folder, tmp_path):
    cache_with(tmp_path / "cache", "Helsinki-NLP/opus-mt-en-de", marian_folder)
    result = run_offline(tmp_path, "import", "marian", "Helsinki-NLP/opus-mt-en-de", "--out", tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert "imported Marian" in result.stdout and is_run_folder(tmp_path / "run")
    missing = run_offline(tmp_path, "import", "marian", "Helsinki-NLP/opus-mt-en-fr", "--out", tmp_path / "other")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "error: Helsinki-NLP/opus-mt-en-fr: not a local file or folder, and not fetched" in missing.stderr


def test_train_detection_inits_from_a_hub_id_in_the_cache(tmp_path):
    from detr_models import hf_detr

    hf_detr("basic", seed=2).save_pretrained(tmp_path / "hf")
    cache_with(tmp_path / "cache", "facebook/detr-resnet-50", tmp_path / "hf")
    out = tmp_path / "run"
    shapes = ["--data", "shapes", "--shapes-train-images", "4", "--shapes-val-images", "2", "--shapes-image-size", "64"]
    result = run_offline(tmp_path, "train", "detection", *shapes, "--preset", "tiny", "--steps", "2", "--init",
                         "facebook/detr-resnet-50", "--out", out, "--device", "cpu", "--eval-every-minutes", "10")
    assert result.returncode == 0, result.stderr
    assert "hub: facebook/detr-resnet-50 -> " in result.stderr and "none started fresh" in result.stderr  # 5 and 5
    config = json.loads((out / "config.json").read_text())
    assert config["init_from"] == "facebook/detr-resnet-50" and config["model"]["num_queries"] == 7
