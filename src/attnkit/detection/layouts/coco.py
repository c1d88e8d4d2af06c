"""The COCO layout (Lin et al. 2014): `annotations/instances_<split>.json` and a `<split>/` image folder.

Also as Roboflow exports it: `<split>/_annotations.coco.json` beside the split's images, `valid/` for val.

`bbox` is [x, y, width, height] in pixels. The reader adds what the entry-by-entry checks of
`attnkit.detection.data` cannot see: boxes outside the image, empty boxes, and boxes whose
numbers read as x1 y1 x2 y2 (x + width past the image's right edge, but x2 = width inside it).
JSON has no useful line numbers; an entry is named by its index: `annotations[12]`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from attnkit.detection.data import resolve_coco
from attnkit.detection.layouts.document import IMAGE_SUFFIXES
from attnkit.detection.layouts.problems import Problems
from attnkit.detection.layouts.source import SplitSource
from attnkit.errors import DataError

SLACK = 1.0  # pixels a box may pass the image's edge before it is reported (COCO's own boxes do, by fractions)


EXPORTED = "_annotations.coco.json"  # Roboflow's name, one per split folder
ALIASES = {"valid": "val"}


def found_in(path: Path) -> bool:
    return path.is_dir() and (any((path / "annotations").glob("instances_*.json")) or any(path.glob(f"*/{EXPORTED}")))


def splits(path: Path) -> list[str]:
    """The split of each `instances_<split>[year].json` (or `<split>/_annotations.coco.json`): train, val, test..."""
    names = [re.sub(r"\d{4}$", "", file.stem.removeprefix("instances_"))
             for file in sorted((path / "annotations").glob("instances_*.json"))]
    names += [ALIASES.get(file.parent.name, file.parent.name) for file in sorted(path.glob(f"*/{EXPORTED}"))]
    return sorted(dict.fromkeys(names), key=_split_order)


def _split_order(name: str) -> tuple[int, str]:
    order = ["train", "val", "test"]
    return (order.index(name) if name in order else len(order), name)


def locate(path: Path, split: str) -> SplitSource:
    for folder in [split] + [name for name, alias in ALIASES.items() if alias == split]:
        if not (path / "annotations").is_dir() and (path / folder / EXPORTED).is_file():
            return SplitSource("coco", path / folder, path / folder / EXPORTED, split)
    images, annotations = resolve_coco(path, split)
    return SplitSource("coco", images, annotations, split)


def read(source: SplitSource, problems: Problems) -> dict[str, Any]:
    """The instances file as loaded; warnings for boxes that are odd but usable; notes for unlisted images."""
    path = source.annotations
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: annotation file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: not valid JSON ({error})") from None
    if not problems.raise_errors and isinstance(document, dict):
        _check_boxes(path, document, problems)
        _unlisted_images(source, document, problems)
    return document


def _check_boxes(path: Path, document: dict[str, Any], problems: Problems) -> None:
    sizes: dict[Any, tuple[Any, Any]] = {entry.get("id"): (entry.get("width"), entry.get("height"))
                                         for entry in document.get("images") or [] if isinstance(entry, dict)}
    for index, entry in enumerate(document.get("annotations") or []):
        bbox = entry.get("bbox") if isinstance(entry, dict) else None
        width, height = sizes.get(entry.get("image_id"), (None, None)) if isinstance(entry, dict) else (None, None)
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(isinstance(v, (int, float)) for v in bbox)
                and isinstance(width, int) and isinstance(height, int)):
            continue  # malformed: an error of `attnkit.detection.data`
        for message in box_findings(bbox[0], bbox[1], bbox[2], bbox[3], width, height):
            problems.warning(str(path), f"annotations[{index}] (image id {entry['image_id']}) {message}")


def box_findings(x: float, y: float, w: float, h: float, width: int, height: int) -> list[str]:
    """What is odd about COCO box [x, y, w, h] in a WIDTH x HEIGHT image: empty, outside, written as x1 y1 x2 y2."""
    if w <= 0 or h <= 0:
        return [f"has an empty box {[x, y, w, h]} (width or height <= 0): left out"]
    if x >= -SLACK and y >= -SLACK and x + w <= width + SLACK and y + h <= height + SLACK:
        return []
    found = [f"box {[x, y, w, h]} reaches outside the {width}x{height} image: clamped"]
    if x < w <= width and y < h <= height:
        found.append(f"box {[x, y, w, h]} looks like x1 y1 x2 y2; COCO's bbox is x y width height")
    return found


def _unlisted_images(source: SplitSource, document: dict[str, Any], problems: Problems) -> None:
    listed = {entry.get("file_name") for entry in document.get("images") or [] if isinstance(entry, dict)}
    files = sorted(f for f in source.images.rglob("*") if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file())
    unlisted = [f for f in files if f.relative_to(source.images).as_posix() not in listed]
    if unlisted:
        problems.note(str(source.images), f"{len(unlisted)} files not in {source.annotations.name} "
                      f"(not used), e.g. {unlisted[0].name}")


def write(splits: dict[str, tuple[Path, dict[str, Any]]], out: Path, copy) -> list[str]:
    """OUT/annotations/instances_<split>.json and OUT/<split>/ for each split (the document as read)."""
    (out / "annotations").mkdir(parents=True)
    for split, (images, document) in splits.items():
        for entry in document["images"]:
            target = out / split / entry["file_name"]
            target.parent.mkdir(parents=True, exist_ok=True)
            copy(images / entry["file_name"], target)
        (out / split).mkdir(exist_ok=True)
        kept = {key: document[key] for key in ("info", "licenses", "images", "annotations", "categories")
                if key in document}
        (out / "annotations" / f"instances_{split}.json").write_text(json.dumps(kept), encoding="utf-8")
    return []
