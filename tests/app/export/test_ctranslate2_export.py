"""The default recipe's translation model exports for transformers (`export hf`) and CTranslate2 (`export
ctranslate2`, and CTranslate2's own converter, `ct2-transformers-converter`, over `export hf`), and each gives
attnkit's translations: AutoTokenizer gives the model's ids (`export hf`: Marian's order of attnkit's, i - 1 with
<pad> last), `generate` and `ctranslate2.Translator` (greedy and beam 4) attnkit's tokens. A run started from <s>
still exports for transformers, with a note that the converter cannot take it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attnkit.app.export.ctranslate2_export import export_ctranslate2
from attnkit.app.interop.hf_export import export_hf
from attnkit.storage import RunFolder, save_weights
from attnkit.translation.config import build_model, preset
from attnkit.translation.decoding import EXTRA_LENGTH, DecodingConfig, beam_search, greedy_decode
from attnkit.translation.tokenizer import BOS_ID, EOS_ID, PAD_ID, SubwordTokenizer

transformers = pytest.importorskip("transformers")
ctranslate2 = pytest.importorskip("ctranslate2")

WORDS = ("one", "two", "three", "four", "five", "red", "blue", "green", "cat", "dog")
SOURCES = [f"{a} {b} {c}" for a in WORDS[:5] for b in WORDS[5:8] for c in WORDS[8:]]
TARGETS = [" ".join(reversed(s.split())) + " ." for s in SOURCES]  # a reordering to learn
UNSEEN = ["dog red one", "blue blue", "five cat green two", "three", "green dog four red one"]


def trained_run(folder, **model_changes):
    """A run of the tiny preset (its layout as `attnkit train translation` writes it, with MODEL_CHANGES), small,
    trained a few seconds: (model, tokenizer, run path)."""
    torch.manual_seed(0)
    tokenizer = SubwordTokenizer.train(SOURCES, TARGETS, vocab_size=60)
    config = preset("tiny")
    config = dataclasses.replace(config, model=dataclasses.replace(
        config.model, d_model=32, num_heads=4, d_ff=64, dropout=0.0, source_vocab_size=tokenizer.source_vocab_size,
        target_vocab_size=tokenizer.target_vocab_size, **model_changes))
    model = build_model(config)
    sources = [torch.tensor(ids + [EOS_ID]) for ids in tokenizer.encode_source(SOURCES)]
    targets = [torch.tensor([BOS_ID] + ids + [EOS_ID]) for ids in tokenizer.encode_target(TARGETS)]
    source = torch.nn.utils.rnn.pad_sequence(sources, batch_first=True, padding_value=PAD_ID)
    target = torch.nn.utils.rnn.pad_sequence(targets, batch_first=True, padding_value=PAD_ID)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(120):
        logits = model(source, target[:, :-1])  # (batch, target_length, vocab)
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target[:, 1:], ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    run = RunFolder.create(folder / "run", "translation", config.to_dict())
    tokenizer.save(run.path)
    save_weights(run.last_weights, model.state_dict())
    return model.eval(), tokenizer, run.path


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The default recipe's run and its exports: hf, ct2 (`export ctranslate2`) and converted (the converter
    over hf)."""
    model, tokenizer, run = trained_run(tmp_path_factory.mktemp("default"))
    exports = tmp_path_factory.mktemp("exports")
    export_hf(run, exports / "hf", weights="last")
    export_ctranslate2(run, exports / "ct2", weights="last")
    ctranslate2.converters.TransformersConverter(str(exports / "hf")).convert(str(exports / "converted"))
    return model, tokenizer, exports


def test_the_preset_is_marian_shaped():
    model = preset("tiny").model
    assert (model.sinusoid_layout, model.final_norm, model.norm_first, model.decoder_start) == \
        ("halves", False, False, "zero")


@pytest.mark.parametrize("folder", ["hf", "ct2"])
def test_auto_tokenizer_gives_the_models_ids(default_run, folder):
    _, tokenizer, exports = default_run
    loaded = transformers.AutoTokenizer.from_pretrained(exports / folder)
    assert isinstance(loaded, transformers.PreTrainedTokenizerFast)
    size = tokenizer.source_vocab_size
    ours = _marian if folder == "hf" else _same  # export hf: Marian's order, <pad> last
    for text in SOURCES[:5] + UNSEEN:
        ids = loaded(text).input_ids
        assert ids == ours(tokenizer.encode_source([text])[0] + [EOS_ID], size)  # the model's input: pieces, </s>
        assert loaded.decode(ids, skip_special_tokens=True) == text
    assert [loaded.pad_token_id, loaded.eos_token_id, loaded.unk_token_id] == ours([PAD_ID, EOS_ID, 3], size)


