"""Multi-head attention speed and memory: attnkit vs torch.nn.MultiheadAttention vs the reference path.

    python benchmarks/attention.py                 # fp32 on the CPU (bf16 too when CUDA is present)
    python benchmarks/attention.py --tokens 8192 --repeats 5

A fixed number of tokens per batch (batch = tokens / length), d_model 512, 8 heads, self-attention.
"attnkit" and "torch" run their fast paths (need_weights=False, scaled_dot_product_attention);
"reference" is attnkit with need_weights=True, the literal softmax(QK^T/sqrt(d))V that stores the
(queries, keys) weight matrix. Forward is timed in eval mode under torch.no_grad(); forward+backward
in training mode (dropout 0). Peak memory: the CUDA allocator's peak on a GPU; on the CPU, the rise
of the process's peak resident memory (VmHWM) in a fresh subprocess that runs one forward+backward.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

from attnkit.nn import MultiHeadAttention

LENGTHS = [128, 256, 512, 1024, 2048, 4096]
IMPLEMENTATIONS = ["attnkit", "torch", "reference"]


def build(impl: str, d_model: int, heads: int, device: str, dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    cls = torch.nn.MultiheadAttention if impl == "torch" else MultiHeadAttention
    return cls(d_model, heads, batch_first=True).to(device=device, dtype=dtype)


def run_once(module: torch.nn.Module, x: torch.Tensor, impl: str, backward: bool) -> None:
    need_weights = impl == "reference"
    if backward:
        out, _ = module(x, x, x, need_weights=need_weights)
        out.float().square().mean().backward()
    else:
        with torch.no_grad():
            module(x, x, x, need_weights=need_weights)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_it(impl: str, length: int, args, device: str, dtype: torch.dtype, backward: bool) -> float:
    module = build(impl, args.d_model, args.heads, device, dtype).train(backward)
    x = torch.randn(max(1, args.tokens // length), length, args.d_model, device=device, dtype=dtype,
                    requires_grad=backward)
    for _ in range(args.warmup):
        run_once(module, x, impl, backward)
    times = []
    for _ in range(args.repeats):
        sync(device)
        start = time.perf_counter()
        run_once(module, x, impl, backward)
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def peak_memory_mib(impl: str, length: int, args, device: str, dtype: torch.dtype) -> float:
    if device == "cuda":
        module = build(impl, args.d_model, args.heads, device, dtype).train()
        x = torch.randn(max(1, args.tokens // length), length, args.d_model, device=device, dtype=dtype,
                        requires_grad=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        run_once(module, x, impl, backward=True)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    command = [sys.executable, __file__, "--memory-probe", impl, str(length), "--tokens", str(args.tokens),
               "--d-model", str(args.d_model), "--heads", str(args.heads), "--cpu-dtype", args.cpu_dtype]
    return float(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip())


def memory_probe(impl: str, length: int, args) -> None:
    """In a fresh process: the rise of peak RSS over one forward+backward (after one warm-up at length 8)."""
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.cpu_dtype]
    module = build(impl, args.d_model, args.heads, "cpu", dtype).train()
    run_once(module, torch.randn(1, 8, args.d_model, dtype=dtype, requires_grad=True), impl, backward=True)
    x = torch.randn(max(1, args.tokens // length), length, args.d_model, dtype=dtype, requires_grad=True)
    before = _high_water_mark_kib()
    run_once(module, x, impl, backward=True)
    print((_high_water_mark_kib() - before) / 1024)


def _high_water_mark_kib() -> int:
    """This process's peak resident memory (VmHWM; unlike ru_maxrss it is not inherited across exec)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def table(device: str, dtype: torch.dtype, args) -> list[dict]:
    rows = []
    print(f"\n{device}, {str(dtype).removeprefix('torch.')}, {args.tokens} tokens per batch, d_model {args.d_model}, "
          f"{args.heads} heads, {torch.get_num_threads()} threads")
    print("| length | batch | impl | forward ms | fwd+bwd ms | peak MiB | fwd vs torch | fwd+bwd vs torch |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for length in args.lengths:
        results = {}
        for impl in args.impls:
            results[impl] = {"forward_ms": time_it(impl, length, args, device, dtype, backward=False),
                             "train_ms": time_it(impl, length, args, device, dtype, backward=True),
                             "peak_mib": peak_memory_mib(impl, length, args, device, dtype)}
        for impl, r in results.items():
            ref = results.get("torch", r)
            row = {"device": device, "dtype": str(dtype), "length": length, "batch": max(1, args.tokens // length),
                   "impl": impl, **r, "forward_speedup": ref["forward_ms"] / r["forward_ms"],
                   "train_speedup": ref["train_ms"] / r["train_ms"]}
            rows.append(row)
            print(f"| {length} | {row['batch']} | {impl} | {r['forward_ms']:.2f} | {r['train_ms']:.2f} | "
                  f"{r['peak_mib']:.0f} | {row['forward_speedup']:.2f}x | {row['train_speedup']:.2f}x |", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--lengths", type=int, nargs="+", default=LENGTHS)
    parser.add_argument("--impls", nargs="+", default=IMPLEMENTATIONS, choices=IMPLEMENTATIONS)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--devices", nargs="+", default=["cpu", "cuda"], choices=["cpu", "cuda"],
                        help="tables to print: the CPU's (--cpu-dtype), bf16 on CUDA (when present)")
    parser.add_argument("--cpu-dtype", default="fp32", choices=["fp32", "bf16"], help="dtype of the CPU table")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--memory-probe", nargs=2, metavar=("IMPL", "LENGTH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_probe:
        return memory_probe(args.memory_probe[0], int(args.memory_probe[1]), args)
    cpu_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.cpu_dtype]
    rows = table("cpu", cpu_dtype, args) if "cpu" in args.devices else []
    if "cuda" in args.devices and torch.cuda.is_available():
        rows += table("cuda", torch.bfloat16, args)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
