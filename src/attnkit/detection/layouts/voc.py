"""The Pascal VOC layout (Everingham et al. 2010): `Annotations/<id>.xml`, `JPEGImages/`, `ImageSets/Main/<split>.txt`.

Each XML names its image (`filename`), its `size` and its `object`s: `name`, `difficult`, and a
`bndbox` of 1-based pixel corners xmin ymin xmax ymax, read as the box [xmin - 1, ymin - 1, xmax,
ymax] (as Detectron2 does) and written back the same way. `difficult` objects become COCO crowd
objects: left out of training and ignored by the evaluation, as VOC's own evaluation ignores them.
The classes are `labels.txt` (one name a line, as `attnkit data convert` writes it) if present,
else every object name under Annotations/, sorted; class k becomes category id k + 1. The XML is
parsed with defusedxml: entity declarations (billion laughs) and external entities are refused.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser
from PIL import Image, UnidentifiedImageError

from attnkit.detection.layouts.document import boxes_by_image, labels_of, number, read_lines
from attnkit.detection.layouts.problems import Place, Problems, at, where
from attnkit.detection.layouts.source import SplitSource
from attnkit.errors import DataError

SPLITS = ("train", "val", "trainval", "test")
CORNERS = ("xmin", "ymin", "xmax", "ymax")


def found_in(path: Path) -> bool:
    return (path / "Annotations").is_dir() and (path / "JPEGImages").is_dir()


def splits(path: Path) -> list[str]:
    """train, val, trainval, test, then any other `ImageSets/Main/<split>.txt` (not the per-class `<class>_<split>`)."""
    present = [file.stem for file in sorted((path / "ImageSets" / "Main").glob("*.txt")) if "_" not in file.stem]
    return [s for s in SPLITS if s in present] + [s for s in present if s not in SPLITS]


def locate(path: Path, split: str) -> SplitSource:
    listing = path / "ImageSets" / "Main" / f"{split}.txt"
    if not listing.is_file():
        raise DataError(f"{path}: no ImageSets/Main/{split}.txt (the image ids of the {split} split)")
    return SplitSource("voc", path / "JPEGImages", listing, split)


class _LineBuilder(ElementTree.TreeBuilder):
    """A TreeBuilder that remembers the line each element starts on (`lines[element]`)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[ElementTree.Element, int] = {}
        self.expat: Any = None

    def start(self, tag, attrs):
        element = super().start(tag, attrs)
        self.lines[element] = self.expat.CurrentLineNumber
        return element


def parse_xml(file: Path) -> tuple[ElementTree.Element, dict[ElementTree.Element, int]]:
    """(root element, element -> line) of FILE; DataError naming the file and line if it is not safe, valid XML."""
    builder = _LineBuilder()
    parser = DefusedXMLParser(target=builder, forbid_dtd=False, forbid_entities=True, forbid_external=True)
    builder.expat = parser.parser
    try:
        parser.feed(file.read_bytes())
        return parser.close(), builder.lines
    except ElementTree.ParseError as error:
        raise DataError(f"{where(file, error.position[0])}: not valid XML ({error})") from None
    except DefusedXmlException as error:
        raise DataError(f"{file}: refused: the XML declares entities or refers to external ones ({error!r}); "
                        "VOC annotations need neither") from None


def class_names(root: Path) -> list[str]:
    """labels.txt's names, else every object name under Annotations/, sorted."""
    labels = root / "labels.txt"
    if labels.is_file():
        return [line.strip() for line in read_lines(labels) if line.strip()]
    names: set[str] = set()
    for file in sorted((root / "Annotations").glob("*.xml")):
        try:
            element, _ = parse_xml(file)
        except DataError:
            continue  # reported when its split is read
        names.update((item.findtext("name") or "").strip() for item in element.iter("object"))
    return sorted(names - {""})


