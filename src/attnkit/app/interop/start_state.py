"""A step-0 training state for an imported run, so that `attnkit train translation --out RUN
--resume` continues training from the imported weights (a run folder's training resumes from its
newest state; without one it would start from random weights).

The state has the format `attnkit.training.Trainer` writes: the model, a fresh Adam and the
learning-rate schedule of the run's recipe (Vaswani et al. 2017, section 5.3), no steps taken.
"""

from __future__ import annotations

from dataclasses import asdict

import torch
from torch import nn

from attnkit.training.fused_optimizer import fused_options
from attnkit.training.loop_state import LoopState
from attnkit.training.rng import capture_rng
from attnkit.translation.config import TranslationConfig
from attnkit.translation.schedule import inverse_sqrt_schedule


def write_translation_start_state(run, model: nn.Module, config: TranslationConfig) -> None:
    """state/step-00000000 in RUN: `model`'s weights, the optimizer and schedule TranslationTask builds."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=config.adam_betas, eps=config.adam_eps,
                                 **fused_options(next(model.parameters()).device))
    scheduler = inverse_sqrt_schedule(optimizer, config.model.d_model, config.warmup_steps, config.lr_scale)
    run.save_state(0, {"loop": asdict(LoopState()), "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                       "scheduler": scheduler.state_dict(), "scaler": None, "task": None, "rng": capture_rng()})
