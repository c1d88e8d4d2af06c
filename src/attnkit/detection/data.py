"""COCO-format detection data: the annotation file, checked entry by entry, and its images.

The COCO layout (Lin et al. 2014) as people have it: an image folder and an `instances_*.json`
with `images`, `annotations` (`bbox` = [x, y, width, height] in pixels) and `categories`.
Category ids may be any integers; they map to contiguous labels 0..K-1 (sorted by id) and back.
`iscrowd` objects are left out of training targets (DETR does the same) and kept for evaluation,
where pycocotools treats them as "ignore" regions. Boxes are clamped to the image; boxes that
are empty after clamping, or have a NaN or infinite coordinate, are dropped and counted. Images
without objects are valid samples. File names must stay inside the image folder (no absolute
paths, no ".."), and images over `MAX_IMAGE_PIXELS` pixels are refused before decoding.
Told to skip bad entries (`--skip-bad-images`), the reader leaves out and lists an image or
annotation entry it cannot use instead of stopping; `attnkit.detection.bad_images` does the same
for image files that cannot be read. The records are kept as flat arrays (`RecordTable`), which
`attnkit.detection.annotation_cache` stores so that a training split is parsed once, not every run.
"""

from __future__ import annotations

import json
import struct
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torchvision import tv_tensors

from attnkit.detection.record_table import ImageRecord, RecordTable
from attnkit.errors import DataError

__all__ = ["CocoAnnotations", "CocoDetection", "ImageRecord", "RecordTable", "UnreadableImage", "decode_image",
           "load_annotations", "parse_annotations", "read_image", "resolve_coco", "size_differs"]

Sample = tuple[tv_tensors.Image, dict[str, Any]]
MAX_IMAGE_PIXELS = 8192 * 8192  # larger images are refused before decoding (decompression bombs)


@dataclass
class CocoAnnotations:
    """A parsed, validated `instances_*.json`."""
    path: Path
    raw: dict[str, Any] | None  # the file as loaded, for pycocotools (None when not kept: training splits)
    category_ids: list[int]  # label -> COCO category id
    names: list[str]  # label -> category name
    records: RecordTable  # a sequence of ImageRecord, held as flat arrays
    degenerate: int = 0  # boxes dropped because they are empty after clamping to the image (or not finite)
    crowd: int = 0  # crowd objects left out of training targets
    label_of: dict[int, int] = field(default_factory=dict)  # COCO category id -> label
    skipped_entries: list[str] = field(default_factory=list)  # unusable entries left out (skip_bad=True): why
    skipped_images: dict[int, str] = field(default_factory=dict)  # image id -> why its file was left out

    @property
    def num_classes(self) -> int:
        return len(self.category_ids)


def resolve_coco(data: Path, split: str) -> tuple[Path, Path]:
    """(images folder, annotation file) of SPLIT in a COCO-layout folder.

    Accepts the official layout (`train2017/`, `annotations/instances_train2017.json`) and the
    same without the year (`train/`, `annotations/instances_train.json`), as `attnkit data` writes.
    """
    if not data.is_dir():
        raise DataError(f"{data}: not a folder (expected a COCO-layout folder with annotations/)")
    for name in (f"{split}2017", split):
        annotations = data / "annotations" / f"instances_{name}.json"
        if annotations.is_file():
            images = data / name if (data / name).is_dir() else data / "images" / name
            if not images.is_dir():
                raise DataError(f"{data}: found {annotations.name} but no image folder {data / name}")
            return images, annotations
    raise DataError(f"{data}: no annotations/instances_{split}2017.json or annotations/instances_{split}.json")


def load_annotations(path: Path, keep_raw: bool = True, skip_bad: bool = False) -> CocoAnnotations:
    """Read and validate a COCO instances file; every error names the file and the entry.

    keep_raw=False drops the loaded JSON once parsed (a training split never needs it again).
    skip_bad=True leaves out the `images` and `annotations` entries that would stop the reading
    (and the annotations of a left-out image), lists why in `skipped_entries` and drops them from
    `raw` too; a file that is not a COCO instances file, or a bad category, still stops it.
    """
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: annotation file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: not valid JSON ({error})") from None
    return parse_annotations(path, raw, keep_raw, skip_bad)


def parse_annotations(path: Path, raw: Any, keep_raw: bool = True, skip_bad: bool = False) -> CocoAnnotations:
    """`load_annotations` of a COCO instances document already in memory (PATH: the file messages name).

    The readers of other layouts (`attnkit.detection.layouts`) translate their files into this
    document and parse it here, so that every layout gives the same records.
    """
    if not isinstance(raw, dict):
        raise DataError(f"{path}: expected a JSON object with images, annotations and categories")
    for key in ("images", "annotations", "categories"):
        if not isinstance(raw.get(key), list):
            raise DataError(f"{path}: missing or non-list '{key}'")
    category_ids, names = _read_categories(path, raw["categories"])
    label_of = {category_id: label for label, category_id in enumerate(category_ids)}
    skipped: list[str] | None = [] if skip_bad else None
    images = _read_images(path, raw["images"], skipped)
    objects: dict[int, list[tuple[list[float], int]]] = {image_id: [] for image_id in images}
    crowd, used = 0, []
    for index, entry in enumerate(raw["annotations"]):
        try:
            image_id, category_id, bbox, is_crowd = _read_annotation(path, index, entry, images, label_of)
        except DataError as error:
            _bad(error, skipped)
            continue
        used.append(entry)
        if is_crowd:
            crowd += 1
        else:
            objects[image_id].append((bbox, label_of[category_id]))
    records, degenerate = _make_table(images, objects)
    if skipped:  # what pycocotools evaluates against: the entries kept
        raw = {**raw, "images": [entry for _, entry in images.values()], "annotations": used}
    return CocoAnnotations(Path(path), raw if keep_raw else None, category_ids, names, records, degenerate, crowd,
                           label_of, skipped or [])


