"""The decoder against torch.nn's and DETR's formulas; incremental decoding against the full decode."""

import pytest
import torch
from torch.testing import assert_close

from attnkit.nn import RotaryEmbedding, TransformerDecoder, TransformerDecoderLayer

D, H, FF, BATCH, QUERIES, KEYS = 16, 4, 32, 3, 5, 7
TOL = {"atol": 1e-5, "rtol": 1e-5}


def layer_pair(**options):
    torch.manual_seed(0)
    options = {"dropout": 0.0, **options}
    theirs = torch.nn.TransformerDecoderLayer(D, H, FF, **options)
    ours = TransformerDecoderLayer(D, H, FF, **options)
    ours.load_state_dict(theirs.state_dict())
    return ours.eval(), theirs.eval()


def stack_pair(num_layers=3, norm=True, **options):
    ours, theirs = layer_pair(**options)
    theirs = torch.nn.TransformerDecoder(theirs, num_layers, torch.nn.LayerNorm(D) if norm else None)
    for parameter in theirs.parameters():  # every layer different, so a wrong layer order fails
        torch.nn.init.normal_(parameter, std=0.3)
    ours = TransformerDecoder(ours, num_layers, torch.nn.LayerNorm(D) if norm else None)
    ours.load_state_dict(theirs.state_dict())
    return ours.eval(), theirs.eval()


def sequences(batch_first, queries=QUERIES, dtype=torch.float32):
    tgt, memory = torch.randn(BATCH, queries, D, dtype=dtype), torch.randn(BATCH, KEYS, D, dtype=dtype)
    return (tgt, memory) if batch_first else (tgt.transpose(0, 1), memory.transpose(0, 1))


def padding(length):
    mask = torch.zeros(BATCH, length, dtype=torch.bool)
    mask[0, -2:] = True
    mask[2, -1] = True
    return mask


def causal(length):
    return torch.ones(length, length, dtype=torch.bool).triu(1)  # True above the diagonal: the future


def masks(kind):
    return {
        "none": {},
        "causal": {"tgt_mask": causal(QUERIES), "tgt_is_causal": True},
        "float_causal": {"tgt_mask": torch.nn.Transformer.generate_square_subsequent_mask(QUERIES)},
        "memory_padding": {"memory_key_padding_mask": padding(KEYS)},
        "all": {"tgt_mask": causal(QUERIES), "tgt_key_padding_mask": padding(QUERIES),
                "memory_key_padding_mask": padding(KEYS), "memory_mask": torch.rand(QUERIES, KEYS) > 0.8},
        "per_head": {"tgt_mask": torch.randn(BATCH * H, QUERIES, QUERIES),
                     "memory_mask": torch.randn(BATCH * H, QUERIES, KEYS)},
    }[kind]


MASKS = ["none", "causal", "float_causal", "memory_padding", "all", "per_head"]


def test_state_dict_keys_are_torchs():
    ours, theirs = layer_pair()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours, theirs = stack_pair()
    assert list(ours.state_dict()) == list(theirs.state_dict())


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("mask", MASKS)
def test_layer_matches_torch(batch_first, norm_first, activation, mask):
    ours, theirs = layer_pair(batch_first=batch_first, norm_first=norm_first, activation=activation)
    (tgt, memory), kwargs = sequences(batch_first), masks(mask)
    expected = theirs(tgt, memory, **kwargs).detach()
    with torch.no_grad():
        assert_close(ours(tgt, memory, **kwargs), expected, **TOL)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("mask", ["none", "causal", "all"])
def test_stack_matches_torch(batch_first, norm_first, mask):
    ours, theirs = stack_pair(batch_first=batch_first, norm_first=norm_first, activation="gelu")
    (tgt, memory), kwargs = sequences(batch_first), masks(mask)
    expected = theirs(tgt, memory, **kwargs).detach()
    with torch.no_grad():
        assert_close(ours(tgt, memory, **kwargs), expected, **TOL)


def test_float64_follows_the_module_and_input():
    ours, theirs = stack_pair(batch_first=True)
    ours, theirs = ours.double(), theirs.double()
    tgt, memory = sequences(True, dtype=torch.float64)
    out = ours(tgt, memory, tgt_mask=causal(QUERIES))
    assert out.dtype == torch.float64
    assert_close(out, theirs(tgt, memory, tgt_mask=causal(QUERIES)), atol=1e-12, rtol=1e-12)


