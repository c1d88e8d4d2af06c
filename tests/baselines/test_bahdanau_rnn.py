"""The RNN encoder-decoder: it learns, its attention ignores padding, the shared decoding runs it,
and a checkpoint of the other architecture is refused."""

import dataclasses

import pytest
import torch
from torch.testing import assert_close

from attnkit.baselines import (
    BahdanauRNN,
    BahdanauRNNConfig,
    alignment,
    check_architecture,
    match_parameters,
    parameter_count,
)
from attnkit.errors import CheckpointError, ConfigError
from attnkit.storage import read_weights, save_weights
from attnkit.translation.batching import pad_ids
from attnkit.translation.decoding import beam_search, greedy_decode
from attnkit.translation.tokenizer import BOS_ID, EOS_ID, PAD_ID

VOCAB = 16
TINY = BahdanauRNNConfig(embedding_dim=24, hidden_size=32, attention_dim=20, dropout=0.0,
                         source_vocab_size=VOCAB, target_vocab_size=VOCAB)


def model(seed: int = 0, config: BahdanauRNNConfig = TINY) -> BahdanauRNN:
    torch.manual_seed(seed)
    return BahdanauRNN(config).eval()


def sources() -> torch.Tensor:
    return pad_ids([[5, 6, 7, 8, EOS_ID], [9, 10, EOS_ID], [11, EOS_ID]])  # (3, 5), padded at the end


def test_attention_rows_sum_to_one_and_padding_gets_exactly_zero():
    rnn, source = model(), sources()
    target_input = pad_ids([[BOS_ID, 4, 5, 6], [BOS_ID, 7], [BOS_ID, 8, 9]])
    weights = alignment(rnn, source, target_input)  # (batch, target, source)
    assert weights.shape == (3, 4, 5)
    assert_close(weights.sum(-1), torch.ones(3, 4))
    padding = (source == PAD_ID).unsqueeze(1).expand_as(weights)
    assert torch.equal(weights[padding], torch.zeros(int(padding.sum())))
    assert bool((weights[~padding] > 0).all())


def test_padding_does_not_change_a_sentence():
    rnn, source = model(), sources()
    target_input = torch.tensor([[BOS_ID, 4, 5]] * 3)
    batched = rnn(source, target_input)  # (3, 3, vocab)
    for row in range(3):
        alone = source[row:row + 1, :int((source[row] != PAD_ID).sum())]
        assert_close(rnn(alone, target_input[row:row + 1])[0], batched[row])


def test_cached_steps_equal_the_teacher_forced_forward():
    rnn, source = model(), sources()
    target_input = torch.tensor([[BOS_ID, 4, 5, 6, 7]] * 3)
    full = rnn(source, target_input)  # (batch, target, vocab)
    encoded = rnn.encode(source, source == PAD_ID)
    cache = rnn.start_cache(encoded)
    for length in range(1, 6):
        cached = rnn.decode_step(target_input[:, :length], encoded, cache)
        uncached = rnn.decode_step(target_input[:, :length], encoded, None)
        assert_close(cached, full[:, length - 1])
        assert_close(uncached, full[:, length - 1])


def test_greedy_cached_equals_uncached_and_beam_one_equals_greedy():
    rnn, source = model(seed=3), sources()
    cached = greedy_decode(rnn, source, use_cache=True, extra_length=6)
    assert cached == greedy_decode(rnn, source, use_cache=False, extra_length=6)
    assert [h.tokens for h in beam_search(rnn, source, beam_size=1, extra_length=6)] == cached
    assert len(beam_search(rnn, source, beam_size=4, extra_length=6)) == 3


class WithoutCache:
    """The same model through the protocol without its cache: every step recomputes the whole prefix."""

    def __init__(self, model: BahdanauRNN) -> None:
        self.model = model

    def encode(self, source, source_padding_mask):
        return self.model.encode(source, source_padding_mask)

    def start_cache(self, encoded):
        return None

    def decode_step(self, prefix, encoded, cache):
        return self.model.decode_step(prefix, encoded, None)


