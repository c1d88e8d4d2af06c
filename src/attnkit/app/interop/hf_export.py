"""Exporting attnkit run folders to Hugging Face folders that `transformers` loads, where the
architecture matches: a DETR detection run -> `DetrForObjectDetection` (with transformers' own
ResNet backbone, so no timm is needed), a translation Transformer run -> `MarianMTModel`.

The tensor names come from a model `transformers` builds from the exported config: each of its
names is mapped to attnkit's by the import tables (detr_import, marian_import) and q/k/v are cut
out of torch's packed `in_proj_*`, so the export follows the installed version's layout, and the
load is strict (every tensor named, none left over). What does not match (pre-norm DETR, a
translation model with the paper's interleaved positions or final LayerNorms, ...) is refused with
the differences named; `--set model.KEY=VALUE` at training time can make a model exportable.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnkit.app.interop.detr_import import hf_to_official
from attnkit.app.interop.weights_files import hf_layer_to_torch
from attnkit.errors import CheckpointError, ConfigError
from attnkit.translation.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

RESNETS = {"resnet18": ("basic", [2, 2, 2, 2]), "resnet34": ("basic", [3, 4, 6, 3]),
           "resnet50": ("bottleneck", [3, 4, 6, 3]), "resnet101": ("bottleneck", [3, 4, 23, 3])}


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
                                 ("pre_norm DETR has no transformers counterpart", model["pre_norm"])) if bad]
    if problems:
        raise ConfigError("cannot export to DetrForObjectDetection: " + "; ".join(problems))
    layer_type, depths = RESNETS[model["backbone"]]
    hidden = [64, 128, 256, 512] if layer_type == "basic" else [256, 512, 1024, 2048]
    names = list(config.get("class_names") or []) or [str(i) for i in range(model["num_classes"])]
    # Keywords some transformers versions take outside the signature (transformers 4's DetrConfig defaults to
    # a timm backbone; 5 has no such switch, and sets out_features through the backbone mixin).
    backbone_options: dict[str, Any] = {"out_features": ["stage4"]}
    detr_options: dict[str, Any] = {"use_timm_backbone": False, "use_pretrained_backbone": False}
    backbone = transformers.ResNetConfig(layer_type=layer_type, depths=depths, hidden_sizes=hidden, **backbone_options)
    return transformers.DetrConfig(
        **detr_options, backbone_config=backbone,
        d_model=model["hidden_dim"], encoder_layers=model["enc_layers"], decoder_layers=model["dec_layers"],
        encoder_attention_heads=model["num_heads"], decoder_attention_heads=model["num_heads"],
        encoder_ffn_dim=model["dim_feedforward"], decoder_ffn_dim=model["dim_feedforward"],
        num_queries=model["num_queries"], dropout=model["dropout"], dilation=model["dilation"],
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
def marian_hf_config(config: dict, vocab_size: int, pad: int, eos: int, start: int):
    """transformers.MarianConfig for an attnkit translation config dict; ConfigError naming what differs."""
    import transformers

    model = config["model"]
    checks = (("arch must be 'transformer'", config["arch"] != "transformer"),
              ("positional_encoding must be sinusoidal", model.get("positional_encoding") != "sinusoidal"),
              ("sinusoid_layout must be halves", model.get("sinusoid_layout", "interleaved") != "halves"),
              ("final_norm must be false", model.get("final_norm", True)),
              ("norm_first must be false", model.get("norm_first")),
              ("share_embeddings must be true", not model.get("share_embeddings")))
    problems = [message for message, bad in checks if bad]
    if problems:
        raise ConfigError("cannot export to MarianMTModel: " + "; ".join(problems) +
                          " (set these with --set model.KEY=VALUE when training)")
    suppressed = set(model.get("suppressed_outputs", ()))
    # transformers 4 reads the generation settings from the model's config (5 from generation_config, which
    # export_marian sets too); 5's config signature does not list them.
    generation: dict[str, Any] = {"num_beams": config.get("beam_size", 4),
                                  "bad_words_ids": [[pad]] if PAD_ID in suppressed else None}
    return transformers.MarianConfig(
        vocab_size=vocab_size, d_model=model["d_model"], encoder_layers=model["num_encoder_layers"],
        decoder_layers=model["num_decoder_layers"], encoder_attention_heads=model["num_heads"],
        decoder_attention_heads=model["num_heads"], encoder_ffn_dim=model["d_ff"], decoder_ffn_dim=model["d_ff"],
        dropout=model["dropout"], max_position_embeddings=model["max_positions"],
        activation_function={"silu": "swish"}.get(model.get("activation", "relu"), model.get("activation", "relu")),
        scale_embedding=model.get("scale_embeddings", True), pad_token_id=pad, eos_token_id=eos,
        forced_eos_token_id=eos, decoder_start_token_id=start, share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True, **generation)


def export_marian(folder, tensors: dict[str, Tensor], out: Path):
    """A transformers MarianMTModel holding a translation run's weights; its tokenizer files go to `out`."""
    import transformers

    from attnkit.translation.sentencepiece_tokenizer import SentencePieceTokenizer
    from attnkit.translation.tokenizer import SubwordTokenizer

    tokenizer = SubwordTokenizer.load(folder.path)
    size = tokenizer.target_vocab_size
    if isinstance(tokenizer, SentencePieceTokenizer):  # Marian's order: </s>, <unk>, pieces, <pad> (= decoder start)
        order = [EOS_ID, UNK_ID] + list(range(4, size)) + [BOS_ID]
        pad, eos, start = len(order) - 1, 0, len(order) - 1
    else:  # attnkit's own ids: <pad> 0, <s> 1 (decoder start), </s> 2, <unk> 3
        order, pad, eos, start = list(range(size)), PAD_ID, EOS_ID, BOS_ID
    hf_config = marian_hf_config(folder.config, len(order), pad, eos, start)
    index = torch.tensor(order)
    embedding = tensors["target_embedding.weight"][index]
    bias = tensors.get("output_bias", torch.zeros(size))[index]
    model = transformers.MarianMTModel(hf_config).eval()
    names = [k for k in model.state_dict() if "embed_positions" not in k]
    extra = {"final_logits_bias": bias.reshape(1, -1), "embedding": embedding}
    mapped = map_from(names, _marian_attnkit_name, {**tensors, **extra}, "Marian export")
    _load_strict(model, mapped, keep=("embed_positions.weight",))
    model.generation_config.num_beams = folder.config.get("beam_size", 4)  # newer transformers read these here
    if PAD_ID in folder.config["model"].get("suppressed_outputs", ()):
        model.generation_config.bad_words_ids = [[pad]]
    _write_tokenizer(tokenizer, order, out)
    return model