def detr_decoder_layer(layer, tgt, memory, pos, query_pos, memory_padding):
    """facebookresearch/detr models/transformer.py TransformerDecoderLayer.forward_post / forward_pre."""
    def self_attend(x):
        q = k = x + query_pos
        return layer.self_attn(q, k, value=x)[0]

    def cross_attend(x):
        return layer.multihead_attn(query=x + query_pos, key=memory + pos, value=memory,
                                    key_padding_mask=memory_padding)[0]
    ffn = lambda x: layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))  # noqa: E731
    if layer.norm_first:
        tgt = tgt + self_attend(layer.norm1(tgt))
        tgt = tgt + cross_attend(layer.norm2(tgt))
        return tgt + ffn(layer.norm3(tgt))
    tgt = layer.norm1(tgt + self_attend(tgt))
    tgt = layer.norm2(tgt + cross_attend(tgt))
    return layer.norm3(tgt + ffn(tgt))


@pytest.mark.parametrize("norm_first", [False, True])
def test_detr_positions_match_detrs_layer(norm_first):
    ours, theirs = layer_pair(norm_first=norm_first)  # DETR is sequence first
    tgt, memory = sequences(False)
    query_pos, pos = torch.randn_like(tgt), torch.randn_like(memory)
    memory_padding = padding(KEYS)
    expected = detr_decoder_layer(theirs, tgt, memory, pos, query_pos, memory_padding).detach()
    with torch.no_grad():
        out = ours(tgt, memory, memory_key_padding_mask=memory_padding, pos=pos, query_pos=query_pos)
        assert_close(out, expected, **TOL)
        without = ours(tgt, memory, memory_key_padding_mask=memory_padding)
        assert (out - without).abs().max() > 1e-2
        only_pos = ours(tgt, memory, memory_key_padding_mask=memory_padding, pos=pos)
        assert (only_pos - without).abs().max() > 1e-2 and (only_pos - out).abs().max() > 1e-2


def test_return_intermediate_is_every_layer_through_the_final_norm():
    ours, _ = stack_pair(num_layers=3)
    intermediate = TransformerDecoder(ours.layers[0], 3, ours.norm, return_intermediate=True)
    intermediate.load_state_dict(ours.state_dict())
    tgt, memory = sequences(False)
    query_pos, pos = torch.randn_like(tgt), torch.randn_like(memory)
    with torch.no_grad():
        stacked = intermediate(tgt, memory, pos=pos, query_pos=query_pos)
        assert stacked.shape == (3, QUERIES, BATCH, D)
        x = tgt
        for index, layer in enumerate(ours.layers):
            x = layer(x, memory, pos=pos, query_pos=query_pos)
            assert_close(stacked[index], ours.norm(x), **TOL)
        assert_close(stacked[-1], ours(tgt, memory, pos=pos, query_pos=query_pos), **TOL)


def test_return_intermediate_batch_first_shape_and_without_norm():
    ours, _ = stack_pair(num_layers=2, norm=False, batch_first=True)
    intermediate = TransformerDecoder(ours.layers[0], 2, return_intermediate=True)
    intermediate.load_state_dict(ours.state_dict())
    tgt, memory = sequences(True)
    with torch.no_grad():
        stacked = intermediate(tgt, memory)
        assert stacked.shape == (2, BATCH, QUERIES, D)  # (layers, batch, queries, d_model)
        assert_close(stacked[0], ours.layers[0](tgt, memory))
        assert_close(stacked[1], ours(tgt, memory))


def decode_step_by_step(decoder, tgt, memory, steps, **kwargs):
    """Feed tgt (batch, queries, d_model) in chunks `steps` through a cache; concatenate the outputs."""
    cache, outputs, start = decoder.new_cache(), [], 0
    for size in steps:
        outputs.append(decoder(tgt[:, start:start + size], memory, cache=cache, **kwargs))
        start += size
        assert cache.length == start
    return torch.cat(outputs, dim=1)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("rotary", [False, True])
