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
Decoding runs on threads (Pillow decodes outside the GIL). An image that breaks after this check
(a file deleted during training) still stops the run with a DataError naming it.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from attnkit.detection.data import CocoAnnotations, CocoDetection
from attnkit.errors import DataError

SHOWN = 3  # skipped names printed in a summary; RUN/skipped.json lists them all


def find_unreadable(dataset: CocoDetection, threads: int | None = None) -> dict[int, str]:
    """image id -> the DataError message, for every image of DATASET that cannot be decoded as annotated."""
    def problem(index: int) -> str | None:
        try:
            dataset.read(index)
        except DataError as error:
            return str(error)
        return None

    with ThreadPoolExecutor(threads or min(8, os.cpu_count() or 1)) as pool:
        problems = list(pool.map(problem, range(len(dataset))))
    return {record.image_id: message for record, message in zip(dataset.coco.records, problems) if message}


def drop_images(coco: CocoAnnotations, unreadable: dict[int, str]) -> None:
    """Take the images of UNREADABLE out of COCO (records, and `raw` with their annotations); list them."""
    coco.records = [record for record in coco.records if record.image_id not in unreadable]
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
