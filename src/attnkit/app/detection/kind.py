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
    """Per detected object, its query's decoder attention over the image, and the encoder's (one file set per
    image); for deformable attention their sampling points, and the two-stage proposals (`maps_of`)."""
    from attnkit.detection.data import read_image

    if texts or not images:
        raise ConfigError("a detection run: give image files with --image IMG")
    if not 0.0 <= threshold <= 1.0:
        raise ConfigError(f"--threshold must be between 0 and 1, got {threshold}")
    save_maps = maps_of(detector)
    paths = []
    for path in images:
        paths += save_maps(detector, read_image(path), out, path.stem, threshold)
    return paths


def samples_points(detector: Any) -> bool:
    """Whether DETECTOR's attention is deformable (`fast`'s): each query samples a few points instead of
    attending to every feature-map cell (DETR's), so its pictures are sampling points, not maps."""
    from attnkit.detection.variants.multi_scale_deformable_attention import MultiScaleDeformableAttention

    return any(isinstance(module, MultiScaleDeformableAttention) for module in detector.model.modules())


def maps_of(detector: Any) -> Any:
    """The function that draws DETECTOR's attention pictures of one image: `save_sampling_maps` (objects,
    encoder, proposals) for deformable attention, else `save_detection_maps` (DETR's objects and encoder)."""
    if samples_points(detector):
        from attnkit.app.visualize.deformable_maps import save_sampling_maps

        return save_sampling_maps
    from attnkit.app.visualize.detections import save_detection_maps

    return save_detection_maps


_DENSE_CAPTION = ("<p>Detections with score &ge; 0.7 (best weights), each with its object query's decoder attention "
                  "over the image (Carion et al. 2020, Figure 6), and the encoder's self-attention of four reference "
                  "points (Figure 3).</p>")
_SAMPLING_CAPTION = ("<p>Detections with score &ge; 0.7 (best weights), each with the points its object query's last "
                     "decoder layer samples (deformable attention: every head and level, coloured by weight) around "
                     "its reference box (Zhu et al. 2021, Figure 6); the last encoder layer's sampling for four "
                     "pixels; and, two-stage, the encoder proposals the decoder starts from.</p>")


def report_samples(task: Any) -> Any:
    """The first validation images of the training recipe's task (`DetectionTask`)."""
    from attnkit.app.visualize.report import Samples

    val_set = task.val_set
    if val_set is None:
        return Samples()
    images = [str((val_set.images / r.file_name).resolve()) for r in val_set.coco.records[:REPORT_IMAGES]]
    return Samples(images=images, evaluation={"images": str(val_set.images.resolve()),
                                              "annotations": str(val_set.coco.path.resolve())})


def report_predictions(run: Any, samples: Any, assets: Path) -> str:
    """The report's sample predictions: detections, each query's decoder attention and the encoder's."""
    from attnkit.app.visualize.report import image_tag
    from attnkit.detection.data import read_image

    detector = load(run.path)
    save_maps = maps_of(detector)
    parts = ["<h2>Sample predictions</h2>", _SAMPLING_CAPTION if samples_points(detector) else _DENSE_CAPTION]
    for index, image_path in enumerate(samples.images, start=1):
        paths = save_maps(detector, read_image(Path(image_path)), assets, f"image{index}")
        parts.append(f"<h3>Image {index}: {html.escape(Path(image_path).name)}</h3>\n"
                     + "\n".join(image_tag(path, path.stem) for path in paths))
    if samples.evaluation:
        try:
            parts.append(report_diagnostics(detector, samples.evaluation, assets))
        except Exception as error:  # noqa: BLE001 - the samples above are still worth showing
            parts.append(f"<h2>Per-class AP</h2>\n<p class='error'>Could not evaluate the validation split: "
                         f"{html.escape(type(error).__name__)}: {html.escape(str(error))}</p>")
    return "\n".join(parts)


