"""The learning-rate schedule of the paper (Vaswani et al. 2017, section 5.3, Eq. 3):

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

It rises linearly for the first `warmup_steps` steps and then decays with the inverse square root
of the step. `scale` multiplies the whole curve (small models and batches train well with more).
"""

from __future__ import annotations

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR


def inverse_sqrt_lr(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """lrate at optimizer step `step` (1-based; step 0 is treated as step 1)."""
    step = max(step, 1)
    return scale * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def inverse_sqrt_schedule(optimizer: Optimizer, d_model: int, warmup_steps: int, scale: float = 1.0) -> LambdaLR:
    """A LambdaLR giving Eq. 3; the optimizer's own lr must be 1.0 (the lambda is the rate itself)."""
    for group in optimizer.param_groups:
        group["lr"] = 1.0
        group["initial_lr"] = 1.0
    return LambdaLR(optimizer, lambda step: inverse_sqrt_lr(step + 1, d_model, warmup_steps, scale))
