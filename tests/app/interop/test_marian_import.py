"""Marian in and out: MarianMTModels built here (opus-mt-like, and variants in the ids, the start token,
the vocabularies, the embedding scale, the activation and the generation config, the token forced at
the limit included) give the same logits in attnkit, `Translator.translate` follows each model's
generation config and gives transformers' `generate` output token for token, greedy and beam;
exported back they load in transformers with the same outputs. What attnkit cannot represent is
refused naming the config field."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from attnkit.app.interop.hf_export import export_hf
from attnkit.app.interop.marian_import import ACTIVATIONS, import_marian
from attnkit.errors import CheckpointError, ConfigError
from attnkit.translation.batching import pad_ids
from attnkit.translation.config import TranslationConfig
from attnkit.translation.decoding import DecodingConfig, beam_search, greedy_decode
from attnkit.translation.tokenizer import BOS_ID, EOS_ID, PAD_ID
from attnkit.translation.translator import Translator

transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")
num2words = pytest.importorskip("num2words").num2words
TEXTS = ["twenty-one", "three hundred and five", "seven", "ninety-nine", "one hundred and forty-two",
         "two hundred and seventy-seven", "eight hundred and eighty-eight thousand"]
BEAMS = (1, 2, 4, 5)
EOS = (3.0, 6, 2.0)  # _randomize's </s>: outputs of 3 to 9 tokens, and some at the limit

# Generation configs (set on generation_config, as transformers 5 saves them); each model variant below uses one.
OPUS = {"num_beams": 4}  # opus-mt: bad_words_ids [[pad]], forced_eos_token_id 0, no max_length (20 new tokens)
SHORT = {"num_beams": 3, "length_penalty": 0.6, "early_stopping": True, "max_length": 12, "min_length": 3,
         "forced_eos_token_id": None}  # hypotheses may end at the limit without </s>
NEVER = {"num_beams": 2, "length_penalty": 1.5, "early_stopping": "never", "max_new_tokens": 15,
         "no_repeat_ngram_size": 2, "renormalize_logits": True}
NEGATIVE = {"num_beams": 5, "length_penalty": -0.5, "max_length": 16, "min_new_tokens": 2}
EARLY = {"num_beams": 4, "length_penalty": 0.8, "early_stopping": True, "max_length": 20}
NO_TRIGRAMS = {"num_beams": 4, "length_penalty": 0.8, "max_length": 20, "no_repeat_ngram_size": 3}
# MarianModelTester's ids (bos 0, pad 1, eos 2) with MarianConfig's default forced_eos_token_id 0, which is bos there:
# generate forces a token other than </s> at the limit, and the hypothesis ends by length on it. Limits of 6 to 8
# tokens and seeds where many outputs reach them and others end earlier on </s> (a test below checks both).
FORCED_BOS = {"num_beams": 4, "max_length": 8, "forced_eos_token_id": 0}
FORCED_PAD = {"num_beams": 2, "length_penalty": 0.6, "early_stopping": "never", "max_length": 9,
              "forced_eos_token_id": 1}  # the pad, which bad_words_ids bans elsewhere
FORCED_BOS_EARLY = {"num_beams": 5, "length_penalty": 1.3, "early_stopping": True, "max_new_tokens": 6,
                    "forced_eos_token_id": 0}
FORCED_PIECE = {"num_beams": 3, "max_length": 9, "forced_eos_token_id": 5}  # opus-mt's ids, a word piece forced
VARIANTS = {  # name: (write_marian options, generation)
    "opus-mt": ({}, OPUS),
    "start-eos-unscaled-gelu": ({"start": "eos", "scale_embedding": False, "activation_function": "gelu"}, SHORT),
    "own-start-token-relu": ({"start": "own", "activation_function": "relu"}, NEVER),
    "separate-vocabularies": ({"separate": True, "activation_function": "gelu_new", "eos": (4.0, 5, 1.0)}, NEGATIVE),
    "separate-own-start": ({"separate": True, "start": "own", "eos": (4.0, 5, 1.0)}, EARLY),
    "unshared-one-vocabulary": ({"unshared": True, "eos": (6.0, 8, 2.0)}, NO_TRIGRAMS),
    "tester-ids-forced-bos": ({"ids": "tester", "activation_function": "gelu", "seed": 8}, FORCED_BOS),
    "tester-ids-forced-pad-start-bos": ({"ids": "tester", "start": "bos", "seed": 8}, FORCED_PAD),
    "tester-ids-forced-bos-early": ({"ids": "tester", "seed": 1}, FORCED_BOS_EARLY),
    "forced-piece": ({}, FORCED_PIECE),
}
FORCED = [name for name in VARIANTS if "forced" in name]  # a token other than </s> forced at the limit


def train_spm(language: str) -> bytes:
    """A 60-piece unigram SentencePiece model of the numbers 1..300 written out in LANGUAGE (as the conftest's;
    defined here because `conftest` names another module when tests/translation runs in the same session)."""
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(num2words(n, lang=language) for n in range(1, 301)), model_writer=model,
        vocab_size=60, model_type="unigram", character_coverage=1.0, hard_vocab_limit=False, bos_id=-1, eos_id=-1,
        unk_id=0, minloglevel=2)
    return model.getvalue()


@pytest.fixture(scope="module")
def spm_models() -> tuple[bytes, bytes]:
    return train_spm("en"), train_spm("de")


def pieces_of(model: bytes) -> list[str]:
    processor = sentencepiece.SentencePieceProcessor(model_proto=model)
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def numbered(pieces: list[str]) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for piece in pieces:
        vocab.setdefault(piece, len(vocab))
    return vocab


def write_marian(folder: Path, spm_models: tuple[bytes, bytes], start: str = "pad", separate: bool = False,
                 unshared: bool = False, generation: dict | None = None, eos: tuple[float, int, float] = EOS,
                 seed: int = 0, ids: str = "opus", **config) -> Path:
    """A MarianMTModel folder with random weights. start: the decoder starts from pad, eos, a <s> of its own, or
    bos; separate: a vocabulary and embedding per side; unshared: an embedding per side over one vocabulary;
    eos: see `_randomize`; ids: opus-mt's (</s> 0, <unk> 1, pad last) or MarianModelTester's (<s> 0, pad 1, </s> 2,
    one vocabulary)."""
    torch.manual_seed(seed)
    source_model, target_model = spm_models
    if ids == "tester":
        source = target = numbered(["<s>", "<pad>", "</s>"] + pieces_of(source_model) + pieces_of(target_model))
    elif separate:
        source = numbered(["</s>", "<unk>", "<pad>"] + pieces_of(source_model))
        target = numbered(["</s>", "<unk>", "<pad>"] + pieces_of(target_model) + (["<s>"] if start == "own" else []))
    else:
        source = target = numbered(["</s>", "<unk>"] + pieces_of(source_model) + pieces_of(target_model)
                                   + (["<s>"] if start == "own" else []) + ["<pad>"])
    pad, eos_id = target["<pad>"], target["</s>"]
    options = dict(vocab_size=len(source), decoder_vocab_size=len(target), d_model=32, encoder_layers=2,
                   decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                   decoder_ffn_dim=64, max_position_embeddings=128, activation_function="swish",
                   scale_embedding=True, pad_token_id=pad, eos_token_id=eos_id, forced_eos_token_id=0,
                   decoder_start_token_id={"pad": pad, "eos": eos_id, "own": target.get("<s>"),
                                           "bos": target.get("<s>")}[start],
                   share_encoder_decoder_embeddings=not (separate or unshared))
    model = transformers.MarianMTModel(transformers.MarianConfig(**{**options, **config})).eval()
    _randomize(model, eos_id, *eos)
    for key, value in {"bad_words_ids": [[pad]], **(generation or OPUS)}.items():
        setattr(model.generation_config, key, value)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    (folder / "source.spm").write_bytes(source_model)
    (folder / "target.spm").write_bytes(target_model)
    (folder / "vocab.json").write_text(json.dumps(source))
    tokenizer_config: dict = {"tokenizer_class": "MarianTokenizer"}
    if separate:
        (folder / "target_vocab.json").write_text(json.dumps(target))
        tokenizer_config["separate_vocabs"] = True
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return folder


def _randomize(model, eos_id: int, scale: float, position: int, bias: float) -> None:
    """Sublayers that matter next to the residual, so outputs depend on the input; </s>'s output row along the
    decoder's position encoding at POSITION (times SCALE) and its logit bias BIAS, so that </s> grows likely near
    there and hypotheses end at many lengths, which the beam's rules then rank."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():  # tied matrices once
            if any(part in name for part in ("embed_tokens", "shared", "lm_head")):
                parameter.normal_(0, 0.3)
            elif parameter.dim() == 2:
                parameter.normal_(0, parameter.size(1) ** -0.5)
        encoding = model.get_decoder().embed_positions.weight[position]  # (d_model,)
        model.get_output_embeddings().weight[eos_id] = scale * encoding / encoding.norm()
        model.final_logits_bias.normal_(0, 0.5)
        model.final_logits_bias[0, eos_id] = bias


