"""Fine-tuning on small data: a pre-trained start against training from scratch, at equal steps.

    python benchmarks/fine_tuning.py --task detection --sizes 200 --steps 100 --eval-every 50
    python benchmarks/fine_tuning.py --task detection --sizes 100 --arms scratch recipe   # the check
    python benchmarks/fine_tuning.py --task translation --sizes 300 1000 --steps 300
    python benchmarks/fine_tuning.py --task detection --quick     # a check of the script: seconds per run

Detection: the default detector (`fast`, the `small` preset, 96 px) is pre-trained on `shapes` (5
filled shape classes; the stand-in for COCO pre-training, since no checkpoint can be downloaded
here), then trained on the first N training images of `marks` (4 other classes: rings, crosses,
bars, dots; written by benchmarks/detector_convergence.py), once from scratch and once per
fine-tuning arm, each through `attnkit train detection`'s own pieces (`resolve_config`, so the
defaults that `--init` brings apply, and `--set` overrides them). AP on marks' val split.

Translation: the `tiny` Transformer is pre-trained on `numbers:fr` (English number words ->
French, 1..9999), then trained on N pairs of another domain, five-digit numbers (10000..99999,
"twelve thousand three hundred" -> "douze mille trois cents"); validation and test are other
five-digit numbers. From scratch the run trains its own tokenizer on its N pairs; with --init it
keeps the pre-trained one (the vocabulary must be shared). BLEU, chrF and exact match of greedy
translations of the test split.

Equal compute: every arm has the same architecture and batch, so equal optimizer steps are
equal compute (on this shared machine minutes are not comparable from one run to the next); an arm
with a frozen backbone computes fewer gradients, so its step time is measured against the full
step's, alternating in one process (`--time-steps`), and its budget given in full-step equivalents.
Pre-training is a cost paid once (as COCO pre-training is) and is not counted in the budgets.

Prints a table per size, writes OUT/<task>.json, OUT/<task>_curves.png and OUT/<task>.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

# detection arms: --set assignments over the config `attnkit train detection` resolves; None: from scratch
DETECTION_ARMS: dict[str, list[str] | None] = {
    "scratch": None,
    "same-lr": ["train.lr_backbone=3e-4", "model.frozen_batchnorm=false"],  # the small preset's: --init's default
    "backbone-lr/10": ["train.lr_backbone=3e-5", "model.frozen_batchnorm=false"],
    "frozen-bn": ["train.lr_backbone=3e-5", "model.frozen_batchnorm=true"],  # DETR's: stem and layer1 frozen too
    "frozen-backbone": ["train.lr_backbone=0", "model.frozen_batchnorm=true"],
    "recipe": [],  # whatever --init does by default
}
TRANSLATION_ARMS: dict[str, list[str] | None] = {
    "scratch": None,
    "warmup-400": ["warmup_steps=400", "lr_scale=1.0"],  # the tiny preset's schedule restarted: --init's default
    "warmup-50": ["warmup_steps=50", "lr_scale=1.0"],
    "warmup-50-lr/4": ["warmup_steps=50", "lr_scale=0.25"],  # about the rate pre-training ended at
    "recipe": [],
}


def _convergence_benchmark():
    """benchmarks/detector_convergence.py, for `write_marks`."""
    spec = importlib.util.spec_from_file_location("detector_convergence", Path(__file__).with_name(
        "detector_convergence.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------- detection

def pretrain_detection(out: Path, pair: str, steps: int, val_images: int) -> Path:
    """The pre-training run on the pair's first dataset (as `attnkit train detection --steps STEPS`), once."""
    from attnkit.app.detection.recipe import DetectionRequest, train
    from attnkit.detection.shapes import ShapesConfig
    from attnkit.training import Budget

    if (out / "weights" / "last.safetensors").is_file():
        return out
    if pair == "shapes-marks":
        data = "shapes"
    else:  # 1000 marks images of another seed than the fine-tuning subsets'
        data = str(_convergence_benchmark().write_marks(out.parent / "marks_pretrain", 1000, val_images, seed=1))
    train(DetectionRequest(out, Budget(steps=steps), data, shapes=ShapesConfig(val_images=val_images),
                           eval_every_minutes=1e4, progress=False))
    return out


