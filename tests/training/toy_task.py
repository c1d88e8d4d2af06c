"""A tiny training task for the loop's tests: an MLP with dropout regressing generated data."""

from __future__ import annotations

import math

import torch
from torch import nn


class ToyRegression:
    """y = x @ w_true + noise; 2-layer MLP with dropout (so resume must restore the RNG), Adam, warmup.

    A `TrainingTask` written out in full (attnkit.training.task), with no base class.
    """

    best_metric = ("loss", "min")
    items_name = "samples"

    def __init__(self, seed: int = 0, batches_per_epoch: int = 7, batch_size: int = 4, lr: float = 1e-2,
                 nan_steps: set[int] | frozenset[int] = frozenset()) -> None:
        torch.manual_seed(seed)
        self.seed, self.batches_per_epoch, self.batch_size = seed, batches_per_epoch, batch_size
        self.model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 1))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        generator = torch.Generator().manual_seed(1234)
        self.w_true = torch.randn(3, 1, generator=generator)
        self.x_valid = torch.randn(16, 3, generator=generator)
        self.y_valid = self.x_valid @ self.w_true
        self.losses: list[float] = []  # every loss train_step returned, in order
        self.calls = 0  # train_step calls, restored through state()/load_state()
        self.nan_steps = nan_steps  # train_step calls (0-based) whose loss is NaN

    def lr_factor(self, step: int, budget_spent: float) -> float:
        return min(1.0, (step + 1) / 4)  # a 4-step warmup

    def batches(self, epoch: int):
        generator = torch.Generator().manual_seed(self.seed * 1000 + epoch)
        batches = []
        for _ in range(self.batches_per_epoch):
            x = torch.randn(self.batch_size, 3, generator=generator)
            y = x @ self.w_true + 0.1 * torch.randn(self.batch_size, 1, generator=generator)
            batches.append((x, y))
        return batches

    def load(self, batches):
        return batches  # generated whole: nothing to load

    def train_step(self, model, batch):
        x, y = batch
        loss = nn.functional.mse_loss(model(x), y)
        if self.calls in self.nan_steps:
            loss = loss * math.nan
        self.calls += 1
        self.losses.append(float(loss.detach()))
        return {"loss": loss, "items": x.size(0), "mean_prediction": 0.0}

    def evaluate(self) -> dict[str, float]:
        return {"loss": float(nn.functional.mse_loss(self.model(self.x_valid), self.y_valid)),
                "noise": float(torch.rand(()))}  # draws from the global RNG: the loop must isolate it

    def state(self) -> dict:
        return {"calls": self.calls}

    def load_state(self, state: dict) -> None:
        self.calls = state["calls"]
