"""Each input format round-trips; every bad input gives a clear DataError naming the file and line."""

from __future__ import annotations

import json

import pytest

from attnkit.errors import DataError
from attnkit.translation.data import SentencePair, find_split, read_corpus, write_aligned, write_jsonl, write_tsv
from attnkit.translation.numbers import NumbersSpec, numbers_splits, parse_name, write_numbers

PAIRS = [SentencePair("one cat", "eine Katze"), SentencePair("two dogs", "zwei Hunde"),
         SentencePair("Grüße, «quoted» \"text\"", "Grüße, „zitiert“ 'Text'")]


def test_tsv_round_trip(tmp_path):
    corpus = read_corpus(write_tsv(PAIRS, tmp_path / "train.tsv"))
    assert corpus.pairs == PAIRS
    assert corpus.report.pairs == 3


def test_aligned_files_round_trip(tmp_path):
    write_aligned(PAIRS, tmp_path / "train", "en", "de")
    corpus = read_corpus(tmp_path / "train", source_lang="en", target_lang="de")
    assert corpus.pairs == PAIRS
    reverse = read_corpus(tmp_path / "train", source_lang="de", target_lang="en")
    assert reverse.pairs[0] == SentencePair("eine Katze", "one cat")
    assert find_split(tmp_path, "train") == tmp_path / "train"


def test_jsonl_round_trip(tmp_path):
    corpus = read_corpus(write_jsonl(PAIRS, tmp_path / "train.jsonl", "en", "de"), "en", "de")
    assert corpus.pairs == PAIRS
    assert (corpus.source_lang, corpus.target_lang) == ("en", "de")
    assert find_split(tmp_path, "train") == tmp_path / "train.jsonl"


def test_mismatched_line_counts(tmp_path):
    (tmp_path / "train.en").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "train.de").write_text("x\ny\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"train.en has 3 lines but .*train.de has 2"):
        read_corpus(tmp_path / "train", "en", "de")


def test_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes(b"one\teins\ntwo\tzw\xff\xfei\n")
    with pytest.raises(DataError, match=r"train.tsv, line 2: not valid UTF-8"):
        read_corpus(path)


def test_tsv_without_tab(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("one\teins\ntwo zwei\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"line 2: expected source<TAB>target, found 1"):
        read_corpus(path)


def test_malformed_json(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"translation": {"en": "a", "de": "b"}}) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"line 2: malformed JSON"):
        read_corpus(path)
    path.write_text(json.dumps({"text": "a"}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"line 1: expected"):
        read_corpus(path)


def test_jsonl_needs_languages_when_more_than_two(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"translation": {"en": "a", "de": "b", "fr": "c"}}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="say which are source and target"):
        read_corpus(path)
    assert read_corpus(path, "fr", "de").pairs == [SentencePair("c", "b")]


def test_empty_and_long_pairs_are_skipped_and_counted(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("one\teins\n\t\ntwo\t\n\n" + "x" * 50 + "\ty\n", encoding="utf-8")
    corpus = read_corpus(path, max_chars=20)
    assert corpus.pairs == [SentencePair("one", "eins")]
    assert (corpus.report.skipped_empty, corpus.report.skipped_long) == (3, 1)
    assert "skipped 3 with an empty side, 1 over-long" in corpus.report.summary()


def test_missing_aligned_files(tmp_path):
    with pytest.raises(DataError, match="expected a .tsv or .jsonl file or two aligned files"):
        read_corpus(tmp_path / "train")
    with pytest.raises(DataError, match="unknown format"):
        (tmp_path / "train.csv").write_text("a,b\n", encoding="utf-8")
        read_corpus(tmp_path / "train.csv")


def test_numbers_splits_are_disjoint_and_german_reverses_units():
    spec = NumbersSpec(max_number=300, valid_size=40, test_size=40)
    splits = numbers_splits(spec)
    sources = {name: {p.source for p in corpus.pairs} for name, corpus in splits.items()}
    assert not sources["train"] & sources["test"] and not sources["train"] & sources["valid"]
    assert not sources["valid"] & sources["test"]
    assert sum(len(s) for s in sources.values()) == 300
    everything = {p.source: p.target for corpus in splits.values() for p in corpus.pairs}
    assert everything["seventy-one"] == "einundsiebzig"
    assert parse_name("numbers:fr") == NumbersSpec(language="fr")
    assert parse_name("numbers") == NumbersSpec(language="de")
    assert parse_name("data/numbers") is None


def test_write_numbers_reads_back(tmp_path):
    spec = NumbersSpec(language="fr", max_number=100, valid_size=10, test_size=10)
    paths = write_numbers(tmp_path, spec)
    corpus = read_corpus(paths["train"])
    assert corpus.pairs == numbers_splits(spec)["train"].pairs
    assert SentencePair("seventy-one", "soixante et onze") in numbers_splits(spec)["train"].pairs + \
        numbers_splits(spec)["valid"].pairs + numbers_splits(spec)["test"].pairs


def test_numbers_unknown_language():
    with pytest.raises(DataError, match="unknown language 'xx'"):
        NumbersSpec(language="xx")
