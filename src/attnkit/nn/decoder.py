"""The Transformer decoder (Vaswani et al. 2017, section 3.1): N identical layers, each

    x = LayerNorm(x + MaskedSelfAttention(x))       over the outputs produced so far
    x = LayerNorm(x + CrossAttention(x, memory))    "encoder-decoder attention" over the encoder's output
    x = LayerNorm(x + FFN(x))

(post-norm, the paper's; `norm_first` puts the LayerNorm inside the residual instead).

`TransformerDecoderLayer` and `TransformerDecoder` are drop-ins for torch.nn's: the same
arguments, masks, state-dict keys (`self_attn.*`, `multihead_attn.*`, `linear1`, `linear2`,
`norm1..3`; `layers.N.*`, `norm`), which are also DETR's, and error types. The stack calls its
layers as modules, in the caller's layout (hooks fire; a torch.nn.TransformerDecoderLayer may
sit in `.layers`). Beyond torch:

- DETR's positions (Carion et al. 2020, appendix A.3): `query_pos` is added to the queries and
  keys of self-attention and to the queries of cross-attention, `pos` to the memory's keys;
  values never get positions.
- `return_intermediate`: every layer's output, each through the final norm, stacked; DETR's
  auxiliary decoding losses use them.
- Incremental decoding with a `DecoderCache`: the inputs are only the new target positions; the
  self-attention keys and values of the earlier ones, and the memory's, come from the cache, and
  self-attention is causal without a tgt_mask (torch's modules want the mask with the hint).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from attnkit.nn.attention import is_causal_mask, sequence_length
from attnkit.nn.dropout import Dropout
from attnkit.nn.encoder import (
    SequenceLayout,
    attention_sizes,
    check_attn_mask,
    check_heads,
    check_padding_mask,
    check_same_shape,
    clones,
)
from attnkit.nn.errors import InputError, ShapeError
from attnkit.nn.feed_forward import Activation, FeedForwardMixin
from attnkit.nn.kv_cache import KVCache
from attnkit.nn.multi_head_attention import MultiHeadAttention
from attnkit.nn.positional_encoding.rotary import RotaryEmbedding


@dataclass
class DecoderLayerCache:
    """One layer's keys and values: self-attention's grow each step, cross-attention's are the memory's."""

    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=lambda: KVCache(static=True))

    def reorder(self, batch_indices: Tensor) -> None:
        self.self_attn.reorder(batch_indices)
        self.cross_attn.reorder(batch_indices)


@dataclass
class DecoderCache:
    """The decoder's state between steps of incremental decoding, one `DecoderLayerCache` per layer."""

    layers: list[DecoderLayerCache]

    @classmethod
    def empty(cls, num_layers: int) -> DecoderCache:
        return cls([DecoderLayerCache() for _ in range(num_layers)])

    @property
    def length(self) -> int:
        """Target positions decoded so far (the offset of the next position)."""
        return self.layers[0].self_attn.length if self.layers else 0

    def reorder(self, batch_indices: Tensor) -> None:
        """Keep batch rows `batch_indices` (beam search: the surviving hypotheses), in that order.

        The memory and memory_key_padding_mask passed to later steps must be reordered the same way.
        """
        for layer in self.layers:
            layer.reorder(batch_indices)


@dataclass(frozen=True)
class DecoderMasks:
    """The decoder's masks and hints as the caller gave them (torch's forms, the caller's layout), checked."""

    tgt_mask: Tensor | None = None
    memory_mask: Tensor | None = None
    tgt_key_padding_mask: Tensor | None = None
    memory_key_padding_mask: Tensor | None = None
    tgt_is_causal: bool = False
    memory_is_causal: bool = False


