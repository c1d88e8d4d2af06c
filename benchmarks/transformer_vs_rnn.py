"""The Transformer against the RNN baseline (Bahdanau et al. 2015) at matched parameter counts, in one run.

    python benchmarks/transformer_vs_rnn.py --out transformer_vs_rnn.png     # the full run: about 40 minutes on a CPU
    python benchmarks/transformer_vs_rnn.py --out /tmp/quick.png --quick     # a smoke run (1 thread): under 2 minutes

The source article claims that self-attention computes all positions in parallel where an RNN goes
step by step (so the Transformer trains and infers faster, and "makes very long inputs possible"),
and that it loses local information that RNNs keep. Measured here, for the same preset (`--preset`,
default tiny) built both ways (`--arch transformer` and `--arch rnn`, the RNN's hidden size chosen
to match the Transformer's parameter count):

  1. training throughput (tokens/s) and time per epoch on numbers:de, through the project's Trainer;
  2. greedy decoding latency against output length (16 to 512 tokens), batch 1 and 32, cached decoding;
  3. forward+backward time and peak memory against input length (64 to 4096), of the encoder alone
     (self-attention layers against the bidirectional GRU) and of the whole model (target as long as the
     source), each point in a fresh process; on the GPU when there is one (`--device`);
  4. quality after the same training time: exact match and BLEU on numbers:de, and on a probe where
     order matters locally: reversing strings of 3 to 8 digits.

Prints markdown tables and a conclusion drawn from the numbers, saves the plot to `--out` and every
number to the same path with `.json`. Items 1 and 4 use the same code as `attnkit train translation`
(prepare, TranslationTask, Trainer, Translator, score); nothing is trained or decoded differently.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from attnkit.app.translation.recipe import resolve_amp
from attnkit.translation.config import TranslationConfig, build_model, preset, with_architecture
from attnkit.translation.data import Corpus, ReadReport, SentencePair
from attnkit.translation.decoding import greedy_decode
from attnkit.translation.tokenizer import EOS_ID, PAD_ID

ARCHS = ("transformer", "rnn")
DECODE_LENGTHS = [16, 32, 64, 128, 256, 512]
INPUT_LENGTHS = [64, 128, 256, 512, 1024, 2048, 4096]
PARTS = ("encoder", "model")
SOURCE_LENGTH = 16  # source tokens when timing decoding


# ---------------------------------------------------------------- setup
def matched_configs(preset_name: str, amp: str) -> dict[str, TranslationConfig]:
    """The preset as a Transformer, and as the RNN with the same embedding size and parameter count."""
    base = dataclasses.replace(preset(preset_name), amp=amp)
    return {arch: with_architecture(base, arch) for arch in ARCHS}


def reversal_splits(seed: int = 0, sizes: tuple[int, int, int] = (6000, 300, 500)) -> dict[str, Corpus]:
    """The local-order probe: "4 7 1 9" -> "9 1 7 4", 3 to 8 digits, disjoint train / valid / test strings."""
    rng = random.Random(seed)
    strings: set[str] = set()
    while len(strings) < sum(sizes):
        strings.add(" ".join(rng.choice("0123456789") for _ in range(rng.randint(3, 8))))
    ordered = sorted(strings)
    rng.shuffle(ordered)
    splits, start = {}, 0
    for split, size in zip(("train", "valid", "test"), sizes):
        pairs = [SentencePair(s, " ".join(reversed(s.split()))) for s in ordered[start:start + size]]
        splits[split] = Corpus(pairs, ReadReport(f"reverse {split}", pairs=len(pairs)))
        start += size
    return splits


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


# ---------------------------------------------------------------- 1 and 4: training, then quality
def train_and_score(config: TranslationConfig, splits: dict[str, Corpus], minutes: float, folder: Path,
                    device: torch.device, test_sentences: int, beam_size: int) -> dict[str, Any]:
    """Train for `minutes` as `attnkit train translation` does (no validation before the end), then score the
    test split; throughput from the run's metrics.jsonl."""
    from attnkit.app.translation.recipe import train_run
    from attnkit.training import Budget
    from attnkit.translation.batching import make_examples
    from attnkit.translation.evaluate import score
    from attnkit.translation.translator import Translator

    config = dataclasses.replace(config, eval_every_minutes=100 * minutes)  # evaluate and checkpoint only at the end
    run = train_run(config, splits, folder, Budget(minutes=minutes), device, progress=False)
    metrics = [record for record in run.metrics() if record.get("split") == "train"]
    tokens, seconds = _trained_tokens(metrics)
    translator = Translator.from_run(run.path, weights="last", device=device)
    train = splits["train"].pairs
    examples, _ = make_examples(translator.tokenizer.encode_source([p.source for p in train]),
                                translator.tokenizer.encode_target([p.target for p in train]), config.max_length)
    epoch_tokens = sum(len(e.source) + len(e.target) + 1 for e in examples)
    test = splits["test"].pairs[:test_sentences]
    started = time.perf_counter()
    hypotheses = translator.translate([p.source for p in test], beam_size=beam_size)
    scores = score(hypotheses, [p.target for p in test])
    model = translator.config.model
    return {"parameters": parameter_count(translator.model), "steps": metrics[-1]["step"], "train_seconds": seconds,
            "tokens_per_s": tokens / seconds, "epoch_seconds": epoch_tokens / (tokens / seconds),
            "epochs": tokens / epoch_tokens, "train_loss": metrics[-1]["loss"], "exact_match": scores.exact_match,
            "bleu": scores.bleu, "chrf": scores.chrf, "test_sentences": len(test),
            "translate_seconds": time.perf_counter() - started,
            "example": f"{test[0].source} -> {hypotheses[0][:40]} (reference: {test[0].target})",
            "vocab_sizes": [model.source_vocab_size, model.target_vocab_size]}


