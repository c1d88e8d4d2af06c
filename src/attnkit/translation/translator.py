"""Using a trained model: `Translator.from_run(RUN).translate(["seventy-one"], beam_size=4)`.

`translate_texts` batches sentences by length (like training, so little padding), decodes each
batch with beam search (or greedy for beam size 1, the same result, faster) and puts the
translations back in the input order.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from attnkit.baselines.bahdanau_rnn import check_architecture
from attnkit.errors import CheckpointError, ConfigError
from attnkit.nn.onednn_linear import linear, onednn_linears
from attnkit.translation.batching import pad_ids, token_batches
from attnkit.translation.config import TranslationConfig, TranslationModel, build_model
from attnkit.translation.decoding import ATTNKIT_RULES, DecodingConfig, EncoderDecoder, beam_search, greedy_decode
from attnkit.translation.model import Seq2SeqTransformer
from attnkit.translation.tokenizer import EOS_ID, SubwordTokenizer

RUN_KIND = "translation"
WEIGHT_CHOICES = ("best", "last", "average", "ema")


@torch.no_grad()
def translate_texts(model: TranslationModel | EncoderDecoder, tokenizer: SubwordTokenizer, texts: Sequence[str],
                    beam_size: int = 4, alpha: float = 1.0, max_tokens: int = 4000, max_length: int = 256,
                    rules: DecodingConfig = ATTNKIT_RULES) -> list[str]:
    """Translate `texts` in length-sorted batches of about `max_tokens` source tokens; input order kept.

    MODEL: a PyTorch model, or any other implementation of the decoding protocol (the ONNX Runtime
    graphs). Sources are cut to `max_length` tokens with </s>; RULES are the searches' (decoding.DecodingConfig)."""
    module = model if isinstance(model, torch.nn.Module) else None
    device = next(module.parameters()).device if module is not None else torch.device("cpu")
    was_training = module is not None and module.training
    if module is not None:
        module.eval()
    sources = [ids[:max_length - 1] + [EOS_ID] for ids in tokenizer.encode_source(texts)]
    outputs: list[list[int]] = [[] for _ in sources]
    budget = max(max_tokens // max(beam_size, 1), max_length)
    for batch in token_batches([(len(s), len(s)) for s in sources], budget, shuffle=False):
        source = pad_ids([sources[i] for i in batch]).to(device)  # (batch, source_length)
        if beam_size == 1:
            decoded = greedy_decode(model, source, rules=rules)
        else:
            decoded = [h.tokens for h in beam_search(model, source, beam_size=beam_size, alpha=alpha, rules=rules)]
        for index, tokens in zip(batch, decoded):
            outputs[index] = tokens
    if module is not None:
        module.train(was_training)
    return tokenizer.decode_target(outputs)


class Translator:
    """A trained translation model and its tokenizer, loaded from a run folder."""

    def __init__(self, model: TranslationModel, tokenizer: SubwordTokenizer, config: TranslationConfig) -> None:
        self.model, self.tokenizer, self.config = model.eval(), tokenizer, config

    @classmethod
    def from_run(cls, run: Path | str, weights: str = "best", device: str | torch.device | None = None,
                 quantize: str | None = None) -> Translator:
        """Load RUN's config.json, tokenizer and weights ("best", "last" or "average"); quantize="int8": its
        Linear layers int8 (`attnkit.nn.quantize`, CPU only), the tied output projection too (`quantized`)."""
        from attnkit.nn.quantize import QUANTIZATIONS
        from attnkit.storage import RunFolder, load_weights, read_weights

        if quantize not in (None, *QUANTIZATIONS):
            raise ConfigError(f"quantize: {quantize!r} is not one of {', '.join(QUANTIZATIONS)}")

        folder = RunFolder.open(Path(run), RUN_KIND)
        config = TranslationConfig.from_dict(folder.config)
        tokenizer = SubwordTokenizer.load(folder.path)
        model = build_model(config)
        path = _weights_path(folder, weights)
        check_architecture(read_weights(path)[0], config.arch, str(path))  # names both if they differ
        load_weights(path, model)
        if device is None:
            device = "cuda" if torch.cuda.is_available() and quantize is None else "cpu"
        device = torch.device(device)
        if quantize is not None:
            if device.type != "cpu":
                raise ConfigError(f"quantize={quantize!r} runs on the CPU, not {device}")
            model = quantized(model)
        else:  # on the CPU the Linears and the tied output projection run oneDNN's product where it pays
            onednn_linears(model)
            if isinstance(model, Seq2SeqTransformer):
                model.product = linear
        return cls(model.to(device), tokenizer, config)

    def translate(self, texts: Sequence[str], beam_size: int | None = None, alpha: float | None = None) -> list[str]:
        """One translation per input sentence (beam search; beam_size=1 is greedy), by the run's decoding rules
        (an imported model's: its generation config); beam_size and alpha default to the run's."""
        if isinstance(texts, str):
            texts = [texts]
        beam_size = self.config.beam_size if beam_size is None else beam_size
        alpha = self.config.length_penalty if alpha is None else alpha
        return translate_texts(self.model, self.tokenizer, list(texts), beam_size, alpha,
                               max_length=self.config.max_length, rules=self.config.decoding)


def quantized(model: TranslationModel) -> TranslationModel:
    """MODEL with its Linear layers and attention's packed projections int8 (`attnkit.nn.quantize`) and, for the
    Transformer, an int8 copy of the output projection, which is tied to the embedding and so read as a tensor:
    at a 58k vocabulary it is more multiply-adds than the six decoder layers together (BENCHMARKS.md, "Inference
    engines")."""
    from attnkit.nn.quantize import int8_attention, int8_linear, quantize_int8

    model = int8_attention(quantize_int8(model))
    if isinstance(model, Seq2SeqTransformer):
        bias = model.output_bias if model.config.output_bias else None
        model.output_projection = int8_linear(model.target_embedding.weight, bias)
    return model


def _weights_path(folder, weights: str) -> Path:
    paths = {"best": folder.best_weights, "last": folder.last_weights, "average": folder.average_weights,
             "ema": folder.ema_weights}
    if weights not in paths:
        raise CheckpointError(f"unknown weights '{weights}' (choose from {', '.join(WEIGHT_CHOICES)})")
    path = paths[weights]
    if weights == "best" and not path.is_file():
        path = folder.last_weights
    if not path.is_file():
        raise CheckpointError(f"{folder.path} has no {path.relative_to(folder.path)}; has it trained yet?")
    return path
