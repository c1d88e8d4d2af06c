"""Skip and count the images a detection split cannot use (`attnkit train detection --skip-bad-images`).

Every image of the split is decoded once, when the split is opened, and the ones that fail
(missing, a folder, not an image, truncated or damaged, over the pixel limit, another size than
annotated) are taken out of it: out of its records, and out of the annotation file pycocotools
evaluates against, so that AP is computed over the images that were predicted. Why decode, and
why up front:
  * a header check (`Image.open`, or `verify()`) passes a truncated JPEG; only decoding finds it;
  * a sample dropped later, in the DataLoader (a worker, another process), would shrink its
    batch (or empty it), have to travel back to the main process to be counted, and be met again
    every epoch; checked here, the batches, the epoch length and the resume position are those
    of the clean split, and the workers read only images that have been read once already.
Decoding runs on threads (Pillow decodes outside the GIL), and once per file: what it found is
kept beside the images (`attnkit.detection.cache_files`) with each file's size and modification
time, and a later run decodes only the files that are new or changed. An image that breaks after
this check (a file deleted during training) still stops the run with a DataError naming it.
"""

from __future__ import annotations

import json
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

import numpy as np

from attnkit.detection.cache_files import cache_files, write_cache
from attnkit.detection.data import CocoAnnotations, CocoDetection, UnreadableImage, decode_image, size_differs

DECODED = ".decoded.json"  # kind of cache file (`attnkit.detection.cache_files`)
VERSION = 1  # of its form
SHOWN = 3  # skipped names printed in a summary; RUN/skipped.json lists them all


def find_unreadable(dataset: CocoDetection, threads: int | None = None) -> tuple[dict[int, str], int]:
    """(image id -> the DataError message, for every image of DATASET that cannot be decoded as annotated;
    how many images were decoded now).

    What decoding found is kept per file (`DECODED`, keyed by size and modification time): only
    the files that are new or changed since are decoded again.
    """
    records, folder = dataset.coco.records, dataset.images
    names = [records.file_name(index) for index in range(len(records))]
    known, stamps = _load_decoded(folder), [_stamp(os.path.join(folder, name)) for name in names]
    todo = [index for index, (name, stamp) in enumerate(zip(names, stamps))
            if stamp is None or known.get(name, [None, None])[:2] != list(stamp)]
    with ThreadPoolExecutor(threads or min(8, os.cpu_count() or 1)) as pool:
        found = dict(zip(todo, pool.map(lambda index: _decode(folder / names[index]), todo)))
    remembered = 0
    for index, (width, height, why) in found.items():
        stamp = stamps[index]
        if stamp is not None:  # a missing file (or a folder) is not remembered: it is quick to find again
            known[names[index]] = [*stamp, width, height, why]
            remembered += 1
    if remembered:
        document = {"version": VERSION, "folder": str(folder.absolute()), "files": known}
        write_cache(cache_files(folder, DECODED), lambda file: _write_json(file, document))
    problems = {}
    for index, name in enumerate(names):
        width, height, why = found[index] if index in found else known[name][2:]
        if why:
            problems[int(records.image_ids[index])] = f"{folder / name} (image id {records.image_ids[index]}): {why}"
        elif (width, height) != (records.widths[index], records.heights[index]):
            record = records[index]
            problems[record.image_id] = str(size_differs(folder, record, dataset.coco.path, (width, height)))
    return problems, len(found)


def _write_json(file: IO[bytes], document: dict) -> None:
    file.write(json.dumps(document).encode("utf-8"))


def _stamp(path: str) -> tuple[int, int] | None:
    """(size, modification time in ns) of the file PATH; None if it is not a file."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_size, status.st_mtime_ns) if stat.S_ISREG(status.st_mode) else None


def _decode(path: Path) -> tuple[int, int, str]:
    """(width, height, "") of the image file PATH once decoded, or (0, 0, why it cannot be)."""
    try:
        width, height = decode_image(path).size
    except UnreadableImage as error:
        return 0, 0, str(error)
    return width, height, ""


def _load_decoded(folder: Path) -> dict[str, list]:
    """file name -> [size, mtime_ns, width, height, why] of the files of FOLDER decoded before (this VERSION)."""
    for path in cache_files(folder, DECODED):
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            if document["version"] == VERSION and document["folder"] == str(folder.absolute()):
                return dict(document["files"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return {}


def drop_images(coco: CocoAnnotations, unreadable: dict[int, str]) -> None:
    """Take the images of UNREADABLE out of COCO (records, and `raw` with their annotations); list them."""
    coco.records = coco.records.select(~np.isin(coco.records.image_ids, list(unreadable)))
    if coco.raw is not None:
        coco.raw = {**coco.raw, "images": [e for e in coco.raw["images"] if e["id"] not in unreadable],
                    "annotations": [e for e in coco.raw["annotations"] if e["image_id"] not in unreadable]}
    coco.skipped_images.update(unreadable)


def skipped_summary(coco: CocoAnnotations) -> str:
    """"skipped 2 unreadable images (why; why) and 0 unusable annotation entries", the first few named."""
    def listed(messages: list[str]) -> str:
        more = f"; ... and {len(messages) - SHOWN} more" if len(messages) > SHOWN else ""
        return f" ({'; '.join(messages[:SHOWN])}{more})" if messages else ""

    images, entries = list(coco.skipped_images.values()), coco.skipped_entries
    return (f"skipped {len(images)} unreadable image{'s' if len(images) != 1 else ''}{listed(images)} and "
            f"{len(entries)} unusable annotation entr{'ies' if len(entries) != 1 else 'y'}{listed(entries)}")


def skipped_document(splits: dict[str, CocoDetection]) -> dict:
    """RUN/skipped.json: per split, its files and everything left out, with why."""
    return {name: {"annotation_file": str(dataset.coco.path), "image_folder": str(dataset.images),
                   "images_used": len(dataset), "unreadable_images": len(dataset.coco.skipped_images),
                   "unusable_entries": len(dataset.coco.skipped_entries),
                   "images": [{"image_id": image_id, "error": message}
                              for image_id, message in dataset.coco.skipped_images.items()],
                   "entries": list(dataset.coco.skipped_entries)}
            for name, dataset in splits.items()}


def write_skipped(path: Path, splits: dict[str, CocoDetection]) -> Path:
    """Write `skipped_document(splits)` to PATH (atomically)."""
    from attnkit.storage.checkpoint import atomic_write_text

    return atomic_write_text(path, json.dumps(skipped_document(splits), indent=1) + "\n")
