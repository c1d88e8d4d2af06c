"""Detector inference speed: the backbone's weight layout, and `fast` against DETR at a preset's size.

    .venv/bin/python benchmarks/detector_inference.py            # both parts, on a quiet machine
    .venv/bin/python benchmarks/detector_inference.py --quick    # small sizes, few repeats: checks the script

Part 1, layout: the backbone's convolution weights channels-last (what eval mode gives them,
`attnkit.detection.backbone`) against contiguous (NCHW), two copies of each detector alternating call
by call in one process, eval mode under `torch.inference_mode`, random weights; then a training step
(forward, the set criterion, backward, fused AdamW step; bf16 autocast, batch 4, 96 px) in both layouts,
where training mode keeps them contiguous.
Part 2, `fast` / DETR: both built from one preset (default `detr-r50`, the paper's size) at one image
size, alternating. Medians after a warm-up call.
Part 3 (`--bound`, alone): how close a faster sampling kernel could bring `fast` to DETR at the `small` size.
`fast` with its deformable attention's sampling made free (the query and value projections still run, the
attention weights' softmax, the sampling locations and the bilinear sampling are skipped and the output
projection reads zeros), as the preset builds it (the ResNet stopping after C4) and with the ResNet run to
C5 as DETR's (`last_stage=5`), against DETR and both as they are; alternating, 96 px, batch 1 and 8.
Part 4 (`--last-stage`, alone): why `fast` stops the ResNet after C4 in the `small` preset. ResNet-18 in eval
mode run up to C3, C4 and C5 (96 px, batch 1 and 8), and `fast`'s training step as preset (to C4) against
the ResNet run to C5 (`last_stage=5`); alternating.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from dataclasses import replace

import torch

from attnkit.app.detection.recipe import criterion_of
from attnkit.detection.architectures import build_model
from attnkit.detection.config import DetectionConfig, preset, with_arch
from attnkit.detection.variants.multi_scale_deformable_attention import MultiScaleDeformableAttention
from attnkit.training.fused_optimizer import fused_options

LAYOUTS = {"nchw": torch.contiguous_format, "cl": torch.channels_last}


def in_both_layouts(model: torch.nn.Module, training: bool) -> dict[str, torch.nn.Module]:
    """MODEL and a copy in training or eval mode, their backbone weights laid out each way (after the mode
    change, which would lay them out for the mode)."""
    models = {"nchw": copy.deepcopy(model), "cl": model}
    for name, each in models.items():
        each.train(training)
        each.backbone[0].body.to(memory_format=LAYOUTS[name])
    return models


def median_ms(models: dict[str, torch.nn.Module], call, repeats: int) -> dict[str, float]:
    """Median milliseconds of CALL(model) for each model, alternating, after one warm-up call each."""
    times: dict[str, list[float]] = {name: [] for name in models}
    for round_ in range(repeats + 1):
        for name, model in models.items():
            started = time.perf_counter()
            call(model)
            if round_:
                times[name].append(1000 * (time.perf_counter() - started))
    return {name: statistics.median(t) for name, t in times.items()}


def inference_ms(models: dict[str, torch.nn.Module], size: int, batch: int, repeats: int) -> dict[str, float]:
    """Eval-mode models (as the caller laid them out), alternating."""
    images, mask = torch.randn(batch, 3, size, size), torch.zeros(batch, size, size, dtype=torch.bool)
    with torch.inference_mode():
        return median_ms(models, lambda m: m(images, mask), repeats)


def training_step_ms(models: dict[str, torch.nn.Module], config: DetectionConfig, repeats: int) -> dict[str, float]:
    """Training-mode models (as the caller laid them out) of CONFIG, its set criterion and each model's own fused
    AdamW, alternating; three random objects per image."""
    images, mask = torch.randn(4, 3, 96, 96), torch.zeros(4, 96, 96, dtype=torch.bool)
    targets = [{"labels": torch.randint(0, config.model.num_classes, (3,)),
                "boxes": torch.cat([torch.rand(3, 2) * 0.6 + 0.2, torch.rand(3, 2) * 0.2 + 0.1], -1)}
               for _ in range(len(images))]
    criterion = criterion_of(config)
    optimizers = {id(model): torch.optim.AdamW(model.parameters(), lr=1e-4, **fused_options("cpu"))
                  for model in models.values()}

    def step(model: torch.nn.Module) -> None:
        with torch.autocast("cpu", torch.bfloat16):
            loss = criterion(model(images, mask, targets), targets)["loss"]
        loss.backward()
        optimizers[id(model)].step()
        optimizers[id(model)].zero_grad()

    return median_ms(models, step, repeats)


def free_sampling(model: torch.nn.Module) -> torch.nn.Module:
    """MODEL with every deformable attention's sampling skipped: a lower bound for any kernel that samples."""
    def forward(self, query, reference, value, shapes, padding=None):
        for projection, inputs in ((self.value_proj, value), (self.sampling_offsets, query),
                                   (self.attention_weights, query)):
            projection(inputs)  # computed and dropped: what any sampling kernel would be given
        return self.output_proj(query.new_zeros(query.shape))

    for module in model.modules():
        if isinstance(module, MultiScaleDeformableAttention):
            module.forward = forward.__get__(module)
    return model


