"""RecordTable: the records of a split as flat arrays, cut per image; selecting images keeps their own objects."""

from __future__ import annotations

import numpy as np
import torch

from attnkit.detection.record_table import RecordTable


def table() -> RecordTable:
    boxes = np.array([[0, 0, 1, 1], [1, 1, 2, 2], [2, 2, 3, 3], [3, 3, 4, 4]], dtype=np.float32)
    return RecordTable.build([10, 11, 12], ["a.png", "dir/ä.png", "c.png"], [64, 32, 16], [48, 24, 8],
                             [2, 0, 2], boxes, np.array([1, 0, 0, 1]))


def test_a_record_is_cut_from_the_flat_arrays():
    records = table()
    assert len(records) == 3 and records.object_counts().tolist() == [2, 0, 2]
    second, third = records[1], records[-1]
    assert (second.image_id, second.file_name, second.width, second.height) == (11, "dir/ä.png", 32, 24)
    assert second.boxes.shape == (0, 4) and second.labels.tolist() == []
    torch.testing.assert_close(third.boxes, torch.tensor([[2.0, 2, 3, 3], [3, 3, 4, 4]]))
    assert third.labels.tolist() == [0, 1] and [r.image_id for r in records] == [10, 11, 12]
    third.boxes.add_(100)  # a record is a copy: the table does not change
    assert records.boxes.max() == 4


def test_select_keeps_each_kept_image_with_its_own_objects():
    kept = table().select(np.array([True, False, True]))
    assert [r.file_name for r in kept] == ["a.png", "c.png"] and kept.offsets.tolist() == [0, 2, 4]
    torch.testing.assert_close(kept[1].boxes, torch.tensor([[2.0, 2, 3, 3], [3, 3, 4, 4]]))
    reordered = table().select(np.array([2, 1]))
    assert [r.image_id for r in reordered] == [12, 11] and reordered[0].labels.tolist() == [0, 1]
    assert [r.file_name for r in table()[1:]] == ["dir/ä.png", "c.png"]


def test_the_arrays_give_the_same_table_back():
    again = RecordTable.from_arrays(table().arrays())
    assert [(r.image_id, r.file_name, r.labels.tolist(), r.boxes.tolist()) for r in again] == \
        [(r.image_id, r.file_name, r.labels.tolist(), r.boxes.tolist()) for r in table()]


def test_a_file_name_json_can_hold_but_utf8_cannot_comes_back_as_it_was():
    name = "lone\ud800surrogate.png"  # JSON's "\ud800": not UTF-8; opening the file fails later, naming it
    records = RecordTable.build([1], [name], [8], [8], [0], np.zeros((0, 4)), np.zeros(0))
    assert records[0].file_name == name and RecordTable.from_arrays(records.arrays()).file_name(0) == name
