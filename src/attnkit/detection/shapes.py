"""`shapes`: a built-in detection dataset that needs no download.

Images of a few shape classes (circle, square, triangle, star, hexagon) of varied size, colour and
rotation, overlapping a little, on cluttered backgrounds (colour gradients, lines and blobs).
The boxes come from the geometry (the rotated polygon's vertices, the circle's centre and
radius), not from the pixels, so they are exact. Written in COCO layout, it is read by the
same code as any COCO-format dataset.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from PIL import Image, ImageDraw

from attnkit.errors import ConfigError

CLASSES = ("circle", "square", "triangle", "star", "hexagon")
STAMP = "shapes.json"


@dataclass(frozen=True)
class ShapesConfig:
    """How many images of which size; the defaults train on 2 CPU cores in minutes."""
    image_size: int = 128
    train_images: int = 1000
    val_images: int = 200
    max_objects: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        if self.image_size < 32:
            raise ConfigError(f"shapes image_size must be at least 32 pixels, got {self.image_size}")
        if self.train_images < 1 or self.val_images < 1:
            raise ConfigError("shapes needs at least one train and one val image")
        if not 1 <= self.max_objects <= 20:
            raise ConfigError(f"shapes max_objects must be in 1..20, got {self.max_objects}")


def write_shapes(out: Path, config: ShapesConfig = ShapesConfig()) -> Path:
    """Write `train/`, `val/` and `annotations/instances_{train,val}.json` under OUT (once per config)."""
    out = Path(out)
    stamp = out / STAMP
    if stamp.is_file() and json.loads(stamp.read_text()) == asdict(config):
        return out
    for split, count, offset in (("train", config.train_images, 0), ("val", config.val_images, 1)):
        rng = random.Random(config.seed * 1_000_003 + offset)
        (out / split).mkdir(parents=True, exist_ok=True)
        images: list[dict[str, object]] = []
        annotations: list[dict[str, object]] = []  # COCO's records, written as JSON
        for index in range(count):
            image, objects = draw_image(rng, config.image_size, config.max_objects)
            file_name = f"{index:06d}.png"
            image.save(out / split / file_name)
            images.append({"id": index + 1, "file_name": file_name,
                           "width": config.image_size, "height": config.image_size})
            for label, (x0, y0, x1, y1) in objects:
                annotations.append({"id": len(annotations) + 1, "image_id": index + 1, "category_id": label + 1,
                                    "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0),
                                    "iscrowd": 0})
        coco = {"info": {"description": f"attnkit shapes {split}"}, "images": images,
                "annotations": annotations,
                "categories": [{"id": i + 1, "name": name} for i, name in enumerate(CLASSES)]}
        (out / "annotations").mkdir(parents=True, exist_ok=True)
        (out / "annotations" / f"instances_{split}.json").write_text(json.dumps(coco))
    stamp.write_text(json.dumps(asdict(config)))
    return out


def draw_image(rng: random.Random, size: int, max_objects: int) -> tuple[Image.Image, list]:
    """One cluttered image and its objects [(label, (x0, y0, x1, y1))], boxes in pixels."""
    image = _background(rng, size)
    draw = ImageDraw.Draw(image)
    objects: list[tuple[int, tuple[float, float, float, float]]] = []
    for _ in range(rng.randint(0 if rng.random() < 0.05 else 1, max_objects)):
        for _attempt in range(20):  # place without heavy overlap
            label = rng.randrange(len(CLASSES))
            radius = rng.uniform(0.08, 0.22) * size
            cx, cy = rng.uniform(radius, size - radius), rng.uniform(radius, size - radius)
            points = shape_outline(CLASSES[label], cx, cy, radius, rng.uniform(0, 2 * math.pi))
            box = shape_box(CLASSES[label], cx, cy, radius, points, size)
            if all(_iou(box, other) < 0.3 for _, other in objects):
                break
        else:
            continue
        colour = tuple(rng.randrange(256) for _ in range(3))
        if CLASSES[label] == "circle":
            draw.ellipse([cx - radius, cy - radius, cx + radius, cy + radius], fill=colour)
        else:
            draw.polygon(points, fill=colour)
        objects.append((label, box))
    return image, objects


def _background(rng: random.Random, size: int) -> Image.Image:
    start, end = [tuple(rng.randrange(256) for _ in range(3)) for _ in range(2)]
    image = Image.new("RGB", (size, size))
    draw = ImageDraw.Draw(image)
    for y in range(size):  # vertical gradient
        t = y / max(size - 1, 1)
        draw.line([(0, y), (size, y)], fill=tuple(int(a + (b - a) * t) for a, b in zip(start, end)))
    for _ in range(rng.randint(2, 6)):  # clutter: lines and small blobs that are not objects
        colour = tuple(rng.randrange(256) for _ in range(3))
        x0, y0, x1, y1 = (rng.uniform(0, size) for _ in range(4))
        if rng.random() < 0.6:
            draw.line([(x0, y0), (x1, y1)], fill=colour, width=rng.randint(1, 3))
        else:
            r = rng.uniform(1, 0.04 * size)
            draw.ellipse([x0 - r, y0 - r, x0 + r, y0 + r], fill=colour)
    return image


def shape_outline(kind: str, cx: float, cy: float, radius: float, angle: float) -> list[tuple[float, float]]:
    """Vertices of the shape, rotated by ANGLE around (cx, cy)."""
    if kind == "circle":
        return []
    corners = {"square": 4, "triangle": 3, "hexagon": 6, "star": 10}[kind]
    points = []
    for i in range(corners):
        r = radius * (0.45 if kind == "star" and i % 2 else 1.0)
        theta = angle + 2 * math.pi * i / corners
        points.append((cx + r * math.cos(theta), cy + r * math.sin(theta)))
    return points


def shape_box(kind: str, cx: float, cy: float, radius: float, points: list, size: int) -> tuple:
    if kind == "circle":
        box = (cx - radius, cy - radius, cx + radius, cy + radius)
    else:
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        box = (min(xs), min(ys), max(xs), max(ys))
    return tuple(round(min(max(v, 0.0), size), 2) for v in box)


def _iou(a: tuple, b: tuple) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0
