"""A corpus prepared once: its tokenizer and every split's token ids and lengths, cached beside the data.

fairseq binarises a corpus once (`fairseq-preprocess`) into memory-mapped token arrays, and
Hugging Face datasets memory-maps Arrow files: both start in seconds, with memory flat in the
corpus size. attnkit's corpora do the same. The first start (or `attnkit data prepare
translation DIR`) reads the split files twice, streaming: once to sample at most
`TRAINING_SAMPLE_PAIRS` pairs for BPE, once to encode everything in chunks with the tokenizers'
batch encoding (on every core, in a thread beside the reading). Later starts, resumes and the other
processes of a torchrun job load each split's lengths (a byte or two a sentence, all that batching
needs) and read the ids of only the batches they train on, by position from the files
(`file_vector.py`): memory flat in the corpus's size.

The cache folder (`DIR/.attnkit-cache/<key>`, or under $ATTNKIT_DATA_CACHE) is keyed by a hash of
the files (path, size, modification time, the first and last MiB), the reading settings
(languages, max_chars, skip_bad), the tokenizer (its settings when trained here, else its
vocabulary and merges) and FORMAT_VERSION: a changed file or setting gets a new folder, never a
stale one. It is built in a temporary folder and renamed into place, so an interrupted
preparation leaves nothing that a later start would read; a build killed outright (kill -9, a
power cut) leaves its temporary folder, which the next build removes once its process is gone
or nothing in it changed for a day (another machine's, on a shared disk).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from itertools import chain, islice
from pathlib import Path

import numpy as np

from attnkit.errors import DataError
from attnkit.translation.data import Corpus, PairReader, ReadReport, SentencePair
from attnkit.translation.encoded_pairs import EncodedPairs, RaggedIds, length_type
from attnkit.translation.file_vector import FileVector
from attnkit.translation.tokenizer import TRAINING_SAMPLE_PAIRS, SubwordTokenizer

FORMAT_VERSION = 2  # 2: each split's lengths stored (uint8/uint16); ids read by position, not mapped
CACHE_FOLDER = ".attnkit-cache"
CACHE_ENVIRONMENT = "ATTNKIT_DATA_CACHE"  # a folder for every corpus's cache, when beside the data will not do
MANIFEST = "manifest.json"
CHUNK_PAIRS = 20_000
EDGE_BYTES = 1 << 20  # the file's first and last MiB go into its identity
PROGRESS_SECONDS = 5.0
STALE_BUILD_SECONDS = 24 * 3600  # a temporary folder unchanged this long is a dead build's
BUILDING = ".building-"

Say = Callable[[str], None]


@dataclass(frozen=True)
class CorpusFiles:
    """The split files of a corpus and how they are read (`data.read_corpus`'s settings)."""

    paths: Mapping[str, Path]  # {"train": ..., "valid": ..., "test": ...}
    source_lang: str | None = None
    target_lang: str | None = None
    max_chars: int = 1000
    skip_bad: bool = False

    def reader(self, split: str) -> PairReader:
        return PairReader(self.paths[split], self.source_lang, self.target_lang, self.max_chars, self.skip_bad)

    def identity(self) -> str:
        """A hash of every file (path, size, modification time, first and last MiB) and the reading settings."""
        files = {split: [_file_identity(path) for path in self.reader(split).files] for split in sorted(self.paths)}
        settings = {"format": FORMAT_VERSION, "files": files, "source_lang": self.source_lang,
                    "target_lang": self.target_lang, "max_chars": self.max_chars, "skip_bad": self.skip_bad}
        return _hash(settings)

    def read(self) -> dict[str, Corpus]:
        """Every split in memory (what `data.load_splits` gives), for a tokenizer that is not cached."""
        from attnkit.translation.data import read_corpus

        return {split: read_corpus(path, self.source_lang, self.target_lang, self.max_chars, self.skip_bad)
                for split, path in self.paths.items()}


@dataclass(frozen=True)
class TokenizerSettings:
    """A BPE tokenizer to train on the training split (`tokenizer.SubwordTokenizer.train`)."""

    vocab_size: int
    joint: bool = True
    sample_pairs: int = TRAINING_SAMPLE_PAIRS


class PreparedCorpus:
    """A cache folder: the tokenizer, each split's token ids and lengths and, for valid and test, the texts."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        self.tokenizer = SubwordTokenizer.load(folder)

    @property
    def splits(self) -> list[str]:
        return list(self.manifest["splits"])

    def summaries(self) -> list[str]:
        return [info["summary"] for info in self.manifest["splits"].values()]

    def encoded(self, split: str) -> EncodedPairs:
        """SPLIT's token ids, left in the files (read a batch at a time), and their lengths, in memory."""
        return EncodedPairs(self._ragged(split, "source"), self._ragged(split, "target"))

    def texts(self, split: str) -> Corpus:
        """SPLIT's sentence pairs as text (kept for valid and test: BLEU needs the references)."""
        info = self.manifest["splits"][split]
        with (self.folder / f"{split}.pairs.jsonl").open(encoding="utf-8") as file:
            pairs = [SentencePair(*json.loads(line)) for line in file]
        report = ReadReport(info["source"], pairs=len(pairs))
        return Corpus(pairs, report, self.manifest["source_lang"], self.manifest["target_lang"])

    def _ragged(self, split: str, side: str) -> RaggedIds:
        ids = FileVector(self.folder / f"{split}.{side}.ids", np.dtype(self.manifest["dtype"]))
        offsets = FileVector.npy(self.folder / f"{split}.{side}.offsets.npy")
        return RaggedIds(ids, offsets, np.load(self.folder / f"{split}.{side}.lengths.npy"))


def prepare_corpus(files: CorpusFiles, tokenizer: TokenizerSettings | SubwordTokenizer, cache: Path | None = None,
                   say: Say | None = None) -> PreparedCorpus:
    """The prepared corpus of FILES with TOKENIZER (settings to train one, or a given one): from the cache if
    it is there, else built now (and cached). CACHE: the cache root (default: beside the training data)."""
    say = say or (lambda message: None)
    root = cache or cache_root(files)
    data_id = files.identity()
    spec = asdict(tokenizer) if isinstance(tokenizer, TokenizerSettings) else {"fingerprint": tokenizer.fingerprint()}
    folder = root / _hash({"data": data_id, "tokenizer": spec})[:24]
    found = folder if (folder / MANIFEST).is_file() else _find(root, data_id, spec.get("fingerprint"))
    if found is not None:
        say(f"data: prepared corpus {found} (cached; delete it to prepare again)")
        return PreparedCorpus(found)
    say(f"data: preparing {', '.join(map(str, files.paths.values()))} into {folder} (once; later starts read it)")
    _build(files, tokenizer, folder, {"data_id": data_id, "tokenizer": spec}, say)
    return PreparedCorpus(folder)


def cache_root(files: CorpusFiles) -> Path:
    """$ATTNKIT_DATA_CACHE, else .attnkit-cache beside the training data, else (read-only data) ~/.cache/attnkit."""
    if os.environ.get(CACHE_ENVIRONMENT):
        return Path(os.environ[CACHE_ENVIRONMENT]) / "translation"
    beside = Path(files.paths["train"]).parent
    if os.access(beside, os.W_OK):
        return beside / CACHE_FOLDER / "translation"
    return Path.home() / ".cache" / "attnkit" / "translation"


def _find(root: Path, data_id: str, fingerprint: str | None) -> Path | None:
    """A cache folder of the same data whose tokenizer has FINGERPRINT (a resumed run's tokenizer, trained here)."""
    if fingerprint is None or not root.is_dir():
        return None
    for manifest in root.glob(f"*/{MANIFEST}"):
        recorded = json.loads(manifest.read_text(encoding="utf-8"))
        if recorded.get("data_id") == data_id and recorded.get("tokenizer_fingerprint") == fingerprint:
            return manifest.parent
    return None


def _build(files: CorpusFiles, tokenizer: TokenizerSettings | SubwordTokenizer, folder: Path, key: dict,
           say: Say) -> None:
    """Write the cache folder in a temporary sibling, then rename it into place (atomically)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(folder.parent)
    building = folder.parent / f"{BUILDING}{folder.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}-{socket.gethostname()}"
    building.mkdir()
    try:
        if isinstance(tokenizer, TokenizerSettings):
            tokenizer = _train_tokenizer(files.reader("train"), tokenizer, say)
        tokenizer.save(building)
        dtype = np.uint16 if max(tokenizer.source_vocab_size, tokenizer.target_vocab_size) <= 1 << 16 else np.int32
        splits, languages = {}, (files.source_lang, files.target_lang)
        for split in files.paths:
            reader = files.reader(split)
            splits[split] = _encode_split(reader, tokenizer, building, split, dtype, say)
            languages = (reader.source_lang, reader.target_lang)
        manifest = {**key, "format": FORMAT_VERSION, "tokenizer_fingerprint": tokenizer.fingerprint(),
                    "dtype": np.dtype(dtype).name, "source_lang": languages[0], "target_lang": languages[1],
                    "splits": splits}
        (building / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        try:
            building.rename(folder)
        except OSError:  # another process prepared the same corpus meanwhile: keep theirs
            if not (folder / MANIFEST).is_file():
                raise
            shutil.rmtree(building, ignore_errors=True)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise


def remove_stale_builds(root: Path, now: float | None = None) -> list[Path]:
    """Remove the temporary folders under ROOT of builds that died: their process (on this machine) is gone, or
    nothing in them changed for `STALE_BUILD_SECONDS`. Returns the folders removed."""
    now = time.time() if now is None else now
    removed = []
    for building in root.glob(f"{BUILDING}*"):
        parts = building.name.split("-", 4)  # .building, cache folder, pid, random, host (older builds: no host)
        try:
            newest = max([building.stat().st_mtime] + [entry.stat().st_mtime for entry in os.scandir(building)])
        except OSError:  # being renamed or removed by its own process
            continue
        dead = len(parts) == 5 and parts[4] == socket.gethostname() and parts[2].isdigit() \
            and not _alive(int(parts[2]))
        if dead or now - newest > STALE_BUILD_SECONDS:
            shutil.rmtree(building, ignore_errors=True)
            removed.append(building)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        pass
    return True


def _train_tokenizer(reader: PairReader, settings: TokenizerSettings, say: Say) -> SubwordTokenizer:
    """BPE trained on at most `settings.sample_pairs` pairs of the training split, sampled evenly."""
    started = time.perf_counter()
    sample, total = reservoir_sample(reader, settings.sample_pairs)
    if not sample:
        raise DataError(f"{reader.report.source}: the train split has no usable sentence pairs")
    which = "every pair" if len(sample) == total else f"a random sample of {len(sample):,} of {total:,} pairs " \
        f"(at most {settings.sample_pairs:,}, as sentencepiece's input_sentence_size)"
    say(f"data: training the BPE tokenizer ({settings.vocab_size} tokens) on {which}")
    tokenizer = SubwordTokenizer.train([p.source for p in sample], [p.target for p in sample], settings.vocab_size,
                                       joint=settings.joint)
    say(f"data: tokenizer trained in {time.perf_counter() - started:.0f} s")
    return tokenizer


def reservoir_sample(pairs: Iterable[SentencePair], size: int, seed: int = 0) -> tuple[list[SentencePair], int]:
    """SIZE items drawn uniformly from PAIRS in one pass (Vitter 1985, algorithm R), and how many there were.

    With no more than SIZE items, all of them in their order.
    """
    rng = np.random.default_rng(seed)
    sample: list[SentencePair] = []
    seen = 0
    for chunk in _chunks(pairs, CHUNK_PAIRS):
        free = max(size - len(sample), 0)
        sample += chunk[:free]
        rest = chunk[free:]
        if rest:
            positions = seen + free + np.arange(len(rest))  # each item's index in the stream
            slots = (rng.random(len(rest)) * (positions + 1)).astype(np.int64)  # uniform in [0, index]
            for item in np.nonzero(slots < size)[0]:
                sample[slots[item]] = rest[item]
        seen += len(chunk)
    return sample, seen


def _encode_split(reader: PairReader, tokenizer: SubwordTokenizer, folder: Path, split: str, dtype: type,
                  say: Say) -> dict:
    """SPLIT's ids, offsets and lengths files (and for valid and test its texts), written chunk by chunk."""
    lengths: dict[str, list[np.ndarray]] = {"source": [], "target": []}
    started = last_said = time.perf_counter()
    count = 0
    with open(folder / f"{split}.source.ids", "wb") as source_file, \
            open(folder / f"{split}.target.ids", "wb") as target_file, \
            open(folder / f"{split}.pairs.jsonl", "w", encoding="utf-8") if split != "train" else _Discard() as texts, \
            ThreadPoolExecutor(max_workers=1) as encoder:
        pending: Future | None = None
        for chunk in _chunks(reader, CHUNK_PAIRS):  # reads the next chunk while the last one is encoded
            following = encoder.submit(_encode_chunk, tokenizer, chunk, dtype)
            if pending is not None:
                count += _write(pending.result(), source_file, target_file, lengths)
            pending = following
            for pair in chunk:
                texts.write(json.dumps([pair.source, pair.target], ensure_ascii=False) + "\n")
            if time.perf_counter() - last_said > PROGRESS_SECONDS:
                last_said = time.perf_counter()
                say(f"data: {split}: {count + len(chunk):,} pairs encoded "
                    f"({(count + len(chunk)) / (last_said - started):,.0f} pairs/s)")
        if pending is not None:
            count += _write(pending.result(), source_file, target_file, lengths)
    if count == 0:
        raise DataError(f"{reader.report.source}: the {split} split has no usable sentence pairs")
    for side, parts in lengths.items():
        side_lengths = np.concatenate(parts)  # (pairs,) int64
        np.save(folder / f"{split}.{side}.offsets.npy", np.concatenate([[0], np.cumsum(side_lengths)]))
        np.save(folder / f"{split}.{side}.lengths.npy", side_lengths.astype(length_type(int(side_lengths.max()))))
    say(f"data: {split}: {count:,} pairs encoded in {time.perf_counter() - started:.0f} s")
    return {"pairs": count, "source": reader.report.source, "summary": reader.report.summary()}


def _encode_chunk(tokenizer: SubwordTokenizer, chunk: list[SentencePair], dtype: type
                  ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Both sides' (flat ids, lengths) of CHUNK: the tokenizers' batch encoding, on every core."""
    sides: list[tuple[np.ndarray, np.ndarray]] = []
    for encoder, texts in ((tokenizer.source, [p.source for p in chunk]),
                           (tokenizer.target, [p.target for p in chunk])):
        ids = [encoding.ids for encoding in encoder.encode_batch_fast(texts)]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat: np.ndarray = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
        sides.append((flat.astype(dtype), lengths))
    return sides[0], sides[1]


def _write(encoded: tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]], source_file, target_file,
           lengths: dict[str, list[np.ndarray]]) -> int:
    for (flat, side_lengths), file, side in zip(encoded, (source_file, target_file), ("source", "target")):
        flat.tofile(file)
        lengths[side].append(side_lengths)
    return len(encoded[0][1])


class _Discard:
    """A text file that is not written (the training split's texts are not kept)."""

    def __enter__(self) -> _Discard:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def write(self, text: str) -> None:
        return None


def _chunks(items: Iterable[SentencePair], size: int) -> Iterator[list[SentencePair]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def _file_identity(path: Path) -> list:
    stat = path.stat()
    digest = hashlib.sha256()
    with path.open("rb") as file:
        digest.update(file.read(EDGE_BYTES))
        if stat.st_size > EDGE_BYTES:
            file.seek(max(stat.st_size - EDGE_BYTES, EDGE_BYTES))
            digest.update(file.read(EDGE_BYTES))
    return [str(path.resolve()), stat.st_size, stat.st_mtime_ns, digest.hexdigest()]


def _hash(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()
