"""--skip-bad-images decodes each image file once: later checks decode only the files that are new or changed."""

from __future__ import annotations

import json

from PIL import Image

from attnkit.detection.bad_images import find_unreadable
from attnkit.detection.data import CocoDetection, load_annotations


def dataset(root, coco_writer, width=64):
    images = [{"id": i, "file_name": f"{i}.png", "width": width, "height": 48} for i in (1, 2, 3)]
    images.append({"id": 4, "file_name": "missing.png", "width": 64, "height": 48})
    folder, path = coco_writer(root, images[:3], [], [{"id": 1, "name": "box"}])
    document = json.loads(path.read_text())
    path.write_text(json.dumps({**document, "images": images}))
    return CocoDetection(folder, load_annotations(path))


def test_only_new_or_changed_files_are_decoded_again(tmp_path, coco_writer, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    monkeypatch.delenv("ATTNKIT_DATA_CACHE", raising=False)
    data = dataset(tmp_path, coco_writer)
    problems, decoded = find_unreadable(data)
    assert sorted(problems) == [4] and decoded == 4 and "missing.png (image id 4): image file not found" in problems[4]
    cache = json.loads((tmp_path / ".attnkit-cache" / "train.decoded.json").read_text())
    assert sorted(cache["files"]) == ["1.png", "2.png", "3.png"]  # a missing file is not remembered
    assert cache["files"]["1.png"][2:] == [64, 48, ""]
    assert find_unreadable(data) == (problems, 1)  # only the missing one is looked at again

    (data.images / "2.png").write_text("not an image any more")  # changed: decoded again, now unreadable
    Image.new("RGB", (64, 48)).save(data.images / "missing.png")  # new: decoded
    problems, decoded = find_unreadable(data)
    assert decoded == 2 and sorted(problems) == [2] and "2.png (image id 2): cannot read image" in problems[2]
    assert find_unreadable(data) == (problems, 0)


def test_the_annotated_size_is_checked_against_the_remembered_one(tmp_path, coco_writer):
    data = dataset(tmp_path, coco_writer)
    find_unreadable(data)
    document = json.loads(data.coco.path.read_text())  # the same files, now annotated 32 pixels wide
    narrower = tmp_path / "narrower.json"
    narrower.write_text(json.dumps({**document, "images": [{**entry, "width": 32} for entry in document["images"]]}))
    problems, decoded = find_unreadable(CocoDetection(data.images, load_annotations(narrower)))
    assert decoded == 1 and sorted(problems) == [1, 2, 3, 4]  # only missing.png is looked at again
    assert problems[1] == (f"{data.images / '1.png'} (image id 1): size (64, 48) differs from width/height 32x48 "
                           f"in {narrower}")
