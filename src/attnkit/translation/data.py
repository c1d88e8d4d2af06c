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
from collections.abc import Iterator
from dataclasses import dataclass, field
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
    """Read one split from a TSV file, a JSON-lines file, or a pair of aligned files.

    `path` is a file (`train.tsv`, `train.jsonl`) or the shared stem of two aligned files
    (`data/train` for `data/train.en` + `data/train.de`). Languages are needed for JSON lines
    with more than two languages and for a stem with more than two files; otherwise they are found.
    Pairs with a side longer than `max_chars` characters are skipped and counted. skip_bad=True
    skips malformed lines (not UTF-8, no tab, bad JSON) too, each listed in the report, instead of
    stopping at the first; in aligned files the line is skipped in both files, keeping them aligned.
    """
    path = Path(path)
    if path.is_file() and path.suffix in TSV_SUFFIXES:
        corpus = _read_tsv(path, skip_bad)
    elif path.is_file() and path.suffix in JSONL_SUFFIXES:
        corpus = _read_jsonl(path, source_lang, target_lang, skip_bad)
    elif path.is_file():
        raise DataError(f"{path}: unknown format (expected .tsv, .jsonl, or a stem of two aligned files "
                        f"such as train for train.en + train.de)")
    else:
        corpus = _read_aligned(path, source_lang, target_lang, skip_bad)
    return _drop_long(corpus, max_chars)


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


def _keep(pairs: list[SentencePair], report: ReadReport, source: str, target: str) -> None:
    source, target = source.strip(), target.strip()
    if not source or not target:
        report.skipped_empty += 1
        return
    pairs.append(SentencePair(source, target))
    report.pairs += 1


def _read_tsv(path: Path, skip_bad: bool = False) -> Corpus:
    pairs: list[SentencePair] = []
    report = ReadReport(str(path))
    skipped = report.skipped_bad if skip_bad else None
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
        _keep(pairs, report, *fields)
    return Corpus(pairs, report)


def _read_jsonl(path: Path, source_lang: str | None, target_lang: str | None, skip_bad: bool = False) -> Corpus:
    pairs: list[SentencePair] = []
    report = ReadReport(str(path))
    skipped = report.skipped_bad if skip_bad else None
    for number, line in _lines(path, skipped):
        if line is None or not line.strip():
            continue
        try:
            source_lang, target_lang = _read_record(path, number, line, source_lang, target_lang, pairs, report)
        except DataError as error:
            _bad(error, skipped)
    return Corpus(pairs, report, source_lang, target_lang)


