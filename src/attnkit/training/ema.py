"""An exponential moving average of the weights, updated after every optimizer step.

    W_ema <- decay * W_ema + (1 - decay) * W      (W_ema starts as the weights after the first step)

Polyak averaging of the iterates, as DETR-family and YOLO recipes keep it ("model EMA"): the
average is usually a little better than the last weights and much less noisy from one evaluation
to the next. Buffers (BatchNorm statistics) are averaged with the parameters. Built on
torch.optim.swa_utils.AveragedModel with get_ema_multi_avg_fn; the loop saves it as
weights/ema.safetensors and inside every training state, so that resume continues the same average.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from attnkit.errors import ConfigError


class WeightsEma:
    """The moving average of `model`'s weights (a copy of the model on the same device)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ConfigError(f"ema_decay must be between 0 and 1 (e.g. 0.999), got {decay}")
        self.decay = decay
        self.averaged = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Fold `model`'s weights (after an optimizer step) into the average."""
        self.averaged.update_parameters(model)

    def weights(self) -> dict[str, Tensor]:
        """The averaged weights under the model's own tensor names (what weights/ema.safetensors holds)."""
        return self.averaged.module.state_dict()

    def state_dict(self) -> dict[str, Any]:
        """The average and how many updates it holds: what a training state keeps."""
        return {"weights": self.weights(), "updates": int(self.averaged.n_averaged)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.averaged.module.load_state_dict(state["weights"])
        self.averaged.n_averaged.fill_(int(state["updates"]))


@contextlib.contextmanager
def weights_swapped(model: nn.Module, weights: dict[str, Tensor]) -> Iterator[None]:
    """`model` holds `weights` inside the block and its own weights again after it (copied back exactly)."""
    own = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    model.load_state_dict(weights)
    try:
        yield
    finally:
        model.load_state_dict(own)
