"""Deformable attention's two forms at the sizes the presets run: every key projected, then the values sampled
(`ValueProjection.maps`, `deformable_sampling`), against the keys sampled, then the samples projected
(`sampled_then_projected`); forward under `torch.inference_mode`, and with `--backward` forward and backward. Each
row gives the ratio `MultiScaleDeformableAttention.samples_pay` reads (the keys' projection over the gathered
neighbours; it samples first from GATHER_PAYS), both times (medians, the forms alternating) and their largest
difference. 8 heads, 3 levels at strides 8, 16, 32, 4 points, random weights.

    .venv/bin/python benchmarks/sampling_first.py [--backward]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from attnkit.detection.variants.multi_scale_deformable_attention import (
    GATHER_PAYS,
    MultiScaleDeformableAttention,
    deformable_sampling,
    sampled_then_projected,
)

# name: (image side, queries, d_model, batch): the attention calls of `fast` at detr-r50's size, `medium`, `small`
CASES = {
    "detr-r50 800 px, decoder": (800, 100, 256, 1),
    "detr-r50 800 px, encoder (C5)": (800, 625, 256, 1),
    "detr-r50 800 px, encoder (C4, C5)": (800, 3125, 256, 1),
    "medium 640 px, decoder": (640, 30, 128, 1),
    "medium 640 px, encoder": (640, 400, 128, 1),
    "medium 320 px, decoder": (320, 30, 128, 1),
    "medium 320 px, decoder, batch 8": (320, 30, 128, 8),
    "medium 320 px, encoder": (320, 100, 128, 1),
    "small 96 px, decoder": (96, 15, 128, 1),
    "small 96 px, decoder, batch 8": (96, 15, 128, 8),
    "small 96 px, encoder (C4, C5)": (96, 45, 128, 1),
}
BACKWARD_CASES = {  # training: the query groups (3 x the queries) and a batch
    "detr-r50 800 px, decoder, batch 2": (800, 300, 256, 2),
    "detr-r50 800 px, encoder (C5), batch 2": (800, 625, 256, 2),
    "medium 320 px, decoder, batch 4": (320, 90, 128, 4),
    "medium 640 px, decoder, batch 4": (640, 90, 128, 4),
}


def median_ms(first: Callable[[], object], second: Callable[[], object], rounds: int = 15) -> tuple[float, float]:
    """Both callables' median times (ms), called alternately after two warm-up calls each."""
    times: tuple[list[float], list[float]] = ([], [])
    for round_ in range(rounds + 2):
        for call, seconds in zip((first, second), times):
            started = time.perf_counter()
            call()
            if round_ >= 2:
                seconds.append(time.perf_counter() - started)
    return 1000 * statistics.median(times[0]), 1000 * statistics.median(times[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backward", action="store_true", help="forward and backward, at training's sizes")
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, GATHER_PAYS {GATHER_PAYS:g}\n\n"
          f"| call | keys x d_model / neighbours | every key projected ms | sampled first ms | largest difference |\n"
          "| --- | ---: | ---: | ---: | ---: |")
    for name, (side, queries, d_model, batch) in (BACKWARD_CASES if args.backward else CASES).items():
        print(row(name, side, queries, d_model, batch, args.backward))


def row(name: str, side: int, queries: int, d_model: int, batch: int, backward: bool) -> str:
    """One table row: both forms of one attention call, timed alternately."""
    shapes = [(side // stride, side // stride) for stride in (8, 16, 32)]
    count = sum(h * w for h, w in shapes)
    module = MultiScaleDeformableAttention(d_model, 8, 3, 4)
    torch.nn.init.normal_(module.sampling_offsets.weight, std=0.1)  # points that depend on the query
    torch.nn.init.normal_(module.attention_weights.weight, std=0.1)
    keys = torch.randn(batch, count, d_model, requires_grad=backward)
    query = torch.randn(batch, queries, d_model)
    reference = torch.rand(batch, queries, 3, 4) * 0.5 + 0.25

    def step(out: torch.Tensor) -> torch.Tensor:
        if backward:
            out.square().sum().backward()
        return out.detach()

    def projected() -> torch.Tensor:
        locations, weights = module.sampling(query, reference, shapes)
        return step(deformable_sampling(module.value_proj.maps(keys, shapes, None, 8), shapes, locations, weights))

    def sampled() -> torch.Tensor:
        locations, weights = module.sampling(query, reference, shapes)
        return step(sampled_then_projected(keys, None, shapes, locations, weights, module.value_proj))

    with torch.set_grad_enabled(backward), torch.inference_mode(not backward):
        difference = (projected() - sampled()).abs().max().item()
        before, after = median_ms(projected, sampled)
    ratio = count * d_model / (queries * 8 * 3 * 4 * 4)
    return f"| {name} | {ratio:.1f} | {before:.2f} | {after:.2f} | {difference:.1e} |"

if __name__ == "__main__":
    main()
