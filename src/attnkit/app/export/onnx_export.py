"""`torch.onnx.export` of the detector and the translator, with dynamic axes, checked by `onnx.checker`.

An export folder holds the graphs and `export.json`: the run's config (class names, image sizes,
vocabulary), the opset, each graph's inputs and outputs, and the versions that wrote it. The
translator's tokenizer is copied beside it, so the folder is all ONNX Runtime inference needs.
"""

from __future__ import annotations

import contextlib
import json
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

from attnkit.errors import CheckpointError

OPSET = 18
MANIFEST = "export.json"
DETECTOR_FILE = "detector.onnx"
ENCODER_FILE = "encoder.onnx"
DECODER_FILE = "decoder_step.onnx"


def export_graph(module: nn.Module, args: tuple, path: Path, inputs: list[str], outputs: list[str],
                 dynamic_axes: dict[str, dict[int, str]], opset: int = OPSET) -> Path:
    """Export MODULE(*ARGS) to PATH (ONNX, opset OPSET) with the named dynamic axes; check the file.

    The axes go to torch.export as `Dim.DYNAMIC` per input, in the order of ARGS, so equal sizes
    (one batch across inputs) are found by tracing rather than by name. torch.onnx prints its
    progress on stdout: it goes to stderr, so that stdout keeps only the command's results.
    """
    import onnx

    path.parent.mkdir(parents=True, exist_ok=True)
    module.eval()
    with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore")
        dynamic = tuple(dict.fromkeys(dynamic_axes.get(name, {}), torch.export.Dim.DYNAMIC) or None
                        for name in inputs)
        torch.onnx.export(module, args, str(path), input_names=inputs, output_names=outputs,
                          dynamic_shapes=dynamic, opset_version=opset, dynamo=True)
    onnx.checker.check_model(str(path), full_check=True)
    return path


def write_manifest(folder: Path, manifest: dict) -> Path:
    import onnx
    import onnxruntime

    manifest = {**manifest, "opset": OPSET, "torch": torch.__version__, "onnx": onnx.__version__,
                "onnxruntime": onnxruntime.__version__}
    path = folder / MANIFEST
    path.write_text(json.dumps(manifest, indent=1))
    return path


def read_manifest(folder: Path, kind: str) -> dict:
    """The export folder's manifest; CheckpointError if it is missing, unreadable or of another kind."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise CheckpointError(f"{folder}: not an ONNX export folder (no {MANIFEST}; run `attnkit export onnx`)")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: not valid JSON ({error})") from None
    if manifest.get("kind") != kind:
        raise CheckpointError(f"{folder}: an ONNX export of a {manifest.get('kind')} model, not {kind}")
    return manifest


def export_run(run: Path, out: Path, weights: str = "best") -> dict:
    """Export a run folder (of any registered kind) into the folder OUT; returns the manifest."""
    from attnkit.app.tasks import kind_of

    kind = kind_of(run)
    return kind.export_onnx(kind.load(run, weights, "cpu"), out)

