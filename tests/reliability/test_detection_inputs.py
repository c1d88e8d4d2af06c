"""Malformed detection input, generated: each file loads correctly or raises DataError naming it.

COCO annotation files (random JSON, random entries in a valid skeleton, boxes with negative or
zero size and NaN or infinite coordinates, unknown and non-integer ids, file names that leave the
image folder), images (random bytes, truncated PNG and JPEG files, decompression bombs), and the
box utilities the targets go through (torchvision's box_convert, ToDetrTarget, the matcher).
"""

from __future__ import annotations

import io
import json
import struct
import tempfile
import zlib
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings, strategies as st
from PIL import Image
from torch.testing import assert_close
from torchvision.ops import box_convert

from attnkit.detection.data import CocoDetection, load_annotations, read_image
from attnkit.detection.hungarian_matcher import hungarian_match
from attnkit.detection.transforms import ToDetrTarget
from attnkit.errors import DataError

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
numbers = st.integers(-100, 300) | st.floats(allow_nan=True, allow_infinity=True, width=32)
ids = st.integers(-2, 4) | st.booleans() | st.none() | st.text(max_size=2) | st.lists(st.integers(), max_size=2)
image_entries = st.fixed_dictionaries(
    {"id": ids,
     "file_name": st.sampled_from(["a.png", "sub/b.png", "../a.png", "/etc/passwd", "", "."]) | st.text(max_size=6),
     "width": st.integers(-2, 10**12) | json_values, "height": st.integers(-2, 10**12) | json_values})
annotation_entries = st.fixed_dictionaries(
    {"image_id": ids, "category_id": ids, "bbox": st.lists(numbers, min_size=0, max_size=5) | json_values},
    optional={"iscrowd": st.integers(0, 1) | json_values, "id": ids})
category_entries = st.fixed_dictionaries({"id": ids}, optional={"name": json_values})


def _write(text: str | bytes) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="attnkit-reliability-"))
    path = folder / "instances_train.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    return path


def _load_or_data_error(path: Path):
    try:
        return load_annotations(path)
    except DataError as error:
        assert str(path) in str(error)
        return None


@SETTINGS
@given(document=json_values | st.binary(max_size=64) | st.text(max_size=64))
def test_random_documents_load_or_raise_data_error(document):
    text = document if isinstance(document, (str, bytes)) else json.dumps(document)
    _load_or_data_error(_write(text))


@SETTINGS
@given(images=st.lists(image_entries, max_size=3), annotations=st.lists(annotation_entries, max_size=4),
       categories=st.lists(category_entries, max_size=3))
@example(images=[{"id": 1, "file_name": "a.png", "width": 4, "height": 4}], categories=[{"id": 1}],
         annotations=[{"image_id": [1], "category_id": 1, "bbox": [0, 0, 1, 1]}])  # an unhashable id
@example(images=[{"id": 1, "file_name": "a.png", "width": 4, "height": 4}], categories=[{"id": 1}],
         annotations=[{"image_id": 1, "category_id": {"id": 1}, "bbox": [0, 0, 1, 1]}])
def test_random_entries_load_with_consistent_records_or_raise_data_error(images, annotations, categories):
    coco = _load_or_data_error(_write(json.dumps({"images": images, "annotations": annotations,
                                                  "categories": categories})))
    if coco is None:
        return
    for record in coco.records:
        assert not record.file_name.startswith("/") and ".." not in Path(record.file_name).parts
        assert record.boxes.shape == (len(record.labels), 4) and torch.isfinite(record.boxes).all()
        assert ((record.labels >= 0) & (record.labels < coco.num_classes)).all()


