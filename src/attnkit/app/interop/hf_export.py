"""Exporting attnkit run folders to Hugging Face folders that `transformers` loads, where the
architecture matches: a DETR detection run -> `DetrForObjectDetection` (with transformers' own
ResNet backbone, so no timm is needed), a translation Transformer run -> `MarianMTModel`.

The tensor names come from a model `transformers` builds from the exported config: each of its
names is mapped to attnkit's by the import tables (detr_import, marian_import) and q/k/v are cut
out of torch's packed `in_proj_*`, so the export follows the installed version's layout, and the
load is strict (every tensor named, none left over). What does not match (pre-norm or DC5 DETR, a
translation model with the paper's interleaved positions or final LayerNorms, ...) is refused with
the differences named; the translation presets train Marian's layout, so their models export.

A translation run's BPE vocabulary is written in Marian's order, <pad> last (attnkit id i -> i - 1, <pad> 0 ->
the last id), since CTranslate2's converter (`ct2-transformers-converter`) drops the last row as the pad. A run
whose decoder starts from a zero vector (`decoder_start="zero"`, the presets') exports that start as Marian
does: a zero <pad> row is the decoder start token, excluded from the outputs by a -inf logit bias, so both
transformers and the converter's model give the run's translations. A run started from <s> exports <s> as the
decoder start: exact in transformers, but the converter would start from zero; `attnkit export ctranslate2`
(CTranslate2's spec API) converts such runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnkit.app.interop.detr_import import hf_to_official
from attnkit.app.interop.weights_files import hf_layer_to_torch
from attnkit.detection.config import model_from_dict
from attnkit.errors import CheckpointError, ConfigError
from attnkit.translation.config import TranslationConfig
from attnkit.translation.decoding import EXTRA_LENGTH
from attnkit.translation.model import Seq2SeqConfig
from attnkit.translation.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID


def export_hf(run: Path, out: Path, weights: str = "best") -> Path:
    """Write RUN (detection or translation) as a Hugging Face model folder at `out`; returns `out`."""
    from attnkit.storage import RunFolder, read_weights

    folder = RunFolder.open(Path(run))
    tensors, _ = read_weights(_weights(folder, weights))
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} already exists and is not empty; choose another --out")
    from attnkit.app.tasks import task_kind

    model = task_kind(folder.kind, str(run)).export_hf(folder, tensors, out)
    model.save_pretrained(out)
    return out


def _weights(folder, which: str) -> Path:
    """best (or last, before any evaluation), last or average weights of the run."""
    if which == "best" and not folder.best_weights.is_file():
        which = "last"
    return folder.weights_path(which)


def map_from(hf_names: list[str], attnkit_name, tensors: dict[str, Tensor], source: str) -> dict[str, Tensor]:
    """HF name -> tensor, where `attnkit_name(hf_name)` names attnkit's (q/k/v cut from `in_proj_*`).

    CheckpointError naming every HF tensor attnkit has no counterpart for.
    """
    mapped, missing = {}, []
    for hf_name in hf_names:
        name = attnkit_name(hf_name)
        part = re.search(r"\.([qkv])_proj\.(weight|bias)$", name)
        if part:
            packed = tensors.get(f"{name[:part.start()]}.in_proj_{part.group(2)}".replace("encoder_attn",
                                                                                            "multihead_attn"))
            value = None if packed is None else packed.chunk(3)["qkv".index(part.group(1))]
        else:
            value = tensors.get(name)
        if value is None:
            missing.append(f"{hf_name} (attnkit {name})")
        else:
            mapped[hf_name] = value.contiguous()
    if missing:
        raise CheckpointError(f"{source}: no attnkit tensor for {', '.join(missing[:8])}"
                              + (f" ... and {len(missing) - 8} more" if len(missing) > 8 else ""))
    return mapped


def _load_strict(model, mapped: dict[str, Tensor], keep: tuple[str, ...] = ()) -> None:
    state = model.state_dict()
    mapped = {**{k: state[k] for k in state if k.endswith(keep) and k not in mapped}, **mapped} if keep else mapped
    misshaped = [f"{k} {tuple(v.shape)} != {tuple(state[k].shape)}" for k, v in mapped.items()
                 if v.shape != state[k].shape]
    if misshaped:
        raise CheckpointError(f"mis-shaped for transformers: {', '.join(misshaped[:8])}")
    model.load_state_dict(mapped, strict=True)


# ---------------------------------------------------------------- DETR
def detr_hf_config(config: dict):
    """transformers.DetrConfig for an attnkit detection config dict; ConfigError naming what differs."""
    import transformers

    model = config["model"]
    problems = [p for p, bad in (("arch must be 'detr'", model["arch"] != "detr"),
                                 ("pre_norm DETR has no transformers counterpart", model["pre_norm"]),
                                 ("dilation (DC5): transformers' own ResNet backbone has no dilation",
                                  model["dilation"])) if bad]
    if problems:
        raise ConfigError("cannot export to DetrForObjectDetection: " + "; ".join(problems))
    layout = model_from_dict(model).resnet_layout  # any depths, widths, stem and channels: transformers' ResNetConfig
    names = list(config.get("class_names") or []) or [str(i) for i in range(model["num_classes"])]
    # Keywords some transformers versions take outside the signature (transformers 4's DetrConfig defaults to
    # a timm backbone; 5 has no such switch, and sets out_features through the backbone mixin).
    backbone_options: dict[str, Any] = {"out_features": ["stage4"]}
    detr_options: dict[str, Any] = {"use_timm_backbone": False, "use_pretrained_backbone": False}
    backbone = transformers.ResNetConfig(layer_type=layout.block, depths=list(layout.depths),
                                         hidden_sizes=list(layout.widths), embedding_size=layout.stem_width,
                                         num_channels=layout.in_channels, **backbone_options)
    return transformers.DetrConfig(
        **detr_options, backbone_config=backbone, num_channels=layout.in_channels,
        d_model=model["hidden_dim"], encoder_layers=model["enc_layers"], decoder_layers=model["dec_layers"],
        encoder_attention_heads=model["num_heads"], decoder_attention_heads=model["num_heads"],
        encoder_ffn_dim=model["dim_feedforward"], decoder_ffn_dim=model["dim_feedforward"],
        num_queries=model["num_queries"], dropout=model["dropout"],
        auxiliary_loss=model["aux_loss"], id2label=dict(enumerate(names)),
        label2id={n: i for i, n in enumerate(names)})


def export_detr(config: dict, tensors: dict[str, Tensor]):
    """A transformers DetrForObjectDetection holding an attnkit DETR's weights."""
    import transformers

    model = transformers.DetrForObjectDetection(detr_hf_config(config)).eval()
    names = [k for k in model.state_dict() if not k.endswith("num_batches_tracked")]
    official = {name: next(iter(hf_to_official({name: torch.zeros(1)}))) for name in names}  # a lone q/k/v stays
    mapped = map_from(names, official.__getitem__, tensors, "DETR export")
    _load_strict(model, mapped, keep=("num_batches_tracked",))
    return model


