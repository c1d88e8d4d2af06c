"""`attnkit export ctranslate2`: a translation run as a CTranslate2 model folder, built from the run's own
weights with CTranslate2's specification API (`ctranslate2.specs.TransformerSpec`), so every layout attnkit
trains exports as it is: post-norm or pre-norm, a final LayerNorm or none (a post-norm final norm is declared on
the spec, and CTranslate2 applies it when present), sinusoids in either layout or learned positions (written as
the position table), the run's activation, embedding scale and output bias, the decoder started from <s> or, for a
`decoder_start="zero"` run, from the zero vector (`start_from_zero_embedding`; <pad>, which such a run never
proposes, gets a -inf output bias).

The folder also holds the run's tokenizer (tokenizer.json + tokenizer_config.json, as `export hf` writes them), so

    tokenizer = AutoTokenizer.from_pretrained(DIR)       # source ids end with </s>, as attnkit's
    tokens = tokenizer.convert_ids_to_tokens(tokenizer(text).input_ids)
    ctranslate2.Translator(DIR).translate_batch([tokens], beam_size=1)

gives attnkit's greedy translation. CTranslate2's beam search scores by log P / |Y|^alpha (transformers'
"power" penalty, attnkit's default), stops when beam_size hypotheses ended, and has no per-sentence length
limit: see docs/deploy.md.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnkit.errors import ConfigError
from attnkit.nn import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from attnkit.translation.config import TranslationConfig
from attnkit.translation.model import Seq2SeqConfig, Seq2SeqTransformer
from attnkit.translation.tokenizer import BOS, EOS, PAD_ID, UNK

QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
# attnkit activation -> CTranslate2's Activation member name
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "silu": "SWISH", "tanh": "Tanh",
               "sigmoid": "Sigmoid"}


def export_ctranslate2(run: Path, out: Path, weights: str = "best", quantization: str | None = None) -> Path:
    """Write translation RUN as a CTranslate2 model folder at OUT (model.bin, vocabularies, tokenizer); returns OUT."""
    from attnkit.app.interop.hf_export import write_fast_tokenizer
    from attnkit.storage import RunFolder
    from attnkit.translation.sentencepiece_tokenizer import SentencePieceTokenizer
    from attnkit.translation.tokenizer import SubwordTokenizer
    from attnkit.translation.translator import Translator

    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ConfigError(f"--quantization must be one of {', '.join(QUANTIZATIONS)}, got {quantization!r}")
    folder = RunFolder.open(Path(run))
    if folder.kind != "translation":
        raise ConfigError(f"{run} is a {folder.kind} run; export ctranslate2 takes a translation run")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} already exists and is not empty; choose another --out")
    tokenizer = SubwordTokenizer.load(folder.path)
    if isinstance(tokenizer, SentencePieceTokenizer) or not tokenizer.joint:
        raise ConfigError(f"{run}: export ctranslate2 takes runs with attnkit's joint BPE vocabulary; for an "
                          f"imported (SentencePiece) model use `attnkit export hf` and ct2-transformers-converter")
    translator = Translator.from_run(folder.path, weights, device="cpu")
    model = translator.model
    if not isinstance(model, Seq2SeqTransformer):
        raise ConfigError(f"{run}: arch '{translator.config.arch}' has no CTranslate2 counterpart; "
                          f"export ctranslate2 takes the Transformer")
    vocabulary = tokenizer.source.get_vocab()  # token -> id
    tokens = sorted(vocabulary, key=vocabulary.__getitem__)
    spec = transformer_spec(translator.config, model.state_dict(), positions_table(model), tokens)
    spec.validate()
    spec.optimize(quantization=quantization)
    out.mkdir(parents=True, exist_ok=True)
    spec.save(str(out))
    write_fast_tokenizer(tokenizer, out, translator.config.max_length)
    return out


def transformer_spec(config: TranslationConfig, tensors: dict[str, Tensor], positions: Tensor | None,
                     tokens: list[str]) -> Any:
    """ctranslate2.specs.TransformerSpec holding a Seq2SeqTransformer's TENSORS (its state dict); POSITIONS:
    the table added to the embeddings (positions, d_model), None for rotary; TOKENS: the joint vocabulary."""
    from ctranslate2.specs import common_spec, transformer_spec

    model = config.model
    assert isinstance(model, Seq2SeqConfig)
    problems = [message for message, bad in (
        ("rotary positions have no CTranslate2 position table", positions is None),
        (f"activation '{model.activation}' (CTranslate2 has {', '.join(ACTIVATIONS)})",
         model.activation not in ACTIVATIONS),
        ("suppressed_outputs (an imported model's)", bool(model.suppressed_outputs))) if bad]
    if problems:
        raise ConfigError("cannot export to CTranslate2: " + "; ".join(problems))
    assert positions is not None
    # The spec declares a final LayerNorm only for pre-norm; a post-norm one (torch's nn.Transformer has it) is
    # declared as pre-norm, then the layers switched to post-norm: the C++ applies the norm wherever it is present.
    spec = transformer_spec.TransformerSpec.from_config(
        (model.num_encoder_layers, model.num_decoder_layers), model.num_heads,
        pre_norm=model.norm_first or model.final_norm, no_final_norm=not model.final_norm,
        activation=getattr(common_spec.Activation, ACTIVATIONS[model.activation]))
    spec.encoder.pre_norm = spec.decoder.pre_norm = model.norm_first
    scale = math.sqrt(model.d_model) if model.scale_embeddings else 1.0
    for side, embedding in ((spec.encoder, "source_embedding.weight"), (spec.decoder, "target_embedding.weight")):
        side.scale_embeddings = scale
        side.position_encodings.encodings = positions.numpy()  # (positions, d_model)
        embeddings = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
        embeddings.weight = tensors[embedding].numpy()
        if model.final_norm:
            _layer_norm(side.layer_norm, tensors, f"transformer.{'encoder' if side is spec.encoder else 'decoder'}"
                                                  f".norm")
    spec.decoder.projection.weight = tensors["target_embedding.weight"].numpy()  # tied (section 3.4)
    bias = tensors["output_bias"].clone() if model.output_bias else None
    if model.decoder_start == "zero":  # Marian's start; <pad> is never proposed (Seq2SeqTransformer.suppressed)
        spec.decoder.start_from_zero_embedding = True
        bias = torch.zeros(len(tokens)) if bias is None else bias
        bias[PAD_ID] = float("-inf")
    if bias is not None:
        spec.decoder.projection.bias = bias.numpy()
    for index, layer in enumerate(spec.encoder.layer):
        prefix = f"transformer.encoder.layers.{index}"
        _self_attention(layer.self_attention, tensors, f"{prefix}.self_attn", f"{prefix}.norm1")
        _feed_forward(layer.ffn, tensors, prefix, "norm2")
    for index, layer in enumerate(spec.decoder.layer):
        prefix = f"transformer.decoder.layers.{index}"
        _self_attention(layer.self_attention, tensors, f"{prefix}.self_attn", f"{prefix}.norm1")
        _cross_attention(layer.attention, tensors, f"{prefix}.multihead_attn", f"{prefix}.norm2")
        _feed_forward(layer.ffn, tensors, prefix, "norm3")
    spec.config.add_source_bos, spec.config.add_source_eos = False, False  # the tokenizer ends sources with </s>
    spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = BOS, EOS, UNK
    spec.config.decoder_start_token = BOS
    spec.config.layer_norm_epsilon = 1e-5  # torch's LayerNorm
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    return spec


@torch.no_grad()
def positions_table(model: Seq2SeqTransformer) -> Tensor | None:
    """What the model adds to the embeddings at positions 0..max_positions-1: (max_positions, d_model), fp32;
    None for rotary positions (applied inside attention)."""
    if isinstance(model.positions, LearnedPositionalEmbedding):
        return model.positions.weight.detach().float().clone()
    if not isinstance(model.positions, SinusoidalPositionalEncoding):
        return None
    table = model.positions.encoding(model.config.max_positions, device=torch.device("cpu"))  # (positions, d_model)
    if model.config.sinusoid_layout == "halves":  # sin(pos w_0), sin(pos w_1), ..., cos(pos w_0), ...
        table = torch.cat([table[:, 0::2], table[:, 1::2]], dim=1)
    return table.float()


def _linear(spec, tensors: dict[str, Tensor], name: str) -> None:
    spec.weight = tensors[f"{name}.weight"].numpy()
    spec.bias = tensors[f"{name}.bias"].numpy()


def _layer_norm(spec, tensors: dict[str, Tensor], name: str) -> None:
    spec.gamma = tensors[f"{name}.weight"].numpy()
    spec.beta = tensors[f"{name}.bias"].numpy()


def _self_attention(spec, tensors: dict[str, Tensor], name: str, norm: str) -> None:
    """CTranslate2 fuses q, k, v as torch's in_proj does: linear[0] is in_proj, linear[1] the output."""
    spec.linear[0].weight = tensors[f"{name}.in_proj_weight"].numpy()  # (3 d_model, d_model): q | k | v
    spec.linear[0].bias = tensors[f"{name}.in_proj_bias"].numpy()
    _linear(spec.linear[1], tensors, f"{name}.out_proj")
    _layer_norm(spec.layer_norm, tensors, norm)


def _cross_attention(spec, tensors: dict[str, Tensor], name: str, norm: str) -> None:
    """Encoder-decoder attention: linear[0] the queries, linear[1] keys | values, linear[2] the output."""
    weight, bias = tensors[f"{name}.in_proj_weight"], tensors[f"{name}.in_proj_bias"]
    d_model = weight.size(1)
    spec.linear[0].weight, spec.linear[0].bias = weight[:d_model].numpy(), bias[:d_model].numpy()
    spec.linear[1].weight, spec.linear[1].bias = weight[d_model:].numpy(), bias[d_model:].numpy()
    _linear(spec.linear[2], tensors, f"{name}.out_proj")
    _layer_norm(spec.layer_norm, tensors, norm)


def _feed_forward(spec, tensors: dict[str, Tensor], prefix: str, norm: str) -> None:
    _linear(spec.linear_0, tensors, f"{prefix}.linear1")
    _linear(spec.linear_1, tensors, f"{prefix}.linear2")
    _layer_norm(spec.layer_norm, tensors, f"{prefix}.{norm}")