def report_diagnostics(detector: Any, split: dict[str, str], assets: Path) -> str:
    """The report's diagnostics on the validation split: AP and AP50 per class (a table), each class's
    precision-recall curve, the confusion matrix, its worst false positives and missed objects, and the
    distributions of scores and box sizes (app/visualize/detection_diagnostics.py); the model runs once."""
    from attnkit.app.visualize.detection_diagnostics import save_confusion_matrix, save_pr_curves
    from attnkit.app.visualize.report import image_tag
    from attnkit.detection.evaluate import diagnose_detector
    from attnkit.detection.sources import open_split
    from attnkit.detection.transforms import eval_transforms

    config = detector.config
    dataset = open_split((Path(split["images"]), Path(split["annotations"])),
                         eval_transforms(config.train.val_size, config.train.max_size, config.model.num_channels))
    found = diagnose_detector(detector.model, dataset)
    rows = "".join(f"<tr><td>{html.escape(name)}</td>" + "".join(
        f"<td>{'&ndash;' if value is None else f'{value:.3f}'}</td>" for value in scores.values()) + "</tr>"
        for name, scores in found.per_class.items())
    return (f"<h2>Per-class AP</h2>\n<p>Best weights on the {found.metrics['images']} validation images of "
            f"{html.escape(split['annotations'])}: AP {found.metrics['AP']:.3f}, AP50 {found.metrics['AP50']:.3f} "
            f"(&ndash;: no objects of that class).</p>\n<table><tr><th>class</th><th>AP</th><th>AP50</th></tr>"
            f"{rows}</table>\n<h3>Precision-recall curves</h3>\n"
            + image_tag(save_pr_curves(found, assets / "pr_curves.png"), "precision-recall curve per class")
            + "\n<h3>Confusion matrix</h3>\n<p>Rows: true class, columns: detected class; the background column "
            "counts missed objects, the background row false detections.</p>\n"
            + image_tag(save_confusion_matrix(found, assets / "confusion_matrix.png"), "confusion matrix")
            + "\n" + report_outcomes(found, dataset.images, assets))


def report_outcomes(found: Any, images: Path, assets: Path) -> str:
    """The confusion matrix's errors one by one: galleries of the worst false positives and of the missed objects,
    and the score and box-size distributions (`Diagnostics.outcomes`, detection/outcomes.py)."""
    from attnkit.app.visualize.detection_diagnostics import save_distributions
    from attnkit.app.visualize.report import image_tag
    from attnkit.detection.outcomes import SHOWN

    outcomes, names = found.outcomes, found.names
    at = f"score &ge; {outcomes.score_threshold:g}, IoU &ge; {outcomes.iou_threshold:g}"
    false, missed = outcomes.false_positives, outcomes.missed
    return (f"<h3>Worst false positives</h3>\n<p>{len(false)} detections ({at}) are matched to no object of their "
            "class by the confusion matrix's matching"
            + _gallery(false, f"the {min(len(false), SHOWN)} highest-scored: the box in its class colour, dashed the "
                       "object of another class it was matched to; best IoU: with any object (high: a duplicate or a "
                       "loose box; 0: nothing there).", names, images, assets / "false_positives.png")
            + f"\n<h3>Missed objects</h3>\n<p>{len(missed)} of the {len(outcomes.object_sizes)} objects have no "
            f"detection ({at}) matched to them"
            + _gallery(missed, f"the {min(len(missed), SHOWN)} largest, with the best IoU any detection of that score "
                       "has with them:", names, images, assets / "missed_objects.png")
            + f"\n<h3>Scores and sizes</h3>\n<p>Scores of the {len(outcomes.true_positive_scores)} true and "
            f"{len(false)} false positives ({at}); box sizes of the objects, the missed ones among them, and the "
            "detections.</p>\n"
            + image_tag(save_distributions(outcomes, assets / "scores_and_sizes.png"), "scores and box sizes"))


def _gallery(found: Sequence[Any], text: str, names: Sequence[str], images: Path, path: Path) -> str:
    """"; TEXT" and the gallery of FOUND's first few (at PATH), or a full stop when FOUND is empty."""
    from attnkit.app.visualize.detection_diagnostics import save_gallery
    from attnkit.app.visualize.report import image_tag
    from attnkit.detection.outcomes import SHOWN

    if not found:
        return ".</p>"
    return f"; {text}</p>\n" + image_tag(save_gallery(found[:SHOWN], names, images, path), path.stem.replace("_", " "))


def demo(out: Path) -> None:
    """A small detector trained on the built-in `shapes` for a few minutes; ground truth next to predictions."""
    from attnkit.app.detection.demo_part import detection_demo

    detection_demo(out)


DETECTION = TaskKind(name="detection", commands="attnkit.app.detection.commands", load=load,
                     export_onnx=export_onnx, export_hf=export_hf, attention=attention, report_samples=report_samples,
                     report_predictions=report_predictions, demo=demo)
