"""`attnkit data check`: what a dataset holds and everything wrong with it, by file and line.

Per split: images, boxes per class, and the box sizes by COCO's areas (small < 32^2 <= medium <
96^2 <= large, in pixels; here of the box, COCO measures the mask). The layout's reader reports
what it sees in its own files (`attnkit.detection.layouts.problems`); this module adds what holds
for any layout: every image opened (missing, unreadable, another size than annotated) and hashed
(two files with the same bytes), and the splits that `attnkit train detection --data` needs.
The data can be trained on when no error is found.
"""

from __future__ import annotations

import hashlib
import io
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from attnkit.detection.data import CocoAnnotations
from attnkit.detection.layouts import find_layout, read_split
from attnkit.detection.layouts.problems import Problem, Problems
from attnkit.errors import DataError

SMALL, MEDIUM = 32 ** 2, 96 ** 2  # COCO's area ranges (Lin et al. 2014; cocoapi's areaRng)
NEEDED = ("train", "val")  # the splits `--data DIR` trains and validates on


@dataclass(frozen=True)
class SplitSummary:
    """One split's counts: images (and those without objects), boxes per class and per COCO size."""
    split: str
    images: int
    empty_images: int
    boxes: int
    per_class: dict[str, int]
    sizes: dict[str, int]  # small, medium, large


@dataclass(frozen=True)
class CheckReport:
    """What `attnkit data check` prints: the layout, each split's counts, every problem."""
    layout: str
    path: str
    splits: list[SplitSummary]
    problems: list[Problem] = field(default_factory=list)

    @property
    def trainable(self) -> bool:
        return not any(problem.severity == "error" for problem in self.problems)


def check_dataset(path: Path) -> CheckReport:
    """Read every split of the dataset at PATH collecting (not raising) problems; open and hash every image."""
    layout = find_layout(path)
    problems = Problems(raise_errors=False)
    summaries = []
    hashes: dict[str, Path] = {}
    present = layout.splits()
    for split in present:
        try:
            source = layout.source(split)
            coco = read_split(source, problems=problems)
        except DataError as error:  # the whole split is unreadable (bad YAML, bad JSON, no such folder)
            problems.error("", str(error))
            continue
        _check_images(source.images, coco, hashes, problems)
        summaries.append(summarize(split, coco))
    for split in NEEDED:
        if split not in present:
            problems.error(str(path), f"no {split} split: `attnkit train detection --data` needs train and val")
    unique = list(dict.fromkeys(problems.found))  # a problem found by two splits' readings is listed once
    return CheckReport(layout.name, str(path), summaries, unique)


def summarize(split: str, coco: CocoAnnotations) -> SplitSummary:
    """SPLIT's counts from its records (the boxes training uses: clamped, empty ones out, no crowd)."""
    per_class: Counter[str] = Counter()
    sizes = Counter({"small": 0, "medium": 0, "large": 0})
    for record in coco.records:
        per_class.update(coco.names[label] for label in record.labels.tolist())
        areas = ((record.boxes[:, 2] - record.boxes[:, 0]) * (record.boxes[:, 3] - record.boxes[:, 1])).tolist()
        sizes.update("small" if a < SMALL else "medium" if a < MEDIUM else "large" for a in areas)
    return SplitSummary(split, len(coco.records), sum(1 for r in coco.records if len(r.labels) == 0),
                        sum(per_class.values()), {name: per_class[name] for name in coco.names}, dict(sizes))


def _check_images(folder: Path, coco: CocoAnnotations, hashes: dict[str, Path], problems: Problems) -> None:
    """Open every image of COCO (missing, unreadable, another size: errors) and warn of same-bytes duplicates."""
    listed: set[str] = set()
    for record in coco.records:
        path = folder / record.file_name
        if record.file_name in listed:
            problems.warning(str(path), f"listed twice in {coco.path} (image id {record.image_id}): trained on twice")
            continue
        listed.add(record.file_name)
        try:
            data = path.read_bytes()
            with Image.open(io.BytesIO(data)) as image:
                size = image.size
        except (FileNotFoundError, IsADirectoryError):
            problems.error(str(path), f"image file not found (image id {record.image_id})")
            continue
        except (UnidentifiedImageError, OSError, ValueError) as error:
            problems.error(str(path), f"cannot read image ({error})")
            continue
        if size != (record.width, record.height):
            problems.error(str(path), f"is {size[0]}x{size[1]}, annotated as {record.width}x{record.height} "
                           f"in {coco.path}")
        digest = hashlib.sha256(data).hexdigest()
        first = hashes.setdefault(digest, path)
        if first.resolve() != path.resolve():
            problems.warning(str(path), f"the same bytes as {first}: a duplicate image")
