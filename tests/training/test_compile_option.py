"""LoopConfig(compile=True): training runs through torch.compile; checkpoints keep the eager module's names."""

from __future__ import annotations

import os

import pytest
import torch
from safetensors import safe_open
from toy_task import ToyRegression

from attnkit.app.translation.recipe import TranslationTask, prepare
from attnkit.errors import UserError
from attnkit.storage import RunFolder
from attnkit.training import Budget, LoopConfig, Trainer
from attnkit.translation.config import override, preset
from attnkit.translation.numbers import NumbersSpec, numbers_splits

BACKEND = os.environ.get("ATTNKIT_TEST_COMPILE_BACKEND", "aot_eager")  # "inductor" compiles C++ kernels (minutes)
LOOP = LoopConfig(log_every_steps=1, checkpoint_every_minutes=None, average_last=0, compile=True,
                  compile_backend=BACKEND)


def tiny_task(tmp_path) -> tuple[TranslationTask, RunFolder]:
    splits = numbers_splits(NumbersSpec(max_number=60, valid_size=4, test_size=4))
    config = override(preset("tiny"), ["model.d_model=16", "model.num_heads=2", "model.d_ff=32", "vocab_size=100",
                                       "max_tokens=100", "max_length=32", "eval_sentences=4", "model.dropout=0",
                                       "model.num_encoder_layers=1", "model.num_decoder_layers=1"])
    prepared = prepare(config, splits)
    run = RunFolder.create(tmp_path / "run", "translation", prepared.config.to_dict())
    return TranslationTask(prepared.config, prepared.tokenizer, prepared.train, splits["valid"]), run


def test_compiled_training_runs_and_saves_uncompiled_names(tmp_path):
    task, run = tiny_task(tmp_path)
    eager_names = set(task.model.state_dict())
    trainer = Trainer(task, run, Budget(steps=2), LOOP, progress=False)
    trainer.fit()
    assert isinstance(trainer.train_module, torch._dynamo.eval_frame.OptimizedModule)
    assert trainer.train_module._orig_mod is task.model  # compiled around the task's model, which stays eager
    losses = [record["loss"] for record in run.metrics() if record["split"] == "train"]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    for path in (run.last_weights, run.best_weights, *run.training_states()):
        with safe_open(path, "pt") as file:
            names = set(file.keys())
        assert not any("_orig_mod" in name for name in names), path
    with safe_open(run.last_weights, "pt") as file:
        assert set(file.keys()) <= eager_names and len(set(file.keys())) > 0


def test_a_failing_compiler_is_one_clear_error(tmp_path):
    def broken(graph, example_inputs):
        raise RuntimeError("no C++ compiler found")

    torch._dynamo.reset()
    task, run = tiny_task(tmp_path)
    loop = LoopConfig(checkpoint_every_minutes=None, average_last=0, compile=True, compile_backend=broken)
    with pytest.raises(UserError, match=r"--compile: torch.compile .* failed at the first training step .*"
                                        r"no C\+\+ compiler found.*train without --compile"):
        Trainer(task, run, Budget(steps=1), loop, progress=False).fit()
    torch._dynamo.reset()


def test_train_step_runs_the_compiled_module_of_any_task(tmp_path):
    """The loop compiles the task's model itself: a task needs no module of its own to be compiled."""
    seen = []

    class Recording(ToyRegression):
        def train_step(self, model, batch):
            seen.append(model)
            return super().train_step(model, batch)

    task = Recording()
    trainer = Trainer(task, RunFolder.create(tmp_path / "toy", "toy", {}), Budget(steps=2), LOOP, progress=False)
    trainer.fit()
    assert len(seen) == 2 and all(model is trainer.train_module for model in seen)
    assert isinstance(trainer.train_module, torch._dynamo.eval_frame.OptimizedModule)
    assert trainer.train_module._orig_mod is task.model
