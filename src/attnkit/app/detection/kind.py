"""Detection runs as the application sees them: one `TaskKind` (see `attnkit.app.tasks`)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnkit.app.tasks import TaskKind
from attnkit.errors import ConfigError

REPORT_IMAGES = 3  # validation images the run report shows predictions for


def load(run: Path, weights: str = "best", device: Any = "cpu") -> Any:
    from attnkit.detection.detector import Detector

    return Detector.from_run(run, weights, device)


def export_onnx(detector: Any, out: Path) -> dict:
    from attnkit.app.export.detector_graph import export_detector

    return export_detector(detector, out)


def export_hf(folder: Any, tensors: dict, out: Path) -> Any:
    from attnkit.app.interop.hf_export import export_detr

    return export_detr(folder.config, tensors)


def attention(detector: Any, out: Path, texts: Sequence[str], images: Sequence[Path], threshold: float) -> list[Path]:
    """Per detected object, its query's decoder attention over the image, and the encoder's (one file set per image)."""
    from attnkit.app.visualize.detections import save_detection_maps
    from attnkit.detection.data import read_image

    if texts or not images:
        raise ConfigError("a detection run: give image files with --image IMG")
    if not 0.0 <= threshold <= 1.0:
        raise ConfigError(f"--threshold must be between 0 and 1, got {threshold}")
    paths = []
    for path in images:
        paths += save_detection_maps(detector, read_image(path), out, path.stem, threshold)
    return paths


def report_samples(task: Any) -> Any:
    """The first validation images of the training recipe's task (`DetectionTask`)."""
    from attnkit.app.visualize.report import Samples

    val_set = task.val_set
    if val_set is None:
        return Samples()
    return Samples(images=[str((val_set.images / r.file_name).resolve()) for r in val_set.coco.records[:REPORT_IMAGES]])


def report_predictions(run: Any, samples: Any, assets: Path) -> str:
    """The report's sample predictions: detections, each query's decoder attention and the encoder's."""
    from attnkit.app.visualize.detections import save_detection_maps
    from attnkit.app.visualize.report import image_tag
    from attnkit.detection.data import read_image

    detector = load(run.path)
    parts = ["<h2>Sample predictions</h2>",
             "<p>Detections with score &ge; 0.7 (best weights), each with its object query's decoder attention over "
             "the image (Carion et al. 2020, Figure 6), and the encoder's self-attention of four reference points "
             "(Figure 3).</p>"]
    for index, image_path in enumerate(samples.images, start=1):
        paths = save_detection_maps(detector, read_image(Path(image_path)), assets, f"image{index}")
        parts.append(f"<h3>Image {index}: {html.escape(Path(image_path).name)}</h3>\n"
                     + "\n".join(image_tag(path, path.stem) for path in paths))
    return "\n".join(parts)


def demo(out: Path) -> None:
    """A small detector trained on the built-in `shapes` for a few minutes; ground truth next to predictions."""
    from attnkit.app.detection.demo_part import detection_demo

    detection_demo(out)


DETECTION = TaskKind(name="detection", commands="attnkit.app.detection.commands", load=load,
                     export_onnx=export_onnx, export_hf=export_hf, attention=attention, report_samples=report_samples,
                     report_predictions=report_predictions, demo=demo)
