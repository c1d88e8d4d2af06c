"""The detection part of `attnkit demo`: a small DETR trained on `shapes`, its AP, and pictures."""

from __future__ import annotations

from pathlib import Path

DEMO_MINUTES = 3.0
DEMO_PICTURES = 6
VALIDATIONS = 4  # AP points on the run's curves: enough to see it rise, few enough to leave the time to training
FALLBACK_SHOWN = 3  # a detector trained for minutes is rarely confident: show at least its top 3


def detection_demo(out: Path, minutes: float = DEMO_MINUTES) -> None:
    """Train the `small` preset on `shapes` for MINUTES, then save ground truth | predictions pictures."""
    from attnkit.app.detection.recipe import DetectionRequest, train
    from attnkit.detection.data import read_image
    from attnkit.detection.detector import Detector
    from attnkit.detection.draw import draw_boxes, side_by_side
    from attnkit.detection.shapes import ShapesConfig
    from attnkit.training import Budget

    run = out / "run"
    resume = (run / "config.json").is_file()
    train(DetectionRequest(run, Budget(minutes=minutes), "shapes", "small", shapes=ShapesConfig(), resume=resume,
                           eval_every_minutes=minutes / VALIDATIONS))
    detector = Detector.from_run(run)
    val = detector_val_set(run)
    pictures = out / "pictures"
    pictures.mkdir(parents=True, exist_ok=True)
    for record in val.coco.records[:DEMO_PICTURES]:
        image = read_image(val.images / record.file_name)
        truth = draw_boxes(image, record.boxes.tolist(), record.labels.tolist(),
                           [detector.pipeline.class_names[i] for i in record.labels.tolist()])
        found = detector.predict(image, threshold=0.0)[0]  # most confident first
        shown = max(int((found.scores >= 0.5).sum()), FALLBACK_SHOWN)
        predicted = draw_boxes(image, found.boxes[:shown].tolist(), found.labels[:shown].tolist(), found.names[:shown],
                               found.scores[:shown].tolist())
        side_by_side(truth, predicted).resize((2 * image.width * 2 + 8, image.height * 2)).save(
            pictures / f"{record.file_name.rsplit('.', 1)[0]}.png")
    print(f"  ground truth (left) | predictions with score >= 0.5, or at least the top {FALLBACK_SHOWN} (right): "
          f"{pictures}")


def detector_val_set(run: Path):
    from attnkit.detection.data import CocoDetection, resolve_coco

    return CocoDetection(*resolve_coco(run / "data" / "shapes", "val"))