class TransformerDecoderLayer(FeedForwardMixin, nn.Module):
    """Masked self-attention, cross-attention over the memory, then FFN; a drop-in for torch.nn's."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: Activation = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None,
                 rotary: RotaryEmbedding | None = None) -> None:
        super().__init__()
        check_heads(d_model, nhead)
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            rotary=rotary, **factory)
        self.multihead_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                                 **factory)
        self._init_feed_forward(d_model, dim_feedforward, dropout, activation, bias, **factory)
        self.norm_first, self.batch_first = norm_first, batch_first
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
                                              for _ in range(3))
        self.dropout1, self.dropout2, self.dropout3 = Dropout(dropout), Dropout(dropout), Dropout(dropout)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None, memory_key_padding_mask: Tensor | None = None,
                tgt_is_causal: bool = False, memory_is_causal: bool = False, pos: Tensor | None = None,
                query_pos: Tensor | None = None, cache: DecoderLayerCache | None = None) -> Tensor:
        """tgt: (queries, batch, d_model), memory: (keys, batch, d_model), batch first, or unbatched; tgt's shape out.

        tgt_is_causal, memory_is_causal: torch's hints that tgt_mask, memory_mask are causal (which,
        as for torch, must then be given). pos: memory's shape, added to the cross-attention keys;
        query_pos: tgt's shape, added to the self-attention queries and keys and the cross-attention
        queries (DETR). With a `cache`, tgt holds only the new positions and self-attention is causal
        unless tgt_mask says otherwise; tgt_key_padding_mask then covers all positions so far,
        (batch, cached + new).
        """
        masks = check_decoder_inputs(self.self_attn.embed_dim, self.self_attn.num_heads, self.batch_first, tgt,
                                     memory, (tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask),
                                     tgt_is_causal, memory_is_causal, pos, query_pos,
                                     0 if cache is None else cache.self_attn.length)
        x = tgt
        if self.norm_first:
            x = x + self._self_attention(self.norm1(x), masks, query_pos, cache)
            x = x + self._cross_attention(self.norm2(x), memory, masks, pos, query_pos, cache)
            return x + self.dropout3(self.feed_forward(self.norm3(x)))
        x = self.norm1(x + self._self_attention(x, masks, query_pos, cache))
        x = self.norm2(x + self._cross_attention(x, memory, masks, pos, query_pos, cache))
        return self.norm3(x + self.dropout3(self.feed_forward(x)))

    def _self_attention(self, x: Tensor, masks: DecoderMasks, query_pos: Tensor | None,
                        cache: DecoderLayerCache | None) -> Tensor:
        q = k = x if query_pos is None else x + query_pos  # positions on queries and keys only (DETR)
        causal = masks.tgt_is_causal or (cache is not None and masks.tgt_mask is None)
        out, _ = self.self_attn(q, k, x, attn_mask=masks.tgt_mask, key_padding_mask=masks.tgt_key_padding_mask,
                                need_weights=False, is_causal=causal, cache=None if cache is None else cache.self_attn)
        return self.dropout1(out)  # tgt's shape

    def _cross_attention(self, x: Tensor, memory: Tensor, masks: DecoderMasks, pos: Tensor | None,
                         query_pos: Tensor | None, cache: DecoderLayerCache | None) -> Tensor:
        query = x if query_pos is None else x + query_pos
        key = memory if pos is None else memory + pos
        out, _ = self.multihead_attn(query, key, memory, attn_mask=masks.memory_mask,
                                     key_padding_mask=masks.memory_key_padding_mask, need_weights=False,
                                     is_causal=masks.memory_is_causal,
                                     cache=None if cache is None else cache.cross_attn)
        return self.dropout2(out)  # tgt's shape


def check_decoder_inputs(d_model: int, heads: int, batch_first: bool, tgt: Tensor, memory: Tensor,
                         masks: tuple[Tensor | None, Tensor | None, Tensor | None, Tensor | None],
                         tgt_is_causal: bool | None, memory_is_causal: bool, pos: Tensor | None,
                         query_pos: Tensor | None, cached: int) -> DecoderMasks:
    """Check the decoder's inputs, in the caller's layout, against each other; errors name the arguments.

    masks: (tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask) as the caller gave them;
    cached: target positions already in the cache (self-attention keys = cached + new).
    """
    layout = SequenceLayout.of("tgt", tgt, d_model, batch_first)
    if SequenceLayout.of("memory", memory, d_model, batch_first) != layout:
        raise ShapeError(f"tgt {tuple(tgt.shape)} and memory {tuple(memory.shape)} must both be batched or both not")
    check_same_shape("query_pos", query_pos, "tgt", tgt)
    check_same_shape("pos", pos, "memory", memory)
    (batch, queries), (memory_batch, keys) = layout.sizes(tgt), layout.sizes(memory)
    if batch != memory_batch:
        raise InputError(f"tgt {tuple(tgt.shape)} and memory {tuple(memory.shape)} differ in batch size "
                         f"(batch_first={batch_first})")
    tgt_mask, memory_mask, tgt_padding, memory_padding = masks
    check_attn_mask("tgt_mask", tgt_mask, batch, heads, queries, cached + queries)
    check_attn_mask("memory_mask", memory_mask, batch, heads, queries, keys)
    check_padding_mask("tgt_key_padding_mask", layout.enter_padding(tgt_padding), batch, cached + queries)
    check_padding_mask("memory_key_padding_mask", layout.enter_padding(memory_padding), batch, keys)
    return DecoderMasks(tgt_mask, memory_mask, tgt_padding, memory_padding, bool(tgt_is_causal), memory_is_causal)


class TransformerDecoder(nn.Module):
    """N copies of `decoder_layer`, then `norm` if given; a drop-in for torch.nn.TransformerDecoder.

    decoder_layer: attnkit's TransformerDecoderLayer, or any module with torch's layer forward and a
    `self_attn` (torch.nn.TransformerDecoderLayer; it then takes neither positions nor a cache).
    return_intermediate: forward returns every layer's output, each through `norm` (DETR),
    stacked in front: (layers, *tgt's shape), e.g. (layers, batch, queries, d_model) batch first.
    """

    def __init__(self, decoder_layer: nn.Module, num_layers: int, norm: nn.Module | None = None,
                 return_intermediate: bool = False) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        self.d_model, self.nhead, self.batch_first = attention_sizes("decoder_layer", decoder_layer)
        self.layers = clones(decoder_layer, num_layers)
        self.num_layers, self.norm, self.return_intermediate = num_layers, norm, return_intermediate

    def new_cache(self) -> DecoderCache:
        """An empty cache for incremental decoding with this decoder."""
        return DecoderCache.empty(self.num_layers)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None, memory_key_padding_mask: Tensor | None = None,
                tgt_is_causal: bool | None = None, memory_is_causal: bool = False, pos: Tensor | None = None,
                query_pos: Tensor | None = None, cache: DecoderCache | None = None) -> Tensor:
        """tgt: (queries, batch, d_model), memory: (keys, batch, d_model), or batch first; tgt's shape out.

        Arguments as `TransformerDecoderLayer.forward`; with a `cache` (from `new_cache`), tgt holds
        only the positions after `cache.length`, and the cache is extended by them. Each layer is
        called as a module with torch's arguments, and pos, query_pos, its cache when given.
        """
        if cache is not None and len(cache.layers) != self.num_layers:
            raise ValueError(f"cache has {len(cache.layers)} layers, the decoder {self.num_layers}")
        masks = (tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask)
        check_decoder_inputs(self.d_model, self.nhead, self.batch_first, tgt, memory, masks, tgt_is_causal,
                             memory_is_causal, pos, query_pos, 0 if cache is None else cache.length)
        positions = {name: x for name, x in (("pos", pos), ("query_pos", query_pos)) if x is not None}
        if tgt_is_causal is None:  # as torch's stack: tell the layers when tgt_mask is the causal one
            tgt_is_causal = cache is None and is_causal_mask(tgt_mask, sequence_length(tgt, self.batch_first))
        x, intermediate = tgt, []
        for index, layer in enumerate(self.layers):
            layer_cache = {} if cache is None else {"cache": cache.layers[index]}
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                      memory_is_causal=memory_is_causal, **positions, **layer_cache)  # tgt's shape
            if self.return_intermediate:
                intermediate.append(x if self.norm is None else self.norm(x))
        if self.return_intermediate:
            return torch.stack(intermediate)  # (layers, *tgt.shape)
        return x if self.norm is None else self.norm(x)
