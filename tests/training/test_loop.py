"""The training loop against an uninterrupted run of the same toy task (tests/training/toy_task.py)."""

from __future__ import annotations

import json
import signal

import pytest
import torch
from torch.testing import assert_close
from toy_task import ToyRegression

from attnkit.errors import CheckpointError, ConfigError
from attnkit.storage import RunFolder, load_weights
from attnkit.training import Budget, LoopConfig, Trainer, TrainingDiverged

CONFIG = LoopConfig(log_every_steps=2, eval_every_steps=3, accumulate=2, checkpoint_every_steps=2,
                    checkpoint_every_minutes=None, average_last=3)


def train(path, budget, resume=False, config=CONFIG, **task_options):
    torch.manual_seed(99)  # the global RNG (dropout) is part of what resume must restore
    task = ToyRegression(**task_options)
    run = RunFolder.create(path, "toy", {"lr": task_options.get("lr", 1e-2)}, resume=resume)
    result = Trainer(task, run, budget, config, progress=False).fit(resume=resume)
    return task, run, result


def assert_same_model(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert_close(x, y, rtol=0, atol=0, msg=lambda m, name=name: f"{name}: {m}")


def test_resume_after_stop_gives_the_uninterrupted_losses_and_weights(tmp_path):
    full, full_run, full_result = train(tmp_path / "full", Budget(steps=9))
    first, _, stopped = train(tmp_path / "split", Budget(steps=4))  # 8 batches: crosses the 7-batch epoch
    resumed, run, result = train(tmp_path / "split", Budget(steps=9), resume=True)
    assert stopped.stop_reason == "steps" and stopped.step == 4
    assert result.step == full_result.step == 9 and result.epoch == full_result.epoch == 2
    assert first.losses == full.losses[:8]
    assert_close(torch.tensor(resumed.losses), torch.tensor(full.losses[8:]), rtol=0, atol=0)
    assert_same_model(resumed.model, full.model)
    assert resumed.calls == full.calls == 18  # the task's own state came back through state()/load_state()
    assert_close(resumed.optimizer.param_groups[0]["lr"], full.optimizer.param_groups[0]["lr"])
    train_losses = [r["loss"] for r in run.metrics() if r["split"] == "train"]
    assert train_losses == [r["loss"] for r in full_run.metrics() if r["split"] == "train"]


def test_ctrl_c_saves_the_state_and_resume_continues_exactly(tmp_path, capsys):
    full, _, _ = train(tmp_path / "full", Budget(steps=6))

    class Interrupted(ToyRegression):
        def train_step(self, model, batch):
            if self.calls == 5:  # during the third step
                signal.raise_signal(signal.SIGINT)
            return super().train_step(model, batch)

    torch.manual_seed(99)
    task = Interrupted()
    run = RunFolder.create(tmp_path / "split", "toy", {"lr": 1e-2})
    with pytest.raises(KeyboardInterrupt):
        Trainer(task, run, Budget(steps=6), CONFIG, progress=False).fit()
    assert task.calls == 6  # the step under way was finished
    assert "interrupted (continue with --resume) at step 3" in capsys.readouterr().err
    assert [p.name for p in run.training_states()] == ["step-00000002.safetensors", "step-00000003.safetensors"]
    resumed, _, result = train(tmp_path / "split", Budget(steps=6), resume=True)
    assert result.step == 6
    assert_close(torch.tensor(resumed.losses), torch.tensor(full.losses[6:]), rtol=0, atol=0)
    assert_same_model(resumed.model, full.model)


def test_budget_by_epochs_and_by_steps(tmp_path):
    config = LoopConfig(log_every_steps=1, checkpoint_every_minutes=None, average_last=0)
    task, _, result = train(tmp_path / "epochs", Budget(epochs=2, steps=100), config=config)
    assert (result.stop_reason, result.step, result.epoch, len(task.losses)) == ("epochs", 14, 2, 14)
    task, _, result = train(tmp_path / "steps", Budget(epochs=2, steps=3), config=config)
    assert (result.stop_reason, result.step, result.epoch, len(task.losses)) == ("steps", 3, 0, 3)
    task, _, result = train(tmp_path / "minutes", Budget(minutes=0.001, steps=10**6), config=config)
    assert result.stop_reason == "minutes" and result.step == len(task.losses) < 10**6
    with pytest.raises(ConfigError, match="at least one"):
        Budget()


def test_truncated_newest_state_is_named_and_resume_falls_back(tmp_path, capsys):
    """Also the all-damaged case: CheckpointError naming the file."""
    full, _, _ = train(tmp_path / "full", Budget(steps=7))
    train(tmp_path / "split", Budget(steps=4))
    run = RunFolder.open(tmp_path / "split")
    newest = run.training_states()[-1]
    assert newest.name == "step-00000004.safetensors"
    newest.write_bytes(newest.read_bytes()[:-100])  # cut short, as by a crash mid-write without atomic rename
    resumed, _, result = train(tmp_path / "split", Budget(steps=7), resume=True)
    assert "step-00000004.safetensors is truncated" in capsys.readouterr().err
    assert (run.path / "state" / "step-00000004.safetensors.damaged").is_file()
    assert [p.name for p in run.training_states()] == ["step-00000006.safetensors", "step-00000007.safetensors"]
    assert result.step == 7
    assert_close(torch.tensor(resumed.losses), torch.tensor(full.losses[4:]), rtol=0, atol=0)  # from step 2
    assert_same_model(resumed.model, full.model)
    for state in run.training_states():
        state.write_bytes(state.read_bytes()[:50])
    with pytest.raises(CheckpointError, match="no usable training state.*step-00000007.*step-00000006"):
        train(tmp_path / "split", Budget(steps=9), resume=True)


def test_non_finite_losses_are_skipped_and_counted(tmp_path):
    config = LoopConfig(log_every_steps=1, checkpoint_every_minutes=None, max_nonfinite=3)
    task, run, result = train(tmp_path / "run", Budget(steps=5), config=config, nan_steps={1, 3})
    assert result.stop_reason == "steps" and result.step == 5 and result.nonfinite_total == 2
    assert len(task.losses) == 7
    assert all(torch.isfinite(p).all() for p in task.model.parameters())
    assert [r["step"] for r in run.metrics() if r["split"] == "train"] == [1, 2, 3, 4, 5]


def test_k_non_finite_losses_in_a_row_stop_the_run_and_keep_the_last_checkpoint(tmp_path):
    config = LoopConfig(log_every_steps=1, checkpoint_every_steps=2, checkpoint_every_minutes=None, max_nonfinite=3)
    with pytest.raises(TrainingDiverged, match="3 non-finite losses in a row at step 4.*step 4"):
        train(tmp_path / "run", Budget(steps=10), config=config, nan_steps={4, 5, 6, 7})
    run = RunFolder.open(tmp_path / "run", "toy")
    assert run.training_states()[-1].name == "step-00000004.safetensors"
    assert run.curves_path.is_file()
    torch.manual_seed(0)
    model = ToyRegression().model
    assert load_weights(run.last_weights, model)["step"] == 4


def test_metrics_jsonl_and_curves_png_are_written(tmp_path):
    _, run, result = train(tmp_path / "run", Budget(steps=6))
    lines = run.metrics_path.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    train_records = [r for r in records if r["split"] == "train"]
    valid_records = [r for r in records if r["split"] == "valid"]
    assert [r["step"] for r in train_records] == [2, 4, 6]
    assert [r["step"] for r in valid_records] == [3, 6]
    assert all({"time", "loss", "lr", "samples_per_s", "grad_norm"} <= set(r) for r in train_records)
    assert all({"loss", "noise"} <= set(r) for r in valid_records)
    assert run.curves_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.best_step in (3, 6)
    best = min(valid_records, key=lambda r: r["loss"])
    assert result.best_value == best["loss"] and result.best_step == best["step"]


def test_best_and_average_weights(tmp_path):
    task, run, result = train(tmp_path / "run", Budget(steps=6))
    model = ToyRegression().model
    assert load_weights(run.best_weights, model)["step"] == result.best_step
    snapshots = run.snapshots()
    assert [p.name for p in snapshots] == [f"step-0000000{s}.safetensors" for s in (2, 4, 6)]
    expected = {}
    for path in snapshots:
        load_weights(path, model)
        for name, tensor in model.state_dict().items():
            expected[name] = expected.get(name, 0) + tensor / 3
    metadata = load_weights(run.average_weights, model)
    assert metadata["averaged_steps"] == [2, 4, 6]
    for name, tensor in model.state_dict().items():
        assert_close(tensor, expected[name])


def test_bf16_autocast_trains_on_cpu_and_fp16_needs_cuda(tmp_path):
    config = LoopConfig(amp="bf16", checkpoint_every_minutes=None, average_last=0)
    task, _, result = train(tmp_path / "bf16", Budget(steps=3), config=config)
    assert result.step == 3 and all(torch.isfinite(torch.tensor(task.losses)))
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="fp16"):
            Trainer(task, RunFolder.create(tmp_path / "fp16", "toy", {}), Budget(steps=1),
                    LoopConfig(amp="fp16"), progress=False)
    with pytest.raises(ConfigError, match="amp must be"):
        LoopConfig(amp="fp8")