class Imported:
    """A Marian folder, its import, the transformers model and tokenizer, and the id maps attnkit -> Marian."""

    def __init__(self, folder: Path, run_folder: Path) -> None:
        self.folder, self.run = folder, import_marian(folder, run_folder)
        self.translator = Translator.from_run(self.run.path, device="cpu")
        self.hf = transformers.MarianMTModel.from_pretrained(folder).eval()
        self.hf_tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
        source = json.loads((folder / "vocab.json").read_text())
        target_path = folder / "target_vocab.json"
        target = json.loads(target_path.read_text()) if target_path.is_file() else source
        start = self.hf.generation_config.decoder_start_token_id
        tokenizer = self.translator.tokenizer
        # by piece name, independently of the importer's order; <s> is the decoder start token's copy
        self.to_marian_source = torch.tensor([source.get(p, start) for p in tokenizer.pieces])
        self.to_marian = torch.tensor([start if i == BOS_ID else target[p]
                                       for i, p in enumerate(tokenizer.target_pieces)])

    def sources(self) -> list[list[int]]:
        return [ids + [EOS_ID] for ids in self.translator.tokenizer.encode_source(TEXTS)]

    def ours(self, source: list[int], beam_size: int) -> list[int]:
        """attnkit's output for one sentence by the run's rules, in Marian ids, with </s> when it ended with one."""
        config, model = self.translator.config, self.translator.model
        if beam_size == 1:
            tokens = greedy_decode(model, pad_ids([source]), rules=config.decoding)[0]
        else:
            best = beam_search(model, pad_ids([source]), beam_size, config.length_penalty, rules=config.decoding)[0]
            tokens = best.tokens
        ended = len(tokens) < config.decoding.max_output_length
        return self.to_marian[tokens + [EOS_ID] * ended].tolist()

    def theirs(self, source: list[int], beam_size: int) -> list[int]:
        """generate's output under the model's generation config, without the start token, up to its </s>."""
        with torch.no_grad():
            output = self.hf.generate(self.to_marian_source[torch.tensor([source])], num_beams=beam_size)[0, 1:]
        output, eos = output.tolist(), self.hf.generation_config.eos_token_id
        return output[:output.index(eos) + 1] if eos in output else output


