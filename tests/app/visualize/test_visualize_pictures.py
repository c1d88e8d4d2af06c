"""Every kind of picture is a valid, non-blank PNG of the expected size; positional similarities are relative."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.testing import assert_close

from attnkit.app.visualize.attention_maps import plot_attention, plot_heads
from attnkit.app.visualize.detections import plot_encoder_attention, plot_object_attention, reference_cells, upsample
from attnkit.app.visualize.positional import KINDS, encoding_matrix, plot_positional, position_similarity


def open_png(path: Path) -> Image.Image:
    assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    image = Image.open(path)
    image.load()
    pixels = torch.from_numpy(np.asarray(image.convert("L"), dtype=np.float32))
    assert float(pixels.std()) > 5.0, f"{path} looks blank"
    return image


def test_plot_attention_size_follows_the_matrix(tmp_path):
    torch.manual_seed(0)
    weights = torch.rand(6, 9).softmax(-1)
    tokens = [f"tok{i}" for i in range(9)]
    image = open_png(plot_attention(weights, tmp_path / "a.png", tokens[:6], tokens, title="t"))
    # 0.36 inch a cell plus room for labels and the colour bar, at 110 dpi
    assert image.size == (int((0.36 * 9 + 1.0 + 1.6) * 110), int((0.36 * 6 + 0.8 + 1.4) * 110))
    wide = open_png(plot_attention(torch.rand(6, 30).softmax(-1), tmp_path / "b.png", tokens[:6], None))
    assert wide.width > image.width


def test_plot_heads_one_panel_per_head(tmp_path):
    torch.manual_seed(0)
    weights = torch.rand(4, 5, 7).softmax(-1)
    four = open_png(plot_heads(weights, tmp_path / "four.png", list("abcde"), list("abcdefg")))
    two = open_png(plot_heads(weights[:2], tmp_path / "two.png", list("abcde"), list("abcdefg")))
    assert four.width > 1.6 * two.width  # side by side
    assert 200 < four.height < 600


def test_object_and_encoder_attention_pictures(tmp_path):
    torch.manual_seed(0)
    image = Image.fromarray((torch.rand(96, 128, 3) * 255).to(torch.uint8).numpy())
    maps = torch.rand(3, 3, 4).softmax(-1)  # (objects, h, w)
    boxes = [[10, 10, 50, 60], [60, 20, 120, 90], [0, 0, 30, 30]]
    objects = open_png(plot_object_attention(image, boxes, [0, 1, 2], ["a", "b", "c"], [0.9, 0.8, 0.75], maps,
                                             tmp_path / "objects.png"))
    assert objects.width > 800 and objects.height > 250  # 4 panels in one row
    weights = torch.rand(12, 12).softmax(-1)
    encoder = open_png(plot_encoder_attention(image, weights, (3, 4), tmp_path / "encoder.png"))
    assert encoder.width > 3 * encoder.height
    none = open_png(plot_object_attention(image, [], [], [], [], torch.zeros(0, 3, 4), tmp_path / "none.png"))
    assert none.width < objects.width


def test_upsample_keeps_the_map_and_reference_cells_are_inside():
    attention = torch.tensor([[0.0, 1.0], [0.5, 0.25]])
    big = upsample(attention, 40, 40)
    assert big.shape == (40, 40)
    assert_close(big[5, 35], torch.tensor(1.0))  # well inside the top-right cell
    cells = reference_cells(5, 7)
    assert len(cells) == 4 and len(set(cells)) == 4
    assert all(0 <= row < 5 and 0 <= column < 7 for row, column in cells)


@pytest.mark.parametrize("kind", KINDS)
def test_positional_pictures(kind, tmp_path):
    image = open_png(plot_positional(kind, tmp_path / f"{kind}.png", length=12 if kind == "sine2d" else 30,
                                     d_model=32))
    assert image.size == (1650, 500)


def test_sinusoidal_similarity_depends_only_on_the_offset_and_rotary_scores_match_it():
    sinusoidal = position_similarity("sinusoidal", encoding_matrix("sinusoidal", 20, 16))
    for offset in range(1, 5):
        diagonal = torch.diagonal(sinusoidal, offset)
        assert_close(diagonal, diagonal[:1].expand_as(diagonal), atol=1e-5, rtol=0)
    # sum_k cos((i - j) w_k) / (d / 2) either way: RoPE's score of rotated constant vectors is the
    # cosine similarity of the sinusoids with the same frequencies.
    rotary = position_similarity("rotary", encoding_matrix("rotary", 20, 16))
    assert_close(rotary, sinusoidal, atol=1e-5, rtol=0)


def test_sine2d_cells_resemble_their_neighbours_most():
    side = 6
    similarity = position_similarity("sine2d", encoding_matrix("sine2d", side, 32))
    assert similarity.shape == (side * side, side * side)
    assert_close(torch.diagonal(similarity), torch.ones(side * side))
    centre = 2 * side + 3
    row = similarity[centre].reshape(side, side)
    assert row[2, 4] > row[2, 5] and row[3, 3] > row[4, 3]


def test_learned_matrix_uses_the_given_table():
    table = torch.arange(40.0).reshape(10, 4)
    assert_close(encoding_matrix("learned", 6, 4, table), table[:6])
