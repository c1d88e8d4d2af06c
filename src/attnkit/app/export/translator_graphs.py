"""The translator as two ONNX graphs, so that generation in ONNX Runtime is incremental.

At inference the decoder produces one token at a time (Vaswani et al. 2017, section 3.1); the
self-attention keys and values of earlier positions do not change and the encoder-decoder
attention's keys and values are the memory's, so both are computed once and carried along:

  encoder      source ids (batch, source)
               -> cross_keys, cross_values  (layers, batch, heads, source, head_dim)
                  W^K and W^V of each decoder layer's encoder-decoder attention applied to the memory
  decoder step token (batch, 1), position (1,), source_padding_mask (batch, source),
               cross_keys, cross_values, past_keys, past_values (layers, batch, heads, past, head_dim)
               -> logits (batch, vocab), present_keys, present_values (layers, batch, heads, past + 1, head_dim)

Both wrap the trained `Seq2SeqTransformer` and run its own layers with a `DecoderCache` filled
from the graph's inputs, so the arithmetic is the PyTorch model's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import torch
from torch import Tensor, nn

from attnkit.errors import ConfigError
from attnkit.nn import DecoderCache, LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from attnkit.nn.decoder import DecoderLayerCache, TransformerDecoderLayer
from attnkit.nn.kv_cache import KVCache
from attnkit.translation.model import Seq2SeqTransformer

MAX_POSITIONS = 1024  # rows of the sinusoid table baked into the graphs (source and target positions)


class _Embedding(nn.Module):
    """The model's embeddings (its scale, its decoder start) + positions, indexed by a positions tensor instead
    of a Python offset."""

    positions: Tensor | None  # (positions, d_model): a buffer, the learned table, or None (rotary)

    def __init__(self, model: Seq2SeqTransformer, table: nn.Embedding, start: bool = False) -> None:
        super().__init__()
        self.model, self.table, self.start = model, table, start
        positions = model.positions
        if isinstance(positions, SinusoidalPositionalEncoding):  # in the model's layout (interleaved or halves)
            self.register_buffer("positions", model._sinusoids(MAX_POSITIONS, torch.empty(0)).clone(),
                                 persistent=False)
        elif isinstance(positions, LearnedPositionalEmbedding):
            self.positions = positions.weight
        else:
            self.positions = None  # rotary: applied inside self-attention

    def forward(self, ids: Tensor, positions: Tensor) -> Tensor:
        x = self.model.token_embeddings(self.table, ids, self.start)  # (batch, length, d_model)
        if self.positions is None:
            return x
        return x + self.positions.index_select(0, positions).unsqueeze(0)  # PE: (1, length, d_model)


class EncoderGraph(nn.Module):
    """source ids -> the memory's cross-attention keys and values for every decoder layer."""

    def __init__(self, model: Seq2SeqTransformer) -> None:
        super().__init__()
        self.model, self.embed = model, _Embedding(model, model.source_embedding)

    def forward(self, source: Tensor, source_padding_mask: Tensor) -> tuple[Tensor, Tensor]:
        positions = torch.arange(source.size(1), device=source.device)  # (source,)
        x = self.embed(source, positions)  # (batch, source, d_model)
        memory = self.model.transformer.encode(x, src_key_padding_mask=source_padding_mask)
        keys, values = [], []
        layers = cast("Sequence[TransformerDecoderLayer]", self.model.transformer.decoder.layers)  # the model's own
        for layer in layers:
            cache = KVCache(static=True)
            layer.multihead_attn._project(memory[:, :1], memory, memory, cache, "kv")  # fills W^K m, W^V m
            assert cache.key is not None and cache.value is not None  # filled just above
            keys.append(cache.key)
            values.append(cache.value)
        return torch.stack(keys), torch.stack(values)  # (layers, batch, heads, source, head_dim)


