"""The prepared corpus: built once, found again, rebuilt when a file or a tokenizer setting changes, never half-written;
its ids (read by position from the files) are the tokenizer's, and its batches are `collate`'s."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from attnkit.translation import prepared_corpus
from attnkit.translation.batching import collate, make_examples
from attnkit.translation.data import SentencePair, write_tsv
from attnkit.translation.file_vector import FileVector
from attnkit.translation.prepared_corpus import (
    CorpusFiles,
    TokenizerSettings,
    prepare_corpus,
    reservoir_sample,
)
from attnkit.translation.tokenizer import SubwordTokenizer

WORDS = "the a cat dog sat ran on under mat log red big small house tree river".split()


def pairs(count: int, seed: int = 0) -> list[SentencePair]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        words = [WORDS[i] for i in rng.integers(0, len(WORDS), rng.integers(2, 9))]
        out.append(SentencePair(" ".join(words), " ".join(w.upper() for w in reversed(words))))
    return out


@pytest.fixture
def corpus_files(tmp_path):
    write_tsv(pairs(300), tmp_path / "train.tsv")
    write_tsv(pairs(20, seed=1), tmp_path / "valid.tsv")
    return CorpusFiles({"train": tmp_path / "train.tsv", "valid": tmp_path / "valid.tsv"})


def builds(monkeypatch) -> list[str]:
    """The cache folders built from now on (each call of `_build`)."""
    built: list[str] = []
    build = prepared_corpus._build

    def recording(files, tokenizer, folder, key, say):
        built.append(folder.name)
        build(files, tokenizer, folder, key, say)

    monkeypatch.setattr(prepared_corpus, "_build", recording)
    return built


def test_the_cache_holds_the_tokenizers_ids_and_is_found_again(corpus_files, monkeypatch):
    built = builds(monkeypatch)
    settings = TokenizerSettings(vocab_size=60)
    first = prepare_corpus(corpus_files, settings)
    assert first.folder.parent == corpus_files.paths["train"].parent / ".attnkit-cache" / "translation"
    train = first.encoded("train")
    assert isinstance(train.source.ids, FileVector) and len(train) == 300  # read by position, not mapped
    assert train.source.lengths.dtype == np.uint8  # sentences under 255 tokens: a byte each
    texts = pairs(300)
    assert [train.source.sentence(i).tolist() for i in range(300)] == first.tokenizer.encode_source(
        [p.source for p in texts])
    assert [train.target.sentence(i).tolist() for i in range(300)] == first.tokenizer.encode_target(
        [p.target for p in texts])
    assert first.texts("valid").pairs == pairs(20, seed=1)
    again = prepare_corpus(corpus_files, settings)
    assert again.folder == first.folder and built == [first.folder.name]  # built once
    # a resumed run gives the tokenizer it saved: the same cache, found by the tokenizer's fingerprint
    reloaded = SubwordTokenizer.load(first.folder)
    assert prepare_corpus(corpus_files, reloaded).folder == first.folder and len(built) == 1


def test_a_changed_file_or_tokenizer_setting_rebuilds(corpus_files, monkeypatch):
    built = builds(monkeypatch)
    first = prepare_corpus(corpus_files, TokenizerSettings(vocab_size=60))
    other_vocabulary = prepare_corpus(corpus_files, TokenizerSettings(vocab_size=70))
    other_side = prepare_corpus(corpus_files, TokenizerSettings(vocab_size=60, joint=False))
    assert len({first.folder, other_vocabulary.folder, other_side.folder}) == 3 and len(built) == 3
    assert other_vocabulary.tokenizer.source_vocab_size == 70 and not other_side.tokenizer.joint
    # the same size and modification time, other content: still a new cache (the first MiB is hashed)
    train = corpus_files.paths["train"]
    stat = train.stat()
    text = train.read_text(encoding="utf-8")
    train.write_text(text.replace("cat", "cow", 1), encoding="utf-8")
    os.utime(train, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = prepare_corpus(corpus_files, TokenizerSettings(vocab_size=60))
    assert changed.folder != first.folder and len(built) == 4
    write_tsv(pairs(310), train)  # more lines
    assert len(prepare_corpus(corpus_files, TokenizerSettings(vocab_size=60)).encoded("train")) == 310


def test_an_interrupted_preparation_leaves_no_cache(corpus_files, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepared_corpus, "_encode_split", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare_corpus(corpus_files, TokenizerSettings(vocab_size=60))
    root = corpus_files.paths["train"].parent / ".attnkit-cache" / "translation"
    assert list(root.iterdir()) == []  # neither a cache folder nor the temporary one
    monkeypatch.undo()
    assert len(prepare_corpus(corpus_files, TokenizerSettings(vocab_size=60)).encoded("train")) == 300


def test_a_cache_of_an_older_format_is_not_read_but_rebuilt(corpus_files, monkeypatch):
    built = builds(monkeypatch)
    monkeypatch.setattr(prepared_corpus, "FORMAT_VERSION", prepared_corpus.FORMAT_VERSION - 1)
    old = prepare_corpus(corpus_files, TokenizerSettings(vocab_size=60))
    monkeypatch.setattr(prepared_corpus, "FORMAT_VERSION", prepared_corpus.FORMAT_VERSION + 1)
    new = prepare_corpus(corpus_files, TokenizerSettings(vocab_size=60))
    assert new.folder != old.folder and len(built) == 2
    assert new.manifest["format"] == old.manifest["format"] + 1
    assert prepare_corpus(corpus_files, TokenizerSettings(vocab_size=60)).folder == new.folder and len(built) == 2


def test_a_killed_builds_temporary_folder_is_removed_by_the_next_build(corpus_files):
    root = corpus_files.paths["train"].parent / ".attnkit-cache" / "translation"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid, host = int(gone.stdout), socket.gethostname()

    def building(pid: int, host: str, age_seconds: float = 0) -> Path:
        folder = root / f".building-{'a' * 24}-{pid}-0123abcd-{host}"
        folder.mkdir(parents=True)
        (folder / "train.source.ids").write_bytes(b"12")
        for path in (folder / "train.source.ids", folder):
            os.utime(path, (time.time() - age_seconds, time.time() - age_seconds))
        return folder

    killed = building(dead_pid, host)  # kill -9 on this machine: its process is gone
    running = building(os.getpid(), host)  # a build in progress here
    elsewhere = building(dead_pid, "another-machine")  # on a shared disk: its pid means nothing here
    abandoned = building(dead_pid, "another-machine-2", age_seconds=2 * 86400)  # but unchanged for two days
    older = root / f".building-{'b' * 24}-{dead_pid}-0123abcd"  # named before hosts were recorded
    older.mkdir()
    prepare_corpus(corpus_files, TokenizerSettings(vocab_size=60))
    assert not killed.exists() and not abandoned.exists()
    assert running.exists() and elsewhere.exists() and older.exists()


def test_the_cache_folder_can_be_named(corpus_files, tmp_path, monkeypatch):
    monkeypatch.setenv(prepared_corpus.CACHE_ENVIRONMENT, str(tmp_path / "elsewhere"))
    corpus = prepare_corpus(corpus_files, TokenizerSettings(vocab_size=60))
    assert corpus.folder.parent == tmp_path / "elsewhere" / "translation"


def test_batches_from_the_arrays_are_collates(corpus_files):
    corpus = prepare_corpus(corpus_files, TokenizerSettings(vocab_size=60))
    texts = pairs(300)
    examples, _ = make_examples(corpus.tokenizer.encode_source([p.source for p in texts]),
                                corpus.tokenizer.encode_target([p.target for p in texts]), max_length=64)
    encoded = corpus.encoded("train")
    rows = np.array([5, 0, 299, 17])
    expected, batch = collate([examples[i] for i in rows]), encoded.batch(rows)
    for name in ("source", "target_input", "target_output"):
        torch.testing.assert_close(getattr(batch, name), getattr(expected, name))
    assert encoded.lengths.tolist() == [list(e.lengths) for e in examples]
    assert encoded.lengths.dtype == np.uint8
    short, dropped = encoded.keep(max_length=5)
    assert dropped == sum(max(e.lengths) > 5 for e in examples) > 0
    assert len(short) == 300 - dropped and short.lengths.max() <= 5
    assert short[-1] == [e for e in examples if max(e.lengths) <= 5][-1] and encoded[-1] == examples[-1]
    everything, none = encoded.keep(max_length=64)
    assert none == 0 and everything.index is None  # every pair kept: no index array of the rows


def test_reservoir_sample():
    stream = [SentencePair(str(i), str(i)) for i in range(50_000)]
    everything, count = reservoir_sample(stream[:100], size=200)
    assert everything == stream[:100] and count == 100  # a small corpus: all of it, in order
    sample, count = reservoir_sample(stream, size=1000, seed=3)
    assert count == 50_000 and len({p.source for p in sample}) == 1000
    numbers = np.array([int(p.source) for p in sample])
    assert 20_000 < numbers.mean() < 30_000 and numbers.max() > 45_000  # spread over the stream, not its start
    assert reservoir_sample(stream, size=1000, seed=3)[0] == sample
