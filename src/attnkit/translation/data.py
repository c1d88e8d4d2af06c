"""Parallel corpora: sentence pairs read from the formats people have.

Three formats, chosen by file name:
  * TSV, `train.tsv`: one pair per line, `source<TAB>target`;
  * two aligned plain-text files, `train.en` + `train.de`: line i of one translates line i of the other;
  * JSON lines as Hugging Face datasets write them, `train.jsonl`: `{"translation": {"en": ..., "de": ...}}`.

Nothing is ever silently misaligned: files whose line counts differ, lines that are not UTF-8,
TSV lines without a tab and malformed JSON raise a `DataError` naming the file and line. Pairs
with an empty side are skipped and counted in the `ReadReport`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

from attnkit.errors import DataError

JSONL_SUFFIXES = (".jsonl", ".json")
TSV_SUFFIXES = (".tsv",)


@dataclass(frozen=True)
class SentencePair:
    source: str
    target: str


@dataclass
class ReadReport:
    """What reading a corpus kept and skipped, for the user to see."""

    source: str
    pairs: int = 0
    skipped_empty: int = 0
    skipped_long: int = 0
    notes: list[str] = field(default_factory=list)
    skipped_bad: list[str] = field(default_factory=list)  # "file, line N: why", when told to skip bad lines

    def summary(self) -> str:
        skipped = []
        if self.skipped_empty:
            skipped.append(f"{self.skipped_empty} with an empty side")
        if self.skipped_long:
            skipped.append(f"{self.skipped_long} over-long")
        if self.skipped_bad:
            more = f"; ... and {len(self.skipped_bad) - 3} more" if len(self.skipped_bad) > 3 else ""
            skipped.append(f"{len(self.skipped_bad)} malformed: {'; '.join(self.skipped_bad[:3])}{more}")
        return f"{self.source}: {self.pairs} pairs" + (f" (skipped {', '.join(skipped)})" if skipped else "")


@dataclass(frozen=True)
class Corpus:
    pairs: list[SentencePair]
    report: ReadReport
    source_lang: str | None = None
    target_lang: str | None = None

    def __len__(self) -> int:
        return len(self.pairs)


def read_corpus(path: Path | str, source_lang: str | None = None, target_lang: str | None = None,
                max_chars: int = 1000, skip_bad: bool = False) -> Corpus:
    """Read one split from a TSV file, a JSON-lines file, or a pair of aligned files, into memory.

    `path` is a file (`train.tsv`, `train.jsonl`) or the shared stem of two aligned files
    (`data/train` for `data/train.en` + `data/train.de`). Languages are needed for JSON lines
    with more than two languages and for a stem with more than two files; otherwise they are found.
    Pairs with a side longer than `max_chars` characters are skipped and counted. skip_bad=True
    skips malformed lines (not UTF-8, no tab, bad JSON) too, each listed in the report, instead of
    stopping at the first; in aligned files the line is skipped in both files, keeping them aligned.
    """
    reader = PairReader(path, source_lang, target_lang, max_chars, skip_bad)
    pairs = list(reader)
    return Corpus(pairs, reader.report, reader.source_lang, reader.target_lang)


class PairReader:
    """One split's pairs, read lazily, afresh at each iteration: a corpus of millions need not fit in memory.

    The arguments are `read_corpus`'s. Constructing it checks what can be checked without reading
    (the format, the aligned files and their languages); each pass refills `report` and, for JSON
    lines, finds the languages from the first record.
    """

    def __init__(self, path: Path | str, source_lang: str | None = None, target_lang: str | None = None,
                 max_chars: int = 1000, skip_bad: bool = False) -> None:
        path = Path(path)
        self.max_chars, self.skip_bad = max_chars, skip_bad
        self.source_lang, self.target_lang = source_lang, target_lang
        if path.is_file() and path.suffix in TSV_SUFFIXES + JSONL_SUFFIXES:
            self.files: tuple[Path, ...] = (path,)
        elif path.is_file():
            raise DataError(f"{path}: unknown format (expected .tsv, .jsonl, or a stem of two aligned files "
                            f"such as train for train.en + train.de)")
        else:
            self.source_lang, self.target_lang = _aligned_languages(path, source_lang, target_lang)
            self.files = _aligned_files(path, self.source_lang, self.target_lang)
        self.report = ReadReport(" + ".join(map(str, self.files)))

    def __iter__(self) -> Iterator[SentencePair]:
        self.report = ReadReport(self.report.source)
        skipped = self.report.skipped_bad if self.skip_bad else None
        if len(self.files) == 2:
            pairs = _read_aligned(*self.files, self.report, skipped)
        elif self.files[0].suffix in TSV_SUFFIXES:
            pairs = _read_tsv(self.files[0], self.report, skipped)
        else:
            pairs = _read_jsonl(self.files[0], self, skipped)
        for pair in pairs:
            if len(pair.source) > self.max_chars or len(pair.target) > self.max_chars:
                self.report.skipped_long += 1
                continue
            self.report.pairs += 1
            yield pair


def find_split(folder: Path | str, split: str) -> Path | None:
    """The path `read_corpus` takes for `split` ("train", "valid", "test") in a folder, or None."""
    folder = Path(folder)
    for suffix in TSV_SUFFIXES + JSONL_SUFFIXES:
        if (folder / f"{split}{suffix}").is_file():
            return folder / f"{split}{suffix}"
    if len(list(folder.glob(f"{split}.*"))) >= 2:
        return folder / split
    return None


def write_tsv(pairs: list[SentencePair], path: Path | str) -> Path:
    """Write pairs as `source<TAB>target` lines (tabs and newlines inside a sentence become spaces)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as file:
        for pair in pairs:
            file.write(f"{_one_line(pair.source)}\t{_one_line(pair.target)}\n")
    return path


