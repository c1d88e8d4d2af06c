"""`attnkit data convert`: a dataset in one layout written as another, with what the target can express.

Every split is read as training reads it (the first error stops the conversion, naming its file
and line), then written by the target layout's writer. Images are hard-linked (copied where a
link cannot be made, or when asked): their bytes are the source's. OUT must not exist or be
empty, and must not lie inside the source; it is written under a temporary name and renamed
when complete, so that a failed conversion leaves nothing half-written. The source is only read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from attnkit.detection.layouts import FORMATS, find_layout, read_split
from attnkit.errors import ConfigError


def convert(source: Path, to: str, out: Path, link: bool = True) -> list[str]:
    """Write the dataset at SOURCE to OUT in layout TO (coco, yolo, voc); the notes on what was left out."""
    if to not in FORMATS:
        raise ConfigError(f"--to must be one of {', '.join(FORMATS)}, got {to!r}")
    _check_out(Path(source), Path(out))
    layout = find_layout(Path(source))
    splits = {}
    for split in layout.splits():
        where = layout.source(split)
        coco = read_split(where)
        assert coco.raw is not None  # kept: read_split's keep_raw
        splits[split] = (where.images, coco.raw)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        notes = FORMATS[to].write(splits, partial / "data", _link if link else _copy)
        os.replace(partial / "data", out)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return [f"{layout.name} -> {to}: {', '.join(splits)}"] + notes


def _check_out(source: Path, out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out}: exists and is not empty; convert writes a new folder")
    root = source if source.is_dir() else source.parent
    if out.resolve().is_relative_to(root.resolve()):
        raise ConfigError(f"{out}: inside the dataset {root}; write the conversion elsewhere")


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed
        shutil.copyfile(source, target)


def _copy(source: Path, target: Path) -> None:
    shutil.copyfile(source, target)
