"""ONNX Runtime against PyTorch latency on this CPU, for a detection run and a translation run.

    .venv/bin/python benchmarks/onnx_latency.py [--detection RUN] [--translation RUN] [--repeats 20] [--quick]

Exports each run (into a temporary folder), checks the outputs agree, then times one image
(detection: Detector.predict vs OrtDetector.predict) and one sentence (greedy translation) per
call, median over REPEATS after a warm-up; prints a Markdown table for BENCHMARKS.md. Without
runs (or with --quick) it uses the tiny random-weight runs of benchmarks/serve_load.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from PIL import Image


def median_ms(call, repeats: int) -> float:
    call()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def detection_rows(run: Path, folder: Path, repeats: int) -> list[str]:
    from attnkit.app.export.onnx_export import export_run
    from attnkit.app.export.ort_detector import OrtDetector
    from attnkit.detection.detector import Detector

    export_run(run, folder)
    image = Image.fromarray((torch.rand(480, 640, 3) * 255).to(torch.uint8).numpy())
    torch_model, ort_model = Detector.from_run(run, device="cpu"), OrtDetector(folder)
    expected, got = torch_model.predict(image, 0.0)[0], ort_model.predict(image, 0.0)[0]
    difference = float((expected.scores - got.scores).abs().max())
    return [f"| detection, one 640x480 image | {median_ms(lambda: torch_model.predict(image), repeats):.1f} | "
            f"{median_ms(lambda: ort_model.predict(image), repeats):.1f} | max score difference {difference:.1e} |"]


def translation_rows(run: Path, folder: Path, repeats: int) -> list[str]:
    from attnkit.app.export.onnx_export import export_run
    from attnkit.app.export.ort_translator import OrtTranslator
    from attnkit.translation.translator import Translator

    export_run(run, folder)
    text = ["one two three four five six seven"]
    torch_model, ort_model = Translator.from_run(run, device="cpu"), OrtTranslator(folder)
    same = torch_model.translate(text, beam_size=1) == ort_model.translate(text, beam_size=1)
    return [f"| translation, one sentence, greedy "
            f"| {median_ms(lambda: torch_model.translate(text, beam_size=1), repeats):.1f} | "
            f"{median_ms(lambda: ort_model.translate(text, beam_size=1), repeats):.1f} | same output: {same} |"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--detection", type=Path)
    parser.add_argument("--translation", type=Path)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="tiny random runs, 3 repeats")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from serve_load import tiny_runs

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        translation, detection = args.translation, args.detection
        if args.quick or not (translation or detection):
            translation, detection = tiny_runs(scratch / "runs")
        repeats = 3 if args.quick else args.repeats
        rows = ["| model | PyTorch ms | ONNX Runtime ms | check |", "|---|---|---|---|"]
        if detection:
            rows += detection_rows(detection, scratch / "detection_onnx", repeats)
        if translation:
            rows += translation_rows(translation, scratch / "translation_onnx", repeats)
    print(f"torch threads: {torch.get_num_threads()}")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