def _read_record(path: Path, number: int, line: str, source_lang: str | None, target_lang: str | None,
                 pairs: list[SentencePair], report: ReadReport) -> tuple[str | None, str | None]:
    """Keep the pair of one JSON line; the languages, found from it if they were not known."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise DataError(f"{path}, line {number}: malformed JSON ({error.msg})") from None
    translation = record.get("translation") if isinstance(record, dict) else None
    if not isinstance(translation, dict):
        raise DataError(f"{path}, line {number}: expected {{\"translation\": {{\"<src>\": ..., \"<tgt>\": ...}}}}")
    if source_lang is None or target_lang is None:
        source_lang, target_lang = _two_languages(path, number, list(translation), source_lang, target_lang)
    source, target = translation.get(source_lang), translation.get(target_lang)
    if not isinstance(source, str) or not isinstance(target, str):
        raise DataError(f"{path}, line {number}: no text for language '{source_lang}' and '{target_lang}' "
                        f"(found {', '.join(map(str, translation)) or 'none'})")
    if not _is_unicode(source) or not _is_unicode(target):
        raise DataError(f"{path}, line {number}: the text has a lone surrogate escape (\\ud800-\\udfff), "
                        "which is not valid Unicode")
    _keep(pairs, report, source, target)
    return source_lang, target_lang


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


def _read_aligned(stem: Path, source_lang: str | None, target_lang: str | None, skip_bad: bool = False) -> Corpus:
    candidates = sorted(p for p in stem.parent.glob(f"{stem.name}.*")
                        if p.is_file() and p.suffix[1:] not in ("tsv", "jsonl", "json"))
    if source_lang is None or target_lang is None:
        if len(candidates) != 2:
            found = ", ".join(p.name for p in candidates) or "none"
            raise DataError(f"{stem}: expected a .tsv or .jsonl file or two aligned files {stem.name}.SRC and "
                            f"{stem.name}.TGT (found: {found}); give --source-lang and --target-lang")
        source_lang = source_lang or next(p.suffix[1:] for p in candidates if p.suffix[1:] != target_lang)
        target_lang = target_lang or next(p.suffix[1:] for p in candidates if p.suffix[1:] != source_lang)
    source_path, target_path = Path(f"{stem}.{source_lang}"), Path(f"{stem}.{target_lang}")
    for path in (source_path, target_path):
        if not path.is_file():
            raise DataError(f"{path}: file not found "
                            f"(aligned files {stem.name}.{source_lang} + {stem.name}.{target_lang})")
    skipped: list[str] | None = [] if skip_bad else None
    sources = [line for _, line in _lines(source_path, skipped)]
    targets = [line for _, line in _lines(target_path, skipped)]
    if len(sources) != len(targets):
        raise DataError(f"{source_path} has {len(sources)} lines but {target_path} has {len(targets)}: "
                        f"aligned files must have one line per sentence pair")
    pairs: list[SentencePair] = []
    report = ReadReport(f"{source_path} + {target_path}", skipped_bad=skipped or [])
    for source, target in zip(sources, targets):
        if source is not None and target is not None:  # a line skipped in one file is skipped in both
            _keep(pairs, report, source, target)
    return Corpus(pairs, report, source_lang, target_lang)


def _drop_long(corpus: Corpus, max_chars: int) -> Corpus:
    kept = [p for p in corpus.pairs if len(p.source) <= max_chars and len(p.target) <= max_chars]
    corpus.report.skipped_long += len(corpus.pairs) - len(kept)
    corpus.report.pairs = len(kept)
    return Corpus(kept, corpus.report, corpus.source_lang, corpus.target_lang)



def load_splits(data: str | Path | None = None, files: dict[str, Path | None] | None = None,
                source_lang: str | None = None, target_lang: str | None = None,
                needed: tuple[str, ...] = ("train", "valid"), max_chars: int = 1000,
                skip_bad: bool = False) -> dict[str, Corpus]:
    """The corpus splits named by DATA and/or explicit files.

    DATA is a built-in name (`numbers`, `numbers:de`), a folder holding `train.*`, `valid.*` and
    optionally `test.*` in any supported format, or one file (taken as the first needed split).
    `files` ({"train": path, ...}) override what DATA gives. DataError if a needed split is missing.
    skip_bad: skip and list malformed lines instead of stopping (see `read_corpus`).
    """
    from attnkit.translation.numbers import numbers_splits, parse_name

    splits: dict[str, Corpus] = {}
    spec = parse_name(str(data)) if data is not None else None
    if spec is not None:
        splits.update(numbers_splits(spec))
    elif data is not None:
        path = Path(data)
        if path.is_dir():
            for split in ("train", "valid", "test"):
                found = find_split(path, split)
                if found is not None:
                    splits[split] = read_corpus(found, source_lang, target_lang, max_chars, skip_bad)
        elif path.is_file() or any(path.parent.glob(f"{path.name}.*")):
            splits[needed[0]] = read_corpus(path, source_lang, target_lang, max_chars, skip_bad)
        else:
            raise DataError(f"{path}: no such file or folder, and not a built-in dataset (try numbers:de)")
    for split, file in (files or {}).items():
        if file is not None:
            splits[split] = read_corpus(file, source_lang, target_lang, max_chars, skip_bad)
    missing = [split for split in needed if split not in splits]
    if missing:
        where = f" in {data}" if data is not None else ""
        expected = ", ".join(f"{m}.tsv, {m}.jsonl or {m}.SRC + {m}.TGT" for m in missing)
        raise DataError(f"no {' or '.join(missing)} split{where}: expected {expected}")
    for split, corpus in splits.items():
        if not corpus.pairs:
            raise DataError(f"{corpus.report.source}: the {split} split has no usable sentence pairs")
    return splits
