"""The loop's moving average of the weights (attnkit.training.ema) against one computed by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close
from toy_task import ToyRegression

from attnkit.errors import ConfigError
from attnkit.storage import RunFolder, read_weights
from attnkit.training import Budget, LoopConfig, Trainer

DECAY = 0.5  # reached at the 8th update: the warm-up (2/11, 3/12, ...) before it, the decay after
CONFIG = LoopConfig(log_every_steps=2, eval_every_steps=3, checkpoint_every_steps=2, checkpoint_every_minutes=None,
                    average_last=0, ema_decay=DECAY)


class Recording(ToyRegression):
    """The toy task, remembering the weights each training step starts from (one batch per step)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, torch.Tensor]] = []

    def train_step(self, model, batch):
        self.seen.append({k: v.detach().clone() for k, v in self.model.state_dict().items()})
        return super().train_step(model, batch)


def train(path, steps: int, resume: bool = False) -> tuple[Recording, RunFolder, Trainer]:
    torch.manual_seed(99)
    task = Recording()
    run = RunFolder.create(path, "toy", {}, resume=resume)
    trainer = Trainer(task, run, Budget(steps=steps), CONFIG, progress=False)
    trainer.fit(resume=resume)
    return task, run, trainer


def test_the_ema_is_the_hand_computed_average_of_the_weights_after_each_step(tmp_path):
    task, run, trainer = train(tmp_path / "run", steps=12)
    after = task.seen[1:] + [task.model.state_dict()]  # the weights after steps 1..5
    expected = {name: tensor.double() for name, tensor in after[0].items()}  # W_ema starts at step 1's weights
    for n, weights in enumerate(after[1:], start=1):  # TensorFlow's warm-up: d_n = min(decay, (1 + n) / (10 + n))
        decay = min(DECAY, (1 + n) / (10 + n))
        expected = {name: decay * expected[name] + (1 - decay) * weights[name].double() for name in expected}
    saved = read_weights(run.ema_weights)[0]
    for name, tensor in expected.items():
        assert_close(saved[name], tensor.float(), msg=lambda m, name=name: f"{name}: {m}")
    assert not torch.equal(saved["3.weight"], task.model.state_dict()["3.weight"])  # an average, not the last


def test_validation_logs_the_ema_weights_scores(tmp_path):
    task, run, _ = train(tmp_path / "run", steps=5)
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 1)).eval()
    model.load_state_dict(read_weights(run.ema_weights)[0])
    last = [r for r in run.metrics() if r["split"] == "valid"][-1]
    assert last["step"] == 5
    with torch.no_grad():
        assert_close(last["ema_loss"], float(nn.functional.mse_loss(model(task.x_valid), task.y_valid)))
    assert last["ema_loss"] != last["loss"]


def test_resume_continues_the_same_average_bit_for_bit(tmp_path):
    _, full, _ = train(tmp_path / "full", steps=9)
    train(tmp_path / "split", steps=4)
    _, split, _ = train(tmp_path / "split", steps=9, resume=True)
    for name, tensor in read_weights(full.ema_weights)[0].items():
        assert_close(read_weights(split.ema_weights)[0][name], tensor, rtol=0, atol=0)


@pytest.mark.parametrize("decay", [0.0, 1.0, 1.5])
def test_a_decay_outside_0_1_is_refused(decay):
    with pytest.raises(ConfigError, match="ema_decay"):
        LoopConfig(ema_decay=decay)


@pytest.mark.parametrize("lr, winner", [(1e-2, "model"), (1.0, "ema")])  # 1.0: the model's loss jumps about
def test_weights_best_holds_whichever_of_the_model_and_the_average_scored_best(tmp_path, lr, winner):
    torch.manual_seed(99)
    task, run = ToyRegression(lr=lr), RunFolder.create(tmp_path / "run", "toy", {})
    Trainer(task, run, Budget(steps=12), CONFIG, progress=False).fit()
    scores = [(r[key], r["step"], key) for r in run.metrics() if r["split"] == "valid" for key in ("loss", "ema_loss")]
    best, step, key = min(scores)
    weights, metadata = read_weights(run.best_weights)
    assert (metadata["loss"], metadata["step"], metadata["weights"]) == (best, step, winner)
    assert key == ("ema_loss" if winner == "ema" else "loss")
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Dropout(0.2), nn.Linear(8, 1)).eval()
    model.load_state_dict(weights)
    with torch.no_grad():  # the saved weights score what was logged for them
        assert_close(float(nn.functional.mse_loss(model(task.x_valid), task.y_valid)), best)
