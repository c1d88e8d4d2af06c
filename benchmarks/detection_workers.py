"""Do DataLoader workers pay for detection training on this machine? Steps/s with 0, 1, 2 workers, alternating.

The `small` preset on the built-in `shapes` (96 px), a real optimizer step per batch; each arm
opens a fresh DataLoader per chunk, as training does per epoch, so the workers' start is counted.
Arms run in turn (0, 1, 2, 0, 1, 2, ...) in one process so that all see the same load.

    .venv/bin/python benchmarks/detection_workers.py --rounds 3 --steps 40
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from attnkit.app.detection.recipe import DetectionTask, epoch_refs, load_batch
from attnkit.detection.config import DetectionConfig, preset
from attnkit.detection.layouts import find_layout
from attnkit.detection.shapes import ShapesConfig, write_shapes
from attnkit.detection.sources import open_split
from attnkit.detection.transforms import train_transforms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3, help="0: the loading share only")
    parser.add_argument("--steps", type=int, default=40, help="steps per arm per round (one DataLoader each)")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--preset", default="small")
    args = parser.parse_args()
    model, train = preset(args.preset)
    config = DetectionConfig(model, train, preset=args.preset)
    with tempfile.TemporaryDirectory() as folder:
        root = write_shapes(Path(folder), ShapesConfig(image_size=96, train_images=1000, val_images=1))
        t = config.train
        dataset = open_split(find_layout(root).source("train"),
                             train_transforms(t.train_scales, t.max_size, t.flip, t.crop_min_fraction),
                             for_evaluation=False)
        task = DetectionTask(config, dataset, None)
        refs = epoch_refs(len(dataset), t.batch_size, t.seed, 0)
        times: dict[int, list[float]] = {workers: [] for workers in args.workers}
        offset = 0
        step(task, refs[:3], 0)  # warm-up
        share = loading_share(task, refs[-args.steps:])
        print(f"loading: {share:.1%} of a step's time with 0 workers (at most what workers can take off it)",
              file=sys.stderr, flush=True)
        for _ in range(args.rounds):
            for workers in args.workers:
                chunk = refs[offset % len(refs):][:args.steps]
                offset += args.steps
                times[workers].append(step(task, chunk, workers) / len(chunk))
                print(f"{workers} workers: {1 / times[workers][-1]:.2f} steps/s", file=sys.stderr, flush=True)
    if not args.rounds:
        return
    print(f"torch threads: {torch.get_num_threads()}; {args.steps} steps per arm per round, {args.rounds} rounds")
    print("| workers | steps/s (median) | per round | vs 0 workers |")
    print("|---|---|---|---|")
    base = statistics.median(times[args.workers[0]])
    for workers, seconds in times.items():
        rates, median = ", ".join(f"{1 / s:.2f}" for s in seconds), statistics.median(seconds)
        print(f"| {workers} | {1 / median:.2f} | {rates} | {base / median:.2f}x |")


def loading_share(task: DetectionTask, refs) -> float:
    """The part of the time of 0-worker training spent loading batches (load and step alternate, batch by batch)."""
    loading = stepping = 0.0
    for ref in refs:
        start = time.perf_counter()
        batch = load_batch(task.train_set, ref)
        loading += time.perf_counter() - start
        stepping += step(task, [ref], 0, batch)
    return loading / (loading + stepping)


def step(task: DetectionTask, refs, workers: int, loaded=None) -> float:
    """Seconds to load REFS with WORKERS (or take LOADED, their one batch) and take one optimizer step per batch."""
    task.workers = workers
    start = time.perf_counter()
    for batch in [loaded] if loaded is not None else task.load(refs):
        task.optimizer.zero_grad(set_to_none=True)
        task.train_step(task.model, batch)["loss"].backward()
        task.optimizer.step()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
