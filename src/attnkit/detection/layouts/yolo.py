"""The YOLO (ultralytics) layout: `data.yaml` naming the classes and the splits, one label file per image.

data.yaml: `names` (a list, or {id: name} with ids 0..K-1), `train`, `val` (and `test`): each an
image folder (searched recursively), a .txt list of image paths, or a list of those; relative to
`path` if given (itself relative to the yaml's folder), else to the yaml's folder. An image's
label file is its path with the last `images` folder replaced by `labels` and the suffix by
`.txt`: one object per line, `class cx cy w h`, normalised to [0, 1] by the image's size (a
segmentation line, `class x1 y1 x2 y2 ...`, gives its polygon's box). An image without a label
file has no objects. Class k becomes COCO category id k + 1, images are numbered 1..N in order.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from PIL import Image, UnidentifiedImageError

from attnkit.detection.layouts.document import (
    IMAGE_SUFFIXES,
    boxes_by_image,
    labels_of,
    number,
    read_lines,
    unique_stems,
)
from attnkit.detection.layouts.problems import Place, Problems, at, where
from attnkit.detection.layouts.source import SplitSource
from attnkit.errors import DataError

SPLITS = ("train", "val", "test")
EDGE = 1e-6  # normalised slack before a box counts as reaching outside the image


def yaml_file(path: Path) -> Path | None:
    """PATH itself if it is a .yaml file, else the folder's data.yaml (or data.yml, or its only .yaml)."""
    if path.is_file():
        return path if path.suffix in (".yaml", ".yml") else None
    for name in ("data.yaml", "data.yml"):
        if (path / name).is_file():
            return path / name
    candidates = [f for f in sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml")) if _names_classes(f)]
    return candidates[0] if len(candidates) == 1 else None


def _names_classes(file: Path) -> bool:
    """Whether FILE is a YAML mapping with `names` (a dataset's yaml, not another tool's)."""
    try:
        loaded = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, OSError):
        return False
    return isinstance(loaded, dict) and "names" in loaded


def found_in(path: Path) -> bool:
    return yaml_file(path) is not None


