"""Command line: `attnkit export ctranslate2 RUN --out DIR [--quantization int8]`."""

from __future__ import annotations

from pathlib import Path

import typer

from attnkit.app.export.commands import export_app
from attnkit.errors import require_extra, user_errors


@export_app.command("ctranslate2")
def export_ctranslate2(
    run: Path = typer.Argument(..., help="A translation run folder."),
    out: Path = typer.Option(None, "--out", help="Export folder (default: RUN/ctranslate2)."),
    weights: str = typer.Option("best", "--weights", help="best, last, average or ema."),
    quantization: str = typer.Option(None, "--quantization", help="Weights' type in the folder: int8, int8_float32, "
                                     "int8_float16, int8_bfloat16, int16, float16, bfloat16 or float32 (default: "
                                     "the run's, float32)."),
) -> None:
    """Export a translation run as a CTranslate2 model (ctranslate2.Translator loads the folder), with its
    tokenizer for transformers' AutoTokenizer; greedy search gives the run's translations."""
    with user_errors():
        require_extra("ctranslate2", ["ctranslate2"], "attnkit export ctranslate2")
        from attnkit.app.export.ctranslate2_export import export_ctranslate2 as write

        out = out or Path(run) / "ctranslate2"
        write(run, out, weights, quantization)
        print(f"{out}: CTranslate2 model{f' ({quantization})' if quantization else ''}, tokenizer.json, "
              f"tokenizer_config.json")