@pytest.fixture(scope="module")
def variants(spm_models, tmp_path_factory) -> dict[str, Imported]:
    made = {}
    for name, (options, generation) in VARIANTS.items():
        root = tmp_path_factory.mktemp(name)
        made[name] = Imported(write_marian(root / "hf", spm_models, generation=generation, **options), root / "run")
    return made


@pytest.fixture(scope="module")
def opus(marian_folder, tmp_path_factory) -> Imported:
    return Imported(marian_folder, tmp_path_factory.mktemp("runs") / "marian")


def test_the_config_states_marians_details(opus):
    model = TranslationConfig.from_dict(opus.run.config).model
    assert (model.sinusoid_layout, model.activation, model.final_norm, model.scale_embeddings) == \
        ("halves", "silu", False, True)
    assert model.output_bias and model.share_embeddings and model.suppressed_outputs == (BOS_ID,)
    assert model.target_vocab_size == opus.hf.config.vocab_size + 1  # <s> (decoder start) is Marian's pad


def test_the_run_carries_the_generation_config(opus, variants):
    config = TranslationConfig.from_dict(opus.run.config)
    assert (config.beam_size, config.length_penalty) == (4, 1.0)  # transformers' default length_penalty
    assert config.decoding == DecodingConfig(length_penalty_form="power", early_stopping=False,
                                             max_output_length=20, banned_outputs=(PAD_ID,), start_token=PAD_ID)
    short = TranslationConfig.from_dict(variants["start-eos-unscaled-gelu"].run.config)
    assert (short.beam_size, short.length_penalty) == (3, 0.6)
    assert (short.decoding.early_stopping, short.decoding.max_output_length, short.decoding.min_output_length,
            short.decoding.forced_at_limit, short.decoding.start_token) == (True, 11, 3, None, EOS_ID)
    never = TranslationConfig.from_dict(variants["own-start-token-relu"].run.config).decoding
    assert (never.early_stopping, never.max_output_length, never.no_repeat_ngram_size, never.renormalize) == \
        ("never", 15, 2, True)
    negative = TranslationConfig.from_dict(variants["separate-vocabularies"].run.config)
    assert (negative.length_penalty, negative.decoding.max_output_length, negative.decoding.min_output_length) == \
        (-0.5, 15, 3)  # min_new_tokens 2: </s> from the third token on


