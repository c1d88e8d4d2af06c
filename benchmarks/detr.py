"""DETR: AP on `shapes` against training time, and inference speed against Hugging Face's DETR.

    python benchmarks/detr.py                          # both parts: ~15 minutes of training, then speed
    python benchmarks/detr.py --minutes 2 --speed-size 256 --speed-images 2   # a quick check
    python benchmarks/detr.py --skip-training          # speed only

1. Training curve: the `small` preset (ResNet-18, hidden 128, 2+2 layers, 15 queries) trained
   from scratch on the built-in `shapes` (1000 train images of 128 px) for --minutes of wall
   clock, validated (COCO AP on the 200 shapes val images) every --eval-every minutes. The
   table's training minutes exclude the time spent validating. Writes the run folder, a plot of
   AP/AP50 against training minutes, and a markdown table.
2. Inference: images/s of `detr-r50` (the paper's configuration: ResNet-50 with frozen batch
   norm, hidden 256, 8 heads, 6+6 layers, d_ff 2048, 100 queries) at --speed-size pixels (shortest
   side; the longest is 4/3 of it, a COCO-like image), batch 1, eval mode, no_grad, against
   transformers' `DetrForObjectDetection` with the same configuration (random init, its own
   ResNet-50 from `backbone_config`, `use_pretrained_backbone=False`, `use_timm_backbone=False`;
   nothing is downloaded). Both run in this process, alternating, on the same inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch


def training_curve(out: Path, minutes: float, eval_every: float, threads: int | None) -> list[dict]:
    from attnkit.detection.commands import train
    from attnkit.detection.shapes import ShapesConfig
    from attnkit.training import Budget

    run = out / "small-shapes"
    train(run, "shapes", Budget(minutes=minutes), "small", shapes=ShapesConfig(), eval_every_minutes=eval_every,
          resume=(run / "config.json").is_file())
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return curve_points(records)


def curve_points(records: list[dict]) -> list[dict]:
    """(training minutes, AP, AP50) at each validation: elapsed time at that step, less earlier validations."""
    train = [(r["step"], r["elapsed_s"]) for r in records if r.get("split") == "train" and "elapsed_s" in r]
    points, eval_seconds = [], 0.0
    for record in (r for r in records if r.get("split") == "valid" and "AP" in r):
        elapsed = _elapsed_at(train, record["step"])
        points.append({"step": record["step"], "minutes": (elapsed - eval_seconds) / 60,
                       "AP": record["AP"], "AP50": record["AP50"], "AP75": record["AP75"]})
        eval_seconds += record.get("seconds", 0.0)
    return points


def _elapsed_at(train: list[tuple[int, float]], step: int) -> float:
    before = [(s, e) for s, e in train if s <= step] or [(0, 0.0)]
    after = [(s, e) for s, e in train if s >= step] or before[-1:]
    (s0, e0), (s1, e1) = before[-1], after[0]
    return e0 if s1 == s0 else e0 + (e1 - e0) * (step - s0) / (s1 - s0)


def plot_curve(points: list[dict], path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for key in ("AP", "AP50"):
        axes.plot([p["minutes"] for p in points], [p[key] for p in points], marker="o", label=key)
    axes.set_xlabel("training minutes (validation excluded)")
    axes.set_ylabel("COCO AP on shapes val")
    axes.set_title("DETR small preset on shapes")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def ours_r50() -> torch.nn.Module:
    from attnkit.detection.architectures import build_model
    from attnkit.detection.config import preset

    return build_model(replace(preset("detr-r50")[0], num_classes=91, frozen_batchnorm=True)).eval()


def huggingface_r50() -> torch.nn.Module:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import DetrConfig, DetrForObjectDetection

    config = DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False, num_labels=91, num_queries=100,
                        d_model=256, encoder_layers=6, decoder_layers=6, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                        encoder_attention_heads=8, decoder_attention_heads=8, dropout=0.1, auxiliary_loss=False)
    return DetrForObjectDetection(config).eval()


@torch.no_grad()
def inference_speed(size: int, images: int, warmup: int, device: torch.device) -> dict[str, dict]:
    width = size * 4 // 3
    pixels = torch.randn(1, 3, size, width, device=device)
    mask = torch.zeros(1, size, width, dtype=torch.bool, device=device)
    runners = {"attnkit": (ours_r50().to(device), lambda m: m(pixels, mask)),
               "transformers": (huggingface_r50().to(device),
                                lambda m: m(pixel_values=pixels, pixel_mask=(~mask).long()))}
    times: dict[str, list[float]] = {name: [] for name in runners}
    for name, (model, call) in runners.items():
        for _ in range(warmup):
            call(model)
    for _ in range(images):
        for name, (model, call) in runners.items():  # alternate, so load changes hit both alike
            _sync(device)
            start = time.perf_counter()
            call(model)
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: {"images_per_s": 1 / statistics.median(t), "median_s": statistics.median(t),
                   "parameters": sum(p.numel() for p in runners[name][0].parameters())}
            for name, t in times.items()}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks/detr"))
    parser.add_argument("--minutes", type=float, default=18.0,
                        help="wall-clock budget of the run, validations included (18: about 15 minutes of training)")
    parser.add_argument("--eval-every", type=float, default=1.5, help="minutes between validations")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--speed-size", type=int, default=800)
    parser.add_argument("--speed-images", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {device}\n")
    if not args.skip_training:
        points = training_curve(args.out, args.minutes, args.eval_every, None)
        plot = plot_curve(points, args.out / "ap_vs_minutes.png")
        print("\n### DETR `small` on `shapes` val: AP against training time\n")
        print("| step | training minutes | AP | AP50 | AP75 |\n| ---: | ---: | ---: | ---: | ---: |")
        for p in points:
            print(f"| {p['step']} | {p['minutes']:.1f} | {p['AP']:.3f} | {p['AP50']:.3f} | {p['AP75']:.3f} |")
        print(f"\nplot: {plot}")
    if not args.skip_speed:
        speed = inference_speed(args.speed_size, args.speed_images, args.warmup, device)
        print(f"\n### DETR-R50 inference, {args.speed_size} x {args.speed_size * 4 // 3} px, batch 1, {device}\n")
        print("| implementation | parameters | median s/image | images/s |\n| --- | ---: | ---: | ---: |")
        for name, row in speed.items():
            print(f"| {name} | {row['parameters'] / 1e6:.2f}M | {row['median_s']:.3f} | {row['images_per_s']:.2f} |")
        ratio = speed["attnkit"]["images_per_s"] / speed["transformers"]["images_per_s"]
        print(f"\nattnkit / transformers speed: {ratio:.2f}x")
        (args.out / "speed.json").write_text(json.dumps(speed, indent=1))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
