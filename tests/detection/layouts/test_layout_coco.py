"""The COCO layout's splits and the box findings its reader adds to `attnkit.detection.data`'s checks."""

import pytest

from attnkit.detection.layouts import find_layout, read_split
from attnkit.detection.layouts.coco import box_findings
from attnkit.detection.layouts.problems import Problems
from attnkit.errors import DataError

CATEGORIES = [{"id": 3, "name": "cat"}, {"id": 7, "name": "dog"}]


def test_splits_with_and_without_the_year(tmp_path, coco_writer):
    coco_writer(tmp_path, [], [], CATEGORIES, split="val2017")
    coco_writer(tmp_path, [], [], CATEGORIES, split="train")
    layout = find_layout(tmp_path)
    assert (layout.name, layout.splits()) == ("coco", ["train", "val"])
    assert layout.source("val").annotations == tmp_path / "annotations" / "instances_val2017.json"



def test_roboflow_exports_annotations_beside_the_images(tmp_path, coco_writer):
    for split in ("train", "valid"):
        _, path = coco_writer(tmp_path, [{"id": 1, "file_name": "a.png", "width": 8, "height": 8}], [], CATEGORIES,
                              split=split)
        path.rename(tmp_path / split / "_annotations.coco.json")
    (tmp_path / "annotations").rmdir()
    layout = find_layout(tmp_path)
    assert (layout.name, layout.splits()) == ("coco", ["train", "val"])
    source = layout.source("val")
    assert (source.images, source.annotations) == (tmp_path / "valid", tmp_path / "valid" / "_annotations.coco.json")
    problems = Problems(raise_errors=False)
    assert read_split(source, problems=problems).records[0].file_name == "a.png" and problems.found == []


@pytest.mark.parametrize("bbox, found", [
    ([10, 10, 20, 20], []),
    ([10, 10, 0, 20], ["has an empty box"]),
    ([90, 10, 20, 20], ["reaches outside"]),  # x + w = 110 > 100, and w = 20 < x: not x1 y1 x2 y2
    ([50, 10, 60, 30], ["reaches outside", "looks like x1 y1 x2 y2"]),  # 50 + 60 > 100; as corners 50..60
    ([-0.5, 0, 100.5, 50], []),  # within a pixel of the edge: COCO's own boxes do that
])
def test_box_findings_by_hand(bbox, found):
    messages = box_findings(*bbox, 100, 50)
    assert [next(f for f in found if f in m) for m in messages] == found


def test_collected_problems_name_the_entry(tmp_path, coco_writer):
    images = [{"id": 1, "file_name": "a.png", "width": 100, "height": 50}]
    annotations = [{"id": 1, "image_id": 1, "category_id": 3, "bbox": [50, 10, 60, 30]},
                   {"id": 2, "image_id": 9, "category_id": 3, "bbox": [1, 1, 2, 2]}]
    _, path = coco_writer(tmp_path, images, annotations, CATEGORIES)
    (tmp_path / "train" / "extra.png").write_bytes(b"")
    problems = Problems(raise_errors=False)
    coco = read_split(find_layout(tmp_path).source("train"), problems=problems)
    assert [(p.severity, p.where, p.message.split(" ")[0]) for p in problems.found] == [
        ("warning", str(path), "annotations[0]"), ("warning", str(path), "annotations[0]"),
        ("note", str(tmp_path / "train"), "1"), ("error", "", f"{path}:")]
    assert coco.skipped_entries == [f"{path}: annotations[1] refers to image_id 9, which is not in 'images'"]
    with pytest.raises(DataError, match=r"annotations\[1\] refers to image_id 9"):
        read_split(find_layout(tmp_path).source("train"))
