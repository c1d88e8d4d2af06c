"""The default recipe's translation model exports for transformers (`export hf`) and CTranslate2
(`export ctranslate2`), and both give attnkit's translations: AutoTokenizer gives attnkit's ids,
`generate` and `ctranslate2.Translator` (greedy and beam 4) attnkit's tokens."""

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


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """A run of the tiny preset (its layout as `attnkit train translation` writes it), trained a few seconds."""
    torch.manual_seed(0)
    tokenizer = SubwordTokenizer.train(SOURCES, TARGETS, vocab_size=60)
    config = preset("tiny")
    config = dataclasses.replace(config, model=dataclasses.replace(
        config.model, d_model=32, num_heads=4, d_ff=64, dropout=0.0, source_vocab_size=tokenizer.source_vocab_size,
        target_vocab_size=tokenizer.target_vocab_size))
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
    model.eval()
    run = RunFolder.create(tmp_path_factory.mktemp("default") / "run", "translation", config.to_dict())
    tokenizer.save(run.path)
    save_weights(run.last_weights, model.state_dict())
    exports = tmp_path_factory.mktemp("exports")
    export_hf(run.path, exports / "hf", weights="last")
    export_ctranslate2(run.path, exports / "ct2", weights="last")
    return model, tokenizer, exports


def test_the_preset_is_marian_shaped():
    model = preset("tiny").model
    assert (model.sinusoid_layout, model.final_norm, model.norm_first) == ("halves", False, False)


@pytest.mark.parametrize("folder", ["hf", "ct2"])
def test_auto_tokenizer_gives_attnkits_ids(default_run, folder):
    _, tokenizer, exports = default_run
    loaded = transformers.AutoTokenizer.from_pretrained(exports / folder)
    assert isinstance(loaded, transformers.PreTrainedTokenizerFast)
    for text in SOURCES[:5] + UNSEEN:
        ids = loaded(text).input_ids
        assert ids == tokenizer.encode_source([text])[0] + [EOS_ID]  # the model's input: pieces, then </s>
        assert loaded.decode(ids, skip_special_tokens=True) == text
    assert (loaded.pad_token_id, loaded.eos_token_id, loaded.unk_token_id) == (PAD_ID, EOS_ID, 3)


def test_generate_gives_attnkits_greedy_translations(default_run):
    model, tokenizer, exports = default_run
    marian = transformers.MarianMTModel.from_pretrained(exports / "hf").eval()
    loaded = transformers.AutoTokenizer.from_pretrained(exports / "hf")
    texts = SOURCES[::7] + UNSEEN
    batch = loaded(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        theirs = marian.generate(**batch, num_beams=1)
    ours = greedy_decode(model, batch.input_ids)
    assert [_until_eos(row[1:]) for row in theirs.tolist()] == ours
    assert loaded.batch_decode(theirs, skip_special_tokens=True)[:3] == TARGETS[::7][:3]  # it did learn


@pytest.mark.parametrize("beam_size", [1, 4])
def test_ctranslate2_gives_attnkits_translations(default_run, beam_size):
    """Greedy: attnkit's search. Beam 4: CTranslate2 divides by |Y|^alpha, attnkit's "power" length penalty."""
    model, tokenizer, exports = default_run
    translator = ctranslate2.Translator(str(exports / "ct2"))
    loaded = transformers.AutoTokenizer.from_pretrained(exports / "ct2")
    rules = DecodingConfig(length_penalty_form="power")
    for text in SOURCES[::5] + UNSEEN:
        ids = loaded(text).input_ids
        result = translator.translate_batch([loaded.convert_ids_to_tokens(ids)], beam_size=beam_size,
                                            length_penalty=0.6, max_decoding_length=len(ids) + EXTRA_LENGTH - 1)
        theirs = loaded.convert_tokens_to_ids(result[0].hypotheses[0])
        source = torch.tensor([ids])
        ours = greedy_decode(model, source) if beam_size == 1 else \
            [beam_search(model, source, beam_size, 0.6, rules=rules)[0].tokens]
        assert theirs == ours[0], text


def _until_eos(row: list[int]) -> list[int]:
    return row[:row.index(EOS_ID)] if EOS_ID in row else [t for t in row if t != PAD_ID]
