"""Attention weights as heatmaps: which key each query looks at (Vaswani et al. 2017, Figures 3-5;
Bahdanau et al. 2015, Figure 3).

`plot_attention` draws one (queries, keys) matrix; `plot_heads` draws every head of a layer side by
side on one colour scale; `save_translation_maps` writes the whole set for one sentence: the
alignment averaged over layers and heads, the cross-attention per layer and head, and the encoder
(and decoder) self-attention per layer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from torch import Tensor  # noqa: E402

_CELL = 0.36  # inches per heatmap cell: room for a 7-point token label


def plot_attention(weights: Tensor, path: Path, queries: Sequence[str] | None = None,
                   keys: Sequence[str] | None = None, title: str = "attention weights") -> Path:
    """Save a (queries, keys) weight matrix as a labelled heatmap PNG with a colour bar."""
    weights = weights.detach().float().cpu()
    rows, cols = weights.shape
    width, height = _panel_size(rows, cols)
    fig, ax = plt.subplots(figsize=(width + 1.6, height + 1.4), dpi=110)
    image = _heatmap(ax, weights, queries, keys)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title, fontsize=10)
    return _save(fig, path)


def plot_heads(weights: Tensor, path: Path, queries: Sequence[str] | None = None,
               keys: Sequence[str] | None = None, title: str = "attention weights per head") -> Path:
    """Save (heads, queries, keys) weights as one heatmap per head, on one shared colour scale."""
    weights = weights.detach().float().cpu()
    heads, rows, cols = weights.shape
    columns = min(heads, 4)
    grid_rows = math.ceil(heads / columns)
    cell = min(_CELL, max(0.15, (22.0 / columns - 1.0) / cols))  # long sentences: about 22 inches wide at most
    width, height = _panel_size(rows, cols, cell)
    size = (columns * (width + 1.0) + 1.2, grid_rows * (height + 1.1) + 0.6)
    fig, axes = plt.subplots(grid_rows, columns, figsize=size, dpi=100, squeeze=False, layout="constrained")
    vmax = float(weights.max()) or 1.0
    for head, ax in enumerate(axes.flat):
        if head >= heads:
            ax.axis("off")
            continue
        image = _heatmap(ax, weights[head], queries, keys, vmax=vmax, show_queries=head % columns == 0)
        ax.set_title(f"head {head + 1}", fontsize=9)
    fig.colorbar(image, ax=axes, fraction=0.1 / columns, pad=0.01, label="attention weight")
    fig.suptitle(title, fontsize=10)
    fig.supxlabel("key (attended to)", fontsize=9)
    fig.supylabel("query (attending)", fontsize=9)
    return _save(fig, path, tight=False)


def save_translation_maps(attention, out: Path, stem: str = "") -> list[Path]:
    """Every picture of one sentence's `SentenceAttention` into OUT; returns the paths written.

    alignment.png (cross-attention averaged over layers and heads), cross_layer<N>.png (per head),
    encoder_layer<N>.png (source self-attention per head), decoder_layer<N>.png (target self-attention).
    """
    source, target, weights = attention.source_tokens, attention.target_tokens, attention.weights
    prefix = f"{stem}_" if stem else ""
    layers = len(weights.cross)
    paths = [plot_attention(weights.alignment()[0], out / f"{prefix}alignment.png", target, source,
                            title=f"encoder-decoder attention, mean of {layers} layer(s) and their heads")]
    for n, layer in enumerate(weights.cross, start=1):
        paths.append(plot_heads(layer[0], out / f"{prefix}cross_layer{n}.png", target, source,
                                title=f"encoder-decoder attention, layer {n}: target token (row) reads source "
                                      "(column)"))
    for n, layer in enumerate(weights.encoder, start=1):
        paths.append(plot_heads(layer[0], out / f"{prefix}encoder_layer{n}.png", source, source,
                                title=f"encoder self-attention, layer {n}"))
    for n, layer in enumerate(weights.decoder, start=1):
        paths.append(plot_heads(layer[0], out / f"{prefix}decoder_layer{n}.png", target, attention.target_input_tokens,
                                title=f"decoder masked self-attention, layer {n}: producing the row's token, "
                                      f"reading the target so far"))
    return paths


def token_label(token: str) -> str:
    """A subword token as an axis label: the word-start marker shown as a leading space-like bar."""
    return token.replace("\u2581", "_")


def _panel_size(rows: int, cols: int, cell: float = _CELL) -> tuple[float, float]:
    return max(2.6, cell * cols + 1.0), max(2.2, cell * rows + 0.8)


def _heatmap(ax, weights: Tensor, queries: Sequence[str] | None, keys: Sequence[str] | None,
             vmax: float | None = None, show_queries: bool = True):
    rows, cols = weights.shape
    image = ax.imshow(weights.numpy(), cmap="viridis", vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest")
    size = 7 if max(rows, cols) > 20 else 8
    if keys is not None:
        ax.set_xticks(range(cols), labels=[token_label(k) for k in keys], rotation=60, ha="right",
                      rotation_mode="anchor", fontsize=size)
    if queries is not None and show_queries:
        ax.set_yticks(range(rows), labels=[token_label(q) for q in queries], fontsize=size)
    elif queries is not None:
        ax.set_yticks(range(rows), labels=[])
    return image


def _save(fig, path: Path, tight: bool = True) -> Path:
    if tight:
        fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight" if not tight else None)
    plt.close(fig)
    return path
