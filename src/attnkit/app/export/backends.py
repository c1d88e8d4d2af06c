"""`--backend pytorch|onnxruntime` for `attnkit detect` and `attnkit translate`.

With onnxruntime, RUN may be a run folder (its export in RUN/onnx is written on first use, or
reused when it is newer than the weights) or an export folder written by `attnkit export onnx`.
`--quantize int8`: PyTorch's dynamic quantization (`attnkit.nn.quantize`), or the graphs' int8 twins
(`int8.py`).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from attnkit.errors import ConfigError, require_extra

BACKENDS = ("pytorch", "onnxruntime")


def export_folder(run: Path, weights: str) -> Path:
    """The ONNX export of RUN: RUN itself if it is one, else RUN/onnx (exported now if missing or stale)."""
    from attnkit.app.export.onnx_export import MANIFEST, export_run

    run = Path(run)
    if (run / MANIFEST).is_file():
        return run
    folder = run / "onnx"
    weights_file = run / "weights" / f"{weights}.safetensors"
    stale = weights_file.is_file() and (folder / MANIFEST).is_file() and \
        weights_file.stat().st_mtime > (folder / MANIFEST).stat().st_mtime
    if not (folder / MANIFEST).is_file() or stale or weights != "best":
        print(f"exporting {run} to ONNX in {folder} (once)", file=sys.stderr, flush=True)
        with contextlib.redirect_stdout(sys.stderr):  # results only on stdout, the export's progress too
            export_run(run, folder, weights)
    return folder


def ort_session(graph: Path | str, threads: int | None = None):
    """An ONNX Runtime CPU session on GRAPH whose idle threads sleep instead of spinning.

    Both backends run torch beside the session (preprocessing, beam bookkeeping), and torch's threads spin a
    while when idle, as ORT's do by default: with both spinning, a call took up to 3.4x as long (BENCHMARKS.md,
    "Deploy"), and translation 6-8 sentences/s against 56-76 on a busy machine ("Inference engines").
    """
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])


def load_detector(run: Path, weights: str, device, backend: str, quantize: str | None = None,
                  compile: bool = False):
    _check(backend, quantize)
    if compile and backend != "pytorch":
        raise ConfigError(f"--compile compiles the PyTorch model; --backend {backend} runs its own graph")
    if backend == "onnxruntime":
        from attnkit.app.export.ort_detector import OrtDetector

        return OrtDetector(export_folder(run, weights), quantize=quantize)
    from attnkit.detection.detector import Detector

    return Detector.from_run(run, weights, device, quantize=quantize, compile=compile)


def load_translator(run: Path, weights: str, backend: str, quantize: str | None = None):
    _check(backend, quantize)
    if backend == "onnxruntime":
        from attnkit.app.export.ort_translator import OrtTranslator

        return OrtTranslator(export_folder(run, weights), quantize=quantize)
    from attnkit.translation.translator import Translator

    return Translator.from_run(run, weights=weights, quantize=quantize)


def _check(backend: str, quantize: str | None) -> None:
    from attnkit.nn.quantize import QUANTIZATIONS

    if backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if quantize not in (None, *QUANTIZATIONS):
        raise ConfigError(f"--quantize must be {' or '.join(QUANTIZATIONS)} (or left out: float32), not {quantize!r}")
    if backend == "onnxruntime":
        require_extra("onnx", ["onnx", "onnxscript", "onnxruntime"], "--backend onnxruntime")
