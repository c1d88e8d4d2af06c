"""The encoder-decoder Transformer against torch.nn.Transformer; encode/decode, caching, captured weights."""

import pytest
import torch
from torch.testing import assert_close

from attnkit.nn import (
    MultiHeadAttention,
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
    capture_attention,
)

D, H, FF, BATCH, SOURCE, TARGET = 16, 4, 32, 3, 7, 5
TOL = {"atol": 1e-5, "rtol": 1e-5}
pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")


def pair(**options):
    torch.manual_seed(0)
    options = {"d_model": D, "nhead": H, "num_encoder_layers": 2, "num_decoder_layers": 2, "dim_feedforward": FF,
               "dropout": 0.0, **options}
    theirs = torch.nn.Transformer(**options)
    for parameter in theirs.parameters():  # norms and biases too, so that every parameter matters
        torch.nn.init.normal_(parameter, std=0.3)
    ours = Transformer(**options)
    ours.load_state_dict(theirs.state_dict())
    return ours.eval(), theirs.eval()


def sequences(batch_first, dtype=torch.float32):
    src, tgt = torch.randn(BATCH, SOURCE, D, dtype=dtype), torch.randn(BATCH, TARGET, D, dtype=dtype)
    return (src, tgt) if batch_first else (src.transpose(0, 1), tgt.transpose(0, 1))


def padding(length):
    mask = torch.zeros(BATCH, length, dtype=torch.bool)
    mask[0, -2:] = True
    mask[2, -1] = True
    return mask


def masks(kind):
    causal = torch.nn.Transformer.generate_square_subsequent_mask(TARGET)
    return {
        "none": {},
        "tgt_causal": {"tgt_mask": causal, "tgt_is_causal": True},
        "padding": {"src_key_padding_mask": padding(SOURCE), "memory_key_padding_mask": padding(SOURCE),
                    "tgt_key_padding_mask": padding(TARGET)},
        "translation": {"tgt_mask": causal, "src_key_padding_mask": padding(SOURCE).float() * -1e9,
                        "memory_key_padding_mask": padding(SOURCE).float() * -1e9},
        "attention_masks": {"src_mask": torch.rand(SOURCE, SOURCE) > 0.8,
                            "memory_mask": torch.rand(TARGET, SOURCE) > 0.8,
                            "tgt_mask": torch.randn(BATCH * H, TARGET, TARGET)},
    }[kind]


def test_state_dict_keys_are_torchs():
    ours, theirs = pair()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert {"encoder.norm.weight", "decoder.norm.bias", "decoder.layers.1.multihead_attn.in_proj_weight",
            "encoder.layers.0.linear1.weight", "decoder.layers.0.norm3.weight"} <= set(ours.state_dict())


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize(("norm_first", "activation"), [(False, "relu"), (True, "gelu"), (False, "gelu")])
@pytest.mark.parametrize("mask", ["none", "tgt_causal", "padding", "translation", "attention_masks"])
def test_matches_torch(batch_first, norm_first, activation, mask):
    ours, theirs = pair(batch_first=batch_first, norm_first=norm_first, activation=activation)
    (src, tgt), kwargs = sequences(batch_first), masks(mask)
    expected = theirs(src, tgt, **kwargs).detach()  # with autograd on: torch's reference path
    with torch.no_grad():
        assert_close(ours(src, tgt, **kwargs), expected, **TOL)


def test_training_gradients_match_torch():
    ours, theirs = pair(batch_first=True)
    (src, tgt), kwargs = sequences(True), masks("padding")
    ours(src, tgt, **kwargs).square().sum().backward()
    theirs(src, tgt, **kwargs).square().sum().backward()
    for (name, ours_p), theirs_p in zip(ours.named_parameters(), theirs.parameters()):
        assert_close(ours_p.grad, theirs_p.grad, atol=1e-4, rtol=1e-4, msg=name)


def test_dropout_is_active_in_training_only():
    torch.manual_seed(0)
    model = Transformer(D, H, 1, 1, FF, dropout=0.5, batch_first=True)
    src, tgt = sequences(True)
    assert (model(src, tgt) - model(src, tgt)).abs().max() > 1e-3
    model.eval()
    assert_close(model(src, tgt), model(src, tgt))


def test_float64_and_device_follow_the_module():
    ours, theirs = pair(batch_first=True)
    ours, theirs = ours.double(), theirs.double()
    src, tgt = sequences(True, torch.float64)
    out = ours(src, tgt, tgt_is_causal=True, tgt_mask=masks("tgt_causal")["tgt_mask"].double())
    assert out.dtype == torch.float64
    assert_close(out, theirs(src, tgt, tgt_mask=masks("tgt_causal")["tgt_mask"].double()), atol=1e-12, rtol=1e-12)
    meta = Transformer(D, H, 1, 1, FF, batch_first=True, device="meta")
    assert all(parameter.device.type == "meta" for parameter in meta.parameters())
    assert meta(src.to("meta", torch.float32), tgt.to("meta", torch.float32)).device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runs_on_the_inputs_device():
    ours, _ = pair(batch_first=True)
    (src, tgt), kwargs = sequences(True), masks("padding")
    with torch.no_grad():
        expected = ours(src, tgt, **kwargs)
        ours = ours.cuda()
        out = ours(src.cuda(), tgt.cuda(), **{name: mask.cuda() for name, mask in kwargs.items()})
    assert out.device.type == "cuda"
    assert_close(out.cpu(), expected, atol=1e-4, rtol=1e-4)  # TF32 and other kernels on the GPU


