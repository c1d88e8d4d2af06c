"""Data-parallel scaling: both `attnkit train` commands as 1 and 2 processes under torchrun (gloo, CPU).

    .venv/bin/python benchmarks/scaling.py            # about a minute of training per run, on a quiet machine
    .venv/bin/python benchmarks/scaling.py --quick    # 20 steps per run: checks that the script runs
    .venv/bin/python benchmarks/scaling.py --tasks detection --processes 1 2 --bandwidth-gbps 400

What runs: for each task, the user's own command

    torchrun --standalone --nproc_per_node N -m attnkit train translation --data numbers:de --preset tiny ...
    torchrun --standalone --nproc_per_node N -m attnkit train detection --data shapes --preset small ...

for N in --processes (1 and 2), --steps optimizer steps each, on the CPU (gloo; CUDA hidden).
Weak scaling, as one scales to more GPUs: every process keeps the preset's batch (translation:
`max_tokens` tokens per side, detection: `train.batch_size` images), so N processes step through
N times the global batch. The machine's cores are shared out: OMP_NUM_THREADS = cores / N, so on 2
cores 1 process uses 2 threads and 2 processes use 1 thread each (the same arithmetic units in
both rows: the table shows what the data-parallel machinery costs and saves, not more hardware).
Run it on a quiet machine: when another program holds a core, a process with 2 threads waits for
it in every parallel region, and the 1-process rows lose far more than the 2-process ones.
Validation and mid-run checkpoints are pushed past the end of the run (the final ones do not
count: the loop logs training throughput without them).

Throughput comes from each run folder's metrics.jsonl (rank 0's training records, one every 10
steps, throughput summed over all processes): the first record's window is warm-up and is left
out; steps/s and items/s (tokens: source + target tokens of the batches, without padding; images)
are over the remaining windows. Scaling efficiency = items/s of N processes / items/s of 1 process,
both on all the cores: 1.0 means that splitting the cores into N data-parallel processes costs
nothing, which on GPUs (a device per process, N devices against 1) reads as items/s of N devices /
(N x items/s of one). Threads themselves do not scale perfectly (1 process on 2 threads is less
than twice 1 thread on small matrices), so a figure above 1.0 is possible here.

Communication per optimizer step, computed and measured:
  * computed from the model that the run's config.json builds: DistributedDataParallel
    all-reduces every trainable parameter's gradient once per optimizer step (fp32: 4 bytes each,
    also under bf16 autocast, as the weights stay fp32); a ring all-reduce of G bytes sends (and
    receives) 2 (N - 1) / N x G bytes per process. DDP also broadcasts the model's buffers
    (BatchNorm statistics) from rank 0 before every forward.
  * measured in one more, untimed, 2-process run of --count-steps steps: this script is the
    torchrun entry point there, wraps `attnkit.training.distributed.wrap` to register a DDP
    communication hook (PyTorch's `allreduce_hook`, counting each bucket's bytes) and to count
    DDP's buffer broadcasts and the loop's scalar collectives, then runs the same command. The
    library is not changed; the timed runs are plain `-m attnkit`.
"What to expect on GPUs" turns the gradient bytes into an all-reduce time per step at
--bandwidth-gbps (Gbit/s per process link, the ring's bandwidth term, latency left out).

Writes OUT/results.md (printed too) and OUT/results.json; run folders and logs under OUT/runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

COUNT_WORKER = "_count-communication"  # first argument of this script when torchrun starts it as a worker
WARM_UP_RECORDS = 1  # training records (10 steps each) left out of the throughput


@dataclass(frozen=True)
class Task:
    """One `attnkit train` command: its arguments, and what its per-process batch is."""

    name: str
    arguments: tuple[str, ...]
    steps: int  # --steps default: about a minute of training on 2 CPU cores


def tasks(translation_preset: str, detection_preset: str) -> dict[str, Task]:
    translation = ("train", "translation", "--data", "numbers:de", "--preset", translation_preset,
                   "--set", "eval_every_minutes=10000", "--set", "eval_sentences=16",
                   "--set", "beam_size=1")  # the test split scored after training (untimed): greedy, to end sooner
    detection = ("train", "detection", "--data", "shapes", "--preset", detection_preset,
                 "--eval-every-minutes", "10000", "--shapes-val-images", "16")
    return {"translation": Task("translation", translation, steps=250),
            "detection": Task("detection", detection, steps=120)}


# ---------------------------------------------------------------- running the commands
def torchrun(arguments: list[str], processes: int, threads: int, log: Path) -> None:
    """ARGUMENTS (after `torchrun ... `) as PROCESSES processes with THREADS threads each, on the CPU."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes),
               *arguments]
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads), "CUDA_VISIBLE_DEVICES": ""}
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as file:
        done = subprocess.run(command, stdout=file, stderr=subprocess.STDOUT, env=environment, check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:])
        raise SystemExit(f"exit code {done.returncode}: {' '.join(command)}\n{tail}\n(whole log: {log})")


