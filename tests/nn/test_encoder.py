"""The encoder against torch.nn's: same state dict, same outputs; DETR positions against DETR's formula."""

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from attnkit.nn import RotaryEmbedding, TransformerEncoder, TransformerEncoderLayer, get_activation

D, H, FF, BATCH, LENGTH = 16, 4, 32, 3, 6
TOL = {"atol": 1e-5, "rtol": 1e-5}


def layer_pair(**options):
    torch.manual_seed(0)
    options = {"dropout": 0.0, **options}
    theirs = torch.nn.TransformerEncoderLayer(D, H, FF, **options)
    ours = TransformerEncoderLayer(D, H, FF, **options)
    ours.load_state_dict(theirs.state_dict())
    return ours.eval(), theirs.eval()


def source(batch_first, dtype=torch.float32):
    x = torch.randn(BATCH, LENGTH, D, dtype=dtype)
    return x if batch_first else x.transpose(0, 1)


def masks(kind):
    padding = torch.zeros(BATCH, LENGTH, dtype=torch.bool)
    padding[0, -2:] = True
    padding[2, -1] = True
    blocked = torch.rand(LENGTH, LENGTH) > 0.7
    blocked.fill_diagonal_(False)
    causal = torch.ones(LENGTH, LENGTH, dtype=torch.bool).triu(1)  # True above the diagonal: the future
    return {
        "none": {},
        "padding": {"src_key_padding_mask": padding},
        "bool": {"src_mask": blocked},
        "float": {"src_mask": torch.randn(LENGTH, LENGTH)},
        "per_head": {"src_mask": torch.randn(BATCH * H, LENGTH, LENGTH)},
        "causal_and_padding": {"src_mask": causal, "src_key_padding_mask": padding, "is_causal": True},
    }[kind]


MASKS = ["none", "padding", "bool", "float", "per_head", "causal_and_padding"]


def test_feed_forward_is_equation_2():
    ours, _ = layer_pair()
    x = torch.randn(2, 4, D)
    w1, b1, w2, b2 = ours.linear1.weight, ours.linear1.bias, ours.linear2.weight, ours.linear2.bias
    expected = torch.clamp(x @ w1.T + b1, min=0) @ w2.T + b2  # FFN(x) = max(0, x W1 + b1) W2 + b2
    assert_close(ours.feed_forward(x), expected)
    assert get_activation("gelu") is F.gelu and get_activation(torch.tanh) is torch.tanh
    with pytest.raises(ValueError, match="'swish'"):
        get_activation("swish")


def test_state_dict_keys_are_torchs():
    ours, theirs = layer_pair()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    stack = TransformerEncoder(ours, 2, torch.nn.LayerNorm(D))
    torch_stack = torch.nn.TransformerEncoder(theirs, 2, torch.nn.LayerNorm(D), enable_nested_tensor=False)
    assert list(stack.state_dict()) == list(torch_stack.state_dict())


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("mask", MASKS)
def test_layer_matches_torch(batch_first, norm_first, activation, mask):
    ours, theirs = layer_pair(batch_first=batch_first, norm_first=norm_first, activation=activation)
    src, kwargs = source(batch_first), masks(mask)
    expected = theirs(src, **kwargs).detach()  # with autograd on: torch's reference path, not its fused kernel
    with torch.no_grad():
        assert_close(ours(src, **kwargs), expected, **TOL)


@pytest.mark.parametrize("activation", [F.silu, torch.nn.Tanh()])
def test_callable_activation_matches_torch(activation):
    ours, theirs = layer_pair(batch_first=True, activation=activation)
    src, kwargs = source(True), masks("padding")
    expected = theirs(src, **kwargs).detach()
    with torch.no_grad():
        assert_close(ours(src, **kwargs), expected, **TOL)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("mask", ["none", "padding", "float", "causal_and_padding"])
def test_stack_matches_torch(batch_first, norm_first, mask):
    ours, theirs = layer_pair(batch_first=batch_first, norm_first=norm_first, activation="gelu")
    stack = TransformerEncoder(ours, 3, torch.nn.LayerNorm(D)).eval()
    torch_stack = torch.nn.TransformerEncoder(theirs, 3, torch.nn.LayerNorm(D), enable_nested_tensor=False).eval()
    for parameter in torch_stack.parameters():  # every layer different, so a wrong layer order fails
        torch.nn.init.normal_(parameter, std=0.3)
    stack.load_state_dict(torch_stack.state_dict())
    src, kwargs = source(batch_first), masks(mask)
    kwargs["mask"] = kwargs.pop("src_mask", None)
    expected = torch_stack(src, **kwargs).detach()
    with torch.no_grad():
        assert_close(stack(src, **kwargs), expected, **TOL)


