import json
from pathlib import Path

import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

import attnkit
from attnkit.app.cli import load_commands

runner = CliRunner()
TINY = ["--preset", "tiny", "--shapes-train-images", "4", "--shapes-val-images", "2", "--shapes-image-size", "64",
        "--eval-every-minutes", "10"]


def invoke(*args: str):
    return runner.invoke(load_commands(), [str(a) for a in args])


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("runs") / "run"
    result = invoke("train", "detection", "--data", "shapes", "--out", out, "--steps", "2", *TINY)
    assert result.exit_code == 0, result.output
    assert result.stdout == "", result.stdout  # training's progress and messages go to stderr
    return out


def test_train_writes_a_run_folder(tiny_run):
    config = json.loads((tiny_run / "config.json").read_text())
    assert config["kind"] == "detection" and config["model"]["num_classes"] == 5
    assert config["class_names"][0] == "circle"
    assert (tiny_run / "weights" / "last.safetensors").is_file() and (tiny_run / "curves.png").is_file()
    records = [json.loads(line) for line in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    assert any(r["split"] == "valid" and "AP" in r for r in records)
    assert any(r["split"] == "train" and "loss_giou" in r for r in records)


def test_resume_continues_the_run(tiny_run, tmp_path):
    result = invoke("train", "detection", "--data", "shapes", "--out", tiny_run, "--steps", "3", "--resume", *TINY)
    assert result.exit_code == 0, result.output
    assert "at step 3" in result.output


def test_a_resumed_run_ends_with_the_uninterrupted_runs_weights(tmp_path):
    # the backbone's weights are channels-last; the saved optimizer moments are contiguous and must be laid
    # out like them again, or fused AdamW pairs each weight with another element's moments
    from attnkit.storage.checkpoint import read_weights

    whole, halves = tmp_path / "whole", tmp_path / "halves"
    # no budget-relative drop; on the CPU, whose kernels are deterministic (a GPU's convolution backward is not)
    common = ["train", "detection", "--data", "shapes", *TINY, "--set", "train.lr_drop=1", "--device", "cpu"]
    assert invoke(*common, "--out", whole, "--steps", "4").exit_code == 0
    assert invoke(*common, "--out", halves, "--steps", "2").exit_code == 0
    resumed = invoke(*common, "--out", halves, "--steps", "4", "--resume")
    assert resumed.exit_code == 0, resumed.output
    expected, _ = read_weights(whole / "weights" / "last.safetensors")
    actual, _ = read_weights(halves / "weights" / "last.safetensors")
    for name, tensor in expected.items():
        torch.testing.assert_close(actual[name], tensor, rtol=0, atol=1e-6, msg=name)


def test_eval_prints_one_json_object(tiny_run):
    result = runner.invoke(load_commands(), ["eval", "detection", str(tiny_run), "--json"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(metrics) == {"AP", "AP50", "AP75", "APs", "APm", "APl", "images", "seconds", "per_class", "confusion",
                            "outcomes"}
    assert metrics["images"] == 2
    names = json.loads((tiny_run / "config.json").read_text())["class_names"]
    assert list(metrics["per_class"]) == names and set(metrics["per_class"][names[0]]) == {"AP", "AP50"}
    matrix = metrics["confusion"]["matrix"]  # rows: true class (+ background), columns: detected class
    assert metrics["confusion"]["labels"] == [*names, "background"] and len(matrix) == len(names) + 1
    assert matrix[-1][-1] == 0  # background detected as background is not counted
    outcomes = metrics["outcomes"]  # the matrix's detections and objects one by one
    assert outcomes["missed"] == sum(row[-1] for row in matrix[:-1])
    assert outcomes["true_positives"] + outcomes["false_positives"] == sum(sum(row[:-1]) for row in matrix)
    assert len(outcomes["worst_false_positives"]) == min(outcomes["false_positives"], 8)
    text = runner.invoke(load_commands(), ["eval", "detection", str(tiny_run)])
    assert text.exit_code == 0 and len(text.stdout.splitlines()) == 1 + len(names)  # summary, then one per class


def test_detect_draws_and_writes_coco_results(tiny_run, tmp_path):
    image = tiny_run / "data" / "shapes" / "val" / "000000.png"
    result = invoke("detect", tiny_run, image, "--out", tmp_path / "out", "--threshold", "0", "--json")
    assert result.exit_code == 0, result.output
    assert Image.open(tmp_path / "out" / "000000.png").size == (64, 64)
    detections = json.loads((tmp_path / "out" / "detections.json").read_text())
    assert len(detections) == 10 and {"image_id", "category_id", "bbox", "score"} <= detections[0].keys()


def test_detector_api_takes_paths_pil_images_and_tensors(tiny_run):
    detector = attnkit.Detector.from_run(tiny_run, device="cpu")
    path = tiny_run / "data" / "shapes" / "val" / "000000.png"
    pil = Image.open(path).convert("RGB")
    tensor = torch.from_numpy(__import__("numpy").array(pil)).permute(2, 0, 1)
    by_path, by_pil, by_tensor = detector.predict([path, pil, tensor], threshold=0.0)
    torch.testing.assert_close(by_path.boxes, by_pil.boxes)
    torch.testing.assert_close(by_path.scores, by_tensor.scores)
    assert len(by_path) == 10 and len(by_path.names) == 10 and by_path.boxes.shape == (10, 4)
    assert by_path.names[0] in detector.class_names


def test_data_shapes_command(tmp_path):
    result = invoke("data", "shapes", "--out", tmp_path, "--train-images", "2", "--val-images", "1",
                    "--image-size", "32")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "annotations" / "instances_train.json").is_file() and (tmp_path / "val" / "000000.png").is_file()


def test_bad_input_is_one_error_line(tiny_run, tmp_path, coco_writer):
    result = invoke("eval", "detection", tmp_path)
    assert result.exit_code == 2 and "error:" in result.output and "Traceback" not in result.output
    result = invoke("train", "detection", "--data", tmp_path / "missing", "--out", tmp_path / "r", *TINY)
    assert result.exit_code == 2 and "missing: not a folder" in result.output
    images = [{"id": 1, "file_name": "a.png", "width": 64, "height": 64}]
    annotations = [{"id": 1, "image_id": 1, "category_id": 9, "bbox": [1, 1, 5, 5]}]
    folder, path = coco_writer(tmp_path / "bad", images, annotations, [{"id": 1, "name": "x"}], draw=False)
    result = invoke("eval", "detection", tiny_run, "--images", folder, "--annotations", path)
    assert result.exit_code == 2 and "category_id 9" in result.output and "instances_train.json" in result.output


def test_train_on_explicit_images_and_annotations(tmp_path, coco_writer):
    images = [{"id": 5, "file_name": "a.png", "width": 64, "height": 64},
              {"id": 9, "file_name": "b.png", "width": 64, "height": 48}]
    annotations = [{"id": 1, "image_id": 5, "category_id": 40, "bbox": [4, 4, 30, 20]},
                   {"id": 2, "image_id": 9, "category_id": 12, "bbox": [10, 8, 20, 30], "iscrowd": 1}]
    folder, path = coco_writer(tmp_path / "mine", images, annotations,
                               [{"id": 40, "name": "a"}, {"id": 12, "name": "b"}])
    out = tmp_path / "run"
    result = invoke("train", "detection", "--images", folder, "--annotations", path, "--out", out, "--steps", "1",
                    "--preset", "tiny", "--no-flip")
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert config["category_ids"] == [12, 40] and config["train"]["flip"] is False
    assert "validating on the training images" in result.output
    result = invoke("train", "detection", "--out", out, "--steps", "2", "--resume")
    assert result.exit_code == 2 and "--images/--annotations" in result.output


def test_bad_data_leaves_no_run_folder(tmp_path, coco_writer):
    images = [{"id": 1, "file_name": "a.png", "width": 32, "height": 32}]
    folder, path = coco_writer(tmp_path / "d", images, [], [{"id": 1, "name": "x"}])
    (tmp_path / "bad.json").write_text('{"images": [], "annotations": [], "categories": [{"id": 2}]}')
    out = tmp_path / "run"
    result = invoke("train", "detection", "--images", folder, "--annotations", path, "--val-images", folder,
                    "--val-annotations", tmp_path / "bad.json", "--out", out, "--preset", "tiny")
    assert result.exit_code == 2 and "categories [2] differ" in result.output
    result = invoke("train", "detection", "--data", "shapes", "--out", out, "--backbone-weights", tmp_path / "no.pth")
    assert result.exit_code == 2 and "no.pth" in result.output
    assert not out.exists()


def test_train_on_the_built_in_crowd_set_into_a_new_folder(tmp_path, monkeypatch):
    """`--data crowd` writes its images into the new run folder, after making it (it was written first, and the
    run then refused the folder as not empty)."""
    from attnkit.detection import crowd, sources

    monkeypatch.setattr(sources, "write_crowd", lambda out: crowd.write_crowd(out, train_images=4, val_images=2))
    out = tmp_path / "run"
    result = invoke("train", "detection", "--data", "crowd", "--out", out, "--steps", "1", "--preset", "tiny",
                    "--eval-every-minutes", "10")
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert config["data"] == "crowd" and config["class_names"][0] == "circle" and config["shapes"] == {}
    assert (out / "data" / "crowd" / "annotations" / "instances_train.json").is_file()