def _trained_tokens(train_records: list[dict[str, Any]]) -> tuple[float, float]:
    """(tokens trained on, seconds of training) from the Trainer's train records (tokens/s over each window)."""
    tokens, previous = 0.0, 0.0
    for record in train_records:
        tokens += record["tokens_per_s"] * (record["elapsed_s"] - previous)
        previous = record["elapsed_s"]
    return tokens, max(previous, 1e-9)


# ---------------------------------------------------------------- 2: decoding latency
class ExactLength:
    """Decodes to the length limit: </s> is pushed far down until the limit forces it (latency, not quality)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def encode(self, source, source_padding_mask):
        return self.model.encode(source, source_padding_mask)

    def start_cache(self, encoded):
        return self.model.start_cache(encoded)

    def decode_step(self, prefix, encoded, cache):
        logits = self.model.decode_step(prefix, encoded, cache)  # (batch, vocab)
        logits[:, EOS_ID] -= 1e4
        return logits


def decoding_latency(config: TranslationConfig, device: torch.device, lengths: list[int], batches: list[int],
                     repeats: int) -> list[dict[str, Any]]:
    torch.manual_seed(0)
    model = ExactLength(build_model(config).to(device).eval())
    vocab = config.model.source_vocab_size
    rows = []
    for batch in batches:
        source = torch.randint(4, vocab, (batch, SOURCE_LENGTH), device=device)
        source[:, -1] = EOS_ID
        for length in lengths:
            times = []
            for _ in range(repeats + 1):  # the first is a warm-up
                sync(device)
                started = time.perf_counter()
                out = greedy_decode(model, source, use_cache=True, extra_length=length - SOURCE_LENGTH)
                sync(device)
                times.append(time.perf_counter() - started)
            assert len(out[0]) == length - 1, "decoding stopped before the length limit"  # + </s> = length
            rows.append({"batch": batch, "length": length, "ms": 1000 * statistics.median(times[1:]),
                         "ms_per_token": 1000 * statistics.median(times[1:]) / length})
    return rows


# ---------------------------------------------------------------- 3: time and memory against input length
def length_point(config: TranslationConfig, part: str, length: int, batch: int, device: torch.device,
                 repeats: int) -> dict[str, float]:
    """In this (fresh) process: peak memory of one forward+backward, then its median time."""
    torch.manual_seed(0)
    model = build_model(config).to(device).train()
    vocab = config.model.source_vocab_size
    precision = resolve_amp(config.amp, device)  # what training uses here: bf16 on CUDA and bf16-capable CPUs
    amp = torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16,
                         enabled=precision != "off")

    def step(length: int) -> None:
        source = torch.randint(4, vocab, (batch, length), device=device)  # (batch, length), no padding
        with amp:
            if part == "encoder":
                encoded = model.encode(source, source == PAD_ID)
                output = encoded.memory if hasattr(encoded, "memory") else encoded.states  # (batch, length, width)
                loss = output.float().square().mean()
            else:
                logits = model(source, source)  # a target as long as the source: (batch, length, vocab)
                loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), source.flatten())
        loss.backward()
        model.zero_grad(set_to_none=True)

    step(8)  # warm-up: allocator, kernels, thread pool
    memory = _peak_memory_mib(step, length, device)
    times = []
    for _ in range(repeats):
        sync(device)
        started = time.perf_counter()
        step(length)
        sync(device)
        times.append(time.perf_counter() - started)
    return {"ms": 1000 * statistics.median(times), "peak_mib": memory}


def _peak_memory_mib(step, length: int, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step(length)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    before = _high_water_mark_kib()
    step(length)
    return (_high_water_mark_kib() - before) / 1024


def _high_water_mark_kib() -> int:
    """This process's peak resident memory (VmHWM)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


