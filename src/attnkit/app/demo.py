"""`attnkit demo`: the main jobs on built-in data, in a few minutes on a laptop CPU.

Each part is a function `(out: Path) -> None`: the attention core's here, each task's in its `TaskKind`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import typer

from attnkit.app.cli import app
from attnkit.errors import user_errors


def attention_core_part(out: Path) -> None:
    """Self-attention on a small sentence: the reference formula and the fast path, side by side."""
    from attnkit.app.visualize.attention_maps import plot_attention
    from attnkit.nn import MultiHeadAttention, reference_attention
    from attnkit.nn.positional_encoding.sinusoidal import SinusoidalPositionalEncoding

    words = "the cat sat on the mat because the cat was tired".split()
    vocab = sorted(set(words))
    d_model = 32
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(len(vocab), d_model, generator=generator)  # a fixed random embedding per word
    a = table[[vocab.index(w) for w in words]].unsqueeze(0)  # a_i: (batch, length, d_model)
    a = a + 0.5 * SinusoidalPositionalEncoding(d_model)(a)  # + e_i, scaled down so words still dominate
    outputs, weights = reference_attention(a, a, a)  # q = k = v = a: (batch, length, d_model), (batch, length, length)
    attention = MultiHeadAttention(d_model, num_heads=4, batch_first=True).eval()
    with torch.no_grad():
        fast, _ = attention(a, a, a, need_weights=False)
        slow, _ = attention(a, a, a, need_weights=True)
    path = plot_attention(weights[0], out / "self_attention.png", words, words,
                          title="self-attention: softmax(q.k / sqrt(d)), q = k = word + position")
    print(f"self-attention over {len(words)} words, d_model={d_model}")
    print(f"  rows of softmax(q.k/sqrt(d)) sum to one: max |1 - sum| = {(weights.sum(-1) - 1).abs().max():.2e}")
    print(f"  'cat' (position 1) attends most to: "
          f"{', '.join(f'{words[j]}@{j}' for j in weights[0, 1].topk(3).indices.tolist())}")
    print(f"  multi-head (4 heads): fast path vs explicit path max difference = {(fast - slow).abs().max():.2e}")
    print(f"  heatmap: {path}")


def demo_parts() -> list[tuple[str, Callable[[Path], None]]]:
    """(name, part): the attention core first, then each registered task's demo (`attnkit.app.tasks`)."""
    from attnkit.app.tasks import kinds

    return [("attention core", attention_core_part)] + [(kind.name, kind.demo) for kind in kinds().values()]


@app.command()
def demo(out: Path = typer.Option(Path("runs/demo"), help="Folder for the demo's outputs.")) -> None:
    """Run the main jobs on built-in data and write their outputs under OUT."""
    with user_errors():
        out.mkdir(parents=True, exist_ok=True)
        parts = demo_parts()
        for index, (name, part) in enumerate(parts, start=1):
            print(f"== {index}/{len(parts)}: {name} ==")
            part(out / name.replace(" ", "_"))
        print(f"demo outputs: {out.resolve()}")
        for report in sorted(out.rglob("report.html")):  # written by every training run (attnkit.app.visualize.report)
            print(f"run report: {report.resolve()}")