def test_resume_warns_about_a_changed_config_and_keeps_the_saved_one(tmp_path, capsys):
    train(tmp_path / "run", Budget(steps=2))
    _, run, result = train(tmp_path / "run", Budget(steps=3), resume=True, lr=0.5)
    assert "differs in: lr" in capsys.readouterr().err
    assert run.config == {"lr": 0.01} and result.step == 3


def test_validation_without_data_or_without_the_best_metric(tmp_path, capsys):
    class NoValidation(ToyRegression):
        def evaluate(self):
            return {}

    class OtherMetric(ToyRegression):
        def evaluate(self):
            return {"mse": 1.0, "per_class": [1.0, 2.0], "count": torch.tensor(3)}

    config = LoopConfig(eval_every_steps=1, checkpoint_every_minutes=None, average_last=0)
    for name, task in (("none", NoValidation()), ("other", OtherMetric())):
        run = RunFolder.create(tmp_path / name, "toy", {})
        Trainer(task, run, Budget(steps=2), config, progress=False).fit()
        assert not run.best_weights.exists() and run.last_weights.is_file()
        valid = [{key: value for key, value in r.items() if key != "time"} for r in run.metrics()
                 if r["split"] == "valid"]
        expected = [] if name == "none" else [{"step": step, "split": "valid", "epoch": 0, "mse": 1.0, "count": 3.0}
                                              for step in (1, 2)]
        assert valid == expected
    assert "no 'loss' among the validation metrics" in capsys.readouterr().err