@pytest.mark.parametrize("name", FORCED)
def test_a_forced_token_other_than_eos_is_carried_and_ends_outputs_at_the_limit(name, variants):
    """forced_eos_token_id is kept as the attnkit id of that token (by piece name, whatever the importer's order);
    generate's outputs, which the token-for-token test compares, reach the limit on it and also end earlier on
    </s>, at several lengths."""
    imported = variants[name]
    rules, generation = imported.translator.config.decoding, imported.hf.generation_config
    assert rules.forced_at_limit is not None and rules.forced_at_limit != EOS_ID
    assert imported.to_marian[rules.forced_at_limit] == generation.forced_eos_token_id != generation.eos_token_id
    outputs = [imported.theirs(source, beam_size) for source in imported.sources() for beam_size in BEAMS]
    limit = rules.max_output_length
    assert any(len(o) == limit and o[-1] == generation.forced_eos_token_id for o in outputs)
    assert any(len(o) < limit and o[-1] == generation.eos_token_id for o in outputs)
    assert len({len(o) for o in outputs}) >= 3


def test_the_run_resumes_training_from_the_imported_weights(opus):
    from attnkit.storage import RunFolder

    path, state = RunFolder.open(opus.run.path, "translation").load_newest_state()
    assert state["loop"]["step"] == 0
    for name, tensor in opus.translator.model.state_dict().items():
        assert torch.equal(state["model"][name], tensor), name


@pytest.mark.parametrize("name", ["opus", *VARIANTS])
def test_tokenization_matches_marian_tokenizer(name, opus, variants):
    imported = opus if name == "opus" else variants[name]
    ours = [imported.to_marian_source[ids].tolist() for ids in imported.sources()]
    assert ours == imported.hf_tokenizer(TEXTS)["input_ids"]


@pytest.mark.parametrize("name", ["opus", *VARIANTS])
def test_logits_match(name, opus, variants):
    imported = opus if name == "opus" else variants[name]
    source = pad_ids(imported.sources())  # (batch, source_length)
    torch.manual_seed(0)
    target = torch.randint(4, imported.translator.model.config.target_vocab_size, (len(TEXTS), 6))
    target[:, 0] = BOS_ID  # the decoder start token
    with torch.no_grad():
        ours = imported.translator.model(source, target)  # (batch, target_length, vocab)
        theirs = imported.hf(input_ids=imported.to_marian_source[source], attention_mask=(source != PAD_ID).long(),
                             decoder_input_ids=imported.to_marian[target]).logits
    columns = [i for i in range(len(imported.to_marian)) if i != BOS_ID]
    assert_close(ours[..., columns], theirs[..., imported.to_marian[columns]], atol=1e-4, rtol=0)
    model = imported.translator.model
    step = model.decode_step(target, model.encode(source, source == PAD_ID), None)  # (batch, vocab)
    assert_close(step[:, columns], ours[:, -1, columns])
    assert step[:, BOS_ID].isneginf().all()  # <s>, a copy of the start token's row, is never proposed


