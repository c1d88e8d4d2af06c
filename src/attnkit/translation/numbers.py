"""`numbers`: the built-in corpus, English number words translated into another language's.

Generated with `num2words`, so nothing is downloaded: "seventy-one" -> German "einundsiebzig",
French "soixante et onze". German says the units before the tens, so the attention of a trained
model has to cross over, which makes its alignment visible.

Train, valid and test hold disjoint numbers (a fixed shuffle of 1..max_number), so the test split
measures whether the model learned the rules, not whether it remembers the pairs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from attnkit.errors import ConfigError, DataError
from attnkit.translation.data import Corpus, ReadReport, SentencePair, write_tsv

DEFAULT_LANGUAGE = "de"


@dataclass(frozen=True)
class NumbersSpec:
    """Which numbers go where; the defaults give about 9000 training pairs."""

    language: str = DEFAULT_LANGUAGE
    max_number: int = 9999
    valid_size: int = 500
    test_size: int = 500
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_number < self.valid_size + self.test_size + 10:
            raise ConfigError(f"numbers: max_number ({self.max_number}) leaves too few training numbers "
                              f"after {self.valid_size} valid and {self.test_size} test")
        _check_language(self.language)


def parse_name(name: str) -> NumbersSpec | None:
    """`numbers` or `numbers:LANG` -> a spec; any other name -> None (it is a path)."""
    if name != "numbers" and not name.startswith("numbers:"):
        return None
    language = name.partition(":")[2] or DEFAULT_LANGUAGE
    return NumbersSpec(language=language)


def numbers_splits(spec: NumbersSpec | None = None) -> dict[str, Corpus]:
    """{"train", "valid", "test"} -> pairs (English words, target-language words), disjoint numbers."""
    from num2words import num2words

    spec = spec or NumbersSpec()
    numbers = list(range(1, spec.max_number + 1))
    random.Random(spec.seed).shuffle(numbers)
    cut = {"test": numbers[:spec.test_size], "valid": numbers[spec.test_size:spec.test_size + spec.valid_size],
           "train": numbers[spec.test_size + spec.valid_size:]}
    splits = {}
    for split, chosen in cut.items():
        pairs = [SentencePair(num2words(n, lang="en"), num2words(n, lang=spec.language)) for n in sorted(chosen)]
        report = ReadReport(f"numbers:{spec.language} {split}", pairs=len(pairs))
        splits[split] = Corpus(pairs, report, "en", spec.language)
    return splits


def write_numbers(out: Path | str, spec: NumbersSpec | None = None) -> dict[str, Path]:
    """Write train.tsv, valid.tsv and test.tsv under OUT; returns the paths."""
    out = Path(out)
    return {split: write_tsv(corpus.pairs, out / f"{split}.tsv") for split, corpus in numbers_splits(spec).items()}


def _check_language(language: str) -> None:
    from num2words import CONVERTER_CLASSES

    if language not in CONVERTER_CLASSES:
        known = ", ".join(sorted(CONVERTER_CLASSES))
        raise DataError(f"numbers: unknown language '{language}' (num2words knows: {known})")
