"""BLEU tokenized for the target language, as sacreBLEU does for its own test sets; chrF; exact match."""

from __future__ import annotations

import importlib.util

import pytest
import sacrebleu
from torch.testing import assert_close

from attnkit.translation.evaluate import bleu_tokenizer, score, script_language

REFERENCES = ["我们明天早上去北京开会。", "这本书非常有意思，我已经读了两遍。", "天气预报说今天下午会下雨。",
              "他每天骑自行车去上班。", "请把窗户关上，外面太冷了。"]
CLOSE = ["我们明天早上去上海开会。", "这本书非常有意思，我读了两遍。", "天气预报说今天下午会下雨。",
         "他每天坐公交车去上班。", "请把门关上，外面太冷了。"]
FAR = ["明天我们去开会。", "这本书很好。", "今天会下雨。", "他去上班。", "外面冷。"]


def test_chinese_bleu_is_sacrebleus_zh_score_and_moves_with_quality():
    scores = [score(hypotheses, REFERENCES, "zh") for hypotheses in (REFERENCES, CLOSE, FAR)]
    for hypotheses, result in zip((REFERENCES, CLOSE, FAR), scores):
        expected = sacrebleu.corpus_bleu(hypotheses, [REFERENCES], tokenize="zh").score
        assert_close(result.bleu, expected, rtol=0, atol=1e-9)
        assert "tok:zh" in result.bleu_signature
    assert_close(scores[0].bleu, 100.0)
    assert scores[0].bleu > scores[1].bleu > scores[2].bleu > 0
    # with 13a each sentence is one "word": the close translations would score as badly as far ones
    assert sacrebleu.corpus_bleu(CLOSE, [REFERENCES], tokenize="13a").score < 0.2 * scores[1].bleu


def test_the_language_is_read_from_the_references_script_when_not_given():
    assert_close(score(CLOSE, REFERENCES).bleu, score(CLOSE, REFERENCES, "zh").bleu)
    assert "tok:13a" in score(["zwei und drei"], ["zwei drei"]).bleu_signature
    assert "tok:13a" in score(CLOSE, REFERENCES, "de").bleu_signature  # a given language wins


@pytest.mark.parametrize("texts, language", [
    (REFERENCES, "zh"), (["今日は学校に行きます。"], "ja"), (["나는 학교에 갑니다."], "ko"),
    (["Guten Morgen, 北京!"], None), (["", "123"], None)])
def test_script_language(texts, language):
    assert script_language(texts) == language


@pytest.mark.parametrize("language, tokenizer", [
    ("zh", "zh"), ("zh-CN", "zh"), ("zh_Hant", "zh"), ("zho", "zh"), ("de", "13a"), ("en-US", "13a"), (None, "13a")])
def test_bleu_tokenizer(language, tokenizer):
    assert bleu_tokenizer(language) == tokenizer


@pytest.mark.skipif(importlib.util.find_spec("MeCab") is not None, reason="MeCab is installed")
def test_japanese_without_mecab_scores_characters_and_says_so():
    with pytest.warns(UserWarning, match="ja-mecab.*char"):
        result = score(["今日は学校に行く。"], ["今日は学校に行きます。"], "ja")
    assert "tok:char" in result.bleu_signature
    assert_close(result.bleu, sacrebleu.corpus_bleu(["今日は学校に行く。"], [["今日は学校に行きます。"]],
                                                    tokenize="char").score)