@pytest.mark.parametrize("steps", [[1] * QUERIES, [2, 1, 2]])
def test_cached_decoding_equals_the_full_causal_decode(norm_first, rotary, steps):
    torch.manual_seed(0)
    layer = TransformerDecoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first,
                                    rotary=RotaryEmbedding(D // H) if rotary else None)
    decoder = TransformerDecoder(layer, 2, torch.nn.LayerNorm(D)).eval()
    for parameter in decoder.parameters():
        torch.nn.init.normal_(parameter, std=0.3)
    tgt, memory = sequences(True)
    memory_padding = padding(KEYS)
    with torch.no_grad():
        full = decoder(tgt, memory, tgt_mask=causal(QUERIES), memory_key_padding_mask=memory_padding)
        stepped = decode_step_by_step(decoder, tgt, memory, steps, memory_key_padding_mask=memory_padding)
        assert_close(stepped, full, **TOL)
        assert (decoder(tgt, memory, memory_key_padding_mask=memory_padding) - full).abs().max() > 1e-3


def test_cached_decoding_with_query_pos_and_target_padding():
    ours, _ = stack_pair(batch_first=True)
    tgt, memory = sequences(True)
    query_pos, pos = torch.randn_like(tgt), torch.randn_like(memory)
    tgt_padding = torch.zeros(BATCH, QUERIES, dtype=torch.bool)
    tgt_padding[1, :2] = True  # left padding, as in batched prompts
    with torch.no_grad():
        full = ours(tgt, memory, tgt_mask=causal(QUERIES), tgt_is_causal=True, tgt_key_padding_mask=tgt_padding,
                    pos=pos, query_pos=query_pos)
        cache, outputs = ours.new_cache(), []
        for i in range(2, QUERIES + 1):
            start = 0 if i == 2 else i - 1
            outputs.append(ours(tgt[:, start:i], memory, tgt_key_padding_mask=tgt_padding[:, :i], pos=pos,
                                query_pos=query_pos[:, start:i], cache=cache))
        assert_close(torch.cat(outputs, dim=1)[[0, 2]], full[[0, 2]], **TOL)
        assert_close(torch.cat(outputs, dim=1)[1, 2:], full[1, 2:], **TOL)


def test_cache_reorder_follows_the_surviving_rows():
    ours, _ = stack_pair(batch_first=True)
    tgt, memory = sequences(True)
    order = torch.tensor([2, 2, 0])  # beam search: hypothesis 2 twice, hypothesis 0 once
    with torch.no_grad():
        cache = ours.new_cache()
        ours(tgt[:, :3], memory, cache=cache)
        cache.reorder(order)
        stepped = ours(tgt[order, 3:], memory[order], cache=cache)
        full = ours(tgt[order], memory[order], tgt_mask=causal(QUERIES), tgt_is_causal=True)
        assert_close(stepped, full[:, 3:], **TOL)


def test_bad_inputs_name_the_shapes():
    with pytest.raises(ValueError, match=r"d_model \(16\).*nhead \(3\)"):
        TransformerDecoderLayer(16, 3)
    ours, _ = stack_pair(batch_first=True)
    tgt, memory = sequences(True)
    with pytest.raises(ValueError, match=r"memory must be .*d_model=16, got \(3, 7, 12\)"):
        ours(tgt, torch.randn(BATCH, KEYS, 12))
    with pytest.raises(ValueError, match=r"differ in batch size"):
        ours(tgt, memory[:2])
    with pytest.raises(ValueError, match=r"tgt_mask must be .*\(5, 5\).*got \(5, 7\)"):
        ours(tgt, memory, tgt_mask=torch.zeros(QUERIES, KEYS, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"memory_key_padding_mask must be .*\(3, 7\), got \(3, 5\)"):
        ours(tgt, memory, memory_key_padding_mask=padding(QUERIES))
    with pytest.raises(ValueError, match=r"query_pos must have the shape of tgt \(3, 5, 16\)"):
        ours(tgt, memory, query_pos=memory)
    cache = ours.new_cache()
    ours(tgt[:, :2], memory, cache=cache)
    with pytest.raises(ValueError, match=r"tgt_key_padding_mask must be .*\(3, 3\), got \(3, 1\)"):
        ours(tgt[:, 2:3], memory, cache=cache, tgt_key_padding_mask=torch.zeros(BATCH, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="cache has 2 layers, the decoder 3"):
        ours(tgt, memory, cache=TransformerDecoder(ours.layers[0], 2).new_cache())
