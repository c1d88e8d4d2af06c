"""`attnkit train translation --init SOURCE`: fine-tuning an imported Marian model (or a run) on the user's corpus,
keeping its config and SentencePiece vocabularies."""

from __future__ import annotations

import json

import torch
from typer.testing import CliRunner

import attnkit.app.translation.recipe as recipe
from attnkit.app.cli import load_commands
from attnkit.app.interop.marian_import import import_marian
from attnkit.storage import read_weights

SMALL = ["--steps", "1", "--device", "cpu", "--set", "max_tokens=300", "--set", "eval_sentences=4"]


def invoke(*args):
    return CliRunner().invoke(load_commands(), [str(a) for a in args])


def record_initial_weights(monkeypatch) -> dict[str, torch.Tensor]:
    """The weights the Trainer starts from, filled in when `train` builds it."""
    started: dict[str, torch.Tensor] = {}

    class Recording(recipe.Trainer):
        def __init__(self, task, *args, **kwargs):
            started.update({name: tensor.clone() for name, tensor in task.model.state_dict().items()})
            super().__init__(task, *args, **kwargs)

    monkeypatch.setattr(recipe, "Trainer", Recording)
    return started


def test_a_marian_folder_fine_tunes_with_its_config_vocabulary_and_weights(marian_folder, tmp_path, monkeypatch):
    data, out = tmp_path / "data", tmp_path / "run"
    assert invoke("data", "numbers", "--out", data, "--max-number", "60").exit_code == 0
    started = record_initial_weights(monkeypatch)
    result = invoke("train", "translation", "--data", data, "--out", out, "--init", marian_folder, *SMALL)
    assert result.exit_code == 0, result.output
    imported = import_marian(marian_folder, tmp_path / "imported").path
    init, _ = read_weights(imported / "weights" / "best.safetensors")
    assert f"init: {len(init)} tensors loaded" in result.output and "none started fresh" in result.output
    assert started.keys() == init.keys()
    for name, tensor in init.items():
        assert torch.equal(started[name], tensor), name
    config, before = (json.loads((folder / "config.json").read_text()) for folder in (out, imported))
    assert config["model"] == before["model"] and config["decoding"] == before["decoding"]
    assert config["max_tokens"] == 300  # --set still applies
    for name in ("source.spm", "target.spm", "sentencepiece_vocab.json"):  # SentencePiece, not a new BPE
        assert (out / name).read_bytes() == (imported / name).read_bytes(), name
    assert not (out / "tokenizer.json").exists()


def test_init_with_a_preset_is_refused_before_anything_is_written(marian_folder, tmp_path):
    result = invoke("train", "translation", "--data", "numbers:de", "--out", tmp_path / "run", "--init",
                    marian_folder, "--preset", "tiny", *SMALL)
    assert result.exit_code == 2 and "--init gives the model" in result.output, result.output
    assert not (tmp_path / "run").exists()
