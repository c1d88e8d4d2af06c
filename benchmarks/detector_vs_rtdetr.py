"""attnkit's default detector (`fast`, a preset) against transformers' RT-DETR (and D-FINE), from scratch.

    .venv/bin/python benchmarks/detector_vs_rtdetr.py train --dataset shapes --size 96 --minutes 10 --rtdetr r18vd
    .venv/bin/python benchmarks/detector_vs_rtdetr.py train --dataset crowd --size 320 --preset medium --rtdetr shrunk
    .venv/bin/python benchmarks/detector_vs_rtdetr.py train --dataset marks --rtdetr r18vd shrunk dfine  # 4 arms
    .venv/bin/python benchmarks/detector_vs_rtdetr.py latency --sizes 96 320 640 --batches 1 8
    .venv/bin/python benchmarks/detector_vs_rtdetr.py train --quick     # a check of the script: seconds
    .venv/bin/python benchmarks/detector_vs_rtdetr.py train --dataset marks --minutes 60 --resume  # a cut one goes on
    .venv/bin/python benchmarks/detector_vs_rtdetr.py latency --set backbone_widths=[32,64,128,256] ...
    python benchmarks/detector_vs_rtdetr.py train --device cuda --minutes 5 --eval-every 1   # on a GPU: wall clock
    python benchmarks/detector_vs_rtdetr.py latency --device cuda --sizes 640                # PyTorch on the GPU

train: all arms (attnkit's and one per --rtdetr kind) in ONE process, ALTERNATING in chunks of --chunk
seconds of training each, so that a busy machine slows all alike; each arm's budget counts only its
own training time (data loading, forward, backward, update), as CPU time per thread by default (`--clock cpu`: a shared
machine's other work does not count) or wall-clock time (`--clock wall`); validation is not
counted. Same images (attnkit's dataset builders: `shapes`, `marks` of
benchmarks/detector_convergence.py, `crowd`), same augmentation (the preset's: one scale --size,
flip), same batch, same autocast (the preset's `auto`: bf16 on CPUs with native bf16), same seed,
same COCO AP code (attnkit.detection.evaluate: pycocotools, the 100 best (query, class) pairs per
image for both, as both are sigmoid detectors).

RT-DETR as users build it (transformers' RTDetrForObjectDetection with RTDetrConfig): `r18vd` is
PekingU/rtdetr_r18vd's configuration (ResNet-18-vd: basic blocks, depths 2-2-2-2, hybrid encoder
hidden 256 with expansion 0.5, 3 decoder layers, 300 queries, 100 denoising queries) with
num_labels the dataset's classes; `shrunk` narrows it (backbone widths halved, hidden 128, FFN 512)
to about attnkit `small`'s parameter count; `dfine` is transformers' DFineForObjectDetection in
D-FINE-S's configuration (HGNetV2-B0). Its own loss (varifocal classification, L1 + GIoU,
denoising, auxiliary layers) via `labels` passed to forward.

RT-DETR's recipe (`RECIPES`), from rtdetr_r18vd_6x_coco.yml / rtdetrv2's: AdamW, lr 1e-4, weight decay 1e-4
(0 on the encoder's and decoder's norms), betas 0.9/0.999, gradient clipping 0.1, a linear
warm-up of 2000 steps (RT-DETRv2), a weight EMA of decay 0.9999 with 2000 warm-up updates
(decay * (1 - exp(-updates / 2000))), no lr drop within the budget. Changed for a from-scratch
run of minutes: the warm-up ends after 2000 steps or 5% of the budget, whichever comes first
(2000 steps are most of a 10-minute budget on 2 cores); the backbone's lr is the others' (1e-4):
the config's 1e-5 is for an ImageNet-pretrained backbone (`--backbone-lr 1e-5` restores it);
batch norms are trained (freezing is for pretrained ones); images are normalised as attnkit's
(ImageNet mean/std; RT-DETR reads [0, 1]: immaterial from scratch with batch norm). Both the
raw weights and the EMA are evaluated; RT-DETR's AP at each point is the better of the two.
D-FINE-S trains with its own recipe the same way (dfine_hgnetv2_s_coco.yml and D-FINE's optimizer.yml):
lr 2.5e-4 (its backbone's 1.25e-4 is for a pretrained one), weight decay 1.25e-4, warm-up 500 steps,
EMA warm-up 1000 updates.
After each evaluation the whole contest (both arms' weights, optimizers, EMA, clocks, batches, the
random generators) is written to OUT/contest_*.safetensors; `--resume` goes on from there, so a
60-minute contest (hours of wall time) can be run in several sittings; the results name each resumption.

latency: forward only, random weights, eval mode, fp32, --threads threads, batches of 1 and 8 of
SIZE x SIZE images, in PyTorch and under ONNX Runtime (attnkit: its exporter, the graph
`attnkit export onnx` writes; RT-DETR: torch.onnx.export of the transformers model, opset 17, its
sigmoid scores and boxes as outputs); in PyTorch the models alternate call by call, under ONNX Runtime each
session runs its calls in a row (a session's threads spin after a call and slow the next session's), in three
rounds with the order rotated; medians.
The graphs stay in OUT/graphs; --op-times adds each graph's kernel time per ONNX operator type (ONNX
Runtime's profiler).
Writes OUT/results.json (appended) and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

os.environ.setdefault("GOMP_SPINCOUNT", "0")  # idle OpenMP threads sleep: process CPU time counts work, not spinning
import torch  # noqa: E402
from torch import nn

from attnkit.detection.output import DetectionOutput

RTDETR_KINDS = ("r18vd", "shrunk", "dfine")


# ------------------------------------------------------------------ data
def write_dataset(name: str, root: Path, quick: bool) -> Path:
    """The dataset NAME in COCO layout under ROOT/NAME (written once)."""
    train, val = (48, 16) if quick else (1000, 200)
    if name == "shapes":
        from attnkit.detection.shapes import ShapesConfig, write_shapes
        return write_shapes(root / "shapes", ShapesConfig(train_images=train, val_images=val))
    if name == "crowd":
        from attnkit.detection.crowd import write_crowd
        return write_crowd(root / "crowd", train, val)
    if name == "marks":
        path = Path(__file__).with_name("detector_convergence.py")
        spec = importlib.util.spec_from_file_location("convergence", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.write_marks(root / "marks", train, val)
    raise SystemExit(f"unknown dataset {name!r}: shapes, marks or crowd")


def open_splits(root: Path, train_config):
    from attnkit.detection.layouts import find_layout
    from attnkit.detection.sources import open_split
    from attnkit.detection.transforms import eval_transforms, train_transforms

    t, layout = train_config, find_layout(root)
    train_set = open_split(layout.source("train"), train_transforms(t.train_scales, t.max_size, t.flip,
                                                                    t.crop_min_fraction), for_evaluation=False)
    return train_set, open_split(layout.source("val"), eval_transforms(t.val_size, t.max_size))


def preset_at(name: str, size: int, sets: Sequence[str] = ()):
    """The preset's model and training configs at SIZE px (one scale; the longest side up to 5/3 of it), the
    model's fields changed by SETS ("FIELD=VALUE", values parsed as `attnkit train --set` parses them)."""
    from attnkit import overrides
    from attnkit.detection.config import preset

    model, train = preset(name)
    changes = {field: overrides.parse_value(value) for field, _, value in (s.partition("=") for s in sets)}
    return replace(model, **changes), replace(train, train_scales=(size,), val_size=size, max_size=size * 5 // 3)


# ------------------------------------------------------------------ RT-DETR
def rtdetr_queries(size: int) -> int:
    """RT-DETR's 300 queries are the encoder's best tokens; a 96 px image has only 189 (strides 8, 16, 32): 100."""
    return 300 if size >= 160 else 100


def rtdetr_config(kind: str, num_labels: int, queries: int = 300):
    """transformers' config of RT-DETR-R18-vd (PekingU/rtdetr_r18vd), a narrowed one, or D-FINE-S."""
    from transformers import DFineConfig, HGNetV2Config, RTDetrConfig, RTDetrResNetConfig

    labels = {"num_labels": num_labels, "id2label": {i: str(i) for i in range(num_labels)},
              "label2id": {str(i): i for i in range(num_labels)}}
    if kind == "dfine":  # D-FINE-S: HGNetV2-B0, hidden 256, 3 decoder layers, depth_mult 0.34
        backbone = HGNetV2Config(stem_channels=[3, 16, 16], stage_in_channels=[16, 64, 256, 512],
                                 stage_mid_channels=[16, 32, 64, 128], stage_out_channels=[64, 256, 512, 1024],
                                 hidden_sizes=[64, 256, 512, 1024], depths=[1, 1, 2, 1],
                                 stage_num_blocks=[1, 1, 2, 1], stage_numb_of_layers=[3, 3, 3, 3],
                                 out_features=["stage2", "stage3", "stage4"], use_learnable_affine_block=True)
        return DFineConfig(backbone_config=backbone, encoder_in_channels=[256, 512, 1024], hidden_expansion=0.5,
                           depth_mult=0.34, decoder_layers=3, num_queries=queries,
                           freeze_backbone_batch_norms=False, **labels)
    widths, hidden, ffn = ([64, 128, 256, 512], 256, 1024) if kind == "r18vd" else ([32, 64, 128, 256], 128, 512)
    backbone = RTDetrResNetConfig(layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=widths,
                                  embedding_size=widths[0], downsample_in_bottleneck=False,
                                  out_features=["stage2", "stage3", "stage4"])
    return RTDetrConfig(backbone_config=backbone, encoder_in_channels=widths[1:], encoder_hidden_dim=hidden,
                        encoder_ffn_dim=ffn, hidden_expansion=0.5, d_model=hidden, decoder_in_channels=[hidden] * 3,
                        decoder_ffn_dim=ffn, decoder_layers=3, num_queries=queries, num_denoising=100,
                        freeze_backbone_batch_norms=False, **labels)


def build_rtdetr(kind: str, num_labels: int, queries: int = 300) -> nn.Module:
    from transformers import DFineForObjectDetection, RTDetrForObjectDetection

    config = rtdetr_config(kind, num_labels, queries)
    return (DFineForObjectDetection if kind == "dfine" else RTDetrForObjectDetection)(config)


class AsDetectionOutput(nn.Module):
    """RT-DETR called as attnkit's detectors are, (images, mask) -> DetectionOutput, for attnkit's evaluation."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor, mask: torch.Tensor) -> DetectionOutput:
        canvas, scale = on_canvas(images, mask)
        out = self.model(pixel_values=canvas)
        logits = out.logits  # (batch, queries, classes) sigmoid logits
        background = torch.zeros_like(logits[..., :1])
        boxes = out.pred_boxes / scale[:, None]  # canvas-normalised -> image-normalised cx, cy, w, h
        return DetectionOutput(torch.cat([logits, background], -1), boxes, logits)


def on_canvas(images: torch.Tensor, mask: torch.Tensor, stride: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """RT-DETR's input: the batch padded (bottom and right, with zeros) to sides that are multiples of STRIDE (its
    encoder adds C5 upsampled to C4, so the sides must halve evenly), and per image the factor (batch, 4) that takes
    boxes normalised by the image's own size (attnkit's targets) to boxes normalised by the canvas, as transformers'
    image processor normalises them after padding. RT-DETR reads no mask: the padding is part of its picture."""
    height, width = images.shape[-2:]
    canvas_h, canvas_w = -(-height // stride) * stride, -(-width // stride) * stride
    canvas = torch.nn.functional.pad(images, (0, canvas_w - width, 0, canvas_h - height))
    valid_h, valid_w = (~mask).any(2).sum(1), (~mask).any(1).sum(1)  # (batch,) each image's own height, width
    scale = torch.stack([valid_w / canvas_w, valid_h / canvas_h], -1).repeat(1, 2)  # (batch, 4): x, y, w, h
    return canvas, scale.to(images.dtype)


class Ema:
    """RT-DETR's ModelEMA: decay * (1 - exp(-updates / warmups)), parameters and buffers."""

    def __init__(self, model: nn.Module, decay: float = 0.9999, warmups: int = 2000) -> None:
        self.module, self.decay, self.warmups, self.updates = copy.deepcopy(model).eval(), decay, warmups, 0
        for p in self.module.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self.updates += 1
        d = self.decay * (1 - math.exp(-self.updates / self.warmups))
        own = model.state_dict()
        for name, value in self.module.state_dict().items():
            if value.dtype.is_floating_point:
                value.mul_(d).add_(own[name].detach(), alpha=1 - d)
            else:
                value.copy_(own[name])


