"""Where detection data comes from: the built-in `shapes` (written into the run folder) or a dataset folder.

`--data shapes` writes the dataset once under RUN/data/shapes; `--data DIR` is a folder in any
layout `attnkit.detection.layouts` finds (COCO, YOLO, Pascal VOC); `--images DIR --annotations
FILE` name one COCO split explicitly.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from attnkit.detection.bad_images import drop_images, find_unreadable, skipped_summary
from attnkit.detection.crowd import write_crowd
from attnkit.detection.data import CocoDetection
from attnkit.detection.layouts import SplitSource, find_layout, read_split
from attnkit.detection.shapes import ShapesConfig, write_shapes
from attnkit.errors import ConfigError, DataError

EXPLICIT = "explicit"  # the run config's `data` when the user named --images/--annotations
BUILT_IN = ("shapes", "crowd")  # generated into the run folder (under data/), once it exists; shapes' classes


def split_paths(data: str | None, split: str, run: Path, shapes: ShapesConfig,
                images: Path | None = None, annotations: Path | None = None) -> SplitSource:
    """Where SPLIT's images and annotations are, from --images/--annotations, `shapes` or a dataset folder."""
    if images is not None or annotations is not None:
        if images is None or annotations is None:
            raise ConfigError("--images and --annotations go together")
        return SplitSource("coco", Path(images), Path(annotations), split)
    if data is None:
        raise ConfigError("say which data: --data shapes, --data DIR (COCO, YOLO or VOC layout), or --images and "
                          "--annotations")
    if data == EXPLICIT:
        raise ConfigError("this run was trained on --images/--annotations; give them (and --val-images/"
                          "--val-annotations) again, or --data")
    if data == "shapes":
        root = write_shapes(Path(run) / "data" / "shapes", shapes)
        return find_layout(root).source(split)
    if data == "crowd":  # many small objects in clutter (attnkit.detection.crowd)
        return find_layout(write_crowd(Path(run) / "data" / "crowd")).source(split)
    return find_layout(Path(data)).source(split)


def open_split(paths: SplitSource | tuple[Path, Path], transforms, for_evaluation: bool = True, skip_bad: bool = False,
               unreadable: dict[int, str] | None = None) -> CocoDetection:
    """The dataset of one split, with its annotation report printed (crowd objects, dropped boxes).

    skip_bad: leave out (and list) unusable annotation entries and, after decoding every image once,
    the images that cannot be read (`attnkit.detection.bad_images`); `unreadable`: those already
    found in the same images (the training split, when it is also the validation split).
    """
    source = paths if isinstance(paths, SplitSource) else SplitSource("coco", Path(paths[0]), Path(paths[1]), "")
    if not source.images.is_dir():
        raise ConfigError(f"{source.images}: image folder not found")
    coco = read_split(source, keep_raw=for_evaluation, skip_bad=skip_bad)
    annotation_file = coco.path
    dataset = CocoDetection(source.images, coco, transforms)
    if skip_bad:
        _drop_unreadable(dataset, unreadable)
    counts = coco.records.object_counts()
    print(f"data: {annotation_file}: {len(coco.records)} images, {coco.num_classes} classes, "
          f"{counts.sum()} boxes, {(counts == 0).sum()} images without objects, "
          f"{coco.crowd} crowd objects (ignored in training), {coco.degenerate} degenerate boxes dropped"
          + (f"; {skipped_summary(coco)}" if skip_bad else ""), file=sys.stderr)
    return dataset


def _drop_unreadable(dataset: CocoDetection, unreadable: dict[int, str] | None) -> None:
    """Decode every image of DATASET (unless `unreadable` says already which fail) and take out those that fail."""
    if unreadable is None:
        start = time.perf_counter()
        unreadable, decoded = find_unreadable(dataset)
        print(f"data: checked the {len(dataset)} images of {dataset.images} for unreadable ones in "
              f"{time.perf_counter() - start:.1f} s (decoded {decoded}: the others were decoded before, and have "
              "not changed since)", file=sys.stderr)
    ids = set(dataset.coco.records.image_ids.tolist())
    drop_images(dataset.coco, {image_id: why for image_id, why in unreadable.items() if image_id in ids})
    if not dataset.coco.records:
        raise DataError(f"{dataset.coco.path}: no usable image left: {skipped_summary(dataset.coco)}")
