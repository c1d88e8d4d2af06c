"""A detector's forward, eager against compiled (`Detector.from_run(RUN, compile=True)`), alternating in one process.

    .venv/bin/python benchmarks/compiled_inference.py RUN [--batches 1 8] [--size 96 96] [--rounds 10]

For each batch size: the seconds the first compiled call took (the compile, or a load from Inductor's cache), then
rounds of 10 calls of each form in turn on the same random input; the medians and minima in ms, and the largest
difference between the two forms' boxes. Forward only: no image reading, no post-processing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from attnkit.detection.detector import Detector


def timed(forward, images: torch.Tensor, mask: torch.Tensor, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        forward(images, mask)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a detection run folder")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--size", type=int, nargs=2, default=[96, 96], metavar=("HEIGHT", "WIDTH"))
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    eager = Detector.from_run(args.run, device="cpu")
    compiled = Detector.from_run(args.run, device="cpu", compile=True)
    print("| batch | compile s | eager ms (median / min) | compiled ms (median / min) | speed-up "
          "| max box difference |")
    print("|---|---|---|---|---|---|")
    for batch in args.batches:
        images, mask = torch.randn(batch, 3, *args.size), torch.zeros(batch, *args.size, dtype=torch.bool)
        with torch.no_grad():
            start = time.perf_counter()
            got = compiled.forward(images, mask)
            compile_s = time.perf_counter() - start
            difference = (got.boxes - eager.forward(images, mask).boxes).abs().max().item()
            times: dict[str, list[float]] = {"eager": [], "compiled": []}
            for _ in range(args.rounds):
                for name, detector in (("eager", eager), ("compiled", compiled)):
                    detector.forward(images, mask)
                    times[name] += timed(detector.forward, images, mask, 10)
        median = {name: statistics.median(t) * 1e3 for name, t in times.items()}
        low = {name: min(t) * 1e3 for name, t in times.items()}
        print(f"| {batch} | {compile_s:.1f} | {median['eager']:.2f} / {low['eager']:.2f} | "
              f"{median['compiled']:.2f} / {low['compiled']:.2f} | {median['eager'] / median['compiled']:.2f}x | "
              f"{difference:.1e} |", flush=True)
    print(f"\n{args.threads} threads, {args.size[0]} x {args.size[1]} px, {args.rounds} rounds of 10 calls per form; "
          f"torch {torch.__version__}")


if __name__ == "__main__":
    main()
