"""int8 against float32, PyTorch (dynamic quantization) and ONNX Runtime (its dynamic quantizer), on trained runs.

    .venv/bin/python benchmarks/int8.py --translation RUN [--data numbers:de] [--sentences 200] [--chunk 20]
    .venv/bin/python benchmarks/int8.py --detection RUN [--rounds 5]

Translation: the run's test split, beam 4, through four arms (pytorch, pytorch int8, onnxruntime,
onnxruntime int8), ALTERNATING in chunks of CHUNK sentences in one process, so that all arms see
the same machine load; BLEU, chrF, exact match, how many outputs equal float32 PyTorch's, and
sentences/s with the ratio to float32 PyTorch. Detection: COCO AP on the run's validation split
(each query's best class, as `attnkit detect` and the ONNX graph give them) and images/s at batch
1 and 8, the arms alternating per round. Prints Markdown tables for BENCHMARKS.md ("int8").
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch


def translation_table(run: Path, data: str, folder: Path, sentences: int, chunk: int, threads: int) -> list[str]:
    from attnkit.app.export.int8 import quantize_export
    from attnkit.app.export.onnx_export import export_run
    from attnkit.app.export.ort_translator import OrtTranslator
    from attnkit.nn.quantize import int8_share
    from attnkit.translation.data import load_splits
    from attnkit.translation.evaluate import score
    from attnkit.translation.translator import Translator

    export_run(run, folder)
    quantize_export(folder)
    fp32 = Translator.from_run(run, device="cpu")
    arms = {"pytorch float32": fp32, "pytorch int8": Translator.from_run(run, quantize="int8"),
            "onnxruntime float32": OrtTranslator(folder, threads), "onnxruntime int8": OrtTranslator(folder, threads,
                                                                                                    "int8")}
    test = load_splits(data, None, fp32.config.source_lang, fp32.config.target_lang,
                       needed=("test",))["test"]
    pairs = test.pairs[:sentences]
    outputs: dict[str, list[str]] = defaultdict(list)
    seconds: dict[str, float] = defaultdict(float)
    for arm in arms.values():
        arm.translate([pairs[0].source], beam_size=4)  # warm-up
    for start in range(0, len(pairs), chunk):
        texts = [p.source for p in pairs[start:start + chunk]]
        for name, arm in arms.items():
            began = time.perf_counter()
            outputs[name] += arm.translate(texts, beam_size=4)
            seconds[name] += time.perf_counter() - began
    references = [p.target for p in pairs]
    base = len(pairs) / seconds["pytorch float32"]
    rows = [f"int8 share of the projection weights (PyTorch): {int8_share(arms['pytorch int8'].model):.2f}", "",
            "| arm | BLEU | chrF | exact match % | same as float32 PyTorch | sentences/s | x float32 PyTorch |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for name in arms:
        scores = score(outputs[name], references, fp32.config.target_lang).as_dict()
        same = sum(a == b for a, b in zip(outputs[name], outputs["pytorch float32"]))
        speed = len(pairs) / seconds[name]
        rows.append(f"| {name} | {scores['bleu']:.2f} | {scores['chrf']:.2f} | {scores['exact_match']:.1f} | "
                    f"{same}/{len(pairs)} | {speed:.1f} | {speed / base:.2f} |")
    return rows


def detection_table(run: Path, folder: Path, rounds: int, threads: int) -> list[str]:
    from attnkit.app.export.int8 import quantize_export
    from attnkit.app.export.onnx_export import export_run
    from attnkit.app.export.ort_detector import OrtDetector
    from attnkit.detection.detector import Detector
    from attnkit.detection.evaluate import coco_evaluate, predict_dataset, same_size_batches, to_coco_results
    from attnkit.detection.shapes import ShapesConfig
    from attnkit.detection.sources import open_split, split_paths
    from attnkit.detection.transforms import collate, eval_transforms

    export_run(run, folder)
    quantize_export(folder)
    fp32 = Detector.from_run(run, device="cpu")
    config = fp32.config
    dataset = open_split(split_paths(config.data, "val", run, ShapesConfig(**config.shapes) if config.shapes else
                                     ShapesConfig()),
                         eval_transforms(config.train.val_size, config.train.max_size, config.model.num_channels))
    torch_arms = {"pytorch float32": fp32.model, "pytorch int8": Detector.from_run(run, quantize="int8").model}
    ort_arms = {"onnxruntime float32": OrtDetector(folder, threads).session,
                "onnxruntime int8": OrtDetector(folder, threads, "int8").session}

    def run_arm(name: str, images: torch.Tensor, mask: torch.Tensor, sizes: torch.Tensor):
        if name in torch_arms:
            with torch.no_grad():
                return torch_arms[name](images, mask)
        return ort_arms[name].run(None, {"images": images.numpy(), "mask": mask.numpy(),
                                         "image_sizes": sizes.numpy()})

    rows = ["| arm | AP | AP50 | images/s, batch 1 | images/s, batch 8 | x float32 PyTorch (1, 8) |",
            "|---|---:|---:|---:|---:|---:|"]
    ap = {name: coco_evaluate(dataset.coco, predict_dataset(model, dataset, 8, one_per_query=True))
          for name, model in torch_arms.items()}
    for name in ort_arms:
        results: list[dict] = []
        for indices in same_size_batches(dataset, 8):
            images, mask, targets = collate([dataset[i] for i in indices])
            sizes = torch.stack([t["orig_size"] for t in targets])
            scores, labels, boxes = run_arm(name, images, mask, sizes)
            for target, *found in zip(targets, scores, labels, boxes):
                detection = dict(zip(("scores", "labels", "boxes"), map(torch.from_numpy, found)))
                results += to_coco_results(target["image_id"], detection, dataset.coco.category_ids)
        ap[name] = coco_evaluate(dataset.coco, results)
    speed: dict[tuple[str, int], float] = {}
    names = [*torch_arms, *ort_arms]
    for batch_size in (1, 8):
        batches = [collate([dataset[i] for i in indices]) for indices in same_size_batches(dataset, batch_size)]
        batches = [b for b in batches if len(b[2]) == batch_size][:max(2, 48 // batch_size)]
        inputs = [(images, mask, torch.stack([t["orig_size"] for t in targets])) for images, mask, targets in batches]
        for name in names:
            run_arm(name, *inputs[0])  # warm-up
        seconds: dict[str, float] = defaultdict(float)
        for _ in range(rounds):
            for name in names:  # alternating: every arm in every round
                began = time.perf_counter()
                for item in inputs:
                    run_arm(name, *item)
                seconds[name] += time.perf_counter() - began
        for name in names:
            speed[(name, batch_size)] = rounds * len(inputs) * batch_size / seconds[name]
    for name in names:
        ratios = ", ".join(f"{speed[(name, b)] / speed[('pytorch float32', b)]:.2f}" for b in (1, 8))
        rows.append(f"| {name} | {ap[name]['AP']:.4f} | {ap[name]['AP50']:.4f} | {speed[(name, 1)]:.1f} | "
                    f"{speed[(name, 8)]:.1f} | {ratios} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--translation", type=Path)
    parser.add_argument("--data", default="numbers:de", help="the translation run's data (its test split is used)")
    parser.add_argument("--detection", type=Path)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--chunk", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch and ONNX Runtime intra-op threads (on a busy machine, more starve torch)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        if args.translation:
            print("\n".join(translation_table(args.translation, args.data, Path(folder) / "tr", args.sentences,
                                              args.chunk, args.threads)))
        if args.detection:
            print("\n".join(detection_table(args.detection, Path(folder) / "det", args.rounds, args.threads)))


if __name__ == "__main__":
    main()