def _available_mib(device: torch.device) -> float:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info()
        return free / 2**20
    with open("/proc/meminfo") as info:
        return next(int(line.split()[1]) for line in info if line.startswith("MemAvailable:")) / 1024


def length_sweep(configs: dict[str, TranslationConfig], args, device: torch.device,
                 folder: Path) -> list[dict[str, Any]]:
    """Every (part, arch, length) in a fresh process, shortest first; a length whose predicted cost (4x the last
    point's: quadratic) is over the limits is skipped, and so are the longer ones."""
    rows, memory_limit = [], args.memory_fraction * _available_mib(device)
    for part in PARTS:
        for arch in ARCHS:
            config_file = folder / f"{arch}.json"
            config_file.write_text(json.dumps(configs[arch].to_dict()))
            last = None
            for length in args.input_lengths:
                if last is not None and (4 * last["ms"] * (args.repeats + 2) / 1000 > args.max_point_seconds
                                         or 4 * last["peak_mib"] > memory_limit):
                    rows.append({"part": part, "arch": arch, "length": length, "skipped": "predicted over the limits"})
                    continue
                command = [sys.executable, __file__, "--point", part, str(length), str(config_file),
                           "--device", str(device), "--repeats", str(args.repeats), "--length-batch",
                           str(args.length_batch), "--threads", str(torch.get_num_threads())]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode != 0:
                    reason = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
                    rows.append({"part": part, "arch": arch, "length": length, "skipped": f"failed: {reason[:80]}"})
                    last = {"ms": float("inf"), "peak_mib": float("inf")}
                    continue
                last = json.loads(done.stdout.strip().splitlines()[-1])
                rows.append({"part": part, "arch": arch, "length": length, **last})
                print(f"  {part} {arch} length {length}: {last['ms']:.1f} ms, {last['peak_mib']:.0f} MiB", flush=True)
    return rows


# ---------------------------------------------------------------- report
def crossover(rows: list[dict[str, Any]], part: str) -> str:
    """Where the Transformer's forward+backward becomes slower than the RNN's, in words."""
    times = {(r["arch"], r["length"]): r["ms"] for r in rows if r["part"] == part and "ms" in r}
    lengths = sorted({length for arch, length in times
                      if (("rnn", length) in times and ("transformer", length) in times)})
    if not lengths:
        return "not measured at any common length"
    measured = f"at {lengths[0]}" if len(lengths) == 1 else f"at every length measured ({lengths[0]} to {lengths[-1]})"
    slower = [length for length in lengths if times[("transformer", length)] > times[("rnn", length)]]
    if not slower:
        return f"the Transformer is faster {measured}"
    if len(slower) == len(lengths):
        return f"the RNN is faster {measured}"
    return (f"the Transformer is slower at {', '.join(map(str, slower))} and faster at "
            f"{', '.join(str(x) for x in lengths if x not in slower)}")