def test_beam_search_reorders_the_cache_correctly():
    rnn, source = model(seed=5), sources()
    cached = beam_search(rnn, source, beam_size=4, extra_length=6)
    uncached = beam_search(WithoutCache(rnn), source, beam_size=4, extra_length=6)
    assert [h.tokens for h in cached] == [h.tokens for h in uncached]
    assert_close(torch.tensor([h.score for h in cached]), torch.tensor([h.score for h in uncached]))


PAIRS = [([5, 6, 7], [7, 6, 5]), ([8, 9], [9, 8, 8]), ([10, 11, 12, 13], [13, 12]), ([5, 13], [4, 5, 13, 4]),
         ([14, 6, 9], [9, 14]), ([7], [7, 7, 7]), ([12, 8, 15, 10, 6], [6, 10, 15, 8, 12]), ([15, 4], [4])]


def test_overfits_a_handful_of_pairs():
    rnn = model(config=dataclasses.replace(TINY, hidden_size=48, attention_dim=32)).train()
    source = pad_ids([s + [EOS_ID] for s, _ in PAIRS])
    target_input = pad_ids([[BOS_ID] + t for _, t in PAIRS])
    target_output = pad_ids([t + [EOS_ID] for _, t in PAIRS])
    optimizer = torch.optim.Adam(rnn.parameters(), lr=0.02)
    for _ in range(60):  # exact after 10-20 steps (seeds 0-2); the margin keeps beam search certain too
        logits = rnn(source, target_input)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target_output.flatten(), ignore_index=PAD_ID)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    rnn.eval()
    expected = [t for _, t in PAIRS]
    assert greedy_decode(rnn, source, extra_length=4) == expected
    assert [h.tokens for h in beam_search(rnn, source, beam_size=3, extra_length=4)] == expected


def test_checkpoint_of_the_other_architecture_is_refused(tmp_path):
    from attnkit.translation.model import Seq2SeqConfig, Seq2SeqTransformer

    transformer = Seq2SeqTransformer(Seq2SeqConfig(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                                                   d_ff=32, source_vocab_size=VOCAB, target_vocab_size=VOCAB))
    rnn_path = save_weights(tmp_path / "rnn.safetensors", model().state_dict())
    transformer_path = save_weights(tmp_path / "transformer.safetensors", transformer.state_dict())
    with pytest.raises(CheckpointError,
                       match=r"rnn.safetensors holds the weights of an RNN .* but this model is a Transformer"):
        check_architecture(read_weights(rnn_path)[0], "transformer", str(rnn_path))
    with pytest.raises(CheckpointError, match=r"weights of a Transformer .* but this model is an RNN encoder-decoder"):
        check_architecture(read_weights(transformer_path)[0], "rnn", str(transformer_path))
    check_architecture(read_weights(rnn_path)[0], "rnn", str(rnn_path))  # the right one passes


def test_match_parameters_picks_the_closest_hidden_size():
    target = 250_000
    matched = match_parameters(target, dataclasses.replace(TINY, source_vocab_size=0, target_vocab_size=0))
    assert matched.attention_dim == matched.hidden_size
    count = parameter_count(matched)
    for other in (matched.hidden_size - 1, matched.hidden_size + 1):
        neighbour = dataclasses.replace(matched, hidden_size=other, attention_dim=other)
        assert abs(parameter_count(neighbour) - target) >= abs(count - target)
    assert abs(count - target) / target < 0.01
    built = BahdanauRNN(dataclasses.replace(matched, source_vocab_size=5, target_vocab_size=5))
    assert sum(p.numel() for p in built.parameters()) == count


def test_config_is_validated():
    with pytest.raises(ConfigError, match="dropout"):
        BahdanauRNNConfig(dropout=1.0)
    with pytest.raises(ConfigError, match="joint vocabulary"):
        BahdanauRNNConfig(source_vocab_size=10, target_vocab_size=12)
    with pytest.raises(ConfigError, match="vocabulary sizes must be set"):
        BahdanauRNN(BahdanauRNNConfig())
