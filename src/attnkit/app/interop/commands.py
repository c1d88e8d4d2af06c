"""Command line: `attnkit import detr PATH`, `attnkit import marian DIR`, `attnkit export hf RUN`."""

from __future__ import annotations

from pathlib import Path

import typer

from attnkit.app.cli import app
from attnkit.errors import require_extra, user_errors

import_app = typer.Typer(no_args_is_help=True, help="Turn a model trained elsewhere into an attnkit run folder.")
app.add_typer(import_app, name="import")
try:  # one `export` group for every format: join the one attnkit.app.export defines (onnx), if present
    from attnkit.app.export.commands import export_app
except ImportError:
    export_app = typer.Typer(no_args_is_help=True, help="Write a run folder in another project's format.")
    app.add_typer(export_app, name="export")


@import_app.command("detr")
def import_detr(
    path: str = typer.Argument(..., help="A facebookresearch/detr .pth checkpoint, a Hugging Face "
                                         "DetrForObjectDetection folder (config.json + safetensors), or a Hub id "
                                         "(facebook/detr-resnet-50; needs attnkit[hub])."),
    out: Path = typer.Option(..., "--out", help="Detection run folder to write."),
    heads: int = typer.Option(None, "--heads", help="Attention heads (not stored in official checkpoints; "
                                                     "default 8, or the folder's config)."),
    dc5: bool = typer.Option(None, "--dc5/--no-dc5", help="Dilated last stage (default: from the file name, "
                                                          "or the folder's config)."),
) -> None:
    """Import a trained DETR; the run works with `detect`, `eval detection` and `export hf`."""
    with user_errors():
        from attnkit.app.interop.detr_import import import_detr as run_import
        from attnkit.app.interop.pretrained import local_source

        run = run_import(local_source(path), out, heads, dc5)
        model = run.config["model"]
        backbone = model["backbone"] if model["backbone"] != "resnet" else (
            f"ResNet ({model['backbone_block']} blocks {model['backbone_depths']}, widths {model['backbone_widths']})")
        grey = " greyscale" if model.get("num_channels") == 1 else ""
        print(f"imported{grey} DETR {backbone}{' DC5' if model['dilation'] else ''}: {model['num_classes']} "
              f"classes, {model['num_queries']} queries -> {run.path}")


@import_app.command("marian")
def import_marian(
    folder: str = typer.Argument(..., help="A Hugging Face MarianMT folder (config.json, weights, source.spm, "
                                           "target.spm, vocab.json), or a Hub id such as Helsinki-NLP/opus-mt-en-de "
                                           "(needs attnkit[hub])."),
    out: Path = typer.Option(..., "--out", help="Translation run folder to write."),
) -> None:
    """Import a Marian translation model; the run works with `translate`, `eval translation` and `export hf`."""
    with user_errors():
        from attnkit.app.interop.marian_import import import_marian as run_import
        from attnkit.app.interop.pretrained import local_source

        run = run_import(local_source(folder), out)
        model = run.config["model"]
        print(f"imported Marian: d_model {model['d_model']}, {model['num_encoder_layers']}+"
              f"{model['num_decoder_layers']} layers, vocabulary {model['target_vocab_size']} -> {run.path}")


@export_app.command("hf")
def export_hf(
    run: Path = typer.Argument(..., help="A detection (DETR) or translation (Transformer) run folder."),
    out: Path = typer.Option(..., "--out", help="Folder to write; `from_pretrained(OUT)` loads it."),
    weights: str = typer.Option("best", "--weights", help="best, last, average or ema."),
) -> None:
    """Export a run for Hugging Face transformers (DetrForObjectDetection or MarianMTModel)."""
    with user_errors():
        require_extra("hf", ["transformers"], "attnkit export hf")
        from attnkit.app.interop.hf_export import export_hf as run_export

        print(f"exported {run} -> {run_export(run, out, weights)}")
