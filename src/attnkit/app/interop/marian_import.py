"""Importing Marian translation models (Junczys-Dowmunt et al. 2018; the Helsinki-NLP opus-mt
family) from a Hugging Face `MarianMTModel` folder into an attnkit translation run folder.

A Marian model is the paper's Transformer with details that attnkit's config states
(`Seq2SeqConfig`): sinusoidal positions laid out sin | cos, counted from 0 without the learned
offset of BART (`sinusoid_layout="halves"`, checked against the folder's stored table), embeddings
scaled by sqrt(d_model) or not (`scale_embedding` -> `scale_embeddings`), its feed-forward
activation (`activation_function` -> `activation`: swish, gelu, relu, gelu_new, ...), post-norm
without a final LayerNorm (`final_norm=False`), a final logits bias (`output_bias`), and one
vocabulary and embedding for both sides and the output (`share_embeddings`), or one per side
(`share_encoder_decoder_embeddings=false`, vocab.json + target_vocab.json).

Ids are reordered into attnkit's convention (<pad> 0, <s> 1, </s> 2, <unk> 3, then the pieces in
Marian's order): <s> is the decoder start token, so its row is a copy of the row of Marian's
`decoder_start_token_id` (its pad, in opus-mt), excluded from the softmax (`suppressed_outputs`),
and the vocabulary is one longer. `marian_order(vocab_size, pad, eos, unk, start)` is that
permutation; `hf_export` applies its inverse.

The model's generation config (generation_config.json, or config.json's generation keys without
one, as transformers reads them) becomes the run's beam size, length penalty and `decoding` rules,
so that `translate` gives what `generate` gives: num_beams, length_penalty (|Y|^alpha),
early_stopping, max_length / max_new_tokens, min_length / min_new_tokens, forced_eos_token_id (the
token forced at the limit, </s> or not: MarianConfig's default 0 need not be the eos id),
bad_words_ids (Marian bans its pad), no_repeat_ngram_size and renormalize_logits. What attnkit's
search cannot do (sampling, repetition penalties, ...) is refused, naming the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnkit.app.interop.weights_files import fuse_qkv, hf_layer_to_torch, load_all_or_nothing, read_hf_folder
from attnkit.errors import CheckpointError, ConfigError, DataError
from attnkit.nn import SinusoidalPositionalEncoding
from attnkit.translation.config import TranslationConfig, build_model
from attnkit.translation.decoding import DecodingConfig
from attnkit.translation.model import Seq2SeqConfig
from attnkit.translation.sentencepiece_tokenizer import SOURCE_MODEL, TARGET_MODEL, SentencePieceTokenizer
from attnkit.translation.tokenizer import BOS_ID

# transformers' activation_function -> attnkit's activation (activations.py); prelu and xielu learn parameters
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_tanh",
               "gelu_fast": "gelu_tanh", "gelu_accurate": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_python_tanh": "gelu_tanh", "swish": "silu", "silu": "silu", "quick_gelu": "quick_gelu",
               "gelu_10": "gelu_clipped", "mish": "mish", "tanh": "tanh", "sigmoid": "sigmoid", "relu6": "relu6",
               "relu2": "relu2", "leaky_relu": "leaky_relu", "hardswish": "hardswish", "laplace": "laplace",
               "sqrtsoftplus": "sqrt_softplus", "linear": "identity"}
# generate's options that attnkit's searches do not implement, with the values that leave them off
UNSUPPORTED_GENERATION: dict[str, tuple[Any, ...]] = {
    "do_sample": (False,), "num_beam_groups": (1,), "diversity_penalty": (0.0,), "penalty_alpha": (0.0,),
    "repetition_penalty": (1.0,), "encoder_repetition_penalty": (1.0,), "encoder_no_repeat_ngram_size": (0,),
    "forced_bos_token_id": (), "suppress_tokens": ([],), "begin_suppress_tokens": ([],), "sequence_bias": (),
    "exponential_decay_length_penalty": (), "remove_invalid_values": (False,), "force_words_ids": (),
    "constraints": (), "guidance_scale": (1.0,), "max_time": (), "stop_strings": (), "low_memory": (False,),
    "watermarking_config": (), "dola_layers": (), "prompt_lookup_num_tokens": ()}
DEFAULT_NEW_TOKENS = 20  # generate's length without max_length or max_new_tokens


def marian_order(vocab_size: int, pad: int, eos: int, unk: int, start: int | None = None) -> list[int]:
    """Marian id of each attnkit id: [pad, start (a copy: the decoder's start token, pad unless given), eos, unk,
    the rest in Marian's order]."""
    return [pad, pad if start is None else start, eos, unk] + [i for i in range(vocab_size) if i not in (pad, eos, unk)]


def attnkit_ids(order: list[int]) -> dict[int, int]:
    """The inverse of an order: Marian id -> attnkit id (the start token's own, not the <s> copy)."""
    return {marian: index for index, marian in enumerate(order) if index != BOS_ID}


def marian_model_config(hf: dict, source_size: int, target_size: int) -> Seq2SeqConfig:
    """The Seq2SeqConfig of a MarianConfig dict (sizes: Marian's vocabularies); ConfigError naming what attnkit
    cannot represent."""
    name = hf.get("activation_function", "gelu")
    if name not in ACTIVATIONS:
        raise ConfigError(f"activation_function {name!r} cannot be imported (attnkit maps {', '.join(ACTIVATIONS)}; "
                          f"prelu and xielu have learned parameters)")
    pairs = (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim"))
    differ = [f"{a} ({hf.get(a)}) != {b} ({hf.get(b)})" for a, b in pairs if hf.get(a) != hf.get(b)]
    if differ:
        raise ConfigError(f"{'; '.join(differ)}: attnkit's Transformer has one of each")
    return Seq2SeqConfig(
        d_model=hf["d_model"], num_heads=hf["encoder_attention_heads"], num_encoder_layers=hf["encoder_layers"],
        num_decoder_layers=hf["decoder_layers"], d_ff=hf["encoder_ffn_dim"], dropout=hf.get("dropout", 0.1),
        positional_encoding="sinusoidal", max_positions=hf.get("max_position_embeddings", 1024),
        share_embeddings=hf.get("share_encoder_decoder_embeddings", True), source_vocab_size=source_size + 1,
        target_vocab_size=target_size + 1, sinusoid_layout="halves", activation=ACTIVATIONS[name], final_norm=False,
        scale_embeddings=bool(hf.get("scale_embedding", False)), output_bias=True, suppressed_outputs=(BOS_ID,))


def marian_decoding(generation: dict, eos: int, start: int, to_attnkit: dict[int, int],
                    max_positions: int) -> tuple[int, float, DecodingConfig]:
    """(beam size, alpha, rules) that make attnkit's search give `generate`'s output under GENERATION (the
    generation config's dict); ConfigError naming the options attnkit does not implement."""
    refused = [f"{key}={generation[key]!r}" for key, off in UNSUPPORTED_GENERATION.items()
               if generation.get(key) is not None and generation[key] not in off]
    if refused:
        raise ConfigError(f"the generation config sets {', '.join(refused)}, which attnkit's beam search does not do")
    forced = _one_id(generation.get("forced_eos_token_id"), "forced_eos_token_id")
    if forced is not None and forced not in to_attnkit:
        raise ConfigError(f"forced_eos_token_id ({forced}) is outside the vocabulary")
    min_new = generation.get("min_new_tokens") or 0
    rules = DecodingConfig(
        length_penalty_form="power", early_stopping=_option(generation, "early_stopping", False),
        max_output_length=_output_limit(generation, max_positions),
        min_output_length=max(_option(generation, "min_length", 0), min_new + 1 if min_new else 0),
        forced_at_limit=None if forced is None else to_attnkit[forced],
        banned_outputs=_banned(generation.get("bad_words_ids"), eos, to_attnkit),
        no_repeat_ngram_size=_option(generation, "no_repeat_ngram_size", 0),
        renormalize=_option(generation, "renormalize_logits", False), start_token=to_attnkit[start])
    return _option(generation, "num_beams", 1), float(_option(generation, "length_penalty", 1.0)), rules


def _option(generation: dict, key: str, default: Any) -> Any:
    """GENERATION's KEY, or generate's default when it is unset (absent or null)."""
    return default if generation.get(key) is None else generation[key]


def _output_limit(generation: dict, max_positions: int) -> int:
    """The most output tokens (</s> included): max_new_tokens, or max_length less the start token, or generate's
    default of 20 new tokens within the model's positions."""
    if generation.get("max_new_tokens") is not None:
        return int(generation["max_new_tokens"])
    if generation.get("max_length") is not None:
        if generation["max_length"] < 2:
            raise ConfigError(f"max_length ({generation['max_length']}) leaves no room for an output token")
        return int(generation["max_length"]) - 1
    return min(DEFAULT_NEW_TOKENS + 1, max_positions) - 1


def _banned(bad_words: list[list[int]] | None, eos: int, to_attnkit: dict[int, int]) -> tuple[int, ...]:
    """attnkit ids of single-token bad words (</s> left out, as transformers leaves it out)."""
    banned = []
    for sequence in bad_words or []:
        if sequence == [eos]:
            continue
        if len(sequence) != 1 or sequence[0] not in to_attnkit:
            raise ConfigError(f"bad_words_ids {sequence}: only single tokens of the vocabulary can be banned")
        banned.append(to_attnkit[sequence[0]])
    return tuple(banned)


def _one_id(value: int | list[int] | None, name: str) -> int | None:
    if isinstance(value, list):
        if len(value) != 1:
            raise ConfigError(f"{name} {value}: attnkit's search ends on one </s> id")
        return value[0]
    return value


def marian_tensors(weights: dict[str, Tensor], source_order: list[int], target_order: list[int],
                   config: Seq2SeqConfig) -> dict[str, Tensor]:
    """A MarianMTModel state dict -> Seq2SeqTransformer names and id order."""
    weights = {k.removeprefix("model."): v for k, v in weights.items()}  # MarianMTModel wraps a MarianModel
    source, target = _embeddings(weights, config.share_embeddings)
    output = weights.get("lm_head.weight")
    if output is not None and not torch.equal(output, target):
        raise ConfigError("lm_head.weight differs from the decoder's embedding (tie_word_embeddings=false); "
                          "attnkit's output projection is the target embedding")
    _check_positions(weights, config)
    source_index, target_index = torch.tensor(source_order), torch.tensor(target_order)
    bias = weights.get("final_logits_bias", torch.zeros(1, len(target)))
    tensors = {"target_embedding.weight": target[target_index], "source_embedding.weight": source[source_index],
               "output_bias": bias.reshape(-1)[target_index]}
    for name, tensor in weights.items():
        side, _, rest = name.partition(".layers.")
        if side in ("encoder", "decoder") and rest:
            number, _, inner = rest.partition(".")
            tensors[f"transformer.{side}.layers.{number}.{hf_layer_to_torch(inner, side)}"] = tensor
    for name in sorted({n.rsplit(".", 2)[0] for n in tensors if ".q_proj." in n}):
        fuse_qkv(tensors, name, name.replace("encoder_attn", "multihead_attn"))
    return tensors


def _embeddings(weights: dict[str, Tensor], shared: bool) -> tuple[Tensor, Tensor]:
    """(source, target) embedding matrices; one shared matrix stored under any of its names, or one per side."""
    names = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
    if shared:
        embedding = next((weights[n] for n in names if n in weights), None)
        if embedding is None:
            raise CheckpointError("no shared.weight (the shared embedding) in the Marian weights")
        for name in names:
            if name in weights and not torch.equal(weights[name], embedding):
                raise CheckpointError(f"{name} differs from the shared embedding, but "
                                      f"share_encoder_decoder_embeddings is true")
        return embedding, embedding
    missing = [n for n in names[1:] if n not in weights]
    if missing:
        raise CheckpointError(f"no {' or '.join(missing)} in the Marian weights (share_encoder_decoder_embeddings "
                              f"is false: one embedding per side)")
    return weights[names[1]], weights[names[2]]


def _check_positions(weights: dict[str, Tensor], config: Seq2SeqConfig) -> None:
    """The stored sinusoid tables must be attnkit's "halves" encoding (else this is another architecture)."""
    for name in ("encoder.embed_positions.weight", "decoder.embed_positions.weight"):
        if name in weights:
            table = weights[name]  # (positions, d_model)
            pe = SinusoidalPositionalEncoding(config.d_model).encoding(table.size(0))
            expected = torch.cat([pe[:, 0::2], pe[:, 1::2]], dim=1)
            if not torch.allclose(table.float(), expected, atol=1e-4):
                raise CheckpointError(f"{name} is not the sinusoidal table Marian uses (sin | cos, from position 0)")


def read_marian(folder: Path) -> tuple[TranslationConfig, dict[str, Tensor], SentencePieceTokenizer]:
    """(TranslationConfig, attnkit-named tensors, SentencePieceTokenizer) from a MarianMT folder."""
    folder = Path(folder)
    hf, weights = read_hf_folder(folder)
    if hf.get("model_type") != "marian":
        raise CheckpointError(f"{folder}/config.json: model_type is {hf.get('model_type')!r}, not 'marian'")
    generation = _generation_config(folder, hf)
    pad, eos, start = _special_ids(hf, generation)
    source_vocab, target_vocab, separate = _vocabularies(folder, hf)
    source_size = hf.get("vocab_size", len(source_vocab))
    target_size = (hf.get("decoder_vocab_size") or source_size) if separate else source_size
    _check_ids(source_vocab, source_size, folder / "vocab.json")
    _check_ids(target_vocab, target_size, folder / ("target_vocab.json" if separate else "vocab.json"))
    target_order = _order(target_vocab, target_size, pad, eos, start)
    source_order = _order(source_vocab, source_size, pad, source_vocab.get("</s>", eos)) if separate else target_order
    source_pieces, target_pieces = _pieces(source_vocab, source_order), _pieces(target_vocab, target_order)
    tokenizer = SentencePieceTokenizer(_read_bytes(folder / SOURCE_MODEL), _read_bytes(folder / TARGET_MODEL),
                                       source_pieces, target_pieces if separate else None)
    model_config = marian_model_config(hf, source_size, target_size)
    beam_size, alpha, rules = marian_decoding(generation, eos, start, attnkit_ids(target_order),
                                              model_config.max_positions)
    config = TranslationConfig(preset="imported", model=model_config, vocab_size=len(source_pieces),
                               joint_vocab=not separate, max_length=model_config.max_positions,
                               max_tokens=max(4000, model_config.max_positions), beam_size=beam_size,
                               length_penalty=alpha, decoding=rules)
    return config, marian_tensors(weights, source_order, target_order, model_config), tokenizer


def _generation_config(folder: Path, hf: dict) -> dict:
    """generation_config.json where the folder has one, else config.json's keys: what transformers 5 reads."""
    path = folder / "generation_config.json"
    if not path.is_file():
        return hf
    try:
        generation = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise DataError(f"{path}: malformed JSON ({error})") from None
    if not isinstance(generation, dict):
        raise DataError(f"{path}: expected a JSON object")
    return generation


def _special_ids(hf: dict, generation: dict) -> tuple[int, int, int]:
    """(pad, eos, decoder start) ids, from the generation config first, then config.json, then MarianConfig's
    defaults."""
    pad = hf.get("pad_token_id", 58100)
    eos = _one_id(_option(generation, "eos_token_id", hf.get("eos_token_id", 0)), "eos_token_id")
    start = _option(generation, "decoder_start_token_id", hf.get("decoder_start_token_id", 58100))
    if pad is None or eos is None or start is None:
        raise ConfigError("pad_token_id, eos_token_id and decoder_start_token_id must be set")
    if pad == eos:
        raise ConfigError(f"pad_token_id and eos_token_id are the same id ({pad}); attnkit keeps them apart")
    return pad, eos, start


def _vocabularies(folder: Path, hf: dict) -> tuple[dict[str, int], dict[str, int], bool]:
    """(source vocabulary, target vocabulary, whether they differ): vocab.json, and target_vocab.json for a model
    whose sides have their own embeddings and vocabularies."""
    source = _read_vocab(folder / "vocab.json")
    separate = not hf.get("share_encoder_decoder_embeddings", True) and (folder / "target_vocab.json").is_file()
    return source, _read_vocab(folder / "target_vocab.json") if separate else source, separate


def _check_ids(vocab: dict[str, int], size: int, path: Path) -> None:
    if len(vocab) != size or sorted(vocab.values()) != list(range(size)):
        raise DataError(f"{path} has {len(vocab)} pieces with ids that are not 0..{size - 1} "
                        f"(the model's vocabulary size is {size})")


def _order(vocab: dict[str, int], size: int, pad: int, eos: int, start: int | None = None) -> list[int]:
    unk = vocab.get("<unk>", 1)
    if len({pad, eos, unk}) < 3:
        raise ConfigError(f"pad ({pad}), eos ({eos}) and <unk> ({unk}) must be three ids")
    named = {"pad_token_id": pad, "eos_token_id": eos, "<unk>": unk, "decoder_start_token_id": start}
    outside = [f"{name} ({i})" for name, i in named.items() if i is not None and not 0 <= i < size]
    if outside:
        raise ConfigError(f"{', '.join(outside)} outside the vocabulary (0..{size - 1})")
    return marian_order(size, pad, eos, unk, start)


def _pieces(vocab: dict[str, int], order: list[int]) -> list[str]:
    """The pieces in attnkit's order; <s> (the start token's copy) gets a name of its own."""
    by_id = {i: piece for piece, i in vocab.items()}
    return [by_id[order[0]], "<s>" if "<s>" not in vocab else "<decoder_start>"] + [by_id[i] for i in order[2:]]


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
