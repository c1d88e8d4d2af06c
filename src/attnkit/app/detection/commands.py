"""Command line: `attnkit train detection`, `attnkit eval detection`, `attnkit detect`, `attnkit data shapes`."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import torch
import typer

from attnkit.app.cli import app, data_app, eval_app, train_app
from attnkit.app.devices import resolve_device
from attnkit.errors import CheckpointError, ConfigError, DataError, refuse_changes, user_errors

DATA_HELP = "shapes (built in) or a COCO-layout folder (train2017/, val2017/, annotations/instances_*.json)."


@train_app.command("detection")
def train_detection(
    data: str = typer.Option(None, "--data", help=DATA_HELP),
    out: Path = typer.Option(..., "--out", help="Run folder to write (config, weights, metrics, curves)."),
    images: Path = typer.Option(None, "--images", help="Training image folder (with --annotations, instead of --data)."),
    annotations: Path = typer.Option(None, "--annotations", help="Training instances_*.json."),
    val_images: Path = typer.Option(None, "--val-images", help="Validation image folder."),
    val_annotations: Path = typer.Option(None, "--val-annotations", help="Validation instances_*.json."),
    preset: str = typer.Option(None, "--preset", help="small (the default; 2 CPU cores), detr-r50 (the paper) or "
                               "tiny."),
    arch: str = typer.Option(None, "--arch", help="Detector architecture: fast (the small preset's) or detr (the paper's; the other presets')."),
    backbone_weights: Path = typer.Option(None, "--backbone-weights",
                                          help="Local pretrained torchvision ResNet weights (.pth or .safetensors)."),
    init: Path = typer.Option(None, "--init", help="Start from the weights of this detection run (e.g. one written "
                              "by `attnkit import detr`): its model, with the class head re-initialised when the "
                              "number of classes differs."),
    minutes: float = typer.Option(None, "--minutes", help="Time budget (default 10 if no budget is given)."),
    epochs: int = typer.Option(None, "--epochs", help="Epoch budget."),
    steps: int = typer.Option(None, "--steps", help="Optimizer-step budget."),
    no_flip: bool = typer.Option(False, "--no-flip", help="No horizontal flips (for data where mirror images differ)."),
    set_: list[str] = typer.Option([], "--set", help="Override a config value: --set model.num_queries=50 --set train.lr=2e-4."),
    eval_every_minutes: float = typer.Option(2.0, "--eval-every-minutes", help="Validate (COCO AP) this often."),
    shapes_images: int = typer.Option(1000, "--shapes-train-images", help="Training images of `shapes`."),
    shapes_val_images: int = typer.Option(200, "--shapes-val-images", help="Validation images of `shapes`."),
    shapes_size: int = typer.Option(128, "--shapes-image-size", help="Image size of `shapes`."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in OUT where it stopped."),
    device: str = typer.Option(None, "--device", help="cpu or cuda (default: cuda when available)."),
    workers: int = typer.Option(None, "--workers", help="Data-loading processes (default: 0 on a CPU, 4 on a GPU)."),
    amp: str = typer.Option(None, "--amp", help="Autocast: auto (the default: bf16 on CUDA, off on a CPU), off, bf16, "
                            "or fp16 (CUDA only, with loss scaling); same as --set train.amp=..."),
    accumulate: int = typer.Option(None, "--accumulate", help="Batches per optimizer step (default 1); same as "
                                   "--set train.accumulate=N."),
    compile_: bool = typer.Option(False, "--compile", help="Train through torch.compile (the first step compiles; "
                                  "weights are saved as without it)."),
    skip_bad_images: bool = typer.Option(False, "--skip-bad-images", help="Decode every image first; skip and list "
                                         "the unreadable ones and unusable annotation entries instead of stopping."),
) -> None:
    """Train a DETR detector on DATA; writes the run folder OUT."""
    with user_errors():
        from attnkit.detection.shapes import ShapesConfig
        from attnkit.training import Budget, distributed

        distributed.setup(resolve_device(device))  # one process, or one of torchrun's (only rank 0 prints)
        budget = Budget(steps=steps, epochs=epochs, minutes=minutes if (steps or epochs or minutes) else 10.0)
        shapes = ShapesConfig(image_size=shapes_size, train_images=shapes_images, val_images=shapes_val_images)
        assignments = list(set_) + ([f"model.arch={arch}"] if arch else []) + (["train.flip=false"] if no_flip else [])
        assignments += ([f"train.amp={amp}"] if amp else []) + \
            ([f"train.accumulate={accumulate}"] if accumulate is not None else [])
        train(out, data, budget, preset, assignments, shapes, (images, annotations), (val_images, val_annotations),
              backbone_weights, eval_every_minutes, resume, resolve_device(device), workers=workers, init=init,
              skip_bad_images=skip_bad_images, compile=compile_)
        distributed.finish()


def train(out: Path, data: str | None, budget, preset_name: str | None = None, assignments: list[str] = (),
          shapes=None, train_paths=(None, None), val_paths=(None, None), backbone_weights: Path | None = None,
          eval_every_minutes: float = 2.0, resume: bool = False, device: torch.device = torch.device("cpu"),
          progress: bool = True, workers: int | None = None, init: Path | None = None,
          skip_bad_images: bool = False, compile: bool = False):
    """Resolve the config and the data, create (or reopen) the run folder and train; returns the Trainer's result.

    init: a detection run to start from (`attnkit.app.interop.finetune`): its model config and weights, the
    class head re-initialised for another number of classes; ignored on resume (the run's own state is).
    skip_bad_images: leave out unreadable images and unusable annotation entries of both splits, list
    them (`attnkit.detection.bad_images`) and write them to RUN/skipped.json, instead of stopping.
    compile: train through torch.compile.
    """
    from attnkit.detection.bad_images import skipped_summary, write_skipped
    from attnkit.detection.shapes import ShapesConfig
    from attnkit.detection.config import check_kept
    from attnkit.app.detection.recipe import DetectionTask, loop_config
    from attnkit.app.visualize.report import report_at_end
    from attnkit.training import Trainer, distributed
    from attnkit.storage import RunFolder

    device = distributed.setup(device)  # under torchrun: join the process group, this process's GPU
    shapes = shapes or ShapesConfig()
    workers = (4 if device.type == "cuda" else 0) if workers is None else workers
    if workers < 0:
        raise ConfigError(f"--workers must be 0 or more, got {workers}")
    if backbone_weights is not None and not resume and not Path(backbone_weights).is_file():
        raise CheckpointError(f"{backbone_weights}: backbone weights file not found")
    init = None if resume else init
    if init is not None and backbone_weights is not None:
        raise ConfigError("--init and --backbone-weights both give the backbone's weights; use one")
    config = _resolve_config(out, resume, preset_name, list(assignments), data, train_paths, shapes,
                             backbone_weights, init, skip_bad_images)
    if resume:
        check_kept(config, list(assignments))  # --amp / --accumulate may not silently differ from config.json
    loop = loop_config(config, device, eval_every_minutes, compile)  # before OUT is written: fp16 needs CUDA
    start = _init_weights(config, init) if init is not None else None  # checked before OUT is written
    shapes = ShapesConfig(**config.shapes) if config.data == "shapes" else shapes
    with distributed.main_first():  # rank 0 creates OUT (and writes `shapes` there); the others read it
        if config.data != "shapes":  # read the user's data before creating the run folder
            train_set, val_set = _open_splits(config, out, shapes, train_paths, val_paths, skip_bad_images)
        run = RunFolder.create(out, "detection", _document(config, out, resume, start), resume=resume) \
            if distributed.is_main() else RunFolder.open(out, "detection")
        if config.data == "shapes":
            train_set, val_set = _open_splits(config, run.path, shapes, train_paths, val_paths, skip_bad_images)
    if skip_bad_images and distributed.is_main():
        write_skipped(run.path / "skipped.json", {"train": train_set, "val": val_set})
    task = DetectionTask(config, train_set, val_set, device, backbone_weights if not resume else None,
                         workers=workers, init=start.tensors if start is not None else None)
    parameters = sum(p.numel() for p in task.model.parameters())
    print(f"model: {config.model.arch} {config.model.backbone}, {parameters / 1e6:.1f}M parameters, "
          f"{config.model.num_classes} classes, {config.model.num_queries} queries, on {device}"
          f"{_speed_options(loop)}")
    if start is not None:
        head = (f"class head re-initialised for {config.model.num_classes} classes" if start.reinitialised
                else "class head kept (same number of classes)")
        print(f"init: {len(start.tensors)} tensors from {start.path}; {head}")
    result = Trainer(task, run, budget, loop, progress=progress, at_end=[report_at_end(task)]).fit(resume=resume)
    if skip_bad_images:
        same = (val_set.images, val_set.coco.path) == (train_set.images, train_set.coco.path)
        print(f"bad data: training split {skipped_summary(train_set.coco)}; validation split "
              f"{'the same images' if same else skipped_summary(val_set.coco)}; all listed in "
              f"{run.path / 'skipped.json'}")
    print(f"run folder: {run.path}")
    return result


def _speed_options(loop) -> str:
    """", bf16 autocast, 2 batches per step, torch.compile": what the model line adds."""
    options = [f"{loop.amp} autocast"] if loop.amp != "off" else []
    options += [f"{loop.accumulate} batches per step"] if loop.accumulate > 1 else []
    options += ["torch.compile"] if loop.compile else []
    return "".join(f", {option}" for option in options)


def _open_splits(config, run: Path, shapes, train_paths, val_paths, skip_bad: bool = False):
    """The training split (augmented) and the validation split (evaluation transforms) of the run's data."""
    from attnkit.detection.sources import open_split, split_paths
    from attnkit.detection.transforms import eval_transforms, train_transforms

    t = config.train
    train_set = open_split(split_paths(config.data if train_paths[0] is None else None, "train", run, shapes,
                                       *train_paths), train_transforms(t.train_scales, t.max_size, t.flip,
                                                                       t.crop_min_fraction), for_evaluation=False,
                           skip_bad=skip_bad)
    same = val_paths[0] is None and train_paths[0] is not None
    if same:
        print("data: no --val-images/--val-annotations; validating on the training images")
        val_paths = train_paths
    val_set = open_split(split_paths(config.data if val_paths[0] is None else None, "val", run, shapes,
                                     *val_paths), eval_transforms(t.val_size, t.max_size), skip_bad=skip_bad,
                         unreadable=train_set.coco.skipped_images if same else None)
    check_categories(config, val_set.coco)
    return train_set, val_set


def _init_weights(config, init: Path):
    """The init run's weights for this config's model (built on the meta device: shapes only)."""
    from attnkit.detection.architectures import build_model
    from attnkit.app.interop.finetune import init_weights

    with torch.device("meta"):
        model = build_model(config.model)
    return init_weights(model, init)


def _document(config, out: Path, resume: bool, start) -> dict:
    """config.json's contents: the config, and where a fine-tuned run's first weights came from."""
    from attnkit.storage import RunFolder

    if resume and (out / "config.json").is_file():  # keep what the run folder holds beside the config
        return {**RunFolder.open(out, "detection").config, **config.to_dict()}
    return {**config.to_dict(), **({"init_from": str(start.path)} if start is not None else {})}


def _resolve_config(out: Path, resume: bool, preset_name: str | None, assignments: list[str], data: str | None,
                    train_paths, shapes, backbone_weights: Path | None, init: Path | None = None,
                    skip_bad: bool = False):
    from attnkit.detection.config import DetectionConfig, override, preset
    from attnkit.detection.data import load_annotations
    from attnkit.detection.shapes import CLASSES
    from attnkit.detection.sources import EXPLICIT, split_paths
    from attnkit.storage import RunFolder

    if resume and (out / "config.json").is_file():
        config = DetectionConfig.from_dict(RunFolder.open(out, "detection").config)
        print(f"preset: {config.preset} (from {out / 'config.json'})")
        refuse_changes(config.to_dict(), {"preset": preset_name}, ["preset"] if preset_name else [])
        return config
    preset_name = preset_name or "small"
    model, train = preset(preset_name)
    if init is not None:  # the architecture and sizes of the run fine-tuned from; `--set model.*` still applies
        model = DetectionConfig.from_dict(RunFolder.open(Path(init), "detection").config).model
    config = override(DetectionConfig(model, train, preset=preset_name), assignments)
    if data == "shapes" and train_paths[0] is None:
        names, ids = tuple(CLASSES), tuple(range(1, len(CLASSES) + 1))
        source, shapes_fields = "shapes", asdict(shapes)
    else:
        coco = load_annotations(split_paths(data, "train", out, shapes, *train_paths)[1], keep_raw=False,
                                skip_bad=skip_bad)
        names, ids, shapes_fields = tuple(coco.names), tuple(coco.category_ids), {}
        source = str(data) if train_paths[0] is None else EXPLICIT
    frozen = config.model.frozen_batchnorm if init is not None else backbone_weights is not None
    model = replace(config.model, num_classes=len(names), frozen_batchnorm=frozen)
    print(f"preset: {preset_name}" + (f"; model from {init}" if init is not None else "")
          + (f"; overrides: {', '.join(assignments)}" if assignments else ""))
    return replace(config, model=model, data=source, class_names=names, category_ids=ids, shapes=shapes_fields)


def check_categories(config, coco) -> None:
    """DataError unless the dataset has the categories the model was trained on."""
    if tuple(coco.category_ids) != tuple(config.category_ids):
        raise DataError(f"{coco.path}: categories {coco.category_ids} differ from the run's {list(config.category_ids)}")


@eval_app.command("detection")
def eval_detection(
    run: Path = typer.Argument(..., help="A detection run folder."),
    data: str = typer.Option(None, "--data", help=DATA_HELP + " Default: the run's data."),
    split: str = typer.Option("val", "--split", help="Which split of DATA: val, train, test."),
    images: Path = typer.Option(None, "--images", help="Image folder (with --annotations, instead of --data)."),
    annotations: Path = typer.Option(None, "--annotations", help="instances_*.json of those images."),
    weights: str = typer.Option("best", "--weights", help="best, last or average."),
    batch_size: int = typer.Option(8, "--batch-size", help="Images per forward pass (does not change the result)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    device: str = typer.Option(None, "--device", help="cpu or cuda (default: cuda when available)."),
    skip_bad_images: bool = typer.Option(False, "--skip-bad-images", help="Decode every image first; leave out "
                                         "and list the unreadable ones and unusable annotation entries (AP is then "
                                         "over the rest) instead of stopping."),
) -> None:
    """COCO box AP of RUN on a split: AP, AP50, AP75, APs, APm, APl."""
    with user_errors():
        from attnkit.detection.detector import Detector
        from attnkit.detection.evaluate import evaluate_detector
        from attnkit.detection.shapes import ShapesConfig
        from attnkit.detection.sources import open_split, split_paths
        from attnkit.detection.transforms import eval_transforms

        if batch_size < 1:
            raise ConfigError("--batch-size must be at least 1")
        detector = Detector.from_run(run, weights, resolve_device(device))
        config = detector.config
        shapes = ShapesConfig(**config.shapes) if config.shapes else ShapesConfig()
        source = data or (config.data if images is None else None)
        dataset = open_split(split_paths(source, split, run, shapes, images, annotations),
                             eval_transforms(config.train.val_size, config.train.max_size), skip_bad=skip_bad_images)
        check_categories(config, dataset.coco)
        metrics = evaluate_detector(detector.model, dataset, batch_size)
        if skip_bad_images:
            metrics |= {"skipped_images": len(dataset.coco.skipped_images),
                        "skipped_entries": len(dataset.coco.skipped_entries)}
        if as_json:
            print(json.dumps(metrics))
        else:
            print(" ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()))


@app.command()
def detect(
    run: Path = typer.Argument(..., help="A detection run folder."),
    images: list[Path] = typer.Argument(..., help="Image files."),
    out: Path = typer.Option(..., "--out", help="Folder for the annotated images."),
    threshold: float = typer.Option(0.5, "--threshold", help="Keep detections with at least this score."),
    as_json: bool = typer.Option(False, "--json", help="Also write OUT/detections.json (COCO results format)."),
    weights: str = typer.Option("best", "--weights", help="best, last or average."),
    device: str = typer.Option(None, "--device", help="cpu or cuda (default: cuda when available)."),
    backend: str = typer.Option("pytorch", "--backend", help="pytorch, or onnxruntime (RUN's ONNX export, "
                                "written to RUN/onnx on first use, or an `attnkit export onnx` folder)."),
) -> None:
    """Detect objects in IMAGE files; draw boxes with class names and scores into OUT."""
    with user_errors():
        from attnkit.detection.data import read_image
        from attnkit.detection.detector import Detector
        from attnkit.detection.draw import draw_boxes

        from attnkit.app.export.backends import load_detector

        detector = load_detector(run, weights, resolve_device(device), backend)
        out.mkdir(parents=True, exist_ok=True)
        results = []
        for index, path in enumerate(images, start=1):
            image = read_image(path)
            found = detector.predict(image, threshold)[0]
            target = out / f"{path.stem}.png"
            draw_boxes(image, found.boxes.tolist(), found.labels.tolist(), found.names, found.scores.tolist()).save(target)
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