def write_aligned(pairs: list[SentencePair], stem: Path | str, source_lang: str, target_lang: str) -> tuple[Path, Path]:
    """Write `stem.SRC` and `stem.TGT`, one sentence per line."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = Path(f"{stem}.{source_lang}"), Path(f"{stem}.{target_lang}")
    for path, side in zip(paths, ("source", "target")):
        path.write_text("".join(_one_line(getattr(pair, side)) + "\n" for pair in pairs), encoding="utf-8")
    return paths


def write_jsonl(pairs: list[SentencePair], path: Path | str, source_lang: str, target_lang: str) -> Path:
    """Write Hugging Face datasets' translation format, one JSON object per line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as file:
        for pair in pairs:
            record = {"translation": {source_lang: pair.source, target_lang: pair.target}}
            file.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _lines(path: Path, skipped: list[str] | None = None) -> Iterator[tuple[int, str | None]]:
    """(line number, text without the newline); DataError naming the line if it is not UTF-8.

    With a `skipped` list, such a line is listed there and yielded as None instead.
    """
    with path.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                _bad(DataError(f"{path}, line {number}: not valid UTF-8 ({error.reason} at byte {error.start})"),
                     skipped)
                yield number, None
                continue
            yield number, text.rstrip("\r\n")


def _bad(error: DataError, skipped: list[str] | None) -> None:
    """Raise ERROR, or (when skipping bad lines) list it in `skipped`."""
    if skipped is None:
        raise error
    skipped.append(str(error))


def _pair(report: ReadReport, source: str, target: str) -> SentencePair | None:
    source, target = source.strip(), target.strip()
    if not source or not target:
        report.skipped_empty += 1
        return None
    return SentencePair(source, target)


def _read_tsv(path: Path, report: ReadReport, skipped: list[str] | None) -> Iterator[SentencePair]:
    for number, line in _lines(path, skipped):
        if line is None:
            continue
        if not line.strip():
            report.skipped_empty += 1
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            _bad(DataError(f"{path}, line {number}: expected source<TAB>target, found {len(fields)} "
                           f"tab-separated field{'s' if len(fields) != 1 else ''}"), skipped)
            continue
        pair = _pair(report, *fields)
        if pair is not None:
            yield pair