@pytest.mark.parametrize("beam_size", BEAMS)
@pytest.mark.parametrize("name", ["opus", *VARIANTS])
def test_outputs_match_generate_token_for_token(name, beam_size, opus, variants):
    imported = opus if name == "opus" else variants[name]
    for source in imported.sources():
        assert imported.ours(source, beam_size) == imported.theirs(source, beam_size), (name, beam_size, source)


def test_the_checks_tell_attnkits_own_rules_from_generates(variants):
    """The comparison above can fail: with attnkit's own search (GNMT penalty, source length + 50, ...) some
    outputs differ from generate's."""
    imported = variants["own-start-token-relu"]
    model, differ = imported.translator.model, 0
    for source in imported.sources():
        tokens = beam_search(model, pad_ids([source]), beam_size=2, alpha=0.6)[0].tokens
        differ += imported.to_marian[tokens + [EOS_ID]].tolist() != imported.theirs(source, 2)
    assert differ > 0


@pytest.mark.parametrize("name", ["opus", *VARIANTS])
def test_translate_follows_the_generation_config_by_default(name, opus, variants):
    imported = opus if name == "opus" else variants[name]
    theirs = [imported.hf_tokenizer.decode(imported.theirs(ids, imported.hf.generation_config.num_beams),
                                           skip_special_tokens=True) for ids in imported.sources()]
    assert imported.translator.translate(TEXTS) == theirs


