"""Training a detector: the `TrainingTask` that `attnkit.training.Trainer` runs (Carion et al. 2020, section 4).

AdamW with the backbone at its own learning rate (1e-5 in the paper, 1e-4 elsewhere), weight decay
1e-4, the learning rates divided by 10 after `lr_drop_epochs`; the loop clips gradients (0.1).
A batch is a list of dataset indices drawn with a generator seeded by (seed, epoch) and loaded,
with augmentation seeded by (seed, epoch, batch), only when `train_step` uses it: the same
epoch always gives the same batches, and resuming skips the used ones without loading them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnkit.detection.architectures import build_model
from attnkit.detection.config import DetectionConfig
from attnkit.detection.data import CocoDetection
from attnkit.detection.evaluate import evaluate_detector
from attnkit.detection.hungarian_matcher import MatchCost
from attnkit.detection.set_criterion import LossWeights, SetCriterion
from attnkit.detection.transforms import collate

LOGGED = ("loss_ce", "loss_bbox", "loss_giou", "class_error", "cardinality_error")


@dataclass(frozen=True)
class BatchRef:
    """Which images make a batch, and the seed of their augmentation."""
    indices: tuple[int, ...]
    seed: int


class EpochBatches:
    """The batches of one epoch: a seeded shuffle of the dataset, cut into `batch_size` pieces."""

    def __init__(self, size: int, batch_size: int, seed: int, epoch: int) -> None:
        generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order = torch.randperm(size, generator=generator).tolist()
        self.refs = [BatchRef(tuple(order[i:i + batch_size]), seed * 1_000_003 + epoch * 10_007 + i)
                     for i in range(0, size, batch_size)]

    def __len__(self) -> int:
        return len(self.refs)

    def __iter__(self):
        return iter(self.refs)


def criterion_of(config: DetectionConfig) -> SetCriterion:
    train = config.train
    return SetCriterion(config.model.num_classes, MatchCost(train.cost_class, train.cost_bbox, train.cost_giou),
                        LossWeights(train.ce_loss_coef, train.bbox_loss_coef, train.giou_loss_coef, train.eos_coef))


class DetectionTask:
    """Model, optimizer, scheduler, batches, one training step and COCO-AP validation."""

    items_name = "images"
    best_metric = ("AP", "max")

    def __init__(self, config: DetectionConfig, train_set: CocoDetection, val_set: CocoDetection | None,
                 device: torch.device | str = "cpu", backbone_weights: Path | None = None,
                 eval_batch_size: int = 8) -> None:
        self.config, self.train_set, self.val_set = config, train_set, val_set
        self.device, self.eval_batch_size = torch.device(device), eval_batch_size
        self.model = build_model(config.model, backbone_weights).to(self.device)
        self.criterion = criterion_of(config).to(self.device)
        train = config.train
        backbone = [p for n, p in self.model.named_parameters() if n.startswith("backbone.") and p.requires_grad]
        rest = [p for n, p in self.model.named_parameters() if not n.startswith("backbone.") and p.requires_grad]
        self.optimizer = torch.optim.AdamW([{"params": rest, "lr": train.lr},
                                            {"params": backbone, "lr": train.lr_backbone}],
                                           lr=train.lr, weight_decay=train.weight_decay)
        steps_per_epoch = -(-len(train_set) // train.batch_size)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, train.lr_drop_epochs * steps_per_epoch, 0.1)

    def batches(self, epoch: int) -> EpochBatches:
        return EpochBatches(len(self.train_set), self.config.train.batch_size, self.config.train.seed, epoch)

    def load(self, ref: BatchRef) -> tuple[Tensor, Tensor, list[dict[str, Any]]]:
        """Images (batch, 3, H, W), padding mask (batch, H, W) and targets, augmented with the batch's own seed."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ref.seed)
            state = random.getstate()
            random.seed(ref.seed)
            try:
                images, mask, targets = collate([self.train_set[i] for i in ref.indices])
            finally:
                random.setstate(state)
        targets = [{"labels": t["labels"].to(self.device), "boxes": t["boxes"].to(self.device)} for t in targets]
        return images.to(self.device), mask.to(self.device), targets

    def train_step(self, batch: BatchRef) -> dict[str, Any]:
        images, mask, targets = self.load(batch)
        losses = self.criterion(self.model(images, mask), targets)
        return {"loss": losses["loss"], "items": len(images), **{k: losses[k].detach() for k in LOGGED}}

    def evaluate(self) -> dict[str, float]:
        if self.val_set is None:
            return {}
        return evaluate_detector(self.model, self.val_set, self.eval_batch_size)