def fine_tuning_data(out: Path, pair: str, size: int, val_images: int) -> tuple[str, Any, Path]:
    """The pair's second dataset with SIZE training images: (name for --data, ShapesConfig, root)."""
    from attnkit.detection.shapes import ShapesConfig

    if pair == "shapes-marks":
        folder = _convergence_benchmark().write_marks(out / f"marks_{size}", size, val_images)
        return str(folder), ShapesConfig(), folder
    return "shapes", ShapesConfig(train_images=size, val_images=val_images, seed=1), out / f"shapes_{size}"


def detection_arm(run: Path, data: tuple[str, Any, Path], init: Path | None, assignments: list[str], steps: int,
                  eval_every: int, ema: float | None) -> list[dict[str, float]]:
    """Train one arm for STEPS steps on DATA ((name, ShapesConfig, root)), validating every EVAL_EVERY steps."""
    from attnkit.app.detection.recipe import DetectionRequest, DetectionTask, loop_config, resolve_config
    from attnkit.app.interop.finetune import init_weights
    from attnkit.detection.architectures import build_model
    from attnkit.detection.sources import open_split, split_paths
    from attnkit.detection.transforms import eval_transforms, train_transforms
    from attnkit.storage import RunFolder
    from attnkit.training import Budget, Trainer

    name, shapes, root = data
    sets = tuple(assignments) + ((f"train.ema_decay={ema}",) if ema else ())
    request = DetectionRequest(run, Budget(steps=steps), name, "small", sets, shapes=shapes, init=init,
                               progress=False)
    config = resolve_config(request, init)
    start = None
    if init is not None:
        with torch.device("meta"):
            start = init_weights(build_model(config.model), init)
    t = config.train
    train_set = open_split(split_paths(name, "train", root, shapes),
                           train_transforms(t.train_scales, t.max_size, t.flip, t.crop_min_fraction),
                           for_evaluation=False)
    val_set = open_split(split_paths(name, "val", root, shapes), eval_transforms(t.val_size, t.max_size))
    folder = RunFolder.create(run, "detection", config.to_dict())
    task = DetectionTask(config, train_set, val_set, init=start.tensors if start is not None else None)
    loop = replace(loop_config(config, torch.device("cpu")), eval_every_steps=eval_every, eval_every_minutes=None,
                   checkpoint_every_minutes=None, checkpoint_every_steps=steps, average_last=0)
    Trainer(task, folder, Budget(steps=steps), loop, progress=False).fit()
    return _validations(folder.path)


def detection_step_times(init: Path, data: tuple[str, Any, Path], arms: dict[str, list[str]],
                         repeats: int) -> dict[str, float]:
    """Median seconds per training step of each arm's model, alternating arms step by step in this process."""
    from attnkit.app.detection.recipe import DetectionRequest, DetectionTask, load_batch, resolve_config
    from attnkit.detection.sources import open_split, split_paths
    from attnkit.detection.transforms import train_transforms
    from attnkit.training import Budget

    name, shapes, root = data
    tasks = {}
    for arm, assignments in arms.items():
        request = DetectionRequest(root / "timing", Budget(steps=1), name, "small", tuple(assignments),
                                   shapes=shapes, init=init, progress=False)
        config = resolve_config(request, init)
        t = config.train
        dataset = open_split(split_paths(name, "train", root, shapes),
                             train_transforms(t.train_scales, t.max_size, t.flip, t.crop_min_fraction),
                             for_evaluation=False)
        tasks[arm] = (DetectionTask(config, dataset, None), dataset)
    times: dict[str, list[float]] = {arm: [] for arm in tasks}
    for index in range(repeats + 1):
        for arm, (task, dataset) in tasks.items():
            refs = task.batches(0)
            batch = load_batch(dataset, refs[index % len(refs)])
            task.model.train()
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = task.train_step(task.model, batch)["loss"]
            loss.backward()
            task.optimizer.step()
            task.optimizer.zero_grad(set_to_none=True)
            if index:  # the first step of each warms up
                times[arm].append(time.perf_counter() - start)
    return {arm: statistics.median(values) for arm, values in times.items()}


# -------------------------------------------------------------------------------------------- translation