# ---------------------------------------------------------------- Marian
# attnkit's activation -> transformers' activation_function (the inverse of marian_import.ACTIVATIONS)
HF_ACTIVATIONS = {"silu": "swish", "gelu_tanh": "gelu_pytorch_tanh", "gelu_clipped": "gelu_10",
                  "sqrt_softplus": "sqrtsoftplus", "identity": "linear"}


@dataclass(frozen=True)
class MarianIds:
    """Marian's ids for one side: `order` is the attnkit id of each Marian id; pad, eos and the decoder start."""
    order: list[int]
    pad: int
    eos: int
    start: int

    def marian_id(self, attnkit_id: int) -> int:
        """The Marian id of an attnkit id (<pad> and <s> to the Marian pad and start where their rows are dropped)."""
        ids = {**{PAD_ID: self.pad, BOS_ID: self.start}, **{a: m for m, a in enumerate(self.order)}}
        return ids[attnkit_id]


def marian_hf_config(config: TranslationConfig, source: MarianIds, target: MarianIds, generation: dict[str, Any]):
    """transformers.MarianConfig for an attnkit translation config; ConfigError naming what differs."""
    import transformers

    model = config.model
    checks = (("arch must be 'transformer'", config.arch != "transformer"),
              ("positional_encoding must be sinusoidal", getattr(model, "positional_encoding", "") != "sinusoidal"),
              ("sinusoid_layout must be halves", getattr(model, "sinusoid_layout", "") != "halves"),
              ("final_norm must be false", getattr(model, "final_norm", True)),
              ("norm_first must be false", getattr(model, "norm_first", True)))
    problems = [message for message, bad in checks if bad]
    if problems:
        raise ConfigError("cannot export to MarianMTModel: " + "; ".join(problems) +
                          " (the presets train them so; `attnkit export ctranslate2` takes any layout)")
    assert isinstance(model, Seq2SeqConfig)  # arch "transformer" (checked above)
    # transformers 4 reads the generation settings from the model's config, 5 from generation_config (which
    # export_marian sets); 5 drops them from the config.
    return transformers.MarianConfig(
        vocab_size=len(source.order), decoder_vocab_size=len(target.order), d_model=model.d_model,
        encoder_layers=model.num_encoder_layers, decoder_layers=model.num_decoder_layers,
        encoder_attention_heads=model.num_heads, decoder_attention_heads=model.num_heads,
        encoder_ffn_dim=model.d_ff, decoder_ffn_dim=model.d_ff, dropout=model.dropout,
        max_position_embeddings=model.max_positions,
        activation_function=HF_ACTIVATIONS.get(model.activation, model.activation),
        scale_embedding=model.scale_embeddings, pad_token_id=target.pad, eos_token_id=target.eos,
        decoder_start_token_id=target.start, share_encoder_decoder_embeddings=model.share_embeddings,
        tie_word_embeddings=True, **generation)