def _bad(error: DataError, skipped: list[str] | None) -> None:
    """Raise ERROR, or (when skipping bad entries) list it in `skipped`."""
    if skipped is None:
        raise error
    skipped.append(str(error))


def _read_categories(path: Path, entries: list[Any]) -> tuple[list[int], list[str]]:
    seen: dict[int, str] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), int):
            raise DataError(f"{path}: categories[{index}] needs an integer 'id'")
        if entry["id"] in seen:
            raise DataError(f"{path}: categories[{index}] repeats category id {entry['id']}")
        seen[entry["id"]] = str(entry.get("name", entry["id"]))
    if not seen:
        raise DataError(f"{path}: 'categories' is empty")
    ids = sorted(seen)
    return ids, [seen[i] for i in ids]


def _read_images(path: Path, entries: list[Any], skipped: list[str] | None = None) -> dict[int, tuple[tuple, Any]]:
    """image id -> ((file name, width, height), the entry as loaded); bad entries raise or go to `skipped`."""
    images: dict[int, tuple[tuple, Any]] = {}
    for index, entry in enumerate(entries):
        try:
            parsed = _read_image_entry(path, index, entry, images)
        except DataError as error:
            _bad(error, skipped)
            continue
        images[entry["id"]] = (parsed, entry)
    return images


def _read_image_entry(path: Path, index: int, entry: Any, images: dict) -> tuple[str, int, int]:
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), int):
        raise DataError(f"{path}: images[{index}] needs an integer 'id'")
    if not isinstance(entry.get("file_name"), str):
        raise DataError(f"{path}: images[{index}] (id {entry['id']}) needs a string 'file_name'")
    if not _inside_folder(entry["file_name"]):
        raise DataError(f"{path}: images[{index}] (id {entry['id']}) has file_name {entry['file_name']!r}, "
                        "which is not a relative path inside the image folder")
    width, height = entry.get("width"), entry.get("height")
    if not (isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0):
        raise DataError(f"{path}: images[{index}] (id {entry['id']}) needs positive integer width and height")
    if entry["id"] in images:
        raise DataError(f"{path}: images[{index}] repeats image id {entry['id']}")
    return entry["file_name"], width, height


def _read_annotation(path: Path, index: int, entry: Any, images: dict, label_of: dict[int, int]):
    where = f"{path}: annotations[{index}]"
    if not isinstance(entry, dict):
        raise DataError(f"{where} is not an object")
    image_id, category_id, bbox = entry.get("image_id"), entry.get("category_id"), entry.get("bbox")
    if not _is_int(image_id) or image_id not in images:
        raise DataError(f"{where} refers to image_id {image_id!r}, which is not in 'images'")
    if not _is_int(category_id) or category_id not in label_of:
        raise DataError(f"{where} has category_id {category_id!r}, which is not in 'categories'")
    if (not isinstance(bbox, list) or len(bbox) != 4
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in bbox)):
        raise DataError(f"{where}: 'bbox' must be [x, y, width, height] numbers, got {bbox!r}")
    return image_id, category_id, [float(v) for v in bbox], bool(entry.get("iscrowd", 0))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _inside_folder(file_name: str) -> bool:
    """Whether FILE_NAME is a relative path that stays inside the folder it is joined to."""
    parts = [part for part in file_name.replace("\\", "/").split("/") if part not in ("", ".")]
    return bool(parts) and not file_name.startswith(("/", "\\")) and ".." not in parts and "\0" not in file_name


