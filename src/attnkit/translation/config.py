"""The translation run's configuration: model size, vocabulary, batching and the training recipe.

One frozen dataclass, validated once, saved as the run folder's config.json and reloaded from it.
Presets give whole recipes; any field can then be overridden (`--set model.d_model=256`).

  tiny  trains on 2 CPU cores in minutes
  small a few hours on a CPU, minutes on a GPU
  base  the paper's base model (Vaswani et al. 2017, Table 3): d_model 512, 8 heads, 6+6 layers,
        d_ff 2048, dropout 0.1, warm-up 4000, ~25000 tokens a batch (section 5.1)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

import torch

from attnkit import overrides
from attnkit.baselines.bahdanau_rnn import BahdanauRNN, BahdanauRNNConfig, match_transformer
from attnkit.errors import ConfigError
from attnkit.translation.decoding import DecodingConfig, saved_rules
from attnkit.translation.model import Seq2SeqConfig, Seq2SeqTransformer

PRESET_NAMES = ("tiny", "small", "base")


@dataclass(frozen=True)
class TranslationConfig:
    """Everything a translation run needs besides its data; saved as config.json."""

    preset: str = "base"
    arch: str = "transformer"       # a key of ARCHITECTURES: "rnn" is the baseline of Bahdanau et al. 2015
    model: Seq2SeqConfig | BahdanauRNNConfig = field(default_factory=Seq2SeqConfig)
    vocab_size: int = 8000          # BPE tokens per vocabulary (the paper: 37000 shared for WMT en-de)
    joint_vocab: bool = True        # one vocabulary for both sides (then model.share_embeddings shares all three)
    max_length: int = 256           # longer pairs (in tokens) are skipped and counted
    max_tokens: int = 25000         # padded tokens per batch per side (section 5.1)
    label_smoothing: float = 0.1    # section 5.4
    warmup_steps: int = 4000        # section 5.3
    lr_scale: float = 1.0           # multiplies Eq. 3's curve
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    grad_clip: float | None = 1.0
    accumulate: int = 1
    amp: Literal["auto", "off", "bf16", "fp16"] = "auto"  # auto: bf16 on CUDA and bf16-capable CPUs
    eval_every_minutes: float = 1.0
    eval_sentences: int = 500       # validation sentences translated (greedy) for BLEU at each evaluation
    average_last: int = 5           # checkpoints averaged into weights/average (section 6.1)
    ema_decay: float | None = None  # a moving average of the weights, weights/ema (`attnkit.training.ema`)
    # picks weights/best; chrF also scores one-word sentences
    best_metric: Literal["chrf", "bleu", "exact_match", "loss"] = "chrf"
    beam_size: int = 4              # section 6.1: beam 4
    length_penalty: float = 1.0     # alpha of |Y|^alpha: generate's, CTranslate2's (decoding.py: not t2t's 0.6)
    # how translate ends, scores and constrains hypotheses (attnkit's rules; an import sets its model's)
    decoding: DecodingConfig = field(default_factory=DecodingConfig)
    seed: int = 0
    source_lang: str | None = None
    target_lang: str | None = None

    def __post_init__(self) -> None:
        if self.arch not in ARCHITECTURES:
            raise ConfigError(f"unknown arch '{self.arch}' (known: {', '.join(ARCHITECTURES)})")
        if not isinstance(self.model, ARCHITECTURES[self.arch][0]):
            raise ConfigError(f"arch '{self.arch}' needs a {ARCHITECTURES[self.arch][0].__name__} model config")
        if self.vocab_size < 16:
            raise ConfigError(f"vocab_size must be at least 16, got {self.vocab_size}")
        for name in ("max_length", "max_tokens", "warmup_steps", "accumulate", "eval_sentences", "beam_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.max_tokens < self.max_length:
            raise ConfigError(f"max_tokens ({self.max_tokens}) must be at least max_length ({self.max_length}) "
                              f"so that the longest pair fits in a batch")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.best_metric not in ("chrf", "bleu", "exact_match", "loss"):
            raise ConfigError(f"best_metric must be chrf, bleu, exact_match or loss, got '{self.best_metric}'")
        if self.amp not in ("auto", "off", "bf16", "fp16"):
            raise ConfigError(f"amp must be auto, off, bf16 or fp16, got '{self.amp}'")
        if self.ema_decay is not None and not 0.0 < self.ema_decay < 1.0:
            raise ConfigError(f"ema_decay must be between 0 and 1 (e.g. 0.999), or none, got {self.ema_decay}")
        if self.lr_scale <= 0 or self.eval_every_minutes <= 0:
            raise ConfigError("lr_scale and eval_every_minutes must be positive")

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TranslationConfig:
        """The inverse of `to_dict`; ConfigError naming any unknown key."""
        values = dict(values)
        model = values.pop("model", {})
        decoding = saved_rules(values.pop("decoding", {}))  # absent from run folders written before it existed
        _check_keys(values, cls, "")
        if values.get("arch", "transformer") not in ARCHITECTURES:
            raise ConfigError(f"unknown arch '{values['arch']}' (known: {', '.join(ARCHITECTURES)})")
        model_config = ARCHITECTURES[values.get("arch", "transformer")][0]
        _check_keys(model, model_config, "model.")
        _check_keys(decoding, DecodingConfig, "decoding.")
        if "adam_betas" in values:
            values["adam_betas"] = tuple(values["adam_betas"])
        return cls(**values, model=model_config(**model), decoding=DecodingConfig(**decoding))


# The recipes' layout is tensor2tensor's and Marian's, so that their models export to MarianMTModel and
# CTranslate2 as they are: the sinusoids as sines | cosines (t2t's get_timing_signal_1d; section 3.5's PE with its
# channels reordered, which training cannot tell apart) and no LayerNorm after the last post-norm layer (section 3.1
# has none; torch's nn.Transformer adds one), and the decoder started from the zero vector (Marian's start, which
# CTranslate2's converter assumes). Measured: no loss of quality (BENCHMARKS.md, "Exportable recipe").
EXPORTABLE_LAYOUT: dict[str, Any] = {"sinusoid_layout": "halves", "final_norm": False, "decoder_start": "zero"}


def preset(name: str) -> TranslationConfig:
    """The named recipe; ConfigError listing the known ones."""
    if name == "tiny":
        model = Seq2SeqConfig(d_model=128, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=512,
                              dropout=0.1, **EXPORTABLE_LAYOUT)
        return TranslationConfig(preset="tiny", model=model, vocab_size=2000, max_tokens=3000, warmup_steps=400,
                                 lr_scale=1.0, eval_every_minutes=1.0, average_last=3)
    if name == "small":
        model = Seq2SeqConfig(d_model=256, num_heads=4, num_encoder_layers=3, num_decoder_layers=3, d_ff=1024,
                              dropout=0.1, **EXPORTABLE_LAYOUT)
        return TranslationConfig(preset="small", model=model, vocab_size=8000, max_tokens=8000, warmup_steps=2000,
                                 eval_every_minutes=5.0)
    if name == "base":
        return TranslationConfig(preset="base", model=Seq2SeqConfig(**EXPORTABLE_LAYOUT), vocab_size=32000,
                                 eval_every_minutes=10.0)
    raise ConfigError(f"unknown preset '{name}' (known: {', '.join(PRESET_NAMES)})")


TranslationModel = Seq2SeqTransformer | BahdanauRNN  # what build_model gives; both speak decoding.py's protocol

ARCHITECTURES: dict[str, tuple[type, Callable[[Any], TranslationModel]]] = {  # arch -> (model config, model)
    "transformer": (Seq2SeqConfig, Seq2SeqTransformer),
    "rnn": (BahdanauRNNConfig, BahdanauRNN),
}


def build_model(config: TranslationConfig) -> TranslationModel:
    """The translation model `config.arch` names; every one speaks the decoding protocol of decoding.py."""
    return ARCHITECTURES[config.arch][1](config.model)


def with_architecture(config: TranslationConfig, arch: str) -> TranslationConfig:
    """A Transformer recipe for ARCH: the RNN baseline keeps the training recipe and the embedding size, and
    gets the hidden size that matches the Transformer's parameter count."""
    if arch not in ARCHITECTURES:
        raise ConfigError(f"unknown arch '{arch}' (known: {', '.join(ARCHITECTURES)})")
    if arch == config.arch:
        return config
    if config.arch != "transformer":
        raise ConfigError(f"arch '{arch}' is sized from a transformer preset, not from arch '{config.arch}'")
    vocab = max(config.model.source_vocab_size, config.model.target_vocab_size, 5)
    with torch.device("meta"):  # count the Transformer's parameters without allocating them
        model = cast(Seq2SeqConfig, config.model)  # arch "transformer" (checked above)
        counted = Seq2SeqTransformer(dataclasses.replace(model, source_vocab_size=vocab, target_vocab_size=vocab))
    parameters = sum(p.numel() for p in counted.parameters())
    return dataclasses.replace(config, arch=arch, model=match_transformer(config.model, parameters))


def default_preset_name(cuda: bool) -> str:
    """What a user of this machine wants without --preset: the paper's base model on a GPU, tiny on a CPU."""
    return "base" if cuda else "tiny"


def override(config: TranslationConfig, assignments: list[str]) -> TranslationConfig:
    """CONFIG with `KEY=VALUE` strings applied (`model.d_model=256`, `grad_clip=none`; `attnkit.overrides`)."""
    return overrides.override(config, assignments, TranslationConfig.from_dict)


def _check_keys(values: dict[str, Any], cls: type, prefix: str) -> None:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown config key{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(prefix + k for k in unknown)}")


def check_kept(config: TranslationConfig, assignments: list[str]) -> None:
    """ConfigError if ASSIGNMENTS (`--set`, `--amp`, ...) change a resumed run's saved CONFIG."""
    overrides.check_kept(config, assignments, override)
