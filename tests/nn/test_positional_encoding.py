"""Positional encodings against hand-computed values and DETR's formula written out literally."""

import math

import pytest
import torch
from torch.testing import assert_close

from attnkit.nn import LearnedPositionalEmbedding, PositionEmbeddingSine2D, SinusoidalPositionalEncoding

# ---- sinusoidal (Vaswani et al. 2017, section 3.5) ----

def test_sinusoidal_position_zero_is_zero_one_interleaved():
    pe = SinusoidalPositionalEncoding(8)(torch.zeros(2, 3, 8))
    assert pe.shape == (1, 3, 8)
    assert_close(pe[0, 0], torch.tensor([0.0, 1.0] * 4))


def test_sinusoidal_hand_values():
    d = 6
    pe = SinusoidalPositionalEncoding(d)(torch.zeros(1, 4, d, dtype=torch.float64))[0]
    expected = torch.tensor([[f(pos / 10000 ** (2 * (j // 2) / d)) for j, f in
                              zip(range(d), [math.sin, math.cos] * (d // 2))] for pos in range(4)], dtype=torch.float64)
    assert_close(pe, expected)
    assert_close(pe[1, 0].item(), math.sin(1.0))
    assert_close(pe[1, 1].item(), math.cos(1.0))
    assert_close(pe[3, 2].item(), math.sin(3 / 10000 ** (2 / 6)))
    assert_close(pe[2, 5].item(), math.cos(2 / 10000 ** (4 / 6)))


def test_sinusoidal_offset_continues_the_sequence():
    encoding = SinusoidalPositionalEncoding(10, base=100.0)
    whole = encoding(torch.zeros(1, 9, 10))
    assert_close(encoding(torch.zeros(2, 4, 10), offset=5), whole[:, 5:9])
    assert_close(whole[0, 2, 2].item(), math.sin(2 / 100 ** (2 / 10)))


def test_sinusoidal_odd_d_model_and_long_inputs():
    pe = SinusoidalPositionalEncoding(5)(torch.zeros(1, 3000, 5))
    assert pe.shape == (1, 3000, 5)
    assert_close(pe[0, 2999, 4].item(), math.sin(2999 / 10000 ** (4 / 5)), atol=1e-4, rtol=0)
    assert_close(pe[0, 7, 3].item(), math.cos(7 / 10000 ** (2 / 5)))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_sinusoidal_follows_the_input_dtype(dtype):
    x = torch.zeros(2, 5, 4, dtype=dtype)
    pe = SinusoidalPositionalEncoding(4)(x)
    assert pe.dtype == dtype and pe.device == x.device
    assert_close(pe.double(), SinusoidalPositionalEncoding(4)(x.double()).to(dtype).double())


def test_sinusoidal_rejects_a_wrong_feature_size():
    with pytest.raises(ValueError, match=r"d_model=8.*\(2, 3, 6\)"):
        SinusoidalPositionalEncoding(8)(torch.zeros(2, 3, 6))


# ---- learned ----

def test_learned_returns_its_table_rows_and_trains():
    torch.manual_seed(0)
    embedding = LearnedPositionalEmbedding(10, 4)
    x = torch.zeros(3, 4, 4)
    pe = embedding(x, offset=2)
    assert pe.shape == (1, 4, 4)
    assert_close(pe[0], embedding.weight[2:6])
    pe.sum().backward()
    expected = torch.zeros(10, 4)
    expected[2:6] = 1
    assert_close(embedding.weight.grad, expected)


def test_learned_follows_the_input_dtype():
    embedding = LearnedPositionalEmbedding(5, 2)
    pe = embedding(torch.zeros(1, 5, 2, dtype=torch.float64))
    assert pe.dtype == torch.float64
    assert_close(pe[0], embedding.weight.double())


def test_learned_past_max_len_names_the_limit():
    embedding = LearnedPositionalEmbedding(6, 4)
    with pytest.raises(ValueError, match=r"\[3, 8\).*max_len=6"):
        embedding(torch.zeros(1, 5, 4), offset=3)
    with pytest.raises(ValueError, match="max_len=6"):
        embedding(torch.zeros(1, 7, 4))


# ---- DETR's 2-D sine (Carion et al. 2020) ----

def detr_position_embedding_sine(mask, num_pos_feats=64, temperature=10000, normalize=False, scale=None):
    """facebookresearch/detr models/position_encoding.py, PositionEmbeddingSine.forward, line by line."""
    if scale is None:
        scale = 2 * math.pi
    not_mask = ~mask
    y_embed = not_mask.cumsum(1, dtype=torch.float32)
    x_embed = not_mask.cumsum(2, dtype=torch.float32)
    if normalize:
        eps = 1e-6
        y_embed = y_embed / (y_embed[:, -1:, :] + eps) * scale
        x_embed = x_embed / (x_embed[:, :, -1:] + eps) * scale
    dim_t = torch.arange(num_pos_feats, dtype=torch.float32, device=mask.device)
    dim_t = temperature ** (2 * (dim_t // 2) / num_pos_feats)
    pos_x = x_embed[:, :, :, None] / dim_t
    pos_y = y_embed[:, :, :, None] / dim_t
    pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
    pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
    pos = torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)
    return pos


def padded_mask():
    mask = torch.zeros(2, 5, 7, dtype=torch.bool)
    mask[0, 3:, :] = True  # image 0 is 3 x 5 inside the 5 x 7 batch
    mask[0, :, 5:] = True
    mask[1, :, 6:] = True
    return mask


@pytest.mark.parametrize("options", [{}, {"normalize": True}, {"normalize": True, "scale": 1.0},
                                     {"num_pos_feats": 6, "temperature": 20}])
def test_sine_2d_is_detrs_formula(options):
    mask = padded_mask()
    ours = PositionEmbeddingSine2D(**options)(mask)
    num_pos_feats = options.get("num_pos_feats", 64)
    assert ours.shape == (2, 2 * num_pos_feats, 5, 7) and ours.dtype == torch.float32
    assert_close(ours, detr_position_embedding_sine(mask, **options), atol=0, rtol=0)


def test_sine_2d_hand_values():
    pos = PositionEmbeddingSine2D(num_pos_feats=4)(torch.zeros(1, 2, 3, dtype=torch.bool))
    # dim_t = 10000^(2 * (i // 2) / 4) = [1, 1, 100, 100]; channels (pos_y, pos_x), each sin/cos interleaved
    y, x = 2.0, 3.0  # cell (row 1, column 2): positions count from 1
    expected = [math.sin(y), math.cos(y), math.sin(y / 100), math.cos(y / 100),
                math.sin(x), math.cos(x), math.sin(x / 100), math.cos(x / 100)]
    assert_close(pos[0, :, 1, 2], torch.tensor(expected))
    assert_close(pos[0, :, 0, 0], torch.tensor([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)] * 2))


@pytest.mark.parametrize("normalize", [False, True])
def test_sine_2d_padding_does_not_move_positions(normalize):
    encoding = PositionEmbeddingSine2D(num_pos_feats=8, normalize=normalize)
    padded = encoding(padded_mask())
    alone = encoding(torch.zeros(1, 3, 5, dtype=torch.bool))
    assert_close(padded[0, :, :3, :5], alone[0])
    if normalize:  # normalised positions end at scale = 2 pi on the last valid row and column
        assert_close(alone[0, 0, -1, 0].item(), math.sin(3 / (3 + 1e-6) * 2 * math.pi), atol=1e-5, rtol=0)


def test_sine_2d_dtype_and_bad_arguments():
    mask = torch.zeros(1, 2, 2, dtype=torch.bool)
    assert PositionEmbeddingSine2D(4)(mask, dtype=torch.float64).dtype == torch.float64
    with pytest.raises(ValueError, match="normalize should be True"):
        PositionEmbeddingSine2D(scale=1.0)
    with pytest.raises(ValueError, match="even"):
        PositionEmbeddingSine2D(num_pos_feats=5)
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        PositionEmbeddingSine2D()(torch.zeros(2, 3, dtype=torch.bool))
