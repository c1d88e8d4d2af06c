"""An exponential moving average of the weights, updated after every optimizer step.

    W_ema <- d_n * W_ema + (1 - d_n) * W,   d_n = min(decay, (1 + n) / (10 + n))

after n updates (W_ema starts as the weights after the first step). The warm-up d_n is TensorFlow's
(`tf.train.ExponentialMovingAverage` with `num_updates`): early on the average spans the last tenth or
so of the steps taken, so it does not carry the random initial weights through a run of a few minutes
(a fixed 0.999 still weighs them 8% after 2,500 steps); later it spans 1 / (1 - decay) steps.

Polyak averaging of the iterates, as DETR-family and YOLO recipes keep it ("model EMA"): the
average is usually a little better than the last weights and much less noisy from one evaluation
to the next. Buffers (BatchNorm statistics) are averaged with the parameters. Built on
torch.optim.swa_utils.AveragedModel with this update as its multi_avg_fn; the loop saves it as
weights/ema.safetensors and inside every training state, so that resume continues the same average.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import AveragedModel

from attnkit.errors import ConfigError


class WeightsEma:
    """The moving average of `model`'s weights (a copy of the model on the same device)."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ConfigError(f"ema_decay must be between 0 and 1 (e.g. 0.999), got {decay}")
        self.decay, self.updates = decay, 0
        self.averaged = AveragedModel(model, multi_avg_fn=self._update, use_buffers=True)

    @torch.no_grad()
    def _update(self, averaged: tuple[Tensor, ...] | list[Tensor], current: tuple[Tensor, ...] | list[Tensor],
                _: Tensor | int) -> None:
        """AveragedModel's multi_avg_fn: one group of tensors (one device and dtype) moved by 1 - d_n. n is
        counted here as well as in AveragedModel's buffer, so that a GPU run need not read that back each step."""
        weight = 1 - min(self.decay, (1 + self.updates) / (10 + self.updates))
        if averaged[0].is_floating_point():
            torch._foreach_lerp_(averaged, current, weight)
        else:  # integer buffers (BatchNorm's batch count): rounded down, as AveragedModel's own EMA does
            for mean, value in zip(averaged, current, strict=True):
                mean.copy_(mean * (1 - weight) + value * weight)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """Fold `model`'s weights (after an optimizer step) into the average."""
        self.averaged.update_parameters(model)
        self.updates += 1

    def weights(self) -> dict[str, Tensor]:
        """The averaged weights under the model's own tensor names (what weights/ema.safetensors holds)."""
        return self.averaged.module.state_dict()

    def state_dict(self) -> dict[str, Any]:
        """The average and how many updates it holds: what a training state keeps."""
        return {"weights": self.weights(), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.averaged.module.load_state_dict(state["weights"])
        self.updates = int(state["updates"])
        self.averaged.n_averaged.fill_(self.updates)


@contextlib.contextmanager
def weights_swapped(model: nn.Module, weights: dict[str, Tensor]) -> Iterator[None]:
    """`model` holds `weights` inside the block and its own weights again after it (copied back exactly)."""
    own = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    model.load_state_dict(weights)
    try:
        yield
    finally:
        model.load_state_dict(own)
