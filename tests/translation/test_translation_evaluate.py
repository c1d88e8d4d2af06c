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


def test_length_ratio_is_bleus():
    assert_close(score(["a b"], ["a b c d"]).length_ratio, 0.5)
    assert_close(score(CLOSE, REFERENCES).length_ratio,
                 sacrebleu.corpus_bleu(CLOSE, [REFERENCES], tokenize="zh").sys_len / sum(
                     len(sacrebleu.tokenizers.tokenizer_zh.TokenizerZh()(r).split()) for r in REFERENCES))


def test_scores_by_length_bucket_are_the_scores_of_those_sentences():
    from attnkit.translation.evaluate import scores_by_length

    long = " ".join(f"w{i}" for i in range(45))
    references = ["one two", "one two three four five six seven", "a b c d e f g h", long]
    hypotheses = ["one two", "one two three four", "a b c d e f g x", long[:40]]
    buckets = scores_by_length(hypotheses, references)
    assert list(buckets) == ["1-5", "6-10", "41+"]  # in length order; no sentence of 11 to 40 tokens
    assert [b.sentences for b in buckets.values()] == [1, 2, 1]
    assert_close(buckets["6-10"].bleu, score(hypotheses[1:3], references[1:3]).bleu)
    assert_close(buckets["1-5"].chrf, 100.0)  # (its BLEU is 0: two tokens have no 3- or 4-grams)


def test_sentence_chrf_is_sacrebleus():
    from attnkit.translation.evaluate import sentence_chrf

    expected = [sacrebleu.sentence_chrf(h, [r]).score for h, r in zip(FAR, REFERENCES)]
    assert_close(sentence_chrf(FAR, REFERENCES), expected)
    assert sentence_chrf(["exactly this"], ["exactly this"]) == [100.0]
