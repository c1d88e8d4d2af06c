"""`OrtTranslator`: the exported translator run by ONNX Runtime, generating incrementally.

`OrtSeq2Seq` implements the decoding protocol of `attnkit.translation.decoding` (encode,
start_cache, decode_step) over the two graphs, so greedy and beam search are the same code as
for the PyTorch model; each step feeds the previous step's present keys and values back as past.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnkit.app.export.backends import ort_session
from attnkit.app.export.int8 import graph_file
from attnkit.app.export.onnx_export import DECODER_FILE, ENCODER_FILE, read_manifest
from attnkit.translation.config import TranslationConfig
from attnkit.translation.tokenizer import SubwordTokenizer
from attnkit.translation.translator import translate_texts


@dataclass
class OrtEncoded:
    padding_mask: np.ndarray  # (batch, source) bool
    cross_keys: np.ndarray  # (layers, batch, heads, source, head_dim)
    cross_values: np.ndarray

    def select(self, rows: Tensor) -> OrtEncoded:
        index = rows.cpu().numpy()
        return OrtEncoded(self.padding_mask[index], self.cross_keys[:, index], self.cross_values[:, index])


@dataclass
class OrtCache:
    keys: np.ndarray  # (layers, batch, heads, length, head_dim)
    values: np.ndarray

    @property
    def length(self) -> int:
        return self.keys.shape[3]

    def reorder(self, rows: Tensor) -> None:
        index = rows.cpu().numpy()
        self.keys, self.values = self.keys[:, index], self.values[:, index]


class OrtSeq2Seq:
    """The encoder and decoder-step graphs behind the `EncoderDecoder` protocol."""

    def __init__(self, folder: Path, manifest: dict, threads: int | None = None, quantize: str | None = None) -> None:
        self.encoder, self.decoder = (ort_session(graph_file(folder, manifest, name, quantize), threads)
                                      for name in (ENCODER_FILE, DECODER_FILE))
        self.shape = (manifest["layers"], manifest["heads"], manifest["head_dim"])

    def encode(self, source: Tensor, source_padding_mask: Tensor) -> OrtEncoded:
        mask = source_padding_mask.cpu().numpy()
        keys, values = self.encoder.run(None, {"source": source.cpu().numpy(), "source_padding_mask": mask})
        return OrtEncoded(mask, keys, values)

    def start_cache(self, encoded: OrtEncoded) -> OrtCache:
        layers, heads, head_dim = self.shape
        empty = np.zeros((layers, encoded.padding_mask.shape[0], heads, 0, head_dim), dtype=np.float32)
        return OrtCache(empty, empty.copy())

    def decode_step(self, prefix: Tensor, encoded: OrtEncoded, cache: OrtCache | None) -> Tensor:
        """Next-token logits (batch, vocab); without a cache the prefix is run step by step from scratch."""
        if cache is None:
            cache = self.start_cache(encoded)
            for position in range(prefix.size(1) - 1):
                self._step(prefix[:, position:position + 1], encoded, cache)
        return self._step(prefix[:, cache.length:cache.length + 1], encoded, cache)

    def _step(self, token: Tensor, encoded: OrtEncoded, cache: OrtCache) -> Tensor:
        logits, cache.keys, cache.values = self.decoder.run(None, {
            "token": token.cpu().numpy(), "position": np.array([cache.length], dtype=np.int64),
            "source_padding_mask": encoded.padding_mask, "cross_keys": encoded.cross_keys,
            "cross_values": encoded.cross_values, "past_keys": cache.keys, "past_values": cache.values})
        return torch.from_numpy(logits)  # (batch, vocab)


class OrtTranslator:
    """An export folder's translator: its tokenizer and the two graphs; `translate` as `Translator.translate`."""

    def __init__(self, folder: Path | str, threads: int | None = None, quantize: str | None = None) -> None:
        """QUANTIZE="int8": the graphs' int8 twins (`int8.py`; written into FOLDER on first use)."""
        folder = Path(folder)
        manifest = read_manifest(folder, "translation")
        self.config = TranslationConfig.from_dict(manifest["config"])
        self.tokenizer = SubwordTokenizer.load(folder)
        self.model = OrtSeq2Seq(folder, manifest, threads, quantize)

    def translate(self, texts: Sequence[str], beam_size: int | None = None, alpha: float | None = None) -> list[str]:
        """One translation per sentence, as `Translator.translate` gives it (the same `translate_texts`, the same
        decoding rules), with the graphs run by ONNX Runtime; beam_size 1 is greedy."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        beam_size = self.config.beam_size if beam_size is None else beam_size
        alpha = self.config.length_penalty if alpha is None else alpha
        return translate_texts(self.model, self.tokenizer, texts, beam_size, alpha, max_length=self.config.max_length,
                               rules=self.config.decoding)
