"""`attnkit data check` and `attnkit data convert`, and training and evaluating on a YOLO and a VOC folder."""

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from attnkit.app.cli import load_commands

runner = CliRunner()


def invoke(*args):
    return runner.invoke(load_commands(), [str(a) for a in args])


def one_error_line(result, *parts: str) -> None:
    """Exit code 2, one `error:` line (stderr's last) naming PARTS, no traceback."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert errors == lines[-1:] and "Traceback" not in result.output, result.output
    assert all(part in errors[0] for part in parts), errors[0]


@pytest.fixture(scope="module")
def layouts(tmp_path_factory) -> dict[str, Path]:
    """The same tiny `shapes` dataset as COCO, YOLO and VOC folders."""
    root = tmp_path_factory.mktemp("layouts")
    assert invoke("data", "shapes", "--out", root / "coco", "--image-size", "64", "--train-images", "4",
                  "--val-images", "2").exit_code == 0
    for name in ("yolo", "voc"):
        result = invoke("data", "convert", root / "coco", "--to", name, "--out", root / name)
        assert result.exit_code == 0 and f"coco -> {name}: train, val" in result.stdout, result.output
    return {name: root / name for name in ("coco", "yolo", "voc")}


def test_check_reports_the_layout_and_counts(layouts):
    result = invoke("data", "check", layouts["voc"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f"layout: voc ({layouts['voc']})"
    assert result.stdout.splitlines()[-1] == "result: can be trained on"
    report = json.loads(invoke("data", "check", layouts["yolo"], "--json").stdout)
    assert report["layout"] == "yolo" and report["trainable"]
    assert [split["split"] for split in report["splits"]] == ["train", "val"]
    assert report["splits"][1]["images"] == 2


def test_check_lists_a_bad_label_line_and_exits_2(tmp_path, layouts):
    copy = tmp_path / "yolo"
    assert invoke("data", "convert", layouts["yolo"], "--to", "yolo", "--out", copy, "--copy").exit_code == 0
    label = copy / "labels" / "train" / "000001.txt"
    label.write_text(label.read_text() + "9 0.5 0.5 0.1 0.1\n")
    lines = label.read_text().count("\n")
    result = invoke("data", "check", copy)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"  {label}:{lines}: class id 9 is out of range" in result.stdout
    assert result.stdout.splitlines()[-1] == "result: cannot be trained on (1 error)"
    report = json.loads(invoke("data", "check", copy, "--json").stdout)
    errors = [(p["file"], p["line"]) for p in report["problems"] if p["severity"] == "error"]
    assert not report["trainable"] and errors == [(str(label), lines)]
    one_error_line(invoke("train", "detection", "--data", copy, "--out", tmp_path / "run", "--steps", "1"),
                   f"{label}:{lines}: class id 9")


def test_malformed_yaml_and_xml_are_one_line_naming_file_and_line(tmp_path, layouts):
    (tmp_path / "yolo").mkdir()
    (tmp_path / "yolo" / "data.yaml").write_text("names: [a, b]\ntrain: images/train\nval: [images/val\n")
    one_error_line(invoke("train", "detection", "--data", tmp_path / "yolo", "--out", tmp_path / "run"),
                   f"{tmp_path / 'yolo' / 'data.yaml'}:", "not valid YAML")
    voc = tmp_path / "voc"
    assert invoke("data", "convert", layouts["voc"], "--to", "voc", "--out", voc, "--copy").exit_code == 0
    xml = voc / "Annotations" / "000001.xml"
    xml.write_text(xml.read_text().replace("</size>", "", 1))
    one_error_line(invoke("data", "convert", voc, "--to", "coco", "--out", tmp_path / "coco"),
                   f"{xml}:", "not valid XML")
    assert not (tmp_path / "coco").exists()
    one_error_line(invoke("data", "check", tmp_path / "nothing"), "not a folder")


def test_convert_refuses_a_non_empty_out(layouts):
    one_error_line(invoke("data", "convert", layouts["coco"], "--to", "yolo", "--out", layouts["voc"]),
                   "exists and is not empty")


def test_train_on_a_yolo_folder_as_on_its_coco_folder_and_evaluate_on_every_layout(tmp_path, layouts):
    from attnkit.storage.checkpoint import read_weights

    runs = {}
    for name in ("coco", "yolo"):
        runs[name] = tmp_path / name
        result = invoke("train", "detection", "--data", layouts[name], "--out", runs[name], "--steps", "2",
                        "--preset", "tiny", "--eval-every-minutes", "10", "--device", "cpu")
        assert result.exit_code == 0, result.output
    config = json.loads((runs["yolo"] / "config.json").read_text())
    assert config["data"] == str(layouts["yolo"]) and config["class_names"][0] == "circle"
    expected, _ = read_weights(runs["coco"] / "weights" / "last.safetensors")
    actual, _ = read_weights(runs["yolo"] / "weights" / "last.safetensors")
    torch.testing.assert_close(actual, expected)  # the same batches, boxes and steps: the same weights
    metrics = []
    for name in ("coco", "yolo", "voc"):
        result = invoke("eval", "detection", runs["yolo"], "--data", layouts[name], "--json", "--device", "cpu")
        assert result.exit_code == 0, result.output
        metrics.append({k: v for k, v in json.loads(result.stdout).items() if k != "seconds"})
        for listed in ("worst_false_positives", "missed_objects"):  # the same boxes; file names as each layout has them
            for entry in metrics[-1]["outcomes"][listed]:
                entry.pop("file_name")
    assert metrics[0]["images"] == 2 and sum(map(sum, metrics[0]["confusion"]["matrix"])) > 0
    assert metrics[1] == metrics[0] and metrics[2] == metrics[0]


def test_eval_accepts_the_run_classes_under_other_ids_and_refuses_other_classes(tmp_path, detection_run, coco_writer):
    # the run: disc and square as ids 1 and 2; a YOLO or VOC folder of a COCO dataset numbers them 1..K too
    images = [{"id": 1, "file_name": "a.png", "width": 64, "height": 64}]
    annotations = [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [8, 8, 20, 20]}]
    coco_writer(tmp_path / "same", images, annotations, [{"id": 3, "name": "disc"}, {"id": 7, "name": "square"}],
                split="val")
    result = invoke("eval", "detection", detection_run, "--data", tmp_path / "same", "--json", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["images"] == 1
    coco_writer(tmp_path / "other", images, annotations, [{"id": 3, "name": "disc"}, {"id": 7, "name": "star"}],
                split="val")
    one_error_line(invoke("eval", "detection", detection_run, "--data", tmp_path / "other", "--device", "cpu"),
                   "categories [3, 7] differ from the run's [1, 2], and so do the class names (disc, star; the run's: "
                   "disc, square)")
