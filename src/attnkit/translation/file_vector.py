"""A one-dimensional array in a file, read by position (`os.pread`), never memory-mapped.

A memory map of a corpus of millions of sentences grows the process's resident size with every
sentence read: each page fault maps the 64 KiB around it (Linux's fault-around), and random
batches touch pages all over the files. A positioned read costs the bytes it returns and nothing
after, whatever the corpus's size; a batch of a few dozen sentences is a few dozen reads. Where
the system has no `os.pread` (Windows), a seek and a read under a lock do the same.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np


class FileVector:
    """Elements `[start:stop]` (or one element) of a flat array stored at OFFSET bytes into PATH."""

    def __init__(self, path: Path, dtype: np.dtype, offset: int = 0) -> None:
        self.path, self.dtype, self.offset = path, np.dtype(dtype), offset
        self._file = path.open("rb")  # closed with the object
        self._lock = threading.Lock()  # the seek-and-read fallback's
        self._length = (os.fstat(self._file.fileno()).st_size - offset) // self.dtype.itemsize

    @classmethod
    def npy(cls, path: Path) -> FileVector:
        """The array of a .npy file (its header gives the type and where the data starts)."""
        mapped = np.load(path, mmap_mode="r")  # maps the file and reads the header, not the data
        dtype, offset = mapped.dtype, mapped.offset
        del mapped
        return cls(path, dtype, offset)

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, key: int | slice) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(self._length)
            if step != 1:
                raise IndexError("a FileVector reads contiguous slices only")
            return self._read(start, max(stop - start, 0))
        index = key + self._length if key < 0 else key
        if not 0 <= index < self._length:
            raise IndexError(f"index {key} out of range for {self._length} elements of {self.path}")
        return self._read(index, 1)[0]

    def _read(self, start: int, count: int) -> np.ndarray:
        size = self.dtype.itemsize
        position = self.offset + start * size
        if hasattr(os, "pread"):
            data = os.pread(self._file.fileno(), count * size, position)
        else:
            with self._lock:
                self._file.seek(position)
                data = self._file.read(count * size)
        return np.frombuffer(data, dtype=self.dtype)  # (count,), read-only
