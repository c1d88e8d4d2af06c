"""Captured attention against the reference formula, masks, and the normal path left unchanged."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from torch.testing import assert_close

from attnkit.app.visualize.capture import attention_layers, capture_detection, capture_translation
from attnkit.baselines.bahdanau_rnn import BahdanauRNN, BahdanauRNNConfig, alignment
from attnkit.detection.config import DetrConfig
from attnkit.detection.detr import build_detr
from attnkit.detection.output import DetectionOutput
from attnkit.errors import UserError
from attnkit.nn import MultiHeadAttention, causal_mask, reference_attention
from attnkit.translation.model import Seq2SeqConfig, Seq2SeqTransformer
from attnkit.translation.tokenizer import PAD_ID


def tiny_translator(positional: str = "sinusoidal") -> Seq2SeqTransformer:
    torch.manual_seed(0)
    config = Seq2SeqConfig(d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, d_ff=32, dropout=0.1,
                           positional_encoding=positional, max_positions=32, source_vocab_size=20,
                           target_vocab_size=20)
    return Seq2SeqTransformer(config).eval()


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    source = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, PAD_ID, PAD_ID]])  # (batch, source): the second is padded
    target_input = torch.tensor([[1, 11, 12, 13], [1, 14, 15, 16]])  # (batch, target)
    return source, target_input


def record_inputs(model: torch.nn.Module) -> tuple[dict[str, dict], list]:
    """Every MultiHeadAttention's call arguments, by module name (the inputs the reference needs)."""
    calls: dict[str, dict] = {}
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, MultiHeadAttention):
            def hook(module, args, kwargs, name=name):
                bound = inspect.signature(module.forward).bind(*args, **kwargs)
                bound.apply_defaults()
                calls[name] = dict(bound.arguments)
            handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    return calls, handles


def reference_weights(module: MultiHeadAttention, call: dict) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) per head, recomputed from the module's inputs and projection matrices."""
    w_q, w_k, _ = module.in_proj_weight.chunk(3)
    b_q, b_k, _ = module.in_proj_bias.chunk(3)
    heads = module.num_heads
    q = (call["query"] @ w_q.t() + b_q).unflatten(-1, (heads, -1)).transpose(1, 2)  # (batch, heads, queries, head_dim)
    k = (call["key"] @ w_k.t() + b_k).unflatten(-1, (heads, -1)).transpose(1, 2)  # (batch, heads, keys, head_dim)
    if module.rotary is not None:
        q, k = module.rotary(q), module.rotary(k)
    allowed = torch.ones(q.size(0), 1, q.size(2), k.size(2), dtype=torch.bool)
    if call["key_padding_mask"] is not None:
        allowed &= ~call["key_padding_mask"][:, None, None, :]
    if call["is_causal"]:
        allowed &= causal_mask(q.size(2), k.size(2))
    _, weights = reference_attention(q, k, k, mask=allowed)
    return weights


@pytest.mark.parametrize("positional", ["sinusoidal", "rotary"])
def test_translation_weights_equal_the_reference_formula(positional):
    model = tiny_translator(positional)
    source, target_input = batch()
    calls, handles = record_inputs(model)
    weights = capture_translation(model, source, target_input)
    for handle in handles:
        handle.remove()
    modules = dict(model.named_modules())
    captured = {f"transformer.encoder.layers.{i}.self_attn": w for i, w in enumerate(weights.encoder)}
    captured |= {f"transformer.decoder.layers.{i}.self_attn": w for i, w in enumerate(weights.decoder)}
    captured |= {f"transformer.decoder.layers.{i}.multihead_attn": w for i, w in enumerate(weights.cross)}
    assert len(captured) == 6
    for name, got in captured.items():
        assert_close(got, reference_weights(modules[name], calls[name]), msg=name)


def test_translation_weights_shapes_rows_padding_and_causality():
    model = tiny_translator()
    source, target_input = batch()
    weights = capture_translation(model, source, target_input)
    assert [tuple(w.shape) for w in weights.encoder] == [(2, 2, 5, 5)] * 2
    assert [tuple(w.shape) for w in weights.decoder] == [(2, 2, 4, 4)] * 2
    assert [tuple(w.shape) for w in weights.cross] == [(2, 2, 4, 5)] * 2
    for layer in weights.encoder + weights.decoder + weights.cross:
        assert_close(layer.sum(-1), torch.ones(layer.shape[:-1]))
    for layer in weights.encoder + weights.cross:  # the padded source positions of sentence 2 get nothing
        assert torch.equal(layer[1, :, :, 3:], torch.zeros_like(layer[1, :, :, 3:]))
        assert bool((layer[0] > 0).all())
    future = ~causal_mask(4, 4)
    for layer in weights.decoder:  # masked self-attention: no weight on later target positions
        assert torch.equal(layer[:, :, future], torch.zeros_like(layer[:, :, future]))
    assert tuple(weights.alignment().shape) == (2, 4, 5)
    assert_close(weights.alignment().sum(-1), torch.ones(2, 4))


