"""Scaled dot-product attention, the article's self-attention module.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V        (Vaswani et al. 2017, Eq. 1)

`reference_attention` is written exactly as the formula, term by term: it is the teaching path
and the oracle that the tests hold the fast path to. `scaled_dot_product_attention` is the fast
path through `torch.nn.functional.scaled_dot_product_attention`, which dispatches to the flash
and memory-efficient kernels on a GPU and to a fused kernel on the CPU.

Masks follow torch's SDPA: a bool mask is True where a query *may* attend to a key; a float
mask is added to the scores (use -inf to forbid). Masks broadcast to (..., queries, keys).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attnkit.nn.dropout import dropout as attention_dropout


def reference_attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
                        is_causal: bool = False, scale: float | None = None) -> tuple[Tensor, Tensor]:
    """softmax(q . k / sqrt(d)) v, literally; returns (outputs, weights).

    query: (..., queries, d_k); key: (..., keys, d_k); value: (..., keys, d_v).
    Returns outputs (..., queries, d_v) and weights (..., queries, keys), rows summing to one.
    """
    check_attention_inputs(query, key, value, mask)
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    scores = (query @ key.transpose(-2, -1)) * scale  # alpha(i, j) = q_i . k_j / sqrt(d): (..., queries, keys)
    if is_causal:
        scores = scores.masked_fill(~causal_mask(query.size(-2), key.size(-2), device=query.device), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    weights = scores.softmax(dim=-1)  # softmax over j: (..., queries, keys)
    return weights @ value, weights  # b_i = sum_j weights(i, j) v_j: (..., queries, d_v)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None,
                                 dropout: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None) -> Tensor:
    """The fast path: same semantics as `reference_attention`, outputs only (..., queries, d_v).

    With dropout on a CPU, torch's kernel falls back to the formula and draws its mask one weight at a
    time; the formula is then written out here, with `attnkit.nn.dropout`'s faster mask.
    """
    if dropout > 0 and query.device.type == "cpu":  # reference_attention checks the inputs
        _, weights = reference_attention(query, key, value, mask, is_causal, scale)
        return attention_dropout(weights, dropout) @ value
    check_attention_inputs(query, key, value, mask)
    if is_causal and mask is not None:  # torch's kernel takes one or the other: fold causality into the mask
        mask = _merge_masks(mask, causal_mask(query.size(-2), key.size(-2), device=query.device))
        is_causal = False
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout,
                                          is_causal=is_causal, scale=scale)


def causal_mask(queries: int, keys: int, device: torch.device | None = None) -> Tensor:
    """Bool (queries, keys), True where key j <= query i (aligned at the end when keys > queries).

    With a cache of past keys, the new queries are the last `queries` positions of the sequence.
    """
    offset = keys - queries
    rows = torch.arange(queries, device=device).unsqueeze(1) + offset
    return torch.arange(keys, device=device).unsqueeze(0) <= rows


def is_causal_mask(mask: Tensor | None, size: int) -> bool:
    """Whether MASK is the (size, size) causal mask in torch's convention: True (bool) or -inf (float) above the
    diagonal, nothing elsewhere. torch's stacks ask this when `is_causal` is not given, to tell their layers."""
    if mask is None or tuple(mask.shape) != (size, size):
        return False
    above = ~causal_mask(size, size, mask.device)  # (size, size): True where key j > query i
    expected = above if mask.dtype == torch.bool else \
        torch.zeros(size, size, dtype=mask.dtype, device=mask.device).masked_fill(above, float("-inf"))
    return bool((mask == expected).all())


def sequence_length(x: Tensor, batch_first: bool) -> int:
    """The sequence length of a stack's input: (length, d_model) unbatched, else (batch, length, ...) or
    (length, batch, ...) by BATCH_FIRST."""
    return x.shape[0] if x.dim() == 2 else x.shape[1 if batch_first else 0]


def _merge_masks(mask: Tensor, allowed: Tensor) -> Tensor:
    if mask.dtype == torch.bool:
        return mask & allowed
    return mask.masked_fill(~allowed, float("-inf"))


def check_attention_inputs(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None) -> None:
    """Raise ValueError naming the shapes when query, key, value and mask do not fit together."""
    if query.size(-1) != key.size(-1):
        raise ValueError(f"query and key feature sizes differ: query {tuple(query.shape)}, key {tuple(key.shape)}")
    if key.size(-2) != value.size(-2):
        raise ValueError(f"key and value lengths differ: key {tuple(key.shape)}, value {tuple(value.shape)}")
    if mask is None:
        return
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise ValueError(f"attention mask must be bool or floating point, got {mask.dtype}")
    expected = (*query.shape[:-1], key.size(-2))
    try:
        fits = torch.broadcast_shapes(mask.shape, expected) == torch.Size(expected)
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"attention mask of shape {tuple(mask.shape)} does not broadcast to "
                         f"(..., queries, keys) = {expected}")
