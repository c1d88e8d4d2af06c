"""int8 ONNX graphs beside the float ones: ONNX Runtime's dynamic quantization of an export folder.

`onnxruntime.quantization.quantize_dynamic` stores the weights of MatMul and Gemm nodes whose
weight is a constant as int8 (QInt8, one scale per output column: rows of a tied embedding differ
in range) and quantizes their activations per call (uint8, one scale per tensor), as
`attnkit.nn.quantize` does in PyTorch. The weights use 7 of the 8 bits (`reduce_range`, as PyTorch's
x86 default does): on CPUs without VNNI, ONNX Runtime multiplies uint8 by int8 with AVX2's pairwise
multiply-add, whose 16-bit sums saturate with full-range weights. The quantizer takes a MatMul only when its
weight is an initializer, and in the exported graph some are computed from one: the tied output
projection is Transpose(embedding), a slice of the packed W^Q, W^K, W^V is Split(in_proj_weight).
So each graph is first constant-folded by ONNX Runtime's basic, provider-independent optimizations
(what `onnxruntime.quantization`'s pre-processing runs), which gives those products initializers of
their own; the embedding stays float for its Gather, the output projection becomes an int8 copy.
`detector.onnx` gets `detector.int8.onnx`; the manifest lists them under "int8_graphs".
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
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
        with warnings.catch_warnings(), _quiet_root_logger(), tempfile.TemporaryDirectory() as scratch:
            warnings.simplefilter("ignore")
            folded = fold_constants(folder / graph, Path(scratch) / graph)
            quantize_dynamic(folded, target, op_types_to_quantize=QUANTIZED_OPS, weight_type=QuantType.QInt8,
                             per_channel=True, reduce_range=True)
        written.append(target)
    manifest["int8_graphs"] = [path.name for path in written]
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return written


def fold_constants(graph: Path, out: Path) -> Path:
    """GRAPH with its constant subgraphs computed (ONNX Runtime's basic level), written to OUT; OUT."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(out)
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name", out.name + ".data")
    options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    onnxruntime.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    return out


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
