"""The images of a detection split and their objects as a few flat arrays: a sequence of `ImageRecord`s.

COCO's train2017 has 118k images and 860k boxes; as Python objects (a record and two tensors per
image) that is some 350k objects, built one by one when the annotation file is read, and touched
(so copied, page by page) by every DataLoader worker that forks from the process holding them.
Here the boxes of all images are one (boxes, 4) float32 array and the labels one (boxes,) array,
cut per image by `offsets`; file names are one UTF-8 byte string cut the same way. A record is
made when it is asked for. The arrays are also what `attnkit.detection.annotation_cache` stores.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import torch
from torch import Tensor

Ints = Sequence[int] | np.ndarray


@dataclass(frozen=True)
class ImageRecord:
    """One image of the annotation file and its usable (non-crowd, non-degenerate) objects."""
    image_id: int
    file_name: str
    width: int
    height: int
    boxes: Tensor  # (objects, 4) xyxy pixels, clamped to the image
    labels: Tensor  # (objects,) contiguous labels 0..K-1


@dataclass(frozen=True, eq=False)
class RecordTable(Sequence[ImageRecord]):
    """N images: ids, file names, sizes, and their objects (boxes xyxy pixels, labels 0..K-1) in flat arrays."""
    image_ids: np.ndarray  # (images,) int64
    names: np.ndarray  # (bytes,) uint8: the file names, UTF-8, one after the other
    name_offsets: np.ndarray  # (images + 1,) int64: file name i is names[name_offsets[i]:name_offsets[i + 1]]
    widths: np.ndarray  # (images,) int32
    heights: np.ndarray  # (images,) int32
    offsets: np.ndarray  # (images + 1,) int64: the objects of image i are boxes[offsets[i]:offsets[i + 1]]
    boxes: np.ndarray  # (objects, 4) float32 xyxy pixels, clamped to the image
    labels: np.ndarray  # (objects,) int64

    @classmethod
    def build(cls, image_ids: Ints, file_names: Sequence[str], widths: Ints, heights: Ints, counts: Ints,
              boxes: np.ndarray, labels: np.ndarray) -> RecordTable:
        """The table of images given column by column; COUNTS: how many of BOXES (in image order) each image has."""
        encoded = [name.encode("utf-8", "surrogatepass") for name in file_names]
        return cls(np.asarray(image_ids, dtype=np.int64).reshape(-1),
                   np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(),
                   _offsets([len(name) for name in encoded]),
                   np.asarray(widths, dtype=np.int32).reshape(-1), np.asarray(heights, dtype=np.int32).reshape(-1),
                   _offsets(counts), np.asarray(boxes, dtype=np.float32).reshape(-1, 4),
                   np.asarray(labels, dtype=np.int64).reshape(-1))

    def __len__(self) -> int:
        return len(self.image_ids)

    @overload
    def __getitem__(self, index: int) -> ImageRecord: ...

    @overload
    def __getitem__(self, index: slice) -> RecordTable: ...

    def __getitem__(self, index: int | slice) -> ImageRecord | RecordTable:
        if isinstance(index, slice):
            return self.select(np.arange(len(self))[index])
        if not -len(self) <= index < len(self):
            raise IndexError(f"image {index} of {len(self)}")
        index %= len(self)
        start, end = self.offsets[index], self.offsets[index + 1]
        return ImageRecord(int(self.image_ids[index]), self.file_name(index), int(self.widths[index]),
                           int(self.heights[index]), torch.from_numpy(self.boxes[start:end].copy()),
                           torch.from_numpy(self.labels[start:end].copy()))

    def __iter__(self) -> Iterator[ImageRecord]:
        return (self[index] for index in range(len(self)))

    def file_name(self, index: int) -> str:
        start, end = self.name_offsets[index], self.name_offsets[index + 1]
        return self.names[start:end].tobytes().decode("utf-8", "surrogatepass")  # as JSON may hold them

    def object_counts(self) -> np.ndarray:
        """(images,) how many objects each image has."""
        return np.diff(self.offsets)

    def select(self, keep: np.ndarray) -> RecordTable:
        """The table of the images at indices KEEP (or where the boolean mask KEEP is true), in that order."""
        keep = np.flatnonzero(keep) if keep.dtype == bool else keep.astype(np.int64)
        counts, name_lengths = self.object_counts()[keep], np.diff(self.name_offsets)[keep]
        return RecordTable(self.image_ids[keep], self.names[_ranges(self.name_offsets, keep)],
                           _offsets(name_lengths), self.widths[keep], self.heights[keep], _offsets(counts),
                           self.boxes[_ranges(self.offsets, keep)], self.labels[_ranges(self.offsets, keep)])

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns by name (what `np.savez` writes and `from_arrays` reads back)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> RecordTable:
        return cls(**{name: np.asarray(arrays[name]) for name in cls.__dataclass_fields__})


def _offsets(counts: Ints) -> np.ndarray:
    """(len(counts) + 1,) the running sum of COUNTS from 0."""
    return np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=np.int64))]).astype(np.int64)


def _ranges(offsets: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The indices offsets[k]..offsets[k + 1] - 1 of every k in KEEP, one after the other."""
    starts, counts = offsets[keep], offsets[keep + 1] - offsets[keep]
    if counts.sum() == 0:
        return np.zeros(0, dtype=np.int64)
    run_starts = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    return run_starts + np.arange(counts.sum())
