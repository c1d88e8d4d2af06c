"""The GPU check script runs its code on the CPU at tiny sizes, so that it works when a GPU is at hand."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def benchmark_script(name: str):
    """benchmarks/NAME.py loaded as a module (the folder is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_cuda_check_runs_every_part_on_the_cpu_without_a_failure(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cuda_check.py"), "--device", "cpu",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("## ")] == [
        "## 1. attention: attnkit vs torch, SDPA backends", "## 2. attention kernels of a translation training step",
        "## 3. detection under mixed precision", "## 4. multi-worker data loading",
        "## 5. detector inference, fast / DETR", "## 6. detector training step",
        "## 7. translation training step, MFU"]
    assert "FAIL" not in done.stdout, done.stdout
    assert "4 workers give the same tensors: True" in done.stdout and "| math | fp32 | ok" in done.stdout


def test_the_sampling_bound_skips_only_the_sampling(monkeypatch):
    """detector_inference.py --bound: `fast` with free sampling never samples, and keeps its output's form."""
    import importlib.util

    import torch

    from attnkit.detection.architectures import build_model
    from attnkit.detection.config import preset, with_arch
    from attnkit.detection.variants import multi_scale_deformable_attention

    spec = importlib.util.spec_from_file_location("detector_inference", ROOT / "benchmarks" / "detector_inference.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    config = with_arch(preset("tiny")[0], "fast", num_classes=3, last_stage=4)
    images, mask = torch.randn(2, 3, 64, 64), torch.zeros(2, 64, 64, dtype=torch.bool)
    torch.manual_seed(0)
    real = build_model(config).eval()
    free = script.free_sampling(build_model(config).eval())
    with torch.inference_mode():
        expected = real(images, mask)

        def sampling(*args):
            raise AssertionError("the bound sampled")

        monkeypatch.setattr(multi_scale_deformable_attention, "deformable_sampling", sampling)
        got = free(images, mask)
    assert {k: v.shape for k, v in vars(got).items() if torch.is_tensor(v)} == \
        {k: v.shape for k, v in vars(expected).items() if torch.is_tensor(v)}


def test_rtdetr_arm_pads_to_multiples_of_32_and_keeps_boxes_on_the_same_pixels():
    """detector_vs_rtdetr.py: RT-DETR's canvas (sides multiples of 32) and the box factor both ways."""

    import torch

    script = benchmark_script("detector_vs_rtdetr")
    images, mask = torch.rand(2, 3, 70, 90), torch.ones(2, 70, 90, dtype=torch.bool)
    mask[0, :70, :90] = False  # image 0: 90 x 70 (the batch's size); image 1: 45 x 60, padded
    mask[1, :60, :45] = False
    canvas, scale = script.on_canvas(images, mask)
    assert canvas.shape == (2, 3, 96, 96) and torch.equal(canvas[:, :, :70, :90], images)
    assert canvas[:, :, 70:].abs().sum() == 0 and canvas[..., 90:].abs().sum() == 0
    boxes = torch.tensor([[0.5, 0.5, 0.2, 0.4]])  # cx, cy, w, h of each image's own size
    for i, (width, height) in enumerate([(90, 70), (45, 60)]):
        on = boxes * scale[i]  # normalised by the 96 x 96 canvas: the same pixels
        assert torch.allclose(on * 96, boxes * torch.tensor([width, height, width, height]))
        assert torch.allclose(on / scale[i], boxes)


def test_rtdetr_contest_set_changes_attnkit_model_fields():
    """detector_vs_rtdetr.py --set: the preset's model with fields changed, values parsed as --set parses them."""

    script = benchmark_script("detector_vs_rtdetr")
    model, train = script.preset_at("small", 320, ["backbone=resnet", "backbone_block=basic",
                                                   "backbone_depths=[2,2,2,2]", "backbone_widths=[32,64,128,256]",
                                                   "backbone_stem_width=32", "two_stage=false"])
    assert model.backbone_widths == (32, 64, 128, 256) and model.backbone_stem_width == 32 and not model.two_stage
    assert model.hidden_dim == 128 and train.train_scales == (320,)  # the rest is the preset's
    assert script.preset_at("small", 96)[0] == script.preset_at("small", 96, [])[0]
    # each RT-DETR kind's own recipe; the backbone's lr is the rest's unless given (a contest records it resolved)
    assert script.contest_settings(script.parse_args(["train", "--rtdetr", "r18vd"]))["backbone_lr"] == 1e-4
    assert script.contest_settings(script.parse_args(["train", "--rtdetr", "r18vd", "dfine"]))["backbone_lr"] is None
    assert script.RECIPES["dfine"].lr == 2.5e-4 and script.RECIPES["r18vd"].warmup_steps == 2000


def test_rtdetr_contest_saved_after_a_point_goes_on_where_each_arm_was(tmp_path, capsys):
    """detector_vs_rtdetr.py --resume: both arms' weights, moments, EMA, clocks and batches come back as saved,
    attnkit's from its saved config; a contest with other settings (or none saved) is refused, and a saved one is
    never started over without --resume."""

    import pytest
    import torch

    script = benchmark_script("detector_vs_rtdetr")
    args = script.parse_args(["train", "--quick", "--rtdetr", "shrunk", "--out", str(tmp_path)])
    config, amp, arms = script.build_arms(args)
    assert arms[1].base == [1e-4] * 3 and arms[1].ema.warmups == 2000  # the shrunk RT-DETR's recipe, R18-vd's
    for arm in arms:
        arm.train_for(1.0)
        arm.points.append({"minutes": 0.02, "steps": arm.steps, "AP": 0.5, "AP_raw": 0.5, "AP_ema": 0.4})
    table = script.contest_table(script.contest_result(args, config, amp, arms))
    assert "| attnkit AP (steps) | shrunk AP (raw / EMA; steps) | ratio |" in table[2]
    assert table[-1] == (f"| 0.0 | 0.500 (raw 0.500 / EMA 0.400) ({arms[0].steps}) | 0.500 (0.500 / 0.400; "
                         f"{arms[1].steps}) | 1.0x |")
    path = script.contest_state_path(args)
    script.save_contest(path, args, config, 3, arms, [])
    assert script.load_contest_minutes(path) == {arm.name: round(arm.spent / 60, 2) for arm in arms}

    args.resume = True
    state = script.load_contest(args, path)
    assert state["attnkit_config"] == config.to_dict()
    changed = {**config.to_dict(), "model": {**config.to_dict()["model"], "iou_aware": not config.model.iou_aware},
               "train": {**config.to_dict()["train"], "batch_size": config.train.batch_size + 1}}
    rebuilt, _, rebuilt_arms = script.build_arms(args, changed)  # the saved config rules, whatever the preset says
    assert rebuilt.model.iou_aware != config.model.iou_aware
    assert [arm.batch_size for arm in rebuilt_arms] == [config.train.batch_size + 1] * 2  # both arms' batches
    again_config, _, again = script.build_arms(args, state["attnkit_config"])  # the same seeds: untrained weights
    assert again_config == config
    turn, resumed = script.restore_contest(state, path, again)
    assert turn == 3 and len(resumed) == 1 and set(resumed[0]["minutes"]) == {"attnkit", "shrunk"}
    for old, new in zip(arms, again):
        assert new.steps == old.steps > 0 and new.spent == old.spent and new.epoch == old.epoch
        assert new.queue == old.queue and new.points == old.points
        for name, value in old.model.state_dict().items():
            assert torch.equal(new.model.state_dict()[name], value), name
        moments = [(a, b) for a, b in zip(old.optimizer.state.values(), new.optimizer.state.values())]
        assert moments and all(torch.equal(a["exp_avg_sq"], b["exp_avg_sq"]) for a, b in moments)
    assert again[1].ema.updates == arms[1].ema.updates > 0
    assert all(torch.equal(a, b) for a, b in zip(arms[1].ema.module.state_dict().values(),
                                                  again[1].ema.module.state_dict().values()))
    assert again[0].ema.updates == arms[0].ema.updates == arms[0].steps  # attnkit's, the preset's (train.ema_decay)
    assert all(torch.equal(a, b) for a, b in zip(arms[0].ema.weights().values(), again[0].ema.weights().values()))

    other = script.parse_args(["train", "--quick", "--rtdetr", "shrunk", "--out", str(tmp_path), "--resume",
                               "--chunk", "7"])
    other.chunk = 7.0  # --quick sets the chunk; a resumed contest must keep the saved one
    with pytest.raises(SystemExit) as refused:
        script.load_contest(other, path)
    assert refused.value.code == 2 and "chunk" in capsys.readouterr().err
    from attnkit.storage.checkpoint import save_training_state

    older = tmp_path / "older.safetensors"  # saved before the state held attnkit's config
    save_training_state(older, {k: v for k, v in state.items() if k != "attnkit_config"})
    with pytest.raises(SystemExit) as refused:
        script.load_contest(args, older)
    assert refused.value.code == 2 and "attnkit's config" in capsys.readouterr().err
    args.resume = False
    with pytest.raises(SystemExit) as kept:
        script.contest(args)
    assert kept.value.code == 2 and "--resume" in capsys.readouterr().err and path.exists()


def test_rtdetr_latency_op_times_sum_each_operator_types_kernels(tmp_path):
    """detector_vs_rtdetr.py --op-times: ONNX Runtime's profile of a graph, per operator type, and its table row."""

    import torch

    script = benchmark_script("detector_vs_rtdetr")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 8, 3)).eval()
    path = tmp_path / "graph.onnx"
    torch.onnx.export(model, (torch.rand(1, 3, 32, 32),), str(path), input_names=["images"], dynamo=False)
    ops = script.op_times(path, {"images": torch.rand(1, 3, 32, 32).numpy()}, threads=1)
    assert "Conv" in ops and all(ms >= 0 for ms in ops.values()) and list(tmp_path.glob("*.json")) == []
    row = script.op_table({"rows": {"net": {"parameters": 1, "op ms 32px b1": {"Conv": 3.0, "Relu": 1.0}}}})[-1]
    assert row == "| 32px b1 | net | 4.0 | 3.0 (75%) | Relu 1.0 |"