def five_digit_domain(out: Path, train_pairs: int, valid: int = 200, test: int = 300, seed: int = 0) -> Path:
    """train.tsv, valid.tsv, test.tsv of five-digit numbers (English words -> French words), disjoint."""
    from num2words import num2words

    from attnkit.translation.data import SentencePair, write_tsv

    numbers = list(range(10_000, 100_000))
    random.Random(seed).shuffle(numbers)
    cut = {"test": numbers[:test], "valid": numbers[test:test + valid],
           "train": numbers[test + valid:test + valid + train_pairs]}
    out.mkdir(parents=True, exist_ok=True)
    for split, chosen in cut.items():
        write_tsv([SentencePair(num2words(n, lang="en"), num2words(n, lang="fr")) for n in chosen],
                  out / f"{split}.tsv")
    return out


def pretrain_translation(out: Path, steps: int) -> Path:
    """The `numbers:fr` pre-training run (`attnkit train translation --data numbers:fr --preset tiny`), once."""
    from attnkit.app.translation.recipe import TranslationRequest, train
    from attnkit.training import Budget

    if (out / "weights" / "last.safetensors").is_file():
        return out
    train(TranslationRequest(out, Budget(steps=steps), "numbers:fr", preset="tiny",
                             assignments=("eval_every_minutes=10000", "eval_sentences=100"), progress=False))
    return out


def translation_arm(run: Path, data: Path, init: Path | None, assignments: list[str], steps: int,
                    ema: float | None) -> dict[str, float]:
    """Train one arm for STEPS steps (`attnkit train translation`); greedy test scores of its last (and EMA) weights."""
    from attnkit.app.translation.recipe import TranslationRequest, train
    from attnkit.training import Budget

    sets = tuple(assignments) + ("eval_every_minutes=10000", "eval_sentences=100") + \
        ((f"ema_decay={ema}",) if ema else ())
    if not (run / "weights" / "last.safetensors").is_file():
        train(TranslationRequest(run, Budget(steps=steps), str(data), preset=None if init else "tiny",
                                 assignments=sets, init=init, progress=False))
    scores = _test_scores(run, data / "test.tsv", "last")
    if ema:
        scores |= {f"ema_{k}": v for k, v in _test_scores(run, data / "test.tsv", "ema").items()}
    return scores


def _test_scores(run: Path, test: Path, weights: str) -> dict[str, float]:
    from attnkit.translation.data import read_corpus
    from attnkit.translation.evaluate import score
    from attnkit.translation.translator import Translator

    pairs = read_corpus(test).pairs
    translator = Translator.from_run(run, weights=weights)
    result = score(translator.translate([p.source for p in pairs], beam_size=1), [p.target for p in pairs], "fr")
    return {"bleu": result.bleu, "chrf": result.chrf, "exact_match": result.exact_match}


# ------------------------------------------------------------------------------------------------ shared

def _validations(run: Path) -> list[dict[str, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in row.items() if isinstance(v, (int, float))} for row in rows
            if row.get("split") == "valid"]


def plot(results: dict[str, Any], metric: str, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(results)
    figure, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes), 4), squeeze=False)
    for axis, size in zip(axes[0], sizes):
        for arm, points in results[size].items():
            steps = [0] + [p["step"] for p in points]
            line, = axis.plot(steps, [0] + [p[metric] for p in points], marker="o", label=arm)
            if any(f"ema_{metric}" in p for p in points):
                axis.plot(steps, [0] + [p.get(f"ema_{metric}", float("nan")) for p in points], linestyle="--",
                          color=line.get_color(), label=f"{arm} (EMA)")
        axis.set_title(f"{size} training items")
        axis.set_xlabel("optimizer steps (equal compute)")
        axis.set_ylabel(metric)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def table(results: dict[str, Any], metric: str) -> list[str]:
    lines = []
    for size, arms in results.items():
        steps = sorted({p["step"] for points in arms.values() for p in points})
        lines += [f"{size} training items:", "", "| arm | " + " | ".join(f"{metric} at {s} steps" for s in steps)
                  + f" | EMA {metric} at {steps[-1]} |", "| --- |" + " ---: |" * (len(steps) + 1)]
        for arm, points in arms.items():
            by_step = {p["step"]: p for p in points}
            cells = [f"{by_step[s][metric]:.3f}" if s in by_step else "-" for s in steps]
            last = by_step.get(steps[-1], {})
            ema = f"{last[f'ema_{metric}']:.3f}" if f"ema_{metric}" in last else "-"
            lines.append(f"| {arm} | " + " | ".join(cells) + f" | {ema} |")
        lines.append("")
    return lines


