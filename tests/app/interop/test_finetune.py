"""`attnkit train detection --init RUN`: the init run's model and weights, the class head resized for the new data."""

from __future__ import annotations

import json

import torch
from detr_models import hf_detr
from PIL import Image
from typer.testing import CliRunner

import attnkit.app.detection.recipe as task_module
from attnkit.app.cli import load_commands
from attnkit.app.interop.detr_import import import_detr
from attnkit.storage import read_weights

runner = CliRunner()
TINY = ["--preset", "tiny", "--eval-every-minutes", "10", "--steps", "2"]
SHAPES = ["--data", "shapes", "--shapes-train-images", "4", "--shapes-val-images", "2", "--shapes-image-size", "64"]
HEAD = ("class_embed.weight", "class_embed.bias")


def invoke(*args):
    return runner.invoke(load_commands(), [str(a) for a in args])


def record_initial_weights(monkeypatch) -> dict[str, torch.Tensor]:
    """The weights the training task starts from (step 0), filled in when `train` builds the task."""
    started: dict[str, torch.Tensor] = {}

    class Recording(task_module.DetectionTask):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.update({name: tensor.to("cpu", copy=True) for name, tensor in self.model.state_dict().items()})

    monkeypatch.setattr(task_module, "DetectionTask", Recording)
    return started


def write_two_class_coco(root):
    """Two 64x48 images with one box each, categories 3 and 8: (image folder, annotation file)."""
    (root / "images").mkdir(parents=True)
    images, annotations = [], []
    for index, (x, category) in enumerate([(4, 3), (30, 8)], start=1):
        picture = Image.new("RGB", (64, 48), (0, 0, 0))
        picture.paste((255, 255, 255), (x, 10, x + 20, 30))
        picture.save(root / "images" / f"{index}.png")
        images.append({"id": index, "file_name": f"{index}.png", "width": 64, "height": 48})
        annotations.append({"id": index, "image_id": index, "category_id": category, "bbox": [x, 10, 20, 20]})
    path = root / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations,
                                "categories": [{"id": 3, "name": "a"}, {"id": 8, "name": "b"}]}))
    return root / "images", path


def test_init_starts_from_every_weight_of_the_run_but_a_resized_class_head(detection_run, tmp_path, monkeypatch):
    started = record_initial_weights(monkeypatch)
    out = tmp_path / "run"
    result = invoke("train", "detection", *SHAPES, *TINY, "--init", detection_run, "--out", out)
    assert result.exit_code == 0, result.output
    assert "at step 2" in result.output and "class head re-initialised for 5 classes" in result.output
    init, _ = read_weights(detection_run / "weights" / "best.safetensors")
    assert init["class_embed.weight"].shape == (3, 32) and started["class_embed.weight"].shape == (6, 32)
    assert started.keys() == init.keys()
    for name in init.keys() - set(HEAD):  # backbone, projection, Transformer, queries, box head
        assert torch.equal(started[name], init[name]), name
    trained, _ = read_weights(out / "weights" / "last.safetensors")
    assert trained["class_embed.weight"].shape == (6, 32) and trained["class_embed.bias"].shape == (6,)
    config = json.loads((out / "config.json").read_text())
    before = json.loads((detection_run / "config.json").read_text())
    assert config["model"] == {**before["model"], "num_classes": 5}
    assert config["init_from"].endswith("best.safetensors") and config["preset"] == "tiny"


