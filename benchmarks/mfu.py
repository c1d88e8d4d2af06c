"""Model FLOP utilisation of one translation training step against this machine's measured matmul peak.

    .venv/bin/python benchmarks/mfu.py            # the `base` preset, fp32, on a quiet machine
    .venv/bin/python benchmarks/mfu.py --quick    # tiny shapes: checks the script runs

FLOPs per step are counted by torch.utils.flop_counter.FlopCounterMode (forward + backward of the
model and the loss); the peak is the best of a few square matmuls of the same size class and dtype.
MFU = FLOPs per step / step time / peak. `benchmarks/cuda_check.py` runs the same step on a GPU in bf16.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import time
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from attnkit.translation.config import build_model, preset
from attnkit.translation.losses import label_smoothed_cross_entropy

CPU = torch.device("cpu")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def best_seconds(call: Callable[[], object], repeats: int, device: torch.device) -> float:
    """The fastest of REPEATS synchronised calls, after one warm-up call."""
    call()
    best = float("inf")
    for _ in range(repeats):
        sync(device)
        started = time.perf_counter()
        call()
        sync(device)
        best = min(best, time.perf_counter() - started)
    return best


def matmul_peak(size: int, repeats: int, device: torch.device = CPU,
                dtype: torch.dtype = torch.float32) -> float:
    """FLOP/s of the fastest of REPEATS (size x size) @ (size x size) products."""
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    return 2 * size**3 / best_seconds(lambda: a @ b, repeats, device)


def training_step(name: str, batch: int, length: int, device: torch.device = CPU, bf16: bool = False,
                  vocab: int | None = None, fused: bool = False) -> tuple[Callable[[], None], float]:
    """One Adam step of preset NAME on random (batch, length) ids (vocabulary: the preset's, or VOCAB), under
    bf16 autocast if BF16, fused Adam if FUSED; returns the step and its FLOPs (counted by running it once)."""
    config = preset(name)
    vocab = vocab or config.vocab_size
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, source_vocab_size=vocab,
                                                                    target_vocab_size=vocab))
    torch.manual_seed(0)
    model = build_model(config).to(device)
    source = torch.randint(4, vocab, (batch, length), device=device)
    target = torch.randint(4, vocab, (batch, length + 1), device=device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, **({"fused": True} if fused else {}))
    autocast = torch.autocast(device.type, torch.bfloat16) if bf16 else contextlib.nullcontext()

    def step() -> None:
        with autocast:
            logits = model(source, target[:, :-1])  # (batch, length, vocab)
        loss = label_smoothed_cross_entropy(logits.float(), target[:, 1:], 0.1) / target[:, 1:].numel()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    with FlopCounterMode(display=False) as counter:
        step()
    return step, counter.get_total_flops()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny preset and shapes: check that it runs")
    parser.add_argument("--preset", default=None, help="translation preset (default: base, tiny with --quick)")
    parser.add_argument("--batch", type=int, default=None, help="sentences per batch")
    parser.add_argument("--length", type=int, default=None, help="tokens per sentence")
    parser.add_argument("--steps", type=int, default=None, help="timed steps")
    args = parser.parse_args()
    name = args.preset or ("tiny" if args.quick else "base")
    batch, length = args.batch or (8 if args.quick else 32), args.length or (16 if args.quick else 32)
    steps = args.steps or (2 if args.quick else 10)
    step, flops = training_step(name, batch, length)
    step()  # warm-up
    started = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = (time.perf_counter() - started) / steps
    peak = matmul_peak(256 if args.quick else 2048, 3 if args.quick else 10)
    print("| preset | batch x length | GFLOP/step | s/step | achieved GFLOP/s | fp32 matmul peak GFLOP/s | MFU |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print(f"| {name} | {batch} x {length} | {flops / 1e9:.2f} | {seconds:.3f} | {flops / seconds / 1e9:.1f} | "
          f"{peak / 1e9:.1f} | {100 * flops / seconds / peak:.1f}% |")
    print(f"threads: {torch.get_num_threads()}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
