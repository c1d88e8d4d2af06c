"""CUDA paths and GPU timings in one run: what to do when a GPU is at hand for a few minutes.

    python benchmarks/cuda_check.py                 # on a CUDA machine: every check, then the timings
    python benchmarks/cuda_check.py --device cpu    # the same code on a CPU, tiny sizes: checks the script

Checks (each prints `ok` or `FAIL` with the reason, and the run goes on):
1. attention: attnkit's MultiHeadAttention against torch.nn.MultiheadAttention with the same weights in
   fp32, bf16 and fp16 (forward and input gradient, against the fp32 formula); attnkit's SDPA call under each
   of torch's attention backends alone (flash, memory-efficient, cuDNN, math) without a mask, causal and
   with a padding mask: which backends run it, and their error.
2. kernels: the attention kernels a translation training step (`base` preset, bf16 autocast) launches,
   from torch.profiler.
3. detection: deformable sampling on the device against the CPU in fp32; `fast` and DETR training steps
   under bf16 autocast and under fp16 autocast with a gradient scaler (finite loss, finite gradients).
4. data loading: the detection training batches of `shapes` through 4 DataLoader workers with pinned
   memory against the main process: the same tensors, and images per second.
Timings (medians after warm-up, synchronised):
5. detector inference, `fast` / DETR alternating: `small` at 96 and 384 px, `detr-r50` at 800 px,
   batch 1 and 8, fp32 and bf16 autocast; in fp32 also `fast` through `attnkit detect --compile`'s
   compiled forward (Inductor, frozen weights, replayed as a CUDA graph).
6. detector training step (forward, set criterion, backward, fused AdamW), bf16 autocast.
7. translation training step of `base`: tokens/s, and MFU against this device's measured bf16 matmul rate.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import time
import traceback
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnkit.app.detection.recipe import criterion_of
from attnkit.detection.architectures import build_model as build_detector
from attnkit.detection.config import DetectionConfig, preset as detection_preset, with_arch
from attnkit.nn import MultiHeadAttention, reference_attention, scaled_dot_product_attention
from attnkit.nn.compiled import CompiledForward
from attnkit.training.fused_optimizer import fused_options

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}


def section(title: str):
    """Run the decorated check now, printing its title; a failure prints FAIL and its cause, and the run goes on."""
    def run(check):
        print(f"\n## {title}", flush=True)
        started = time.perf_counter()
        try:
            check()
        except Exception as error:  # noqa: BLE001 - a report: every check runs whatever the others did
            print(f"FAIL {type(error).__name__}: {error}")
            traceback.print_exc(limit=4)
        print(f"({time.perf_counter() - started:.1f} s)", flush=True)
        return check
    return run


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_ms(calls: dict[str, callable], repeats: int, device: torch.device) -> dict[str, float]:
    """Median milliseconds of each call, alternating call by call, after two warm-up rounds."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for round_ in range(repeats + 2):
        for name, call in calls.items():
            sync(device)
            started = time.perf_counter()
            call()
            sync(device)
            if round_ >= 2:
                times[name].append(1000 * (time.perf_counter() - started))
    return {name: statistics.median(t) for name, t in times.items()}


def autocast(device: torch.device, dtype: str):
    return contextlib.nullcontext() if dtype == "fp32" else torch.autocast(device.type, DTYPES[dtype])


