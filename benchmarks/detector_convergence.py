"""Detector convergence: COCO AP against training minutes for the faithful DETR, `fast` and each ablation.

    python benchmarks/detector_convergence.py                  # 15 minutes per run, both datasets, speed
    python benchmarks/detector_convergence.py --quick          # a check of the script: small data, seconds per run
    python benchmarks/detector_convergence.py --variants detr fast --datasets shapes --minutes 15

Every run uses the `small` preset (ResNet-18 from scratch, hidden 128, 8 heads, 2+2 layers, 15
queries, 96 px images (shortest side) in training, no random crop, and in validation), the same training time budget
(training minutes exclude validation) and the same seed; only `model.arch` and the technique
fields of `DetrConfig` differ:

    detr                 the faithful DETR (Carion et al. 2020)
    fast                 all techniques on (attnkit.detection.variants)
    fast-no-<technique>  fast with one technique off: multi-scale (feature_levels=1), deformable
                         (full attention), two-stage (learned anchors instead of the encoder's
                         proposals), refinement (DETR's learned queries; two-stage off too, since
                         it needs boxes to refine), focal (softmax cross-entropy), groups
                         (query_groups=1), lite-encoder (the encoder updates every level's tokens)
    fast-encoder-c5      the encoder updates C5 alone instead of C4 and C5
    fast-c5              the ResNet runs to C5 (layer4) as DETR's, instead of stopping after C4
                         and making the stride-32 level by a 3x3 stride-2 convolution of C4
    fast-denoising       fast with 3 groups of denoising queries (DN-DETR, DINO)
    fast-no-iou-aware    the focal loss's class targets (1) instead of the boxes' IoUs (varifocal)
    fast-distribution    fast with D-FINE's fine-grained distribution refinement of the boxes
    fast-distilled       fast-distribution with D-FINE's localization self-distillation (GO-LSD)
    fast-mal             fast with DEIM's matchability-aware loss in place of the varifocal loss
    fast-fusion          fast with RT-DETR's CNN cross-scale fusion after the encoder
    fast-hybrid          fast-fusion with the encoder on C5 alone: RT-DETR's hybrid encoder
    fast-mosaic          fast with half the training images mosaics of four until the lr drop
                         (DEIM's dense one-to-one matching)

Datasets: `shapes` (built in: 5 filled shape classes, 0-4 objects, 128 px square images) and
`marks`, written here in COCO layout and read like any user dataset: 4 other object kinds (rings,
crosses, bars, dots), smaller and more numerous objects (0-8 per image, 4-22% of the width, bars
elongated), 160 x 112 px images on noise. The recipe is the same for both; nothing is tuned to
either.

Reports, per dataset: AP at each validation (plot), final AP / AP50 without and with NMS (class-
wise, IoU 0.5, applied after the fact: the detectors are set predictors and are evaluated without
it; a sigmoid detector's AP counts its 100 best (query, class) pairs per image, as Deformable DETR
evaluates, and is also given with each query's best class only), minutes each run needed to
reach the faithful DETR's final AP and the ratio to DETR's; and inference images/s of `detr` and
`fast` (eval mode, alternating in one process: batches of 1 and 8 at the preset's image size, and
batches of 1 at larger sizes).
Writes OUT/results.md (the BENCHMARKS.md section), OUT/results.json and plots.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import torch

VARIANTS = {
    "detr": ["model.arch=detr"],
    "fast": ["model.arch=fast"],
    "fast-no-multi-scale": ["model.arch=fast", "model.feature_levels=1"],
    "fast-no-deformable": ["model.arch=fast", "model.deformable_attention=false", "model.encoder_levels=3"],
    "fast-no-lite-encoder": ["model.arch=fast", "model.encoder_levels=3"],
    "fast-encoder-c5": ["model.arch=fast", "model.encoder_levels=1"],
    "fast-c5": ["model.arch=fast", "model.last_stage=5"],
    "fast-no-two-stage": ["model.arch=fast", "model.two_stage=false"],
    "fast-no-refinement": ["model.arch=fast", "model.box_refinement=false", "model.two_stage=false"],
    "fast-no-focal": ["model.arch=fast", "model.focal_loss=false"],
    "fast-no-groups": ["model.arch=fast", "model.query_groups=1"],
    "fast-denoising": ["model.arch=fast", "model.denoising_groups=3"],  # measured, not adopted
    "fast-no-iou-aware": ["model.arch=fast", "model.iou_aware=false"],
    "fast-distribution": ["model.arch=fast", "model.distribution_refinement=true"],
    "fast-distilled": ["model.arch=fast", "model.distribution_refinement=true", "model.localization_distillation=true"],
    "fast-mal": ["model.arch=fast", "model.matchability_aware=true"],
    "fast-fusion": ["model.arch=fast", "model.cross_scale_fusion=true"],
    "fast-hybrid": ["model.arch=fast", "model.cross_scale_fusion=true", "model.encoder_levels=1"],
    "fast-mosaic": ["model.arch=fast", "train.mosaic=0.5"],
}
MARKS = ("ring", "cross", "bar", "dot")


def _detr_benchmark():
    """benchmarks/detr.py, for its training-curve helpers."""
    spec = importlib.util.spec_from_file_location("detr_benchmark", Path(__file__).with_name("detr.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_marks(out: Path, train_images: int, val_images: int, seed: int = 0) -> Path:
    """The second dataset in COCO layout (train/, val/, annotations/instances_{train,val}.json), once."""
    from PIL import Image

    stamp = out / "marks.json"
    settings = {"train": train_images, "val": val_images, "seed": seed}
    if stamp.is_file() and json.loads(stamp.read_text()) == settings:
        return out
    for split, count, offset in (("train", train_images, 0), ("val", val_images, 1)):
        rng = random.Random(seed * 1_000_003 + offset + 17)
        (out / split).mkdir(parents=True, exist_ok=True)
        images, annotations = [], []
        for index in range(count):
            image, objects = draw_marks(rng, Image, 160, 112)
            image.save(out / split / f"{index:06d}.png")
            images.append({"id": index + 1, "file_name": f"{index:06d}.png", "width": 160, "height": 112})
            for label, (x0, y0, x1, y1) in objects:
                annotations.append({"id": len(annotations) + 1, "image_id": index + 1, "category_id": 10 + label,
                                    "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0), "iscrowd": 0})
        (out / "annotations").mkdir(parents=True, exist_ok=True)
        (out / "annotations" / f"instances_{split}.json").write_text(json.dumps(
            {"images": images, "annotations": annotations,
             "categories": [{"id": 10 + i, "name": name} for i, name in enumerate(MARKS)]}))
    stamp.write_text(json.dumps(settings))
    return out


def draw_marks(rng: random.Random, image_module, width: int, height: int):
    """One image on coloured noise and its objects [(label, (x0, y0, x1, y1))]; boxes from the geometry."""
    from PIL import ImageDraw

    noise = bytes(rng.randrange(80, 176) for _ in range(width * height * 3))
    image = image_module.frombytes("RGB", (width, height), noise)
    draw, objects = ImageDraw.Draw(image), []
    for _ in range(rng.randint(0, 8)):
        label = rng.randrange(len(MARKS))
        size = rng.uniform(0.04, 0.22) * width
        w, h = (size, size) if MARKS[label] != "bar" else ((size, size / rng.uniform(3, 6)) if rng.random() < 0.5
                                                           else (size / rng.uniform(3, 6), size))
        x0, y0 = rng.uniform(0, width - w), rng.uniform(0, height - h)
        box = (x0, y0, x0 + w, y0 + h)
        if any(_overlap(box, other) > 0.2 for _, other in objects):
            continue
        colour = tuple(rng.choice((rng.randrange(0, 60), rng.randrange(196, 256))) for _ in range(3))
        if MARKS[label] == "ring":
            draw.ellipse(box, outline=colour, width=max(1, int(size / 6)))
        elif MARKS[label] == "cross":
            t = size / 5
            draw.rectangle((x0, y0 + (h - t) / 2, x0 + w, y0 + (h + t) / 2), fill=colour)
            draw.rectangle((x0 + (w - t) / 2, y0, x0 + (w + t) / 2, y0 + h), fill=colour)
        elif MARKS[label] == "bar":
            draw.rectangle(box, fill=colour)
        else:
            draw.ellipse(box, fill=colour)
        objects.append((label, tuple(round(v, 2) for v in box)))
    return image, objects


def _overlap(a, b) -> float:
    w, h = max(0.0, min(a[2], b[2]) - max(a[0], b[0])), max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    return w * h / min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))


def train_variant(run: Path, data: str, assignments: list[str], minutes: float, eval_every: float, shapes) -> None:
    from attnkit.app.detection.recipe import DetectionRequest, train
    from attnkit.training import Budget

    train(DetectionRequest(run, Budget(minutes=minutes), data, "small", tuple(assignments), shapes=shapes,
                           eval_every_minutes=eval_every, resume=(run / "config.json").is_file(), progress=False))


def final_ap(run: Path, data: str, shapes) -> dict[str, float]:
    """AP of the run's best weights on its val split, without and with class-wise NMS (IoU 0.5)."""
    from torchvision.ops import batched_nms

    from attnkit.detection.detector import Detector
    from attnkit.detection.evaluate import coco_evaluate, predict_dataset
    from attnkit.detection.sources import open_split, split_paths
    from attnkit.detection.transforms import eval_transforms

    detector = Detector.from_run(run, device="cpu")
    train = detector.config.train
    dataset = open_split(split_paths(data, "val", run, shapes), eval_transforms(train.val_size, train.max_size))
    results = predict_dataset(detector.model, dataset)
    by_image = defaultdict(list)
    for result in results:
        by_image[result["image_id"]].append(result)
    kept = []
    for rows in by_image.values():
        boxes = torch.tensor([[x, y, x + w, y + h] for x, y, w, h in (r["bbox"] for r in rows)])
        keep = batched_nms(boxes, torch.tensor([r["score"] for r in rows]),
                           torch.tensor([r["category_id"] for r in rows]), 0.5)
        kept += [rows[i] for i in keep.tolist()]
    plain, nms = coco_evaluate(dataset.coco, results), coco_evaluate(dataset.coco, kept)
    single = coco_evaluate(dataset.coco, predict_dataset(detector.model, dataset, one_per_query=True))
    return {"AP": plain["AP"], "AP50": plain["AP50"], "AP_nms": nms["AP"], "AP50_nms": nms["AP50"],
            "AP_one_per_query": single["AP"]}


