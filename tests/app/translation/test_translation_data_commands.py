"""`attnkit data prepare translation DIR`: the cache that training then maps, resumes included; bad input exits 2."""

from __future__ import annotations

from typer.testing import CliRunner

from attnkit.app.cli import load_commands

SMALL = ["--set", "model.d_model=32", "--set", "model.num_heads=2", "--set", "model.d_ff=64",
         "--set", "model.num_encoder_layers=1", "--set", "model.num_decoder_layers=1", "--set", "vocab_size=200",
         "--set", "max_tokens=300", "--set", "max_length=64", "--set", "eval_sentences=4"]


def invoke(*args: str):
    return CliRunner().invoke(load_commands(), list(args))


def test_prepare_then_train_and_resume_use_the_cache(tmp_path):
    data, run = tmp_path / "data", tmp_path / "run"
    assert invoke("data", "numbers", "--out", str(data), "--lang", "fr", "--max-number", "120").exit_code == 0
    prepared = invoke("data", "prepare", "translation", str(data), "--preset", "tiny", "--set", "vocab_size=200")
    assert prepared.exit_code == 0, prepared.output
    folder = prepared.stdout.splitlines()[0].removeprefix("prepared: ")
    assert folder.startswith(str(data / ".attnkit-cache")) and "train: " in prepared.stdout
    assert "training the BPE tokenizer" in prepared.stderr and "encoded" in prepared.stderr  # progress on stderr
    trained = invoke("train", "translation", "--data", str(data), "--out", str(run), "--steps", "2",
                     "--preset", "tiny", *SMALL)
    assert trained.exit_code == 0, trained.output
    assert f"prepared corpus {folder} (cached" in trained.output and "preparing" not in trained.output
    resumed = invoke("train", "translation", "--data", str(data), "--out", str(run), "--steps", "3",
                     "--preset", "tiny", *SMALL, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert f"prepared corpus {folder} (cached" in resumed.output and "preparing" not in resumed.output
    other = invoke("data", "prepare", "translation", str(data), "--preset", "tiny", "--set", "vocab_size=150")
    assert other.exit_code == 0 and other.stdout.splitlines()[0] != prepared.stdout.splitlines()[0]


def test_prepare_refuses_a_missing_folder(tmp_path):
    result = invoke("data", "prepare", "translation", str(tmp_path / "nowhere"))
    assert result.exit_code == 2 and "no such file or folder" in result.output