def marian_generation(config: TranslationConfig, target: MarianIds) -> dict[str, Any]:
    """The generation config under which `generate` decodes as the run's `translate` (beam size and
    decoding rules; transformers has no GNMT length penalty, so a "gnmt" run exports only the rest)."""
    rules, model = config.decoding, config.model
    suppressed = [i for i in getattr(model, "suppressed_outputs", ()) if i != BOS_ID]  # runs imported before rules
    banned = sorted({target.marian_id(i) for i in (*rules.banned_outputs, *suppressed)})
    generation: dict[str, Any] = {
        "num_beams": config.beam_size, "bad_words_ids": [[i] for i in banned] or None,
        "forced_eos_token_id": None if rules.forced_at_limit is None else target.marian_id(rules.forced_at_limit),
        "min_length": rules.min_output_length, "no_repeat_ngram_size": rules.no_repeat_ngram_size,
        "renormalize_logits": rules.renormalize}
    if rules.max_output_length is not None:
        generation["max_length"] = rules.max_output_length + 1  # transformers counts the start token
    else:  # attnkit's limit is the source's length + EXTRA_LENGTH; transformers' is fixed: the longest source's
        generation["max_length"] = config.max_length + EXTRA_LENGTH + 1
    if rules.length_penalty_form == "power":
        generation.update(length_penalty=config.length_penalty, early_stopping=rules.early_stopping)
    return generation


def bpe_marian_ids(size: int, zero_start: bool) -> MarianIds:
    """attnkit's BPE in Marian's order: <pad> last (CTranslate2's converter drops the last row as Marian's pad),
    every other id one down; the pad starts a zero-start run's decoder, <s> the others'."""
    order = list(range(1, size)) + [PAD_ID]
    return MarianIds(order, size - 1, order.index(EOS_ID), size - 1 if zero_start else order.index(BOS_ID))


