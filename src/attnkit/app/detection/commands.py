"""Command line: `attnkit train detection`, `attnkit eval detection`, `attnkit detect`, `attnkit data shapes`."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from attnkit.app.cli import app, data_app, eval_app, train_app
from attnkit.app.devices import resolve_device
from attnkit.errors import ConfigError, user_errors

DATA_HELP = ("shapes or crowd (built in), or a dataset folder, its layout found: COCO (train2017/, val2017/, "
             "annotations/instances_*.json), YOLO (data.yaml) or Pascal VOC (Annotations/, JPEGImages/, ImageSets/).")


@train_app.command("detection")
def train_detection(
    data: str = typer.Option(None, "--data", help=DATA_HELP),
    out: Path = typer.Option(..., "--out", help="Run folder to write (config, weights, metrics, curves)."),
    images: Path = typer.Option(None, "--images", help="Training image folder (with --annotations, instead of "
                                "--data)."),
    annotations: Path = typer.Option(None, "--annotations", help="Training instances_*.json."),
    val_images: Path = typer.Option(None, "--val-images", help="Validation image folder."),
    val_annotations: Path = typer.Option(None, "--val-annotations", help="Validation instances_*.json."),
    preset: str = typer.Option(None, "--preset", help="small (the default; 2 CPU cores, 96 px), medium (small at "
                               "320 px, 30 queries, a half-width ResNet-18, the encoder on C5), detr-r50 (the "
                               "paper) or tiny."),
    arch: str = typer.Option(None, "--arch", help="Detector architecture: fast (the small preset's) or detr (the "
                             "paper's; the other presets')."),
    backbone_weights: Path = typer.Option(None, "--backbone-weights",
                                          help="Local pretrained torchvision ResNet weights (.pth or .safetensors)."),
    init: str = typer.Option(None, "--init", help="Start from these weights: a detection run, an official DETR "
                             ".pth, a transformers DETR folder or a Hugging Face Hub id (facebook/detr-resnet-50; "
                             "needs attnkit[hub]). Its model is kept, the class head re-initialised when the "
                             "number of classes differs; class names come from the data."),
    minutes: float = typer.Option(None, "--minutes", help="Time budget (default 10 if no budget is given)."),
    epochs: int = typer.Option(None, "--epochs", help="Epoch budget."),
    steps: int = typer.Option(None, "--steps", help="Optimizer-step budget."),
    no_flip: bool = typer.Option(False, "--no-flip", help="No horizontal flips (for data where mirror images differ)."),
    set_: list[str] = typer.Option([], "--set", help="Override a config value: --set model.num_queries=50 "
                                   "--set train.lr=2e-4."),
    eval_every_minutes: float = typer.Option(2.0, "--eval-every-minutes", help="Validate (COCO AP) this often."),
    shapes_images: int = typer.Option(1000, "--shapes-train-images", help="Training images of `shapes`."),
    shapes_val_images: int = typer.Option(200, "--shapes-val-images", help="Validation images of `shapes`."),
    shapes_size: int = typer.Option(128, "--shapes-image-size", help="Image size of `shapes`."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in OUT where it stopped."),
    device: str = typer.Option(None, "--device", help="cpu or cuda (default: cuda when available)."),
    workers: int = typer.Option(None, "--workers", help="Data-loading processes (default: 0 on a CPU, 4 on a GPU)."),
    amp: str = typer.Option(None, "--amp", help="Autocast: auto (the default: bf16 on CUDA and on CPUs with native "
                            "bf16), off, bf16, "
                            "or fp16 (CUDA only, with loss scaling); same as --set train.amp=..."),
    accumulate: int = typer.Option(None, "--accumulate", help="Batches per optimizer step (default 1); same as "
                                   "--set train.accumulate=N."),
    compile_: bool = typer.Option(False, "--compile", help="Train through torch.compile (the first step compiles; "
                                  "weights are saved as without it)."),
    ema: float = typer.Option(None, "--ema", help="Keep a moving average of the weights with this decay (e.g. "
                              "0.999), validated as ema_<metric> and saved as weights/ema; same as --set "
                              "train.ema_decay=..."),
    skip_bad_images: bool = typer.Option(False, "--skip-bad-images", help="Decode every image first; skip and list "
                                         "the unreadable ones and unusable annotation entries instead of stopping."),
) -> None:
    """Train a DETR detector on DATA; writes the run folder OUT."""
    with user_errors():
        from attnkit.app.detection.recipe import DetectionRequest, train
        from attnkit.detection.shapes import ShapesConfig
        from attnkit.training import Budget, distributed

        distributed.setup(resolve_device(device))  # one process, or one of torchrun's (only rank 0 prints)
        budget = Budget(steps=steps, epochs=epochs, minutes=minutes if (steps or epochs or minutes) else 10.0)
        shapes = ShapesConfig(image_size=shapes_size, train_images=shapes_images, val_images=shapes_val_images)
        assignments = list(set_) + ([f"model.arch={arch}"] if arch else []) + (["train.flip=false"] if no_flip else [])
        assignments += ([f"train.amp={amp}"] if amp else []) + \
            ([f"train.accumulate={accumulate}"] if accumulate is not None else []) + \
            ([f"train.ema_decay={ema}"] if ema is not None else [])
        train(DetectionRequest(
            out, budget, data=data, preset=preset, assignments=tuple(assignments), shapes=shapes,
            train_paths=(images, annotations), val_paths=(val_images, val_annotations),
            backbone_weights=backbone_weights, init=init, eval_every_minutes=eval_every_minutes, resume=resume,
            device=resolve_device(device), workers=workers, skip_bad_images=skip_bad_images, compile=compile_))
        distributed.finish()


@eval_app.command("detection")
def eval_detection(
    run: Path = typer.Argument(..., help="A detection run folder."),
    data: str = typer.Option(None, "--data", help=DATA_HELP + " Default: the run's data."),
    split: str = typer.Option("val", "--split", help="Which split of DATA: val, train, test."),
    images: Path = typer.Option(None, "--images", help="Image folder (with --annotations, instead of --data)."),
    annotations: Path = typer.Option(None, "--annotations", help="instances_*.json of those images."),
    weights: str = typer.Option("best", "--weights", help="best, last, average or ema."),
    batch_size: int = typer.Option(8, "--batch-size", help="Images per forward pass (does not change the result)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    score_threshold: float = typer.Option(0.5, "--score-threshold", help="The confusion matrix counts detections "
                                          "with at least this score (matched to objects at IoU 0.5)."),
    device: str = typer.Option(None, "--device", help="cpu or cuda (default: cuda when available)."),
    skip_bad_images: bool = typer.Option(False, "--skip-bad-images", help="Decode every image first; leave out "
                                         "and list the unreadable ones and unusable annotation entries (AP is then "
                                         "over the rest) instead of stopping."),
) -> None:
    """COCO box AP of RUN on a split: AP, AP50, AP75, APs, APm, APl; each class's AP and AP50; with --json also
    the confusion matrix (a background row and column)."""
    with user_errors():
        from attnkit.app.detection.recipe import check_categories
        from attnkit.detection.detector import Detector
        from attnkit.detection.evaluate import diagnose_detector
        from attnkit.detection.shapes import ShapesConfig
        from attnkit.detection.sources import open_split, split_paths
        from attnkit.detection.transforms import eval_transforms

        if batch_size < 1:
            raise ConfigError("--batch-size must be at least 1")
        if not 0.0 <= score_threshold <= 1.0:
            raise ConfigError(f"--score-threshold must be between 0 and 1, got {score_threshold}")
        detector = Detector.from_run(run, weights, resolve_device(device))
        config = detector.config
        shapes = ShapesConfig(**config.shapes) if config.shapes else ShapesConfig()
        source = data or (config.data if images is None else None)
        dataset = open_split(split_paths(source, split, run, shapes, images, annotations),
                             eval_transforms(config.train.val_size, config.train.max_size, config.model.num_channels),
                             skip_bad=skip_bad_images)
        check_categories(config, dataset.coco)
        diagnostics = diagnose_detector(detector.model, dataset, batch_size, score_threshold)
        metrics = diagnostics.metrics
        if skip_bad_images:
            metrics |= {"skipped_images": len(dataset.coco.skipped_images),
                        "skipped_entries": len(dataset.coco.skipped_entries)}
        if as_json:
            print(json.dumps(diagnostics.as_dict()))
        else:
            print(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))
            for name, scores in diagnostics.per_class.items():
                print(f"  {name}: " + ", ".join(f"{k} {'-' if v is None else f'{v:.4f}'}" for k, v in scores.items())
                      + ("" if scores["AP"] is not None else " (no objects)"))


@app.command()
def detect(
    run: Path = typer.Argument(..., help="A detection run folder."),
    images: list[Path] = typer.Argument(..., help="Image files."),
    out: Path = typer.Option(..., "--out", help="Folder for the annotated images."),
    threshold: float = typer.Option(0.5, "--threshold", help="Keep detections with at least this score."),
    as_json: bool = typer.Option(False, "--json", help="Also write OUT/detections.json (COCO results format)."),
    weights: str = typer.Option("best", "--weights", help="best, last, average or ema."),
    device: str = typer.Option(None, "--device", help="cpu or cuda (default: cuda when available)."),
    backend: str = typer.Option("pytorch", "--backend", help="pytorch, or onnxruntime (RUN's ONNX export, "
                                "written to RUN/onnx on first use, or an `attnkit export onnx` folder)."),
    quantize: str = typer.Option(None, "--quantize", help="int8: the model's matrix multiplications in int8 "
                                 "(dynamic quantization, CPU only); speed and accuracy: BENCHMARKS.md, int8."),
    compile: bool = typer.Option(False, "--compile", help="Run the model compiled by torch.compile: faster per "
                                 "image, after a compile of tens of seconds at each new image size (PyTorch only)."),
) -> None:
    """Detect objects in IMAGE files; draw boxes with class names and scores into OUT."""
    with user_errors():
        from attnkit.app.export.backends import load_detector
        from attnkit.detection.data import read_image
        from attnkit.detection.draw import draw_boxes

        detector = load_detector(run, weights, resolve_device(device) if device else None, backend, quantize, compile)
        out.mkdir(parents=True, exist_ok=True)
        results = []
        for index, path in enumerate(images, start=1):
            image = read_image(path)
            found = detector.predict(image, threshold)[0]
            target = out / f"{path.stem}.png"
            drawn = draw_boxes(image, found.boxes.tolist(), found.labels.tolist(), found.names, found.scores.tolist())
            drawn.save(target)
            print(f"{path}: {len(found)} objects ({', '.join(found.names) or 'none'}) -> {target}")
            results += [{"image_id": index, "file_name": str(path), "category_id": category,
                         "bbox": [round(x0, 2), round(y0, 2), round(x1 - x0, 2), round(y1 - y0, 2)],
                         "score": round(score, 5)}
                        for (x0, y0, x1, y1), score, category in zip(found.boxes.tolist(), found.scores.tolist(),
                                                                      found.category_ids)]
        if as_json:
            (out / "detections.json").write_text(json.dumps(results, indent=1))
            print(f"detections: {out / 'detections.json'}")


@data_app.command("shapes")
def data_shapes(
    out: Path = typer.Option(..., "--out", help="Folder to write (COCO layout: train/, val/, annotations/)."),
    image_size: int = typer.Option(128, "--image-size", help="Width and height of each image."),
    train_images: int = typer.Option(1000, "--train-images"),
    val_images: int = typer.Option(200, "--val-images"),
    max_objects: int = typer.Option(4, "--max-objects", help="At most this many shapes per image."),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Write the built-in `shapes` detection dataset in COCO layout."""
    with user_errors():
        from attnkit.detection.shapes import ShapesConfig, write_shapes

        root = write_shapes(out, ShapesConfig(image_size, train_images, val_images, max_objects, seed))
        print(f"shapes: {train_images} train and {val_images} val images of {image_size} px in {root}")