@pytest.mark.parametrize("name", ["opus", *VARIANTS])
def test_export_round_trip_loads_in_transformers_with_the_same_outputs(name, opus, variants, tmp_path):
    imported = opus if name == "opus" else variants[name]
    export_hf(imported.run.path, tmp_path / "exported")
    reloaded = transformers.MarianMTModel.from_pretrained(tmp_path / "exported").eval()
    reloaded_tokenizer = transformers.MarianTokenizer.from_pretrained(tmp_path / "exported")
    original, again = imported.hf_tokenizer(TEXTS, return_tensors="pt", padding=True), \
        reloaded_tokenizer(TEXTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        theirs = imported.hf_tokenizer.batch_decode(imported.hf.generate(**original), skip_special_tokens=True)
        ours = reloaded_tokenizer.batch_decode(reloaded.generate(**again), skip_special_tokens=True)
    assert ours == theirs
    if name == "opus":  # the same ids as the original, so the same tensors
        assert reloaded_tokenizer(TEXTS)["input_ids"] == imported.hf_tokenizer(TEXTS)["input_ids"]
        start = torch.full((len(TEXTS), 1), imported.hf.config.decoder_start_token_id)
        with torch.no_grad():
            assert_close(reloaded(**again, decoder_input_ids=start).logits,
                         imported.hf(**original, decoder_input_ids=start).logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_every_parameter_free_activation_imports_with_the_same_logits(activation, spm_models, tmp_path):
    folder = write_marian(tmp_path / "hf", spm_models, activation_function=activation)
    imported = Imported(folder, tmp_path / "run")
    assert imported.translator.config.model.activation == ACTIVATIONS[activation]
    source = pad_ids(imported.sources()[:3])
    target = torch.tensor([[BOS_ID, 7, 9, 11]] * 3)
    with torch.no_grad():
        ours = imported.translator.model(source, target)
        theirs = imported.hf(input_ids=imported.to_marian_source[source], attention_mask=(source != PAD_ID).long(),
                             decoder_input_ids=imported.to_marian[target]).logits
    assert_close(ours[..., 2:], theirs[..., imported.to_marian[2:]], atol=1e-4, rtol=0)


@pytest.mark.parametrize(("options", "generation", "field"), [
    ({"activation_function": "prelu"}, OPUS, "activation_function"),
    ({"decoder_attention_heads": 2}, OPUS, "encoder_attention_heads"),
    ({"decoder_ffn_dim": 32}, OPUS, "encoder_ffn_dim"),
    ({}, {**OPUS, "do_sample": True}, "do_sample"),
    ({}, {**OPUS, "repetition_penalty": 1.2}, "repetition_penalty"),
    ({}, {**OPUS, "num_beam_groups": 2, "diversity_penalty": 0.5}, "num_beam_groups"),
    ({}, {**OPUS, "bad_words_ids": [[5, 6]]}, "bad_words_ids"),
    ({}, {**OPUS, "forced_bos_token_id": 5}, "forced_bos_token_id"),
])
def test_what_cannot_map_is_refused_naming_the_field(options, generation, field, spm_models, tmp_path):
    folder = write_marian(tmp_path / "hf", spm_models, generation=generation, **options)
    with pytest.raises(ConfigError, match=field):
        import_marian(folder, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_an_untied_output_projection_is_refused_naming_the_field(spm_models, tmp_path):
    folder = write_marian(tmp_path / "hf", spm_models, unshared=True, tie_word_embeddings=False)
    with pytest.raises(ConfigError, match="tie_word_embeddings"):
        import_marian(folder, tmp_path / "run")


def test_a_folder_without_vocab_is_refused_by_name(marian_folder, tmp_path):
    folder = tmp_path / "partial"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        (folder / name).write_bytes((marian_folder / name).read_bytes())
    with pytest.raises(CheckpointError, match="vocab.json"):
        import_marian(folder, tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["opus", "start-eos-unscaled-gelu"])
def test_a_run_saved_with_force_eos_at_limit_loads_with_the_same_rules(name, opus, variants, tmp_path):
    """config.json of an import written when the forced token was a boolean (force_eos_at_limit true: opus-mt's
    forced </s>; false: none forced) loads with the rules of today's import and translates the same."""
    import shutil

    imported = opus if name == "opus" else variants[name]
    old = tmp_path / "old"
    shutil.copytree(imported.run.path, old)
    config = json.loads((old / "config.json").read_text())
    forced = config["decoding"].pop("forced_at_limit")
    config["decoding"]["force_eos_at_limit"] = forced is not None
    (old / "config.json").write_text(json.dumps(config))
    translator = Translator.from_run(old, device="cpu")
    assert translator.config == imported.translator.config
    assert translator.translate(TEXTS) == imported.translator.translate(TEXTS)


def test_a_run_imported_before_the_rules_keeps_its_search_and_exports(opus, tmp_path):
    """config.json of an import written before the decoding rules: <s> and pad excluded before the softmax, beam 4,
    alpha 0.6, attnkit's search. It loads, decodes as it did, and exports with Marian's bad_words_ids."""
    import shutil

    from attnkit.storage import RunFolder

    old = tmp_path / "old"
    shutil.copytree(opus.run.path, old)
    config = json.loads((old / "config.json").read_text())
    del config["decoding"]
    config.update(beam_size=4, length_penalty=0.6)
    config["model"]["suppressed_outputs"] = [BOS_ID, PAD_ID]
    (old / "config.json").write_text(json.dumps(config))
    translator = Translator.from_run(old, device="cpu")
    assert translator.config.decoding == DecodingConfig("gnmt", True)  # the defaults when it was written
    source = pad_ids(opus.sources())
    expected = [h.tokens for h in beam_search(translator.model, source, beam_size=4, alpha=0.6,
                                              rules=DecodingConfig("gnmt", True))]
    assert translator.translate(TEXTS) == translator.tokenizer.decode_target(expected)
    assert RunFolder.open(old, "translation").config["model"]["suppressed_outputs"] == [BOS_ID, PAD_ID]
    export_hf(old, tmp_path / "exported")
    reloaded = transformers.MarianMTModel.from_pretrained(tmp_path / "exported")
    assert reloaded.generation_config.bad_words_ids == [[opus.hf.config.pad_token_id]]
    assert reloaded.generation_config.num_beams == 4