def marian_ids(tokenizer, tensors: dict[str, Tensor], zero_start: bool = False) -> tuple[MarianIds, MarianIds]:
    """(source, target) Marian ids of a run's vocabularies. attnkit's BPE: `bpe_marian_ids`; a
    SentencePiece (imported) vocabulary goes back to Marian's layout: </s> 0, <unk> 1, the pieces, and <pad> last
    (one vocabulary) or 2 (one per side, so that both sides have it at one id). <s>, a copy of the start token's
    row, is dropped for that row; a <s> of its own (fine-tuned apart) stays, last."""
    from attnkit.translation.sentencepiece_tokenizer import SentencePieceTokenizer

    if not isinstance(tokenizer, SentencePieceTokenizer):
        if not tokenizer.joint:
            raise ConfigError("separate source and target vocabularies cannot be exported as one Marian vocabulary")
        ids = bpe_marian_ids(tokenizer.target_vocab_size, zero_start)
        return ids, ids
    embedding = tensors["target_embedding.weight"]
    bias = tensors.get("output_bias", torch.zeros(len(embedding)))
    copies = [i for i in range(len(embedding)) if i != BOS_ID and torch.equal(embedding[i], embedding[BOS_ID])
              and bool(bias[i] == bias[BOS_ID])]  # the rows <s> is a copy of: its start token's
    size, joint = tokenizer.target_vocab_size, tokenizer.joint
    if PAD_ID in copies:  # opus-mt: the pad is the start token, and <s>'s row serves as both
        target = _marian_layout(size, BOS_ID, joint, own_start=False)
    elif copies:  # another token of the vocabulary starts
        target = _marian_layout(size, PAD_ID, joint, own_start=False)
        target = MarianIds(target.order, target.pad, target.eos, target.order.index(copies[0]))
    else:  # <s> fine-tuned apart from every row: a token of its own, last
        target = _marian_layout(size, PAD_ID, joint, own_start=True)
        target = MarianIds(target.order, target.pad, target.eos, len(target.order) - 1)
    if joint:
        return target, target
    return _marian_layout(tokenizer.source_vocab_size, PAD_ID, joint=False, own_start=False), target


def _marian_layout(size: int, pad_row: int, joint: bool, own_start: bool) -> MarianIds:
    """</s> 0, <unk> 1, then the pieces with the pad row last (joint) or at 2, and <s> last if it is its own;
    the pad starts."""
    pieces = list(range(4, size))
    order = [EOS_ID, UNK_ID] + (pieces + [pad_row] if joint else [pad_row] + pieces) + ([BOS_ID] if own_start else [])
    return MarianIds(order, order.index(pad_row), 0, order.index(pad_row))


def export_marian(folder, tensors: dict[str, Tensor], out: Path):
    """A transformers MarianMTModel holding a translation run's weights; its tokenizer files go to `out`."""
    import transformers

    from attnkit.training.messages import note
    from attnkit.translation.sentencepiece_tokenizer import SentencePieceTokenizer
    from attnkit.translation.tokenizer import SubwordTokenizer

    config = TranslationConfig.from_dict(folder.config)
    tokenizer = SubwordTokenizer.load(folder.path)
    zero_start = getattr(config.model, "decoder_start", "bos") == "zero"
    source, target = marian_ids(tokenizer, tensors, zero_start)
    generation = marian_generation(config, target)
    hf_config = marian_hf_config(config, source, target, generation)
    target_index = torch.tensor(target.order)
    bias = tensors.get("output_bias", torch.zeros(tokenizer.target_vocab_size))[target_index]
    if target.order[target.start] == BOS_ID != target.order[target.pad] and \
            BOS_ID in getattr(config.model, "suppressed_outputs", ()):
        bias[target.start] = float("-inf")  # <s> as a token of its own: never proposed, as in attnkit
    extra = {"source": tensors["source_embedding.weight"][source.order],
             "target": tensors["target_embedding.weight"][target_index]}
    if zero_start:  # Marian's start: the zero pad row, never proposed (as attnkit's model never proposes <pad>)
        extra = {side: rows.index_fill(0, torch.tensor([target.pad]), 0.0) for side, rows in extra.items()}
        bias[target.pad] = float("-inf")
    elif not isinstance(tokenizer, SentencePieceTokenizer):
        note(f"{folder.path}: this run's decoder starts from <s>'s embedding: transformers loads the export as it "
             f"is, but ct2-transformers-converter would start it from a zero vector (Marian's start); convert "
             f"it with `attnkit export ctranslate2`, or train with model.decoder_start=zero")
    extra["final_logits_bias"] = bias.reshape(1, -1)
    model = transformers.MarianMTModel(hf_config).eval()
    names = [k for k in model.state_dict() if "embed_positions" not in k]
    mapped = map_from(names, _marian_attnkit_name, {**tensors, **extra}, "Marian export")
    _load_strict(model, mapped, keep=("embed_positions.weight",))
    for key, value in generation.items():  # transformers 5 reads them here
        setattr(model.generation_config, key, value)
    _write_tokenizer(tokenizer, source, target, out, config.max_length)
    return model