def _reference_boxes(bboxes: list[list[float]], width: int, height: int) -> tuple[torch.Tensor, int]:
    """The COCO reader's rule written out box by box: finite, clamped to the image, not empty."""
    kept = []
    for x, y, w, h in bboxes:
        values = torch.tensor([x, y, x + w, y + h], dtype=torch.float64)
        if not torch.isfinite(torch.tensor([x, y, w, h], dtype=torch.float64)).all():
            continue
        clamped = torch.stack([values[0].clamp(0, width), values[1].clamp(0, height),
                               values[2].clamp(0, width), values[3].clamp(0, height)]).float()
        if clamped[2] > clamped[0] and clamped[3] > clamped[1]:
            kept.append(clamped)
    return (torch.stack(kept) if kept else torch.zeros(0, 4)), len(bboxes) - len(kept)


@SETTINGS
@given(bboxes=st.lists(st.lists(numbers, min_size=4, max_size=4), max_size=6),
       width=st.integers(1, 4000), height=st.integers(1, 4000))
@example(bboxes=[[0, 0, float("inf"), 5], [float("nan"), 1, 2, 2], [-3, 1, 2, 2], [1, 1, 0, 2]], width=8, height=8)
def test_boxes_with_negative_zero_or_nan_size_are_dropped_and_counted(bboxes, width, height):
    document = {"images": [{"id": 1, "file_name": "a.png", "width": width, "height": height}],
                "categories": [{"id": 5, "name": "x"}],
                "annotations": [{"image_id": 1, "category_id": 5, "bbox": bbox} for bbox in bboxes]}
    coco = load_annotations(_write(json.dumps(document)))
    expected, dropped = _reference_boxes(bboxes, width, height)
    assert coco.degenerate == dropped
    assert_close(coco.records[0].boxes, expected, rtol=0, atol=0)
    boxes = coco.records[0].boxes
    assert ((boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])).all()
    assert (boxes[:, 0::2] <= width).all() and (boxes[:, 1::2] <= height).all() and (boxes >= 0).all()


@pytest.mark.parametrize("file_name", ["../secret.png", "/etc/passwd", "a/../../secret.png", "..\\secret.png",
                                       "\\\\server\\share.png", "", "."])
def test_file_names_that_leave_the_image_folder_are_refused(file_name):
    document = {"images": [{"id": 1, "file_name": file_name, "width": 8, "height": 8}],
                "categories": [{"id": 1}], "annotations": []}
    with pytest.raises(DataError, match=r"images\[0\] \(id 1\) has file_name .* not a relative path inside"):
        load_annotations(_write(json.dumps(document)))


def test_file_names_in_subfolders_are_read(tmp_path):
    (tmp_path / "images" / "sub").mkdir(parents=True)
    Image.new("RGB", (8, 6), (1, 2, 3)).save(tmp_path / "images" / "sub" / "a.png")
    document = {"images": [{"id": 1, "file_name": "sub/a.png", "width": 8, "height": 6}],
                "categories": [{"id": 1}], "annotations": []}
    image, _ = CocoDetection(tmp_path / "images", _write(json.dumps(document)))[0]
    assert_close(image[:, 0, 0], torch.tensor([1, 2, 3], dtype=torch.uint8))


# ---------------------------------------------------------------- images
def _image_bytes(format_: str, size: tuple[int, int] = (24, 16)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 10, 90)).save(buffer, format=format_)
    return buffer.getvalue()


def _read_or_data_error(data: bytes, name: str = "image.png"):
    path = Path(tempfile.mkdtemp(prefix="attnkit-reliability-")) / name
    path.write_bytes(data)
    try:
        return read_image(path, image_id=7)
    except DataError as error:
        assert f"{path} (image id 7)" in str(error)
        return None


