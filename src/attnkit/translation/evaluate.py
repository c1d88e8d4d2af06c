"""Scoring translations: BLEU and chrF with sacreBLEU on detokenized text, and exact match.

"We report BLEU" (Vaswani et al. 2017, section 6.1) - here always sacreBLEU's (Post 2018) on the
detokenized output against the raw references, with its signature, so scores are comparable
across tokenizations; chrF (Popovic 2015) scores character n-grams, which suits compounds like
German number words; exact match is the share of sentences translated exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF


@dataclass(frozen=True)
class Scores:
    bleu: float
    chrf: float
    exact_match: float  # percent, like BLEU and chrF
    sentences: int
    bleu_signature: str
    chrf_signature: str

    def as_dict(self) -> dict[str, float | int | str]:
        return {"bleu": self.bleu, "chrf": self.chrf, "exact_match": self.exact_match, "sentences": self.sentences,
                "bleu_signature": self.bleu_signature, "chrf_signature": self.chrf_signature}


def score(hypotheses: Sequence[str], references: Sequence[str]) -> Scores:
    """Corpus BLEU, chrF and exact match (all in percent) of `hypotheses` against one reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not references:
        raise ValueError("nothing to score: no sentences")
    bleu, chrf = BLEU(), CHRF()
    bleu_score = bleu.corpus_score(list(hypotheses), [list(references)])
    chrf_score = chrf.corpus_score(list(hypotheses), [list(references)])
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references)) / len(references)
    return Scores(bleu_score.score, chrf_score.score, 100.0 * exact, len(references),
                  str(bleu.get_signature()), str(chrf.get_signature()))
