"""`fast` against DETR at the paper's size (`detr-r50` preset, 800 x 800, batch 1), and `fast` with some of its
fields changed (`--variant LABEL:FIELD=VALUE,...`), all alternating call by call in one process (the order
rotated each round), eval mode under `torch.inference_mode`, random weights, the BatchNorms folded into the
convolutions and the Linears through oneDNN (`--mkl-linears`: not) as `attnkit detect` runs a model; medians after
a warm-up call. `--every-key` adds `fast` as it ran
before its deformable attention sampled the keys first (`sampled_then_projected`): every key projected.

    .venv/bin/python benchmarks/fast_paper_size.py --rounds 6 --every-key \\
        --variant "C4-and-C5:encoder_levels=2"
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from attnkit import overrides
from attnkit.detection.architectures import build_model
from attnkit.detection.backbone import fold_batch_norms
from attnkit.detection.config import preset, with_arch
from attnkit.detection.variants import multi_scale_deformable_attention
from attnkit.nn.onednn_linear import onednn_linears


def variant(text: str) -> tuple[str, dict]:
    """"LABEL:FIELD=VALUE,FIELD=VALUE" -> (LABEL, {FIELD: VALUE}), values parsed as `--set` parses them."""
    label, _, assignments = text.partition(":")
    fields = dict(a.split("=", 1) for a in assignments.split(",") if a)
    return label, {k: overrides.parse_value(v) for k, v in fields.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=800)
    parser.add_argument("--preset", default="detr-r50")
    parser.add_argument("--variant", action="append", default=[], type=variant,
                        help="one more `fast` arm: LABEL:FIELD=VALUE,... (its config fields changed)")
    parser.add_argument("--every-key", action="store_true",
                        help="one more arm: `fast` with every key projected (sampling first never pays)")
    parser.add_argument("--mkl-linears", action="store_true",
                        help="every arm's Linears through PyTorch's own product (MKL), as before `onednn_linears`")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    config = preset(args.preset)[0]
    torch.manual_seed(0)
    def prepared(model: torch.nn.Module) -> torch.nn.Module:
        """As `Detector.from_run` runs a model: BatchNorms folded, Linears through oneDNN unless --mkl-linears."""
        model = fold_batch_norms(model)
        return model if args.mkl_linears else onednn_linears(model)

    arms = {arch: prepared(build_model(with_arch(config, arch))) for arch in ("detr", "fast")}
    for label, changes in args.variant:
        arms[f"fast, {label}"] = prepared(build_model(with_arch(config, "fast", **changes)))
    every_key = "fast, every key projected"
    if args.every_key:
        arms[every_key] = arms["fast"]
    images = torch.randn(1, 3, args.size, args.size)
    mask = torch.zeros(1, args.size, args.size, dtype=torch.bool)
    times: dict[str, list[float]] = {name: [] for name in arms}
    pays = multi_scale_deformable_attention.GATHER_PAYS
    with torch.inference_mode():
        for round_ in range(args.rounds + 1):
            names = list(arms)[round_ % len(arms):] + list(arms)[:round_ % len(arms)]  # each arm first in turn
            for name in names:  # (the arm after DETR was measured up to 1.4x slower: memory freed and re-faulted)
                multi_scale_deformable_attention.GATHER_PAYS = float("inf") if name == every_key else pays
                started = time.perf_counter()
                arms[name](images, mask)
                if round_:
                    times[name].append(time.perf_counter() - started)
    detr_s = statistics.median(times["detr"])
    print(f"\n| `{args.preset}`, {args.size} px, batch 1 | median ms (of {args.rounds}) | speed / DETR |\n"
          "| --- | ---: | ---: |")
    for name, seconds in times.items():
        print(f"| {name} | {1000 * statistics.median(seconds):.1f} | {detr_s / statistics.median(seconds):.2f}x |")


if __name__ == "__main__":
    main()
