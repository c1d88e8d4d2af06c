"""int8 ONNX graphs beside the float ones: ONNX Runtime's dynamic quantization of an export folder.

`onnxruntime.quantization.quantize_dynamic` stores the weights of MatMul and Gemm nodes whose
weight is a constant as int8 (QInt8, one scale per tensor) and quantizes their activations per
call (uint8), as `attnkit.nn.quantize` does in PyTorch; unlike PyTorch's, it also reaches the
matrices that the model reads as tensors (attention's packed W^Q, W^K, W^V, a tied output
projection), since in the graph they are constants too. `detector.onnx` gets `detector.int8.onnx`;
the manifest lists them under "int8_graphs".
"""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

from attnkit.app.export.onnx_export import MANIFEST

QUANTIZED_OPS = ["MatMul", "Gemm"]


def int8_name(graph: str) -> str:
    """detector.onnx -> detector.int8.onnx."""
    return graph.removesuffix(".onnx") + ".int8.onnx"


def quantize_export(folder: Path) -> list[Path]:
    """Write the int8 twin of every graph in the export FOLDER (an `attnkit export onnx` folder); the paths."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = Path(folder)
    manifest = json.loads((folder / MANIFEST).read_text())
    written = []
    for graph in manifest["graphs"]:
        target = folder / int8_name(graph)
        with warnings.catch_warnings(), _quiet_root_logger():
            warnings.simplefilter("ignore")
            quantize_dynamic(folder / graph, target, op_types_to_quantize=QUANTIZED_OPS, weight_type=QuantType.QInt8)
        written.append(target)
    manifest["int8_graphs"] = [path.name for path in written]
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return written


def graph_file(folder: Path, manifest: dict, graph: str, quantize: str | None) -> Path:
    """FOLDER's GRAPH, or with quantize="int8" its int8 twin (written now if the folder has none)."""
    if quantize is None:
        return Path(folder) / graph
    if int8_name(graph) not in manifest.get("int8_graphs", []) or not (Path(folder) / int8_name(graph)).is_file():
        quantize_export(folder)
        manifest["int8_graphs"] = [int8_name(name) for name in manifest["graphs"]]
    return Path(folder) / int8_name(graph)


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """The quantizer logs its advice (pre-processing, shape inference) on the root logger: errors only, meanwhile."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)
