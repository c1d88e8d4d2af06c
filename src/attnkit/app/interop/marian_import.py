"""Importing Marian translation models (Junczys-Dowmunt et al. 2018; the Helsinki-NLP opus-mt
family) from a Hugging Face `MarianMTModel` folder into an attnkit translation run folder.

A Marian model is the paper's Transformer with details that attnkit's config states
(`Seq2SeqConfig`): sinusoidal positions laid out sin | cos, counted from 0 without the learned
offset of BART (`sinusoid_layout="halves"`, checked against the folder's stored table), embeddings
scaled by sqrt(d_model) (`scale_embeddings`), swish activations (`activation="silu"`), post-norm
without a final LayerNorm (`final_norm=False`), a final logits bias (`output_bias`), one shared
vocabulary for both sides and the output (`share_embeddings`), and the pad token as the decoder's
start token, never generated (`bad_words_ids`: `suppressed_outputs`).

Ids are reordered into attnkit's convention (<pad> 0, <s> 1, </s> 2, <unk> 3, then the pieces in
Marian's order): <s> is the decoder start token, so its row is a copy of Marian's pad row, and the
vocabulary is one longer. `marian_order(vocab_size, pad, eos, unk)` is that permutation;
`hf_export` applies its inverse.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from attnkit.app.interop.weights_files import fuse_qkv, hf_layer_to_torch, load_all_or_nothing, read_hf_folder
from attnkit.errors import CheckpointError, ConfigError, DataError
from attnkit.nn import SinusoidalPositionalEncoding
from attnkit.translation.config import TranslationConfig, build_model
from attnkit.translation.model import Seq2SeqConfig
from attnkit.translation.sentencepiece_tokenizer import SOURCE_MODEL, TARGET_MODEL, SentencePieceTokenizer
from attnkit.translation.tokenizer import BOS_ID, PAD_ID

ACTIVATIONS: dict[str, Literal["relu", "gelu", "silu"]] = {"swish": "silu", "silu": "silu", "gelu": "gelu",
                                                            "relu": "relu"}


def marian_order(vocab_size: int, pad: int, eos: int, unk: int) -> list[int]:
    """Marian id of each attnkit id: [pad, pad (as <s>, the decoder start), eos, unk, the rest in order]."""
    return [pad, pad, eos, unk] + [i for i in range(vocab_size) if i not in (pad, eos, unk)]


def marian_model_config(hf: dict, vocab_size: int) -> Seq2SeqConfig:
    """The Seq2SeqConfig of a MarianConfig dict; ConfigError for what attnkit cannot represent."""
    activation = ACTIVATIONS.get(hf.get("activation_function", "gelu"))
    if activation is None:
        raise ConfigError(f"Marian activation {hf.get('activation_function')!r} is not one of {', '.join(ACTIVATIONS)}")
    if hf.get("encoder_attention_heads") != hf.get("decoder_attention_heads") or \
            hf.get("encoder_ffn_dim") != hf.get("decoder_ffn_dim"):
        raise ConfigError("the encoder and decoder differ in heads or feed-forward size; attnkit's Transformer "
                          "uses one of each")
    if not hf.get("share_encoder_decoder_embeddings", True):
        raise ConfigError("separate source and target vocabularies (share_encoder_decoder_embeddings=false) are "
                          "not supported")
    pad = hf["pad_token_id"]
    suppressed = (BOS_ID, PAD_ID) if [pad] in (hf.get("bad_words_ids") or []) else (BOS_ID,)
    return Seq2SeqConfig(
        d_model=hf["d_model"], num_heads=hf["encoder_attention_heads"], num_encoder_layers=hf["encoder_layers"],
        num_decoder_layers=hf["decoder_layers"], d_ff=hf["encoder_ffn_dim"], dropout=hf.get("dropout", 0.1),
        positional_encoding="sinusoidal", max_positions=hf.get("max_position_embeddings", 512),
        share_embeddings=True, source_vocab_size=vocab_size + 1, target_vocab_size=vocab_size + 1,
        sinusoid_layout="halves", activation=activation, final_norm=False,
        scale_embeddings=bool(hf.get("scale_embedding", False)), output_bias=True,
        suppressed_outputs=suppressed)


def marian_tensors(weights: dict[str, Tensor], order: list[int], config: Seq2SeqConfig) -> dict[str, Tensor]:
    """A MarianMTModel state dict -> Seq2SeqTransformer names and id order."""
    weights = {k.removeprefix("model."): v for k, v in weights.items()}  # MarianMTModel wraps a MarianModel
    embedding = weights.get("shared.weight", weights.get("encoder.embed_tokens.weight"))
    if embedding is None:
        raise CheckpointError("no shared.weight (the shared embedding) in the Marian weights")
    for name in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"):
        if name in weights and not torch.equal(weights[name], embedding):
            raise CheckpointError(f"{name} differs from the shared embedding; only tied embeddings are supported")
    _check_positions(weights, config)
    index = torch.tensor(order)
    tensors = {"target_embedding.weight": embedding[index], "source_embedding.weight": embedding[index],
               "output_bias": weights.get("final_logits_bias", torch.zeros(1, len(embedding))).reshape(-1)[index]}
    for name, tensor in weights.items():
        side, _, rest = name.partition(".layers.")
        if side in ("encoder", "decoder") and rest:
            number, _, inner = rest.partition(".")
            tensors[f"transformer.{side}.layers.{number}.{hf_layer_to_torch(inner, side)}"] = tensor
    for name in sorted({n.rsplit(".", 2)[0] for n in tensors if ".q_proj." in n}):
        fuse_qkv(tensors, name, name.replace("encoder_attn", "multihead_attn"))
    return tensors


def _check_positions(weights: dict[str, Tensor], config: Seq2SeqConfig) -> None:
    """The stored sinusoid tables must be attnkit's "halves" encoding (else this is another architecture)."""
    for name in ("encoder.embed_positions.weight", "decoder.embed_positions.weight"):
        if name in weights:
            table = weights[name]  # (positions, d_model)
            pe = SinusoidalPositionalEncoding(config.d_model).encoding(table.size(0))
            expected = torch.cat([pe[:, 0::2], pe[:, 1::2]], dim=1)
            if not torch.allclose(table.float(), expected, atol=1e-4):
                raise CheckpointError(f"{name} is not the sinusoidal table Marian uses (sin | cos, from position 0)")


