"""Command line: `attnkit attention` (attention maps and positional-encoding pictures) and `attnkit report`."""

from __future__ import annotations

from pathlib import Path

import typer

from attnkit.app.cli import app
from attnkit.errors import ConfigError, user_errors


@app.command("attention")
def attention(
    run: Path = typer.Argument(None, help="A translation or detection run folder (not needed for --positional)."),
    out: Path = typer.Option(..., "--out", help="Folder for the PNG pictures."),
    text: list[str] = typer.Option([], "--text", help="Translation run: a source sentence (repeat for more)."),
    image: list[Path] = typer.Option([], "--image", help="Detection run: an image file (repeat for more)."),
    positional: str = typer.Option(None, "--positional", help="sinusoidal, learned, rotary or sine2d: draw the "
                                                              "encoding and the similarity of positions."),
    length: int = typer.Option(None, "--length", help="Positions drawn (default 50; sine2d: grid side, 16)."),
    d_model: int = typer.Option(128, "--d-model", help="Encoding size for --positional (default 128)."),
    threshold: float = typer.Option(0.7, "--threshold", help="Detection run: objects with at least this score."),
    weights: str = typer.Option("best", "--weights", help="best, last, average or ema."),
) -> None:
    """Draw what a model attends to: translation alignments, DETR's per-object attention (fast: its deformable
    attention's sampling points and proposals), or positional encodings."""
    with user_errors():
        if positional is not None:
            paths = [_positional(positional, run, out, length, d_model, weights)]
        elif run is None:
            raise ConfigError("give a RUN folder (with --text or --image), or --positional KIND")
        else:
            paths = _run_attention(run, out, text, image, threshold, weights)
        for path in paths:
            print(path)


@app.command("report")
def report(
    run: Path = typer.Argument(..., help="A run folder."),
    out: Path = typer.Option(None, "--out", help="HTML file to write (default: RUN/report.html)."),
    text: list[str] = typer.Option([], "--text", help="Translation run: show this sentence (repeat for more)."),
    image: list[Path] = typer.Option([], "--image", help="Detection run: show this image (repeat for more)."),
) -> None:
    """Write one self-contained HTML page for RUN: config, curves, metrics, sample predictions, timing."""
    with user_errors():
        from attnkit.app.visualize.report import write_report

        print(f"report: {write_report(run, texts=text, images=image, out=out)}")


def _run_attention(run: Path, out: Path, texts: list[str], images: list[Path], threshold: float,
                   weights: str) -> list[Path]:
    from attnkit.app.tasks import kind_of

    kind = kind_of(run)
    return kind.attention(kind.load(run, weights, "cpu"), out, texts, images, threshold)


def _positional(kind: str, run: Path | None, out: Path, length: int | None, d_model: int, weights: str) -> Path:
    from attnkit.app.visualize.positional import KINDS, plot_positional

    if kind not in KINDS:
        raise ConfigError(f"--positional must be one of {', '.join(KINDS)}, got {kind!r}")
    length = length if length is not None else (16 if kind == "sine2d" else 50)
    if length < 2 or d_model < 4 or d_model % 4:
        raise ConfigError(f"--length must be at least 2 and --d-model a positive multiple of 4 "
                          f"(got {length}, {d_model})")
    table, source = None, ""
    if kind == "learned" and run is not None:
        table, source = _learned_table(run, weights), f"trained, {run}"
        d_model = table.size(1)
        length = min(length, table.size(0))
    return plot_positional(kind, out / f"positional_{kind}.png", length, d_model, table, source)


def _learned_table(run: Path, weights: str):
    from attnkit.translation.translator import Translator

    translator = Translator.from_run(run, weights=weights, device="cpu")
    positions = getattr(translator.model, "positions", None)
    if positions is None or not hasattr(positions, "max_len"):
        kind = getattr(translator.config.model, "positional_encoding", "no")  # the RNN baseline has none
        raise ConfigError(f"{run} has {kind} positions, not a learned table")
    return positions.weight.detach()
