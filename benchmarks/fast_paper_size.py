"""`fast` against DETR at the paper's size (`detr-r50` preset, 800 x 800, batch 1), and `fast` with the
deformable sampling of an earlier checkout (`--before DIR`: that checkout's src/), all alternating call by
call in one process (the order rotated each round), eval mode under `torch.inference_mode`, random weights;
medians after a warm-up call.

    .venv/bin/python benchmarks/fast_paper_size.py --rounds 5 --before /tmp/before/src
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from attnkit.detection.architectures import build_model
from attnkit.detection.config import preset, with_arch
from attnkit.detection.variants import multi_scale_deformable_attention as msda


def sampling_of(src: Path) -> Callable:
    """`deformable_sampling` as the checkout at SRC writes it."""
    path = src / "attnkit/detection/variants/multi_scale_deformable_attention.py"
    spec = importlib.util.spec_from_file_location("before_msda", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.deformable_sampling


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=800)
    parser.add_argument("--preset", default="detr-r50")
    parser.add_argument("--before", type=Path, help="an earlier checkout's src/: its sampling is one more arm")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    config = preset(args.preset)[0]
    torch.manual_seed(0)
    detr, fast = (build_model(with_arch(config, arch)).eval() for arch in ("detr", "fast"))
    now = msda.deformable_sampling
    arms: dict[str, tuple[torch.nn.Module, Callable]] = {"detr": (detr, now), "fast": (fast, now)}
    if args.before is not None:
        arms["fast, before"] = (fast, sampling_of(args.before))
    images = torch.randn(1, 3, args.size, args.size)
    mask = torch.zeros(1, args.size, args.size, dtype=torch.bool)
    times: dict[str, list[float]] = {name: [] for name in arms}
    with torch.inference_mode():
        for round_ in range(args.rounds + 1):
            names = list(arms)[round_ % len(arms):] + list(arms)[:round_ % len(arms)]  # each arm first in turn
            for name in names:  # (the arm after DETR was measured up to 1.4x slower: memory freed and re-faulted)
                model, sampling = arms[name]
                msda.deformable_sampling = sampling
                started = time.perf_counter()
                model(images, mask)
                if round_:
                    times[name].append(time.perf_counter() - started)
    msda.deformable_sampling = now
    detr_s = statistics.median(times["detr"])
    print(f"\n| `{args.preset}`, {args.size} px, batch 1 | median s (of {args.rounds}) | speed / DETR |\n"
          "| --- | ---: | ---: |")
    for name, seconds in times.items():
        print(f"| {name} | {statistics.median(seconds):.2f} | {detr_s / statistics.median(seconds):.2f}x |")


if __name__ == "__main__":
    main()
