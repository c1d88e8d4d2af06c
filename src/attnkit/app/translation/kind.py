"""Translation runs as the application sees them: one `TaskKind` (see `attnkit.app.tasks`)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnkit.app.tasks import TaskKind
from attnkit.errors import ConfigError

REPORT_SENTENCES = 3  # validation sentences the run report shows translations for
DIAGNOSED_SENTENCES = 200  # validation sentences the report scores by length and ranks by chrF
WORST_SENTENCES = 5


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

    pairs = task.valid.pairs
    return Samples([{"source": p.source, "reference": p.target} for p in pairs[:REPORT_SENTENCES]],
                   evaluation={"sources": [p.source for p in pairs[:DIAGNOSED_SENTENCES]],
                               "references": [p.target for p in pairs[:DIAGNOSED_SENTENCES]],
                               "target_lang": task.config.target_lang or task.valid.target_lang})


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
    if samples.evaluation.get("sources"):
        parts.append(report_diagnostics(translator, samples.evaluation))
    return "\n".join(parts)


def report_diagnostics(translator: Any, split: dict[str, Any]) -> str:
    """Where the validation BLEU goes: length ratio, scores per reference-length bucket, the worst sentences
    by chrF (the same beam and weights as the samples)."""
    from attnkit.app.visualize.report import table
    from attnkit.translation.evaluate import score, scores_by_length, sentence_chrf

    sources, references, language = split["sources"], split["references"], split.get("target_lang")
    hypotheses = translator.translate(list(sources))
    overall = score(hypotheses, references, language)
    buckets = [{"reference tokens": name, "sentences": s.sentences, "BLEU": s.bleu, "chrF": s.chrf,
                "length ratio": s.length_ratio}
               for name, s in scores_by_length(hypotheses, references, language).items()]
    chrf = sentence_chrf(hypotheses, references)
    worst = sorted(range(len(chrf)), key=lambda i: chrf[i])[:WORST_SENTENCES]
    rows = [{"chrF": chrf[i], "source": sources[i], "translation": hypotheses[i], "reference": references[i]}
            for i in worst]
    return (f"<h2>Validation diagnostics</h2>\n<p>The first {len(sources)} validation sentences: BLEU "
            f"{overall.bleu:.2f}, chrF {overall.chrf:.2f}, length ratio {overall.length_ratio:.3f} (translations "
            f"over references in BLEU's tokens; below 1, BLEU's brevity penalty applies). sacreBLEU: "
            f"{html.escape(overall.bleu_signature)}</p>\n<h3>By reference length</h3>\n{table(buckets)}\n"
            f"<h3>The {len(rows)} worst by sentence chrF</h3>\n{table(rows)}")


def demo(out: Path) -> None:
    """The tiny Transformer trained on the built-in `numbers:de` for a few minutes; test scores and samples."""
    from attnkit.app.translation.demo_part import translation_demo

    translation_demo(out)


TRANSLATION = TaskKind(name="translation", commands="attnkit.app.translation.commands", load=load,
                       export_onnx=export_onnx, export_hf=export_hf, attention=attention,
                       report_samples=report_samples, report_predictions=report_predictions, demo=demo)