def _marian_attnkit_name(hf_name: str) -> str:
    name = hf_name.removeprefix("model.")
    if name in ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"):
        return "embedding"
    side, _, rest = name.partition(".layers.")
    if side in ("encoder", "decoder") and rest:
        number, _, inner = rest.partition(".")
        return f"transformer.{side}.layers.{number}.{hf_layer_to_torch(inner, side)}"
    return name


def _write_tokenizer(tokenizer, order: list[int], out: Path) -> None:
    """SentencePiece: source.spm, target.spm, vocab.json in Marian's ids (MarianTokenizer loads them);
    attnkit's BPE: tokenizer.json (PreTrainedTokenizerFast loads it)."""
    from attnkit.translation.sentencepiece_tokenizer import SentencePieceTokenizer

    out.mkdir(parents=True, exist_ok=True)
    if isinstance(tokenizer, SentencePieceTokenizer):
        pieces = [tokenizer.pieces[i] for i in order[:-1]] + [tokenizer.pieces[PAD_ID]]
        (out / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}, ensure_ascii=False))
        (out / "source.spm").write_bytes(tokenizer.source_model)
        (out / "target.spm").write_bytes(tokenizer.target_model)
        (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MarianTokenizer"}))
    elif tokenizer.joint:
        tokenizer.source.save(str(out / "tokenizer.json"))
    else:
        raise ConfigError("separate source and target vocabularies cannot be exported as one Marian vocabulary")
