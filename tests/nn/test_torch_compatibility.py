"""What "a drop-in for torch.nn's" promises beyond the happy path: bias=False, add_bias_kv and add_zero_attn,
layers called as modules (hooks fire, torch's layers may be swapped in), torch's exception types, mixed dtypes
and factory kwargs."""

import pytest
import torch
from torch.testing import assert_close

from attnkit.nn import (
    InputError,
    KVCache,
    MultiHeadAttention,
    ShapeError,
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
    causal_mask,
)

E, H, FF, BATCH, QUERIES, KEYS = 8, 2, 16, 3, 4, 5
TOL = {"atol": 1e-5, "rtol": 1e-5}
pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")


def mha_pair(**options):
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(E, H, **options)
    with torch.no_grad():
        for parameter in theirs.parameters():  # biases too, so that each one matters
            parameter.normal_(0.0, 0.3)
    ours = MultiHeadAttention(E, H, **options)
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def layer_pair(kind: str, **options):
    torch.manual_seed(0)
    options = {"dropout": 0.0, **options}
    theirs = getattr(torch.nn, kind)(E, H, FF, **options)
    ours = {"TransformerEncoderLayer": TransformerEncoderLayer,
            "TransformerDecoderLayer": TransformerDecoderLayer}[kind](E, H, FF, **options)
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def sequence(length: int, batch_first: bool, features: int = E) -> torch.Tensor:
    x = torch.randn(BATCH, length, features)
    return x if batch_first else x.transpose(0, 1)


def padding(length: int) -> torch.Tensor:
    mask = torch.zeros(BATCH, length, dtype=torch.bool)
    mask[0, -2:] = True
    mask[2, -1] = True
    return mask


def attention_masks(kind: str) -> dict:
    blocked = torch.rand(QUERIES, KEYS) > 0.7
    blocked[:, 0] = False
    return {
        "none": {},
        "key_padding": {"key_padding_mask": padding(KEYS)},
        "float_key_padding": {"key_padding_mask": padding(KEYS).float() * -1e9},
        "bool_attn": {"attn_mask": blocked},
        "float_attn": {"attn_mask": torch.randn(QUERIES, KEYS)},
        "per_head_attn": {"attn_mask": torch.randn(BATCH * H, QUERIES, KEYS)},
        "both": {"attn_mask": blocked, "key_padding_mask": padding(KEYS)},
    }[kind]


def grads(module: torch.nn.Module) -> dict:
    return {name: parameter.grad for name, parameter in module.named_parameters()}


# bias=False


@pytest.mark.parametrize("kdim", [None, 6])
def test_mha_without_bias_is_torchs(kdim):
    ours, theirs = mha_pair(bias=False, kdim=kdim, vdim=kdim)
    assert ours.in_proj_bias is None and ours.out_proj.bias is None
    assert list(ours.state_dict()) == list(theirs.state_dict())
    q, k = sequence(QUERIES, False), sequence(KEYS, False, kdim or E)
    assert_close(ours(q, k, k)[0], theirs(q, k, k)[0], **TOL)


@pytest.mark.parametrize("kind", ["TransformerEncoderLayer", "TransformerDecoderLayer"])
def test_layers_and_transformer_without_bias_are_torchs(kind):
    ours, theirs = layer_pair(kind, bias=False, batch_first=True)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert all("bias" not in name for name in ours.state_dict())
    inputs = (sequence(QUERIES, True),) if kind == "TransformerEncoderLayer" else (sequence(QUERIES, True),
                                                                                   sequence(KEYS, True))
    assert_close(ours(*inputs), theirs(*inputs), **TOL)
    model, torch_model = Transformer(E, H, 1, 1, FF, bias=False), torch.nn.Transformer(E, H, 1, 1, FF, bias=False)
    assert [(k, v.shape) for k, v in model.state_dict().items()] == [
        (k, v.shape) for k, v in torch_model.state_dict().items()]


# add_bias_kv and add_zero_attn