def sampling_bound(repeats: int) -> None:
    """Part 3: DETR, `fast`, and `fast` with free sampling, as preset and with the ResNet to C5; images/s, / DETR."""
    small = replace(preset("small")[0], num_classes=5)
    torch.manual_seed(0)
    models = {"DETR": build_model(with_arch(small, "detr")), "fast": build_model(small),
              "fast, free sampling": free_sampling(build_model(small)),
              "fast, ResNet to C5": build_model(replace(small, last_stage=5)),
              "fast, ResNet to C5, free sampling": free_sampling(build_model(replace(small, last_stage=5)))}
    for model in models.values():
        model.eval()
    print("| model (`small`, 96 px) | batch 1 images/s | / DETR | batch 8 images/s | / DETR |\n"
          "| --- | ---: | ---: | ---: | ---: |")
    speed = {batch: {name: 1000 * batch / ms for name, ms in inference_ms(models, 96, batch, repeats).items()}
             for batch in (1, 8)}
    for name in models:
        print(f"| {name} | " + " | ".join(f"{speed[b][name]:.1f} | {speed[b][name] / speed[b]['DETR']:.2f}x"
                                            for b in (1, 8)) + " |")


def last_stage_costs(repeats: int) -> None:
    """Part 4: the backbone's time up to each stage, and `fast`'s training step to C4 and to C5."""
    from attnkit.detection.backbone import Backbone

    body = Backbone("resnet18").eval().body

    def up_to(stage: str):
        def run(images: torch.Tensor) -> None:
            for name, module in body.items():
                images = module(images)
                if name == stage:
                    return
        return run

    calls = {f"to {level}": up_to(stage) for level, stage in (("C3", "layer2"), ("C4", "layer3"), ("C5", "layer4"))}
    for batch in (1, 8):
        images = torch.randn(batch, 3, 96, 96)
        with torch.inference_mode():
            ms = median_ms(calls, lambda run, images=images: run(images), repeats)
        print(f"ResNet-18, eval, 96 px, batch {batch}, ms: " + ", ".join(f"{k} {v:.2f}" for k, v in ms.items()))
    small, train = preset("small")
    small = replace(small, num_classes=5)
    torch.manual_seed(0)
    models = {"to C4 (preset)": build_model(small).train(), "to C5": build_model(replace(small, last_stage=5)).train()}
    ms = training_step_ms(models, DetectionConfig(small, train, preset="small"), repeats)
    print("fast training step (bf16 autocast, batch 4, 96 px, set criterion, optimizer step), ms: "
          + ", ".join(f"{k} {v:.1f}" for k, v in ms.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--paper-preset", default="detr-r50", help="preset of part 2 (and of the last layout row)")
    parser.add_argument("--paper-size", type=int, default=800)
    parser.add_argument("--paper-repeats", type=int, default=4)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--bound", action="store_true", help="part 3 alone: fast with free sampling")
    parser.add_argument("--last-stage", action="store_true", help="part 4 alone: the ResNet to C4 against to C5")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.paper_preset, args.paper_size, args.paper_repeats = 2, "small", 128, 1
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    if args.bound:
        return sampling_bound(args.repeats)
    if args.last_stage:
        return last_stage_costs(args.repeats)
    small = replace(preset("small")[0], num_classes=5)
    paper = preset(args.paper_preset)[0]
    print("| model, image, batch | NCHW weights ms | channels-last ms | speed-up |\n| --- | ---: | ---: | ---: |")
    rows = [(arch, small, "small", size, batch, args.repeats) for size, batch in ((96, 1), (96, 8), (384, 1))
            for arch in ("detr", "fast")] + [("detr", paper, args.paper_preset, args.paper_size, 1, args.paper_repeats)]
    for arch, config, name, size, batch, repeats in rows:
        ms = inference_ms(in_both_layouts(build_model(with_arch(config, arch)), training=False), size, batch,
                          repeats)
        print(f"| {arch} `{name}`, {size} px, {batch} | {ms['nchw']:.1f} | {ms['cl']:.1f} | "
              f"{ms['nchw'] / ms['cl']:.2f}x |", flush=True)
    print("\ntraining step (bf16 autocast, batch 4, 96 px, set criterion, optimizer step), ms: NCHW weights / "
          "channels-last")
    for arch in ("detr", "fast"):
        torch.manual_seed(0)
        config = DetectionConfig(with_arch(small, arch), preset("small")[1], preset="small")
        ms = training_step_ms(in_both_layouts(build_model(config.model), training=True), config, args.repeats)
        print(f"  {arch}: {ms['nchw']:.1f} / {ms['cl']:.1f}", flush=True)
    models = {arch: build_model(with_arch(paper, arch)).eval() for arch in ("detr", "fast")}
    ms = inference_ms(models, args.paper_size, 1, args.paper_repeats)
    parameters = {arch: sum(p.numel() for p in m.parameters()) / 1e6 for arch, m in models.items()}
    print(f"\n`{args.paper_preset}` preset, {args.paper_size} px, batch 1: DETR {ms['detr'] / 1000:.2f} s "
          f"({parameters['detr']:.1f}M parameters), fast {ms['fast'] / 1000:.2f} s ({parameters['fast']:.1f}M): "
          f"fast / DETR speed {ms['detr'] / ms['fast']:.2f}x")


if __name__ == "__main__":
    main()