def _read_jsonl(path: Path, reader: PairReader, skipped: list[str] | None) -> Iterator[SentencePair]:
    """The pairs of a JSON-lines file; READER's languages found from the first record if not given."""
    for number, line in _lines(path, skipped):
        if line is None or not line.strip():
            continue
        try:
            pair = _read_record(path, number, line, reader)
        except DataError as error:
            _bad(error, skipped)
            continue
        if pair is not None:
            yield pair


def _read_record(path: Path, number: int, line: str, reader: PairReader) -> SentencePair | None:
    """The pair of one JSON line (None if a side is empty)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise DataError(f"{path}, line {number}: malformed JSON ({error.msg})") from None
    translation = record.get("translation") if isinstance(record, dict) else None
    if not isinstance(translation, dict):
        raise DataError(f"{path}, line {number}: expected {{\"translation\": {{\"<src>\": ..., \"<tgt>\": ...}}}}")
    if reader.source_lang is None or reader.target_lang is None:
        reader.source_lang, reader.target_lang = _two_languages(path, number, list(translation), reader.source_lang,
                                                                reader.target_lang)
    source_lang, target_lang = reader.source_lang, reader.target_lang
    source, target = translation.get(source_lang), translation.get(target_lang)
    if not isinstance(source, str) or not isinstance(target, str):
        raise DataError(f"{path}, line {number}: no text for language '{source_lang}' and '{target_lang}' "
                        f"(found {', '.join(map(str, translation)) or 'none'})")
    if not _is_unicode(source) or not _is_unicode(target):
        raise DataError(f"{path}, line {number}: the text has a lone surrogate escape (\\ud800-\\udfff), "
                        "which is not valid Unicode")
    return _pair(reader.report, source, target)


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _two_languages(path: Path, number: int, found: list[str], source_lang: str | None,
                   target_lang: str | None) -> tuple[str, str]:
    if source_lang is not None and target_lang is None and len(found) == 2 and source_lang in found:
        return source_lang, next(lang for lang in found if lang != source_lang)
    if source_lang is None and target_lang is None and len(found) == 2:
        return found[0], found[1]
    raise DataError(f"{path}, line {number}: languages {', '.join(found)}; say which are source and target "
                    f"(--source-lang, --target-lang)")


def _aligned_languages(stem: Path, source_lang: str | None, target_lang: str | None) -> tuple[str, str]:
    if source_lang is not None and target_lang is not None:
        return source_lang, target_lang
    candidates = sorted(p for p in stem.parent.glob(f"{stem.name}.*")
                        if p.is_file() and p.suffix[1:] not in ("tsv", "jsonl", "json"))
    if len(candidates) != 2:
        found = ", ".join(p.name for p in candidates) or "none"
        raise DataError(f"{stem}: expected a .tsv or .jsonl file or two aligned files {stem.name}.SRC and "
                        f"{stem.name}.TGT (found: {found}); give --source-lang and --target-lang")
    source_lang = source_lang or next(p.suffix[1:] for p in candidates if p.suffix[1:] != target_lang)
    target_lang = target_lang or next(p.suffix[1:] for p in candidates if p.suffix[1:] != source_lang)
    return source_lang, target_lang


def _aligned_files(stem: Path, source_lang: str, target_lang: str) -> tuple[Path, Path]:
    paths = Path(f"{stem}.{source_lang}"), Path(f"{stem}.{target_lang}")
    for path in paths:
        if not path.is_file():
            raise DataError(f"{path}: file not found "
                            f"(aligned files {stem.name}.{source_lang} + {stem.name}.{target_lang})")
    return paths


def _read_aligned(source_path: Path, target_path: Path, report: ReadReport,
                  skipped: list[str] | None) -> Iterator[SentencePair]:
    """Line i of one file with line i of the other; DataError (at the end) if their line counts differ."""
    source_lines = target_lines = 0
    for source_line, target_line in zip_longest(_lines(source_path, skipped), _lines(target_path, skipped)):
        source_lines += source_line is not None
        target_lines += target_line is not None
        if source_line is None or target_line is None:
            continue  # one file is longer: counted, refused at the end
        source, target = source_line[1], target_line[1]
        if source is not None and target is not None:  # a line skipped in one file is skipped in both
            pair = _pair(report, source, target)
            if pair is not None:
                yield pair
    if source_lines != target_lines:
        raise DataError(f"{source_path} has {source_lines} lines but {target_path} has {target_lines}: "
                        f"aligned files must have one line per sentence pair")


def load_splits(data: str | Path | None = None, files: dict[str, Path | None] | None = None,
                source_lang: str | None = None, target_lang: str | None = None,
                needed: tuple[str, ...] = ("train", "valid"), max_chars: int = 1000,
                skip_bad: bool = False) -> dict[str, Corpus]:
    """The corpus splits named by DATA and/or explicit files, read into memory.

    DATA is a built-in name (`numbers`, `numbers:de`), a folder holding `train.*`, `valid.*` and
    optionally `test.*` in any supported format, or one file (taken as the first needed split).
    `files` ({"train": path, ...}) override what DATA gives. DataError if a needed split is missing.
    skip_bad: skip and list malformed lines instead of stopping (see `read_corpus`).
    """
    from attnkit.translation.numbers import numbers_splits, parse_name

    spec = parse_name(str(data)) if data is not None else None
    splits: dict[str, Corpus] = numbers_splits(spec) if spec is not None else {}
    paths = split_paths(None if spec is not None else data, files, needed=() if spec is not None else needed)
    splits.update({split: read_corpus(path, source_lang, target_lang, max_chars, skip_bad)
                   for split, path in paths.items()})
    _check_needed(splits, data, needed)
    for split, corpus in splits.items():
        if not corpus.pairs:
            raise DataError(f"{corpus.report.source}: the {split} split has no usable sentence pairs")
    return splits


def is_built_in(data: str | Path | None) -> bool:
    """Whether DATA names a built-in dataset (numbers:de), made in memory rather than read from files."""
    from attnkit.translation.numbers import parse_name

    return data is not None and parse_name(str(data)) is not None


def split_paths(data: str | Path | None = None, files: dict[str, Path | None] | None = None,
                needed: tuple[str, ...] = ("train", "valid")) -> dict[str, Path]:
    """The path `read_corpus` takes for each split that DATA (a folder or a file, not a built-in name) and FILES
    give, FILES overriding; DataError if a needed split is missing or DATA does not exist."""
    paths: dict[str, Path] = {}
    if data is not None:
        path = Path(data)
        if path.is_dir():
            found = {split: find_split(path, split) for split in ("train", "valid", "test")}
            paths.update({split: file for split, file in found.items() if file is not None})
        elif path.is_file() or any(path.parent.glob(f"{path.name}.*")):
            paths[needed[0] if needed else "train"] = path
        else:
            raise DataError(f"{path}: no such file or folder, and not a built-in dataset (try numbers:de)")
    paths.update({split: Path(file) for split, file in (files or {}).items() if file is not None})
    _check_needed(paths, data, needed)
    return paths


def _check_needed(splits: Mapping[str, object], data: str | Path | None, needed: tuple[str, ...]) -> None:
    missing = [split for split in needed if split not in splits]
    if missing:
        where = f" in {data}" if data is not None else ""
        expected = ", ".join(f"{m}.tsv, {m}.jsonl or {m}.SRC + {m}.TGT" for m in missing)
        raise DataError(f"no {' or '.join(missing)} split{where}: expected {expected}")
