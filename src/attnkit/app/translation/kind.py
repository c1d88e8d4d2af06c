"""Translation runs as the application sees them: one `TaskKind` (see `attnkit.app.tasks`)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnkit.app.tasks import TaskKind
from attnkit.errors import ConfigError

REPORT_SENTENCES = 3  # validation sentences the run report shows translations for


def load(run: Path, weights: str = "best", device: Any = "cpu") -> Any:
    from attnkit.translation.translator import Translator

    return Translator.from_run(run, weights, device)


def export_onnx(translator: Any, out: Path) -> dict:
    from attnkit.app.export.translator_graphs import export_translator

    return export_translator(translator, out)


def export_hf(folder: Any, tensors: dict, out: Path) -> Any:
    from attnkit.app.interop.hf_export import export_marian

    return export_marian(folder, tensors, out)


def attention(translator: Any, out: Path, texts: Sequence[str], images: Sequence[Path], threshold: float) -> list[Path]:
    """Each sentence's translation and its encoder-decoder attention: the mean map and every layer's heads."""
    from attnkit.app.visualize.attention_maps import save_translation_maps
    from attnkit.app.visualize.capture import sentence_attention

    if images or not texts:
        raise ConfigError('a translation run: give sentences with --text "..."')
    paths = []
    for index, (text, translation) in enumerate(zip(texts, translator.translate(list(texts))), start=1):
        print(f"{text} -> {translation}")
        found = sentence_attention(translator.model, translator.tokenizer, text, translation,
                                   translator.config.max_length)
        paths += save_translation_maps(found, out, stem=f"sentence{index}" if len(texts) > 1 else "")
    return paths


def report_samples(task: Any) -> Any:
    """The first validation pairs of the training recipe's task (`TranslationTask`)."""
    from attnkit.app.visualize.report import Samples

    return Samples([{"source": p.source, "reference": p.target} for p in task.valid.pairs[:REPORT_SENTENCES]])


def report_predictions(run: Any, samples: Any, assets: Path) -> str:
    """The report's sample predictions: beam-search translations and where their cross-attention looked."""
    from attnkit.app.visualize.attention_maps import plot_attention, plot_heads
    from attnkit.app.visualize.capture import sentence_attention
    from attnkit.app.visualize.report import image_tag

    translator = load(run.path)
    sources = [sample["source"] for sample in samples.texts]
    parts = ["<h2>Sample predictions</h2>",
             f"<p>Beam search (beam {translator.config.beam_size}) with the best weights; the maps show the "
             "encoder-decoder attention while the model produced its own translation: rows are the target "
             "tokens it produced, columns the source tokens.</p>"]
    for index, (sample, translation) in enumerate(zip(samples.texts, translator.translate(sources)), start=1):
        found = sentence_attention(translator.model, translator.tokenizer, sample["source"], translation,
                                   translator.config.max_length)
        mean = plot_attention(found.weights.alignment()[0], assets / f"sentence{index}_alignment.png",
                              found.target_tokens, found.source_tokens,
                              title=f"sentence {index}: cross-attention, mean of layers and heads")
        last = plot_heads(found.weights.cross[-1][0], assets / f"sentence{index}_cross_last_layer.png",
                          found.target_tokens, found.source_tokens,
                          title=f"sentence {index}: cross-attention of the last layer, per head")
        reference = f"<br>reference: {html.escape(sample['reference'])}" if sample.get("reference") else ""
        parts.append(f"<h3>Sentence {index}</h3>\n<p>source: {html.escape(sample['source'])}<br>"
                     f"translation: <b>{html.escape(translation)}</b>{reference}</p>\n"
                     f"{image_tag(mean, 'alignment')}\n{image_tag(last, 'per head')}")
    return "\n".join(parts)


def demo(out: Path) -> None:
    """The tiny Transformer trained on the built-in `numbers:de` for a few minutes; test scores and samples."""
    from attnkit.app.translation.demo_part import translation_demo

    translation_demo(out)


TRANSLATION = TaskKind(name="translation", commands="attnkit.app.translation.commands", load=load,
                       export_onnx=export_onnx, export_hf=export_hf, attention=attention,
                       report_samples=report_samples, report_predictions=report_predictions, demo=demo)
