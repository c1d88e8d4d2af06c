"""Pictures of positional encodings: the matrix, and the similarity of positions that explains why it works.

Attention is order-blind, so each position gets a vector (Vaswani et al. 2017, section 3.5). What
the model can use is how two positions' vectors compare:

  sinusoidal  PE(i) . PE(j) = sum_k cos((i - j) w_k): depends only on the offset i - j and falls
              with distance, so "k positions back" looks the same everywhere;
  learned     a trained table (from a run), or its random start: any structure is learned;
  rotary      no vector is added; q and k are rotated by pos * theta_k, so the score of a query at m
              and a key at n is sum_k cos((m - n) theta_k) for a constant q = k: relative by design;
  sine2d      DETR's 2-D encoding: sines of the row and of the column, so a cell resembles the cells
              of its row and its column, and its neighbours most (Carion et al. 2020, section 3.2).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from torch import Tensor  # noqa: E402

from attnkit.errors import ConfigError  # noqa: E402
from attnkit.nn import (  # noqa: E402
    LearnedPositionalEmbedding,
    PositionEmbeddingSine2D,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)

KINDS = ("sinusoidal", "learned", "rotary", "sine2d")


def encoding_matrix(kind: str, length: int, d_model: int, table: Tensor | None = None) -> Tensor:
    """(positions, features): the vector each position gets; for rotary cos(pos * theta_k), for sine2d the
    cells of a length x length grid in row-major order; for learned TABLE's rows (or a fresh table's)."""
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(d_model).encoding(length)  # (length, d_model)
    if kind == "learned":
        if table is None:
            with torch.random.fork_rng(devices=[]):  # a fixed picture, without moving the caller's generator
                torch.manual_seed(0)
                table = LearnedPositionalEmbedding(length, d_model).weight.detach()  # untrained: its random start
        return table[:length].float()
    if kind == "rotary":
        return RotaryEmbedding(d_model).angles(length).cos()  # (length, d_model / 2)
    if kind == "sine2d":
        grid = PositionEmbeddingSine2D(d_model // 2, normalize=True)(torch.zeros(1, length, length, dtype=torch.bool))
        return grid[0].flatten(1).t()  # (cells, d_model), cell = row * length + column
    raise ConfigError(f"unknown positional encoding {kind!r}; choose one of {', '.join(KINDS)}")


def position_similarity(kind: str, matrix: Tensor) -> Tensor:
    """(positions, positions): how alike two positions look to attention.

    Cosine similarity of the position vectors; for rotary, the attention score of a constant unit
    query at m and key at n after rotation, sum_k cos((m - n) theta_k) / (d / 2).
    """
    if kind == "rotary":
        head_dim = 2 * matrix.size(1)
        rotated = RotaryEmbedding(head_dim)(torch.ones(matrix.size(0), head_dim))  # R_m (1, ..., 1): (length, head_dim)
        return rotated @ rotated.t() / head_dim
    unit = matrix / matrix.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    return unit @ unit.t()


def plot_positional(kind: str, path: Path, length: int = 50, d_model: int = 128, table: Tensor | None = None,
                    source: str = "") -> Path:
    """Save the encoding matrix, the similarity of positions, and similarity against distance as one PNG."""
    matrix = encoding_matrix(kind, length, d_model, table)
    similarity = position_similarity(kind, matrix)
    fig, axes = plt.subplots(1, 3, figsize=(16.5, 5.0), dpi=100, gridspec_kw={"width_ratios": [1.2, 1.0, 1.0]})
    _matrix_panel(fig, axes[0], kind, matrix)
    _similarity_panel(fig, axes[1], kind, similarity, length)
    if kind == "sine2d":
        _grid_panel(fig, axes[2], similarity, length)
    else:
        _distance_panel(axes[2], kind, similarity)
    title = {"sinusoidal": "sinusoidal positional encoding (Vaswani et al. 2017, section 3.5)",
             "learned": "learned positional embedding"
                        + (f" ({source})" if source else " (untrained: its random start)"),
             "rotary": "rotary position embedding (Su et al. 2021): q and k rotated by pos x theta_k",
             "sine2d": "DETR 2-D sine positions (Carion et al. 2020): y and x encoded separately"}[kind]
    fig.suptitle(f"{title}, d = {d_model}", fontsize=11)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _matrix_panel(fig, ax, kind: str, matrix: Tensor) -> None:
    limit = float(matrix.abs().max()) or 1.0
    image = ax.imshow(matrix.numpy(), cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03, label="value")
    ax.set_xlabel("rotation frequency k (feature pair)" if kind == "rotary" else "feature (dimension)")
    ax.set_ylabel("grid cell (row-major)" if kind == "sine2d" else "position")
    ax.set_title("cos(pos x theta_k)" if kind == "rotary" else "the vector of each position", fontsize=10)


def _similarity_panel(fig, ax, kind: str, similarity: Tensor, length: int) -> None:
    image = ax.imshow(similarity.numpy(), cmap="viridis", aspect="equal", interpolation="nearest")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03, label="score" if kind == "rotary" else "cosine similarity")
    unit = "cell" if kind == "sine2d" else "position"
    ax.set_xlabel(f"{unit} j")
    ax.set_ylabel(f"{unit} i")
    ax.set_title("score of query i and key j after rotation" if kind == "rotary" else "similarity of positions i, j",
                 fontsize=10)


def _distance_panel(ax, kind: str, similarity: Tensor) -> None:
    length = similarity.size(0)
    for start in sorted({0, length // 4, length // 2}):
        offsets = torch.arange(length - start)
        ax.plot(offsets.numpy(), similarity[start, start:].numpy(), label=f"from position {start}", linewidth=1.3)
    ax.set_xlabel("distance j - i")
    ax.set_ylabel("score" if kind == "rotary" else "cosine similarity")
    note = "curves agree only where training made it relative" if kind == "learned" else \
        "one curve from any start: it is relative"
    ax.set_title(f"similarity against distance j - i\n({note})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _grid_panel(fig, ax, similarity: Tensor, length: int) -> None:
    row, column = length // 3, length // 2
    cell = similarity[row * length + column].reshape(length, length)  # (rows, columns)
    image = ax.imshow(cell.numpy(), cmap="viridis", interpolation="nearest")
    ax.plot(column, row, "o", color="red", markersize=8, markeredgecolor="white")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03, label="cosine similarity")
    ax.set_xlabel("column x")
    ax.set_ylabel("row y")
    ax.set_title(f"similarity of every cell to cell ({row}, {column})", fontsize=10)