@pytest.mark.parametrize("add_bias_kv, add_zero_attn", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("kdim", [None, 6])
@pytest.mark.parametrize("mask", ["none", "key_padding", "float_key_padding", "bool_attn", "float_attn",
                                  "per_head_attn", "both"])
def test_bias_kv_and_zero_attn_match_torch(add_bias_kv, add_zero_attn, batch_first, kdim, mask):
    ours, theirs = mha_pair(add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn, kdim=kdim, vdim=kdim,
                            batch_first=batch_first)
    q, k = sequence(QUERIES, batch_first), sequence(KEYS, batch_first, kdim or E)
    kwargs = attention_masks(mask)
    extra = add_bias_kv + add_zero_attn
    for need_weights in (True, False):
        expected, expected_weights = theirs(q, k, k, need_weights=need_weights, average_attn_weights=False, **kwargs)
        actual, weights = ours(q, k, k, need_weights=need_weights, average_attn_weights=False, **kwargs)
        assert_close(actual, expected, **TOL)
        if need_weights:
            assert weights.shape == (BATCH, H, QUERIES, KEYS + extra)
            assert_close(weights, expected_weights, **TOL)
    theirs(q, k, k, **kwargs)[0].square().sum().backward()
    ours(q, k, k, **kwargs)[0].square().sum().backward()
    for name, grad in grads(theirs).items():
        assert_close(grads(ours)[name], grad, **TOL, msg=name)


def test_bias_kv_parameters_are_torchs():
    ours, theirs = mha_pair(add_bias_kv=True, add_zero_attn=True)
    assert [(k, v.shape) for k, v in ours.state_dict().items()] == [
        (k, v.shape) for k, v in theirs.state_dict().items()]
    assert ours.bias_k.shape == ours.bias_v.shape == (1, 1, E)
    assert ours.add_zero_attn is True
    fresh = MultiHeadAttention(E, H, add_bias_kv=True)
    assert fresh.bias_k.abs().sum() > 0 and fresh.bias_v.abs().sum() > 0  # Xavier-normal, as torch's
    plain = MultiHeadAttention(E, H)
    assert plain.bias_k is None and plain.bias_v is None and plain.add_zero_attn is False


@pytest.mark.parametrize("add_bias_kv, add_zero_attn", [(True, False), (False, True), (True, True)])
def test_bias_kv_and_zero_attn_with_a_cache_equal_the_full_causal_pass(add_bias_kv, add_zero_attn):
    ours, _ = mha_pair(add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn, batch_first=True)
    x = torch.randn(2, 6, E)
    with torch.no_grad():
        full, _ = ours(x, x, x, attn_mask=~causal_mask(6, 6), is_causal=True)
        cache = KVCache()
        steps = [ours(x[:, t:t + 1], x[:, t:t + 1], x[:, t:t + 1], cache=cache)[0] for t in range(6)]
    assert cache.length == 6  # the bias and zero keys are appended at each call, never cached
    assert_close(torch.cat(steps, dim=1), full, **TOL)


# layers called as modules


def test_hooks_on_the_stacks_layers_fire():
    model = Transformer(E, H, 2, 2, FF, dropout=0.0, batch_first=True)
    calls = []
    for name in ("encoder", "decoder"):
        for index, layer in enumerate(getattr(model, name).layers):
            label = f"{name}.{index}"
            layer.register_forward_pre_hook(lambda module, args, label=label: calls.append(label))
            layer.register_forward_hook(lambda module, args, output, label=label: calls.append(label + " done"))
    model(sequence(KEYS, True), sequence(QUERIES, True))
    assert calls == ["encoder.0", "encoder.0 done", "encoder.1", "encoder.1 done",
                     "decoder.0", "decoder.0 done", "decoder.1", "decoder.1 done"]


def test_a_hook_can_replace_a_layers_output():
    layer = TransformerEncoderLayer(E, H, FF, dropout=0.0)
    encoder = TransformerEncoder(layer, 2)
    src = sequence(KEYS, False)
    encoder.layers[1].register_forward_hook(lambda module, args, output: torch.zeros_like(output))
    assert torch.equal(encoder(src), torch.zeros_like(src))


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_torch_encoder_layers_swapped_in(batch_first, norm_first):
    ours, theirs = layer_pair("TransformerEncoderLayer", batch_first=batch_first, norm_first=norm_first)
    stack = TransformerEncoder(ours, 2, torch.nn.LayerNorm(E)).eval()
    src, kpm, mask = sequence(KEYS, batch_first), padding(KEYS), torch.rand(KEYS, KEYS) > 0.8
    expected = stack(src, mask=mask, src_key_padding_mask=kpm)
    stack.layers[1] = theirs.eval()  # the same weights, torch's module
    assert_close(stack(src, mask=mask, src_key_padding_mask=kpm), expected, **TOL)
    built_on_torchs = TransformerEncoder(theirs, 2, torch.nn.LayerNorm(E)).eval()  # torch's layer given at build
    assert all(isinstance(layer, torch.nn.TransformerEncoderLayer) for layer in built_on_torchs.layers)
    assert_close(built_on_torchs(src, mask=mask, src_key_padding_mask=kpm), expected, **TOL)


@pytest.mark.parametrize("batch_first", [False, True])
def test_torch_decoder_layers_swapped_in(batch_first):
    ours, theirs = layer_pair("TransformerDecoderLayer", batch_first=batch_first)
    stack = TransformerDecoder(ours, 2, torch.nn.LayerNorm(E)).eval()
    tgt, memory = sequence(QUERIES, batch_first), sequence(KEYS, batch_first)
    kwargs = {"tgt_mask": Transformer.generate_square_subsequent_mask(QUERIES), "tgt_is_causal": True,
              "memory_key_padding_mask": padding(KEYS)}
    expected = stack(tgt, memory, **kwargs)
    stack.layers[0] = theirs.eval()
    assert_close(stack(tgt, memory, **kwargs), expected, **TOL)
    assert_close(TransformerDecoder(theirs, 2, torch.nn.LayerNorm(E)).eval()(tgt, memory, **kwargs), expected, **TOL)


def test_attnkit_layers_inside_torchs_stacks():
    ours, theirs = layer_pair("TransformerEncoderLayer", batch_first=True)
    src, kpm = sequence(KEYS, True), padding(KEYS)
    torch_stack = torch.nn.TransformerEncoder(theirs, 2, enable_nested_tensor=False)
    expected = torch_stack(src, src_key_padding_mask=kpm)
    torch_stack.layers[0] = ours
    assert_close(torch_stack(src, src_key_padding_mask=kpm), expected, **TOL)
    ours, theirs = layer_pair("TransformerDecoderLayer")
    tgt, memory = sequence(QUERIES, False), sequence(KEYS, False)
    torch_decoder = torch.nn.TransformerDecoder(theirs, 2)
    expected = torch_decoder(tgt, memory, memory_key_padding_mask=kpm)
    torch_decoder.layers[1] = ours
    assert_close(torch_decoder(tgt, memory, memory_key_padding_mask=kpm), expected, **TOL)


def test_layer_stack_arguments():
    with pytest.raises(ValueError, match="self_attn"):
        TransformerEncoder(torch.nn.Linear(E, E), 2)
    with pytest.raises(ValueError, match="self_attn"):
        TransformerDecoder(torch.nn.Linear(E, E), 2)
    encoder = TransformerEncoder(TransformerEncoderLayer(E, H, FF), 1, enable_nested_tensor=False, mask_check=False)
    assert encoder.enable_nested_tensor is False and encoder.mask_check is False


# exception types


def raised(call) -> Exception:
    with pytest.raises(Exception) as info:
        call()
    return info.value


def same_error(ours, theirs, *args, **kwargs) -> Exception:
    """Both raise, and attnkit's error is an instance of torch's type (and a ValueError, attnkit's)."""
    expected, actual = raised(lambda: theirs(*args, **kwargs)), raised(lambda: ours(*args, **kwargs))
    assert isinstance(actual, type(expected)), f"torch: {expected!r}, attnkit: {actual!r}"
    assert isinstance(actual, ValueError)
    return actual


def x3(*shape):  # batched (length, batch, features)
    return torch.randn(*shape)


MHA_CASES = {
    "3-D query, 2-D key": ((x3(4, 3, E), x3(4, E), x3(4, 3, E)), {}, "expected `key` and `value` to be 3-D"),
    "2-D query, 3-D key and value": ((x3(4, E), x3(4, 3, E), x3(4, 3, E)), {},
                                     "expected `key` and `value` to be 2-D but found 3-D and 3-D"),
    "4-D query": ((x3(1, 4, 3, E),) * 3, {}, "received 4-D query"),
    "1-D key_padding_mask": ((x3(4, 3, E),) * 3, {"key_padding_mask": torch.zeros(4, dtype=torch.bool)},
                             "`key_padding_mask` to be `None` or 2-D"),
    "1-D attn_mask": ((x3(4, 3, E),) * 3, {"attn_mask": torch.zeros(4, dtype=torch.bool)}, "2-D or 3-D"),
    "unbatched 3-D attn_mask of the wrong size": ((x3(4, E),) * 3, {"attn_mask": torch.zeros(5, 4, 4) > 0},
                                                  r"Expected `attn_mask` shape to be \(2, 4, 4\)"),
    "integer attn_mask": ((x3(4, 3, E),) * 3, {"attn_mask": torch.zeros(4, 4, dtype=torch.long)}, "bool and floating"),
    "integer key_padding_mask": ((x3(4, 3, E),) * 3, {"key_padding_mask": torch.zeros(3, 4, dtype=torch.int32)},
                                 "bool and floating"),
    "2-D attn_mask of the wrong size": ((x3(4, 3, E),) * 3, {"attn_mask": torch.zeros(4, 5, dtype=torch.bool)},
                                       r"attn_mask must be \(queries, keys\)"),
    "3-D attn_mask of the wrong size": ((x3(4, 3, E),) * 3, {"attn_mask": torch.zeros(3, 4, 4)},
                                        r"\(batch \* heads, queries, keys\)"),
    "key_padding_mask of the wrong size": ((x3(4, 3, E),) * 3, {"key_padding_mask": torch.zeros(3, 5) > 0},
                                           r"key_padding_mask must be \(batch, keys\)"),
    "query features": ((x3(4, 3, 6), x3(4, 3, E), x3(4, 3, E)), {}, "expecting embedding dimension of 8"),
    "key and value features": ((x3(4, 3, E), x3(4, 3, 6), x3(4, 3, 6)), {}, "key has 6 features"),
    "key and value lengths": ((x3(4, 3, E), x3(5, 3, E), x3(4, 3, E)), {}, "batch or length mismatch"),
    "query and key batch sizes": ((x3(4, 3, E), x3(4, 2, E), x3(4, 2, E)), {}, "batch or length mismatch"),
    "is_causal without attn_mask": ((x3(4, 3, E),) * 3, {"is_causal": True}, "Need attn_mask"),
}


@pytest.mark.parametrize("case", list(MHA_CASES))
def test_mha_raises_torchs_exception_types(case):
    ours, theirs = mha_pair()
    args, kwargs, message = MHA_CASES[case]
    with pytest.raises(ValueError, match=message):
        ours(*args, **kwargs)
    same_error(ours, theirs, *args, **kwargs)


def test_unbatched_query_with_batched_key_is_torchs_assertion():
    ours, _ = mha_pair()
    with pytest.raises(AssertionError, match="For unbatched \\(2-D\\) `query`, expected `key` and `value` to be 2-D"):
        ours(torch.randn(4, E), torch.randn(4, 3, E), torch.randn(4, 3, E))


def test_constructor_errors_are_torchs():
    assert isinstance(raised(lambda: MultiHeadAttention(10, 4)), AssertionError)
    assert isinstance(raised(lambda: MultiHeadAttention(0, 1)), ValueError)
    assert isinstance(raised(lambda: TransformerEncoderLayer(10, 4)), AssertionError)
    assert issubclass(ShapeError, AssertionError) and issubclass(InputError, RuntimeError)
    assert issubclass(ShapeError, ValueError) and issubclass(InputError, ValueError)



@pytest.mark.parametrize("build", [lambda a: TransformerEncoderLayer(E, H, FF, activation=a),
                                   lambda a: TransformerDecoderLayer(E, H, FF, activation=a),
                                   lambda a: Transformer(E, H, 1, 1, FF, activation=a)],
                         ids=["encoder layer", "decoder layer", "transformer"])
def test_an_unknown_activation_name_is_torchs_runtime_error(build):
    error = raised(lambda: build("swish"))
    assert isinstance(error, RuntimeError) and isinstance(error, ValueError) and "'swish'" in str(error)
    theirs = raised(lambda: torch.nn.TransformerEncoderLayer(E, H, FF, activation="swish"))
    assert isinstance(theirs, RuntimeError)



def test_nested_tensor_inputs_are_refused_with_torchs_assertion():
    """torch takes nested tensors only on its inference fast path; attnkit says so instead of failing inside."""
    nested = torch.nested.nested_tensor([torch.randn(3, E), torch.randn(5, E)], layout=torch.jagged)
    ours, _ = mha_pair()
    calls = [lambda: ours(nested, nested, nested), lambda: TransformerEncoderLayer(E, H, FF, batch_first=True)(nested),
             lambda: TransformerDecoderLayer(E, H, FF, batch_first=True)(nested, torch.randn(2, 4, E)),
             lambda: TransformerEncoder(TransformerEncoderLayer(E, H, FF, batch_first=True), 2).eval()(nested)]
    for call in calls:
        error = raised(call)
        assert isinstance(error, ShapeError) and isinstance(error, AssertionError), error
        assert "nested tensor" in str(error) and "key_padding_mask" in str(error)


def test_layer_and_stack_errors_are_torchs():
    encoder_layer, torch_encoder_layer = layer_pair("TransformerEncoderLayer")
    src = sequence(KEYS, False)
    same_error(encoder_layer, torch_encoder_layer, torch.randn(2, KEYS, BATCH, E))
    same_error(encoder_layer, torch_encoder_layer, sequence(KEYS, False, 6))
    same_error(encoder_layer, torch_encoder_layer, src, src_mask=torch.zeros(KEYS, KEYS + 1, dtype=torch.bool))
    same_error(encoder_layer, torch_encoder_layer, src, src_key_padding_mask=padding(KEYS + 1))
    same_error(encoder_layer, torch_encoder_layer, src, is_causal=True)
    stack = TransformerEncoder(encoder_layer, 2)
    torch_stack = torch.nn.TransformerEncoder(torch_encoder_layer, 2, enable_nested_tensor=False)
    same_error(stack, torch_stack, src, is_causal=True)
    same_error(stack, torch_stack, src, mask=torch.zeros(KEYS, KEYS + 1, dtype=torch.bool))
    decoder_layer, torch_decoder_layer = layer_pair("TransformerDecoderLayer")
    tgt, memory = sequence(QUERIES, False), sequence(KEYS, False)
    same_error(decoder_layer, torch_decoder_layer, tgt, memory[:, :2])
    same_error(decoder_layer, torch_decoder_layer, tgt, memory[:, 0])
    same_error(decoder_layer, torch_decoder_layer, tgt, memory, tgt_is_causal=True)
    same_error(decoder_layer, torch_decoder_layer, tgt, memory, memory_mask=torch.zeros(QUERIES, QUERIES))
    decoder = TransformerDecoder(decoder_layer, 2)
    torch_decoder = torch.nn.TransformerDecoder(torch_decoder_layer, 2)
    same_error(decoder, torch_decoder, tgt, memory, tgt_is_causal=True)
    model, torch_model = Transformer(E, H, 1, 1, FF), torch.nn.Transformer(E, H, 1, 1, FF)
    same_error(model, torch_model, src, tgt, tgt_is_causal=True)
    same_error(model, torch_model, src, tgt[:, :2])
    same_error(model, torch_model, src, sequence(QUERIES, False, 6))


def test_decode_makes_the_causal_mask_that_forward_wants():
    model = Transformer(E, H, 1, 2, FF, dropout=0.0, batch_first=True).eval()
    src, tgt = sequence(KEYS, True), sequence(QUERIES, True)
    mask = Transformer.generate_square_subsequent_mask(QUERIES)
    with torch.no_grad():
        memory = model.encode(src)
        expected = model(src, tgt, tgt_mask=mask, tgt_is_causal=True)
        assert_close(model.decode(tgt, memory, tgt_is_causal=True), expected, **TOL)


# dtypes and factory kwargs


@pytest.mark.parametrize("batch_first", [False, True])
def test_half_precision_bias_with_a_double_query(batch_first):
    theirs = torch.nn.MultiheadAttention(4, 4, batch_first=batch_first, dtype=torch.float64).eval()
    ours = MultiHeadAttention(4, 4, batch_first=batch_first, dtype=torch.float64).eval()
    ours.load_state_dict(theirs.state_dict())
    bias = torch.randn(3 * 4, dtype=torch.float16)
    for module in (ours, theirs):
        module.in_proj_bias = torch.nn.Parameter(bias.clone())
    query = torch.randn(4, 4, 4, dtype=torch.float64)
    with torch.no_grad():
        output, _ = ours(query, query, query)
        assert output.dtype == torch.float64
        if batch_first:  # torch adds the half bias to a batch-first query; sequence first, its addmm refuses
            assert_close(output, theirs(query, query, query)[0])


def test_half_precision_masks_with_a_double_query():
    ours, _ = mha_pair(dtype=torch.float64)
    query = torch.randn(QUERIES, BATCH, E, dtype=torch.float64)
    mask = torch.randn(QUERIES, QUERIES, dtype=torch.float64)
    padding_mask = padding(QUERIES).double() * -1e4
    expected, _ = ours(query, query, query, attn_mask=mask.half().double(), key_padding_mask=padding_mask)
    for need_weights in (True, False):
        actual, _ = ours(query, query, query, attn_mask=mask.half(), key_padding_mask=padding_mask.half(),
                         need_weights=need_weights)
        assert actual.dtype == torch.float64
        assert_close(actual, expected)


@pytest.mark.parametrize("factory", [{"device": "meta"}, {"dtype": torch.float64},
                                     {"device": "meta", "dtype": torch.float16}])
def test_factory_kwargs_reach_every_parameter(factory):
    modules = [MultiHeadAttention(E, H, add_bias_kv=True, **factory),
               MultiHeadAttention(E, H, kdim=6, vdim=5, bias=False, **factory),
               TransformerEncoderLayer(E, H, FF, **factory), TransformerDecoderLayer(E, H, FF, bias=False, **factory),
               Transformer(E, H, 1, 1, FF, **factory)]
    for module in modules:
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            assert tensor.device.type == factory.get("device", "cpu"), name
            assert tensor.dtype == factory.get("dtype", torch.float32), name


def _masks(size: int) -> dict[str, torch.Tensor]:
    causal_float = torch.nn.Transformer.generate_square_subsequent_mask(size)
    return {"causal float": causal_float, "causal bool": torch.isinf(causal_float),
            "not causal": torch.zeros(size, size),
            "other size": torch.nn.Transformer.generate_square_subsequent_mask(size + 1),
            "banded": torch.isinf(causal_float) | torch.eye(size, dtype=torch.bool).roll(1, 0)}


def test_causal_masks_are_detected_as_torch_detects_them():
    from torch.nn.modules.transformer import _detect_is_causal_mask

    from attnkit.nn.attention import is_causal_mask

    for name, mask in _masks(5).items():
        assert is_causal_mask(mask, 5) == _detect_is_causal_mask(mask, None, 5), name
    assert not is_causal_mask(None, 5)


@pytest.mark.parametrize("batch_first", [True, False])
def test_the_stacks_tell_their_layers_when_the_mask_is_causal(batch_first):
    seen: dict[str, list[bool]] = {"encoder": [], "decoder": []}
    encoder = TransformerEncoder(TransformerEncoderLayer(8, 2, 16, 0.0, batch_first=batch_first), 2)
    decoder = TransformerDecoder(TransformerDecoderLayer(8, 2, 16, 0.0, batch_first=batch_first), 2)
    for layer in encoder.layers:
        layer.register_forward_pre_hook(lambda m, a, k: seen["encoder"].append(k["is_causal"]), with_kwargs=True)
    for layer in decoder.layers:
        layer.register_forward_pre_hook(lambda m, a, k: seen["decoder"].append(k["tgt_is_causal"]), with_kwargs=True)
    x = torch.randn(3, 5, 8) if batch_first else torch.randn(5, 3, 8)
    for name, mask in _masks(5).items():
        if name == "other size":
            continue
        seen["encoder"].clear(), seen["decoder"].clear()
        encoder(x, mask=mask)
        decoder(x, x, tgt_mask=mask)
        expected = name.startswith("causal")
        assert seen == {"encoder": [expected, expected], "decoder": [expected, expected]}, name
    seen["encoder"].clear()
    encoder(x, mask=_masks(5)["causal float"], is_causal=False)  # a hint given is passed as given, as torch does
    assert seen["encoder"] == [False, False]
