"""The feed-forward activation by name: FFN(x) = act(x W1 + b1) W2 + b2 (Vaswani et al. 2017, Eq. 2,
where act is max(0, x)), and the parameter-free activations that models trained elsewhere use in its
place (Marian's swish, GELU (Hendrycks and Gimpel 2016) exact or tanh-approximated, ...).

`Seq2SeqConfig.activation` names one of `ACTIVATIONS`; "relu" and "gelu" stay strings, which
attnkit.nn's layers take as torch's do, and the others are plain functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor


def gelu_tanh(x: Tensor) -> Tensor:
    """0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): GELU's tanh approximation (Hendrycks and Gimpel 2016)."""
    return F.gelu(x, approximate="tanh")


def quick_gelu(x: Tensor) -> Tensor:
    """x sigmoid(1.702 x): GELU's sigmoid approximation (Hendrycks and Gimpel 2016, section 2)."""
    return x * torch.sigmoid(1.702 * x)


def gelu_clipped(x: Tensor) -> Tensor:
    """GELU clipped to [-10, 10] (transformers' "gelu_10", for quantization)."""
    return torch.clip(F.gelu(x), -10.0, 10.0)


def relu2(x: Tensor) -> Tensor:
    """max(0, x)^2 (So et al. 2021, Primer)."""
    return F.relu(x).square()


def laplace(x: Tensor, mu: float = 0.707107, sigma: float = 0.282095) -> Tensor:
    """The Laplace CDF-like activation of MEGA (Ma et al. 2022): 0.5 (1 + erf((x - mu) / (sigma sqrt 2)))."""
    return 0.5 * (1.0 + torch.erf((x - mu).div(sigma * math.sqrt(2.0))))


def sqrt_softplus(x: Tensor) -> Tensor:
    """sqrt(softplus(x))."""
    return F.softplus(x).sqrt()


def identity(x: Tensor) -> Tensor:
    return x


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu, "gelu": F.gelu, "gelu_tanh": gelu_tanh, "silu": F.silu, "quick_gelu": quick_gelu,
    "gelu_clipped": gelu_clipped, "mish": F.mish, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu6": F.relu6,
    "relu2": relu2, "leaky_relu": F.leaky_relu, "hardswish": F.hardswish, "laplace": laplace,
    "sqrt_softplus": sqrt_softplus, "identity": identity,
}


def feed_forward_activation(name: str) -> str | Callable[[Tensor], Tensor]:
    """What attnkit.nn's layers take for NAME: torch's strings for relu and gelu, else the function."""
    return name if name in ("relu", "gelu") else ACTIVATIONS[name]
