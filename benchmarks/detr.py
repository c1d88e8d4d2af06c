"""DETR: AP on `shapes` against training time, and inference and training-step speed against Hugging Face's DETR.

    python benchmarks/detr.py                          # all parts: ~15 minutes of training, then the speeds
    python benchmarks/detr.py --minutes 2 --speed-size 256 --speed-images 2 --train-step-size 128 \
        --train-step-rounds 1                          # a quick check
    python benchmarks/detr.py --skip-training          # the speed comparisons only

1. Training curve: the `small` preset with `--arch detr` (ResNet-18, hidden 128, 2+2 layers, 15 queries) trained
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
3. Training step: seconds per step of the same two `detr-r50` models, fp32, train mode (dropout
   0.1 in both, frozen batch norm in both), on one batch of --train-step-batch random images of
   --train-step-size pixels (shortest side; the longest 4/3 of it; the last image's right quarter
   is padding, with its mask) and the same targets (3 boxes per image, normalised cx, cy, w, h,
   and class labels). One step is forward, each library's own loss (Hungarian matching and the set
   loss, auxiliary losses after every decoder layer, the paper's costs and weights: class 1,
   L1 5, GIoU 2, "no object" 0.1), backward and an AdamW step (backbone at 1e-5, the rest at
   1e-4, weight decay 1e-4). attnkit runs what `attnkit train detection` runs: the criterion of
   `DetectionTask` (`criterion_of`) and AdamW with `fused_options` (the fused kernel where the
   build has it). transformers runs its loss from `labels=` and plain `torch.optim.AdamW`, which
   is what its Trainer gives by default (`optim="adamw_torch"`). Neither step clips gradients
   (both trainers do, with the same torch.nn.utils.clip_grad_norm_). The same backbone layers
   train in both, DETR's: all but the stem and the first stage; transformers' own freezing
   matches no parameter name of its ResNet ("stage.1" against "stages.1") and freezes the whole
   backbone, so the benchmark unfreezes stages 1-3, as its timm path would. One warm-up step
   each, then --train-step-rounds rounds alternating the two; the median step time of each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from attnkit.detection.config import DetectionConfig


def training_curve(out: Path, minutes: float, eval_every: float, threads: int | None) -> list[dict]:
    from attnkit.app.detection.recipe import DetectionRequest, train
    from attnkit.detection.shapes import ShapesConfig
    from attnkit.training import Budget

    run = out / "small-shapes"
    train(DetectionRequest(run, Budget(minutes=minutes), "shapes", "small", ("model.arch=detr",),
                           shapes=ShapesConfig(), eval_every_minutes=eval_every,
                           resume=(run / "config.json").is_file()))
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


def ours_r50_config() -> DetectionConfig:
    """attnkit's `detr-r50` model and training configs, 91 classes, frozen batch norm (as transformers')."""
    from attnkit.detection.config import DetectionConfig, preset

    model, train = preset("detr-r50")
    return DetectionConfig(model=replace(model, num_classes=91, frozen_batchnorm=True), train=train)


def ours_r50() -> torch.nn.Module:
    from attnkit.detection.architectures import build_model

    return build_model(ours_r50_config().model).eval()


def huggingface_r50(auxiliary_loss: bool = False) -> torch.nn.Module:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import DetrConfig, DetrForObjectDetection

    config = DetrConfig(use_timm_backbone=False, use_pretrained_backbone=False, num_labels=91, num_queries=100,
                        d_model=256, encoder_layers=6, decoder_layers=6, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                        encoder_attention_heads=8, decoder_attention_heads=8, dropout=0.1,
                        auxiliary_loss=auxiliary_loss)
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
    for model, call in runners.values():
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


def train_step_inputs(size: int, batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, list[dict]]:
    """Random images (batch, 3, size, 4/3 size), padding mask (batch, size, 4/3 size), True = padding, the
    last image's right quarter padded; targets of 3 boxes each (normalised cx, cy, w, h) and labels in 0..90."""
    generator = torch.Generator().manual_seed(0)
    width = size * 4 // 3
    pixels = torch.randn(batch, 3, size, width, generator=generator)
    mask = torch.zeros(batch, size, width, dtype=torch.bool)
    mask[-1, :, width - width // 4:] = True
    pixels[mask.unsqueeze(1).expand_as(pixels)] = 0.0
    targets = []
    for _ in range(batch):
        centres = 0.25 + 0.5 * torch.rand(3, 2, generator=generator)  # (objects, 2)
        sizes = 0.1 + 0.3 * torch.rand(3, 2, generator=generator)  # (objects, 2)
        targets.append({"labels": torch.randint(0, 91, (3,), generator=generator).to(device),
                        "boxes": torch.cat([centres, sizes], 1).to(device)})  # (objects, 4)
    return pixels.to(device), mask.to(device), targets


def train_like_detr(model: torch.nn.Module) -> torch.nn.Module:
    """transformers' DETR with DETR's trainable backbone: all but the stem and the first stage (stages.0).

    DetrConvEncoder means to freeze the rest by name, but tests "stage.1" against its ResNet's
    "stages.1" and so freezes the whole backbone; this sets what its timm path (layer2-4) sets.
    """
    for name, parameter in model.model.backbone.named_parameters():
        parameter.requires_grad_(any(f".stages.{i}." in name for i in (1, 2, 3)))
    return model


def adamw(model: torch.nn.Module, backbone: str, lr: float, lr_backbone: float, weight_decay: float,
          **options: bool) -> torch.optim.AdamW:
    """AdamW with the parameters named BACKBONE... at LR_BACKBONE, as `DetectionTask` groups them."""
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [{"params": [p for n, p in trainable if not n.startswith(backbone)], "lr": lr},
              {"params": [p for n, p in trainable if n.startswith(backbone)], "lr": lr_backbone}]
    return torch.optim.AdamW(groups, lr=lr, weight_decay=weight_decay, **options)


def train_step_runners(size: int, batch: int, device: torch.device) -> dict[str, tuple[torch.nn.Module, Callable]]:
    """Per library: (model, one training step), on the same images and targets."""
    from attnkit.app.detection.recipe import criterion_of
    from attnkit.training.fused_optimizer import fused_options

    pixels, mask, targets = train_step_inputs(size, batch, device)
    labels = [{"class_labels": t["labels"], "boxes": t["boxes"]} for t in targets]
    config = ours_r50_config()
    hyper = {"lr": config.train.lr, "lr_backbone": config.train.lr_backbone, "weight_decay": config.train.weight_decay}
    torch.manual_seed(0)
    ours = ours_r50().to(device).train()
    criterion = criterion_of(config).to(device)
    ours_optimizer = adamw(ours, "backbone.", **hyper, **fused_options(device))
    torch.manual_seed(0)
    theirs = train_like_detr(huggingface_r50(auxiliary_loss=True)).to(device).train()
    theirs_optimizer = adamw(theirs, "model.backbone.", **hyper)

    def step(optimizer: torch.optim.Optimizer, loss: Callable[[], torch.Tensor]) -> Callable[[], float]:
        def run() -> float:
            optimizer.zero_grad(set_to_none=True)
            value = loss()
            value.backward()
            optimizer.step()
            return float(value.detach())
        return run

    return {"attnkit": (ours, step(ours_optimizer, lambda: criterion(ours(pixels, mask), targets)["loss"])),
            "transformers": (theirs, step(theirs_optimizer, lambda: theirs(
                pixel_values=pixels, pixel_mask=(~mask).long(), labels=labels).loss))}


def train_step_speed(size: int, batch: int, rounds: int, device: torch.device) -> dict[str, dict]:
    """Median seconds per training step of each library: one warm-up step each, then ROUNDS alternating."""
    runners = train_step_runners(size, batch, device)
    for _, run in runners.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, (_, run) in runners.items():  # alternate, so load changes hit both alike
            _sync(device)
            start = time.perf_counter()
            run()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: {"median_s": statistics.median(t), "images_per_s": batch / statistics.median(t),
                   "parameters": sum(p.numel() for p in runners[name][0].parameters()),
                   "trainable": sum(p.numel() for p in runners[name][0].parameters() if p.requires_grad)}
            for name, t in times.items()}