def minutes_to_reach(points: list[dict], target: float) -> float | None:
    """Training minutes at which the curve first reaches TARGET AP (linear between validations)."""
    previous = {"minutes": 0.0, "AP": 0.0}
    for point in points:
        if point["AP"] >= target:
            span = point["AP"] - previous["AP"]
            fraction = 1.0 if span <= 0 else (target - previous["AP"]) / span
            return previous["minutes"] + fraction * (point["minutes"] - previous["minutes"])
        previous = point
    return None


@torch.no_grad()
def inference_speed(size: int, batches: int, batch: int = 1, warmup: int = 2) -> dict[str, float]:
    """Images/s of `detr` and `fast` (small preset, 5 classes, eval mode), alternating, BATCH images of SIZE x SIZE."""
    from attnkit.detection.architectures import build_model
    from attnkit.detection.config import preset, with_arch

    base = replace(preset("small")[0], num_classes=5)
    models = {arch: build_model(with_arch(base, arch)).eval() for arch in ("detr", "fast")}
    pixels, mask = torch.randn(batch, 3, size, size), torch.zeros(batch, size, size, dtype=torch.bool)
    times: dict[str, list[float]] = {arch: [] for arch in models}
    with torch.inference_mode():  # as `attnkit detect` and `eval` run
        for _ in range(warmup):
            for model in models.values():
                model(pixels, mask)
        for _ in range(batches):
            for arch, model in models.items():
                start = time.perf_counter()
                model(pixels, mask)
                times[arch].append(time.perf_counter() - start)
    return {arch: batch / statistics.median(t) for arch, t in times.items()}


