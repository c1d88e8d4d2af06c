"""Beam search on a trained run: BLEU and length under each peer's scoring and stopping rules, and sentences/s.

    python benchmarks/beam_search.py RUN --data FOLDER [--target-lang zh] [--sentences 300] [--rounds 3]

RUN: a translation run folder; FOLDER: its corpus (test.* is translated). Every arm is attnkit's
beam search (beam 4) on the same weights and batches; only the rules differ:
  * GNMT's length penalty ((5 + |Y|) / 6)^alpha with alpha 0.6, a sentence over once 4 hypotheses ended
    (tensor2tensor's convention for the paper's "alpha = 0.6");
  * |Y|^1.0 and over once 4 ended: CTranslate2's defaults (length_penalty 1, patience 1);
  * |Y|^1.0 with transformers' early_stopping False heuristic: `generate`'s defaults (the rules
    under which attnkit's search gives generate's outputs token for token, tests/app/interop);
  * |Y|^0.6: Marian's `--normalize 0.6`.
|Y| counts </s>. Prints a markdown table (BLEU tokenized for the target language, chrF, output length
against the reference's, seconds) and the sentences/s of each arm, timed in alternating rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from attnkit.translation.data import load_splits
from attnkit.translation.decoding import DecodingConfig
from attnkit.translation.evaluate import score
from attnkit.translation.translator import Translator, translate_texts

ARMS = (("GNMT ((5 + |Y|) / 6)^0.6, over at 4 ended", 0.6, DecodingConfig("gnmt", True)),
        ("|Y|^1.0, over at 4 ended (CTranslate2's defaults)", 1.0, DecodingConfig("power", True)),
        ("|Y|^1.0, early_stopping False (generate's defaults)", 1.0, DecodingConfig("power", False)),
        ("|Y|^0.6, over at 4 ended (Marian's normalize 0.6)", 0.6, DecodingConfig("power", True)))


def cell(text: str) -> str:
    return text.replace("|", "\\|")  # |Y| inside a markdown table cell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--data", type=Path, required=True, help="the corpus folder; its test split is translated")
    parser.add_argument("--sentences", type=int, default=300, help="the first N test sentences")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (arms alternate within each)")
    parser.add_argument("--target-lang", default=None, help="BLEU's tokenization (zh, ja, ...) for a TSV corpus")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    translator = Translator.from_run(args.run, device="cpu")
    test = load_splits(args.data, target_lang=args.target_lang, needed=("test",))["test"]
    pairs = test.pairs[:args.sentences]
    sources, references = [p.source for p in pairs], [p.target for p in pairs]

    def translate(alpha: float, rules: DecodingConfig) -> list[str]:
        return translate_texts(translator.model, translator.tokenizer, sources, beam_size=4, alpha=alpha,
                               max_length=translator.config.max_length, rules=rules)

    print(f"\n{len(sources)} test sentences, beam 4, {args.threads} threads, {args.run}\n")
    print("| rules | BLEU | chrF | output/reference length (characters) | outputs unlike the first arm's |")
    print("|---|---|---|---|---|")
    first: list[str] | None = None
    for name, alpha, rules in ARMS:
        outputs = translate(alpha, rules)
        first = outputs if first is None else first
        scores = score(outputs, references, test.target_lang)
        ratio = sum(map(len, outputs)) / sum(map(len, references))
        changed = sum(a != b for a, b in zip(outputs, first))
        print(f"| {cell(name)} | {scores.bleu:.2f} | {scores.chrf:.2f} | {ratio:.3f} | {changed} |", flush=True)
    seconds: dict[str, list[float]] = {name: [] for name, _, _ in ARMS}
    for round_ in range(args.rounds):
        for name, alpha, rules in ARMS[::1 if round_ % 2 == 0 else -1]:
            started = time.perf_counter()
            translate(alpha, rules)
            seconds[name].append(time.perf_counter() - started)
    print("\n| rules | seconds (median) | sentences/s |\n|---|---|---|")
    for name, times in seconds.items():
        median = statistics.median(times)
        print(f"| {cell(name)} | {median:.2f} | {len(sources) / median:.1f} |")


if __name__ == "__main__":
    main()
