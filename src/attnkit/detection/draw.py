"""Pictures of detections: boxes with class names and scores drawn on the image."""

from __future__ import annotations

from collections.abc import Sequence

from PIL import Image, ImageDraw

PALETTE = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48), (145, 30, 180),
           (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128), (170, 110, 40)]


def draw_boxes(image: Image.Image, boxes: Sequence[Sequence[float]], labels: Sequence[int],
               names: Sequence[str], scores: Sequence[float] | None = None) -> Image.Image:
    """A copy of IMAGE with each (x0, y0, x1, y1) box outlined in its class colour and captioned
    "name" or "name 0.93"."""
    image = image.convert("RGB").copy()
    draw = ImageDraw.Draw(image)
    width = max(1, round(min(image.size) / 200))
    for i, (box, label) in enumerate(zip(boxes, labels)):
        colour = PALETTE[int(label) % len(PALETTE)]
        x0, y0, x1, y1 = (float(v) for v in box)
        draw.rectangle([x0, y0, x1, y1], outline=colour, width=width)
        caption = names[i] if scores is None else f"{names[i]} {float(scores[i]):.2f}"
        left, top, right, bottom = draw.textbbox((x0, y0), caption)
        lift = bottom - top + 2
        y = y0 - lift if y0 - lift >= 0 else y0
        draw.rectangle([x0, y, x0 + right - left + 2, y + lift], fill=colour)
        draw.text((x0 + 1, y), caption, fill=(0, 0, 0) if sum(colour) > 400 else (255, 255, 255))
    return image


def side_by_side(left: Image.Image, right: Image.Image, gap: int = 4) -> Image.Image:
    """Two images next to each other (ground truth | predictions)."""
    canvas = Image.new("RGB", (left.width + gap + right.width, max(left.height, right.height)), (255, 255, 255))
    canvas.paste(left, (0, 0))
    canvas.paste(right, (left.width + gap, 0))
    return canvas
