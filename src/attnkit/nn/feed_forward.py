"""The position-wise feed-forward network (Vaswani et al. 2017, section 3.3, Eq. 2).

    FFN(x) = max(0, x W1 + b1) W2 + b2

Two linear maps with a ReLU (or GELU) between them, applied to every position separately and
identically. The encoder and decoder layers hold the two maps themselves as `linear1` and
`linear2` (torch.nn's and DETR's parameter names, so their state dicts load as they are); this
mixin builds and applies them, so neither layer carries a copy.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.nn.dropout import Dropout
from attnkit.nn.errors import InputError

Activation = str | Callable[[Tensor], Tensor]


def get_activation(activation: Activation) -> Callable[[Tensor], Tensor]:
    """"relu" -> F.relu, "gelu" -> F.gelu (exact, as torch), or any callable as it is."""
    if callable(activation):
        return activation
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    # torch.nn's layers raise a RuntimeError here; InputError is one, and a ValueError
    raise InputError(f"activation should be 'relu', 'gelu' or a callable, got {activation!r}")


class FeedForwardMixin:
    """Adds `linear1` (d_model -> dim_feedforward), `dropout`, `linear2` and `feed_forward(x)` to a layer."""

    linear1: nn.Linear
    linear2: nn.Linear
    dropout: Dropout

    def _init_feed_forward(self, d_model: int, dim_feedforward: int, dropout: float, activation: Activation,
                           bias: bool = True, device=None, dtype=None) -> None:
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias, device=device, dtype=dtype)  # W1, b1
        self.dropout = Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias, device=device, dtype=dtype)  # W2, b2
        self.activation = get_activation(activation)

    def feed_forward(self, x: Tensor) -> Tensor:
        """FFN(x) = activation(x W1 + b1) W2 + b2 (Eq. 2), dropout on the hidden layer: x (..., d_model)."""
        return self.linear2(self.dropout(self.activation(self.linear1(x))))
