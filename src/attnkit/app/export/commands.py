"""Command line: `attnkit export onnx RUN --out FOLDER`."""

from __future__ import annotations

from pathlib import Path

import typer

from attnkit.app.cli import app
from attnkit.errors import require_extra, user_errors

export_app = typer.Typer(no_args_is_help=True, help="Export a trained model for other runtimes.")
app.add_typer(export_app, name="export")


@export_app.command("onnx")
def export_onnx(
    run: Path = typer.Argument(..., help="A detection or translation run folder."),
    out: Path = typer.Option(None, "--out", help="Export folder (default: RUN/onnx)."),
    weights: str = typer.Option("best", "--weights", help="best, last, average or ema."),
    int8: bool = typer.Option(False, "--int8", help="Also write each graph's int8 twin (NAME.int8.onnx: ONNX "
                              "Runtime's dynamic quantization of MatMul and Gemm weights)."),
) -> None:
    """Export RUN to ONNX: the detector with post-processing (one graph), or the translator's encoder and
    decoder step with its key/value cache (two graphs); each checked with onnx.checker; with --int8, int8 twins."""
    with user_errors():
        require_extra("onnx", ["onnx", "onnxscript", "onnxruntime"], "attnkit export onnx")
        from attnkit.app.export.onnx_export import MANIFEST, export_run

        out = out or Path(run) / "onnx"
        manifest = export_run(run, out, weights)
        for graph in manifest["graphs"]:
            print(f"{out / graph}: opset {manifest['opset']}, checked")
        if int8:
            from attnkit.app.export.int8 import quantize_export

            for path in quantize_export(out):
                print(f"{path}: int8 weights (MatMul, Gemm)")
        print(f"manifest: {out / MANIFEST}")
