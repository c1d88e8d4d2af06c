"""Command line: `attnkit data check DIR` and `attnkit data convert DIR --to coco|yolo|voc --out OUT`.

Both find the layout themselves (COCO, YOLO, Pascal VOC: `attnkit.detection.layouts`). `check`
prints its report on stdout, the command's result, and exits 2 when the data cannot be trained on.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import typer

from attnkit.app.cli import data_app
from attnkit.errors import USER_ERROR_EXIT_CODE, user_errors

SHOWN = ("error", "warning", "note")


@data_app.command("check")
def data_check(
    path: Path = typer.Argument(..., help="A dataset folder (COCO, YOLO or Pascal VOC layout) or a YOLO data.yaml."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """The layout, images and boxes per split and class, box sizes, and every problem by file and line.

    Exit code 0 when the data can be trained on, 2 when an error was found.
    """
    with user_errors():
        from attnkit.detection.layouts.check import check_dataset

        report = check_dataset(path)
        if as_json:
            print(json.dumps({**asdict(report), "trainable": report.trainable}))
        else:
            print("\n".join(report_lines(report)))
    if not report.trainable:
        raise typer.Exit(USER_ERROR_EXIT_CODE)


def report_lines(report) -> list[str]:
    """The text form of a `CheckReport`: layout, a line per split and its classes, the problems by severity."""
    lines = [f"layout: {report.layout} ({report.path})"]
    for split in report.splits:
        sizes = ", ".join(f"{name} {count}" for name, count in split.sizes.items())
        lines.append(f"{split.split}: {split.images} images ({split.empty_images} without objects), "
                     f"{split.boxes} boxes ({sizes})")
        lines.append("  " + ", ".join(f"{name} {count}" for name, count in split.per_class.items()))
    for severity in SHOWN:
        found = [problem for problem in report.problems if problem.severity == severity]
        if found:
            lines.append(f"{severity}s ({len(found)}):")
            lines += [f"  {problem}" for problem in found]
    errors = sum(problem.severity == "error" for problem in report.problems)
    lines.append("result: can be trained on" if report.trainable else
                 f"result: cannot be trained on ({errors} error{'s' if errors != 1 else ''})")
    return lines


@data_app.command("convert")
def data_convert(
    path: Path = typer.Argument(..., help="A dataset folder (COCO, YOLO or Pascal VOC layout) or a YOLO data.yaml."),
    to: str = typer.Option(..., "--to", help="coco, yolo or voc."),
    out: Path = typer.Option(..., "--out", help="A new (or empty) folder to write."),
    copy: bool = typer.Option(False, "--copy", help="Copy the images (default: hard links where possible)."),
) -> None:
    """Write the dataset PATH in another layout to OUT: every split, its images, boxes and class names."""
    with user_errors():
        from attnkit.detection.layouts.convert import convert

        for line in convert(path, to, out, link=not copy):
            print(line)
        print(f"written: {out}")