def test_capture_changes_no_output_and_leaves_no_hooks():
    model = tiny_translator()
    source, target_input = batch()
    with torch.no_grad():
        plain = model(source, target_input)
    weights = capture_translation(model, source, target_input)
    assert_close(weights.logits, plain)
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks
    with torch.no_grad():
        assert_close(model(source, target_input), plain)


def test_rnn_baseline_alignment_is_its_one_cross_attention_layer():
    torch.manual_seed(0)
    model = BahdanauRNN(BahdanauRNNConfig(embedding_dim=8, hidden_size=6, attention_dim=5, source_vocab_size=20,
                                          target_vocab_size=20)).eval()
    source, target_input = batch()
    weights = capture_translation(model, source, target_input)
    assert weights.encoder == [] and weights.decoder == [] and len(weights.cross) == 1
    assert tuple(weights.cross[0].shape) == (2, 1, 4, 5)
    assert_close(weights.alignment(), alignment(model, source, target_input))
    assert torch.equal(weights.cross[0][1, :, :, 3:], torch.zeros(1, 4, 2))


def test_attention_layers_sorts_by_layer_number():
    captured = {f"x.decoder.layers.{i}.multihead_attn": torch.full((1,), float(i)) for i in (10, 2, 0)}
    captured["x.encoder.layers.1.self_attn"] = torch.zeros(1)
    captured["unrelated.attention"] = torch.zeros(1)
    layers = attention_layers(captured)
    assert [float(w) for w in layers["cross"]] == [0.0, 2.0, 10.0]
    assert len(layers["encoder"]) == 1 and layers["decoder"] == []


def tiny_detr() -> torch.nn.Module:
    torch.manual_seed(0)
    config = DetrConfig(backbone="resnet18", hidden_dim=16, num_heads=2, enc_layers=2, dec_layers=2,
                        dim_feedforward=32, dropout=0.0, num_queries=5, num_classes=3)
    return build_detr(config).eval()


def test_detection_weights_fold_to_the_feature_map_and_ignore_padding():
    model = tiny_detr()
    images = torch.randn(2, 3, 96, 128)
    mask = torch.zeros(2, 96, 128, dtype=torch.bool)
    mask[1, :, 64:] = True  # the second image is 64 wide, padded to 128: feature columns 2 and 3 are padding
    with torch.no_grad():
        plain = model(images, mask)
    weights = capture_detection(model, images, mask)
    assert weights.feature_size == (3, 4)
    assert [tuple(w.shape) for w in weights.cross] == [(2, 2, 5, 3, 4)] * 2
    assert [tuple(w.shape) for w in weights.encoder] == [(2, 2, 12, 12)] * 2
    assert [tuple(w.shape) for w in weights.decoder] == [(2, 2, 5, 5)] * 2
    for layer in weights.cross:
        assert_close(layer.flatten(-2).sum(-1), torch.ones(2, 2, 5))
        assert torch.equal(layer[1, :, :, :, 2:], torch.zeros(2, 5, 3, 2))
    padded = torch.tensor([column >= 2 for row in range(3) for column in range(4)])  # row-major cells
    for layer in weights.encoder:
        assert_close(layer.sum(-1), torch.ones(2, 2, 12))
        assert torch.equal(layer[1][..., padded], torch.zeros(2, 12, int(padded.sum())))
    assert_close(weights.outputs.logits, plain.logits)
    assert_close(weights.outputs.boxes, plain.boxes)


def test_detection_cross_attention_equals_the_reference_formula():
    model = tiny_detr()
    images = torch.randn(1, 3, 64, 64)
    mask = torch.zeros(1, 64, 64, dtype=torch.bool)
    calls, handles = record_inputs(model)
    weights = capture_detection(model, images, mask)
    for handle in handles:
        handle.remove()
    name = "transformer.decoder.layers.1.multihead_attn"
    expected = reference_weights(dict(model.named_modules())[name], calls[name])  # (1, heads, queries, cells)
    assert_close(weights.cross[1].flatten(-2), expected)
    assert math.prod(weights.feature_size) == expected.size(-1)


def test_a_detector_without_dense_attention_is_named():
    class Boxes(torch.nn.Module):  # a detector with no attention module at all
        def forward(self, images, mask):
            return DetectionOutput(torch.zeros(1, 2, 3), torch.zeros(1, 2, 4))

    with pytest.raises(UserError, match="Boxes has no dense attention"):
        capture_detection(Boxes(), torch.zeros(1, 3, 32, 32), torch.zeros(1, 32, 32, dtype=torch.bool))