# ------------------------------------------------------------------ the two arms
class Arm:
    """One detector's training: its own batches, optimizer and clock."""

    def __init__(self, name: str, model: nn.Module, train_set, val_set, batch_size: int, seed: int,
                 budget_s: float, amp: bool, device: torch.device) -> None:
        self.name, self.model, self.train_set, self.val_set = name, model, train_set, val_set
        self.batch_size, self.seed, self.budget_s, self.amp, self.device = batch_size, seed, budget_s, amp, device
        self.spent, self.steps, self.epoch, self.queue = 0.0, 0, 0, []
        self.points: list[dict] = []
        self.clock, self.per_second = time.perf_counter, 1.0  # wall clock; `use_cpu_clock` for CPU time

    def use_cpu_clock(self, threads: int) -> None:
        """Count this process's CPU seconds / THREADS: the time the arm had, whatever else the machine runs."""
        self.clock, self.per_second = time.process_time, 1.0 / threads

    def next_batch(self):
        from attnkit.app.detection.recipe import load_batch

        if not self.queue:
            self.queue = self.epoch_batches(self.epoch)
            self.epoch += 1
        return load_batch(self.train_set, self.queue.pop(0))

    def epoch_batches(self, epoch: int) -> list:
        from attnkit.app.detection.recipe import epoch_refs

        return epoch_refs(len(self.train_set), self.batch_size, self.seed, epoch)

    def train_for(self, seconds: float) -> None:
        """Training steps until SECONDS more of this arm's time (or its budget) are spent."""
        stop = min(self.spent + seconds, self.budget_s)
        self.model.train()
        while self.spent < stop:
            start = self.clock()
            images, mask, targets = on_device(self.next_batch(), self.device)
            self.set_lr()
            with torch.autocast(self.device.type, torch.bfloat16, enabled=self.amp):
                loss = self.loss(images, mask, targets)
            loss.backward()
            params = [p for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
            torch.nn.utils.clip_grad_norm_(params, 0.1)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.after_step()
            self.steps += 1
            synchronize(self.device)  # a GPU's step counted when its kernels are done
            self.spent += (self.clock() - start) * self.per_second

    def after_step(self) -> None:
        pass

    def state(self) -> dict:
        """What `restore` needs to go on as if never stopped: weights, optimizer, clock, the epoch's batches left."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "spent": self.spent,
                "steps": self.steps, "epoch": self.epoch, "batches_left": len(self.queue), "points": self.points}

    def restore(self, state: dict) -> None:
        from attnkit.training.checkpointing import lay_out_like_parameters

        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        lay_out_like_parameters(self.optimizer)  # channels-last weights keep their moments' layout
        self.spent, self.steps, self.epoch = state["spent"], state["steps"], state["epoch"]
        self.points = state["points"]
        left = state["batches_left"]  # the epoch's batches follow from (seed, epoch): its last LEFT are still due
        epoch = self.epoch_batches(self.epoch - 1) if left else []
        self.queue = epoch[len(epoch) - left:]


class AttnkitArm(Arm):
    """attnkit's preset exactly as `attnkit train detection` runs it (DetectionTask; lr x 0.1 after lr_drop)."""

    def __init__(self, config, train_set, val_set, budget_s: float, amp: bool, device: torch.device) -> None:
        from attnkit.app.detection.recipe import DetectionTask
        from attnkit.training.ema import WeightsEma

        self.task = DetectionTask(config, train_set, val_set, device)
        super().__init__("attnkit", self.task.model, train_set, val_set, config.train.batch_size, config.train.seed,
                         budget_s, amp, device)
        self.optimizer, self.lr_drop = self.task.optimizer, config.train.lr_drop
        decay = config.train.ema_decay
        self.ema = WeightsEma(self.model, decay) if decay is not None else None
        self.base = [g["lr"] for g in self.optimizer.param_groups]

    def epoch_batches(self, epoch: int) -> list:
        self.task.budget_spent = self.spent / self.budget_s  # (mosaics end at the lr drop: `train.mosaic`)
        return self.task.batches(epoch)

    def set_lr(self) -> None:
        factor = self.task.lr_factor(self.steps, self.spent / self.budget_s)
        for group, lr in zip(self.optimizer.param_groups, self.base):
            group["lr"] = lr * factor

    def loss(self, images, mask, targets):
        return self.task.train_step(self.model, (images, mask, targets))["loss"]

    def after_step(self) -> None:
        if self.ema is not None:
            self.ema.update(self.model)

    def state(self) -> dict:
        return {**super().state(), **({"ema": self.ema.state_dict()} if self.ema is not None else {})}

    def restore(self, state: dict) -> None:
        super().restore(state)
        if self.ema is not None:
            self.ema.load_state_dict(state["ema"])

    def evaluate(self) -> dict:
        """The model's AP, and with the preset's EMA (`train.ema_decay`) the better of it and the average's, as
        `attnkit train detection` keeps the better in weights/best (and as RT-DETR's arm is scored)."""
        from attnkit.training.ema import weights_swapped

        raw = self.task.evaluate()["AP"]
        if self.ema is None:
            return {"AP": raw}
        with torch.no_grad(), weights_swapped(self.model, self.ema.weights()):
            ema = self.task.evaluate()["AP"]
        return {"AP": max(raw, ema), "AP_raw": raw, "AP_ema": ema}


class Recipe(NamedTuple):
    """A model's AdamW learning rate and weight decay, linear warm-up steps and EMA warm-up updates."""
    lr: float
    weight_decay: float
    warmup_steps: int
    ema_warmups: int


RECIPES = {"r18vd": Recipe(1e-4, 1e-4, 2000, 2000),  # rtdetr_r18vd_6x_coco.yml, RT-DETRv2's warm-up
           "shrunk": Recipe(1e-4, 1e-4, 2000, 2000),
           "dfine": Recipe(2.5e-4, 1.25e-4, 500, 1000)}  # dfine_hgnetv2_s_coco.yml, D-FINE's optimizer.yml


class RtdetrArm(Arm):
    """RT-DETR (or D-FINE) with its recipe (module docstring): AdamW, warm-up, EMA, its own loss.
    backbone_lr: None = the rest's (from scratch)."""

    def __init__(self, kind: str, num_labels: int, queries: int, train_set, val_set, batch_size: int, seed: int,
                 budget_s: float, amp: bool, device: torch.device, backbone_lr: float | None = None) -> None:
        self.recipe = recipe = RECIPES[kind]
        lr = recipe.lr
        torch.manual_seed(seed)
        super().__init__(kind, build_rtdetr(kind, num_labels, queries).to(device), train_set, val_set, batch_size,
                         seed, budget_s, amp, device)
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        backbone = [p for n, p in named if ".backbone." in n]
        no_decay = [p for n, p in named if ".backbone." not in n and ("norm" in n or ".bn" in n)]
        rest = [p for n, p in named if ".backbone." not in n and not ("norm" in n or ".bn" in n)]
        self.optimizer = torch.optim.AdamW([{"params": backbone, "lr": backbone_lr or lr},
                                            {"params": no_decay, "lr": lr, "weight_decay": 0.0},
                                            {"params": rest, "lr": lr}], lr=lr, betas=(0.9, 0.999),
                                           weight_decay=recipe.weight_decay)
        self.base = [g["lr"] for g in self.optimizer.param_groups]
        self.ema = Ema(self.model, warmups=recipe.ema_warmups)

    def set_lr(self) -> None:  # linear warm-up: the recipe's steps or 5% of the budget, whichever ends first
        factor = min(1.0, max((self.steps + 1) / self.recipe.warmup_steps, self.spent / (0.05 * self.budget_s)))
        for group, lr in zip(self.optimizer.param_groups, self.base):
            group["lr"] = lr * factor

    def loss(self, images, mask, targets):
        canvas, scale = on_canvas(images, mask)
        labels = [{"class_labels": t["labels"], "boxes": t["boxes"] * factor} for t, factor in zip(targets, scale)]
        return self.model(pixel_values=canvas, labels=labels).loss

    def after_step(self) -> None:
        self.ema.update(self.model)

    def state(self) -> dict:
        return {**super().state(), "ema": self.ema.module.state_dict(), "ema_updates": self.ema.updates}

    def restore(self, state: dict) -> None:
        super().restore(state)
        self.ema.module.load_state_dict(state["ema"])
        self.ema.updates = state["ema_updates"]

    def evaluate(self) -> dict:
        from attnkit.detection.evaluate import evaluate_detector

        raw = evaluate_detector(AsDetectionOutput(self.model), self.val_set)["AP"]
        ema = evaluate_detector(AsDetectionOutput(self.ema.module), self.val_set)["AP"]
        return {"AP": max(raw, ema), "AP_raw": raw, "AP_ema": ema}


def parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def on_device(batch: tuple, device: torch.device) -> tuple:
    """A loaded batch (images, mask, targets) on DEVICE."""
    images, mask, targets = batch
    return images.to(device), mask.to(device), [{k: v.to(device) if isinstance(v, torch.Tensor) else v
                                                  for k, v in t.items()} for t in targets]


def synchronize(device: torch.device) -> None:
    """Wait for DEVICE's queued kernels (a GPU's), so that a clock read next counts them."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_arms(args, saved_config: dict | None = None) -> tuple:
    """attnkit's preset and each --rtdetr kind on the same data, each with its recipe and clock: (config, amp, arms).
    SAVED_CONFIG: the attnkit config of the contest this one goes on with (its defaults, whatever they are now)."""
    from attnkit.detection.config import DetectionConfig
    from attnkit.training.precision import resolve_amp

    torch.set_num_threads(args.threads)
    model_config, train_config = preset_at(args.preset, args.size, args.set)
    saved = DetectionConfig.from_dict(saved_config) if saved_config is not None else None
    train_config = saved.train if saved else train_config
    root = write_dataset(args.dataset, args.out / "data", args.quick)
    train_set, val_set = open_splits(root, train_config)
    classes = train_set.coco.num_classes
    changes = {"num_classes": classes, **({"num_queries": args.queries} if args.queries else {})}
    config = saved or DetectionConfig(replace(model_config, **changes), train_config, preset=args.preset)
    device = torch.device(args.device)
    amp = resolve_amp(train_config.amp, device) == "bf16"
    budget_s = 60 * args.minutes
    arms: list[Arm] = [AttnkitArm(config, train_set, val_set, budget_s, amp, device),
                       *(RtdetrArm(kind, classes, rtdetr_queries(args.size), train_set, val_set,
                                   train_config.batch_size, train_config.seed, budget_s, amp, device,
                                   backbone_lr=args.backbone_lr) for kind in args.rtdetr)]
    for arm in arms:
        if args.clock == "cpu":
            arm.use_cpu_clock(args.threads)
        print(f"{arm.name}: {parameters(arm.model) / 1e6:.2f}M parameters", file=sys.stderr)
    return config, amp, arms


def contest(args) -> dict:
    """All arms, alternating in chunks; AP of each every --eval-every minutes of its own training time."""
    saved = contest_state_path(args)
    if not args.resume and saved.exists():  # never overwritten by a new contest
        print(f"error: {saved} holds a contest with these settings, cut at {load_contest_minutes(saved)} budget "
              "minutes; --resume goes on with it (or delete the file to start over)", file=sys.stderr)
        sys.exit(2)
    state = load_contest(args, saved) if args.resume else None
    config, amp, arms = build_arms(args, state["attnkit_config"] if state else None)
    budget_s = arms[0].budget_s
    turn, resumed = restore_contest(state, saved, arms) if state else (0, [])
    every_s = 60 * args.eval_every
    partial = args.out / f"partial_{contest_name(args)}_{os.getpid()}.json"
    print(f"points so far: {partial}", file=sys.stderr)
    while any(arm.spent < budget_s for arm in arms):
        arm = arms[turn % len(arms)]
        turn += 1
        if arm.spent >= budget_s:
            continue
        next_eval = (math.floor(arm.spent / every_s + 1e-9) + 1) * every_s
        arm.train_for(min(args.chunk, next_eval - arm.spent))
        if arm.spent >= next_eval - 1e-6 or arm.spent >= budget_s:
            point = {"minutes": round(arm.spent / 60, 2), "steps": arm.steps, **arm.evaluate()}
            arm.points.append(point)
            print(f"{time.strftime('%H:%M:%S')} {arm.name}: {json.dumps(point)}", file=sys.stderr)
            partial.write_text(json.dumps(contest_result(args, config, amp, arms, resumed)) + "\n")  # kept if cut
            save_contest(saved, args, config, turn, arms, resumed, partial.name)  # and can go on (--resume)
    result = contest_result(args, config, amp, arms, resumed)
    # done: the points so far and the saved contest, those of the runs it went on from (all in the result), and
    # the states a killed run left half-written
    cut = [args.out / r["points"] for r in resumed if r.get("points")]
    for leftover in [partial, saved, *cut, *args.out.glob(f".{saved.name}.tmp-*")]:
        leftover.unlink(missing_ok=True)
    print("\n".join(contest_table(result)))
    return result


# the settings a resumed contest must share with the one it goes on with
SETTINGS = ("dataset", "size", "preset", "queries", "set", "minutes", "eval_every", "chunk", "clock", "device",
            "rtdetr", "backbone_lr", "threads", "quick")


def contest_settings(args) -> dict:
    """SETTINGS as the contest runs them: the RT-DETR backbone's lr resolved where all kinds have the same."""
    settings = {key: getattr(args, key) for key in SETTINGS}
    if args.backbone_lr is None and len({RECIPES[kind].lr for kind in args.rtdetr}) == 1:
        settings["backbone_lr"] = RECIPES[args.rtdetr[0]].lr
    return settings


def contest_state_path(args) -> Path:
    return args.out / f"contest_{contest_name(args)}.safetensors"


def contest_name(args) -> str:
    return f"{args.dataset}_{args.size}_{args.preset}_{'+'.join(args.rtdetr)}"


def save_contest(path: Path, args, config, turn: int, arms: list[Arm], resumed: list[dict], points: str = "") -> None:
    """Everything the contest needs to go on (`restore_contest`), written without pickle, atomically: attnkit's
    CONFIG too, so that a default changed since does not change a contest half-way; POINTS: the file in --out
    where this run writes its points so far."""
    from attnkit.storage.checkpoint import save_training_state
    from attnkit.training.rng import capture_rng

    save_training_state(path, {"settings": contest_settings(args), "attnkit_config": config.to_dict(), "turn": turn,
                               "resumed": resumed, "points": points, "rng": capture_rng(),
                               "arms": {arm.name: arm.state() for arm in arms}})


def load_contest(args, path: Path) -> dict:
    """The contest saved at PATH. Exits with a message (status 2) if there is none, it was run with other settings
    or it predates the saved attnkit config."""
    from attnkit.storage.checkpoint import load_training_state

    if not path.exists():
        print(f"error: --resume: no contest saved as {path}", file=sys.stderr)
        sys.exit(2)
    state = load_training_state(path)
    settings = contest_settings(args)
    differ = {key: (value, settings[key]) for key, value in state["settings"].items()
              if key in settings and json.dumps(value) != json.dumps(settings[key])}
    if differ:
        print(f"error: --resume: {path} was run with other settings (saved, now): {differ}", file=sys.stderr)
        sys.exit(2)
    if "attnkit_config" not in state:
        print(f"error: --resume: {path} was saved without attnkit's config (an older version of this script)",
              file=sys.stderr)
        sys.exit(2)
    return state


def restore_contest(state: dict, path: Path, arms: list[Arm]) -> tuple[int, list[dict]]:
    """Each arm back where the saved contest STATE left it; the next turn and the resumptions so far (this one
    added)."""
    from attnkit.training.rng import restore_rng

    for arm in arms:
        arm.restore(state["arms"][arm.name])
    restore_rng(state["rng"])  # last: nothing above may draw from the restored generators
    resumed = [*state["resumed"], {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                   "minutes": {arm.name: round(arm.spent / 60, 2) for arm in arms},
                                   "points": state.get("points", "")}]  # the cut run's points, in this run's too
    print(f"resuming {path} at {resumed[-1]['minutes']} budget minutes", file=sys.stderr)
    return state["turn"], resumed


def load_contest_minutes(path: Path) -> dict:
    from attnkit.storage.checkpoint import load_training_state

    return {name: round(arm["spent"] / 60, 2) for name, arm in load_training_state(path)["arms"].items()}


def contest_result(args, config, amp: bool, arms: list[Arm], resumed: Sequence[dict] = ()) -> dict:
    """The contest's settings and each arm's points so far."""
    return {"kind": "train", "dataset": args.dataset, "size": args.size, "preset": args.preset,
            "rtdetr": args.rtdetr, "minutes": args.minutes, "chunk_s": args.chunk, "threads": args.threads,
            "amp": "bf16" if amp else "off", "clock": args.clock, "device": args.device,
            "rtdetr_queries": rtdetr_queries(args.size), "backbone_lr": contest_settings(args)["backbone_lr"],
            "queries": config.model.num_queries, "set": args.set,
            "recipes": {kind: RECIPES[kind]._asdict() for kind in args.rtdetr},
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "resumed": list(resumed),
            "arms": {arm.name: {"parameters": parameters(arm.model), "points": arm.points} for arm in arms}}


def contest_table(result: dict) -> list[str]:
    """attnkit's AP and steps at each point, and each RT-DETR's (the better of raw and EMA, as attnkit's with an
    EMA) with attnkit's ratio."""
    (a, ours), *others = result["arms"].items()
    lines = [f"{result['dataset']}, {result['size']} px, `{result['preset']}` ({ours['parameters'] / 1e6:.1f}M) vs "
             + ", ".join(f"{b} ({theirs['parameters'] / 1e6:.1f}M)" for b, theirs in others)
             + f", {result['minutes']} min each, {result['amp']}", "",
             f"| minutes | {a} AP (steps) | " + " | ".join(f"{b} AP (raw / EMA; steps) | ratio" for b, _ in others)
             + " |",
             "| ---: | ---: |" + " ---: | ---: |" * len(others)]
    for index, p in enumerate(ours["points"]):
        cells = []
        for _, theirs in others:
            q = theirs["points"][index] if index < len(theirs["points"]) else None
            cells += (["-", "-"] if q is None else
                      [f"{q['AP']:.3f} ({q['AP_raw']:.3f} / {q['AP_ema']:.3f}; {q['steps']})",
                       f"{p['AP'] / q['AP']:.1f}x" if q["AP"] > 0 else "-"])
        own = f" (raw {p['AP_raw']:.3f} / EMA {p['AP_ema']:.3f})" if "AP_ema" in p else ""
        lines.append(f"| {p['minutes']:.1f} | {p['AP']:.3f}{own} ({p['steps']}) | " + " | ".join(cells) + " |")
    return lines


# ------------------------------------------------------------------ latency
class RtdetrGraph(nn.Module):
    """RT-DETR's forward for export: sigmoid scores (batch, queries, classes) and boxes (batch, queries, 4)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(pixel_values=images)
        return out.logits.sigmoid(), out.pred_boxes


def export_onnx(name: str, model: nn.Module, path: Path, size: int) -> None:
    """attnkit's graph as `attnkit export onnx` writes it; RT-DETR's forward (RtdetrGraph); dynamic batch and size."""
    from attnkit.app.export.detector_graph import DetectorGraph
    from attnkit.app.export.onnx_export import export_graph

    images = torch.randn(2, 3, size, size)  # (batch, channels, height, width)
    axes = {"images": {0: "batch", 2: "height", 3: "width"}, "mask": {0: "batch", 1: "height", 2: "width"},
            "image_sizes": {0: "batch"}}
    if name.startswith("attnkit"):
        export_graph(DetectorGraph(model), (images, torch.zeros(2, size, size, dtype=torch.bool),
                                            torch.tensor([[size, size]] * 2)), path,
                     ["images", "mask", "image_sizes"], ["scores", "labels", "boxes"], axes)
    else:  # the TorchScript exporter (transformers' RT-DETR traces; torch.export needs minutes more here)
        import contextlib
        import warnings

        with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
            warnings.simplefilter("ignore")
            torch.onnx.export(RtdetrGraph(model).eval(), (images,), str(path), input_names=["images"],
                              output_names=["scores", "boxes"], dynamic_axes={"images": axes["images"]},
                              opset_version=17, dynamo=False)


def latency(args) -> dict:
    """Milliseconds per call, forward only, in PyTorch (the models alternating call by call) and ONNX Runtime.

    RT-DETR runs with `rtdetr_queries(size)` queries (100 at 96 px); its ONNX graph is exported once per query
    count (the top-k is in the graph), attnkit's once; both with dynamic batch, height and width."""
    import onnxruntime

    from attnkit.detection.architectures import build_model
    from attnkit.detection.backbone import fold_batch_norms
    from attnkit.nn.onednn_linear import onednn_linears

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    # attnkit's models as `attnkit detect` runs them (Detector.from_run): the BatchNorms folded into the
    # convolutions, the Linears through oneDNN on the CPU
    device = torch.device(args.device)
    ours = {name: onednn_linears(fold_batch_norms(build_model(replace(preset_at(name, 96, args.set)[0],
                                                                      num_classes=5)))).to(device)
            for name in args.presets}
    theirs = {kind: build_rtdetr(kind, 5).eval().to(device) for kind in args.rtdetr_kinds}
    models = {**{f"attnkit {n}": m for n, m in ours.items()}, **theirs}
    rows: dict[str, dict] = {name: {"parameters": parameters(m)} for name, m in models.items()}
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
    sessions: dict[tuple[str, int], object] = {}
    folder = args.out / "graphs"  # the graphs timed, kept for a look (each run rewrites them)
    folder.mkdir(parents=True, exist_ok=True)

    def graph_path(name: str, size: int) -> Path:
        queries = 0 if name.startswith("attnkit") else rtdetr_queries(size)
        return folder / f"{name.replace(' ', '_')}_{queries}.onnx"

    def session(name: str, size: int):
        own = name.startswith("attnkit")
        queries = 0 if own else rtdetr_queries(size)
        if (name, queries) not in sessions:
            path = graph_path(name, size)
            started = time.perf_counter()
            try:
                export_onnx(name, models[name], path, 96 if own or queries < 300 else 320)
                sessions[(name, queries)] = onnxruntime.InferenceSession(str(path), options,
                                                                         providers=["CPUExecutionProvider"])
                print(f"exported {name} ({queries or ''} queries) in {time.perf_counter() - started:.0f} s",
                      file=sys.stderr)
            except Exception as error:  # noqa: BLE001 - reported in the table; PyTorch is still timed
                rows[name]["onnx_error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
                sessions[(name, queries)] = None
                print(f"{name}: ONNX export failed: {rows[name]['onnx_error']}", file=sys.stderr)
        return sessions[(name, queries)]

    for size in args.sizes:
        for model in theirs.values():
            model.config.num_queries = rtdetr_queries(size)  # read at every forward
        for batch in args.batches:
            images = torch.randn(batch, 3, size, size)
            mask = torch.zeros(batch, size, size, dtype=torch.bool)
            sizes = torch.tensor([[size, size]] * batch)
            calls, feeds = {}, {}
            on = (images.to(device), mask.to(device))
            for name, model in models.items():
                own = name.startswith("attnkit")
                calls[("torch", name)] = (lambda m=model, o=own, x=on: m(*x) if o else m(pixel_values=x[0]))
                if "onnx" in args.runtimes and (graph := session(name, size)) is not None:
                    feed = ({"images": images.numpy(), "mask": mask.numpy(), "image_sizes": sizes.numpy()} if own
                            else {"images": images.numpy()})
                    calls[("onnx", name)] = (lambda g=graph, f=feed: g.run(None, f))
                    feeds[name] = feed
            times: dict[tuple, list[float]] = {key: [] for key in calls}
            repeats = args.repeats if size * size * batch < 320 * 320 * 8 else max(3, args.repeats // 3)
            with torch.inference_mode():
                for key, call in list(calls.items()):  # warm-up; a graph that fails at this size is dropped
                    try:
                        call()
                    except Exception as error:  # noqa: BLE001
                        rows[key[1]][f"{key[0]} {size}px b{batch} error"] = str(error).splitlines()[0][:300]
                        del calls[key], times[key]
                time.sleep(0.2)  # the ONNX Runtime pools' threads (warmed up above) stop spinning
                for _ in range(repeats):  # PyTorch: the models alternate call by call
                    for key, call in calls.items():
                        if key[0] == "torch":
                            times[key].append(elapsed(call))
                sessions_in_turns({k: c for k, c in calls.items() if k[0] == "onnx"}, times, repeats)
            for (runtime, name), values in times.items():
                rows[name][f"{runtime} {size}px b{batch}"] = round(1000 * statistics.median(values), 2)
            for name, feed in feeds.items() if args.op_times else ():
                rows[name][f"op ms {size}px b{batch}"] = op_times(graph_path(name, size), feed, args.threads)
            print(f"timed {size} px batch {batch}", file=sys.stderr)
    result = {"kind": "latency", "threads": args.threads, "set": args.set,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}
    print("\n".join(latency_table(result, args) + (["", *op_table(result)] if args.op_times else [])))
    return result


def sessions_in_turns(calls: dict, times: dict, repeats: int, rounds: int = 3) -> None:
    """ONNX Runtime's CALLS timed one session at a time: a session's thread pool spins after each call, and in
    alternation it slowed the next session's call up to 3x. So each session in turn, after a warm-up call, makes a
    run of calls in a row; in ROUNDS, the order rotated, so that no session is always the one timed first after
    PyTorch's calls; REPEATS calls each in all (rounded up), appended to TIMES[key]."""
    keys = list(calls)
    for turn in range(rounds * len(keys)):
        key = keys[(turn + turn // len(keys)) % len(keys)]  # round r: the keys from the r-th on, then the rest
        time.sleep(0.2)  # the pool of the session before stops spinning
        calls[key]()
        times[key] += [elapsed(calls[key]) for _ in range(-(-repeats // rounds))]


def elapsed(call) -> float:
    """Seconds one CALL() takes, a GPU's kernels included."""
    start = time.perf_counter()
    call()
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def op_times(path: Path, feed: dict, threads: int, runs: int = 3) -> dict[str, float]:
    """Milliseconds per call that ONNX Runtime's kernels of each operator type take in graph PATH (its profiler's
    kernel times, summed, a mean over RUNS calls after a warm-up), longest first. The profile is deleted."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.enable_profiling, options.profile_file_prefix = True, str(path.with_suffix(""))
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    for _ in range(runs + 1):
        session.run(None, feed)
    profile = Path(session.end_profiling())
    events = json.loads(profile.read_text())
    profile.unlink()
    warm_up_end = min(e["ts"] + e["dur"] for e in events if e.get("name") == "model_run")
    totals: dict[str, float] = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") and event["ts"] >= warm_up_end:
            op = event["args"]["op_name"]
            totals[op] = totals.get(op, 0.0) + event["dur"] / 1000 / runs
    return {op: round(ms, 2) for op, ms in sorted(totals.items(), key=lambda item: -item[1])}


def op_table(result: dict) -> list[str]:
    """Per graph, size and batch: the kernels' total, the convolutions' part, and the longest other operators."""
    lines = ["| ONNX Runtime kernels, size, batch | graph | total ms | Conv ms (share) | longest others, ms |",
             "| --- | --- | ---: | ---: | --- |"]
    for name, row in result["rows"].items():
        for key, ops in row.items():
            if key.startswith("op ms "):
                total, conv = sum(ops.values()), ops.get("Conv", 0.0)
                others = ", ".join(f"{op} {ms:.1f}" for op, ms in list(ops.items())[:6] if op != "Conv")
                lines.append(f"| {key[6:]} | {name} | {total:.1f} | {conv:.1f} ({conv / total:.0%}) | {others} |")
    return lines


def latency_table(result: dict, args) -> list[str]:
    rows = result["rows"]
    names = list(rows)
    heads = [f"{n} ({rows[n]['parameters'] / 1e6:.1f}M) ms" for n in names]
    lines = [f"| runtime, size, batch | {' | '.join(heads)} | "
             + " | ".join(f"{names[0]} speed / {n}'s" for n in names[1:]) + " |",
             "| --- |" + " ---: |" * (2 * len(names) - 1)]
    for runtime in args.runtimes:
        for size in args.sizes:
            for batch in args.batches:
                key = f"{runtime} {size}px b{batch}"
                values = [rows[n].get(key) for n in names]
                cells = [f"{v:.1f}" if v is not None else "-" for v in values]
                ratios = [f"{v / values[0]:.2f}x" if v is not None and values[0] else "-" for v in values[1:]]
                lines.append(f"| {runtime}, {size} px, batch {batch} | {' | '.join(cells)} | {' | '.join(ratios)} |")
    return lines


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("train", "latency"))
    parser.add_argument("--dataset", default="shapes", choices=("shapes", "marks", "crowd"))
    parser.add_argument("--size", type=int, default=96, help="image size (shortest side) in training and validation")
    parser.add_argument("--preset", default="small", help="attnkit's preset (its model and recipe)")
    parser.add_argument("--queries", type=int, default=0, help="attnkit's queries (default: the preset's)")
    parser.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE",
                        help="attnkit's model fields changed, e.g. backbone_widths=[32,64,128,256]")
    parser.add_argument("--minutes", type=float, default=15.0, help="training minutes per arm")
    parser.add_argument("--eval-every", type=float, default=2.5, help="an arm's minutes between evaluations")
    parser.add_argument("--chunk", type=float, default=30.0, help="seconds of training per turn")
    parser.add_argument("--clock", default=None, choices=("cpu", "wall"),
                        help="what a budget minute is: cpu = 60 s of this process's CPU time per thread (robust to "
                             "a shared machine; the default on a CPU), wall = 60 s of wall-clock time (on a GPU)")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: models, batches and timings on a GPU "
                        "(ONNX Runtime is timed on the CPU only)")
    parser.add_argument("--rtdetr", nargs="+", default=["r18vd"], choices=RTDETR_KINDS,
                        help="train: the RT-DETR arms (several: each against the same attnkit arm, in one contest)")
    parser.add_argument("--backbone-lr", type=float, default=None,
                        help="RT-DETR's backbone lr (default: the rest's, from scratch; its configs' lower ones, "
                             "1e-5 for R18-vd, are for a pretrained backbone)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", type=int, nargs="+", default=[96, 320, 640])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--presets", nargs="+", default=["small"], help="latency: attnkit presets to time")
    parser.add_argument("--rtdetr-kinds", nargs="+", default=["r18vd", "shrunk"], choices=RTDETR_KINDS)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--runtimes", nargs="+", default=["torch", "onnx"], choices=("torch", "onnx"))
    parser.add_argument("--out", type=Path, default=Path("runs/detector_vs_rtdetr"))
    parser.add_argument("--op-times", action="store_true",
                        help="latency: also each ONNX graph's kernel time per operator type (ONNX Runtime's profiler)")
    parser.add_argument("--quick", action="store_true", help="small data, seconds: a check of the script")
    parser.add_argument("--resume", action="store_true",
                        help="train: go on with the contest saved in --out with these settings (cut, or stopped)")
    args = parser.parse_args(argv)
    args.rtdetr = list(dict.fromkeys(args.rtdetr))  # each kind once
    if args.device != "cpu":
        if args.clock == "cpu":  # a GPU's work is not the process's CPU time
            parser.error(f"--device {args.device}: a budget minute is wall-clock time (--clock wall)")
        args.clock = "wall"
        args.runtimes = [r for r in args.runtimes if r != "onnx"]  # ONNX Runtime's CPU provider only here
    args.clock = args.clock or "cpu"
    if args.quick:
        args.minutes, args.eval_every, args.chunk, args.sizes, args.repeats = 0.3, 0.15, 5, [96], 2
    return args


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = contest(args) if args.mode == "train" else latency(args)
    with (args.out / "results.json").open("a") as file:
        file.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