def test_encode_then_decode_is_forward():
    ours, _ = pair(batch_first=True)
    (src, tgt), kwargs = sequences(True), masks("padding")
    with torch.no_grad():
        memory = ours.encode(src, src_key_padding_mask=kwargs["src_key_padding_mask"])
        assert memory.shape == src.shape
        decoded = ours.decode(tgt, memory, tgt_key_padding_mask=kwargs["tgt_key_padding_mask"],
                              memory_key_padding_mask=kwargs["memory_key_padding_mask"])
        assert_close(decoded, ours(src, tgt, **kwargs))


@pytest.mark.parametrize("batch_first", [False, True])
def test_step_by_step_decode_with_a_cache_equals_the_full_decode(batch_first):
    ours, _ = pair(batch_first=batch_first)
    src, tgt = sequences(batch_first)
    source_padding = padding(SOURCE)
    time_dim = 1 if batch_first else 0
    with torch.no_grad():
        full = ours(src, tgt, tgt_mask=Transformer.generate_square_subsequent_mask(TARGET),
                    src_key_padding_mask=source_padding, memory_key_padding_mask=source_padding)
        memory = ours.encode(src, src_key_padding_mask=source_padding)
        cache = ours.decoder.new_cache()
        steps = [ours.decode(tgt.narrow(time_dim, t, 1), memory, memory_key_padding_mask=source_padding, cache=cache)
                 for t in range(TARGET)]
        assert_close(torch.cat(steps, dim=time_dim), full, **TOL)


def test_custom_encoder_and_decoder_are_used():
    torch.manual_seed(0)
    encoder = TransformerEncoder(TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True), 1)  # no norm
    decoder = TransformerDecoder(TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True), 1)
    model = Transformer(D, H, custom_encoder=encoder, custom_decoder=decoder, batch_first=True).eval()
    assert model.encoder is encoder and model.decoder is decoder
    assert "encoder.norm.weight" not in model.state_dict()
    src, tgt = sequences(True)
    assert_close(model(src, tgt), decoder(tgt, encoder(src)))


def test_generate_square_subsequent_mask_is_torchs():
    expected = torch.nn.Transformer.generate_square_subsequent_mask(4)
    assert_close(Transformer.generate_square_subsequent_mask(4), expected)


def test_capture_attention_records_every_attention_without_changing_outputs():
    ours, theirs = pair(batch_first=True)
    (src, tgt), kwargs = sequences(True), masks("padding")
    with torch.no_grad():
        plain = ours(src, tgt, **kwargs)
        with capture_attention(ours) as weights:
            captured_out = ours(src, tgt, **kwargs)
        assert_close(captured_out, plain, **TOL)
        names = {name for name, module in ours.named_modules() if isinstance(module, MultiHeadAttention)}
        assert set(weights) == names and len(names) == 6
        assert weights["encoder.layers.0.self_attn"].shape == (BATCH, H, SOURCE, SOURCE)
        assert weights["decoder.layers.1.multihead_attn"].shape == (BATCH, H, TARGET, SOURCE)
        assert_close(weights["decoder.layers.0.self_attn"].sum(-1), torch.ones(BATCH, H, TARGET))
        # the first encoder layer's weights are torch's for the same input and mask
        torch_layer = theirs.encoder.layers[0]
        _, expected = torch_layer.self_attn(src, src, src, key_padding_mask=kwargs["src_key_padding_mask"],
                                            need_weights=True, average_attn_weights=False)
        assert_close(weights["encoder.layers.0.self_attn"], expected, **TOL)
        weights.clear()
        ours(src, tgt)
        assert weights == {}  # the hooks are gone after the block
        attention = ours.encoder.layers[0].self_attn
        with capture_attention(attention) as weights:
            attention(src, src, src, None, False)  # need_weights=False given positionally
        assert weights[""].shape == (BATCH, H, SOURCE, SOURCE)


def test_bad_inputs_name_the_shapes():
    with pytest.raises(ValueError, match=r"d_model \(16\).*nhead \(5\)"):
        Transformer(D, 5)
    ours, _ = pair(batch_first=True)
    src, tgt = sequences(True)
    with pytest.raises(ValueError, match=r"src \(3, 7, 16\) and tgt \(2, 5, 16\) differ in batch size"):
        ours(src, tgt[:2])
    with pytest.raises(ValueError, match=r"d_model=16"):
        ours(src, torch.randn(BATCH, TARGET, 8))
    with pytest.raises(ValueError, match=r"src_key_padding_mask must be .*\(3, 7\), got \(3, 5\)"):
        ours(src, tgt, src_key_padding_mask=padding(TARGET))