def train_arguments(task: Task, run: Path, steps: int) -> list[str]:
    if run.exists():  # this script's own run folder from an earlier call: start afresh
        shutil.rmtree(run)
    return [*task.arguments, "--device", "cpu", "--steps", str(steps), "--out", str(run)]


def shown(arguments: list[str], processes: int, threads: int) -> str:
    """The command as a user would type it."""
    return f"OMP_NUM_THREADS={threads} torchrun --standalone --nproc_per_node {processes} " + " ".join(arguments)


# ---------------------------------------------------------------- throughput from metrics.jsonl
def throughput(run: Path) -> dict:
    """Steps/s and items/s over the training records after the warm-up one (rank 0's, all processes' items).

    Each record's `<items>_per_s` covers the steps since the previous record; its window length is
    the difference of `elapsed_s` (no validation or checkpoint falls inside the run).
    """
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    train = [r for r in records if r.get("split") == "train"]
    if len(train) <= WARM_UP_RECORDS:
        raise SystemExit(f"{run}: {len(train)} training records; give --steps of at least 20")
    key = next(k for k in train[-1] if k.endswith("_per_s"))
    windows = list(zip(train[WARM_UP_RECORDS - 1:], train[WARM_UP_RECORDS:]))
    seconds = sum(after["elapsed_s"] - before["elapsed_s"] for before, after in windows)
    steps = sum(after["step"] - before["step"] for before, after in windows)
    items = sum(after[key] * (after["elapsed_s"] - before["elapsed_s"]) for before, after in windows)
    return {"items_name": key.removesuffix("_per_s"), "timed_steps": steps, "seconds": seconds,
            "steps_per_s": steps / seconds, "items_per_s": items / seconds, "items_per_step": items / steps}


# ---------------------------------------------------------------- communication volume
def model_volume(run: Path) -> dict:
    """Trainable parameters, gradient bytes per all-reduce and buffer bytes of the model RUN/config.json builds."""
    import torch

    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    with torch.device("meta"):  # shapes only
        model = _build(config)
    trainable = [p for p in model.parameters() if p.requires_grad]
    return {"trainable_parameters": sum(p.numel() for p in trainable),
            "gradient_bytes": sum(p.numel() * p.element_size() for p in trainable),
            "buffer_bytes": sum(b.numel() * b.element_size() for b in model.buffers())}


def _build(config: dict):
    document = {key: value for key, value in config.items() if key not in ("kind", "format_version")}
    if config["kind"] == "translation":
        from attnkit.translation.config import TranslationConfig, build_model

        return build_model(TranslationConfig.from_dict(document))
    from attnkit.detection.architectures import build_model
    from attnkit.detection.config import DetectionConfig

    return build_model(DetectionConfig.from_dict(document).model)


def ring_bytes(gradient_bytes: int, processes: int) -> float:
    """Bytes each process sends (and receives) in a ring all-reduce of GRADIENT_BYTES over PROCESSES."""
    return 2 * (processes - 1) / processes * gradient_bytes


