"""`Translator.from_run(RUN, quantize="int8")`: int8 Linear layers, logits near float32's, a clear refusal otherwise."""

from __future__ import annotations

import pytest
import torch
from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

from attnkit.errors import ConfigError
from attnkit.translation.translator import Translator


def test_int8_translator_has_int8_linears_and_float_like_logits(translation_run):
    reference = Translator.from_run(translation_run, device="cpu")
    quantized = Translator.from_run(translation_run, quantize="int8")
    int8 = [name for name, module in quantized.model.named_modules() if isinstance(module, DynamicInt8Linear)]
    layers = reference.config.model.num_encoder_layers + reference.config.model.num_decoder_layers
    attentions = layers + reference.config.model.num_decoder_layers  # self-attention everywhere, cross in decoders
    # W1, W2, W^O; + cross-attention's W^O; + the output projection, an int8 copy of the tied embedding; + each
    # attention's copies of its packed projection: W^Q|W^K|W^V, W^Q, W^K|W^V
    assert len(int8) == 3 * layers + reference.config.model.num_decoder_layers + 1 + 3 * attentions
    assert "output_projection" in int8
    assert sum(name.endswith("int8_projections.qkv") for name in int8) == attentions
    assert quantized.model.target_embedding.weight.dtype == torch.float32  # looked up as before
    assert next(quantized.model.parameters()).device.type == "cpu"
    source = torch.tensor([[7, 8, 9, 10, 2], [11, 12, 2, 0, 0]])  # (batch, source), padded
    target = torch.tensor([[1, 7, 8], [1, 9, 10]])  # (batch, target)
    with torch.no_grad():
        expected, got = reference.model(source, target), quantized.model(source, target)  # (batch, target, vocab)
    assert not torch.equal(got, expected)
    torch.testing.assert_close(got, expected, atol=0.1, rtol=0)
    assert len(quantized.translate(["one two three", "ten"], beam_size=2)) == 2


def test_an_unknown_quantization_is_refused_by_name(translation_run):
    with pytest.raises(ConfigError, match="'int4'.*int8"):
        Translator.from_run(translation_run, quantize="int4")


def test_the_float32_translator_runs_its_linears_and_tied_projection_through_onednn(translation_run, monkeypatch):
    from attnkit.nn import onednn_linear
    from attnkit.nn.onednn_linear import OneDnnLinear

    if not onednn_linear.onednn_available():
        pytest.skip("this PyTorch has no oneDNN")
    translator = Translator.from_run(translation_run, device="cpu")
    assert any(type(module) is OneDnnLinear for module in translator.model.modules())
    assert translator.model.product is onednn_linear.linear
    monkeypatch.setattr(onednn_linear, "ONEDNN_PAYS", 1)  # every product oneDNN's, even this tiny model's
    hidden = torch.randn(2, 3, translator.model.target_embedding.weight.shape[1])
    with torch.no_grad():
        torch.testing.assert_close(translator.model._project(hidden), torch.nn.functional.linear(
            hidden, translator.model.target_embedding.weight) + (translator.model.output_bias
                                                                if translator.config.model.output_bias else 0))