class DecoderStepGraph(nn.Module):
    """One decoding step: the new token's logits and the self-attention cache grown by one position."""

    def __init__(self, model: Seq2SeqTransformer) -> None:
        super().__init__()
        self.model, self.embed = model, _Embedding(model, model.target_embedding, start=True)

    def forward(self, token: Tensor, position: Tensor, source_padding_mask: Tensor, cross_keys: Tensor,
                cross_values: Tensor, past_keys: Tensor, past_values: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        y = self.embed(token, position)  # (batch, 1, d_model)
        cache = DecoderCache([DecoderLayerCache(KVCache(past_keys[i], past_values[i]),
                                                KVCache(cross_keys[i], cross_values[i], static=True))
                              for i in range(past_keys.size(0))])
        memory = cross_keys[0].transpose(1, 2).flatten(2)  # (batch, source, d_model): shapes only, K/V are cached
        hidden = self.model.transformer.decode(y, memory, memory_key_padding_mask=source_padding_mask,
                                               tgt_is_causal=True, cache=cache)  # (batch, 1, d_model)
        logits = self.model.next_token_logits(hidden[:, -1])  # (batch, vocab), -inf where never proposed
        present_keys = torch.stack([cast(Tensor, layer.self_attn.key) for layer in cache.layers])  # decode filled them
        present_values = torch.stack([cast(Tensor, layer.self_attn.value) for layer in cache.layers])
        return logits, present_keys, present_values  # (layers, batch, heads, past + 1, head_dim)


def example_inputs(model: Seq2SeqTransformer, batch: int = 3, source: int = 5, past: int = 4):
    """Inputs of the right shapes and types for tracing both graphs."""
    config = model.config
    layers, heads = config.num_decoder_layers, config.num_heads
    head_dim = config.d_model // heads
    ids = torch.full((batch, source), 5, dtype=torch.long)
    mask = torch.zeros(batch, source, dtype=torch.bool)
    cross = torch.zeros(layers, batch, heads, source, head_dim)
    past_kv = torch.zeros(layers, batch, heads, past, head_dim)
    step = (torch.full((batch, 1), 5, dtype=torch.long), torch.tensor([past]), mask, cross, cross.clone(),
            past_kv, past_kv.clone())
    return (ids, mask), step


def export_translator(translator, out: Path) -> dict:
    """Write OUT/encoder.onnx, OUT/decoder_step.onnx, the tokenizer and export.json; returns the manifest."""
    from attnkit.app.export.onnx_export import DECODER_FILE, ENCODER_FILE, export_graph, write_manifest

    if not isinstance(translator.model, Seq2SeqTransformer):
        raise ConfigError(f"ONNX export is for the Transformer; this run is a {translator.config.arch} model")
    model = translator.model.float().cpu().eval()
    out = Path(out)
    encoder_args, step_args = example_inputs(model)
    cache_axes = {1: "batch", 3: "past"}
    export_graph(EncoderGraph(model), encoder_args, out / ENCODER_FILE, ["source", "source_padding_mask"],
                 ["cross_keys", "cross_values"],
                 {"source": {0: "batch", 1: "source"}, "source_padding_mask": {0: "batch", 1: "source"},
                  "cross_keys": {1: "batch", 3: "source"}, "cross_values": {1: "batch", 3: "source"}})
    export_graph(DecoderStepGraph(model), step_args, out / DECODER_FILE,
                 ["token", "position", "source_padding_mask", "cross_keys", "cross_values", "past_keys",
                  "past_values"], ["logits", "present_keys", "present_values"],
                 {"token": {0: "batch"}, "source_padding_mask": {0: "batch", 1: "source"},
                  "cross_keys": {1: "batch", 3: "source"}, "cross_values": {1: "batch", 3: "source"},
                  "past_keys": cache_axes, "past_values": cache_axes, "logits": {0: "batch"},
                  "present_keys": {1: "batch", 3: "length"}, "present_values": {1: "batch", 3: "length"}})
    translator.tokenizer.save(out)
    config = model.config
    return json.loads(write_manifest(out, {
        "kind": "translation", "config": translator.config.to_dict(), "graphs": [ENCODER_FILE, DECODER_FILE],
        "layers": config.num_decoder_layers, "heads": config.num_heads, "head_dim": config.d_model // config.num_heads,
        "max_positions": MAX_POSITIONS}).read_text())
