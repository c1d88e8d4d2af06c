"""The command line: train, eval --json, translate (arguments and stdin), data numbers; bad input exits 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attnkit.app.cli import load_commands

SMALL = ["--set", "model.d_model=32", "--set", "model.num_heads=2", "--set", "model.d_ff=64",
         "--set", "model.num_encoder_layers=1", "--set", "model.num_decoder_layers=1", "--set", "vocab_size=200",
         "--set", "max_tokens=300", "--set", "max_length=64", "--set", "eval_sentences=8"]


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(load_commands(), list(args), input=input)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("translation")
    data, run = folder / "data", folder / "run"
    result = invoke("data", "numbers", "--out", str(data), "--lang", "fr", "--max-number", "120")
    assert result.exit_code == 0, result.output
    result = invoke("train", "translation", "--data", str(data), "--out", str(run), "--steps", "3",
                    "--preset", "tiny", *SMALL)
    assert result.exit_code == 0, result.output
    assert result.stdout == "", result.stdout  # training's progress and messages go to stderr
    return data, run, result.output


def test_train_writes_a_run_folder(trained):
    data, run, output = trained
    assert "preset: tiny" in output and "padding" in output and "test (" in output
    for name in ("config.json", "tokenizer.json", "metrics.jsonl", "curves.png", "weights/last.safetensors"):
        assert (run / name).is_file(), name
    assert json.loads((run / "config.json").read_text())["model"]["d_model"] == 32


def test_eval_json(trained):
    data, run, _ = trained
    result = invoke("eval", "translation", str(run), "--data", str(data), "--json", "--beam-size", "2")
    assert result.exit_code == 0, result.output
    scores = json.loads(result.output.strip().splitlines()[-1])
    assert {"bleu", "chrf", "exact_match", "sentences", "seconds"} <= set(scores)
    assert scores["sentences"] == 12  # a tenth of 120 numbers held out for test


def test_translate_arguments_and_stdin(trained):
    _, run, _ = trained
    result = invoke("translate", str(run), "seventy-one", "twelve")
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 2  # one line per sentence (an untrained model may print empty ones)
    piped = invoke("translate", str(run), "--beam-size", "1", input="seventy-one\ntwelve\nthree\n")
    assert piped.exit_code == 0 and piped.output.count("\n") == 3


@pytest.mark.parametrize("args, message", [
    (["train", "translation", "--data", "no/such/folder", "--out", "{tmp}/r"], "no such file or folder"),
    (["train", "translation", "--data", "numbers:de", "--out", "{tmp}/r", "--preset", "huge"], "unknown preset 'huge'"),
    (["train", "translation", "--data", "numbers:de", "--out", "{tmp}/r", "--set", "model.colour=3"],
     "unknown config key 'model.colour'"),
    (["train", "translation", "--data", "numbers:xx", "--out", "{tmp}/r"], "unknown language 'xx'"),
    (["train", "translation", "--data", "{tmp}", "--out", "{tmp}/r"], "no train or valid split"),
    (["translate", "{tmp}", "hello"], "is not a run folder"),
    (["eval", "translation", "{tmp}/nothing", "--data", "numbers:de"], "no run folder"),
])
def test_bad_input_is_one_error_line(tmp_path, args, message):
    result = invoke(*(arg.format(tmp=tmp_path) for arg in args))
    assert result.exit_code == 2, result.output
    assert "error: " in result.output and message in result.output
    assert "Traceback" not in result.output


def test_malformed_training_file_is_named(tmp_path):
    (tmp_path / "train.tsv").write_text("one\tun\ntwo deux\n", encoding="utf-8")
    (tmp_path / "valid.tsv").write_text("one\tun\n", encoding="utf-8")
    result = invoke("train", "translation", "--data", str(tmp_path), "--out", str(tmp_path / "run"))
    assert result.exit_code == 2
    assert "train.tsv, line 2: expected source<TAB>target" in result.output
