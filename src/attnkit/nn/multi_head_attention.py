"""Multi-head attention (Vaswani et al. 2017, section 3.2.2).

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,   head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

Each head has its own projections and attends only within itself; the heads' outputs are
concatenated and mixed by one more matrix, W^O (`out_proj`).

`MultiHeadAttention` is a drop-in for `torch.nn.MultiheadAttention`: the same constructor
arguments, parameter names (`in_proj_weight`, `in_proj_bias`, or `q_proj_weight`,
`k_proj_weight`, `v_proj_weight` when kdim/vdim differ from embed_dim; `out_proj`; `bias_k`,
`bias_v` with add_bias_kv), forward signature, mask conventions (bool True = *not* allowed to
attend; float masks are added) and error types (`attnkit.nn.errors`). torch's two extras from
fairseq are here as there: add_bias_kv appends one learned key and value (in the projected space)
to every sequence, add_zero_attn then one zero key and value per head; masks get an allowed column
for each. Beyond torch's module it decodes incrementally with a `KVCache` and can rotate queries
and keys with a `RotaryEmbedding`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

from attnkit.nn.attention import causal_mask, reference_attention, scaled_dot_product_attention
from attnkit.nn.dropout import dropout as attention_dropout
from attnkit.nn.errors import InputError, ShapeError
from attnkit.nn.kv_cache import KVCache
from attnkit.nn.positional_encoding.rotary import RotaryEmbedding

CAUSAL_HINT_WITHOUT_MASK = ("Need attn_mask if specifying the is_causal hint. You may use the Transformer module "
                            "method `generate_square_subsequent_mask` to create this mask.")  # torch's words


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O; a drop-in for torch.nn.MultiheadAttention."""

    bias_k: nn.Parameter | None
    bias_v: nn.Parameter | None
    # x W^T + b of the packed projections: PyTorch's, or oneDNN's where it pays (`nn.onednn_linear.onednn_linears`)
    product: Callable[[Tensor, Tensor, Tensor | None], Tensor] = staticmethod(F.linear)

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device=None, dtype=None,
                 rotary: RotaryEmbedding | None = None) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        if embed_dim % num_heads:
            raise ShapeError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        factory = {"device": device, "dtype": dtype}
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.dropout, self.batch_first, self.rotary = dropout, batch_first, rotary
        if self._qkv_same_embed_dim:
            self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim, **factory))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = nn.Parameter(torch.empty(embed_dim, embed_dim, **factory))
            self.k_proj_weight = nn.Parameter(torch.empty(embed_dim, self.kdim, **factory))
            self.v_proj_weight = nn.Parameter(torch.empty(embed_dim, self.vdim, **factory))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(3 * embed_dim, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **factory)
        # int8 copies of the packed W^Q|W^K|W^V ("qkv"), W^Q ("q") and W^K|W^V ("kv") for CPU inference, used in
        # their place when set (`nn.quantize.int8_attention`)
        self.int8_projections: nn.ModuleDict | None = None
        if add_bias_kv:  # a learned key and value, already projected: (1, 1, embed_dim) each
            self.bias_k = nn.Parameter(torch.empty(1, 1, embed_dim, **factory))
            self.bias_v = nn.Parameter(torch.empty(1, 1, embed_dim, **factory))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """torch's initialisation: Xavier-uniform projections, zero biases, Xavier-normal bias_k and bias_v."""
        for weight in (self.in_proj_weight, self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
            if weight is not None:
                nn.init.xavier_uniform_(weight)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)
        for extra in (self.bias_k, self.bias_v):
            if extra is not None:
                nn.init.xavier_normal_(extra)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False, cache: KVCache | None = None) -> tuple[Tensor, Tensor | None]:
        """Inputs as torch's: (queries, batch, embed_dim), or batch first, or unbatched (queries, embed_dim).

        Returns (output, weights); weights are (batch, queries, keys) averaged over heads, or
        (batch, heads, queries, keys), or None when need_weights is False (the fast path); keys
        count the bias and zero keys of add_bias_kv and add_zero_attn.
        is_causal is torch's hint that attn_mask is the causal mask, and like torch wants the mask;
        with a growing `cache` alone it means the causal mask, aligned at the end. With a `cache`,
        key and value are only the new positions (self-attention) or, for a static cache, the
        memory, projected on the first call and reused afterwards.
        """
        unbatched = not check_ranks(query, key, value, key_padding_mask, attn_mask, self.num_heads)
        check_mask_dtype("key_padding_mask", key_padding_mask)
        check_mask_dtype("attn_mask", attn_mask)
        if is_causal and attn_mask is None and (cache is None or cache.static):
            raise InputError(CAUSAL_HINT_WITHOUT_MASK)
        shared = "qkv" if query is key is value else "kv" if key is value else ""
        query, key, value = (self._to_batch_first(x, unbatched) for x in (query, key, value))
        if unbatched and key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
        q, k, v = self._project(query, key, value, cache, shared)  # (batch, heads, length, head_dim)
        allowed = self._allowed(attn_mask, key_padding_mask, is_causal, q, k)
        k, v, extra = self._append_keys(k, v)
        dropout = self.dropout if self.training else 0.0
        if need_weights:
            heads, weights = self._attend_with_weights(q, k, v, _allow_extra_keys(allowed, extra), dropout)
            weights = weights.mean(dim=1) if average_attn_weights else weights
        elif is_causal and key_padding_mask is None and not extra and q.size(-2) == k.size(-2):
            # the hint, as torch takes it: the mask is the causal one, so the kernel makes it
            heads, weights = scaled_dot_product_attention(q, k, v, dropout=dropout, is_causal=True), None
        else:
            heads = scaled_dot_product_attention(q, k, v, mask=_allow_extra_keys(allowed, extra), dropout=dropout)
            weights = None
        output = self.out_proj(heads.transpose(1, 2).flatten(2))  # concat heads: (batch, queries, embed_dim)
        output = output.squeeze(0) if unbatched else output if self.batch_first else output.transpose(0, 1)
        if unbatched and weights is not None:
            weights = weights.squeeze(0)
        return output, weights

    def _to_batch_first(self, x: Tensor, unbatched: bool) -> Tensor:
        if unbatched:
            return x.unsqueeze(0)
        return x if self.batch_first else x.transpose(0, 1)

    def _project(self, query: Tensor, key: Tensor, value: Tensor, cache: KVCache | None,
                 shared: str) -> tuple[Tensor, Tensor, Tensor]:
        """Q W^Q, K W^K, V W^V split into heads: each (batch, heads, length, head_dim).

        query, key, value: batch first. `shared` says which inputs are one tensor ("qkv":
        self-attention, "kv": encoder-decoder attention), so their projections run as one matrix
        multiplication.
        """
        self._check_features(query, key, value)
        offset = cache.length if cache is not None and not cache.static else 0
        memory = _static_keys_and_values(cache)
        bias = self._in_proj_bias(query.dtype)
        if shared == "qkv" and self._qkv_same_embed_dim and memory is None:
            q, k, v = self._linear("qkv", query, self.in_proj_weight, bias).chunk(3, dim=-1)
        else:
            w_q, w_k, w_v = self._weights()
            b_q, b_k, b_v = bias.chunk(3) if bias is not None else (None, None, None)
            q = self._linear("q", query, w_q, b_q)
            if memory is not None:
                return self._rotate(self._split_heads(q), offset), memory[0], memory[1]
            if shared and self._qkv_same_embed_dim:  # W^K and W^V are the last two thirds of in_proj_weight
                bias_kv = None if bias is None else bias[self.embed_dim:]
                k, v = self._linear("kv", key, self.in_proj_weight[self.embed_dim:], bias_kv).chunk(2, dim=-1)
            else:
                k, v = self.product(key, w_k, b_k), self.product(value, w_v, b_v)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        q, k = self._rotate(q, offset), self._rotate(k, offset)
        return (q, *cache.extend(k, v)) if cache is not None else (q, k, v)

    def _linear(self, part: str, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        """x WEIGHT^T + BIAS, by the int8 copy of that PART of the packed projection where the module has them."""
        if self.int8_projections is not None:
            return self.int8_projections[part](x)
        return self.product(x, weight, bias)

    def _in_proj_bias(self, dtype: torch.dtype) -> Tensor | None:
        """in_proj_bias in the inputs' dtype: torch adds a half-precision bias to double inputs, and so does this."""
        bias = self.in_proj_bias
        return bias if bias is None or bias.dtype == dtype else bias.to(dtype)

    def _weights(self) -> tuple[Tensor, Tensor, Tensor]:
        if self._qkv_same_embed_dim:
            w_q, w_k, w_v = self.in_proj_weight.chunk(3)
            return w_q, w_k, w_v
        return self.q_proj_weight, self.k_proj_weight, self.v_proj_weight

    def _split_heads(self, x: Tensor) -> Tensor:
        # (batch, length, embed_dim) -> (batch, heads, length, head_dim)
        return x.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)

    def _rotate(self, x: Tensor, offset: int) -> Tensor:
        return x if self.rotary is None else self.rotary(x, offset)

    def _append_keys(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, int]:
        """torch's add_bias_kv, then add_zero_attn: keys and values (batch, heads, keys + extra, head_dim), extra.

        Neither enters a cache: they are appended to the whole sequence's keys at every call.
        """
        extra = 0
        if (self.bias_k is None) != (self.bias_v is None):
            raise ShapeError("bias_k and bias_v must both be set or both be None")  # torch asserts so too
        if self.bias_k is not None and self.bias_v is not None:
            batch = k.size(0)
            # bias_k, bias_v: (1, 1, embed_dim) -> (batch, heads, 1, head_dim)
            k = torch.cat([k, self._split_heads(self.bias_k.expand(batch, 1, -1))], dim=-2)
            v = torch.cat([v, self._split_heads(self.bias_v.expand(batch, 1, -1))], dim=-2)
            extra += 1
        if self.add_zero_attn:
            k = torch.cat([k, k.new_zeros(*k.shape[:-2], 1, k.size(-1))], dim=-2)  # a zero key and value per head
            v = torch.cat([v, v.new_zeros(*v.shape[:-2], 1, v.size(-1))], dim=-2)
            extra += 1
        return k, v, extra

    def _check_features(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        """query, key, value: batch first. torch asserts on the query's size and on key against value, and
        fails in the projection (RuntimeError) on the others."""
        if query.size(-1) != self.embed_dim:
            raise ShapeError(f"was expecting embedding dimension of {self.embed_dim}, but got {query.size(-1)}: "
                             f"query shape {tuple(query.shape)}")
        for name, x, size in (("key", key, self.kdim), ("value", value, self.vdim)):
            if x.size(-1) != size:
                raise InputError(f"{name} has {x.size(-1)} features, expected {size}: {name} shape {tuple(x.shape)}")
        if key.shape[:2] != value.shape[:2]:
            raise ShapeError(f"batch or length mismatch: key {tuple(key.shape)}, value {tuple(value.shape)} "
                             f"(batch_first={self.batch_first})")
        if query.size(0) != key.size(0):
            raise InputError(f"batch or length mismatch: query {tuple(query.shape)}, key {tuple(key.shape)}, "
                             f"value {tuple(value.shape)} (batch_first={self.batch_first})")

    def _allowed(self, attn_mask: Tensor | None, key_padding_mask: Tensor | None, is_causal: bool,
                 q: Tensor, k: Tensor) -> Tensor | None:
        """torch's masks (True = forbidden) merged into one SDPA mask (True = allowed, or additive float).

        q: (batch, heads, queries, head_dim), k: (batch, heads, keys, head_dim), before any appended keys.
        """
        batch, queries, keys = q.size(0), q.size(-2), k.size(-2)
        masks = []
        if attn_mask is not None:
            masks.append(self._attn_mask(attn_mask, batch, queries, keys))
        elif is_causal:  # with a growing cache: aligned at the end, the queries are the last positions
            masks.append(~causal_mask(queries, keys, device=q.device))
        if key_padding_mask is not None:
            if key_padding_mask.shape != (batch, keys):
                raise ShapeError(f"key_padding_mask must be (batch, keys) = {(batch, keys)}, "
                                 f"got {tuple(key_padding_mask.shape)}")
            masks.append(key_padding_mask.view(batch, 1, 1, keys))
        return _merge(masks, q.dtype)

    def _attn_mask(self, attn_mask: Tensor, batch: int, queries: int, keys: int) -> Tensor:
        if attn_mask.dim() == 2 and attn_mask.shape == (queries, keys):
            return attn_mask
        if attn_mask.dim() == 3 and attn_mask.shape == (batch * self.num_heads, queries, keys):
            return attn_mask.view(batch, self.num_heads, queries, keys)
        raise InputError(f"attn_mask must be (queries, keys) = {(queries, keys)} or (batch * heads, queries, keys) = "
                         f"{(batch * self.num_heads, queries, keys)}, got {tuple(attn_mask.shape)}")

    def _attend_with_weights(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None,
                             dropout: float) -> tuple[Tensor, Tensor]:
        """The explicit path, when the caller wants the attention weights: (batch, heads, queries, keys)."""
        _, weights = reference_attention(q, k, v, mask=allowed)
        kept = attention_dropout(weights, dropout)
        return kept @ v, kept


def _static_keys_and_values(cache: KVCache | None) -> tuple[Tensor, Tensor] | None:
    """A filled static cache's keys and values (the memory's, projected on the first call), else None."""
    if cache is None or not cache.static or cache.key is None or cache.value is None:
        return None
    return cache.key, cache.value


def nested_message(name: str) -> str:
    """torch takes nested tensors only on its inference fast path (and asserts elsewhere); attnkit never."""
    return (f"{name} is a nested tensor: attnkit does not support NestedTensor inputs; pad the sequences "
            f"into one tensor and pass a key_padding_mask (True at the padding)")


def check_ranks(query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None,
                attn_mask: Tensor | None, num_heads: int) -> bool:
    """torch's rank checks (ShapeError, an AssertionError as torch's); True when the inputs are batched.

    Batched: query, key, value 3-D, key_padding_mask 2-D; unbatched: all 2-D, key_padding_mask
    1-D, a 3-D attn_mask (heads, queries, keys). attn_mask is 2-D or 3-D in both.
    """
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if tensor.is_nested:
            raise ShapeError(nested_message(name))
    if query.dim() not in (2, 3):
        raise ShapeError(f"query should be unbatched 2D or batched 3D tensor but received {query.dim()}-D "
                         f"query tensor")
    batched = query.dim() == 3
    rank, kind = (3, "batched (3-D)") if batched else (2, "unbatched (2-D)")
    if key.dim() != rank or value.dim() != rank:
        raise ShapeError(f"For {kind} `query`, expected `key` and `value` to be {rank}-D but found {key.dim()}-D "
                         f"and {value.dim()}-D tensors respectively")
    if key_padding_mask is not None and key_padding_mask.dim() != rank - 1:
        raise ShapeError(f"For {kind} `query`, expected `key_padding_mask` to be `None` or {rank - 1}-D but found "
                         f"{key_padding_mask.dim()}-D tensor instead")
    if attn_mask is not None and attn_mask.dim() not in (2, 3):
        raise ShapeError(f"For {kind} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found "
                         f"{attn_mask.dim()}-D tensor instead")
    if not batched and attn_mask is not None and attn_mask.dim() == 3:
        expected = (num_heads, query.size(0), key.size(0))
        if attn_mask.shape != expected:
            raise ShapeError(f"Expected `attn_mask` shape to be {expected} but got {tuple(attn_mask.shape)}")
    return batched


def check_mask_dtype(name: str, mask: Tensor | None) -> None:
    if mask is not None and mask.dtype != torch.bool and not mask.is_floating_point():
        raise ShapeError(f"only bool and floating types of {name} are supported, got {mask.dtype}")


def _merge(masks: list[Tensor], dtype: torch.dtype) -> Tensor | None:
    """Forbidden-masks (bool True, or additive float) -> one SDPA mask: bool allowed, or float additive."""
    if not masks:
        return None
    if all(mask.dtype == torch.bool for mask in masks):
        forbidden = masks[0]
        for mask in masks[1:]:
            forbidden = forbidden | mask
        return ~forbidden
    total = torch.zeros((), dtype=dtype, device=masks[0].device)
    for mask in masks:
        if mask.dtype == torch.bool:
            mask = torch.zeros_like(mask, dtype=dtype).masked_fill(mask, float("-inf"))
        total = total + mask.to(dtype)
    return total


def _allow_extra_keys(allowed: Tensor | None, extra: int) -> Tensor | None:
    """The SDPA mask (..., queries, keys) with `extra` appended keys every query may attend to (torch pads with 0)."""
    if allowed is None or not extra:
        return allowed
    return F.pad(allowed, (0, extra), value=True if allowed.dtype == torch.bool else 0.0)
