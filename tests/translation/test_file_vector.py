"""FileVector reads what a numpy array of the same file would hold, element or slice, without mapping it,
with os.pread or without it."""

from __future__ import annotations

import numpy as np
import pytest

from attnkit.translation.file_vector import FileVector


@pytest.fixture(params=["pread", "seek and read"])
def reads(request, monkeypatch):
    """Both ways of reading: os.pread, and the fallback of systems without it (Windows)."""
    if request.param != "pread":
        monkeypatch.delattr("os.pread")
    return request.param


def test_reads_equal_the_arrays(tmp_path, reads):
    values = np.arange(1000, dtype=np.int64) * 7
    np.save(tmp_path / "values.npy", values)
    vector = FileVector.npy(tmp_path / "values.npy")
    assert len(vector) == 1000 and vector.dtype == np.int64
    assert vector[0] == 0 and vector[999] == 6993 and vector[-1] == 6993
    assert vector[10:14].tolist() == [70, 77, 84, 91]
    assert vector[995:2000].tolist() == values[995:].tolist() and len(vector[5:5]) == 0
    (tmp_path / "ids").write_bytes(np.array([3, 65535, 9], dtype=np.uint16).tobytes())
    ids = FileVector(tmp_path / "ids", np.dtype(np.uint16))
    assert ids[0:3].tolist() == [3, 65535, 9]
    with pytest.raises(IndexError):
        ids[3]
    with pytest.raises(IndexError):
        ids[0:3:2]
    (tmp_path / "empty").write_bytes(b"")
    assert len(FileVector(tmp_path / "empty", np.dtype(np.uint16))) == 0