def test_an_imported_detr_fine_tunes_on_other_classes(tmp_path, monkeypatch):
    hf_detr("basic", seed=2).save_pretrained(tmp_path / "hf")  # 5 classes, ResNet-18, 4 heads, 7 queries
    imported = import_detr(tmp_path / "hf", tmp_path / "imported").path
    images, annotations = write_two_class_coco(tmp_path / "mine")
    started = record_initial_weights(monkeypatch)
    out = tmp_path / "run"
    result = invoke("train", "detection", "--images", images, "--annotations", annotations, *TINY, "--no-flip",
                    "--init", imported, "--out", out)
    assert result.exit_code == 0, result.output
    model = json.loads((out / "config.json").read_text())["model"]
    assert (model["backbone"], model["num_heads"], model["num_queries"], model["num_classes"]) == ("resnet18", 4, 7, 2)
    assert model["frozen_batchnorm"] is True  # as the imported backbone was trained
    init, _ = read_weights(imported / "weights" / "best.safetensors")
    for name in init.keys() - set(HEAD):
        assert torch.equal(started[name], init[name]), name
    trained, _ = read_weights(out / "weights" / "last.safetensors")
    assert trained["class_embed.weight"].shape == (3, 32)
    for name in ("backbone.0.body.conv1.weight", "backbone.0.body.layer1.0.conv1.weight",
                 "backbone.0.body.layer1.0.bn1.running_var"):  # frozen (DETR): still the imported values
        assert torch.equal(trained[name], init[name]), name


def test_an_init_that_is_not_a_detection_run_or_does_not_fit_is_one_error_line(translation_run, detection_run,
                                                                               tmp_path):
    out = tmp_path / "run"
    for init, extra, message in [(translation_run, [], "is a translation run, not a detection run"),
                                 (tmp_path / "missing", [], "no run folder at"),
                                 (detection_run, ["--set", "model.num_queries=4"], "mis-shaped ['query_embed.weight")]:
        result = invoke("train", "detection", *SHAPES, *TINY, "--init", init, "--out", out, *extra)
        assert result.exit_code == 2, result.output
        assert "error:" in result.output and message in result.output and "Traceback" not in result.output
        assert not out.exists()


def test_a_transformers_detr_folder_is_an_init_source_and_the_log_names_the_fresh_tensors(tmp_path, monkeypatch):
    hf_detr("basic", seed=2).save_pretrained(tmp_path / "hf")  # 5 classes; imported straight from the folder
    images, annotations = write_two_class_coco(tmp_path / "mine")
    started = record_initial_weights(monkeypatch)
    out = tmp_path / "run"
    result = invoke("train", "detection", "--images", images, "--annotations", annotations, *TINY, "--no-flip",
                    "--init", tmp_path / "hf", "--out", out)
    assert result.exit_code == 0, result.output
    assert "class head re-initialised for 2 classes: 2 tensors started fresh (class_embed.weight, class_embed.bias)" \
        in result.output
    assert "classes from the data: a, b" in result.output
    config = json.loads((out / "config.json").read_text())
    assert config["init_from"] == str(tmp_path / "hf") and config["class_names"] == ["a", "b"]
    imported = import_detr(tmp_path / "hf", tmp_path / "imported").path
    init, _ = read_weights(imported / "weights" / "best.safetensors")
    assert f"init: {len(init) - 2} tensors loaded" in result.output
    for name in init.keys() - set(HEAD):
        assert torch.equal(started[name], init[name]), name


def test_an_official_detr_pth_is_an_init_source(tmp_path, monkeypatch):
    from attnkit.app.interop.detr_import import hf_to_official

    torch.save({"model": hf_to_official(hf_detr("basic", seed=3).state_dict())}, tmp_path / "detr-test.pth")
    images, annotations = write_two_class_coco(tmp_path / "mine")
    started = record_initial_weights(monkeypatch)
    out = tmp_path / "run"
    result = invoke("train", "detection", "--images", images, "--annotations", annotations, *TINY, "--no-flip",
                    "--init", tmp_path / "detr-test.pth", "--out", out)
    assert result.exit_code == 0, result.output
    assert "init: importing" in result.output and "2 tensors started fresh" in result.output
    init, _ = read_weights(import_detr(tmp_path / "detr-test.pth", tmp_path / "imported").path
                           / "weights" / "best.safetensors")
    for name in init.keys() - set(HEAD):
        assert torch.equal(started[name], init[name]), name
    assert json.loads((out / "config.json").read_text())["init_from"] == str(tmp_path / "detr-test.pth")
