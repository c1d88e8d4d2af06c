"""SentencePiece tokenization over one shared vocabulary or one per side (an imported Marian model's):
saved, reloaded, and the same ids and text either way."""

from __future__ import annotations

import io

import pytest

from attnkit.errors import CheckpointError
from attnkit.translation.sentencepiece_tokenizer import TARGET_VOCAB_FILE, SentencePieceTokenizer
from attnkit.translation.tokenizer import SPECIAL_TOKENS, UNK_ID, SubwordTokenizer

sentencepiece = pytest.importorskip("sentencepiece")
SOURCES = ["one two three", "four five six", "seven eight nine", "ten eleven twelve"] * 20
TARGETS = ["eins zwei drei", "vier fuenf sechs", "sieben acht neun", "zehn elf zwoelf"] * 20


def train(lines: list[str]) -> bytes:
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=30,
                                             model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
                                             bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2)
    return model.getvalue()


def pieces(model: bytes) -> list[str]:
    processor = sentencepiece.SentencePieceProcessor(model_proto=model)
    return SPECIAL_TOKENS + [processor.id_to_piece(i) for i in range(1, processor.get_piece_size())]


@pytest.mark.parametrize("separate", [False, True])
def test_round_trip_and_reload(tmp_path, separate):
    source_model, target_model = train(SOURCES), train(TARGETS)
    source, target = pieces(source_model), pieces(target_model)
    joint = source + [p for p in target if p not in source]
    tokenizer = SentencePieceTokenizer(source_model, target_model, source if separate else joint,
                                       target if separate else None)
    assert tokenizer.joint is not separate
    ids = tokenizer.encode_target(TARGETS[:4])
    assert tokenizer.decode_target(ids) == TARGETS[:4]
    assert UNK_ID not in sum(tokenizer.encode_source(SOURCES[:4]), [])
    tokenizer.save(tmp_path)
    assert (tmp_path / TARGET_VOCAB_FILE).is_file() is separate
    again = SubwordTokenizer.load(tmp_path)
    assert isinstance(again, SentencePieceTokenizer) and again.joint is not separate
    assert again.encode_source(SOURCES[:4]) == tokenizer.encode_source(SOURCES[:4])
    assert again.encode_target(TARGETS[:4]) == ids
    assert (again.source_vocab_size, again.target_vocab_size) == \
        ((len(source), len(target)) if separate else (len(joint), len(joint)))


def test_a_target_vocabulary_without_the_specials_is_refused():
    model = train(SOURCES)
    with pytest.raises(CheckpointError, match="special tokens"):
        SentencePieceTokenizer(model, model, pieces(model), ["a", "b"])
