"""Subword tokenization: byte-pair encoding (Sennrich et al. 2016) learned from the training data.

The paper encodes WMT English-German with a shared source-target BPE vocabulary of about 37000
tokens (Vaswani et al. 2017, section 5.1). Here the vocabulary is joint (one tokenizer for both
sides; the model can then share all its embeddings) or separate (one per side), trained with
Hugging Face `tokenizers`. Words are split at spaces with a sentencepiece-style marker, so
decoding restores the text exactly: what BLEU scores is the detokenized sentence.

Saved in the run folder as `tokenizer.json` (joint) or `source_tokenizer.json` +
`target_tokenizer.json` (separate), and reloaded with it. A run imported from a SentencePiece
model (Marian) loads a `SentencePieceTokenizer` instead (sentencepiece_tokenizer.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from attnkit.errors import CheckpointError

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK]  # ids 0, 1, 2, 3 in every vocabulary
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)
JOINT_FILE, SOURCE_FILE, TARGET_FILE = "tokenizer.json", "source_tokenizer.json", "target_tokenizer.json"
# BPE learns from at most this many pairs of a corpus, sampled evenly (sentencepiece's input_sentence_size, whose
# documentation suggests about a million sentences): merges and their order settle long before, and training time
# and memory then stop growing with the corpus.
TRAINING_SAMPLE_PAIRS = 1_000_000


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Learn BPE merges on `texts` until the vocabulary has `vocab_size` tokens (specials included)."""
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                  show_progress=False)  # a merge seen once teaches nothing
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


class SubwordTokenizer:
    """Source and target BPE tokenizers (the same object when the vocabulary is joint)."""

    def __init__(self, source: Tokenizer, target: Tokenizer) -> None:
        self.source, self.target = source, target

    @classmethod
    def train(cls, sources: Sequence[str], targets: Sequence[str], vocab_size: int,
              joint: bool = True) -> SubwordTokenizer:
        if joint:
            tokenizer = train_bpe(list(sources) + list(targets), vocab_size)
            return cls(tokenizer, tokenizer)
        return cls(train_bpe(sources, vocab_size), train_bpe(targets, vocab_size))

    @property
    def joint(self) -> bool:
        return self.source is self.target

    def fingerprint(self) -> str:
        """A hash of the vocabularies and merges: equal for a tokenizer and its saved-and-reloaded copy."""
        texts = [self.source.to_str()] + ([] if self.joint else [self.target.to_str()])
        return hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()

    @property
    def source_vocab_size(self) -> int:
        return self.source.get_vocab_size()

    @property
    def target_vocab_size(self) -> int:
        return self.target.get_vocab_size()

    def encode_source(self, texts: Sequence[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self.source.encode_batch(list(texts))]

    def encode_target(self, texts: Sequence[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self.target.encode_batch(list(texts))]

    def decode_target(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Token ids (specials dropped) -> detokenized text."""
        return self.target.decode_batch([list(sentence) for sentence in ids], skip_special_tokens=True)

    def save(self, folder: Path | str) -> None:
        folder = Path(folder)
        if self.joint:
            self.source.save(str(folder / JOINT_FILE))
        else:
            self.source.save(str(folder / SOURCE_FILE))
            self.target.save(str(folder / TARGET_FILE))

    @classmethod
    def load(cls, folder: Path | str) -> SubwordTokenizer:
        folder = Path(folder)
        from attnkit.translation import sentencepiece_tokenizer as spm  # imported models (attnkit.app.interop)
        if (folder / spm.VOCAB_FILE).is_file():
            # duck-typed: the same methods and vocabularies (.source, .target) as a SubwordTokenizer
            return spm.SentencePieceTokenizer.load(folder)  # type: ignore[return-value]
        if (folder / JOINT_FILE).is_file():
            tokenizer = _load(folder / JOINT_FILE)
            return cls(tokenizer, tokenizer)
        if (folder / SOURCE_FILE).is_file() and (folder / TARGET_FILE).is_file():
            return cls(_load(folder / SOURCE_FILE), _load(folder / TARGET_FILE))
        raise CheckpointError(f"{folder}: no {JOINT_FILE} (or {SOURCE_FILE} + {TARGET_FILE}); "
                              f"is this a translation run folder?")


def _load(path: Path) -> Tokenizer:
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises a bare Exception on malformed files
        raise CheckpointError(f"{path}: not a tokenizer file ({error})") from None
    if [tokenizer.token_to_id(token) for token in SPECIAL_TOKENS] != list(range(len(SPECIAL_TOKENS))):
        raise CheckpointError(f"{path}: special tokens {SPECIAL_TOKENS} are not ids 0..{len(SPECIAL_TOKENS) - 1}")
    return tokenizer