def count_worker(out: Path, argv: list[str]) -> None:
    """A torchrun worker: run `attnkit ARGV` with every collective's bytes counted, write them to OUT.rank-R.json.

    Gradients: a DDP communication hook (PyTorch's `allreduce_hook`, which divides by the world size
    and all-reduces, as DDP does without a hook) adding each bucket's bytes. Buffers: DDP's broadcast
    before a forward. Scalars: the loop's own all-reduces and broadcasts (`attnkit.training.distributed`).
    """
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    from attnkit.app.cli import load_commands
    from attnkit.training import distributed

    counts = {"gradient_bytes": 0, "gradient_buckets": 0, "buffer_bytes": 0, "buffer_broadcasts": 0,
              "scalar_bytes": 0, "scalar_collectives": 0}
    calls = {"gradient": "gradient_buckets", "buffer": "buffer_broadcasts", "scalar": "scalar_collectives"}

    def add(kind: str, tensors) -> None:
        counts[f"{kind}_bytes"] += sum(t.numel() * t.element_size() for t in tensors)
        counts[calls[kind]] += 1

    def counting_hook(state, bucket):
        add("gradient", [bucket.buffer()])
        return allreduce_hook(state, bucket)

    def wrap(model):
        wrapped = original_wrap(model)
        if isinstance(wrapped, DistributedDataParallel):
            wrapped.register_comm_hook(None, counting_hook)
        return wrapped

    def broadcast_buffers(self, tensors, buffer_size, authoritative_rank=0):
        add("buffer", tensors)
        return original_broadcast(self, tensors, buffer_size, authoritative_rank)

    class CountingCollectives:  # torch.distributed as the loop sees it, its all_reduce and broadcast counted
        def __getattr__(self, name):
            return getattr(dist, name)

        def all_reduce(self, tensor, *args, **kwargs):
            add("scalar", [tensor])
            return dist.all_reduce(tensor, *args, **kwargs)

        def broadcast(self, tensor, *args, **kwargs):
            add("scalar", [tensor])
            return dist.broadcast(tensor, *args, **kwargs)

    original_wrap, original_broadcast = distributed.wrap, DistributedDataParallel._distributed_broadcast_coalesced
    distributed.wrap, distributed.dist = wrap, CountingCollectives()
    DistributedDataParallel._distributed_broadcast_coalesced = broadcast_buffers
    try:
        load_commands()(args=argv, prog_name="attnkit")
    finally:
        rank = os.environ.get("RANK", "0")
        Path(f"{out}.rank-{rank}.json").write_text(json.dumps(counts), encoding="utf-8")


