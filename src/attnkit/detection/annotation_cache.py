"""A COCO annotation file's parsed index, kept on disk: read and checked once per file, not once per run.

COCO's `instances_train2017.json` is 448 MB of JSON; loading and checking it entry by entry
takes a minute and several GB before the first step, every run. What training needs of it (the
`RecordTable`: ids, file names, sizes, boxes, labels; the categories; the counts and the entries
left out) is a few flat arrays, written here as one `.npz` (read with allow_pickle=False) in the
cache folder of `attnkit.detection.cache_files`. It is used only while the annotation file has
the path, size and modification time it had when the index was made, and this `VERSION` of the
format: an edited file is read again. The evaluation split keeps the whole document for
pycocotools and is read from the JSON each time (`read_split(..., keep_raw=True)`).
"""

from __future__ import annotations

import json
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from attnkit.detection.cache_files import cache_files, stamp, write_cache
from attnkit.detection.data import CocoAnnotations
from attnkit.detection.record_table import RecordTable

VERSION = 1  # of the cached form; a change of what parsing gives (or of RecordTable) must raise it
KIND = ".index.npz"


def cached_annotations(path: Path, skip_bad: bool, read: Callable[[], CocoAnnotations]) -> CocoAnnotations:
    """The annotations of the file PATH without `raw`: from the cache if it is of this file as it is now, else
    READ (and cached). A cached index with entries left out is used only when skipping them (skip_bad)."""
    try:
        key = {"version": VERSION, **stamp(path)}
    except OSError:
        return read()  # not there: READ says so
    for candidate in cache_files(path, KIND):
        coco = _load(candidate, key, path)
        if coco is not None and (skip_bad or not coco.skipped_entries):
            return coco
    coco = read()
    written = write_cache(cache_files(path, KIND), lambda file: np.savez(file, **_arrays(coco, key)))
    if written is not None:
        print(f"data: indexed {path} ({len(coco.records)} images) into {written}", file=sys.stderr)
    return coco


def _arrays(coco: CocoAnnotations, key: dict) -> dict[str, Any]:
    meta = {"key": key, "category_ids": coco.category_ids, "names": coco.names, "degenerate": coco.degenerate,
            "crowd": coco.crowd, "skipped_entries": coco.skipped_entries}
    return {**coco.records.arrays(), "meta": np.array(json.dumps(meta))}


def _load(candidate: Path, key: dict, path: Path) -> CocoAnnotations | None:
    """The annotations cached in CANDIDATE if they are of KEY (this file, as it is now); None if not, or unreadable."""
    try:
        with np.load(candidate, allow_pickle=False) as arrays:
            meta = json.loads(str(arrays["meta"]))
            if meta["key"] != key:
                return None
            records = RecordTable.from_arrays({name: arrays[name] for name in arrays.files if name != "meta"})
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, json.JSONDecodeError):
        return None
    category_ids = [int(i) for i in meta["category_ids"]]
    return CocoAnnotations(Path(path), None, category_ids, list(meta["names"]), records, int(meta["degenerate"]),
                           int(meta["crowd"]), {category_id: label for label, category_id in enumerate(category_ids)},
                           list(meta["skipped_entries"]))