def longest_input(rows: list[dict[str, Any]], part: str) -> str:
    """The longest input each architecture ran within the time and memory limits, and its peak memory."""
    found = []
    for arch in ARCHS:
        done = [r for r in rows if r["part"] == part and r["arch"] == arch and "ms" in r]
        if done:
            last = max(done, key=lambda r: r["length"])
            found.append(f"{arch} {last['length']} tokens ({last['ms'] / 1000:.2f} s, {last['peak_mib']:.0f} MiB)")
    return ", ".join(found) or "none"


def print_tables(results: dict[str, Any]) -> None:
    setup = results["setup"]
    print(f"\n## Transformer vs RNN ({setup['preset']} preset, {setup['device']}, {setup['threads']} threads, "
          f"autocast {setup['training_precision']} in training and item 3, fp32 decoding)\n")
    print("| arch | parameters | config |\n|---|---:|---|")
    for arch in ARCHS:
        print(f"| {arch} | {setup['parameters'][arch]:,} | {setup['models'][arch]} |")
    for task, rows in results.get("quality", {}).items():
        print(f"\n### 1 and 4: training for {setup['minutes']} min on {task}, then the test split "
              f"(beam {setup['beam_size']})\n")
        print("| arch | tokens/s | s/epoch | epochs | steps | train loss | exact match % | BLEU | chrF | example |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for arch, r in rows.items():
            print(f"| {arch} | {r['tokens_per_s']:,.0f} | {r['epoch_seconds']:.1f} | {r['epochs']:.2f} "
                  f"| {r['steps']} | {r['train_loss']:.3f} | {r['exact_match']:.1f} | {r['bleu']:.1f} "
                  f"| {r['chrf']:.1f} | {r['example']} |")
    if results.get("decoding"):
        print(f"\n### 2: greedy decoding latency (ms), {SOURCE_LENGTH}-token source, cached\n")
        print("| batch | output length | transformer ms | rnn ms | transformer / rnn |\n|---:|---:|---:|---:|---:|")
        by_key = {(arch, r["batch"], r["length"]): r["ms"] for arch, rows in results["decoding"].items() for r in rows}
        for batch, length in sorted({(b, n) for _, b, n in by_key}):
            t, r = by_key[("transformer", batch, length)], by_key[("rnn", batch, length)]
            print(f"| {batch} | {length} | {t:.1f} | {r:.1f} | {t / r:.2f} |")
    if results.get("lengths"):
        print(f"\n### 3: forward+backward against input length, batch {setup['length_batch']}\n")
        print("| part | length | transformer ms | rnn ms | transformer MiB | rnn MiB |\n|---|---:|---:|---:|---:|---:|")
        cells = {(r["part"], r["arch"], r["length"]): r for r in results["lengths"]}
        for part, length in sorted({(p, n) for p, _, n in cells}, key=lambda k: (PARTS.index(k[0]), k[1])):
            t, r = cells.get((part, "transformer", length), {}), cells.get((part, "rnn", length), {})
            print(f"| {part} | {length} | {_cell(t, 'ms')} | {_cell(r, 'ms')} | {_cell(t, 'peak_mib')} "
                  f"| {_cell(r, 'peak_mib')} |")
    print("\n### Conclusion (computed from the numbers above)\n")
    for line in conclusion(results):
        print(f"- {line}")


def _cell(row: dict[str, Any], key: str) -> str:
    if key in row:
        return f"{row[key]:.1f}" if key == "ms" else f"{row[key]:.0f}"
    return "skipped" if "skipped" in row else "-"


def conclusion(results: dict[str, Any]) -> list[str]:
    lines = []
    numbers = results.get("quality", {}).get("numbers:de")
    if numbers:
        t, r = numbers["transformer"], numbers["rnn"]
        lines.append(f"Training speed: the Transformer trains {t['tokens_per_s'] / r['tokens_per_s']:.2f}x the RNN's "
                     f"tokens/s ({t['tokens_per_s']:,.0f} vs {r['tokens_per_s']:,.0f}; "
                     f"{t['epoch_seconds']:.1f} s vs {r['epoch_seconds']:.1f} s per epoch).")
    decoding = results.get("decoding")
    if decoding:
        longest = max(row["length"] for row in decoding["rnn"])
        for batch in sorted({row["batch"] for row in decoding["rnn"]}):
            t = next(x["ms"] for x in decoding["transformer"] if x["batch"] == batch and x["length"] == longest)
            r = next(x["ms"] for x in decoding["rnn"] if x["batch"] == batch and x["length"] == longest)
            lines.append(f"Decoding {longest} tokens greedily, batch {batch}: Transformer {t:.0f} ms, RNN {r:.0f} ms "
                         f"({'Transformer' if t < r else 'RNN'} faster by {max(t, r) / min(t, r):.2f}x).")
    if results.get("lengths"):
        for part in PARTS:
            lines.append(f"Forward+backward of the {part} against input length: {crossover(results['lengths'], part)}; "
                         f"longest input run within the limits: {longest_input(results['lengths'], part)}.")
    for task, rows in results.get("quality", {}).items():
        t, r = rows["transformer"], rows["rnn"]
        lines.append(f"Quality on {task} after the same training time: exact match {t['exact_match']:.1f}% "
                     f"(Transformer) vs {r['exact_match']:.1f}% (RNN), BLEU {t['bleu']:.1f} vs {r['bleu']:.1f}.")
    return lines


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 9), dpi=110)
    colours = {"transformer": "tab:blue", "rnn": "tab:orange"}
    ax = axes[0, 0]
    for arch, rows in results.get("decoding", {}).items():
        for batch, style in zip(sorted({r["batch"] for r in rows}), ("-", "--")):
            points = [(r["length"], r["ms"]) for r in rows if r["batch"] == batch]
            ax.plot(*zip(*points), style, marker="o", color=colours[arch], label=f"{arch}, batch {batch}")
    _axes(ax, "2: greedy decoding latency", "output length (tokens)", "ms")
    for ax, key, title in ((axes[0, 1], "ms", "3: forward+backward time"), (axes[1, 0], "peak_mib", "3: peak memory")):
        for part, style in zip(PARTS, ("--", "-")):
            for arch in ARCHS:
                points = [(r["length"], r[key]) for r in results.get("lengths", []) if r["part"] == part
                          and r["arch"] == arch and key in r]
                if points:
                    ax.plot(*zip(*points), style, marker="o", color=colours[arch], label=f"{arch} {part}")
        _axes(ax, title, "input length (tokens)", "ms" if key == "ms" else "MiB")
    ax = axes[1, 1]
    quality = results.get("quality", {})
    labels = [f"{task}\n{metric}" for task in quality for metric in ("exact match %", "BLEU")]
    for offset, arch in zip((-0.2, 0.2), ARCHS):
        values = [rows[arch][key] for rows in quality.values() for key in ("exact_match", "bleu")]
        ax.bar([i + offset for i in range(len(values))], values, width=0.4, color=colours[arch], label=arch)
    ax.set_xticks(range(len(labels)), labels=labels, fontsize=8)
    ax.set_title(f"4: quality after {results['setup']['minutes']} min of training")
    ax.legend(fontsize=8)
    fig.suptitle(f"Transformer vs RNN (Bahdanau) at matched parameters: {results['setup']['preset']} preset, "
                 f"{results['setup']['device']}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _axes(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


# ---------------------------------------------------------------- main
def run_all(args) -> dict[str, Any]:
    from attnkit.translation.data import load_splits

    device = torch.device(args.device)
    configs = matched_configs(args.preset, args.amp)
    data = {"numbers:de": load_splits("numbers:de", needed=("train", "valid", "test")), "reverse": reversal_splits()}
    results: dict[str, Any] = {"setup": {"preset": args.preset, "device": str(device),
                                         "threads": torch.get_num_threads(),
                                         "minutes": args.minutes, "beam_size": args.beam_size,
                                         "length_batch": args.length_batch, "quick": args.quick,
                                         "training_precision": resolve_amp(configs["transformer"].amp, device)},
               "quality": {}}
    with tempfile.TemporaryDirectory(prefix="transformer_vs_rnn-") as temporary:
        folder = Path(temporary)
        for task, splits in data.items():
            _section(f"1 and 4: training each architecture for {args.minutes} min on {task}")
            results["quality"][task] = {
                arch: train_and_score(dataclasses.replace(configs[arch], eval_sentences=args.eval_sentences), splits,
                                      args.minutes, folder / f"{task.replace(':', '_')}-{arch}", device,
                                      args.test_sentences, args.beam_size)
                for arch in ARCHS}
        configs = {arch: _with_vocab(config, results["quality"]["numbers:de"][arch]["vocab_sizes"])
                   for arch, config in configs.items()}
        results["setup"]["parameters"] = {arch: parameter_count(build_model(c)) for arch, c in configs.items()}
        results["setup"]["models"] = {arch: _describe(c) for arch, c in configs.items()}
        _section("2: decoding latency")
        results["decoding"] = {arch: decoding_latency(configs[arch], device, args.decode_lengths, args.decode_batches,
                                                      args.repeats) for arch in ARCHS}
        _section("3: forward+backward against input length")
        results["lengths"] = length_sweep(configs, args, device, folder)
        _section("done")
    return results


_STARTED = time.perf_counter()


def _section(title: str) -> None:
    print(f"== [{time.perf_counter() - _STARTED:.0f} s] {title}", flush=True)


def _with_vocab(config: TranslationConfig, sizes: list[int]) -> TranslationConfig:
    model = dataclasses.replace(config.model, source_vocab_size=sizes[0], target_vocab_size=sizes[1])
    return dataclasses.replace(config, model=model)


def _describe(config: TranslationConfig) -> str:
    fields = {k: v for k, v in dataclasses.asdict(config.model).items() if not k.endswith("vocab_size")}
    return ", ".join(f"{k} {v}" for k, v in fields.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=False, help="the plot (PNG); the numbers go beside it as .json")
    parser.add_argument("--quick", action="store_true", help="a smoke run: short training, few lengths, one repeat")
    parser.add_argument("--preset", default="tiny", help="the Transformer preset both architectures are sized by")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--amp", default="auto", choices=["auto", "off", "bf16"],
                        help="autocast in training and item 3 (auto: bf16 on CUDA and bf16-capable CPUs, as training)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's; 1 with "
                                                                   "--quick, which only checks that everything runs)")
    parser.add_argument("--minutes", type=float, default=None,
                        help="training time per architecture and task (default 5)")
    parser.add_argument("--beam-size", type=int, default=None, help="beam for the test translations (default 4)")
    parser.add_argument("--test-sentences", type=int, default=None, help="test sentences scored (default 500)")
    parser.add_argument("--eval-sentences", type=int, default=None, help="validation sentences at the end of training")
    parser.add_argument("--decode-lengths", type=int, nargs="+", default=None)
    parser.add_argument("--decode-batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--input-lengths", type=int, nargs="+", default=None)
    parser.add_argument("--length-batch", type=int, default=1, help="sentences per forward+backward in item 3")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per point (median; default 3)")
    parser.add_argument("--max-point-seconds", type=float, default=None, help="skip a length predicted to take longer")
    parser.add_argument("--memory-fraction", type=float, default=0.5, help="skip a length predicted to need more of "
                                                                           "the free memory than this")
    parser.add_argument("--point", nargs=3, metavar=("PART", "LENGTH", "CONFIG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.point:
        torch.set_num_threads(args.threads)
        part, length, config_file = args.point
        config = TranslationConfig.from_dict(json.loads(Path(config_file).read_text()))
        print(json.dumps(length_point(config, part, int(length), args.length_batch, torch.device(args.device),
                                      args.repeats)))
        return
    if args.out is None:
        parser.error("--out is required")
    quick = {"minutes": 0.05, "beam_size": 1, "test_sentences": 50, "eval_sentences": 10, "decode_lengths": [16, 32],
             "input_lengths": [64], "repeats": 1, "max_point_seconds": 20.0, "threads": 1}
    full = {"minutes": 5.0, "beam_size": 4, "test_sentences": 500, "eval_sentences": 200,
            "decode_lengths": DECODE_LENGTHS, "input_lengths": INPUT_LENGTHS, "repeats": 3, "max_point_seconds": 300.0}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    results = run_all(args)
    results["setup"]["seconds"] = time.perf_counter() - started
    print_tables(results)
    plot(results, args.out)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    print(f"\nplot: {args.out}; numbers: {args.out.with_suffix('.json')}; {results['setup']['seconds']:.0f} s in all")


if __name__ == "__main__":
    main()
