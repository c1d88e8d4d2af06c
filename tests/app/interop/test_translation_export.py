"""A translation model trained here exports to MarianMTModel when its config says Marian's details."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.testing import assert_close

from attnkit.errors import ConfigError
from attnkit.app.interop.hf_export import export_hf
from attnkit.translation.config import build_model, preset
from attnkit.translation.tokenizer import PAD_ID, SubwordTokenizer
from attnkit.storage import RunFolder, save_weights

transformers = pytest.importorskip("transformers")
LINES = [f"{a} {b} {c}" for a in ("one", "two", "three", "four") for b in ("red", "blue", "green") for c in "xyz"]


def write_run(tmp_path, **model_options):
    torch.manual_seed(0)
    tokenizer = SubwordTokenizer.train(LINES, LINES, vocab_size=40)
    config = preset("tiny")
    model_config = dataclasses.replace(config.model, d_model=32, num_heads=4, d_ff=64, dropout=0.0,
                                       source_vocab_size=tokenizer.source_vocab_size,
                                       target_vocab_size=tokenizer.target_vocab_size, **model_options)
    config = dataclasses.replace(config, model=model_config)
    model = build_model(config).eval()
    run = RunFolder.create(tmp_path / "run", "translation", config.to_dict())
    tokenizer.save(run.path)
    save_weights(run.last_weights, model.state_dict())
    return run, model, tokenizer


def test_marian_shaped_model_exports_with_the_same_logits(tmp_path):
    run, model, tokenizer = write_run(tmp_path, sinusoid_layout="halves", final_norm=False, activation="silu",
                                      output_bias=True)
    with torch.no_grad():
        model.output_bias.normal_()
    save_weights(run.last_weights, model.state_dict())
    export_hf(run.path, tmp_path / "hf", weights="last")
    reloaded = transformers.MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    assert (tmp_path / "hf" / "tokenizer.json").is_file()
    source = torch.tensor([[5, 9, 12, 2], [7, 8, 2, PAD_ID]])
    target = torch.tensor([[1, 6, 10], [1, 11, 4]])
    with torch.no_grad():
        theirs = reloaded(input_ids=source, attention_mask=(source != PAD_ID).long(), decoder_input_ids=target).logits
        assert_close(model(source, target), theirs, atol=1e-4, rtol=0)


def test_the_papers_model_is_refused_with_the_differences_named(tmp_path):
    run, _, _ = write_run(tmp_path)
    with pytest.raises(ConfigError, match="sinusoid_layout must be halves; final_norm must be false"):
        export_hf(run.path, tmp_path / "hf", weights="last")
