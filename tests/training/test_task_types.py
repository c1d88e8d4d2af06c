"""`TrainingTask` is a static contract too: mypy (`make check`) refuses a task that lacks a member, naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TASKS = '''
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from torch import nn

from attnkit.storage import RunFolder
from attnkit.training import Budget, Trainer


class NoLoad:
    """Every member of TrainingTask but `load`, typed as a task would type them."""

    items_name = "samples"
    best_metric = ("loss", "min")

    def __init__(self) -> None:
        self.model = nn.Linear(1, 1)
        self.optimizer = torch.optim.AdamW(self.model.parameters())

    def lr_factor(self, step: int, budget_spent: float) -> float:
        return 1.0

    def batches(self, epoch: int) -> list[int]:
        return [1, 2]

    def train_step(self, model: nn.Module, batch: torch.Tensor) -> dict[str, torch.Tensor | int]:
        return {"loss": model(batch).square().mean(), "items": 1}

    def evaluate(self) -> dict[str, float]:
        return {}

    def state(self) -> dict:
        return {}

    def load_state(self, state: dict) -> None:
        pass


class Line(NoLoad):
    def load(self, batches: Sequence[int]) -> Iterator[torch.Tensor]:
        return (torch.full((1, 1), float(x)) for x in batches)


run = RunFolder.create(Path("run"), "toy", {})
Trainer(Line(), run, Budget(steps=1))
Trainer(NoLoad(), run, Budget(steps=1))
'''


def test_mypy_accepts_a_whole_task_and_names_the_member_another_lacks(tmp_path):
    pytest.importorskip("mypy")  # the dev extra
    (tmp_path / "tasks.py").write_text(TASKS)
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                             "--cache-dir", str(ROOT / ".mypy_cache"), str(tmp_path / "tasks.py")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "MYPYPATH": str(ROOT / "src")})  # else attnkit would be Any
    errors = [line for line in result.stdout.splitlines() if ": error: " in line]
    assert len(errors) == 1, result.stdout
    assert 'Argument 1 to "Trainer" has incompatible type "NoLoad"; expected "TrainingTask"' in errors[0]
    assert f"tasks.py:{TASKS.count(chr(10))}:" in errors[0]  # the last line: Line() was accepted
    notes = result.stdout.split(errors[0], 1)[1].splitlines()
    assert 'note: "NoLoad" is missing following "TrainingTask" protocol member:' in notes[1]
    assert notes[2].endswith("note:     load")