def translation_table(results: dict[str, Any]) -> list[str]:
    lines = ["| pairs | arm | steps | BLEU | chrF | exact match % | EMA BLEU | EMA exact match % |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for size, arms in results.items():
        for arm, (p,) in arms.items():
            ema = f"{p['ema_bleu']:.2f} | {p['ema_exact_match']:.1f}" if "ema_bleu" in p else "- | -"
            lines.append(f"| {size} | {arm} | {p['step']} | {p['bleu']:.2f} | {p['chrf']:.2f} | "
                         f"{p['exact_match']:.1f} | {ema} |")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=["detection", "translation"], default="detection")
    parser.add_argument("--pair", choices=["shapes-marks", "marks-shapes"], default="shapes-marks",
                        help="detection: pre-train on the first, fine-tune on the second")
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="training images (pairs) per arm")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per arm")
    parser.add_argument("--eval-every", type=int, default=None, help="detection: validate every N steps")
    parser.add_argument("--pretrain-steps", type=int, default=None)
    parser.add_argument("--pretrained", type=Path, default=None, help="a pre-training run to reuse")
    parser.add_argument("--arms", nargs="+", default=None)
    parser.add_argument("--ema", type=float, default=0.99, help="EMA decay validated beside the fine-tuning arms")
    parser.add_argument("--val-images", type=int, default=100)
    parser.add_argument("--time-steps", type=int, default=0, help="detection: steps per arm in the timing")
    parser.add_argument("--seed", type=int, default=0, help="the subset's seed (which items) for translation")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks/fine_tuning"))
    args = parser.parse_args()
    detection = args.task == "detection"
    arms_known = DETECTION_ARMS if detection else TRANSLATION_ARMS
    arms = {name: arms_known[name] for name in (args.arms or arms_known)}
    sizes = args.sizes or ([8] if args.quick else [200] if detection else [300, 1000])
    steps = args.steps or (4 if args.quick else 100 if detection else 300)
    pretrain_steps = args.pretrain_steps or (4 if args.quick else 250 if detection else 600)
    out = args.out / args.task
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    if detection:
        pretrained = args.pretrained or pretrain_detection(out / f"pretrain_{args.pair}", args.pair, pretrain_steps,
                                                           args.val_images)
        for size in sizes:
            data = fine_tuning_data(out, args.pair, size, args.val_images)
            results[str(size)] = {}
            for name, assignments in arms.items():
                run = out / f"{args.pair}_{size}_{name}"
                ema = args.ema if assignments is not None else None
                if not (run / "weights" / "last.safetensors").is_file():
                    print(f"{size} images, {name}", file=sys.stderr, flush=True)
                    detection_arm(run, data, pretrained if assignments is not None else None, assignments or [],
                                  steps, args.eval_every or steps, ema)
                results[str(size)][name] = _validations(run)
        if args.time_steps:
            frozen = {n: a for n, a in arms.items() if a is not None}
            results["step_seconds"] = detection_step_times(pretrained, data, frozen, args.time_steps)
        metric = "AP"
    else:
        pretrained = args.pretrained or pretrain_translation(out / "pretrain", pretrain_steps)
        for size in sizes:
            data = five_digit_domain(out / f"five_digit_{size}", size, seed=args.seed)
            results[str(size)] = {}
            for name, assignments in arms.items():
                run = out / f"{size}_{name}"
                ema = args.ema if assignments is not None else None
                print(f"{size} pairs, {name}", file=sys.stderr, flush=True)
                scores = translation_arm(run, data, pretrained if assignments is not None else None,
                                         assignments or [], steps, ema)
                results[str(size)][name] = [{"step": steps, **scores}]
        metric = "bleu"
    timings = results.pop("step_seconds", None)
    name = args.task if not detection else f"detection_{args.pair}"
    (out / f"{name}.json").write_text(json.dumps({"results": results, "step_seconds": timings}, indent=1))
    lines = (table(results, metric) if detection else translation_table(results)) + \
        ([f"step seconds (median, alternating): {json.dumps(timings)}"] if timings else [])
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(results, metric, out / f"{name}_curves.png")


if __name__ == "__main__":
    main()
