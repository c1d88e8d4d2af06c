"""Attention weights as heatmaps: which key each query looks at."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from torch import Tensor  # noqa: E402


def plot_attention(weights: Tensor, path: Path, queries: Sequence[str] | None = None,
                   keys: Sequence[str] | None = None, title: str = "attention weights") -> Path:
    """Save a (queries, keys) weight matrix as a labelled heatmap PNG with a colour bar."""
    weights = weights.detach().float().cpu()
    rows, cols = weights.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * cols + 2.0), max(3.5, 0.4 * rows + 1.5)), dpi=110)
    image = ax.imshow(weights.numpy(), cmap="viridis", vmin=0.0, aspect="auto")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="weight")
    if keys is not None:
        ax.set_xticks(range(cols), labels=list(keys), rotation=60, ha="right", fontsize=8)
    if queries is not None:
        ax.set_yticks(range(rows), labels=list(queries), fontsize=8)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
