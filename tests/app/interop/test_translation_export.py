"""A translation model trained here exports to MarianMTModel when its config says Marian's details: its
embeddings shared or not, its activation, its decoder start, and the decoding rules as the generation config.
The export's ids are Marian's order: attnkit's id i is i - 1, and <pad> (0) is the last."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.testing import assert_close

from attnkit.app.interop.hf_export import export_hf
from attnkit.errors import ConfigError
from attnkit.storage import RunFolder, save_weights
from attnkit.translation.config import build_model, preset
from attnkit.translation.decoding import DecodingConfig, beam_search, greedy_decode
from attnkit.translation.tokenizer import BOS_ID, EOS_ID, PAD_ID, SubwordTokenizer

transformers = pytest.importorskip("transformers")
LINES = [f"{a} {b} {c}" for a in ("one", "two", "three", "four") for b in ("red", "blue", "green") for c in "xyz"]


MARIAN = {"sinusoid_layout": "halves", "final_norm": False, "activation": "silu", "output_bias": True}


def exported(ids: torch.Tensor, size: int) -> torch.Tensor:
    """attnkit ids -> the export's: one down, <pad> last."""
    return (ids - 1) % size


def write_run(tmp_path, run_options: dict | None = None, **model_options):
    torch.manual_seed(0)
    tokenizer = SubwordTokenizer.train(LINES, LINES, vocab_size=40)
    config = preset("tiny")
    model_config = dataclasses.replace(config.model, d_model=32, num_heads=4, d_ff=64, dropout=0.0,
                                       source_vocab_size=tokenizer.source_vocab_size,
                                       target_vocab_size=tokenizer.target_vocab_size, **model_options)
    config = dataclasses.replace(config, model=model_config, **(run_options or {}))
    model = build_model(config).eval()
    run = RunFolder.create(tmp_path / "run", "translation", config.to_dict())
    tokenizer.save(run.path)
    save_weights(run.last_weights, model.state_dict())
    return run, model, tokenizer


@pytest.mark.parametrize("options", [{"decoder_start": "bos"}, {"decoder_start": "zero"}, {"share_embeddings": False},
                                     {"activation": "gelu_tanh"},
                                     {"activation": "quick_gelu", "scale_embeddings": False}])
def test_marian_shaped_model_exports_with_the_same_logits(tmp_path, options):
    run, model, tokenizer = write_run(tmp_path, **{**MARIAN, **options})
    with torch.no_grad():
        model.output_bias.normal_()
    save_weights(run.last_weights, model.state_dict())
    export_hf(run.path, tmp_path / "hf", weights="last")
    reloaded = transformers.MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    assert (tmp_path / "hf" / "tokenizer.json").is_file()
    size, zero = tokenizer.target_vocab_size, model.config.decoder_start == "zero"
    assert reloaded.config.pad_token_id == size - 1
    assert reloaded.config.decoder_start_token_id == (size - 1 if zero else BOS_ID - 1)
    source = torch.tensor([[5, 9, 12, 2], [7, 8, 2, PAD_ID]])
    target = torch.tensor([[1, 6, 10], [1, 11, 4]])
    their_target = exported(target, size)
    their_target[:, 0] = reloaded.config.decoder_start_token_id
    with torch.no_grad():
        theirs = reloaded(input_ids=exported(source, size), attention_mask=(source != PAD_ID).long(),
                          decoder_input_ids=their_target).logits[..., exported(torch.arange(size), size)]
        ours = model(source, target)
    if zero:  # the zero start row is <pad>'s, never proposed
        assert torch.all(theirs[..., PAD_ID] == float("-inf"))
        theirs, ours = theirs[..., PAD_ID + 1:], ours[..., PAD_ID + 1:]
    assert_close(ours, theirs, atol=1e-4, rtol=0)


def test_the_papers_model_is_refused_with_the_differences_named(tmp_path):
    run, _, _ = write_run(tmp_path, sinusoid_layout="interleaved", final_norm=True)  # the presets train Marian's
    with pytest.raises(ConfigError, match="sinusoid_layout must be halves; final_norm must be false"):
        export_hf(run.path, tmp_path / "hf", weights="last")


@pytest.mark.parametrize("forced", [None, 13])
def test_the_decoding_rules_export_as_the_generation_config(forced, tmp_path):
    """A run decoding by transformers' rules (power penalty, early_stopping "never", a fixed limit with nothing or
    a token other than </s> forced there, a banned id, no repeated bigrams) exports them, and generate gives the
    run's tokens."""
    rules = DecodingConfig(length_penalty_form="power", early_stopping="never", max_output_length=9,
                           forced_at_limit=forced, banned_outputs=(7,), no_repeat_ngram_size=2)
    run, model, _ = write_run(tmp_path, {"beam_size": 3, "length_penalty": 0.7, "decoding": rules}, **MARIAN)
    with torch.no_grad():
        model.output_bias.normal_()
        model.output_bias[EOS_ID] = 4.0  # so that some outputs end before the limit
    save_weights(run.last_weights, model.state_dict())
    export_hf(run.path, tmp_path / "hf", weights="last")
    reloaded = transformers.MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    generation = reloaded.generation_config
    size = reloaded.config.vocab_size
    assert (generation.num_beams, generation.length_penalty, generation.early_stopping, generation.max_length,
            generation.forced_eos_token_id, generation.bad_words_ids, generation.no_repeat_ngram_size) == \
        (3, 0.7, "never", 10, None if forced is None else forced - 1, [[6]], 2)
    sources = [[5, 9, 12, EOS_ID], [7, 8, EOS_ID], [11, 6, 13, 14, 10, EOS_ID], [15, EOS_ID], [4, 16, 17, EOS_ID]]
    lengths, last = set(), set()
    for source in sources:
        batch = torch.tensor([source])
        for beam_size in (1, 3):
            with torch.no_grad():
                theirs = (reloaded.generate(exported(batch, size), num_beams=beam_size)[0, 1:] + 1) % size
            theirs = theirs.tolist()
            if beam_size == 1:
                ours = greedy_decode(model, batch, rules=rules)[0]
            else:
                ours = beam_search(model, batch, beam_size, 0.7, rules=rules)[0].tokens
            expected = theirs[:theirs.index(EOS_ID) + 1] if EOS_ID in theirs else theirs
            assert ours + [EOS_ID] * (len(ours) < 9) == expected, (source, beam_size)
            lengths.add(len(expected))
            last.add(expected[-1] if len(expected) == 9 else None)
    assert len(lengths) > 2  # outputs of several lengths, some ended by </s>
    assert forced is None or forced in last  # some reach the limit, on the forced token