@SETTINGS
@given(data=st.binary(max_size=256) | st.sampled_from([b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF89a", b"BM"])
       .flatmap(lambda magic: st.binary(max_size=200).map(lambda rest: magic + rest)))
def test_random_bytes_as_an_image_raise_data_error_naming_the_file(data):
    image = _read_or_data_error(data)
    assert image is None or image.mode == "RGB"


@SETTINGS
@given(format_=st.sampled_from(["PNG", "JPEG", "GIF", "BMP", "WEBP"]), cut=st.floats(0.0, 0.98))
def test_truncated_image_files_raise_data_error_naming_the_file(format_, cut):
    data = _image_bytes(format_)
    image = _read_or_data_error(data[: int(len(data) * cut)], f"image.{format_.lower()}")
    assert image is None or image.size == (24, 16)


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header declares WIDTH x HEIGHT pixels and whose data is a few bytes: a decompression bomb."""
    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
            + chunk(b"IEND", b""))


@pytest.mark.parametrize("side", [9000, 20000, 60000])  # over our limit; over Pillow's warning; over its error
def test_decompression_bombs_are_refused_before_decoding(tmp_path, side):
    path = tmp_path / "bomb.png"
    path.write_bytes(_png_header(side, side))
    with pytest.raises(DataError, match=r"bomb\.png: (refused: \d+x\d+ pixels is over the limit|cannot read)"):
        read_image(path)


def test_the_pixel_limit_is_a_parameter(tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(_image_bytes("PNG"))
    assert read_image(path, max_pixels=24 * 16).size == (24, 16)
    with pytest.raises(DataError, match=r"a\.png: refused: 24x16 pixels is over the limit of 383 pixels"):
        read_image(path, max_pixels=24 * 16 - 1)


def test_a_folder_or_a_missing_file_as_an_image_is_named(tmp_path):
    with pytest.raises(DataError, match=r"nothing\.png: image file not found"):
        read_image(tmp_path / "nothing.png")
    (tmp_path / "folder.png").mkdir()
    with pytest.raises(DataError, match=r"folder\.png: cannot read image"):
        read_image(tmp_path / "folder.png")


# ---------------------------------------------------------------- box utilities
@SETTINGS
@given(corners=st.lists(st.tuples(st.integers(0, 63), st.integers(0, 47), st.integers(1, 64), st.integers(1, 48)),
                        max_size=5))
def test_targets_are_normalised_centre_boxes_inside_the_unit_square(corners):
    boxes = torch.tensor([[x, y, min(x + w, 64), min(y + h, 48)] for x, y, w, h in corners],
                         dtype=torch.float32).reshape(-1, 4)  # (objects, xyxy) pixels
    _, target = ToDetrTarget()(torch.zeros(3, 48, 64), {"boxes": boxes})
    normalised = target["boxes"]  # (objects, cxcywh) in [0, 1]
    assert ((normalised >= 0) & (normalised <= 1)).all()
    back = box_convert(normalised, "cxcywh", "xyxy") * torch.tensor([64.0, 48, 64, 48])
    assert_close(back, boxes, atol=1e-4, rtol=0)
    assert_close(target["size"], torch.tensor([48, 64]))


@SETTINGS
@given(queries=st.integers(1, 5), objects=st.integers(0, 5),
       values=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=20, max_size=20),
       seed=st.integers(0, 2**16))
def test_matching_is_a_one_to_one_assignment_even_with_nan_or_degenerate_boxes(queries, objects, values, seed):
    generator = torch.Generator().manual_seed(seed)
    boxes = torch.tensor(values).reshape(5, 4)[:queries]  # (queries, 4): NaN, infinite, zero or negative sizes
    target_boxes = torch.rand(objects, 4, generator=generator)
    target_boxes[:, 2:] *= torch.randint(0, 2, (objects, 1), generator=generator)  # some zero-size targets
    logits = torch.randn(1, queries, 4, generator=generator)
    labels = torch.randint(0, 3, (objects,), generator=generator)
    match = hungarian_match(logits, boxes[None], [{"labels": labels, "boxes": target_boxes}])[0]
    rows, cols = match.queries, match.objects
    assert len(rows) == len(cols) == min(queries, objects)
    assert len(set(rows.tolist())) == len(rows) and len(set(cols.tolist())) == len(cols)