def measured_volume(task: Task, out: Path, steps: int) -> dict:
    """Bytes per optimizer step of each kind, counted on rank 0 of a 2-process run of STEPS steps."""
    counts = out / "runs" / f"{task.name}-count"
    arguments = [str(Path(__file__).resolve()), COUNT_WORKER, str(counts),
                 *train_arguments(task, out / "runs" / f"{task.name}-count-run", steps)]
    for stale in counts.parent.glob(f"{counts.name}.rank-*.json"):
        stale.unlink()
    torchrun(arguments, 2, max(1, cores() // 2), out / "runs" / f"{task.name}-count.log")
    rank0 = json.loads(Path(f"{counts}.rank-0.json").read_text(encoding="utf-8"))
    return {key: value / steps for key, value in rank0.items()}


# ---------------------------------------------------------------- the benchmark
def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def per_process_batch(run: Path) -> str:
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    if config["kind"] == "translation":
        return f"{config['max_tokens']} tokens"
    return f"{config['train']['batch_size']} images"


def measure_task(task: Task, processes: list[int], steps: int, count_steps: int, out: Path) -> dict:
    rows = []
    for count in processes:
        threads = max(1, cores() // count)
        run = out / "runs" / f"{task.name}-{count}p"
        arguments = ["-m", "attnkit", *train_arguments(task, run, steps)]
        print(f"running: {shown(arguments, count, threads)}", flush=True)
        torchrun(arguments, count, threads, out / "runs" / f"{task.name}-{count}p.log")
        rows.append({"processes": count, "threads": threads, "command": shown(arguments, count, threads),
                     "per_process_batch": per_process_batch(run), **throughput(run)})
    volume = model_volume(out / "runs" / f"{task.name}-{processes[0]}p")
    base = next((row for row in rows if row["processes"] == 1), None)
    for row in rows:
        row["efficiency"] = row["items_per_s"] / base["items_per_s"] if base else None  # the same cores
        row["gradient_bytes"] = volume["gradient_bytes"] if row["processes"] > 1 else 0
        row["ring_bytes_per_process"] = ring_bytes(volume["gradient_bytes"], row["processes"])
    measured = measured_volume(task, out, count_steps) if count_steps else None
    return {"steps": steps, "model": volume, "measured_2_processes": measured, "rows": rows}


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def megabytes(value: float) -> str:
    return f"{value / 1e6:.2f} MB"


def task_table(name: str, result: dict, bandwidth_gbps: float) -> list[str]:
    volume, measured, rows = result["model"], result["measured_2_processes"], result["rows"]
    items = rows[0]["items_name"]
    lines = [f"### {name}: {volume['trainable_parameters'] / 1e6:.2f}M trainable parameters, {result['steps']} steps "
             f"per run (the first {10 * WARM_UP_RECORDS} not timed)", "",
             f"| processes | threads each | global batch | steps/s | {items}/s | {items}/step | scaling efficiency | "
             "gradient bytes all-reduced per step | ring all-reduce bytes sent per process per step |",
             "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        efficiency = "n/a" if row["efficiency"] is None else f"{row['efficiency']:.2f}"
        lines.append(f"| {row['processes']} | {row['threads']} | {row['processes']} x {row['per_process_batch']} | "
                     f"{row['steps_per_s']:.2f} | {_number(row['items_per_s'])} | {_number(row['items_per_step'])} | "
                     f"{efficiency} | {megabytes(row['gradient_bytes'])} | "
                     f"{megabytes(row['ring_bytes_per_process'])} |")
    lines.append("")
    if measured:
        lines.append(f"Measured (2 processes, DDP communication hook): {megabytes(measured['gradient_bytes'])} of "
                     f"gradients per step in {measured['gradient_buckets']:.0f} buckets (computed: "
                     f"{megabytes(volume['gradient_bytes'])}); DDP's buffer broadcast {measured['buffer_bytes']:,.0f} "
                     f"bytes per step (buffers: {volume['buffer_bytes']:,} bytes); the loop's scalar collectives "
                     f"{measured['scalar_bytes']:,.0f} bytes in {measured['scalar_collectives']:.1f} calls per step.")
    else:
        lines.append(f"Buffers broadcast by DDP before every forward: {volume['buffer_bytes']:,} bytes (not measured).")
    lines += ["", gpu_line(volume["gradient_bytes"], bandwidth_gbps), ""]
    return lines


def gpu_line(gradient_bytes: int, bandwidth_gbps: float) -> str:
    """The ring all-reduce's bandwidth term per step for a few GPU counts, at BANDWIDTH_GBPS per link."""
    times = ", ".join(f"{n} GPUs {1e3 * ring_bytes(gradient_bytes, n) * 8 / (bandwidth_gbps * 1e9):.2f} ms"
                      for n in (2, 8, 64))
    return (f"What to expect on GPUs: at {bandwidth_gbps:g} Gbit/s per process, the gradient all-reduce takes "
            f"{times} per optimizer step (ring, bandwidth term only; add latency per bucket). DDP overlaps it with "
            "the backward pass, so weak scaling stays near linear while a step's compute takes longer than that.")


def main() -> None:
    if sys.argv[1:2] == [COUNT_WORKER]:
        count_worker(Path(sys.argv[2]), sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks/scaling"))
    parser.add_argument("--tasks", nargs="+", default=["translation", "detection"],
                        choices=["translation", "detection"])
    parser.add_argument("--processes", nargs="+", type=int, default=[1, 2], help="process counts, 1 first")
    parser.add_argument("--steps", type=int, default=None,
                        help="optimizer steps per run, at least 20 (default: translation 250, detection 120)")
    parser.add_argument("--count-steps", type=int, default=3,
                        help="steps of the untimed 2-process run that counts bytes (0: compute only)")
    parser.add_argument("--translation-preset", default="tiny")
    parser.add_argument("--detection-preset", default="small", choices=["small", "tiny"])
    parser.add_argument("--bandwidth-gbps", type=float, default=100.0,
                        help="link bandwidth per process for the GPU estimate, Gbit/s (100 = 12.5 GB/s)")
    parser.add_argument("--quick", action="store_true", help="20 steps per run: check that the script runs")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    report = [f"## Data-parallel scaling: torchrun, gloo on CPU, {cores()} cores, torch {torch.__version__}", "",
              "Weak scaling: every process keeps the preset's batch; OMP_NUM_THREADS = cores / processes.", ""]
    results = {"cores": cores(), "torch": torch.__version__, "bandwidth_gbps": args.bandwidth_gbps, "tasks": {}}
    for name, task in tasks(args.translation_preset, args.detection_preset).items():
        if name not in args.tasks:
            continue
        steps = 20 if args.quick and args.steps is None else args.steps or task.steps
        result = measure_task(task, args.processes, steps, args.count_steps, args.out)
        results["tasks"][name] = result
        report += task_table(f"{name} ({' '.join(task.arguments[2:6])})", result, args.bandwidth_gbps)
    text = "\n".join(report)
    print("\n" + text)
    (args.out / "results.md").write_text(text + "\n", encoding="utf-8")
    (args.out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
