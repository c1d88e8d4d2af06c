"""The Pascal VOC reader against hand-computed boxes; unsafe and malformed XML refused by file and line."""

from pathlib import Path

import pytest
import torch
from PIL import Image

from attnkit.detection.layouts import find_layout, read_split
from attnkit.detection.layouts.problems import Problems
from attnkit.errors import DataError

OBJECT = ("<object><name>{name}</name><difficult>{difficult}</difficult><bndbox><xmin>{box[0]}</xmin>"
          "<ymin>{box[1]}</ymin><xmax>{box[2]}</xmax><ymax>{box[3]}</ymax></bndbox></object>")


def annotation(file_name: str, objects: list[tuple], size=(100, 50)) -> str:
    body = "\n".join(OBJECT.format(name=name, box=box, difficult=int(difficult)) for name, box, difficult in objects)
    return (f"<annotation>\n<filename>{file_name}</filename>\n<size><width>{size[0]}</width>"
            f"<height>{size[1]}</height><depth>3</depth></size>\n{body}\n</annotation>\n")


def write_voc(root: Path, xml: dict[str, str], splits=None) -> Path:
    """ROOT/Annotations/ID.xml (the text given), JPEGImages/ID.jpg (100x50), ImageSets/Main/{train,val}.txt."""
    for folder in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / folder).mkdir(parents=True)
    for image_id, text in xml.items():
        (root / "Annotations" / f"{image_id}.xml").write_text(text)
        Image.new("RGB", (100, 50)).save(root / "JPEGImages" / f"{image_id}.jpg")
    for split, ids in (splits or {"train": list(xml), "val": list(xml)}).items():
        (root / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(f"{i}\n" for i in ids))
    return root


def test_corners_are_one_based_and_difficult_objects_are_crowd(tmp_path):
    # xmin 11 ymin 21 xmax 40 ymax 50 -> [10, 20, 40, 50]; the difficult dog is left out of the records
    root = write_voc(tmp_path, {"a": annotation("a.jpg", [("cat", (11, 21, 40, 50), False),
                                                          ("dog", (1, 1, 10, 10), True)]),
                                "b": annotation("b.jpg", [("dog", (1.5, 2, 100, 50), False)])})
    layout = find_layout(root)
    assert layout.name == "voc" and layout.splits() == ["train", "val"]
    coco = read_split(layout.source("val"))
    assert coco.names == ["cat", "dog"] and coco.crowd == 1  # classes: every name under Annotations/, sorted
    torch.testing.assert_close(coco.records[0].boxes, torch.tensor([[10.0, 20.0, 40.0, 50.0]]))
    torch.testing.assert_close(coco.records[1].boxes, torch.tensor([[0.5, 1.0, 100.0, 50.0]]))
    assert [r.labels.tolist() for r in coco.records] == [[0], [1]]
    assert [e["iscrowd"] for e in coco.raw["annotations"]] == [0, 1, 0]


def test_labels_txt_gives_the_class_order_and_refuses_other_names(tmp_path):
    root = write_voc(tmp_path, {"a": annotation("a.jpg", [("cat", (11, 21, 40, 50), False)]),
                                "b": annotation("b.jpg", [("cow", (11, 21, 40, 50), False)])})
    (root / "labels.txt").write_text("dog\ncat\n")
    with pytest.raises(DataError, match="'cow' is not one of the classes") as error:
        read_split(find_layout(root).source("train"))
    assert str(error.value).startswith(f"{root / 'Annotations' / 'b.xml'}:4: ")  # the <object>'s line
    coco = read_split(find_layout(root).source("train"), skip_bad=True)
    assert coco.names == ["dog", "cat"] and coco.records[0].labels.tolist() == [1]


def test_malformed_xml_is_named_with_its_line(tmp_path):
    root = write_voc(tmp_path, {"a": "<annotation>\n<filename>a.jpg</filename>\n<size>\n</annotation>\n"})
    with pytest.raises(DataError, match=r"a.xml:4: not valid XML"):
        read_split(find_layout(root).source("train"))


def test_entity_declarations_are_refused(tmp_path):
    bomb = ('<?xml version="1.0"?>\n<!DOCTYPE a [<!ENTITY x "xxxxxxxx"><!ENTITY y "&x;&x;&x;&x;">]>\n'
            "<annotation><filename>&y;</filename></annotation>\n")
    root = write_voc(tmp_path, {"a": bomb})
    with pytest.raises(DataError, match="refused: the XML declares entities"):
        read_split(find_layout(root).source("train"))


def test_missing_xml_and_box_problems_are_collected(tmp_path):
    # (11, 21, 10, 20): xmax < xmin, but 10 and 20 fit as a width and height; (90, 1, 120, 20): past x = 100
    xml = annotation("a.jpg", [("cat", (11, 21, 10, 20), False), ("cat", (90, 1, 120, 20), False)])
    root = write_voc(tmp_path, {"a": xml}, splits={"train": ["a", "gone"], "val": ["a"]})
    Image.new("RGB", (10, 10)).save(root / "JPEGImages" / "lone.jpg")
    problems = Problems(raise_errors=False)
    coco = read_split(find_layout(root).source("train"), problems=problems)
    xml_file, listing = root / "Annotations" / "a.xml", root / "ImageSets" / "Main" / "train.txt"
    assert [str(p) for p in problems.found] == [
        f"{xml_file}:4: empty box [11.0, 21.0, 10.0, 20.0] (xmax <= xmin - 1 or ymax <= ymin - 1): left out",
        f"{xml_file}:4: its xmax ymax look like a width and height; VOC's are corners",
        f"{xml_file}:5: box [90.0, 1.0, 120.0, 20.0] reaches outside the 100x50 image: clamped",
        f"{listing}:2: no annotation file {root / 'Annotations' / 'gone.xml'} for image id 'gone'",
        f"{root / 'JPEGImages' / 'lone.jpg'}: no annotation file {root / 'Annotations' / 'lone.xml'}: not used",
    ]
    assert [p.severity for p in problems.found] == ["warning", "warning", "warning", "error", "note"]
    torch.testing.assert_close(coco.records[0].boxes, torch.tensor([[89.0, 0.0, 100.0, 20.0]]))
