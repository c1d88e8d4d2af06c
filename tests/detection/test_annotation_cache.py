"""The parsed index of a COCO annotation file is cached beside it and used until the file changes."""

from __future__ import annotations

import json
import os

import pytest
import torch

from attnkit.detection import layouts
from attnkit.detection.layouts import SplitSource, read_split
from attnkit.errors import DataError

IMAGES = [{"id": 1, "file_name": "a.png", "width": 64, "height": 48},
          {"id": 2, "file_name": "b.png", "width": 64, "height": 48}]
CATEGORIES = [{"id": 5, "name": "box"}, {"id": 9, "name": "disc"}]


def write(path, boxes, extra=()):
    annotations = [{"id": i, "image_id": image_id, "category_id": category, "bbox": bbox}
                   for i, (image_id, category, bbox) in enumerate(boxes, start=1)]
    path.write_text(json.dumps({"images": IMAGES, "annotations": annotations + list(extra),
                                "categories": CATEGORIES}))


@pytest.fixture
def source(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    monkeypatch.delenv("ATTNKIT_DATA_CACHE", raising=False)
    (tmp_path / "annotations").mkdir()
    (tmp_path / "train").mkdir()
    path = tmp_path / "annotations" / "instances_train.json"
    write(path, [(1, 9, [4, 6, 20, 10]), (2, 5, [60, 40, 10, 10])])
    return SplitSource("coco", tmp_path / "train", path, "train")


def parse_fails(monkeypatch):
    """From here on, reading the JSON fails: only a cached index can answer."""
    def fail(*_):
        raise AssertionError("the annotation file was read again")
    monkeypatch.setattr(layouts.coco, "read", fail)


def test_the_second_read_comes_from_the_cache_with_the_same_records(source, monkeypatch):
    first = read_split(source, keep_raw=False)
    assert (source.annotations.parent / ".attnkit-cache" / "instances_train.json.index.npz").is_file()
    parse_fails(monkeypatch)
    second = read_split(source, keep_raw=False)
    assert (second.category_ids, second.names, second.label_of) == ([5, 9], ["box", "disc"], {5: 0, 9: 1})
    assert second.raw is None and second.path == source.annotations
    for a, b in zip(first.records, second.records, strict=True):
        assert (a.image_id, a.file_name, a.width, a.height, a.labels.tolist()) == \
            (b.image_id, b.file_name, b.width, b.height, b.labels.tolist())
        torch.testing.assert_close(a.boxes, b.boxes)
    torch.testing.assert_close(second.records[1].boxes, torch.tensor([[60.0, 40, 64, 48]]))  # clamped to the image
    with pytest.raises(AssertionError, match="read again"):  # evaluation keeps the document: never from the cache
        read_split(source, keep_raw=True)


def test_a_changed_annotation_file_is_read_again(source):
    assert read_split(source, keep_raw=False).records[0].labels.tolist() == [1]
    write(source.annotations, [(1, 5, [1, 2, 3, 4]), (1, 9, [5, 6, 7, 8])])
    stat = source.annotations.stat()  # the same second as before would do too: the time is kept in ns, with the size
    os.utime(source.annotations, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    again = read_split(source, keep_raw=False)
    assert again.records[0].labels.tolist() == [0, 1] and len(again.records[1].labels) == 0
    torch.testing.assert_close(again.records[0].boxes, torch.tensor([[1.0, 2, 4, 6], [5, 6, 12, 14]]))


def test_a_folder_that_cannot_hold_the_cache_sends_it_to_the_user_cache(source, tmp_path):
    (source.annotations.parent / ".attnkit-cache").write_text("a file where the cache folder would go")
    read_split(source, keep_raw=False)
    cached = list((tmp_path / "user-cache" / "attnkit" / "detection").glob("*-instances_train.json.index.npz"))
    assert len(cached) == 1
    read_split(source, keep_raw=False)  # found there; still one file
    assert len(list((tmp_path / "user-cache" / "attnkit" / "detection").iterdir())) == 1


def test_attnkit_data_cache_takes_every_cache(source, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNKIT_DATA_CACHE", str(tmp_path / "shared"))
    read_split(source, keep_raw=False)
    assert len(list((tmp_path / "shared" / "detection").glob("*-instances_train.json.index.npz"))) == 1
    assert not (source.annotations.parent / ".attnkit-cache").exists()
    parse_fails(monkeypatch)
    assert read_split(source, keep_raw=False).records[0].file_name == "a.png"


def test_a_damaged_cache_is_rebuilt(source):
    read_split(source, keep_raw=False)
    cache = source.annotations.parent / ".attnkit-cache" / "instances_train.json.index.npz"
    cache.write_bytes(b"not an npz")
    assert read_split(source, keep_raw=False).records[1].labels.tolist() == [0]
    assert cache.read_bytes()[:2] == b"PK"  # written again, whole


def test_entries_left_out_stay_left_out_only_when_skipping_them(source):
    write(source.annotations, [(1, 9, [4, 6, 20, 10])], extra=[{"id": 7, "image_id": 3, "category_id": 5,
                                                               "bbox": [1, 1, 2, 2]}])
    skipped = read_split(source, keep_raw=False, skip_bad=True)
    assert len(skipped.skipped_entries) == 1 and "refers to image_id 3" in skipped.skipped_entries[0]
    assert read_split(source, keep_raw=False, skip_bad=True).skipped_entries == skipped.skipped_entries
    with pytest.raises(DataError, match="refers to image_id 3"):
        read_split(source, keep_raw=False)
