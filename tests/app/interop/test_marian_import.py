"""Marian in and out: an opus-mt-like MarianMTModel built here gives the same logits, tokens and
translations in attnkit, and exported back it loads in transformers with the same outputs."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from attnkit.errors import CheckpointError
from attnkit.app.interop.hf_export import export_hf
from attnkit.app.interop.marian_import import import_marian, marian_order
from attnkit.translation.batching import pad_ids
from attnkit.translation.config import TranslationConfig
from attnkit.translation.decoding import EXTRA_LENGTH, beam_search, greedy_decode
from attnkit.translation.tokenizer import EOS_ID, PAD_ID
from attnkit.translation.translator import Translator

transformers = pytest.importorskip("transformers")
TEXTS = ["twenty-one", "three hundred and five", "seven", "ninety-nine", "one hundred and forty-two"]
EXTRA = 10  # attnkit's limit: source length + EXTRA; generate's max_length is one more (the start token)


@pytest.fixture(scope="module")
def imported(marian_folder, tmp_path_factory):
    run = import_marian(marian_folder, tmp_path_factory.mktemp("runs") / "marian")
    translator = Translator.from_run(run.path, device="cpu")
    hf_model = transformers.MarianMTModel.from_pretrained(marian_folder).eval()
    hf_tokenizer = transformers.MarianTokenizer.from_pretrained(marian_folder)
    to_marian = torch.tensor(marian_order(hf_model.config.vocab_size, hf_model.config.pad_token_id, 0, 1))
    return run, translator, hf_model, hf_tokenizer, to_marian


def sources(translator) -> list[list[int]]:
    return [ids + [EOS_ID] for ids in translator.tokenizer.encode_source(TEXTS)]


def generate(hf_model, ids: list[int], to_marian, extra: int = EXTRA, **options) -> list[int]:
    """transformers' output ids for one sentence, without the start token, up to and including </s>."""
    source = to_marian[torch.tensor([ids])]
    output = hf_model.generate(source, do_sample=False, max_length=len(ids) + extra + 1, **options)[0, 1:].tolist()
    return output[:output.index(0) + 1] if 0 in output else output


def test_the_config_states_marians_details(imported):
    run, translator, hf_model, _, _ = imported
    model = TranslationConfig.from_dict(run.config).model
    assert (model.sinusoid_layout, model.activation, model.final_norm, model.scale_embeddings) == \
        ("halves", "silu", False, True)
    assert model.output_bias and model.share_embeddings and PAD_ID in model.suppressed_outputs
    assert model.target_vocab_size == hf_model.config.vocab_size + 1  # <s> (decoder start) is Marian's pad


def test_the_run_resumes_training_from_the_imported_weights(imported):
    from attnkit.storage import RunFolder

    run, translator, _, _, _ = imported
    path, state = RunFolder.open(run.path, "translation").load_newest_state()
    assert state["loop"]["step"] == 0
    for name, tensor in translator.model.state_dict().items():
        assert torch.equal(state["model"][name], tensor), name


def test_tokenization_matches_marian_tokenizer(imported):
    _, translator, _, hf_tokenizer, to_marian = imported
    ours = [to_marian[ids].tolist() for ids in sources(translator)]
    assert ours == hf_tokenizer(TEXTS)["input_ids"]


def test_logits_match(imported):
    _, translator, hf_model, _, to_marian = imported
    source = pad_ids(sources(translator))  # (batch, source_length)
    torch.manual_seed(0)
    target = torch.randint(4, translator.model.config.target_vocab_size, (len(TEXTS), 6))
    target[:, 0] = 1  # <s>, Marian's pad as the decoder start
    with torch.no_grad():
        ours = translator.model(source, target)  # (batch, target_length, vocab)
        theirs = hf_model(input_ids=to_marian[source], attention_mask=(source != PAD_ID).long(),
                          decoder_input_ids=to_marian[target]).logits
    assert_close(ours, theirs[:, :, to_marian], atol=1e-4, rtol=0)


def test_greedy_and_beam_outputs_match_generate(imported):
    _, translator, hf_model, _, to_marian = imported
    ids = sources(translator)
    greedy = greedy_decode(translator.model, pad_ids(ids), extra_length=EXTRA)
    beams = beam_search(translator.model, pad_ids(ids), beam_size=4, alpha=0.0, extra_length=EXTRA)
    for sentence, ours_greedy, ours_beam in zip(ids, greedy, beams):
        assert to_marian[ours_greedy + [EOS_ID]].tolist() == generate(hf_model, sentence, to_marian, num_beams=1)
        assert to_marian[ours_beam.tokens + [EOS_ID]].tolist() == generate(
            hf_model, sentence, to_marian, num_beams=4, length_penalty=0.0, early_stopping=True)


def test_translations_match_decoded_generate(imported):
    _, translator, hf_model, hf_tokenizer, to_marian = imported
    ours = translator.translate(TEXTS, beam_size=1)
    theirs = [hf_tokenizer.decode(generate(hf_model, ids, to_marian, extra=EXTRA_LENGTH, num_beams=1),
                                  skip_special_tokens=True)
              for ids in sources(translator)]
    assert ours == theirs


def test_export_round_trip_loads_in_transformers_with_the_same_outputs(imported, tmp_path):
    run, translator, hf_model, hf_tokenizer, to_marian = imported
    export_hf(run.path, tmp_path / "exported")
    reloaded = transformers.MarianMTModel.from_pretrained(tmp_path / "exported").eval()
    reloaded_tokenizer = transformers.MarianTokenizer.from_pretrained(tmp_path / "exported")
    batch = hf_tokenizer(TEXTS, return_tensors="pt", padding=True)
    assert reloaded_tokenizer(TEXTS)["input_ids"] == hf_tokenizer(TEXTS)["input_ids"]
    with torch.no_grad():
        options = {"num_beams": 4, "max_length": 20, "do_sample": False}
        assert torch.equal(reloaded.generate(**batch, **options), hf_model.generate(**batch, **options))
        decoder_input = torch.full((len(TEXTS), 1), hf_model.config.decoder_start_token_id)
        assert_close(reloaded(**batch, decoder_input_ids=decoder_input).logits,
                     hf_model(**batch, decoder_input_ids=decoder_input).logits, atol=1e-5, rtol=0)


def test_a_folder_without_vocab_is_refused_by_name(marian_folder, tmp_path):
    folder = tmp_path / "partial"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((marian_folder / name).read_bytes())
    with pytest.raises(CheckpointError, match="vocab.json"):
        import_marian(folder, tmp_path / "run")
    assert not (tmp_path / "run").exists()
