"""The detectors `--arch` can name: one builder each, `(DetrConfig, backbone weights file | None) -> model`.

Every model takes (images, mask, targets=None) and returns {"pred_logits", "pred_boxes",
"aux_outputs"} (targets are read in training by variants that need them, e.g. denoising queries),
so the data, matcher, loss, post-processing, evaluation, training task and CLI serve them all; a
variant is one module under `variants/` and one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from torch import nn

from attnkit.detection.config import DetrConfig
from attnkit.detection.detr import build_detr
from attnkit.detection.hungarian_matcher import MatchCost
from attnkit.detection.set_criterion import LossWeights, SetCriterion
from attnkit.detection.variants.fast_detr import build_fast_criterion, build_fast_detr
from attnkit.errors import ConfigError

ARCHITECTURES: dict[str, Callable[[DetrConfig, Path | None], nn.Module]] = {
    "detr": build_detr,
    "fast": build_fast_detr,
}
# an architecture whose loss is not DETR's set criterion names its builder here
CRITERIA: dict[str, Callable[[DetrConfig, MatchCost, LossWeights], nn.Module]] = {
    "fast": build_fast_criterion,
}


def build_model(config: DetrConfig, backbone_weights: Path | None = None) -> nn.Module:
    """The detector named by `config.arch`; ConfigError listing the known ones otherwise."""
    if config.arch not in ARCHITECTURES:
        raise ConfigError(f"unknown detector architecture {config.arch!r}; choose one of {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[config.arch](config, backbone_weights)


def build_criterion(config: DetrConfig, cost: MatchCost, weights: LossWeights) -> nn.Module:
    """The loss of the detector `config.arch` names: DETR's set criterion unless CRITERIA says otherwise."""
    if config.arch in CRITERIA:
        return CRITERIA[config.arch](config, cost, weights)
    return SetCriterion(config.num_classes, cost, weights)
