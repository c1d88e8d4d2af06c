"""Data at scale: start-up time, peak memory and steps/s of `attnkit train translation` against corpus size,
and of `attnkit train detection` against image-set size.

    python benchmarks/data_scale.py corpus /tmp/scale --pairs 100000 1000000 4000000
    python benchmarks/data_scale.py run /tmp/scale --pairs 100000 1000000 4000000 --steps 20
    python benchmarks/data_scale.py table /tmp/scale     # the table and plot again, from /tmp/scale/results.json
    python benchmarks/data_scale.py images /tmp/scale --images 1000 10000 118287
    python benchmarks/data_scale.py run /tmp/scale --images 1000 10000 118287    # results-images.json

`corpus` writes DIR/<pairs>/train.tsv + valid.tsv: synthetic pairs recombined from real English
sentences (vim's documentation, present on most Linux machines, else Python's own docstrings):
a source is a window of 4 to 40 words of a sentence, its target the same words through a fixed
word-for-word substitution, every third word pair swapped (so the model has something to learn).

`run` trains each corpus twice with `/usr/bin/time -v` (the peak resident memory): the first run
prepares the cache beside the data, the second finds it. Start-up is the time to the first
training step (see `timed_run`), steps/s the rate of the steps after it. Sizes run one after the
other; each size's second run follows its first.
It prints a JSON line per size (kept in DIR/results.json), then a table, and draws
docs/images/data_scale.png.

`images` writes DIR/images-<count>: the built-in `shapes` at 96 px (`attnkit data shapes`), COCO's
layout, up to COCO's 118,287 training images. `run --images` trains the `small` detector 20 steps on
each with `--skip-bad-images` (every image is decode-checked, the costliest start): the first run
builds the annotation index and the decode check's cache, the second finds them
(DIR/results-images.json, docs/images/data_scale_images.png).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # results are written here
TEXT_SOURCES = [Path("/usr/share/vim"), Path(sys.prefix) / "lib"]


def sentences(limit: int = 200_000) -> list[list[str]]:
    """Real English sentences (lists of words) from documentation text on this machine."""
    found: list[list[str]] = []
    for root in TEXT_SOURCES:
        for path in sorted(root.rglob("*.txt")):
            text = path.read_text(encoding="utf-8", errors="ignore")
            for sentence in re.split(r"(?<=[.!?])\s+", text):
                words = re.findall(r"[A-Za-z][A-Za-z'-]*|[0-9]+|[,;:]", sentence)
                if len(words) >= 4:
                    found.append(words)
            if len(found) >= limit:
                return found
    return found


def write_corpus(folder: Path, pairs: int, pool: list[list[str]], seed: int = 0) -> None:
    """train.tsv of PAIRS pairs and valid.tsv of 1000, recombined from POOL."""
    rng = random.Random(seed)
    vocabulary = sorted({word.lower() for words in pool for word in words})
    shuffled = vocabulary[:]
    rng.shuffle(shuffled)
    substitute = {word: other[::-1] + "en" for word, other in zip(vocabulary, shuffled)}
    folder.mkdir(parents=True, exist_ok=True)
    for name, count in (("train.tsv", pairs), ("valid.tsv", 1000)):
        with (folder / name).open("w", encoding="utf-8") as file:
            for _ in range(count):
                words = rng.choice(pool)
                start = rng.randrange(max(1, len(words) - 3))
                window = words[start:start + rng.randint(4, 40)]
                target = [substitute[w.lower()] for w in window]
                for i in range(0, len(target) - 1, 3):
                    target[i], target[i + 1] = target[i + 1], target[i]
                file.write(f"{' '.join(window)}\t{' '.join(target)}\n")


def translation_command(data: Path, out: Path, steps: int) -> list[str]:
    return ["train", "translation", "--data", str(data), "--out", str(out), "--steps", str(steps), "--preset", "tiny",
            "--set", "eval_sentences=20", "--set", "eval_every_minutes=1000", "--set", "max_tokens=1000"]


def detection_command(data: Path, out: Path, steps: int) -> list[str]:
    return ["train", "detection", "--data", str(data), "--out", str(out), "--steps", str(steps), "--preset", "small",
            "--device", "cpu", "--skip-bad-images"]


def timed_run(arguments: list[str]) -> dict[str, float]:
    """One `attnkit ARGUMENTS` under /usr/bin/time -v: start-up seconds, steps/s, peak RSS (GB).

    The log shows steps 10 and 20 (validation is off until the end), so the first step's time is
    step 10's less nine steps at the rate from step 10 to step 20. CPU seconds (the process's user
    + system time, read from /proc when step 10 is logged, less the same nine steps' share) show
    the work whatever else the machine is doing.
    """
    out = Path(arguments[arguments.index("--out") + 1])
    shutil.rmtree(out, ignore_errors=True)
    command = ["/usr/bin/time", "-v", sys.executable, "-m", "attnkit", *arguments]
    start = time.perf_counter()
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    marks: dict[int, tuple[float, float]] = {}  # step -> (wall seconds, CPU seconds)
    lines = []
    assert process.stderr is not None
    for line in process.stderr:
        lines.append(line)
        found = re.match(r"step (\d+)/", line)
        if found:
            marks[int(found.group(1))] = (time.perf_counter() - start, _cpu_seconds(process.pid))
    process.wait()
    log = "".join(lines)
    steps = int(arguments[arguments.index("--steps") + 1])
    if process.returncode != 0 or 10 not in marks or steps not in marks:
        raise SystemExit(f"attnkit {' '.join(arguments)} failed:\n{log[-3000:]}")
    (wall_10, cpu_10), (wall_end, cpu_end) = marks[10], marks[steps]
    step_wall, step_cpu = (wall_end - wall_10) / (steps - 10), (cpu_end - cpu_10) / (steps - 10)
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", log).group(1))
    return {"startup_s": wall_10 - 9 * step_wall, "startup_cpu_s": cpu_10 - 9 * step_cpu, "step_10_s": wall_10,
            "steps_per_s": 1 / step_wall, "peak_gb": peak_kb / 1e6, "wall_s": time.perf_counter() - start}


def _cpu_seconds(time_pid: int) -> float:
    """User + system seconds so far of the process that /usr/bin/time (TIME_PID) runs, threads included."""
    children = Path(f"/proc/{time_pid}/task/{time_pid}/children").read_text().split()
    if not children:
        return float("nan")
    fields = Path(f"/proc/{children[0]}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["corpus", "images", "run", "table"])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--pairs", type=int, nargs="+", default=[100_000, 1_000_000, 4_000_000])
    parser.add_argument("--images", type=int, nargs="*", help="image-set sizes (images; run, table: detection)")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    if args.what == "corpus":
        pool = sentences()
        print(f"{len(pool)} sentences", file=sys.stderr)
        for pairs in args.pairs:
            write_corpus(args.folder / str(pairs), pairs, pool)
            print(f"written {args.folder / str(pairs)}", file=sys.stderr)
        return
    if args.what == "images":
        for count in args.images:
            out = args.folder / f"images-{count}"
            subprocess.run([sys.executable, "-m", "attnkit", "data", "shapes", "--out", str(out), "--train-images",
                            str(count), "--val-images", "100", "--image-size", "96"], check=True)
        return
    images = args.images is not None
    name, unit = ("results-images.json", "images") if images else ("results.json", "pairs")
    plot_path = ROOT / ("docs/images/data_scale_images.png" if images else "docs/images/data_scale.png")
    if args.what == "table":
        results = json.loads((args.folder / name).read_text(encoding="utf-8"))
        print_table(results, unit)
        plot(results, plot_path, unit)
        return
    results = {}
    for size in args.images if images else args.pairs:
        data = args.folder / (f"images-{size}" if images else str(size))
        for cache in list(data.rglob(".attnkit-cache")):  # the first run builds them
            shutil.rmtree(cache)
        megabytes = sum(f.stat().st_size for f in data.rglob("*") if f.is_file()) / 1e6 if images else \
            (data / "train.tsv").stat().st_size / 1e6
        run = args.folder / f"run-{unit}-{size}"
        arguments = (detection_command if images else translation_command)(data, run, args.steps)
        first, second = timed_run(arguments), timed_run(arguments)
        results[size] = {"first": first, "second": second, "megabytes": megabytes}
        print(json.dumps({size: results[size]}), flush=True)
        (args.folder / name).write_text(json.dumps(results, indent=1), encoding="utf-8")
    print_table(results, unit)
    plot(results, plot_path, unit)


def print_table(results: dict, unit: str = "pairs") -> None:
    print(f"| {unit} | MB | first start: s (CPU s) | second start: s (CPU s) | peak GB first | peak GB second "
          "| second's peak vs the smallest | steps/s first | steps/s second |")
    print("|---|---|---|---|---|---|---|---|---|")
    smallest = results[min(results, key=int)].get("second", {}).get("peak_gb", float("nan"))
    nan = {"startup_s": float("nan"), "startup_cpu_s": float("nan"), "peak_gb": float("nan"),
           "steps_per_s": float("nan")}
    for pairs, r in results.items():
        f, s = r.get("first", nan), r.get("second", nan)
        print(f"| {int(pairs):,} | {r['megabytes']:.0f} | {f['startup_s']:.1f} ({f['startup_cpu_s']:.1f}) | "
              f"{s['startup_s']:.1f} ({s['startup_cpu_s']:.1f}) | {f['peak_gb']:.2f} | {s['peak_gb']:.2f} | "
              f"{100 * (s['peak_gb'] / smallest - 1):+.0f}% | {f['steps_per_s']:.2f} | {s['steps_per_s']:.2f} |")


def plot(results: dict, path: Path, unit: str = "pairs") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(n) for n in results]
    results = {int(n): r for n, r in results.items()}
    figure, axes = plt.subplots(1, 3, figsize=(12, 3.5), constrained_layout=True)
    for axis, key, label in zip(axes, ("startup_s", "peak_gb", "steps_per_s"),
                                ("time to the first step (s)", "peak memory (GB)", "steps/s")):
        for run, style in (("first", "o-"), ("second", "s--")):
            axis.plot(sizes, [results[n].get(run, {}).get(key, float("nan")) for n in sizes], style,
                      label=f"{run} run")
        axis.set_xscale("log")
        axis.set_ylim(bottom=0)
        axis.set_xlabel(f"training {unit}")
        axis.set_title(label)
        axis.grid(alpha=0.3)
    axes[0].legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
