"""`check_dataset`: counts and COCO size classes worked out by hand, and the problems of any layout."""

from PIL import Image

from attnkit.detection.layouts.check import check_dataset

CATEGORIES = [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}]
IMAGES = [{"id": 1, "file_name": "a.png", "width": 200, "height": 100},
          {"id": 2, "file_name": "b.png", "width": 200, "height": 100},
          {"id": 3, "file_name": "c.png", "width": 200, "height": 100}]
# areas: 10x10 = 100 (small), 31x33 = 1023 (small), 32x32 = 1024 (medium), 96x96 = 9216 (large); a crowd object
ANNOTATIONS = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10]},
               {"id": 2, "image_id": 1, "category_id": 2, "bbox": [0, 0, 31, 33]},
               {"id": 3, "image_id": 2, "category_id": 2, "bbox": [50, 50, 32, 32]},
               {"id": 4, "image_id": 2, "category_id": 2, "bbox": [100, 0, 96, 96]},
               {"id": 5, "image_id": 2, "category_id": 1, "bbox": [0, 0, 5, 5], "iscrowd": 1}]


def test_counts_and_size_classes(tmp_path, coco_writer):
    for split in ("train", "val"):
        coco_writer(tmp_path, IMAGES, ANNOTATIONS, CATEGORIES, split=split)
    report = check_dataset(tmp_path)
    assert report.layout == "coco" and report.trainable
    train = report.splits[0]
    assert (train.split, train.images, train.empty_images, train.boxes) == ("train", 3, 1, 4)
    assert train.per_class == {"cat": 1, "dog": 3}
    assert train.sizes == {"small": 2, "medium": 1, "large": 1}
    # b.png has its white boxes drawn, c.png is all black as is no other image: no duplicates in a split; but
    # val holds the same bytes as train, image for image
    assert [(p.severity, p.where) for p in report.problems] == [
        ("warning", str(tmp_path / "val" / name)) for name in ("a.png", "b.png", "c.png")]
    assert report.problems[0].message == f"the same bytes as {tmp_path / 'train' / 'a.png'}: a duplicate image"


def test_missing_and_mis_sized_images_and_a_missing_split_are_errors(tmp_path, coco_writer):
    coco_writer(tmp_path, [*IMAGES, {**IMAGES[2], "id": 4}], ANNOTATIONS, CATEGORIES, split="train")
    (tmp_path / "train" / "a.png").unlink()
    Image.new("RGB", (20, 10)).save(tmp_path / "train" / "b.png")
    report = check_dataset(tmp_path)
    assert not report.trainable
    assert [str(p) for p in report.problems if p.severity == "error"] == [
        f"{tmp_path / 'train' / 'a.png'}: image file not found (image id 1)",
        f"{tmp_path / 'train' / 'b.png'}: is 20x10, annotated as 200x100 in "
        f"{tmp_path / 'annotations' / 'instances_train.json'}",
        f"{tmp_path}: no val split: `attnkit train detection --data` needs train and val"]
    assert [str(p) for p in report.problems if p.severity == "warning"] == [
        f"{tmp_path / 'train' / 'c.png'}: listed twice in {tmp_path / 'annotations' / 'instances_train.json'} "
        "(image id 4): trained on twice"]
