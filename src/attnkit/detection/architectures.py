"""The detectors `--arch` can name: one builder each, `(DetrConfig, backbone weights file | None) -> model`.

Every model takes (images, mask) and returns {"pred_logits", "pred_boxes", "aux_outputs"}, so the
data, matcher, loss, post-processing, evaluation, training task and CLI serve them all; a variant
is one module under `variants/` and one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from torch import nn

from attnkit.detection.config import DetrConfig
from attnkit.detection.detr import build_detr
from attnkit.errors import ConfigError

ARCHITECTURES: dict[str, Callable[[DetrConfig, Path | None], nn.Module]] = {
    "detr": build_detr,
}


def build_model(config: DetrConfig, backbone_weights: Path | None = None) -> nn.Module:
    """The detector named by `config.arch`; ConfigError listing the known ones otherwise."""
    if config.arch not in ARCHITECTURES:
        raise ConfigError(f"unknown detector architecture {config.arch!r}; choose one of {', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[config.arch](config, backbone_weights)
