"""The COCO instances document every reader produces and every writer consumes: the objects of each image.

Writers of layouts that store corners or normalised centres (YOLO, Pascal VOC) take the boxes as
the records do: clamped to the image, empty ones left out (`attnkit.detection.data`), but in
float64 and unrounded, so that a conversion loses nothing the records hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit.errors import DataError

IMAGE_SUFFIXES = {".bmp", ".jpeg", ".jpg", ".mpo", ".png", ".tif", ".tiff", ".webp"}  # image files, in folders


@dataclass(frozen=True)
class Box:
    """One object of an image: its label (0..K-1, categories sorted by id), corners in pixels, crowd or not."""
    label: int
    x0: float
    y0: float
    x1: float
    y1: float
    crowd: bool = False


def labels_of(document: dict[str, Any]) -> tuple[list[str], dict[int, int]]:
    """(names by label, category id -> label): categories sorted by id, as `CocoAnnotations` numbers them."""
    categories = sorted(document["categories"], key=lambda entry: entry["id"])
    return ([str(entry.get("name", entry["id"])) for entry in categories],
            {entry["id"]: label for label, entry in enumerate(categories)})


def boxes_by_image(document: dict[str, Any]) -> dict[int, list[Box]]:
    """image id -> its objects as corners clamped to the image; empty and non-finite boxes left out."""
    sizes = {entry["id"]: (entry["width"], entry["height"]) for entry in document["images"]}
    _, label_of = labels_of(document)
    boxes: dict[int, list[Box]] = {image_id: [] for image_id in sizes}
    for entry in document["annotations"]:
        width, height = sizes[entry["image_id"]]
        x, y, w, h = (float(v) for v in entry["bbox"])
        x0, y0 = min(max(x, 0.0), width), min(max(y, 0.0), height)
        x1, y1 = min(max(x + w, 0.0), width), min(max(y + h, 0.0), height)
        if all(math.isfinite(v) for v in (x, y, w, h)) and x1 > x0 and y1 > y0:
            boxes[entry["image_id"]].append(Box(label_of[entry["category_id"]], x0, y0, x1, y1,
                                                bool(entry.get("iscrowd", 0))))
    return boxes


def read_lines(path: Path) -> list[str]:
    """PATH's lines (UTF-8, a byte-order mark allowed); DataError naming the file if it is not text."""
    try:
        return path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text ({error})") from None


def number(value: float) -> str:
    """VALUE as written to a text file: an integer without a point, else 10 decimals (YOLO's normalised floats:
    1e-10 of the image, far below a pixel) without trailing zeros."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.10f}".rstrip("0").rstrip(".")


def unique_stems(files: list[str], where: Path) -> None:
    """DataError if two FILES (relative paths) differ only in their suffix: their label files would be one."""
    seen: dict[str, str] = {}
    for name in files:
        stem = name.rsplit(".", 1)[0]
        if stem in seen:
            raise DataError(f"{where}: {seen[stem]} and {name} would share one label file; rename one")
        seen[stem] = name