def print_train_step(result: dict[str, dict], size: int, batch: int, device: torch.device) -> None:
    print(f"\n### DETR-R50 training step, {batch} x {size} x {size * 4 // 3} px, fp32, {device}\n")
    print("| implementation | parameters | trainable | median s/step | images/s |\n| --- | ---: | ---: | ---: | ---: |")
    for name, row in result.items():
        print(f"| {name} | {row['parameters'] / 1e6:.2f}M | {row['trainable'] / 1e6:.2f}M | {row['median_s']:.3f} "
              f"| {row['images_per_s']:.2f} |")
    ours, theirs = result["attnkit"], result["transformers"]
    print(f"\nspeed-up (transformers s/step / attnkit s/step): {theirs['median_s'] / ours['median_s']:.2f}x")
    for key in ("parameters", "trainable"):
        if abs(ours[key] - theirs[key]) > 0.01 * theirs[key]:
            print(f"note: the {key} counts differ by more than 1% ({ours[key]:,} against {theirs[key]:,})")


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
    parser.add_argument("--skip-train-step", action="store_true")
    parser.add_argument("--train-step-size", type=int, default=320, help="shortest side; the longest is 4/3 of it")
    parser.add_argument("--train-step-batch", type=int, default=2)
    parser.add_argument("--train-step-rounds", type=int, default=5)
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
    if not args.skip_train_step:
        step = train_step_speed(args.train_step_size, args.train_step_batch, args.train_step_rounds, device)
        print_train_step(step, args.train_step_size, args.train_step_batch, device)
        (args.out / "train_step.json").write_text(json.dumps(step, indent=1))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
