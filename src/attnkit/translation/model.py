"""The sequence-to-sequence Transformer of "Attention Is All You Need" (Vaswani et al. 2017, Figure 1).

    source ids -> Embedding * sqrt(d_model) + PE -> Encoder  -> memory
    target ids -> Embedding * sqrt(d_model) + PE -> Decoder(memory) -> Linear -> softmax

"We share the same weight matrix between the two embedding layers and the pre-softmax linear
transformation ... In the embedding layers, we multiply those weights by sqrt(d_model)"
(section 3.4). The output projection is always tied to the target embedding; with a joint
vocabulary the source embedding is the same matrix too. Positions are sinusoidal (section 3.5),
learned, or rotary (applied inside self-attention instead of added).

The model implements the decoding protocol of `attnkit.translation.decoding` (encode,
start_cache, decode_step), so greedy and beam search use its key/value cache.

Models trained elsewhere differ in details the config states rather than the code special-casing
them; Marian (opus-mt, Junczys-Dowmunt et al. 2018) is `sinusoid_layout="halves"` (sines in the
first half of the channels, cosines in the second; positions from 0, no learned offset),
`activation="silu"` (swish; activations.py has the others such models use), `final_norm=False`
(post-norm without a last LayerNorm), `output_bias=True` (a final logits bias) and
`suppressed_outputs` (ids outside the model's own vocabulary, excluded before the softmax: an
imported model's <s> is a copy of its own decoder start token).

`decoder_start="zero"` starts the decoder from the zero vector (plus position 0's encoding) where the
paper's decoder reads the <s> embedding: Marian's convention, which transformers' MarianMTModel writes as
a zero <pad> row that starts the decoder, and CTranslate2 as `start_from_zero_embedding`. Such a model
never outputs <pad> (Marian's vocabulary has none), so `ct2-transformers-converter`, which drops that
row, keeps the model's distribution.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.errors import ConfigError
from attnkit.nn import (
    DecoderCache,
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    Transformer,
    TransformerDecoder,
)
from attnkit.nn.dropout import Dropout
from attnkit.translation.activations import ACTIVATIONS, feed_forward_activation
from attnkit.translation.tokenizer import BOS_ID, PAD_ID

PositionalEncoding = Literal["sinusoidal", "learned", "rotary"]
DecoderStart = Literal["bos", "zero"]


@dataclass(frozen=True)
class Seq2SeqConfig:
    """Model size; the defaults are the paper's base model (Table 3). Vocabulary sizes come from the tokenizer."""

    d_model: int = 512
    num_heads: int = 8
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    norm_first: bool = False  # the paper is post-norm: LayerNorm(x + Sublayer(x))
    positional_encoding: PositionalEncoding = "sinusoidal"
    max_positions: int = 1024  # the learned table's size
    share_embeddings: bool = True  # source embedding = target embedding (needs a joint vocabulary)
    source_vocab_size: int = 0
    target_vocab_size: int = 0
    # Details of models trained elsewhere (attnkit.app.interop); the defaults are the paper's.
    sinusoid_layout: Literal["interleaved", "halves"] = "interleaved"  # halves: sin | cos (Marian, fairseq)
    activation: str = "relu"  # a key of activations.ACTIVATIONS; silu = swish (Marian)
    final_norm: bool = True  # a LayerNorm after the last encoder and decoder layer (none in Marian)
    scale_embeddings: bool = True  # multiply the embeddings by sqrt(d_model) (section 3.4)
    output_bias: bool = False  # a bias on the output logits (Marian's final_logits_bias)
    suppressed_outputs: tuple[int, ...] = ()  # ids excluded before the softmax (an imported model's <s> copy)
    decoder_start: DecoderStart = "bos"  # the decoder's first input: <s>'s embedding, or zero (Marian)

    def __post_init__(self) -> None:
        object.__setattr__(self, "suppressed_outputs", tuple(int(i) for i in self.suppressed_outputs))
        if self.sinusoid_layout not in ("interleaved", "halves"):
            raise ConfigError(f"sinusoid_layout must be interleaved or halves, got '{self.sinusoid_layout}'")
        if self.decoder_start not in ("bos", "zero"):
            raise ConfigError(f"decoder_start must be bos or zero, got '{self.decoder_start}'")
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"activation must be one of {', '.join(ACTIVATIONS)}, got '{self.activation}'")
        if self.d_model <= 0 or self.num_heads <= 0 or self.d_model % self.num_heads:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})")
        if self.positional_encoding == "rotary" and (self.d_model // self.num_heads) % 2:
            raise ConfigError(f"rotary positions need an even head size, got {self.d_model // self.num_heads}")
        if min(self.num_encoder_layers, self.num_decoder_layers, self.d_ff) < 1:
            raise ConfigError("num_encoder_layers, num_decoder_layers and d_ff must be at least 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.positional_encoding not in ("sinusoidal", "learned", "rotary"):
            raise ConfigError(f"positional_encoding must be sinusoidal, learned or rotary, "
                              f"got '{self.positional_encoding}'")
        if self.share_embeddings and self.source_vocab_size != self.target_vocab_size:
            raise ConfigError("share_embeddings needs one joint vocabulary (source and target sizes differ)")


@dataclass
class EncodedSource:
    """The encoder's output for a batch, and where its padding is."""

    memory: Tensor        # (batch, source_length, d_model)
    padding_mask: Tensor  # (batch, source_length), True at padding
    rows: Tensor | None = None  # (batch,): the encoder row each row is a copy of (beam search's beams); None: its own

    def select(self, rows: Tensor) -> EncodedSource:
        copied = rows if self.rows is None else self.rows.index_select(0, rows)
        return EncodedSource(self.memory.index_select(0, rows), self.padding_mask.index_select(0, rows), copied)


@dataclass
class TranslationCache(DecoderCache):
    """The decoder's cache, and which encoder row each of its rows reads.

    Cross-attention keys and values are the memory's, projected once (at the first step). Beam search
    reorders rows within a sentence, whose beams share one memory, so a reorder that leaves every row
    on its own encoder row moves only the self-attention caches; one that drops sentences
    (finished) or mixes them selects the cross-attention rows too.
    """

    sources: Tensor | None = None  # (batch,) encoder rows; None: unknown, every reorder moves everything

    def reorder(self, batch_indices: Tensor) -> None:
        sources = None if self.sources is None else self.sources.index_select(0, batch_indices)
        if sources is None or self.sources is None or not torch.equal(sources, self.sources):
            super().reorder(batch_indices)
        else:
            for layer in self.layers:
                layer.self_attn.reorder(batch_indices)
        self.sources = sources


class Seq2SeqTransformer(nn.Module):
    """Embeddings * sqrt(d_model) + positions, the encoder-decoder, and the tied output projection."""

    # x W^T + b of the tied output projection: PyTorch's, or oneDNN's where it pays (Translator.from_run)
    product: Callable[[Tensor, Tensor, Tensor | None], Tensor] = staticmethod(F.linear)

    suppressed: Tensor  # (vocab,) bool buffer: True at the ids never proposed

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        if config.source_vocab_size < 5 or config.target_vocab_size < 5:
            raise ConfigError("the vocabulary sizes must be set (from the tokenizer) before building the model")
        self.config, d = config, config.d_model
        self.target_embedding = _embedding(config.target_vocab_size, d)
        self.source_embedding = (self.target_embedding if config.share_embeddings
                                 else _embedding(config.source_vocab_size, d))
        self.positions = _positions(config)
        rotary = RotaryEmbedding(d // config.num_heads) if config.positional_encoding == "rotary" else None
        activation = feed_forward_activation(config.activation)
        self.transformer = Transformer(d, config.num_heads, config.num_encoder_layers, config.num_decoder_layers,
                                       config.d_ff, config.dropout, activation, batch_first=True,
                                       norm_first=config.norm_first, rotary=rotary)
        if not config.final_norm:
            for stack in (self.transformer.encoder, self.transformer.decoder):
                stack.norm = None  # type: ignore[assignment]  # nn.Module's own attribute typing
        if config.output_bias:
            self.output_bias = nn.Parameter(torch.zeros(config.target_vocab_size))  # (vocab,)
        self.output_projection: nn.Module | None = None  # an untied int8 copy, bias included (translator.quantized)
        # ids never proposed at decoding: the config's, and <pad> for a zero start (Marian's vocabulary has none)
        suppressed = {*config.suppressed_outputs, *((PAD_ID,) if config.decoder_start == "zero" else ())}
        self.register_buffer("suppressed", torch.zeros(config.target_vocab_size, dtype=torch.bool),
                             persistent=False)  # (vocab,), True where excluded; not saved with the weights
        self.suppressed[sorted(suppressed)] = True
        self._suppresses = bool(suppressed)
        self.embedding_dropout = Dropout(config.dropout)  # "dropout to the sums of the embeddings and the PE"

    def forward(self, source: Tensor, target_input: Tensor) -> Tensor:
        """source: (batch, source_length), target_input: (batch, target_length) ids
        -> logits (batch, target_length, vocab)."""
        encoded = self.encode(source, source == PAD_ID)
        return self._project(self._decode(target_input, encoded, None, offset=0))

    def encode(self, source: Tensor, source_padding_mask: Tensor) -> EncodedSource:
        x = self._embed(self.source_embedding, source, offset=0)  # (batch, source_length, d_model)
        memory = self.transformer.encode(x, src_key_padding_mask=source_padding_mask)
        return EncodedSource(memory, source_padding_mask)

    def start_cache(self, encoded: EncodedSource) -> TranslationCache:
        layers = cast(TransformerDecoder, self.transformer.decoder).new_cache().layers
        return TranslationCache(layers, encoded.rows)

    def decode_step(self, prefix: Tensor, encoded: EncodedSource, cache: DecoderCache | None) -> Tensor:
        """Next-token logits (batch, vocab). With a cache only prefix's last token is run."""
        if cache is not None:
            hidden = self._decode(prefix[:, cache.length:], encoded, cache, offset=cache.length)
        else:
            hidden = self._decode(prefix, encoded, None, offset=0)
        return self.next_token_logits(hidden[:, -1])  # (batch, vocab)

    def next_token_logits(self, hidden: Tensor) -> Tensor:
        """hidden: (batch, d_model) -> logits (batch, vocab), -inf at the ids never proposed."""
        logits = self._project(hidden)  # (batch, vocab)
        return logits.masked_fill(self.suppressed, float("-inf")) if self._suppresses else logits

    def _decode(self, target: Tensor, encoded: EncodedSource, cache: DecoderCache | None, offset: int) -> Tensor:
        y = self._embed(self.target_embedding, target, offset, start=True)  # (batch, target_length, d_model)
        return self.transformer.decode(y, encoded.memory, memory_key_padding_mask=encoded.padding_mask,
                                       tgt_is_causal=True, cache=cache)  # (batch, target_length, d_model)

    def _embed(self, embedding: nn.Embedding, ids: Tensor, offset: int, start: bool = False) -> Tensor:
        x = self.token_embeddings(embedding, ids, start)  # (batch, length, d_model)
        if isinstance(self.positions, SinusoidalPositionalEncoding):
            x = x + self._sinusoids(offset + ids.size(1), x)[offset:].to(x.dtype)  # PE(pos): (length, d_model)
        elif self.positions is not None:
            x = x + self.positions(x, offset)
        return self.embedding_dropout(x)

    def token_embeddings(self, embedding: nn.Embedding, ids: Tensor, start: bool) -> Tensor:
        """ids: (batch, length) -> embeddings * sqrt(d_model) (batch, length, d_model); START: the decoder's input,
        whose <s> is the zero vector under decoder_start="zero"."""
        x = embedding(ids)  # (batch, length, d_model)
        if start and self.config.decoder_start == "zero":
            x = x.masked_fill((ids == BOS_ID).unsqueeze(-1), 0.0)
        return x * math.sqrt(self.config.d_model) if self.config.scale_embeddings else x

    def _sinusoids(self, length: int, x: Tensor) -> Tensor:
        """PE(0..length-1), computed once and kept (decoding asks for one position per step)."""
        table = getattr(self, "_sinusoid_table", None)
        if table is None or table.size(0) < length or table.device != x.device:
            positions = cast(SinusoidalPositionalEncoding, self.positions)
            table = positions.encoding(max(length, 256), device=x.device)  # (positions, d_model), fp32
            if self.config.sinusoid_layout == "halves":  # sin(pos w_0), sin(pos w_1), ..., cos(pos w_0), ...
                table = torch.cat([table[:, 0::2], table[:, 1::2]], dim=1)
            self._sinusoid_table = table
        return table[:length]

    def _project(self, hidden: Tensor) -> Tensor:
        if self.output_projection is not None:
            return self.output_projection(hidden)  # (..., vocab)
        logits = self.product(hidden, self.target_embedding.weight, None)  # (..., vocab): the embedding's matrix
        return logits + self.output_bias if self.config.output_bias else logits


def _embedding(vocab_size: int, d_model: int) -> nn.Embedding:
    embedding = nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
    nn.init.normal_(embedding.weight, std=d_model ** -0.5)  # times sqrt(d_model): unit scale, like the PE
    with torch.no_grad():
        embedding.weight[PAD_ID].zero_()
    return embedding


def _positions(config: Seq2SeqConfig) -> nn.Module | None:
    if config.positional_encoding == "sinusoidal":
        return SinusoidalPositionalEncoding(config.d_model)
    if config.positional_encoding == "learned":
        return LearnedPositionalEmbedding(config.max_positions, config.d_model)
    return None  # rotary: applied to queries and keys inside self-attention
