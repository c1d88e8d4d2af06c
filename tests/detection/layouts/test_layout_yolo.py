"""The YOLO reader against hand-computed boxes, and every kind of bad line named by file and line."""

from pathlib import Path

import pytest
import torch
from PIL import Image

from attnkit.detection.layouts import find_layout, read_split
from attnkit.detection.layouts.problems import Problems
from attnkit.detection.layouts.yolo import label_file
from attnkit.errors import DataError


def write_yolo(root: Path, labels: dict[str, str], names="[cat, dog]", size=(100, 50)) -> Path:
    """ROOT/data.yaml, images/{train,val}/NAME.png (SIZE) and labels/.../NAME.txt for each NAME: text."""
    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        for name, text in labels.items():
            Image.new("RGB", size).save(root / "images" / split / f"{name}.png")
            if text is not None:
                (root / "labels" / split / f"{name}.txt").write_text(text)
    (root / "data.yaml").write_text(f"train: images/train\nval: images/val\nnames: {names}\n")
    return root


def test_boxes_are_the_normalised_centres_times_the_image_size(tmp_path):
    # 100x50 image: cx 0.5 cy 0.5 w 0.2 h 0.4 -> x 40..60, y 15..35; a polygon's box: x 10..30, y 5..25
    # (the label file starts with a byte-order mark and has Windows line ends)
    root = write_yolo(tmp_path, {"a": "\ufeff1 0.5 0.5 0.2 0.4\r\n0 0.1 0.1 0.3 0.1 0.3 0.5 0.1 0.5\n", "b": ""})
    layout = find_layout(root)
    assert layout.name == "yolo" and layout.splits() == ["train", "val"]
    coco = read_split(layout.source("train"))
    assert coco.names == ["cat", "dog"] and coco.category_ids == [1, 2]
    assert [r.file_name for r in coco.records] == ["a.png", "b.png"]
    torch.testing.assert_close(coco.records[0].boxes, torch.tensor([[40.0, 15.0, 60.0, 35.0], [10.0, 5.0, 30.0, 25.0]]))
    assert coco.records[0].labels.tolist() == [1, 0] and len(coco.records[1].labels) == 0
    assert (coco.records[0].width, coco.records[0].height) == (100, 50)


def test_names_as_a_mapping_and_a_txt_list_of_images(tmp_path):
    root = write_yolo(tmp_path, {"a": "0 0.5 0.5 0.2 0.2\n", "b": "1 0.5 0.5 0.2 0.2\n"}, names="{0: cat, 1: dog}")
    (root / "val.txt").write_text("./images/val/b.png\n")
    (root / "data.yaml").write_text("path: .\ntrain: images/train\nval: val.txt\nnames: {0: cat, 1: dog}\n")
    coco = read_split(find_layout(root / "data.yaml").source("val"))
    assert coco.names == ["cat", "dog"] and [r.file_name for r in coco.records] == ["b.png"]
    assert coco.records[0].labels.tolist() == [1]


def test_another_yaml_than_data_yaml_is_found_when_it_names_classes(tmp_path):
    root = write_yolo(tmp_path, {"a": "0 0.5 0.5 0.2 0.2\n"})
    (root / "data.yaml").rename(root / "shapes.yaml")
    (root / ".tool.yaml").write_text("hooks: []\n")  # another tool's: not a dataset's
    assert find_layout(root).source("val").annotations == root / "shapes.yaml"
    (root / "shapes.yaml").rename(root / "shapes.txt")
    with pytest.raises(DataError, match="not a dataset layout attnkit knows"):
        find_layout(root)


def test_the_label_path_replaces_the_last_images_folder():
    assert label_file(Path("/d/images/x/images/train/a.b.jpg")) == Path("/d/images/x/labels/train/a.b.txt")


@pytest.mark.parametrize("line, message", [
    ("2 0.5 0.5 0.1 0.1", "class id 2 is out of range"),
    ("0 0.5 0.5 0.1", "malformed line"),
    ("cat 0.5 0.5 0.1 0.1", "malformed line"),
    ("0 50 25 10 10", r"outside \[0, 1\]"),
])
def test_a_bad_line_stops_the_reading_naming_file_and_line(tmp_path, line, message):
    root = write_yolo(tmp_path, {"a": f"0 0.5 0.5 0.1 0.1\n{line}\n"})
    with pytest.raises(DataError, match=message) as error:
        read_split(find_layout(root).source("train"))
    assert str(error.value).startswith(f"{root / 'labels' / 'train' / 'a.txt'}:2: ")


def test_collected_problems_warnings_and_notes(tmp_path):
    root = write_yolo(tmp_path, {"a": "0 0.5 0.5 0 0.1\n0 0.95 0.5 0.2 0.2\n0 0.2 0.2 0.6 0.6\n5 0 0 0 0\n",
                                 "b": None})
    (root / "labels" / "train" / "orphan.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    problems = Problems(raise_errors=False)
    coco = read_split(find_layout(root).source("train"), problems=problems)
    label = root / "labels" / "train" / "a.txt"
    found = {(p.severity, p.where): p.message for p in problems.found}
    assert "zero-size" in found["warning", f"{label}:1"]
    assert "outside the image: clamped" in found["warning", f"{label}:2"]
    assert "look like x1 y1 x2 y2" in found["warning", f"{label}:3"]  # 0.2 0.2 0.6 0.6 read as cx cy w h reaches -0.1
    assert "out of range" in found["error", f"{label}:4"]
    assert "no label file" in found["note", str(root / "images" / "train" / "b.png")]
    assert "without an image" in found["warning", str(root / "labels" / "train" / "orphan.txt")]
    assert coco.skipped_entries == [f"{label}:4: {found['error', f'{label}:4']}"]
    assert read_split(find_layout(root).source("train"), skip_bad=True).skipped_entries == coco.skipped_entries
    torch.testing.assert_close(coco.records[0].boxes[0], torch.tensor([85.0, 20.0, 100.0, 30.0]))  # clamped at 100


def test_malformed_yaml_is_named_with_its_line(tmp_path):
    root = write_yolo(tmp_path, {"a": ""})
    (root / "data.yaml").write_text("train: images/train\nval: [images/val\nnames: [cat]\n")
    with pytest.raises(DataError, match=r"data.yaml:\d+: not valid YAML"):
        find_layout(root).source("train")
