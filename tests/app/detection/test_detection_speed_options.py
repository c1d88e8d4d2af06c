"""Detection's speed options change no results beyond floating-point tolerance: accumulate, amp; and the
backbone's channels-last weights."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
import torch
from torch.testing import assert_close
from typer.testing import CliRunner

from attnkit.app.cli import load_commands
from attnkit.app.detection.recipe import DetectionTask, loop_config
from attnkit.detection.config import DetectionConfig, check_kept, override, preset
from attnkit.detection.data import CocoDetection
from attnkit.detection.detector import Detector
from attnkit.detection.transforms import eval_transforms
from attnkit.errors import ConfigError
from attnkit.storage import RunFolder
from attnkit.training import Budget, Trainer
from attnkit.training.precision import cpu_has_bf16, resolve_amp

CPU = torch.device("cpu")


@pytest.fixture
def four_images(tmp_path, coco_writer) -> CocoDetection:
    """Four 64 x 64 images with one box each, read without augmentation: every batch of two has two boxes."""
    images = [{"id": i, "file_name": f"{i}.png", "width": 64, "height": 64} for i in range(4)]
    annotations = [{"id": i, "image_id": i, "category_id": 1 + i % 2, "bbox": [4 + 9 * i, 6 + 5 * i, 20, 16 + i],
                    "iscrowd": 0} for i in range(4)]
    folder, path = coco_writer(tmp_path / "coco", images, annotations, [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
    return CocoDetection(folder, path, eval_transforms(64, 96))


def tiny_config(**train_fields) -> DetectionConfig:
    """The tiny preset with frozen batch norm (no batch statistics) and no dropout: a batch's images don't interact."""
    model, train = preset("tiny")
    return DetectionConfig(replace(model, num_classes=2, frozen_batchnorm=True, dropout=0.0),
                           replace(train, flip=False, **train_fields))


def first_step(task: DetectionTask, run_path, steps: int = 1) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Train STEPS steps; the logged losses, and the gradients the optimizer's first step received."""
    gradients: dict[str, torch.Tensor] = {}

    def keep(optimizer, args, kwargs):
        if not gradients:
            gradients.update({n: p.grad.clone() for n, p in task.model.named_parameters() if p.grad is not None})

    task.optimizer.register_step_pre_hook(keep)
    run = RunFolder.create(run_path, "detection", task.config.to_dict())
    loop = replace(loop_config(task.config, CPU), log_every_steps=1, checkpoint_every_minutes=None, average_last=0)
    Trainer(task, run, Budget(steps=steps), loop, progress=False).fit()
    return [r["loss"] for r in run.metrics() if r["split"] == "train"], gradients


def test_two_accumulated_batches_of_two_step_like_one_batch_of_four(tmp_path, four_images):
    accumulated = DetectionTask(tiny_config(batch_size=2, accumulate=2), four_images, None)
    whole = DetectionTask(tiny_config(batch_size=4, accumulate=1), four_images, None)
    assert len(accumulated.batches(0)) == 2 and len(whole.batches(0)) == 1
    loss_accumulated, grad_accumulated = first_step(accumulated, tmp_path / "accumulated")
    loss_whole, grad_whole = first_step(whole, tmp_path / "whole")
    assert len(grad_whole) > 20 and grad_accumulated.keys() == grad_whole.keys()
    assert_close(loss_accumulated, loss_whole, rtol=1e-5, atol=1e-6)
    for name, gradient in grad_whole.items():
        assert_close(grad_accumulated[name], gradient, rtol=1e-4, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")
    assert any(g.abs().sum() > 0 for g in grad_whole.values())


def test_learning_rates_drop_once_the_fraction_of_the_budget_is_spent(tmp_path, four_images):
    for budget in (Budget(steps=4), Budget(epochs=2)):  # 4 steps either way: 4 batches of 2, accumulated 2 by 2
        task = DetectionTask(tiny_config(batch_size=1, accumulate=2, lr_drop=0.5), four_images, None)
        run = RunFolder.create(tmp_path / str(budget.steps), "detection", task.config.to_dict())
        loop = replace(loop_config(task.config, CPU), log_every_steps=1, checkpoint_every_minutes=None, average_last=0)
        Trainer(task, run, budget, loop, progress=False).fit()
        rates = [r["lr"] for r in run.metrics() if r["split"] == "train"]
        lr = task.config.train.lr
        assert_close(rates, [lr, lr, lr / 10, lr / 10], rtol=1e-6, atol=0), budget
    older = task.config.to_dict()  # a run written when the drop came after a number of epochs
    older["train"] = {**{k: v for k, v in older["train"].items() if k != "lr_drop"}, "lr_drop_epochs": 200}
    assert DetectionConfig.from_dict(older).train.lr_drop == 1.0  # resumes without a drop
    with pytest.raises(ConfigError, match="lr_drop"):
        tiny_config(lr_drop=0)


def test_bf16_autocast_trains_with_finite_losses(tmp_path, four_images):
    task = DetectionTask(tiny_config(batch_size=2, amp="bf16"), four_images, None)
    assert loop_config(task.config, CPU).amp == "bf16"
    losses, _ = first_step(task, tmp_path / "bf16", steps=2)
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))