def config(path: Path) -> tuple[Path, dict[str, Any]]:
    """(the yaml file, its mapping); DataError naming the file and line of a YAML error."""
    file = yaml_file(path)
    if file is None:
        raise DataError(f"{path}: no data.yaml")
    try:
        loaded = yaml.safe_load(file.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise DataError(f"{where(file, line)}: not valid YAML ({getattr(error, 'problem', None) or error})") from None
    except UnicodeDecodeError as error:
        raise DataError(f"{file}: not UTF-8 text ({error})") from None
    if not isinstance(loaded, dict):
        raise DataError(f"{file}: expected a mapping with names, train and val")
    return file, loaded


def class_names(file: Path, loaded: dict[str, Any]) -> list[str]:
    """`names` as a list: given as a list, or as {id: name} with the ids 0..K-1."""
    names = loaded.get("names")
    if isinstance(names, dict):
        if sorted(names) != list(range(len(names))):
            raise DataError(f"{file}: 'names' must have the ids 0..{len(names) - 1}, got {sorted(names)}")
        names = [names[k] for k in range(len(names))]
    if not isinstance(names, list) or not names:
        raise DataError(f"{file}: 'names' must be a non-empty list of class names, or {{id: name}}")
    if loaded.get("nc") is not None and loaded["nc"] != len(names):
        raise DataError(f"{file}: 'nc' is {loaded['nc']} but 'names' has {len(names)} classes")
    return [str(name) for name in names]


def splits(path: Path) -> list[str]:
    _, loaded = config(path)
    return [split for split in SPLITS if loaded.get(split)]


def locate(path: Path, split: str) -> SplitSource:
    file, loaded = config(path)
    files = image_files(file, loaded, split)
    root = Path(os.path.commonpath([f.parent for f in files]))
    return SplitSource("yolo", root, file, split)


def image_files(file: Path, loaded: dict[str, Any], split: str) -> list[Path]:
    """The images of SPLIT, in order: each folder's sorted, each list's as listed."""
    spec = loaded.get(split)
    if not spec:
        raise DataError(f"{file}: no '{split}' (the {split} split: an image folder or a .txt list)")
    base = file.parent / loaded["path"] if loaded.get("path") else file.parent
    files: list[Path] = []
    for entry in spec if isinstance(spec, list) else [spec]:
        files += _listed(file, _resolve(base, str(entry)), split)
    if not files:
        raise DataError(f"{file}: '{split}' ({spec}) has no images")
    return [Path(os.path.abspath(f)) for f in files]  # absolute and without `..`: one root for folders and lists


def _resolve(base: Path, entry: str) -> Path:
    """ENTRY under BASE; a `../x` that does not exist there is tried as `x` (Roboflow's exports)."""
    path = base / entry
    if not path.exists() and entry.startswith("../") and (base / entry[3:]).exists():
        return base / entry[3:]
    return path


def _listed(file: Path, path: Path, split: str) -> list[Path]:
    if path.is_dir():
        return sorted(f for f in path.rglob("*") if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file())
    if path.suffix == ".txt" and path.is_file():
        lines = [line.strip() for line in read_lines(path)]
        return [path.parent / line for line in lines if line]  # an absolute line stays absolute
    if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file():
        return [path]
    raise DataError(f"{file}: '{split}' names {path}, which is not an image folder, a .txt list or an image")


def label_file(image: Path) -> Path:
    """The label file of IMAGE: the last `images` folder of its path replaced by `labels`, suffix `.txt`."""
    parts = list(image.parts)
    for index in range(len(parts) - 2, -1, -1):
        if parts[index] == "images":
            parts[index] = "labels"
            break
    return Path(*parts).with_suffix(".txt")


def read(source: SplitSource, problems: Problems) -> dict[str, Any]:
    """The split as a COCO instances document; each label line checked, errors naming file and line."""
    file, loaded = config(source.annotations)
    names = class_names(file, loaded)
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for image in image_files(file, loaded, source.split):
        size = _size(image, problems)
        if size is None:
            continue
        image_id = len(images) + 1
        images.append({"id": image_id, "file_name": image.relative_to(source.images).as_posix(),
                       "width": size[0], "height": size[1]})
        label = label_file(image)
        if not label.is_file():
            problems.note(str(image), f"no label file {label}: an image without objects")
            continue
        for category, (x, y, w, h) in _objects(label, len(names), size, problems):
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": category + 1,
                                "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0})
    if not problems.raise_errors:
        _orphan_labels(file, loaded, source.split, problems)
    return {"images": images, "annotations": annotations,
            "categories": [{"id": k + 1, "name": name} for k, name in enumerate(names)]}


def _size(image: Path, problems: Problems) -> tuple[int, int] | None:
    """(width, height) from IMAGE's header; an error (and None) if it cannot be opened."""
    try:
        with Image.open(image) as opened:
            return opened.size
    except FileNotFoundError:
        problems.error(str(image), "image file not found")
    except (UnidentifiedImageError, OSError, ValueError) as error:
        problems.error(str(image), f"cannot read image ({error})")
    return None


def _objects(label: Path, classes: int, size: tuple[int, int], problems: Problems):
    """(class, COCO bbox in pixels) of each usable line of LABEL; the others reported."""
    try:
        lines = label.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as error:
        problems.error(str(label), f"not UTF-8 text ({error})")
        return
    seen: set[str] = set()
    for number_, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        parsed = _parse_line(text, classes, at(label, number_), problems)
        if parsed is None:
            continue
        if text.strip() in seen:
            problems.warning(at(label, number_), "repeats an earlier line (the same object twice)")
        seen.add(text.strip())
        category, box = parsed
        _check_box(box, at(label, number_), problems)
        cx, cy, w, h = box
        width, height = size
        yield category, ((cx - w / 2) * width, (cy - h / 2) * height, w * width, h * height)


def _parse_line(text: str, classes: int, place: Place, problems: Problems) -> tuple[int, tuple] | None:
    """(class, (cx, cy, w, h)) of a label line, or None after reporting why it cannot be used."""
    fields = text.split()
    try:
        values = [float(v) for v in fields]
    except ValueError:
        problems.error(place, f"malformed line {text.strip()!r}: expected 'class cx cy w h' numbers")
        return None
    if len(values) != 5 and (len(values) < 7 or len(values) % 2 == 0):
        problems.error(place, f"malformed line {text.strip()!r}: expected 'class cx cy w h' "
                       f"(or 'class x1 y1 x2 y2 x3 y3 ...'), got {len(values)} numbers")
        return None
    if not values[0].is_integer() or not 0 <= values[0] < classes:
        problems.error(place, f"class id {fields[0]} is out of range: data.yaml names {classes} classes "
                       f"(0..{classes - 1})")
        return None
    coordinates = values[1:]
    if not all(0 <= v <= 1 for v in coordinates):  # also NaN
        problems.error(place, f"coordinates {' '.join(fields[1:])} are outside [0, 1]: YOLO's are normalised by the "
                       "image's width and height (pixels?)")
        return None
    if len(coordinates) > 4:  # a polygon: its box
        xs, ys = coordinates[0::2], coordinates[1::2]
        coordinates = [(min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2, max(xs) - min(xs), max(ys) - min(ys)]
    return int(values[0]), tuple(coordinates)


def _check_box(box: tuple, place: Place, problems: Problems) -> None:
    cx, cy, w, h = box
    if w <= 0 or h <= 0:
        problems.warning(place, f"zero-size box (w {w}, h {h}): left out")
    elif cx - w / 2 < -EDGE or cy - h / 2 < -EDGE or cx + w / 2 > 1 + EDGE or cy + h / 2 > 1 + EDGE:
        message = "the box reaches outside the image: clamped"
        if cx < w and cy < h:
            message += "; its numbers look like x1 y1 x2 y2, but YOLO's are cx cy w h"
        problems.warning(place, message)


def _orphan_labels(file: Path, loaded: dict[str, Any], split: str, problems: Problems) -> None:
    """Label files (next to a split's image folders) that no image of the split has."""
    base = file.parent / loaded["path"] if loaded.get("path") else file.parent
    spec = loaded.get(split)
    folders = [_resolve(base, str(entry)) for entry in (spec if isinstance(spec, list) else [spec])]
    images = {label_file(image) for folder in folders if folder.is_dir()
              for image in _listed(file, folder, split)}
    for folder in folders:
        labels = label_file(folder / "x").parent if folder.is_dir() else None
        if labels is None or labels == folder or not labels.is_dir():
            continue
        for orphan in sorted(set(labels.rglob("*.txt")) - images):
            problems.warning(str(orphan), "a label file without an image: not used")


def write(splits: dict[str, tuple[Path, dict[str, Any]]], out: Path, copy) -> list[str]:
    """OUT/data.yaml, OUT/images/<split>/ and OUT/labels/<split>/ (an empty label file: no objects)."""
    notes, names = [], None
    for split, (images, document) in splits.items():
        names = names or labels_of(document)[0]
        unique_stems([entry["file_name"] for entry in document["images"]], images)
        boxes = boxes_by_image(document)
        crowd = 0
        for entry in document["images"]:
            image = out / "images" / split / entry["file_name"]
            image.parent.mkdir(parents=True, exist_ok=True)
            copy(images / entry["file_name"], image)
            label = label_file(image)
            label.parent.mkdir(parents=True, exist_ok=True)
            label.write_text("".join(_line(box, entry["width"], entry["height"]) for box in boxes[entry["id"]]
                                     if not box.crowd), encoding="utf-8")
            crowd += sum(box.crowd for box in boxes[entry["id"]])
        if crowd:
            notes.append(f"{split}: {crowd} crowd objects left out (YOLO has no crowd or difficult flag)")
    data = {**{split: f"images/{split}" for split in splits}, "names": dict(enumerate(names or []))}
    (out / "data.yaml").write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return notes


def _line(box, width: int, height: int) -> str:
    values = ((box.x0 + box.x1) / 2 / width, (box.y0 + box.y1) / 2 / height,
              (box.x1 - box.x0) / width, (box.y1 - box.y0) / height)
    return " ".join([str(box.label)] + [number(v) for v in values]) + "\n"
