"""A float32 Linear at CPU inference: PyTorch's product (MKL) against oneDNN's (`OneDnnLinear`),
at the shapes attnkit's detectors call, each in blocks of --rounds calls, the blocks alternating (3 each), medians
of all calls; the same threads as torch's default.

    .venv/bin/python benchmarks/onednn_linear.py
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import torch
from torch import nn

from attnkit.nn.onednn_linear import ONEDNN_PAYS, onednn_linears

SHAPES = (  # (rows, in, out, where)
    (15, 128, 512, "`small` 96 px, decoder FFN, batch 1"),
    (45, 128, 512, "`small` 96 px, encoder FFN (C4 and C5), batch 1"),
    (120, 128, 512, "`small` 96 px, decoder FFN, batch 8"),
    (360, 128, 512, "`small` 96 px, encoder FFN, batch 8"),
    (100, 256, 2048, "`detr-r50` 800 px, decoder FFN"),
    (625, 256, 2048, "`detr-r50` 800 px, encoder FFN (C5)"),
    (625, 2048, 256, "the same, second layer"),
    (13125, 256, 256, "`fast` 800 px, proposals' Linear (every key)"),
    (13125, 256, 91, "`fast` 800 px, proposals' class head"),
)


def median_ms(call, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, ONEDNN_PAYS {ONEDNN_PAYS:,}")
    print("\n| call | rows x in -> out | PyTorch ms | oneDNN ms | speed-up |\n| --- | --- | ---: | ---: | ---: |")
    torch.manual_seed(0)
    with torch.inference_mode():
        for rows, inputs, outputs, where in SHAPES:
            x, layer = torch.randn(rows, inputs), nn.Linear(inputs, outputs)
            theirs = onednn_linears(nn.Sequential(nn.Linear(inputs, outputs)))[0]
            theirs.load_state_dict(layer.state_dict())
            calls = {"torch": partial(layer, x), "onednn": partial(theirs, x)}
            for call in calls.values():
                call()
            times: dict[str, list[float]] = {name: [] for name in calls}
            for _ in range(3):
                for name, call in calls.items():
                    times[name] += [median_ms(call, 1) for _ in range(args.rounds)]
            ms = {name: statistics.median(t) for name, t in times.items()}
            taken = "" if rows * inputs * outputs >= ONEDNN_PAYS else " (below ONEDNN_PAYS: PyTorch's)"
            print(f"| {where} | {rows} x {inputs} -> {outputs} | {ms['torch']:.3f} | {ms['onednn']:.3f}{taken} | "
                  f"{ms['torch'] / ms['onednn']:.2f}x |")


if __name__ == "__main__":
    main()