def plot_curves(curves: dict[str, list[dict]], title: str, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, points in curves.items():
        style = {"linewidth": 2.5} if name in ("detr", "fast") else {"linestyle": "--", "alpha": 0.8}
        axes.plot([0] + [p["minutes"] for p in points], [0] + [p["AP"] for p in points], marker="o", markersize=3,
                  label=name, **style)
    axes.set_xlabel("training minutes (validation excluded)")
    axes.set_ylabel("COCO AP@[.5:.95] (val)")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def dataset_table(name: str, curves: dict[str, list[dict]], finals: dict[str, dict]) -> list[str]:
    target = curves["detr"][-1]["AP"] if curves.get("detr") else None
    detr_minutes = curves["detr"][-1]["minutes"] if curves.get("detr") else None
    lines = [f"### `{name}`: AP against training minutes (`small` preset, 2 CPU cores)", "",
             f"Target: the faithful DETR's final AP, {target:.3f}." if target is not None else "",
             "", "| run | minutes | final AP | AP50 | AP with NMS | AP50 with NMS | AP, one class per query "
             "| minutes to DETR's final AP | less training time than DETR |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for variant, points in curves.items():
        if not points:
            continue
        final = finals[variant]
        reach = minutes_to_reach(points, target) if target is not None else None
        speedup = f"{detr_minutes / reach:.1f}x" if reach else "-"
        lines.append(f"| {variant} | {points[-1]['minutes']:.1f} | {final['AP']:.3f} | {final['AP50']:.3f} | "
                     f"{final['AP_nms']:.3f} | {final['AP50_nms']:.3f} | "
                     f"{final.get('AP_one_per_query', final['AP']):.3f} | "
                     f"{f'{reach:.1f}' if reach is not None else 'not reached'} | {speedup} |")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks/detector_convergence"))
    parser.add_argument("--minutes", type=float, default=15.0, help="training minutes per run")
    parser.add_argument("--eval-every", type=float, default=1.0, help="minutes between validations")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--datasets", nargs="*", default=["shapes", "marks"], choices=["shapes", "marks"],
                        help="none: the inference timings alone")
    parser.add_argument("--second-dataset-variants", nargs="+", default=["detr", "fast"], choices=list(VARIANTS),
                        help="the runs on `marks` (the ablations run on shapes)")
    parser.add_argument("--speed-images", type=int, default=30)
    parser.add_argument("--speed-sizes", nargs="*", type=int, default=[192, 384],
                        help="larger image sizes also timed, at batch 1")
    parser.add_argument("--seed", type=int, default=0, help="every run's train.seed (the preset's: 0)")
    parser.add_argument("--quick", action="store_true", help="check the script: small data, 0.4 minutes per run")
    args = parser.parse_args()
    from attnkit.detection.shapes import ShapesConfig

    shapes, marks_sizes = ShapesConfig(), (1000, 200)
    if args.quick:
        args.minutes, args.eval_every, args.speed_images, args.speed_sizes = 0.4, 0.2, 3, [128]
        args.variants, args.out = ["detr", "fast"], args.out.with_name(args.out.name + "-quick")
        shapes, marks_sizes = ShapesConfig(train_images=48, val_images=16), (48, 16)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.minutes} minutes per run")
    curve_points = _detr_benchmark().curve_points
    report, results = ["## Detector convergence: `fast` against the faithful DETR", ""], {}
    for dataset in args.datasets:
        data = "shapes" if dataset == "shapes" else str(write_marks(args.out / "data" / "marks", *marks_sizes))
        variants = args.variants if dataset == "shapes" else [v for v in args.variants
                                                              if v in args.second_dataset_variants]
        curves, finals = {}, {}
        for variant in variants:
            run = args.out / dataset / variant
            print(f"\n== {dataset}: {variant} ({' '.join(VARIANTS[variant])})", flush=True)
            train_variant(run, data, [*VARIANTS[variant], f"train.seed={args.seed}"], args.minutes, args.eval_every,
                          shapes)
            records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            curves[variant], finals[variant] = curve_points(records), final_ap(run, data, shapes)
            print(f"{variant}: {curves[variant]}\n  final {finals[variant]}", flush=True)
        plot = plot_curves(curves, f"{dataset}: AP against training minutes", args.out / f"{dataset}_ap.png")
        report += dataset_table(dataset, curves, finals) + [f"![{dataset}]({plot})", ""]
        results[dataset] = {"curves": curves, "final": finals}
    # the preset's size at batches of 1 and 8, then larger images, where DETR's full attention grows quadratically
    settings = [(96, 1), (96, 8)] + [(size, 1) for size in args.speed_sizes]
    speed = {f"{size}px, batch {batch}": {"size": size, "batch": batch,
                                          **inference_speed(size, args.speed_images, batch)}
             for size, batch in settings}
    results["speed"] = speed
    report += ["### Inference (small preset, random weights, eval mode): images/s", "",
               "| image (px) | batch | detr | fast | fast / detr |", "| ---: | ---: | ---: | ---: | ---: |",
               *[f"| {s['size']} x {s['size']} | {s['batch']} | {s['detr']:.1f} | {s['fast']:.1f} | "
                 f"{s['fast'] / s['detr']:.2f}x |" for s in speed.values()],
               ""]
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    (args.out / "results.md").write_text("\n".join(report))
    print("\n" + "\n".join(report))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