def read_marian(folder: Path):
    """(TranslationConfig, attnkit-named tensors, SentencePieceTokenizer) from a MarianMT folder."""
    folder = Path(folder)
    hf, weights = read_hf_folder(folder)
    hf = {**hf, **_generation_options(folder / "generation_config.json")}
    if hf.get("model_type") != "marian":
        raise CheckpointError(f"{folder}/config.json: model_type is {hf.get('model_type')!r}, not 'marian'")
    vocab = _read_vocab(folder / "vocab.json")
    vocab_size = hf.get("vocab_size", len(vocab))
    pad, eos, unk = hf["pad_token_id"], hf.get("eos_token_id", 0), vocab.get("<unk>", 1)
    if hf.get("decoder_start_token_id", pad) != pad:
        raise ConfigError("decoder_start_token_id differs from pad_token_id; attnkit imports Marian models whose "
                          "decoder starts from pad")
    if len(vocab) != vocab_size or sorted(vocab.values()) != list(range(vocab_size)):
        raise DataError(f"{folder}/vocab.json has {len(vocab)} pieces with ids that are not 0..{vocab_size - 1}")
    order = marian_order(vocab_size, pad, eos, unk)
    by_id = {i: piece for piece, i in vocab.items()}
    start = "<s>" if "<s>" not in vocab else "<decoder_start>"
    pieces = [by_id[pad], start] + [by_id[i] for i in order[2:]]
    tokenizer = SentencePieceTokenizer(_read_bytes(folder / SOURCE_MODEL), _read_bytes(folder / TARGET_MODEL), pieces)
    model_config = marian_model_config(hf, vocab_size)
    config = TranslationConfig(preset="imported", model=model_config, vocab_size=len(pieces), joint_vocab=True,
                               max_length=model_config.max_positions, max_tokens=max(4000, model_config.max_positions),
                               beam_size=hf.get("num_beams") or 4)
    return config, marian_tensors(weights, order, model_config), tokenizer


def _generation_options(path: Path) -> dict:
    """bad_words_ids and num_beams from generation_config.json, where newer transformers keep them."""
    if not path.is_file():
        return {}
    try:
        options = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise DataError(f"{path}: malformed JSON ({error})") from None
    return {key: options[key] for key in ("bad_words_ids", "num_beams") if options.get(key) is not None}


def _read_vocab(path: Path) -> dict[str, int]:
    if not path.is_file():
        raise CheckpointError(f"{path}: not found (a Marian folder has vocab.json, source.spm, target.spm)")
    try:
        vocab = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise DataError(f"{path}: malformed JSON ({error})") from None
    if not isinstance(vocab, dict):
        raise DataError(f"{path}: expected a {{piece: id}} object")
    return vocab


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise CheckpointError(f"{path}: not found (a Marian folder has vocab.json, source.spm, target.spm)")
    return path.read_bytes()


def import_marian(folder: Path, out: Path):
    """Write an attnkit translation run folder at `out` from a MarianMT folder; returns the RunFolder."""
    from attnkit.app.interop.start_state import write_translation_start_state
    from attnkit.storage import RunFolder, save_weights

    config, tensors, tokenizer = read_marian(Path(folder))
    model = build_model(config)
    load_all_or_nothing(model, tensors, str(folder))  # names every unmatched, missing or mis-shaped tensor
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} already exists and is not empty; choose another --out")
    run = RunFolder.create(out, "translation", config.to_dict())
    tokenizer.save(run.path)
    metadata = {"imported_from": str(folder), "arch": config.arch}
    save_weights(run.last_weights, model.state_dict(), metadata)
    save_weights(run.best_weights, model.state_dict(), metadata)
    write_translation_start_state(run, model, config)  # `train translation --resume` continues from these weights
    return run