def check_attention(device: torch.device, quick: bool) -> None:
    """attnkit vs torch's module (same weights) in each dtype; attnkit's SDPA call under each backend alone."""
    batch, length, d_model, heads = (2, 16, 64, 4) if quick else (4, 256, 512, 8)
    torch.manual_seed(0)
    ours = MultiHeadAttention(d_model, heads, batch_first=True).to(device)
    theirs = torch.nn.MultiheadAttention(d_model, heads, batch_first=True).to(device)
    theirs.load_state_dict(ours.state_dict())
    x32 = torch.randn(batch, length, d_model, device=device)
    padding = torch.zeros(batch, length, dtype=torch.bool, device=device)
    padding[0, length // 2:] = True
    exact, _ = ours(x32, x32, x32, key_padding_mask=padding, need_weights=True)  # the formula, fp32
    print("| dtype | max abs error attnkit | max abs error torch module | grad max abs diff attnkit vs torch |")
    print("| --- | ---: | ---: | ---: |")
    for name, dtype in DTYPES.items():
        if device.type == "cpu" and name == "fp16":
            continue
        a, b = ours.to(dtype), theirs.to(dtype)
        xa, xb = (x32.to(dtype).detach().clone().requires_grad_() for _ in range(2))
        out_a, _ = a(xa, xa, xa, key_padding_mask=padding, need_weights=False)
        out_b, _ = b(xb, xb, xb, key_padding_mask=padding, need_weights=False)
        out_a.float().square().mean().backward()
        out_b.float().square().mean().backward()
        print(f"| {name} | {(out_a.float() - exact).abs().max():.2e} | {(out_b.float() - exact).abs().max():.2e} | "
              f"{(xa.grad.float() - xb.grad.float()).abs().max():.2e} |")
    ours.float()
    q, k, v = (torch.randn(batch, heads, length, d_model // heads, device=device) for _ in range(3))
    allowed = ~padding[:, None, None, :]  # (batch, 1, 1, keys)
    cases = {"no mask": {}, "causal": {"is_causal": True}, "padding mask": {"mask": allowed}}
    print("\n| backend | dtype | " + " | ".join(cases) + " |\n| --- | --- |" + " --- |" * len(cases))
    for backend_name, backend in BACKENDS.items():
        for name in ("bf16", "fp16") if device.type == "cuda" else ("fp32",):
            cells = []
            for kwargs in cases.values():
                expected, _ = reference_attention(q, k, v, **kwargs)
                inputs = [t.to(DTYPES[name]).detach().clone().requires_grad_() for t in (q, k, v)]
                try:
                    with sdpa_kernel([backend]):
                        out = scaled_dot_product_attention(*inputs, **kwargs)
                        out.float().sum().backward()
                    cells.append(f"ok {(out.float() - expected).abs().max():.1e}")
                except RuntimeError as error:
                    unsupported = "No available kernel" in str(error) or "No viable backend" in str(error)
                    cells.append("not run" if unsupported else f"error: {str(error)[:60]}")
            print(f"| {backend_name} | {name} | " + " | ".join(cells) + " |")


def check_kernels(device: torch.device, quick: bool) -> None:
    """The CUDA kernels of one translation training step's attention, named by the profiler."""
    from torch.profiler import ProfilerActivity, profile

    from attnkit.translation.config import build_model, preset

    config = preset("tiny" if quick else "base")
    model = build_model(replace(config, model=replace(config.model, source_vocab_size=8000,
                                                      target_vocab_size=8000))).to(device)
    source = torch.randint(4, 8000, (32, 40), device=device)
    source[:8, 30:] = 0  # padding on some sentences, as in a real batch
    target = torch.randint(4, 8000, (32, 41), device=device)

    def step() -> None:
        with autocast(device, "bf16"):
            logits = model(source, target[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), target[:, 1:].flatten())
        loss.backward()

    step()
    sync(device)
    activities = [ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        step()
        sync(device)
    keys = ("flash", "fmha", "efficient", "attention", "cudnn", "softmax", "sdpa", "scaled_dot")
    counts: dict[str, int] = {}
    for event in prof.events():
        on_device = device.type == "cpu" or event.device_type.name == "CUDA"
        if on_device and any(key in event.name.lower() for key in keys):
            counts[event.name[:110]] = counts.get(event.name[:110], 0) + 1
    for name, count in sorted(counts.items(), key=lambda item: -item[1]):
        print(f"  {count:4d}x {name}")


def detection_configs(name: str, quick: bool) -> DetectionConfig:
    model, train = detection_preset("tiny" if quick else name)
    return DetectionConfig(replace(model, num_classes=5 if name == "small" else model.num_classes), train, preset=name)


def random_batch(batch: int, size: int, classes: int, device: torch.device):
    images = torch.randn(batch, 3, size, size, device=device)
    mask = torch.zeros(batch, size, size, dtype=torch.bool, device=device)
    targets = [{"labels": torch.randint(0, classes, (3,), device=device),
                "boxes": torch.cat([torch.rand(3, 2) * 0.6 + 0.2, torch.rand(3, 2) * 0.2 + 0.1], -1).to(device)}
               for _ in range(batch)]
    return images, mask, targets


def check_detection(device: torch.device, quick: bool) -> None:
    """Deformable sampling device vs CPU; training steps of both detectors under bf16 and fp16 autocast."""
    from attnkit.detection.variants.multi_scale_deformable_attention import deformable_sampling

    shapes = [(24, 24), (12, 12), (6, 6)]
    keys = sum(h * w for h, w in shapes)
    value = torch.randn(2, keys, 8, 32)
    locations, weights = torch.rand(2, 300, 8, 3, 4, 2), torch.rand(2, 300, 8, 3, 4).softmax(-1)
    on_cpu = deformable_sampling(value, shapes, locations, weights)
    on_device = deformable_sampling(value.to(device), shapes, locations.to(device), weights.to(device))
    print(f"deformable sampling, device vs CPU, fp32: max abs diff {(on_device.cpu() - on_cpu).abs().max():.2e}")
    for arch in ("fast", "detr"):
        for dtype in ("bf16", "fp16") if device.type == "cuda" else ("bf16",):
            torch.manual_seed(0)
            config = detection_configs("small", quick)
            config = replace(config, model=with_arch(config.model, arch))
            model = build_detector(config.model).to(device).train()
            criterion = criterion_of(config).to(device)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused_options(device))
            scaler = torch.amp.GradScaler(device.type, enabled=dtype == "fp16")
            images, mask, targets = random_batch(4, 96, config.model.num_classes, device)
            losses, skipped = [], 0
            for _ in range(20 if device.type == "cuda" else 3):
                with autocast(device, dtype):
                    loss = criterion(model(images, mask, targets), targets)["loss"]
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                finite = all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())
                skipped += not finite  # the scaler skips the step and halves its scale
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
                losses.append(loss.item())
            learns = all(v == v and abs(v) < 1e6 for v in losses) and losses[-1] < losses[0]
            print(f"{'ok' if learns else 'FAIL'} {arch} training steps under {dtype} autocast: loss {losses[0]:.3f} -> "
                  f"{losses[-1]:.3f} in {len(losses)} steps; steps skipped for non-finite gradients: {skipped}"
                  + (f", final loss scale {scaler.get_scale():.0f}" if scaler.is_enabled() else ""))


def check_loading(device: torch.device, quick: bool, out: Path) -> None:
    """`shapes` training batches through 4 pinned-memory workers against the main process."""
    from attnkit.app.detection.recipe import EpochBatches, epoch_refs, load_batch
    from attnkit.detection.shapes import ShapesConfig
    from attnkit.detection.sources import open_split, split_paths
    from attnkit.detection.transforms import train_transforms

    images = 64 if quick else 512
    shapes = ShapesConfig(train_images=images, val_images=8)
    t = detection_configs("small", quick).train
    train_set = open_split(split_paths("shapes", "train", out, shapes),
                           train_transforms(t.train_scales, t.max_size, t.flip, t.crop_min_fraction),
                           for_evaluation=False)
    refs = epoch_refs(len(train_set), 16, 0, 0)
    started = time.perf_counter()
    serial = [load_batch(train_set, ref) for ref in refs]
    serial_s = time.perf_counter() - started
    loader = torch.utils.data.DataLoader(EpochBatches(train_set, refs), batch_size=None, num_workers=4,
                                         pin_memory=device.type == "cuda")
    started = time.perf_counter()
    parallel = [(images.to(device, non_blocking=True), mask, targets) for images, mask, targets in loader]
    sync(device)
    parallel_s = time.perf_counter() - started
    same = all(torch.equal(a[0], b[0].cpu()) and torch.equal(a[1], b[1]) for a, b in zip(serial, parallel))
    print(f"{'ok' if same else 'FAIL'} {len(refs)} batches of 16: 4 workers give the same tensors: {same}; "
          f"images/s: main process {images / serial_s:.0f}, 4 workers (pinned, to {device.type}) "
          f"{images / parallel_s:.0f} (including the workers' start)")


def time_detector_inference(device: torch.device, quick: bool) -> None:
    """`fast` against DETR of one preset at one size, alternating, eval mode, inference_mode; in fp32 also `fast`
    compiled as `attnkit detect --compile` runs it (`CompiledForward`: frozen weights, on a GPU a CUDA graph)."""
    rows = [("small", 96, 1), ("small", 96, 8), ("small", 384, 1), ("small", 384, 8),
            ("detr-r50", 800, 1), ("detr-r50", 800, 8)]
    if quick:
        rows = [("small", 64, 1)]
    print("| preset, image, batch | dtype | DETR ms | fast ms | fast / DETR speed | fast compiled ms "
          "| compiled / DETR |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, size, batch in rows:
        config = detection_configs(name, quick).model
        models = {arch: build_detector(with_arch(config, arch)).to(device).eval() for arch in ("detr", "fast")}
        compiled = CompiledForward(copy.deepcopy(models["fast"]))  # its own copy: freezing folds the weights
        images, mask, _ = random_batch(batch, size, config.num_classes, device)
        for dtype in ("fp32", "bf16"):
            calls = {arch: (lambda m=m, x=images, on=mask: m(x, on)) for arch, m in models.items()}
            if dtype == "fp32":
                calls["compiled"] = lambda m=compiled, x=images, on=mask: m(x, on)
            with torch.inference_mode(), autocast(device, dtype):
                ms = median_ms(calls, 3 if quick else 20, device)
            extra = f"{ms['compiled']:.1f} | {ms['detr'] / ms['compiled']:.2f}x" if "compiled" in ms else "- | -"
            print(f"| {name}, {size} px, {batch} | {dtype} | {ms['detr']:.1f} | {ms['fast']:.1f} | "
                  f"{ms['detr'] / ms['fast']:.2f}x | {extra} |", flush=True)


def time_detector_training(device: torch.device, quick: bool) -> None:
    """One training step (bf16 autocast) of each detector, alternating."""
    rows = [("small", 96, 16), ("detr-r50", 512, 4)] if not quick else [("small", 64, 2)]
    print("| preset, image, batch | DETR ms/step | fast ms/step | fast / DETR speed |\n| --- | ---: | ---: | ---: |")
    for name, size, batch in rows:
        steps = {}
        for arch in ("detr", "fast"):
            torch.manual_seed(0)
            config = detection_configs(name, quick)
            config = replace(config, model=with_arch(config.model, arch))
            model = build_detector(config.model).to(device).train()
            criterion = criterion_of(config).to(device)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, **fused_options(device))
            images, mask, targets = random_batch(batch, size, config.model.num_classes, device)

            def step(model=model, criterion=criterion, optimizer=optimizer, images=images, mask=mask,
                     targets=targets) -> None:
                with autocast(device, "bf16"):
                    loss = criterion(model(images, mask, targets), targets)["loss"]
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            steps[arch] = step
        ms = median_ms(steps, 3 if quick else 10, device)
        print(f"| {name}, {size} px, {batch} | {ms['detr']:.1f} | {ms['fast']:.1f} | {ms['detr'] / ms['fast']:.2f}x |",
              flush=True)


def time_translation(device: torch.device, quick: bool) -> None:
    """Training step of the `base` Transformer under bf16 autocast: tokens/s and MFU against the bf16 matmul rate
    (the step and the peak of benchmarks/mfu.py)."""
    from mfu import matmul_peak, training_step

    name, batch, length, vocab = ("tiny", 4, 16, 1000) if quick else ("base", 128, 64, 32000)
    step, flops = training_step(name, batch, length, device, bf16=True, vocab=vocab, fused=True)
    ms = median_ms({"step": step}, 3 if quick else 20, device)["step"]
    size = 256 if quick else 8192
    peak = matmul_peak(size, 3 if quick else 10, device, torch.bfloat16)
    achieved = flops / (ms / 1000)
    print(f"`{name}`, batch {batch} x {length} tokens (source and target), bf16 autocast: {ms:.1f} ms/step, "
          f"{2 * batch * length / (ms / 1000):,.0f} tokens/s, {flops / 1e9:.0f} GFLOP/step, "
          f"{achieved / 1e12:.1f} TFLOP/s; bf16 matmul {size}^3: {peak / 1e12:.0f} TFLOP/s; "
          f"MFU {100 * achieved / peak:.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=Path("runs/benchmarks/cuda_check"))
    parser.add_argument("--only", nargs="+", type=int, help="run these numbered parts only")
    args = parser.parse_args()
    device, quick = torch.device(args.device), args.device == "cpu"
    print(f"torch {torch.__version__}, device {args.device}"
          + (f": {torch.cuda.get_device_name()}, capability {torch.cuda.get_device_capability()}"
             if device.type == "cuda" else " (tiny sizes: checks the script)"))
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # fp32 means fp32 here
    parts = {1: ("1. attention: attnkit vs torch, SDPA backends", lambda: check_attention(device, quick)),
             2: ("2. attention kernels of a translation training step", lambda: check_kernels(device, quick)),
             3: ("3. detection under mixed precision", lambda: check_detection(device, quick)),
             4: ("4. multi-worker data loading", lambda: check_loading(device, quick, args.out)),
             5: ("5. detector inference, fast / DETR", lambda: time_detector_inference(device, quick)),
             6: ("6. detector training step", lambda: time_detector_training(device, quick)),
             7: ("7. translation training step, MFU", lambda: time_translation(device, quick))}
    for number, (title, part) in parts.items():
        if args.only is None or number in args.only:
            section(title)(part)


if __name__ == "__main__":
    main()
