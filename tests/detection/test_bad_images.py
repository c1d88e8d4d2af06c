"""--skip-bad-images: unreadable images and unusable entries are left out and listed; without it, the first stops."""

from __future__ import annotations

import io
import json
import struct
import zlib

from PIL import Image
from typer.testing import CliRunner

from attnkit.app.cli import load_commands
from attnkit.detection.evaluate import coco_ground_truth
from attnkit.detection.sources import open_split

runner = CliRunner()


def truncated_jpeg(size=(64, 48)) -> bytes:
    """A JPEG cut after 60% of its bytes: the header (format, size) reads fine, the pixels do not."""
    buffer = io.BytesIO()
    Image.effect_noise(size, 60).convert("RGB").save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()[: int(len(buffer.getvalue()) * 0.6)]


def png_bomb(side: int = 9000) -> bytes:
    """A tiny PNG whose header declares side x side pixels."""
    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def write_dataset(root, coco_writer, extra_images=(), extra_annotations=()):
    """good1.png, good2.png, corrupt.jpg (truncated) and missing.png (no file): (image folder, annotation file)."""
    names = ["good1.png", "good2.png", "corrupt.jpg", "missing.png"]
    images = [{"id": i, "file_name": name, "width": 64, "height": 48} for i, name in enumerate(names, start=1)]
    annotations = [{"id": i, "image_id": i, "category_id": 1, "bbox": [8 * i, 8, 16, 16]} for i in range(1, 5)]
    folder, path = coco_writer(root, images[:2], annotations[:2], [{"id": 1, "name": "box"}])
    (folder / "corrupt.jpg").write_bytes(truncated_jpeg())
    document = {"images": images + list(extra_images), "annotations": annotations + list(extra_annotations),
                "categories": [{"id": 1, "name": "box"}]}
    path.write_text(json.dumps(document))
    return folder, path


def test_open_split_leaves_out_and_names_every_kind_of_bad_image_and_entry(tmp_path, coco_writer):
    extra_images = [{"id": 5, "file_name": "text.png", "width": 64, "height": 48},
                    {"id": 6, "file_name": "bomb.png", "width": 9000, "height": 9000},
                    {"id": 7, "file_name": "good1.png", "width": 32, "height": 48},  # not the file's size
                    {"id": 8, "file_name": "bad.png", "width": -1, "height": 48}]
    extra_annotations = [{"id": 9, "image_id": 1, "category_id": 1, "bbox": "not a box"},
                         {"id": 10, "image_id": 8, "category_id": 1, "bbox": [1, 1, 2, 2]}]
    folder, path = write_dataset(tmp_path, coco_writer, extra_images, extra_annotations)
    (folder / "text.png").write_text("not an image")
    (folder / "bomb.png").write_bytes(png_bomb())
    with Image.open(folder / "corrupt.jpg") as header_only:
        assert header_only.size == (64, 48)  # a header check passes it; decoding does not
    dataset = open_split((folder, path), None, skip_bad=True)
    coco = dataset.coco
    assert [r.image_id for r in coco.records] == [1, 2] and len(dataset) == 2
    why = coco.skipped_images
    assert sorted(why) == [3, 4, 5, 6, 7]
    assert "corrupt.jpg (image id 3): cannot read image" in why[3]
    assert "missing.png (image id 4): image file not found" in why[4]
    assert "text.png (image id 5): cannot read image" in why[5]
    assert "bomb.png (image id 6): refused: 9000x9000 pixels" in why[6]
    assert "(image id 7): size (64, 48) differs from width/height 32x48" in why[7]
    assert len(coco.skipped_entries) == 3 and all(str(path) in message for message in coco.skipped_entries)
    assert "images[7] (id 8) needs positive integer width" in coco.skipped_entries[0]
    assert "annotations[4]: 'bbox' must be" in coco.skipped_entries[1]
    assert "annotations[5] refers to image_id 8" in coco.skipped_entries[2]
    ground_truth = coco_ground_truth(coco)  # what AP is computed against: the images kept, their boxes
    assert sorted(ground_truth.getImgIds()) == [1, 2] and sorted(ground_truth.getAnnIds()) == [1, 2]


def test_train_stops_at_a_bad_image_or_skips_and_lists_bad_images(tmp_path, coco_writer):
    folder, path = write_dataset(tmp_path / "data", coco_writer)
    common = ["train", "detection", "--images", folder, "--annotations", path, "--preset", "tiny", "--steps", "1",
              "--eval-every-minutes", "10", "--no-flip"]
    stopped = runner.invoke(load_commands(), [str(a) for a in [*common, "--out", tmp_path / "a", "--workers", "1"]])
    assert stopped.exit_code == 2, stopped.output
    assert "corrupt.jpg (image id 3)" in stopped.output or "missing.png (image id 4)" in stopped.output
    assert "Traceback" not in stopped.output and "worker" not in stopped.output  # one line, also from a worker
    out = tmp_path / "b"
    result = runner.invoke(load_commands(), [str(a) for a in [*common, "--out", out, "--skip-bad-images"]])
    assert result.exit_code == 0, result.output
    assert "at step 1" in result.output and result.output.count("data: checked the 4 images") == 1
    summary = result.output[result.output.index("bad data: training split"):]
    assert "skipped 2 unreadable images (" in summary and "corrupt.jpg" in summary and "missing.png" in summary
    skipped = json.loads((out / "skipped.json").read_text())
    assert skipped["train"]["unreadable_images"] == skipped["val"]["unreadable_images"] == 2
    assert [entry["image_id"] for entry in skipped["train"]["images"]] == [3, 4]
    assert skipped["train"]["images_used"] == 2 and skipped["train"]["unusable_entries"] == 0
    evaluate = ["eval", "detection", out, "--images", folder, "--annotations", path, "--device", "cpu"]
    stopped = runner.invoke(load_commands(), [str(a) for a in evaluate])
    assert stopped.exit_code == 2 and "Traceback" not in stopped.output, stopped.output
    assert "corrupt.jpg (image id 3)" in stopped.output or "missing.png (image id 4)" in stopped.output
    result = runner.invoke(load_commands(), [str(a) for a in [*evaluate, "--skip-bad-images", "--json"]])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout.strip().splitlines()[-1])
    assert (metrics["skipped_images"], metrics["skipped_entries"]) == (2, 0) and 0 <= metrics["AP"] <= 1
