"""Peers' models built here with random weights (never downloaded): a small MarianMTModel with
SentencePiece models trained on a few hundred lines, and a small DetrForObjectDetection."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
sentencepiece = pytest.importorskip("sentencepiece")
num2words = pytest.importorskip("num2words").num2words


EOS_BIAS = 3.0  # </s> likely enough that some outputs end before the length limit


def number_lines(language: str, count: int = 300) -> list[str]:
    return [num2words(n, lang=language) for n in range(1, count + 1)]


def train_spm(lines: list[str], vocab_size: int) -> bytes:
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
                                             model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
                                             bos_id=-1, eos_id=-1, unk_id=0, minloglevel=2)
    return model.getvalue()


def write_marian_folder(folder: Path, seed: int = 0) -> Path:
    """An opus-mt-like MarianMTModel (swish, scaled embeddings, bad_words_ids=[[pad]], final logits bias)."""
    torch.manual_seed(seed)
    source_model, target_model = train_spm(number_lines("en"), 60), train_spm(number_lines("de"), 60)
    pieces: list[str] = []
    for model in (source_model, target_model):
        processor = sentencepiece.SentencePieceProcessor(model_proto=model)
        pieces += [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in pieces:
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = pad = len(vocab)
    config = transformers.MarianConfig(
        vocab_size=len(vocab), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
        activation_function="swish", scale_embedding=True, pad_token_id=pad, decoder_start_token_id=pad,
        eos_token_id=0, forced_eos_token_id=0, bad_words_ids=[[pad]], num_beams=4)
    model = transformers.MarianMTModel(config).eval()
    model.generation_config.bad_words_ids, model.generation_config.num_beams = [[pad]], 4
    with torch.no_grad():  # sublayers that matter next to the residual, so outputs depend on the input
        for name, parameter in model.named_parameters():
            if parameter.dim() == 2 and "embed" not in name and "shared" not in name:
                parameter.normal_(0, parameter.size(1) ** -0.5)
        model.model.shared.weight.normal_(0, 0.3)
        model.final_logits_bias.normal_(0, 0.5)
        model.final_logits_bias[0, 0] = EOS_BIAS
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    (folder / "source.spm").write_bytes(source_model)
    (folder / "target.spm").write_bytes(target_model)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "MarianTokenizer"}))
    return folder


@pytest.fixture(scope="session")
def marian_folder(tmp_path_factory) -> Path:
    return write_marian_folder(tmp_path_factory.mktemp("marian") / "opus-mt-en-de-tiny")
