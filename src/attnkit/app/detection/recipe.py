"""Training a detector: the `TrainingTask` that `attnkit.training.Trainer` runs (Carion et al. 2020, section 4).

AdamW with the backbone at its own learning rate (1e-5 in the paper, 1e-4 elsewhere), weight decay
1e-4, the learning rates divided by 10 once `lr_drop` of the budget is spent (the paper: after 200
of 300 epochs, whatever the budget's unit here: steps, epochs or minutes); the loop clips gradients (0.1).
A batch is a list of dataset indices drawn with a generator seeded by (seed, epoch), loaded with
augmentation seeded by (seed, epoch, batch) when `train_step` uses it (by DataLoader workers
reading ahead, if asked): the same epoch always gives the same batches, whatever the number of
workers, and resuming skips the used ones without loading them. `train.accumulate` batches make one
optimizer step; `train.amp` picks the autocast.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnkit.detection.architectures import build_criterion, build_model
from attnkit.detection.config import DetectionConfig
from attnkit.detection.data import CocoDetection
from attnkit.detection.evaluate import evaluate_detector
from attnkit.detection.hungarian_matcher import MatchCost
from attnkit.detection.set_criterion import LossWeights
from attnkit.detection.transforms import collate
from attnkit.errors import DataError
from attnkit.training import LoopConfig, distributed
from attnkit.training.fused_optimizer import fused_options
from attnkit.training.precision import resolve_amp

LOGGED = ("loss_ce", "loss_bbox", "loss_giou", "class_error", "cardinality_error")


@dataclass(frozen=True)
class BatchRef:
    """Which images make a batch, and the seed of their augmentation; batch `position` of `epoch`."""
    indices: tuple[int, ...]
    seed: int
    epoch: int = 0
    position: int = 0


def epoch_refs(size: int, batch_size: int, seed: int, epoch: int) -> list[BatchRef]:
    """The batches of one epoch: a seeded shuffle of the dataset, cut into `batch_size` pieces."""
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(size, generator=generator).tolist()
    return [BatchRef(tuple(order[i:i + batch_size]), seed * 1_000_003 + epoch * 10_007 + i, epoch, i // batch_size)
            for i in range(0, size, batch_size)]


def load_batch(dataset: CocoDetection, ref: BatchRef) -> tuple[Tensor, Tensor, list[dict[str, Any]]]:
    """Images (batch, 3, H, W), padding mask (batch, H, W) and targets, augmented with the batch's own seed."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(ref.seed)
        state = random.getstate()
        random.seed(ref.seed)
        try:
            return collate([dataset[i] for i in ref.indices])
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

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor, list[dict[str, Any]]] | LoadFailure:
        try:
            return load_batch(self.dataset, self.refs[index])
        except DataError as error:  # re-raised by the DataLoader, it would carry the worker's traceback in its text
            return LoadFailure(str(error))


def criterion_of(config: DetectionConfig) -> torch.nn.Module:
    train = config.train
    return build_criterion(config.model, MatchCost(train.cost_class, train.cost_bbox, train.cost_giou),
                           LossWeights(train.ce_loss_coef, train.bbox_loss_coef, train.giou_loss_coef, train.eos_coef))


class DetectionTask:
    """Model, optimizer, scheduler, batches, one training step and COCO-AP validation."""

    items_name = "images"
    best_metric = ("AP", "max")

    def __init__(self, config: DetectionConfig, train_set: CocoDetection, val_set: CocoDetection | None,
                 device: torch.device | str = "cpu", backbone_weights: Path | None = None,
                 eval_batch_size: int = 8, workers: int = 0, init: dict[str, Tensor] | None = None) -> None:
        """init: initial weights to load over the fresh model (`attnkit.app.interop.finetune.init_weights`'s tensors)."""
        self.config, self.train_set, self.val_set, self.workers = config, train_set, val_set, workers
        self._stream, self._next = None, None  # the read-ahead DataLoader and the batch it yields next
        self.device, self.eval_batch_size = torch.device(device), eval_batch_size
        torch.manual_seed(config.train.seed)  # the same initial weights in every process (and every run)
        self.model = build_model(config.model, backbone_weights)
        if init is not None:  # fine-tuning: every tensor but those left out (a resized class head)
            self.model.load_state_dict(init, strict=False)
        self.model = self.model.to(self.device)
        self.train_model = distributed.wrap(self.model)  # DDP under torchrun: averages gradients across processes
        self.criterion = criterion_of(config).to(self.device)
        train = config.train
        backbone = [p for n, p in self.model.named_parameters() if n.startswith("backbone.") and p.requires_grad]
        rest = [p for n, p in self.model.named_parameters() if not n.startswith("backbone.") and p.requires_grad]
        self.optimizer = torch.optim.AdamW([{"params": rest, "lr": train.lr},
                                            {"params": backbone, "lr": train.lr_backbone}],
                                           lr=train.lr, weight_decay=train.weight_decay, **fused_options(self.device))
        self.budget_spent = 0.0  # the fraction of the budget spent, which the Trainer sets before every update
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda _: 0.1 if train.lr_drop < 1 and self.budget_spent >= train.lr_drop else 1.0)

    def batches(self, epoch: int) -> list[BatchRef]:
        """This process's batches of the epoch, as references: skipping them (on resume) loads nothing."""
        train = self.config.train
        return distributed.shard(epoch_refs(len(self.train_set), train.batch_size, train.seed, epoch))

    def load(self, ref: BatchRef) -> tuple[Tensor, Tensor, list[dict[str, Any]]]:
        """The batch REF names; with workers, from a DataLoader that reads ahead through the rest of its epoch."""
        if self.workers == 0:
            return load_batch(self.train_set, ref)
        if self._stream is None or self._next != ref:
            refs = self.batches(ref.epoch)
            rest = refs[refs.index(ref):]
            loader = torch.utils.data.DataLoader(EpochBatches(self.train_set, rest), batch_size=None,
                                                 num_workers=self.workers, pin_memory=self.device.type == "cuda")
            self._stream = zip([*rest[1:], None], loader)  # (the ref expected next, this batch)
        self._next, batch = next(self._stream)
        if isinstance(batch, LoadFailure):
            raise DataError(batch.message)
        return batch

    def train_step(self, batch: BatchRef) -> dict[str, Any]:
        images, mask, targets = self.load(batch)
        images = images.to(self.device, non_blocking=True)
        mask = mask.to(self.device, non_blocking=True)
        targets = [{"labels": t["labels"].to(self.device), "boxes": t["boxes"].to(self.device)} for t in targets]
        losses = self.criterion(self.train_model(images, mask, targets), targets)
        return {"loss": losses["loss"], "items": len(images), **{k: losses[k].detach() for k in LOGGED}}

    def evaluate(self) -> dict[str, float]:
        if self.val_set is None:
            return {}
        return evaluate_detector(self.model, self.val_set, self.eval_batch_size)


def loop_config(config: DetectionConfig, device: torch.device, eval_every_minutes: float = 2.0,
                compile: bool = False) -> LoopConfig:
    """The training loop's settings for a detection run: clipping, accumulation and autocast from `config.train`."""
    train = config.train
    return LoopConfig(eval_every_minutes=eval_every_minutes, checkpoint_every_minutes=eval_every_minutes,
                      grad_clip=train.clip_max_norm or None, accumulate=train.accumulate,
                      amp=resolve_amp(train.amp, device), compile=compile)
