"""Detection datasets as people have them on disk: COCO, YOLO (ultralytics) and Pascal VOC, found by looking.

`find_layout(path)` says which layout a folder has (or a YOLO `data.yaml` given as a file);
`Layout.source(split)` where a split's images and annotations are; `read_split(source)` reads it
into the `CocoAnnotations` the COCO reader gives (`attnkit.detection.data`), so nothing after it
knows the layout. Each layout is one module (coco.py, yolo.py, voc.py) with the same five
functions (`Format`): found_in, splits, locate, read (into a COCO instances document, checked
line by line) and write (the inverse, for `attnkit data convert`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from attnkit.detection.annotation_cache import cached_annotations
from attnkit.detection.data import CocoAnnotations, parse_annotations
from attnkit.detection.layouts import coco, voc, yolo
from attnkit.detection.layouts.problems import Problems
from attnkit.detection.layouts.source import SplitSource
from attnkit.errors import DataError

__all__ = ["FORMATS", "Format", "Layout", "SplitSource", "find_layout", "read_split"]

CopyImage = Callable[[Path, Path], None]  # (source file, destination file): copy or hard-link


class Format(Protocol):
    """What a layout module provides (coco.py, yolo.py, voc.py)."""

    def found_in(self, path: Path) -> bool: ...

    def splits(self, path: Path) -> list[str]: ...

    def locate(self, path: Path, split: str) -> SplitSource: ...

    def read(self, source: SplitSource, problems: Problems) -> dict[str, Any]: ...

    def write(self, splits: dict[str, tuple[Path, dict[str, Any]]], out: Path, copy: CopyImage) -> list[str]: ...


FORMATS: dict[str, Format] = {"coco": coco, "yolo": yolo, "voc": voc}
EXPECTED = ("COCO (annotations/instances_<split>.json and <split>/ images), YOLO (data.yaml with names, train "
            "and val), or Pascal VOC (Annotations/*.xml, JPEGImages/, ImageSets/Main/<split>.txt)")


@dataclass(frozen=True)
class Layout:
    """A dataset found on disk: its layout's name and where it is (a folder, or YOLO's data.yaml)."""
    name: str
    path: Path

    def splits(self) -> list[str]:
        """The splits present (train, val, test, ...)."""
        return FORMATS[self.name].splits(self.path)

    def source(self, split: str) -> SplitSource:
        """Where SPLIT's images and annotations are; DataError if the dataset has no such split."""
        return FORMATS[self.name].locate(self.path, split)


def find_layout(path: Path) -> Layout:
    """The layout of PATH, by what is in it (COCO first when a folder holds two); DataError naming what was expected."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: not a folder (nothing is there)")
    for name, format_ in FORMATS.items():
        if format_.found_in(path):
            return Layout(name, path)
    raise DataError(f"{path}: not a dataset layout attnkit knows; expected {EXPECTED}")


def read_split(source: SplitSource, keep_raw: bool = True, skip_bad: bool = False,
               problems: Problems | None = None) -> CocoAnnotations:
    """SOURCE's images and objects as `CocoAnnotations` (records, and the COCO document pycocotools evaluates).

    The first error stops the reading (a DataError naming the file and line), unless skip_bad (the
    bad lines and files are left out and listed in `skipped_entries`) or PROBLEMS collects them.
    A COCO file read for training (not keep_raw, no PROBLEMS) is parsed once and then read from
    its cached index (`attnkit.detection.annotation_cache`) while it does not change.
    """
    if source.layout == "coco" and not keep_raw and problems is None:
        return cached_annotations(source.annotations, skip_bad, lambda: _read_split(source, False, skip_bad, None))
    return _read_split(source, keep_raw, skip_bad, problems)


def _read_split(source: SplitSource, keep_raw: bool, skip_bad: bool, problems: Problems | None) -> CocoAnnotations:
    problems = problems if problems is not None else Problems(raise_errors=not skip_bad)
    document = FORMATS[source.layout].read(source, problems)
    coco = parse_annotations(source.annotations, document, keep_raw, skip_bad=not problems.raise_errors)
    for message in coco.skipped_entries:
        problems.error("", message)
    coco.skipped_entries = [str(problem) for problem in problems.of("error")]
    return coco
