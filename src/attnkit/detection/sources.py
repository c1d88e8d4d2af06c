"""Where detection data comes from: the built-in `shapes` (written into the run folder) or a COCO-layout folder.

`--data shapes` writes the dataset once under RUN/data/shapes; `--data DIR` is a COCO-layout
folder (`train2017/`, `annotations/instances_train2017.json`, or the same without the year);
`--images DIR --annotations FILE` name one split explicitly.
"""

from __future__ import annotations

import sys
from pathlib import Path

from attnkit.detection.data import CocoDetection, load_annotations, resolve_coco
from attnkit.detection.shapes import ShapesConfig, write_shapes
from attnkit.errors import ConfigError

EXPLICIT = "explicit"  # the run config's `data` when the user named --images/--annotations


def split_paths(data: str | None, split: str, run: Path, shapes: ShapesConfig,
                images: Path | None = None, annotations: Path | None = None) -> tuple[Path, Path]:
    """(images folder, annotation file) of SPLIT, from --images/--annotations, `shapes` or a folder."""
    if images is not None or annotations is not None:
        if images is None or annotations is None:
            raise ConfigError("--images and --annotations go together")
        return Path(images), Path(annotations)
    if data is None:
        raise ConfigError("say which data: --data shapes, --data DIR (COCO layout), or --images and --annotations")
    if data == EXPLICIT:
        raise ConfigError("this run was trained on --images/--annotations; give them (and --val-images/"
                          "--val-annotations) again, or --data")
    if data == "shapes":
        root = write_shapes(Path(run) / "data" / "shapes", shapes)
        return resolve_coco(root, split)
    return resolve_coco(Path(data), split)


def open_split(paths: tuple[Path, Path], transforms, for_evaluation: bool = True) -> CocoDetection:
    """The dataset of one split, with its annotation report printed (crowd objects, dropped boxes)."""
    images, annotation_file = paths
    if not images.is_dir():
        raise ConfigError(f"{images}: image folder not found")
    coco = load_annotations(annotation_file, keep_raw=for_evaluation)
    empty = sum(1 for r in coco.records if len(r.labels) == 0)
    print(f"data: {annotation_file}: {len(coco.records)} images, {coco.num_classes} classes, "
          f"{sum(len(r.labels) for r in coco.records)} boxes, {empty} images without objects, "
          f"{coco.crowd} crowd objects (ignored in training), {coco.degenerate} degenerate boxes dropped",
          file=sys.stderr)
    return CocoDetection(images, coco, transforms)