def read(source: SplitSource, problems: Problems) -> dict[str, Any]:
    """The split's XML files as a COCO instances document; errors name the file and line."""
    root = source.images.parent
    names = class_names(root)
    label_of = {name: label for label, name in enumerate(names)}
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for line, image_id in _ids(source.annotations):
        xml = root / "Annotations" / f"{image_id}.xml"
        if not xml.is_file():
            problems.error(at(source.annotations, line), f"no annotation file {xml} for image id {image_id!r}")
            continue
        try:
            image = _read_xml(xml, image_id, source.images, label_of, problems)
        except DataError as error:
            problems.error("", str(error))
            continue
        if image is None:
            continue
        entry, objects = image
        entry["id"] = len(images) + 1
        images.append(entry)
        for category, bbox, difficult in objects:
            annotations.append({"id": len(annotations) + 1, "image_id": entry["id"], "category_id": category + 1,
                                "bbox": bbox, "area": bbox[2] * bbox[3], "iscrowd": int(difficult)})
    if not problems.raise_errors:
        _unannotated_images(root, problems)
    return {"images": images, "annotations": annotations,
            "categories": [{"id": k + 1, "name": name} for k, name in enumerate(names)]}


def _unannotated_images(root: Path, problems: Problems) -> None:
    """A note for the images of JPEGImages/ that have no Annotations/<id>.xml (no split can use them)."""
    annotated = {file.stem for file in (root / "Annotations").glob("*.xml")}
    for image in sorted((root / "JPEGImages").iterdir()):
        if image.is_file() and not image.name.startswith(".") and image.stem not in annotated:
            problems.note(str(image), f"no annotation file {root / 'Annotations' / (image.stem + '.xml')}: not used")


def _ids(listing: Path) -> list[tuple[int, str]]:
    """(line, image id) of each non-empty line of an ImageSets file."""
    return [(number_, text.split()[0]) for number_, text in
            enumerate(read_lines(listing), start=1) if text.strip()]


def _read_xml(xml: Path, image_id: str, folder: Path, label_of: dict[str, int], problems: Problems):
    """(image entry, [(label, COCO bbox, difficult)]) of one XML file; None after reporting a missing image."""
    element, lines = parse_xml(xml)
    file_name = (element.findtext("filename") or "").strip()
    if not file_name or not (folder / file_name).is_file():
        found = sorted(folder.glob(f"{image_id}.*"))
        if not found:
            problems.error(str(xml), f"its image {folder / (file_name or image_id + '.jpg')} is not there")
            return None
        file_name = found[0].name
    width, height = _size(element, lines, xml, folder / file_name)
    objects = []
    for item in element.iter("object"):
        place = at(xml, lines[item])
        parsed = _object(item, place, label_of, problems)
        if parsed is None:
            continue
        category, (x0, y0, x1, y1), difficult = parsed
        for message in _findings(x0, y0, x1, y1, width, height):
            problems.warning(place, message)
        objects.append((category, [x0, y0, x1 - x0, y1 - y0], difficult))
    return {"file_name": file_name, "width": width, "height": height}, objects


def _size(element, lines, xml: Path, image: Path) -> tuple[int, int]:
    """<size>'s width and height; the image header's when they are missing or zero."""
    try:
        width, height = (int(float(element.findtext(f"size/{key}") or 0)) for key in ("width", "height"))
    except ValueError:
        size = element.find("size")
        raise DataError(f"{where(xml, lines.get(size))}: <size> width and height must be numbers") from None
    if width > 0 and height > 0:
        return width, height
    try:
        with Image.open(image) as opened:
            return opened.size
    except (UnidentifiedImageError, OSError, ValueError) as error:
        raise DataError(f"{image}: cannot read image ({error})") from None