def test_loss_scaler_state_resumes_and_its_skipped_steps_are_not_divergence(tmp_path):
    """The fp16 path's GradScaler logic, exercised on CPU with fp32 gradients (fp16 itself needs CUDA)."""

    class InfGradient(ToyRegression):
        def train_step(self, model, batch):
            output = super().train_step(model, batch)
            if self.calls == 3:  # an overflow in the backward pass only: the loss itself is finite
                weights = self.model[0].weight.sum()
                output["loss"] = output["loss"] + 1e38 * (weights - weights.detach())  # gradient 1e38 * scale: inf
            return output

    def fit(path, steps, resume=False):
        torch.manual_seed(99)
        task = InfGradient()
        run = RunFolder.create(path, "toy", {}, resume=resume)
        trainer = Trainer(task, run, Budget(steps=steps), CONFIG, progress=False)
        trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=100)
        return task, trainer, trainer.fit(resume=resume)

    full, full_trainer, result = fit(tmp_path / "full", 6)
    assert result.nonfinite_total == 0 and result.step == 6  # the scaler skipped the update, the loop did not count it
    assert full_trainer.scaler.get_scale() == 2.0**9  # halved once, at the overflow
    fit(tmp_path / "split", 3)
    resumed, trainer, _ = fit(tmp_path / "split", 6, resume=True)
    assert trainer.scaler.state_dict() == full_trainer.scaler.state_dict()
    assert_close(torch.tensor(resumed.losses), torch.tensor(full.losses[6:]), rtol=0, atol=0)
    assert_same_model(resumed.model, full.model)