def test_the_zero_start_is_marians(default_run):
    """The pad row is zero, starts the decoder and is never proposed, as in Marian's models."""
    _, tokenizer, exports = default_run
    marian = transformers.MarianMTModel.from_pretrained(exports / "hf")
    pad = tokenizer.target_vocab_size - 1
    assert marian.config.pad_token_id == marian.config.decoder_start_token_id == pad
    assert torch.all(marian.get_input_embeddings().weight[pad] == 0)
    assert marian.final_logits_bias[0, pad] == float("-inf")


def test_generate_gives_attnkits_greedy_translations(default_run):
    model, tokenizer, exports = default_run
    marian = transformers.MarianMTModel.from_pretrained(exports / "hf").eval()
    loaded = transformers.AutoTokenizer.from_pretrained(exports / "hf")
    texts = SOURCES[::7] + UNSEEN
    batch = loaded(texts, return_tensors="pt", padding=True)
    size = tokenizer.target_vocab_size
    with torch.no_grad():
        generated = marian.generate(**batch, num_beams=1)
    ours = greedy_decode(model, (batch.input_ids + 1) % size)  # attnkit's ids
    assert [_until_eos(row[1:]) for row in ((generated + 1) % size).tolist()] == ours
    assert loaded.batch_decode(generated, skip_special_tokens=True)[:3] == TARGETS[::7][:3]  # it did learn


@pytest.mark.parametrize("folder", ["ct2", "converted"])
@pytest.mark.parametrize("beam_size", [1, 4])
def test_ctranslate2_gives_attnkits_translations(default_run, folder, beam_size):
    """Greedy: attnkit's search. Beam 4: CTranslate2 divides by |Y|^alpha, attnkit's "power" length penalty.
    The converted model reads the hf folder's tokenizer (Marian's ids)."""
    model, tokenizer, exports = default_run
    translator = ctranslate2.Translator(str(exports / folder))
    loaded = transformers.AutoTokenizer.from_pretrained(exports / ("ct2" if folder == "ct2" else "hf"))
    back = _same if folder == "ct2" else _attnkit
    rules = DecodingConfig(length_penalty_form="power")
    size, lengths = tokenizer.target_vocab_size, set()
    for text in SOURCES[::5] + UNSEEN:
        ids = tokenizer.encode_source([text])[0] + [EOS_ID]
        result = translator.translate_batch([loaded.tokenize(text) + ["</s>"]], beam_size=beam_size,
                                            length_penalty=0.6, max_decoding_length=len(ids) + EXTRA_LENGTH - 1)
        theirs = back(loaded.convert_tokens_to_ids(result[0].hypotheses[0]), size)
        source = torch.tensor([ids])
        ours = greedy_decode(model, source)[0] if beam_size == 1 else \
            beam_search(model, source, beam_size, 0.6, rules=rules)[0].tokens
        assert theirs == ours, text
        lengths.add(len(ours))
    assert len(lengths) >= 2


def test_a_bos_start_run_exports_for_transformers_and_says_the_converter_cannot(tmp_path, capsys):
    model, tokenizer, run = trained_run(tmp_path, decoder_start="bos")
    export_hf(run, tmp_path / "hf", weights="last")
    assert "ct2-transformers-converter" in capsys.readouterr().err
    marian = transformers.MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    assert marian.config.decoder_start_token_id == BOS_ID - 1
    size = tokenizer.target_vocab_size
    for text in UNSEEN:
        ids = tokenizer.encode_source([text])[0] + [EOS_ID]
        with torch.no_grad():
            theirs = marian.generate(torch.tensor([_marian(ids, size)]), num_beams=1)[0, 1:].tolist()
        assert _until_eos(_attnkit(theirs, size)) == greedy_decode(model, torch.tensor([ids]))[0], text


def _marian(ids: list[int], size: int) -> list[int]:
    """attnkit's ids -> Marian's order (one down, <pad> last)."""
    return [(i - 1) % size for i in ids]


def _attnkit(ids: list[int], size: int) -> list[int]:
    return [(i + 1) % size for i in ids]


def _same(ids: list[int], size: int) -> list[int]:
    return ids


def _until_eos(row: list[int]) -> list[int]:
    return row[:row.index(EOS_ID)] if EOS_ID in row else [t for t in row if t != PAD_ID]