def _object(item, place: Place, label_of: dict[str, int], problems: Problems):
    """(label, corners [xmin - 1, ymin - 1, xmax, ymax], difficult) of an <object>, or None after an error."""
    name = (item.findtext("name") or "").strip()
    if name not in label_of:
        problems.error(place, f"object class {name!r} is not one of the classes ({', '.join(label_of)})")
        return None
    try:
        xmin, ymin, xmax, ymax = (float(item.findtext(f"bndbox/{key}") or "nan") for key in CORNERS)
    except ValueError:
        xmin = ymin = xmax = ymax = float("nan")
    if any(v != v for v in (xmin, ymin, xmax, ymax)):
        problems.error(place, "object needs a <bndbox> with numbers xmin, ymin, xmax, ymax")
        return None
    difficult = (item.findtext("difficult") or "0").strip() not in ("0", "")
    return label_of[name], (xmin - 1, ymin - 1, xmax, ymax), difficult


def _findings(x0: float, y0: float, x1: float, y1: float, width: int, height: int) -> list[str]:
    """What is odd about corners (x0, y0, x1, y1) in a WIDTH x HEIGHT image: empty, outside, written as x y w h."""
    corners = [x0 + 1, y0 + 1, x1, y1]
    if x1 <= x0 or y1 <= y0:
        found = [f"empty box {corners} (xmax <= xmin - 1 or ymax <= ymin - 1): left out"]
        if x1 > 0 and y1 > 0 and x0 + x1 <= width and y0 + y1 <= height:
            found.append("its xmax ymax look like a width and height; VOC's are corners")
        return found
    if x0 < -1 or y0 < -1 or x1 > width + 1 or y1 > height + 1:
        return [f"box {corners} reaches outside the {width}x{height} image: clamped"]
    return []


def write(splits: dict[str, tuple[Path, dict[str, Any]]], out: Path, copy) -> list[str]:
    """OUT/Annotations/, OUT/JPEGImages/, OUT/ImageSets/Main/<split>.txt and OUT/labels.txt (the class order)."""
    for folder in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (out / folder).mkdir(parents=True)
    ids: dict[Path, str] = {}  # source image -> its VOC id (an image in two splits keeps one)
    names: list[str] = []
    for split, (images, document) in splits.items():
        names = names or labels_of(document)[0]
        boxes = boxes_by_image(document)
        listed = []
        for entry in document["images"]:
            source = (images / entry["file_name"]).resolve()
            if source not in ids:
                ids[source] = _new_id(entry["file_name"], split, set(ids.values()))
                file_name = ids[source] + Path(entry["file_name"]).suffix
                copy(images / entry["file_name"], out / "JPEGImages" / file_name)
                _write_xml(out / "Annotations" / f"{ids[source]}.xml", file_name, entry, boxes[entry["id"]], names)
            listed.append(ids[source])
        (out / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(f"{i}\n" for i in listed), encoding="utf-8")
    (out / "labels.txt").write_text("".join(f"{name}\n" for name in names), encoding="utf-8")
    return []


def _new_id(file_name: str, split: str, taken: set[str]) -> str:
    """The file name without suffix, folders joined by `__`; prefixed by the split if another image has it."""
    stem = file_name.rsplit(".", 1)[0].replace("/", "__")
    for candidate in (stem, f"{split}__{stem}"):
        if candidate not in taken:
            return candidate
    raise DataError(f"two images would both be VOC image {split}__{stem}; rename one of {file_name}")


def _write_xml(path: Path, file_name: str, entry: dict[str, Any], boxes, names: list[str]) -> None:
    root = ElementTree.Element("annotation")
    ElementTree.SubElement(root, "filename").text = file_name
    size = ElementTree.SubElement(root, "size")
    for key, value in (("width", entry["width"]), ("height", entry["height"]), ("depth", 3)):
        ElementTree.SubElement(size, key).text = str(value)
    for box in boxes:
        item = ElementTree.SubElement(root, "object")
        ElementTree.SubElement(item, "name").text = names[box.label]
        ElementTree.SubElement(item, "difficult").text = str(int(box.crowd))
        bndbox = ElementTree.SubElement(item, "bndbox")
        for key, value in zip(CORNERS, (box.x0 + 1, box.y0 + 1, box.x1, box.y1)):
            ElementTree.SubElement(bndbox, key).text = number(value)
    ElementTree.indent(root)
    ElementTree.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
