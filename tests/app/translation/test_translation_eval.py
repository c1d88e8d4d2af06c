"""`attnkit eval translation`: BLEU tokenized for the target language, named in sacreBLEU's signature."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from attnkit.app.cli import load_commands


@pytest.mark.parametrize("options, tokenizer", [([], "zh"), (["--target-lang", "de"], "13a")])
def test_eval_tokenizes_bleu_for_the_references_language(translation_run, tmp_path, options, tokenizer):
    test = tmp_path / "test.tsv"
    test.write_text("one two\t一二\nthree\t三\n", encoding="utf-8")  # Han references: Chinese unless told
    result = CliRunner().invoke(load_commands(), ["eval", "translation", str(translation_run), "--data", str(test),
                                                  "--json", *options])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)
    assert f"tok:{tokenizer}" in scores["bleu_signature"] and scores["sentences"] == 2