def _marian_attnkit_name(hf_name: str) -> str:
    name = hf_name.removeprefix("model.")
    if name in ("shared.weight", "encoder.embed_tokens.weight"):
        return "source"
    if name in ("decoder.embed_tokens.weight", "lm_head.weight"):
        return "target"
    side, _, rest = name.partition(".layers.")
    if side in ("encoder", "decoder") and rest:
        number, _, inner = rest.partition(".")
        return f"transformer.{side}.layers.{number}.{hf_layer_to_torch(inner, side)}"
    return name


def write_fast_tokenizer(tokenizer, out: Path, max_length: int, order: list[int] | None = None) -> None:
    """attnkit's joint BPE as tokenizer.json + tokenizer_config.json, which AutoTokenizer loads as a
    PreTrainedTokenizerFast giving the model input: the pieces' ids, then </s> (a post-processor, as
    MarianTokenizer ends sources); decode(skip_special_tokens=True) gives attnkit's text. ORDER: the attnkit id
    of each exported id (None: attnkit's ids)."""
    from tokenizers import Tokenizer, processors

    from attnkit.translation.tokenizer import BOS, EOS, PAD, UNK

    saved = json.loads(tokenizer.source.to_str())  # a copy: the run's tokenizer adds no </s>
    new_id = {attnkit: exported for exported, attnkit in enumerate(order or range(tokenizer.source_vocab_size))}
    saved["model"]["vocab"] = {token: new_id[i] for token, i in saved["model"]["vocab"].items()}
    for added in saved["added_tokens"]:
        added["id"] = new_id[added["id"]]
    exported = Tokenizer.from_str(json.dumps(saved))
    exported.post_processor = processors.TemplateProcessing(single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}",
                                                            special_tokens=[(EOS, new_id[EOS_ID])])
    exported.save(str(out / "tokenizer.json"))
    options = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS, "unk_token": UNK,
               "pad_token": PAD, "model_max_length": max_length, "clean_up_tokenization_spaces": False}
    (out / "tokenizer_config.json").write_text(json.dumps(options, indent=2))


def _write_tokenizer(tokenizer, source: MarianIds, target: MarianIds, out: Path, max_length: int) -> None:
    """SentencePiece: source.spm, target.spm, vocab.json (and target_vocab.json, one per side) in Marian's ids
    (MarianTokenizer loads them); attnkit's BPE: tokenizer.json (PreTrainedTokenizerFast loads it) in Marian's ids."""
    from attnkit.translation.sentencepiece_tokenizer import SentencePieceTokenizer

    out.mkdir(parents=True, exist_ok=True)
    if not isinstance(tokenizer, SentencePieceTokenizer):
        write_fast_tokenizer(tokenizer, out, max_length, source.order)
        return
    options: dict[str, Any] = {"tokenizer_class": "MarianTokenizer"}
    (out / "vocab.json").write_text(_marian_vocab(tokenizer.pieces, source))
    if not tokenizer.joint:
        (out / "target_vocab.json").write_text(_marian_vocab(tokenizer.target_pieces, target))
        options["separate_vocabs"] = True
    (out / "source.spm").write_bytes(tokenizer.source_model)
    (out / "target.spm").write_bytes(tokenizer.target_model)
    (out / "tokenizer_config.json").write_text(json.dumps(options))


def _marian_vocab(pieces: list[str], ids: MarianIds) -> str:
    """vocab.json: {piece: Marian id}; the pad's id is named as attnkit's <pad> (whichever row it holds)."""
    names = [pieces[PAD_ID] if marian == ids.pad else pieces[index] for marian, index in enumerate(ids.order)]
    return json.dumps({piece: marian for marian, piece in enumerate(names)}, ensure_ascii=False)
