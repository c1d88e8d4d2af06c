"""Where one split of a dataset is on disk, whatever its layout: what the readers locate and then read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SplitSource:
    """One split as found: its layout, the folder its images' file names are relative to, the file that defines it.

    `annotations` is the file messages name and `CocoAnnotations.path` becomes: `instances_*.json` (COCO),
    the `data.yaml` (YOLO), `ImageSets/Main/<split>.txt` (Pascal VOC).
    """
    layout: str  # coco | yolo | voc
    images: Path
    annotations: Path
    split: str
