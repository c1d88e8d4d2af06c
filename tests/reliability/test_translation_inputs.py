"""Malformed translation corpora, generated: each file loads correctly or raises DataError naming it.

TSV, JSON lines and aligned plain-text files made of random lines: tabs, carriage returns, NUL,
Unicode line separators, invalid UTF-8, random JSON. What loads is a list of non-empty pairs of
valid Unicode text, aligned line for line.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from attnkit.errors import DataError
from attnkit.translation.data import read_corpus

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

pieces = st.sampled_from(["\t", "\r", "\n", "\x00", "\u2028", "\x85", " ", "a", "Zahl", "\ud800", "é"])
texts = st.lists(st.text(max_size=6) | pieces, max_size=6).map("".join)
raw_lines = st.lists(st.binary(max_size=12) | texts.map(lambda t: t.encode("utf-8", "surrogatepass")), max_size=6)
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | texts,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
                           max_leaves=8)
records = st.fixed_dictionaries({"translation": st.dictionaries(st.sampled_from(["en", "de", "fr"]),
                                                                texts | json_values, max_size=3)}) | json_values


def _folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="attnkit-reliability-"))


def _check(path: Path, names: str, *languages: str | None) -> None:
    try:
        corpus = read_corpus(path, *languages)
    except DataError as error:
        assert names in str(error), str(error)
        return
    for pair in corpus.pairs:
        for text in (pair.source, pair.target):
            assert text.strip() and text.encode("utf-8")  # non-empty, valid Unicode (no lone surrogates)
    assert corpus.report.pairs == len(corpus.pairs)


@SETTINGS
@given(lines=raw_lines)
@example(lines=[b"eins\tone", b"\xff\xfe\tbroken"])
@example(lines=["zwei\t\ud800".encode("utf-8", "surrogatepass")])
def test_tsv_lines_load_or_raise_data_error(lines):
    path = _folder() / "train.tsv"
    path.write_bytes(b"\n".join(lines))
    _check(path, "train.tsv")


@SETTINGS
@given(rows=st.lists(records, max_size=5), garbage=st.lists(st.binary(max_size=10), max_size=2))
@example(rows=[{"translation": {"en": "one", "de": "\ud800"}}], garbage=[])
def test_json_lines_load_or_raise_data_error(rows, garbage):
    path = _folder() / "train.jsonl"
    lines = [json.dumps(row).encode() for row in rows] + garbage
    path.write_bytes(b"\n".join(lines))
    _check(path, "train.jsonl")
    _check(path, "train.jsonl", "en", "de")


@SETTINGS
@given(sources=raw_lines, targets=raw_lines)
def test_aligned_files_load_aligned_or_raise_data_error(sources, targets):
    folder = _folder()
    (folder / "train.en").write_bytes(b"\n".join(sources))
    (folder / "train.de").write_bytes(b"\n".join(targets))
    try:
        corpus = read_corpus(folder / "train", "en", "de")
    except DataError as error:
        assert "train.en" in str(error) or "train.de" in str(error)
        return
    kept = [(s.decode().strip(), t.decode().strip()) for s, t in zip(b"\n".join(sources).split(b"\n"),
                                                                     b"\n".join(targets).split(b"\n"))]
    assert [(p.source, p.target) for p in corpus.pairs] == [(s, t) for s, t in kept if s and t]


@SETTINGS
@given(lines=raw_lines)
def test_told_to_skip_bad_lines_a_tsv_file_loads_its_good_lines_and_lists_the_others(lines):
    path = _folder() / "train.tsv"
    path.write_bytes(b"\n".join(lines))
    corpus = read_corpus(path, skip_bad=True)
    good, bad = [], 0
    for raw in b"\n".join(lines).split(b"\n"):
        try:
            fields = raw.decode("utf-8").rstrip("\r").split("\t")
        except UnicodeDecodeError:
            bad += 1
            continue
        if "".join(fields).strip() and len(fields) != 2:
            bad += 1
        elif len(fields) == 2 and fields[0].strip() and fields[1].strip():
            good.append((fields[0].strip(), fields[1].strip()))
    assert [(p.source, p.target) for p in corpus.pairs] == good
    assert len(corpus.report.skipped_bad) == bad
    assert all(str(path) in message for message in corpus.report.skipped_bad)


def test_skipped_lines_are_named_in_the_summary_and_aligned_files_stay_aligned(tmp_path):
    (tmp_path / "train.en").write_bytes(b"one\n\xff\xfe\nthree\nfour\n")
    (tmp_path / "train.de").write_bytes(b"eins\nzwei\n\xc3\nvier\n")
    corpus = read_corpus(tmp_path / "train", "en", "de", skip_bad=True)
    assert [(p.source, p.target) for p in corpus.pairs] == [("one", "eins"), ("four", "vier")]
    summary = corpus.report.summary()
    assert "2 pairs (skipped 2 malformed: " in summary
    assert "train.en, line 2: not valid UTF-8" in summary and "train.de, line 3: not valid UTF-8" in summary
    with pytest.raises(DataError, match=r"train\.en, line 2: not valid UTF-8"):
        read_corpus(tmp_path / "train", "en", "de")
    (tmp_path / "train.jsonl").write_text('{"translation": {"en": "a", "de": "b"}}\nnot json\n[1]\n'
                                          '{"translation": {"en": "c", "de": "d"}}\n')
    corpus = read_corpus(tmp_path / "train.jsonl", skip_bad=True)
    assert [(p.source, p.target) for p in corpus.pairs] == [("a", "b"), ("c", "d")]
    lines = [message.split(": ", 1)[0].rsplit(", ", 1)[1] for message in corpus.report.skipped_bad]
    assert lines == ["line 2", "line 3"]
