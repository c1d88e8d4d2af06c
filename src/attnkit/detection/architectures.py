"""The detectors `--arch` can name: a model builder and a criterion builder each.

Every model takes (images, mask, targets=None) and returns a `DetectionOutput` (attnkit.detection.output;
targets are read in training by variants that need them, e.g. denoising queries), so the data,
matcher, post-processing, evaluation, training task and CLI serve them all; its criterion reads
what it returns. A variant is one module under `variants/`, its model config in `config.MODEL_CONFIGS`,
and one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from attnkit.detection.config import DetectionTrainConfig, DetrConfig
from attnkit.detection.detr import build_detr
from attnkit.detection.set_criterion import build_set_criterion
from attnkit.detection.variants.fast_detr import build_fast_criterion, build_fast_detr
from attnkit.errors import ConfigError

ModelBuilder = Callable[[Any, Path | None], nn.Module]  # (the arch's model config, backbone weights file) -> model
CriterionBuilder = Callable[[Any, DetectionTrainConfig], nn.Module]  # (model config, training config) -> loss

ARCHITECTURES: dict[str, tuple[ModelBuilder, CriterionBuilder]] = {
    "detr": (build_detr, build_set_criterion),
    "fast": (build_fast_detr, build_fast_criterion),
}


def build_model(config: DetrConfig, backbone_weights: Path | None = None) -> nn.Module:
    """The detector named by `config.arch`; ConfigError listing the known ones otherwise."""
    return _architecture(config)[0](config, backbone_weights)


def build_criterion(config: DetrConfig, train: DetectionTrainConfig) -> nn.Module:
    """The loss of the detector `config.arch` names, with TRAIN's matching costs and loss weights."""
    return _architecture(config)[1](config, train)


def _architecture(config: DetrConfig) -> tuple[ModelBuilder, CriterionBuilder]:
    if config.arch not in ARCHITECTURES:
        raise ConfigError(f"unknown detector architecture {config.arch!r}; choose one of {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[config.arch]
