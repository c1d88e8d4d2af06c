"""SentencePiece tokenization (Kudo and Richardson 2018) as Marian's opus-mt models use it: a
SentencePiece model per side segments the text into pieces, and a vocabulary maps each piece to an
id (a piece it lacks is <unk>). The vocabulary is one shared by both sides, or one per side
(MarianTokenizer's separate_vocabs).

The ids follow attnkit's convention (tokenizer.py: <pad> 0, <s> 1, </s> 2, <unk> 3, then the
pieces), so batching, decoding and the losses work unchanged; `attnkit.app.interop.marian_import`
orders an imported vocabulary this way. A leading language token (`>>fr<<`, multi-target models)
is kept whole, as MarianTokenizer does.

Saved in the run folder as source.spm, target.spm and sentencepiece_vocab.json (the pieces in
id order; the source side's when separate), plus sentencepiece_target_vocab.json when the target
has its own; `SubwordTokenizer.load` returns this tokenizer when it finds them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import sentencepiece

from attnkit.errors import CheckpointError
from attnkit.translation.tokenizer import SPECIAL_TOKENS, UNK_ID

VOCAB_FILE, SOURCE_MODEL, TARGET_MODEL = "sentencepiece_vocab.json", "source.spm", "target.spm"
TARGET_VOCAB_FILE = "sentencepiece_target_vocab.json"
LANGUAGE_CODE = re.compile(r">>.+<<")
WORD_MARKER = "\u2581"  # SentencePiece's "▁": a space before the piece


class PieceVocabulary:
    """One side's view of the shared vocabulary (the part of tokenizers.Tokenizer the project uses)."""

    def __init__(self, pieces: Sequence[str]) -> None:
        self.pieces = list(pieces)

    def id_to_token(self, index: int) -> str | None:
        return self.pieces[index] if 0 <= index < len(self.pieces) else None

    def get_vocab_size(self) -> int:
        return len(self.pieces)


class SentencePieceTokenizer:
    """Source and target SentencePiece models over the vocabulary `pieces` (attnkit id order), or over
    `pieces` (source) and `target_pieces` (target) when the sides have their own."""

    def __init__(self, source_model: bytes, target_model: bytes, pieces: Sequence[str],
                 target_pieces: Sequence[str] | None = None) -> None:
        for vocabulary in (pieces, pieces if target_pieces is None else target_pieces):
            if len(vocabulary) < len(SPECIAL_TOKENS) or len(set(vocabulary)) != len(vocabulary):
                raise CheckpointError("a SentencePiece vocabulary needs the 4 special tokens first and unique pieces")
        self.source_model, self.target_model, self.pieces = source_model, target_model, list(pieces)
        self.target_pieces = self.pieces if target_pieces is None else list(target_pieces)
        self._source_spm = sentencepiece.SentencePieceProcessor(model_proto=source_model)
        self._target_spm = sentencepiece.SentencePieceProcessor(model_proto=target_model)
        self._source_ids = {piece: index for index, piece in enumerate(self.pieces)}
        self._target_ids = {piece: index for index, piece in enumerate(self.target_pieces)}
        self.source = PieceVocabulary(self.pieces)
        self.target = self.source if target_pieces is None else PieceVocabulary(self.target_pieces)

    @property
    def joint(self) -> bool:
        """One vocabulary for both sides (the model may share all its embeddings)."""
        return self.target is self.source

    @property
    def source_vocab_size(self) -> int:
        return len(self.pieces)

    @property
    def target_vocab_size(self) -> int:
        return len(self.target_pieces)

    def encode_source(self, texts: Sequence[str]) -> list[list[int]]:
        return [self._encode(self._source_spm, self._source_ids, text) for text in texts]

    def encode_target(self, texts: Sequence[str]) -> list[list[int]]:
        return [self._encode(self._target_spm, self._target_ids, text) for text in texts]

    def _encode(self, model: sentencepiece.SentencePieceProcessor, ids: dict[str, int], text: str) -> list[int]:
        """Pieces -> ids, no </s> (the batching adds it); a leading `>>xx<<` language token stays one piece."""
        match = LANGUAGE_CODE.match(text)
        code = [match.group(0)] if match else []
        pieces = code + model.encode(LANGUAGE_CODE.sub("", text), out_type=str)
        return [ids.get(piece, UNK_ID) for piece in pieces]

    def decode_target(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Ids (specials dropped) -> text, by the target SentencePiece model; a word marker it leaves (on a
        source-side piece of the shared vocabulary) becomes a space, as MarianTokenizer does."""
        special = len(SPECIAL_TOKENS)
        return [self._target_spm.decode_pieces([self.target_pieces[i] for i in sentence if i >= special])
                .replace(WORD_MARKER, " ").strip() for sentence in ids]

    def save(self, folder: Path | str) -> None:
        folder = Path(folder)
        (folder / SOURCE_MODEL).write_bytes(self.source_model)
        (folder / TARGET_MODEL).write_bytes(self.target_model)
        (folder / VOCAB_FILE).write_text(json.dumps(self.pieces, ensure_ascii=False, indent=0) + "\n")
        if not self.joint:
            (folder / TARGET_VOCAB_FILE).write_text(json.dumps(self.target_pieces, ensure_ascii=False, indent=0) + "\n")

    @classmethod
    def load(cls, folder: Path | str) -> SentencePieceTokenizer:
        folder = Path(folder)
        for name in (SOURCE_MODEL, TARGET_MODEL, VOCAB_FILE):
            if not (folder / name).is_file():
                raise CheckpointError(f"{folder}: no {name} (a SentencePiece tokenizer needs {SOURCE_MODEL}, "
                                      f"{TARGET_MODEL} and {VOCAB_FILE})")
        try:
            pieces = json.loads((folder / VOCAB_FILE).read_text())
            target = folder / TARGET_VOCAB_FILE
            target_pieces = json.loads(target.read_text()) if target.is_file() else None
            return cls((folder / SOURCE_MODEL).read_bytes(), (folder / TARGET_MODEL).read_bytes(), pieces,
                       target_pieces)
        except (json.JSONDecodeError, RuntimeError, TypeError) as error:
            raise CheckpointError(f"{folder}: unreadable SentencePiece tokenizer ({error})") from None
