"""`crowd`: a built-in detection dataset of many small objects in clutter, unlike `shapes` (few large objects).

Each 192 x 192 image holds 6 to 24 filled shapes (`shapes`' five classes, 5-12% of the width: 10 to 23
pixels, so 5 to 11 at 96 px) among as many distractors that are not objects: the same shapes drawn
as outlines only, lines and specks, on coloured noise. Small objects in numbers are what DETR-family
detectors find hardest (COCO's APs; Zhu et al. 2021, section 1). The boxes come from the geometry,
as in `shapes`; written in COCO layout, it is read by the same code as any COCO-format dataset.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from PIL import Image, ImageDraw

from attnkit.detection.shapes import CLASSES, shape_box, shape_outline

SIZE = 192
MAX_OBJECTS = 24
STAMP = "crowd.json"
_NOISE_LEVELS = bytes(60 + value * 140 // 256 for value in range(256))


def write_crowd(out: Path, train_images: int = 1000, val_images: int = 200, seed: int = 0) -> Path:
    """Write `train/`, `val/` and `annotations/instances_{train,val}.json` under OUT (once per settings)."""
    out, settings = Path(out), {"train": train_images, "val": val_images, "seed": seed}
    if (out / STAMP).is_file() and json.loads((out / STAMP).read_text()) == settings:
        return out
    for split, count, offset in (("train", train_images, 0), ("val", val_images, 1)):
        rng = random.Random(seed * 1_000_003 + offset + 29)
        (out / split).mkdir(parents=True, exist_ok=True)
        images: list[dict[str, object]] = []
        annotations: list[dict[str, object]] = []  # COCO's records, written as JSON
        for index in range(count):
            image, objects = draw_crowd(rng)
            image.save(out / split / f"{index:06d}.png")
            images.append({"id": index + 1, "file_name": f"{index:06d}.png", "width": SIZE, "height": SIZE})
            for label, (x0, y0, x1, y1) in objects:
                annotations.append({"id": len(annotations) + 1, "image_id": index + 1, "category_id": label + 1,
                                    "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0),
                                    "iscrowd": 0})
        (out / "annotations").mkdir(parents=True, exist_ok=True)
        (out / "annotations" / f"instances_{split}.json").write_text(json.dumps(
            {"info": {"description": f"attnkit crowd {split}"}, "images": images, "annotations": annotations,
             "categories": [{"id": i + 1, "name": name} for i, name in enumerate(CLASSES)]}))
    (out / STAMP).write_text(json.dumps(settings))
    return out


def draw_crowd(rng: random.Random) -> tuple[Image.Image, list]:
    """One image and its objects [(label, (x0, y0, x1, y1))], boxes in pixels; distractors are not listed."""
    noise = rng.randbytes(SIZE * SIZE * 3).translate(_NOISE_LEVELS)  # uniform in 60..199
    image = Image.frombytes("RGB", (SIZE, SIZE), noise)
    draw = ImageDraw.Draw(image)
    count = rng.randint(6, MAX_OBJECTS)
    for _ in range(count):  # clutter first, so that objects are drawn over it
        colour = tuple(rng.randrange(256) for _ in range(3))
        if rng.random() < 0.5:
            kind, cx, cy, radius = _place(rng)
            draw.polygon(shape_outline(kind, cx, cy, radius, rng.uniform(0, 2 * math.pi)) or
                         _circle(cx, cy, radius), outline=colour, width=1)
        else:
            x0, y0, x1, y1 = (rng.uniform(0, SIZE) for _ in range(4))
            draw.line([(x0, y0), (x1, y1)], fill=colour, width=rng.randint(1, 2))
    objects: list[tuple[int, tuple]] = []
    for _ in range(count):
        label = rng.randrange(len(CLASSES))
        _, cx, cy, radius = _place(rng)
        points = shape_outline(CLASSES[label], cx, cy, radius, rng.uniform(0, 2 * math.pi))
        box = shape_box(CLASSES[label], cx, cy, radius, points, SIZE)
        if any(_overlaps(box, other) for _, other in objects):
            continue
        colour = tuple(rng.choice((rng.randrange(0, 50), rng.randrange(206, 256))) for _ in range(3))
        draw.polygon(points or _circle(cx, cy, radius), fill=colour)
        objects.append((label, box))
    return image, objects


def _place(rng: random.Random) -> tuple[str, float, float, float]:
    radius = rng.uniform(0.025, 0.06) * SIZE  # a width of 5-12% of the image's
    return rng.choice(CLASSES), rng.uniform(radius, SIZE - radius), rng.uniform(radius, SIZE - radius), radius


def _circle(cx: float, cy: float, radius: float, corners: int = 24) -> list[tuple[float, float]]:
    return [(cx + radius * math.cos(2 * math.pi * i / corners), cy + radius * math.sin(2 * math.pi * i / corners))
            for i in range(corners)]


def _overlaps(a: tuple, b: tuple) -> bool:
    return not (a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1])