def test_rtdetr_latency_times_sessions_in_rotated_rounds():
    """detector_vs_rtdetr.py: ONNX Runtime's sessions timed one at a time, each first in one round, each with a
    warm-up call before its run and REPEATS timed calls in all."""

    script = benchmark_script("detector_vs_rtdetr")
    order: list[str] = []
    calls = {name: (lambda n=name: order.append(n)) for name in ("a", "b", "c")}
    times: dict = {name: [] for name in calls}
    script.sessions_in_turns(calls, times, repeats=6, rounds=3)
    runs = [order[i] for i in range(0, len(order), 3)]  # each run: a warm-up call and 2 timed calls
    assert runs == ["a", "b", "c", "b", "c", "a", "c", "a", "b"] and order == [n for n in runs for _ in range(3)]
    assert all(len(values) == 6 for values in times.values())


def test_rtdetr_contest_on_a_gpu_counts_wall_clock_and_times_pytorch_only():
    """detector_vs_rtdetr.py --device cuda: a budget minute is wall-clock time (CPU time is refused), ONNX Runtime
    (its CPU provider) is left out of the latency; on the CPU the clock stays CPU time."""

    import pytest

    script = benchmark_script("detector_vs_rtdetr")
    gpu = script.parse_args(["latency", "--device", "cuda"])
    assert gpu.clock == "wall" and gpu.runtimes == ["torch"]
    cpu = script.parse_args(["train"])
    assert cpu.clock == "cpu" and cpu.runtimes == ["torch", "onnx"] and cpu.device == "cpu"
    with pytest.raises(SystemExit):
        script.parse_args(["train", "--device", "cuda", "--clock", "cpu"])