def test_stack_without_final_norm_and_training_gradients_match_torch():
    ours, theirs = layer_pair(batch_first=True)
    stack, torch_stack = TransformerEncoder(ours, 2), torch.nn.TransformerEncoder(theirs, 2, enable_nested_tensor=False)
    stack.load_state_dict(torch_stack.state_dict())
    src = source(True)
    stack(src).square().sum().backward()
    torch_stack(src).square().sum().backward()
    for (name, ours_p), theirs_p in zip(stack.named_parameters(), torch_stack.parameters()):
        assert_close(ours_p.grad, theirs_p.grad, **TOL, msg=name)


def test_float64_follows_the_module_and_input():
    ours, theirs = layer_pair(batch_first=True)
    ours, theirs = ours.double(), theirs.double()
    src = source(True, torch.float64)
    padding = masks("padding")["src_key_padding_mask"]
    out = ours(src, src_key_padding_mask=padding)
    assert out.dtype == torch.float64
    assert_close(out, theirs(src, src_key_padding_mask=padding), atol=1e-12, rtol=1e-12)


def test_unbatched_equals_a_batch_of_one():
    ours, _ = layer_pair()
    stack = TransformerEncoder(ours, 2)
    src = torch.randn(LENGTH, D)
    padding = torch.tensor([False] * (LENGTH - 1) + [True])
    out = stack(src, src_key_padding_mask=padding)
    assert out.shape == (LENGTH, D)
    assert_close(out, stack(src.unsqueeze(1), src_key_padding_mask=padding.unsqueeze(0))[:, 0])


def detr_encoder_layer(layer, src, pos, padding):
    """facebookresearch/detr models/transformer.py TransformerEncoderLayer.forward_post / forward_pre."""
    def attend(x):
        q = k = x + pos
        return layer.self_attn(q, k, value=x, key_padding_mask=padding)[0]
    ffn = lambda x: layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))  # noqa: E731
    if layer.norm_first:
        src = src + attend(layer.norm1(src))
        return src + ffn(layer.norm2(src))
    src = layer.norm1(src + attend(src))
    return layer.norm2(src + ffn(src))


@pytest.mark.parametrize("norm_first", [False, True])
def test_detr_positions_go_to_queries_and_keys(norm_first):
    ours, theirs = layer_pair(norm_first=norm_first)  # DETR is sequence first
    src, pos = source(False), source(False)
    padding = masks("padding")["src_key_padding_mask"]
    expected = detr_encoder_layer(theirs, src, pos, padding).detach()
    with torch.no_grad():
        with_pos = ours(src, src_key_padding_mask=padding, pos=pos)
        assert_close(with_pos, expected, **TOL)
        assert (with_pos - ours(src, src_key_padding_mask=padding)).abs().max() > 1e-2
        stack = TransformerEncoder(ours, 2)
        assert_close(stack(src, src_key_padding_mask=padding, pos=pos),
                     ours(ours(src, src_key_padding_mask=padding, pos=pos), src_key_padding_mask=padding, pos=pos))


def test_rotary_breaks_permutation_equivariance():
    torch.manual_seed(0)
    src, order = torch.randn(2, LENGTH, D), torch.randperm(LENGTH)
    plain = TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True)
    rotary = TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, rotary=RotaryEmbedding(D // H))
    rotary.load_state_dict(plain.state_dict())
    with torch.no_grad():  # without positions, self-attention is order-blind: permuting inputs permutes outputs
        assert_close(plain(src[:, order]), plain(src)[:, order], **TOL)
        assert (rotary(src[:, order]) - rotary(src)[:, order]).abs().max() > 1e-2


def test_bad_inputs_name_the_shapes():
    with pytest.raises(ValueError, match=r"d_model \(10\).*nhead \(4\)"):
        TransformerEncoderLayer(10, 4)
    ours, _ = layer_pair(batch_first=True)
    stack = TransformerEncoder(ours, 2)
    src = source(True)
    with pytest.raises(ValueError, match=r"d_model=16, got \(3, 6, 8\)"):
        stack(torch.randn(3, 6, 8))
    with pytest.raises(ValueError, match=r"src_key_padding_mask must be .*\(3, 6\).*\(3, 5\)"):
        stack(src, src_key_padding_mask=torch.zeros(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"src_mask must be .*\(6, 6\).*\(12, 6, 6\).*\(6, 5\)"):
        stack(src, mask=torch.zeros(6, 5))
    with pytest.raises(ValueError, match=r"pos must have the shape of src \(3, 6, 16\), got \(3, 5, 16\)"):
        stack(src, pos=torch.zeros(3, 5, D))
    with pytest.raises(ValueError, match="num_layers"):
        TransformerEncoder(ours, -1)


def test_zero_layers_is_the_final_norm_alone():
    ours, _ = layer_pair(batch_first=True)
    norm = torch.nn.LayerNorm(D)
    src = source(True)
    assert_close(TransformerEncoder(ours, 0, norm)(src, pos=torch.randn_like(src)), norm(src))
    assert_close(TransformerEncoder(ours, 0)(src), src)
    with pytest.raises(ValueError, match="d_model=16"):
        TransformerEncoder(ours, 0)(torch.randn(2, 3, 8))
