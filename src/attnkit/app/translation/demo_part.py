"""The translation part of `attnkit demo`: the `tiny` Transformer trained on `numbers:de` for a few
minutes, its test scores, sample translations, and where its encoder-decoder attention looks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

DEMO_MINUTES = 3.0
SAMPLES = ["seventy-one", "four hundred and twenty-three", "nine thousand, eight hundred and fifty-six"]


def translation_demo(out: Path, minutes: float = DEMO_MINUTES) -> None:
    from attnkit.app.translation.commands import score_corpus
    from attnkit.app.translation.recipe import train_run
    from attnkit.training import Budget
    from attnkit.translation.config import preset
    from attnkit.translation.numbers import numbers_splits
    from attnkit.translation.translator import Translator

    run_path = out / "run"
    _remove_previous_demo_run(run_path)
    splits = numbers_splits()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"training the tiny Transformer on numbers:de (English -> German number words) for {minutes:g} minutes")
    train_run(preset("tiny"), splits, run_path, Budget(minutes=minutes), device, progress=False)
    translator = Translator.from_run(run_path)
    scores = score_corpus(translator, splits["test"], beam_size=4)
    print(f"test, {scores['sentences']} unseen numbers, beam 4: exact match {scores['exact_match']:.1f}%, "
          f"chrF {scores['chrf']:.1f}, BLEU {scores['bleu']:.1f} (one-word German compounds: BLEU's 4-grams "
          f"rarely apply; exact match and chrF say more)")
    for source, translation in zip(SAMPLES, translator.translate(SAMPLES, beam_size=4)):
        print(f"  {source} -> {translation}")
    print(f"  attention map: {_plot_cross_attention(translator, SAMPLES[-1], out / 'cross_attention.png')}")
    print(f"  run folder: {run_path} (curves.png, metrics.jsonl); try: attnkit translate {run_path} \"twelve\"")


def _remove_previous_demo_run(run_path: Path) -> None:
    config = run_path / "config.json"
    if config.is_file() and json.loads(config.read_text(encoding="utf-8")).get("kind") == "translation":
        shutil.rmtree(run_path)


def _plot_cross_attention(translator, sentence: str, path: Path) -> Path:
    """The last decoder layer's attention over the source, averaged over heads, for one translation."""
    from attnkit.app.visualize.attention_maps import plot_attention
    from attnkit.nn import capture_attention
    from attnkit.translation.tokenizer import BOS_ID, EOS_ID

    tokenizer, model = translator.tokenizer, translator.model
    source_ids = tokenizer.encode_source([sentence])[0] + [EOS_ID]
    target_ids = tokenizer.encode_target(translator.translate([sentence], beam_size=1))[0]
    device = next(model.parameters()).device
    source = torch.tensor([source_ids], device=device)
    target_input = torch.tensor([[BOS_ID] + target_ids], device=device)
    with torch.no_grad(), capture_attention(model) as weights:
        model(source, target_input)
    last = max(name for name in weights if name.endswith("multihead_attn"))
    matrix = weights[last][0].mean(dim=0).cpu()  # (target positions, source positions)
    rows = [tokenizer.target.id_to_token(i) for i in target_ids] + ["</s>"]
    columns = [tokenizer.source.id_to_token(i) for i in source_ids[:-1]] + ["</s>"]
    return plot_attention(matrix, path, rows, columns, title=f"encoder-decoder attention: {sentence}")
