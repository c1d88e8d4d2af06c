"""int8 dynamic quantization: which layers become int8, and outputs near float32 on a small random model."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

from attnkit.nn import TransformerDecoderLayer, TransformerEncoderLayer
from attnkit.nn.quantize import int8_linear, int8_share, quantize_int8


def test_every_linear_called_as_a_module_becomes_int8_and_the_original_is_kept():
    torch.manual_seed(0)
    layer = TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    quantized = quantize_int8(layer)
    for name in ("self_attn.out_proj", "linear1", "linear2"):
        module = quantized.get_submodule(name)
        assert isinstance(module, DynamicInt8Linear), name
        assert module.weight().dtype == torch.qint8
    assert isinstance(layer.linear1, nn.Linear) and not isinstance(layer.linear1, DynamicInt8Linear)
    assert quantized.self_attn.in_proj_weight.dtype == torch.float32  # read with F.linear: stays float


def test_int8_share_counts_the_packed_attention_projections_as_float():
    layer = TransformerEncoderLayer(32, 4, 64, batch_first=True)
    assert int8_share(layer) == 0.0
    # int8: W^O (32*32) and the feed-forward (2*32*64); float: W^Q, W^K, W^V (3*32*32)
    assert int8_share(quantize_int8(layer)) == pytest.approx((32 * 32 + 2 * 32 * 64) / (4 * 32 * 32 + 2 * 32 * 64))


def test_quantized_outputs_are_close_to_float32():
    torch.manual_seed(0)
    layer = TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    quantized = quantize_int8(layer)
    target, memory = torch.randn(3, 5, 32), torch.randn(3, 7, 32)  # (batch, length, d_model)
    with torch.no_grad():
        expected, got = layer(target, memory), quantized(target, memory)
    assert not torch.equal(got, expected)  # really another arithmetic
    torch.testing.assert_close(got, expected, atol=0.05, rtol=0)  # LayerNorm'd outputs of scale 1


def test_int8_linear_from_a_weight_read_as_a_tensor_has_one_scale_per_row_and_leaves_the_weight_float():
    torch.manual_seed(0)
    weight = torch.randn(40, 16) * torch.linspace(0.01, 1.0, 40).unsqueeze(1)  # rows of very different ranges
    bias, x = torch.randn(40), torch.randn(3, 16)
    linear = int8_linear(weight, bias)
    assert isinstance(linear, DynamicInt8Linear)
    assert linear.weight().qscheme() == torch.per_channel_affine
    assert linear.weight().q_per_channel_scales().shape == (40,)
    assert weight.dtype == torch.float32  # a copy: the original (an embedding's) is still float
    got, expected = linear(x), x @ weight.t() + bias
    assert not torch.equal(got, expected)
    torch.testing.assert_close(got, expected, atol=0.15, rtol=0)  # activations in 7 bits, one scale per call
    # the small rows keep their precision (0.006 here; one scale for the whole weight: 0.04)
    torch.testing.assert_close(got[:, :4], expected[:, :4], atol=0.01, rtol=0)


def test_int8_attention_copies_the_packed_projection_and_decodes_near_float32():
    """Self- and cross-attention read their int8 copies (qkv; q and kv), in a full pass and step by step."""
    from attnkit.nn.decoder import DecoderCache
    from attnkit.nn.quantize import int8_attention

    torch.manual_seed(0)
    layer = TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    quantized = int8_attention(quantize_int8(layer))
    for attention in (quantized.self_attn, quantized.multihead_attn):
        assert attention.int8_projections is not None and set(attention.int8_projections) == {"qkv", "q", "kv"}
    # int8: everything; the copies count once, as the packed weights they stand for
    assert int8_share(quantized) == pytest.approx(1.0)
    calls: list[str] = []
    for attention in (quantized.self_attn, quantized.multihead_attn):
        for part, linear in attention.int8_projections.items():
            linear.register_forward_hook(lambda *_, part=part: calls.append(part))
    target, memory = torch.randn(3, 5, 32), torch.randn(3, 7, 32)  # (batch, length, d_model)
    with torch.no_grad():
        expected, got = layer(target, memory, tgt_is_causal=True, tgt_mask=_causal(5)), \
            quantized(target, memory, tgt_is_causal=True, tgt_mask=_causal(5))
        assert {"qkv", "q", "kv"} <= set(calls)
        torch.testing.assert_close(got, expected, atol=0.05, rtol=0)
        cache = DecoderCache.empty(1)
        steps = [quantized(target[:, i:i + 1], memory, cache=cache.layers[0]) for i in range(5)]
    # activations are quantized per call, so a step's scale is its own: near float32, not equal to the full pass
    torch.testing.assert_close(torch.cat(steps, 1), expected, atol=0.05, rtol=0)


def _causal(length: int) -> torch.Tensor:
    return torch.triu(torch.full((length, length), float("-inf")), diagonal=1)
