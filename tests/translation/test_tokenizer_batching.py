"""BPE round-trips text and reloads; token-budget batches respect the budget and pad little."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from attnkit.errors import CheckpointError
from attnkit.translation.batching import (
    TokenBatches,
    _batch_ends,
    collate,
    make_examples,
    padding_fraction,
    token_batches,
)
from attnkit.translation.tokenizer import BOS_ID, EOS_ID, PAD_ID, SubwordTokenizer

SOURCES = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog", "the mat is red"] * 5
TARGETS = ["die Katze saß auf der Matte", "der Hund saß auf dem Stamm", "eine Katze und ein Hund",
           "die Matte ist rot"] * 5


@pytest.mark.parametrize("joint", [True, False])
def test_tokenizer_round_trip_and_reload(tmp_path, joint):
    tokenizer = SubwordTokenizer.train(SOURCES, TARGETS, vocab_size=80, joint=joint)
    ids = tokenizer.encode_target(TARGETS[:4])
    assert tokenizer.decode_target(ids) == TARGETS[:4]
    tokenizer.save(tmp_path)
    again = SubwordTokenizer.load(tmp_path)
    assert again.joint == joint
    assert again.encode_source(SOURCES[:4]) == tokenizer.encode_source(SOURCES[:4])
    assert [again.target.token_to_id(t) for t in ("<pad>", "<s>", "</s>")] == [PAD_ID, BOS_ID, EOS_ID]


def test_tokenizer_load_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no tokenizer.json"):
        SubwordTokenizer.load(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{broken", encoding="utf-8")
    with pytest.raises(CheckpointError, match="not a tokenizer file"):
        SubwordTokenizer.load(tmp_path)


def test_token_batches_respect_budget_and_cover_everything():
    rng = random.Random(0)
    lengths = [(rng.randint(1, 30), rng.randint(1, 30)) for _ in range(500)]
    batches = token_batches(lengths, max_tokens=200, seed=1)
    assert sorted(i for b in batches for i in b) == list(range(500))
    for batch in batches:
        assert len(batch) * max(max(lengths[i]) for i in batch) <= 200
    random_batches = [list(range(i, min(i + 10, 500))) for i in range(0, 500, 10)]
    assert padding_fraction(batches, lengths) < 0.5 * padding_fraction(random_batches, lengths)
    as_lists = [batch.tolist() for batch in batches]
    assert [batch.tolist() for batch in token_batches(lengths, 200, seed=1)] == as_lists
    assert [batch.tolist() for batch in token_batches(lengths, 200, seed=2)] != as_lists


def test_batches_of_a_large_corpus_are_ranges_of_one_order_sorted_by_length():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 120, size=(20_000, 2)).astype(np.uint8)  # a prepared corpus's small type
    batches = token_batches(lengths, max_tokens=1000, seed=3)
    assert isinstance(batches, TokenBatches) and len(batches.order) == 20_000
    covered = np.concatenate(list(batches))
    assert np.array_equal(np.sort(covered), np.arange(20_000))  # every pair exactly once
    longest = lengths.max(axis=1).astype(np.int64)
    sizes = [len(batch) * int(longest[batch].max()) for batch in batches]
    assert max(sizes) <= 1000 and np.mean(sizes) > 900  # within the budget, and nearly full
    assert all(np.ptp(longest[batch]) <= 1 for batch in batches[:50])  # one length (or two at a seam)
    assert all(batch.base is batches.order for batch in batches[:50])  # views of the one order array, not copies
    again = token_batches(lengths, max_tokens=1000, seed=3)
    assert np.array_equal(again.order, batches.order) and np.array_equal(again.starts, batches.starts)
    other = token_batches(lengths, max_tokens=1000, seed=4)  # another epoch: other ties, other batch order
    assert not np.array_equal(other.order, batches.order) and not np.array_equal(other.starts, batches.starts)
    share = batches[1::2]  # a process's share (`distributed.shard`)
    assert isinstance(share, TokenBatches) and len(share) == len(batches) // 2
    assert np.array_equal(share[2], batches[5])
    unshuffled = token_batches(lengths, max_tokens=1000, shuffle=False)
    assert np.all(np.diff(longest[unshuffled.order]) >= 0) and np.all(np.diff(unshuffled.starts) > 0)


def test_batch_ends_run_by_run_equal_the_greedy_cut_pair_by_pair():
    def greedy(longest: np.ndarray, max_tokens: int) -> list[int]:  # the definition: add pairs while they fit
        ends, start = [], 0
        while start < len(longest):
            count = 1
            while start + count < len(longest) and (count + 1) * int(longest[start + count]) <= max_tokens:
                count += 1
            start += count
            ends.append(start)
        return ends

    rng = np.random.default_rng(0)
    for _ in range(300):
        longest = np.sort(rng.integers(1, rng.integers(2, 60), rng.integers(0, 200)))  # with </s>: at least 1
        max_tokens = int(rng.integers(1, 200))
        assert _batch_ends(longest.astype(np.uint16), max_tokens).tolist() == greedy(longest, max_tokens)
    assert _batch_ends(np.array([3, 3, 5, 9, 9, 300]), 10).tolist() == [2, 3, 4, 5, 6]  # by hand: 3 * 5 > 10


def test_padding_fraction_by_hand():
    lengths = [(2, 4), (4, 4)]
    # source: 2 + 4 real of 8 padded; target: 8 real of 8 -> 2 pads of 16
    assert padding_fraction([[0, 1]], lengths) == pytest.approx(2 / 16)


def test_collate_shifts_target():
    examples, dropped = make_examples([[5, 6], [7]], [[8, 9, 10], [11]], max_length=10)
    assert dropped == 0
    batch = collate(examples)
    torch.testing.assert_close(batch.source, torch.tensor([[5, 6, EOS_ID], [7, EOS_ID, PAD_ID]]))
    torch.testing.assert_close(batch.target_input, torch.tensor([[BOS_ID, 8, 9, 10], [BOS_ID, 11, PAD_ID, PAD_ID]]))
    torch.testing.assert_close(batch.target_output, torch.tensor([[8, 9, 10, EOS_ID], [11, EOS_ID, PAD_ID, PAD_ID]]))
    assert batch.target_tokens == 6
    _, dropped = make_examples([[1] * 20], [[2]], max_length=10)
    assert dropped == 1
