"""Training a detector: `train(DetectionRequest)`, the `TrainingTask` that `attnkit.training.Trainer` runs
(Carion et al. 2020, section 4).

AdamW with the backbone at its own learning rate (1e-5 in the paper, 1e-4 elsewhere), weight decay
1e-4, the learning rates divided by 10 once `lr_drop` of the budget is spent (the paper: after 200
of 300 epochs, whatever the budget's unit here: steps, epochs or minutes); the loop clips gradients (0.1).
A batch is a list of dataset indices drawn with a generator seeded by (seed, epoch), loaded with
augmentation seeded by (seed, epoch, batch) (by DataLoader workers reading ahead, if asked): the
same epoch always gives the same batches, whatever the number of workers, and resuming skips the
used ones without loading them. `train.accumulate` batches make one optimizer step; `train.amp`
picks the autocast. `train` is the whole of `attnkit train detection`: the config from a preset and
the data, the run folder, the task, the loop.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.app.interop.finetune import InitWeights, init_weights
from attnkit.app.interop.pretrained import init_run
from attnkit.detection.architectures import build_criterion, build_model
from attnkit.detection.bad_images import skipped_summary, write_skipped
from attnkit.detection.config import DetectionConfig, check_kept, override, preset
from attnkit.detection.data import CocoAnnotations, CocoDetection
from attnkit.detection.evaluate import evaluate_detector
from attnkit.detection.layouts import read_split
from attnkit.detection.mosaic import Mosaic, training_sample
from attnkit.detection.shapes import CLASSES, ShapesConfig
from attnkit.detection.sources import BUILT_IN, EXPLICIT, open_split, split_paths
from attnkit.detection.transforms import collate, eval_transforms, train_transforms
from attnkit.errors import CheckpointError, ConfigError, DataError, refuse_changes
from attnkit.storage import RunFolder
from attnkit.training import Budget, FitResult, LoopConfig, Trainer, distributed, plot_curves
from attnkit.training.fused_optimizer import fused_options
from attnkit.training.messages import note
from attnkit.training.precision import resolve_amp

LOGGED = ("loss_ce", "loss_bbox", "loss_giou", "class_error", "cardinality_error")
Paths = tuple[Path | None, Path | None]  # an image folder and its instances_*.json, or neither
Loaded = tuple[Tensor, Tensor, list[dict[str, Any]]]  # images, padding mask, targets


@dataclass(frozen=True)
class DetectionRequest:
    """What `attnkit train detection` collected: where to write, for how long, which data, model and device."""

    out: Path
    budget: Budget
    data: str | None = None  # shapes, or a COCO-layout folder
    preset: str | None = None  # default: small
    assignments: tuple[str, ...] = ()  # --set KEY=VALUE (and --arch, --no-flip, --amp, --accumulate)
    shapes: ShapesConfig = ShapesConfig()  # the built-in data's size, for data="shapes"
    train_paths: Paths = (None, None)  # --images, --annotations: instead of DATA's training split
    val_paths: Paths = (None, None)  # --val-images, --val-annotations
    backbone_weights: Path | None = None  # a pretrained torchvision ResNet
    # a detection run to fine-tune (`attnkit.app.interop.finetune`), or a DETR .pth, transformers folder or Hub id
    # (`attnkit.app.interop.pretrained`); ignored on resume
    init: str | Path | None = None
    eval_every_minutes: float = 2.0
    resume: bool = False
    device: torch.device = torch.device("cpu")
    workers: int | None = None  # DataLoader processes; default: 0 on a CPU, 4 on a GPU
    skip_bad_images: bool = False  # list unreadable images and unusable entries in RUN/skipped.json, not stop
    compile: bool = False
    progress: bool = True


def train(request: DetectionRequest) -> FitResult:
    """Resolve the config and the data, create (or reopen) the run folder OUT and train until the budget is spent."""
    from attnkit.app.visualize.report import report_at_end  # matplotlib: imported when training

    device = distributed.setup(request.device)  # under torchrun: join the process group, this process's GPU
    workers = _check(request, device)
    init = None if request.resume or request.init is None else init_run(request.init, "detection")
    config = resolve_config(request, init)
    loop = loop_config(config, device, request.eval_every_minutes, request.compile)  # before OUT: fp16 needs CUDA
    start = _init_weights(config, init) if init is not None else None  # checked before OUT is written
    run, train_set, val_set = _open_run(request, config, start)
    task = DetectionTask(config, train_set, val_set, device, None if request.resume else request.backbone_weights,
                         workers=workers, init=start.tensors if start is not None else None)
    _describe(task, loop, start)
    at_end = (plot_curves, report_at_end(task))  # RUN/curves.png, then RUN/report.html, which shows it
    result = Trainer(task, run, request.budget, loop, progress=request.progress, at_end=at_end).fit(request.resume)
    if request.skip_bad_images:
        same = (val_set.images, val_set.coco.path) == (train_set.images, train_set.coco.path)
        note(f"bad data: training split {skipped_summary(train_set.coco)}; validation split "
             f"{'the same images' if same else skipped_summary(val_set.coco)}; all listed in "
             f"{run.path / 'skipped.json'}")
    note(f"run folder: {run.path}")
    return result


def _check(request: DetectionRequest, device: torch.device) -> int:
    """The number of DataLoader workers; ConfigError or CheckpointError for options that cannot work together."""
    workers = (4 if device.type == "cuda" else 0) if request.workers is None else request.workers
    if workers < 0:
        raise ConfigError(f"--workers must be 0 or more, got {workers}")
    backbone = request.backbone_weights
    if backbone is not None and not request.resume and not Path(backbone).is_file():
        raise CheckpointError(f"{backbone}: backbone weights file not found")
    if request.init is not None and not request.resume and backbone is not None:
        raise ConfigError("--init and --backbone-weights both give the backbone's weights; use one")
    return workers


def resolve_config(request: DetectionRequest, init: Path | None) -> DetectionConfig:
    """The preset (or INIT's model) with the request's overrides, its classes from the data; on resume, the run's
    config.json (ConfigError if asked to differ)."""
    out, assignments, shapes = request.out, list(request.assignments), request.shapes
    if request.resume and (out / "config.json").is_file():
        config = DetectionConfig.from_dict(RunFolder.open(out, "detection").config)
        note(f"preset: {config.preset} (from {out / 'config.json'})")
        refuse_changes(config.to_dict(), {"preset": request.preset}, ["preset"] if request.preset else [])
        check_kept(config, assignments)  # --amp / --accumulate may not silently differ from config.json
        return config
    name = request.preset or "small"
    model, train = preset(name)
    if init is not None:  # the architecture and sizes of the run fine-tuned from; `--set model.*` still applies
        model = DetectionConfig.from_dict(RunFolder.open(Path(init), "detection").config).model
    config = override(DetectionConfig(model, train, preset=name), assignments)
    if request.data in BUILT_IN and request.train_paths[0] is None:  # nothing written before the run folder
        names, ids = tuple(CLASSES), tuple(range(1, len(CLASSES) + 1))
        source, shapes_fields = request.data, asdict(shapes) if request.data == "shapes" else {}
    else:
        coco = read_split(split_paths(request.data, "train", out, shapes, *request.train_paths),
                          keep_raw=False, skip_bad=request.skip_bad_images)
        names, ids, shapes_fields = tuple(coco.names), tuple(coco.category_ids), {}
        source = str(request.data) if request.train_paths[0] is None else EXPLICIT
    frozen = config.model.frozen_batchnorm if init is not None else request.backbone_weights is not None
    model = replace(config.model, num_classes=len(names), frozen_batchnorm=frozen)
    note(f"preset: {name}" + (f"; model from {init}" if init is not None else "")
         + (f"; overrides: {', '.join(assignments)}" if assignments else ""))
    return replace(config, model=model, data=source, class_names=names, category_ids=ids, shapes=shapes_fields)


def _init_weights(config: DetectionConfig, init: Path) -> InitWeights:
    """The init run's weights for this config's model (built on the meta device: shapes only)."""
    with torch.device("meta"):
        model = build_model(config.model)
    return init_weights(model, init)


def _open_run(request: DetectionRequest, config: DetectionConfig,
              start: InitWeights | None) -> tuple[RunFolder, CocoDetection, CocoDetection]:
    """The run folder (created by rank 0, with a built-in set's images), the training and the validation split."""
    shapes = ShapesConfig(**config.shapes) if config.data == "shapes" else request.shapes
    with distributed.main_first():  # rank 0 creates OUT (and writes a built-in set there); the others read it
        if config.data not in BUILT_IN:  # read the user's data before creating the run folder
            train_set, val_set = _open_splits(config, request.out, shapes, request)
        run = RunFolder.create(request.out, "detection", _document(config, request, start), resume=request.resume) \
            if distributed.is_main() else RunFolder.open(request.out, "detection")
        if config.data in BUILT_IN:
            train_set, val_set = _open_splits(config, run.path, shapes, request)
    if request.skip_bad_images and distributed.is_main():
        write_skipped(run.path / "skipped.json", {"train": train_set, "val": val_set})
    return run, train_set, val_set


def _open_splits(config: DetectionConfig, run: Path, shapes: ShapesConfig,
                 request: DetectionRequest) -> tuple[CocoDetection, CocoDetection]:
    """The training split (augmented) and the validation split (evaluation transforms) of the run's data."""
    t, train_paths, val_paths, skip_bad = config.train, request.train_paths, request.val_paths, request.skip_bad_images
    channels = config.model.num_channels  # 1: a greyscale model's images are made grey
    train_set = open_split(split_paths(config.data if train_paths[0] is None else None, "train", run, shapes,
                                       *train_paths), train_transforms(t.train_scales, t.max_size, t.flip,
                                                                       t.crop_min_fraction, channels),
                           for_evaluation=False, skip_bad=skip_bad)
    same = val_paths[0] is None and train_paths[0] is not None
    if same:
        note("data: no --val-images/--val-annotations; validating on the training images")
        val_paths = train_paths
    val_set = open_split(split_paths(config.data if val_paths[0] is None else None, "val", run, shapes,
                                     *val_paths), eval_transforms(t.val_size, t.max_size, channels), skip_bad=skip_bad,
                         unreadable=train_set.coco.skipped_images if same else None)
    check_categories(config, val_set.coco)
    return train_set, val_set


def check_categories(config: DetectionConfig, coco: CocoAnnotations) -> None:
    """DataError unless the dataset has the categories the model was trained on: the same ids, or the same class
    names in the same order (YOLO and VOC folders number their classes 1..K; evaluation uses the dataset's ids)."""
    if tuple(coco.category_ids) != tuple(config.category_ids) and tuple(coco.names) != tuple(config.class_names):
        raise DataError(f"{coco.path}: categories {coco.category_ids} differ from the run's "
                        f"{list(config.category_ids)}, and so do the class names ({', '.join(coco.names)}; the run's: "
                        f"{', '.join(config.class_names)})")


def _document(config: DetectionConfig, request: DetectionRequest, start: InitWeights | None) -> dict[str, Any]:
    """config.json's contents: the config, and where a fine-tuned run's first weights came from."""
    if request.resume and (request.out / "config.json").is_file():  # keep what the run folder holds beside the config
        return {**RunFolder.open(request.out, "detection").config, **config.to_dict()}
    imported = start is not None and Path(str(request.init)) not in start.path.parents  # a temporary import
    source = str(request.init) if imported else str(start.path) if start is not None else None
    return {**config.to_dict(), **({"init_from": source} if source is not None else {})}


def _describe(task: DetectionTask, loop: LoopConfig, start: InitWeights | None) -> None:
    """The model line ("model: fast resnet18, 12.3M parameters, ..., bf16 autocast") and where init came from."""
    model = task.config.model
    parameters = sum(p.numel() for p in task.model.parameters())
    options = [f"{loop.amp} autocast"] if loop.amp != "off" else []
    options += [f"{loop.accumulate} batches per step"] if loop.accumulate > 1 else []
    options += ["torch.compile"] if loop.compile else []
    note(f"model: {model.arch} {model.backbone}, {parameters / 1e6:.1f}M parameters, {model.num_classes} classes, "
         f"{model.num_queries} queries, on {task.device}" + "".join(f", {option}" for option in options))
    if start is not None:
        fresh = start.reinitialised
        head = (f"class head re-initialised for {model.num_classes} classes: {len(fresh)} tensors started fresh "
                f"({', '.join(fresh)})" if fresh else "class head kept (same number of classes): none started fresh")
        names = task.config.class_names
        note(f"init: {len(start.tensors)} tensors loaded from {start.path}; {head}; classes from the data: "
             f"{', '.join(names[:10])}{f' (+{len(names) - 10} more)' if len(names) > 10 else ''}")


@dataclass(frozen=True)
class BatchRef:
    """Which images make a batch, and the seed of their augmentation; batch `position` of `epoch`; `mosaic`: how
    its images may become mosaics (`attnkit.detection.mosaic`), None: never."""
    indices: tuple[int, ...]
    seed: int
    epoch: int = 0
    position: int = 0
    mosaic: Mosaic | None = None


def epoch_refs(size: int, batch_size: int, seed: int, epoch: int, mosaic: Mosaic | None = None) -> list[BatchRef]:
    """The batches of one epoch: a seeded shuffle of the dataset, cut into `batch_size` pieces."""
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(size, generator=generator).tolist()
    return [BatchRef(tuple(order[i:i + batch_size]), seed * 1_000_003 + epoch * 10_007 + i, epoch, i // batch_size,
                     mosaic) for i in range(0, size, batch_size)]


def load_batch(dataset: CocoDetection, ref: BatchRef) -> Loaded:
    """Images (batch, 3, H, W), padding mask (batch, H, W) and targets, augmented with the batch's own seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(ref.seed)
        state = random.getstate()
        random.seed(ref.seed)
        try:
            return collate([training_sample(dataset, i, ref.mosaic) for i in ref.indices])
        finally:
            random.setstate(state)


@dataclass(frozen=True)
class LoadFailure:
    """A batch a DataLoader worker could not load: the DataError's message, raised again in the main process."""
    message: str


class EpochBatches(torch.utils.data.Dataset):
    """One epoch's batches, loaded on demand (in DataLoader workers when there are any)."""

    def __init__(self, dataset: CocoDetection, refs: list[BatchRef]) -> None:
        self.dataset, self.refs = dataset, refs

    def __len__(self) -> int:
        return len(self.refs)

    def __getitem__(self, index: int) -> Loaded | LoadFailure:
        try:
            return load_batch(self.dataset, self.refs[index])
        except DataError as error:  # re-raised by the DataLoader, it would carry the worker's traceback in its text
            return LoadFailure(str(error))


def criterion_of(config: DetectionConfig) -> torch.nn.Module:
    return build_criterion(config.model, config.train)


class DetectionTask:
    """Model, optimizer, learning-rate drop, batches, one training step and COCO-AP validation; a `TrainingTask`."""

    items_name = "images"
    best_metric = ("AP", "max")

    def __init__(self, config: DetectionConfig, train_set: CocoDetection, val_set: CocoDetection | None,
                 device: torch.device | str = "cpu", backbone_weights: Path | None = None,
                 eval_batch_size: int = 8, workers: int = 0, init: dict[str, Tensor] | None = None) -> None:
        """init: initial weights to load over the fresh model (`attnkit.app.interop.finetune.init_weights`)."""
        self.config, self.train_set, self.val_set, self.workers = config, train_set, val_set, workers
        self.budget_spent = 0.0  # as `lr_factor` last heard it
        self.device, self.eval_batch_size = torch.device(device), eval_batch_size
        torch.manual_seed(config.train.seed)  # the same initial weights in every process (and every run)
        self.model = build_model(config.model, backbone_weights)
        if init is not None:  # fine-tuning: every tensor but those left out (a resized class head)
            self.model.load_state_dict(init, strict=False)
        self.model = self.model.to(self.device)
        self.criterion = criterion_of(config).to(self.device)
        train = config.train
        if train.lr_backbone == 0:  # a frozen backbone: no gradients computed for it at all
            for name, parameter in self.model.named_parameters():
                parameter.requires_grad_(parameter.requires_grad and not name.startswith("backbone."))
        backbone = [p for n, p in self.model.named_parameters() if n.startswith("backbone.") and p.requires_grad]
        rest = [p for n, p in self.model.named_parameters() if not n.startswith("backbone.") and p.requires_grad]
        self.optimizer = torch.optim.AdamW([{"params": rest, "lr": train.lr},
                                            {"params": backbone, "lr": train.lr_backbone}],
                                           lr=train.lr, weight_decay=train.weight_decay, **fused_options(self.device))

    def lr_factor(self, step: int, budget_spent: float) -> float:
        """Both learning rates divided by 10 once `lr_drop` of the budget is spent (lr_drop 1: never)."""
        self.budget_spent = budget_spent  # the schedule's view of the budget, which ends the mosaics too
        return 0.1 if self.dropped() else 1.0

    def dropped(self) -> bool:
        lr_drop = self.config.train.lr_drop
        return lr_drop < 1 and self.budget_spent >= lr_drop

    def batches(self, epoch: int) -> list[BatchRef]:
        """The epoch's batches, as references: skipping them (on resume) loads nothing. Mosaics (`train.mosaic`)
        until the learning rates drop: the epochs that start after it have none."""
        train = self.config.train
        mosaic = Mosaic(train.mosaic, self.config.model.num_queries) if train.mosaic and not self.dropped() else None
        return epoch_refs(len(self.train_set), train.batch_size, train.seed, epoch, mosaic)

    def load(self, refs: Sequence[BatchRef]) -> Iterator[Loaded]:
        """The batches REFS name, in order; with workers, DataLoader processes read ahead through them."""
        if self.workers == 0:
            yield from (load_batch(self.train_set, ref) for ref in refs)
            return
        loader = torch.utils.data.DataLoader(EpochBatches(self.train_set, list(refs)), batch_size=None,
                                             num_workers=self.workers, pin_memory=self.device.type == "cuda")
        for batch in loader:
            if isinstance(batch, LoadFailure):
                raise DataError(batch.message)
            yield batch

    def train_step(self, model: nn.Module, batch: Loaded) -> dict[str, Any]:
        images, mask, targets = batch
        images = images.to(self.device, non_blocking=True)
        mask = mask.to(self.device, non_blocking=True)
        targets = [{"labels": t["labels"].to(self.device), "boxes": t["boxes"].to(self.device)} for t in targets]
        losses = self.criterion(model(images, mask, targets), targets)
        return {"loss": losses["loss"], "items": len(images), **{k: losses[k].detach() for k in LOGGED}}

    def evaluate(self) -> dict[str, float]:
        if self.val_set is None:
            return {}
        return evaluate_detector(self.model, self.val_set, self.eval_batch_size)

    def state(self) -> dict[str, Any]:
        return {}  # the batches follow from (seed, epoch): nothing else to resume

    def load_state(self, state: dict[str, Any]) -> None:
        pass


def loop_config(config: DetectionConfig, device: torch.device, eval_every_minutes: float = 2.0,
                compile: bool = False) -> LoopConfig:
    """The training loop's settings for a detection run: clipping, accumulation and autocast from `config.train`."""
    train = config.train
    return LoopConfig(eval_every_minutes=eval_every_minutes, checkpoint_every_minutes=eval_every_minutes,
                      grad_clip=train.clip_max_norm or None, accumulate=train.accumulate,
                      amp=resolve_amp(train.amp, device), compile=compile, ema_decay=train.ema_decay)