def test_backbone_weights_follow_the_mode_and_a_validation_between_steps_changes_nothing(four_images):
    """Contiguous in training, channels-last in eval mode; going to eval and back between updates (a
    validation) leaves the losses and the updated weights those of a run that never left training."""
    validated = DetectionTask(tiny_config(batch_size=2), four_images, None)
    plain = DetectionTask(tiny_config(batch_size=2), four_images, None)
    weight = validated.model.backbone[0].body.layer4[0].conv1.weight  # trained (conv1 and layer1 are frozen here)
    initial = weight.detach().clone()
    assert weight.is_contiguous()
    for batch in plain.load(plain.batches(0)[:2]):  # two steps, with a validation's mode changes after each
        losses = [task.train_step(task.model, batch)["loss"] for task in (validated, plain)]
        assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-5)
        for task, loss in zip((validated, plain), losses):
            loss.backward()
            task.optimizer.step()
            task.optimizer.zero_grad()
        validated.model.eval()
        assert weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()
        validated.model.train()
        assert weight.is_contiguous()
    assert any(p is weight for p in validated.optimizer.param_groups[1]["params"])  # the optimizer's own one
    assert not torch.equal(weight, initial)
    assert_close(weight, plain.model.backbone[0].body.layer4[0].conv1.weight, rtol=1e-5, atol=1e-6)


def test_amp_and_accumulate_are_validated_train_fields():
    config = override(tiny_config(), ["train.amp=bf16", "train.accumulate=4"])
    assert (config.train.amp, config.train.accumulate) == ("bf16", 4)
    for assignment, message in [("train.amp=fp8", "amp must be auto, off, bf16 or fp16"),
                                ("train.accumulate=0", "accumulate must be .* at least 1"),
                                ("train.accumulate=1.5", "accumulate must be")]:
        with pytest.raises(ConfigError, match=message):
            override(tiny_config(), [assignment])
    assert resolve_amp("auto", CPU) == ("bf16" if cpu_has_bf16() else "off")
    assert resolve_amp("auto", torch.device("cuda")) == "bf16"
    with pytest.raises(ConfigError, match="amp fp16 needs a CUDA device"):
        resolve_amp("fp16", CPU)
    check_kept(config, ["train.amp=bf16", "train.accumulate=4", f"train.lr={config.train.lr}"])  # the saved values
    with pytest.raises(ConfigError, match=r"train.accumulate 4 \(asked: 2\)"):
        check_kept(config, ["train.accumulate=2"])
    with pytest.raises(ConfigError, match=r"train.lr .* \(asked: 1\)"):  # any key, not only the speed options
        check_kept(config, ["train.lr=1"])


def test_a_run_folder_from_before_amp_and_accumulate_still_loads(detection_run, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(detection_run, old)
    document = json.loads((old / "config.json").read_text())
    del document["train"]["amp"], document["train"]["accumulate"]
    (old / "config.json").write_text(json.dumps(document))
    detector = Detector.from_run(old, "best", CPU)
    assert (detector.config.train.amp, detector.config.train.accumulate) == ("auto", 1)


def invoke(*args):
    return CliRunner().invoke(load_commands(), [str(a) for a in args])


@pytest.mark.parametrize("options, message", [
    (["--amp", "fp16"], "amp fp16 needs a CUDA device"),
    (["--amp", "fp8"], "amp must be auto, off, bf16 or fp16"),
    (["--accumulate", "0"], "accumulate must be a whole number of batches, at least 1"),
])
def test_bad_speed_options_are_one_error_line_and_write_nothing(tmp_path, options, message):
    if options[1] == "fp16" and torch.cuda.is_available():
        pytest.skip("fp16 is allowed on CUDA")
    result = invoke("train", "detection", "--data", "shapes", "--out", tmp_path / "run", "--preset", "tiny",
                    "--device", "cpu", *options)
    assert result.exit_code == 2, result.output
    assert "error: " in result.output and message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "run").exists()


def test_resume_refuses_an_accumulate_other_than_the_runs(detection_run):
    result = invoke("train", "detection", "--out", detection_run, "--resume", "--accumulate", "3", "--device", "cpu")
    assert result.exit_code == 2, result.output
    assert "--resume continues with the run's config.json, which has train.accumulate 1 (asked: 3)" in result.output


def test_resume_refuses_a_set_it_would_ignore_and_accepts_the_saved_value(detection_run):
    before = (detection_run / "config.json").read_bytes()
    result = invoke("train", "detection", "--out", detection_run, "--resume", "--set", "model.num_queries=7",
                    "--device", "cpu", "--steps", "1")
    assert result.exit_code == 2, result.output
    assert "which has model.num_queries 10 (asked: 7)" in result.output and "Traceback" not in result.output
    result = invoke("train", "detection", "--out", detection_run, "--resume", "--preset", "small", "--device", "cpu",
                    "--steps", "1")
    assert result.exit_code == 2 and "which has preset 'tiny' (asked: 'small')" in result.output, result.output
    assert (detection_run / "config.json").read_bytes() == before