def _make_table(images: dict[int, tuple[tuple, Any]],
                objects: dict[int, list[tuple[list[float], int]]]) -> tuple[RecordTable, int]:
    """The records of IMAGES (in order) and how many boxes were dropped: not finite, or empty once clamped."""
    ids = list(images)
    widths = np.array([images[i][0][1] for i in ids], dtype=np.float64)
    heights = np.array([images[i][0][2] for i in ids], dtype=np.float64)
    counts = np.array([len(objects[i]) for i in ids], dtype=np.int64)
    boxes = np.array([bbox for i in ids for bbox, _ in objects[i]], dtype=np.float64).reshape(-1, 4)  # (objects, xywh)
    labels = np.array([label for i in ids for _, label in objects[i]], dtype=np.int64)
    finite = np.isfinite(boxes).all(axis=1)  # NaN or infinite coordinates: dropped with the empty boxes
    boxes[:, 2:] += boxes[:, :2]  # xywh -> xyxy
    width, height = np.repeat(widths, counts)[:, None], np.repeat(heights, counts)[:, None]
    boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, width)
    boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, height)
    boxes = boxes.astype(np.float32)
    keep = finite & (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    image_of = np.repeat(np.arange(len(ids)), counts)  # (objects,) the image each box belongs to
    kept_counts = np.bincount(image_of[keep], minlength=len(ids))
    table = RecordTable.build(ids, [images[i][0][0] for i in ids], widths.astype(np.int32), heights.astype(np.int32),
                              kept_counts, boxes[keep], labels[keep])
    return table, int((~keep).sum())


class UnreadableImage(Exception):
    """Why an image file cannot be used, without the file's name ("image file not found", "cannot read image")."""


def read_image(path: Path, image_id: int | None = None, max_pixels: int = MAX_IMAGE_PIXELS) -> Image.Image:
    """An RGB PIL image; a DataError naming the file (and image id) if it is missing or unreadable.

    The size in the file's header is checked before any pixel is decoded: an image of more than
    `max_pixels` pixels (a decompression bomb: a small file that decodes to gigabytes) is refused.
    """
    try:
        return decode_image(path, max_pixels)
    except UnreadableImage as error:
        where = f"{path}" + (f" (image id {image_id})" if image_id is not None else "")
        raise DataError(f"{where}: {error}") from None


def decode_image(path: Path, max_pixels: int = MAX_IMAGE_PIXELS) -> Image.Image:
    """`read_image`, its failures raised as UnreadableImage(why)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # refused below, with our limit
            with Image.open(path) as image:
                width, height = image.size
                if width * height > max_pixels:
                    raise UnreadableImage(f"refused: {width}x{height} pixels is over the limit of {max_pixels} "
                                          "pixels (a decompression bomb?)")
                return image.convert("RGB")
    except FileNotFoundError:
        raise UnreadableImage("image file not found") from None
    except IsADirectoryError:
        raise UnreadableImage("cannot read image: a folder, not an image file") from None
    except UnidentifiedImageError:
        raise UnreadableImage("cannot read image: not an image file (or a format Pillow cannot read)") from None
    except OSError as error:  # Pillow's word for a truncated or damaged file, among others
        raise UnreadableImage(f"cannot read image ({error})") from None
    except (Image.DecompressionBombError, ValueError, SyntaxError, EOFError, struct.error, IndexError,
            TypeError, ZeroDivisionError, MemoryError) as error:  # what Pillow's decoders raise on garbage
        raise UnreadableImage(f"cannot read image ({type(error).__name__}: {error})") from None


def size_differs(images: Path, record: ImageRecord, annotations: Path, size: tuple[int, int]) -> str | None:
    """The message for an image of RECORD whose decoded SIZE (width, height) is not the annotated one; else None."""
    if size == (record.width, record.height):
        return None
    return (f"{images / record.file_name} (image id {record.image_id}): size {size} "
            f"differs from width/height {record.width}x{record.height} in {annotations}")


class CocoDetection(torch.utils.data.Dataset):
    """Images and targets of a COCO-format dataset.

    A sample is (image, target): image a `tv_tensors.Image` (3, height, width) uint8; target a dict
    with "boxes" (`tv_tensors.BoundingBoxes`, xyxy pixels), "labels" (objects,), "image_id" and
    "orig_size" (height, width). `transforms(image, target)` is applied when given.
    """

    def __init__(self, images: Path, annotations: Path | CocoAnnotations,
                 transforms: Callable[[Any, Any], Sample] | None = None) -> None:
        self.images = Path(images)
        self.coco = annotations if isinstance(annotations, CocoAnnotations) else load_annotations(annotations)
        self.transforms = transforms

    def __len__(self) -> int:
        return len(self.coco.records)

    def read(self, index: int) -> Image.Image:
        """The decoded RGB image of sample INDEX; DataError naming the file if it is unreadable or not as annotated."""
        record = self.coco.records[index]
        pil = read_image(self.images / record.file_name, record.image_id)
        differs = size_differs(self.images, record, self.coco.path, pil.size)
        if differs:
            raise DataError(differs)
        return pil

    def __getitem__(self, index: int) -> Sample:
        image, target = self.sample(index)
        return self.transforms(image, target) if self.transforms is not None else (image, target)

    def sample(self, index: int) -> Sample:
        """Sample INDEX as annotated, before `transforms` (a mosaic's pieces: `attnkit.detection.mosaic`)."""
        record = self.coco.records[index]
        pil = self.read(index)
        image = tv_tensors.Image(torch.frombuffer(bytearray(pil.tobytes()), dtype=torch.uint8)
                                 .view(record.height, record.width, 3).permute(2, 0, 1))  # (3, height, width)
        target = {
            "boxes": tv_tensors.BoundingBoxes(record.boxes.clone(), format="XYXY",
                                              canvas_size=(record.height, record.width)),
            "labels": record.labels.clone(),
            "image_id": record.image_id,
            "orig_size": torch.tensor([record.height, record.width]),
        }
        return image, target
