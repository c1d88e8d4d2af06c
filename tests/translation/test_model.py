"""The Seq2SeqTransformer: tied embeddings, cached decoding equals uncached, and it learns."""

from __future__ import annotations

import pytest
import torch

from attnkit.errors import ConfigError
from attnkit.translation.batching import collate, make_examples
from attnkit.translation.decoding import beam_search, greedy_decode
from attnkit.translation.losses import label_smoothed_cross_entropy
from attnkit.translation.model import Seq2SeqConfig, Seq2SeqTransformer
from attnkit.translation.schedule import inverse_sqrt_lr, inverse_sqrt_schedule


def tiny(positional_encoding: str = "sinusoidal", vocab: int = 24, dropout: float = 0.0) -> Seq2SeqTransformer:
    config = Seq2SeqConfig(d_model=32, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, d_ff=64,
                           dropout=dropout, positional_encoding=positional_encoding, source_vocab_size=vocab,
                           target_vocab_size=vocab)
    return Seq2SeqTransformer(config)


def test_embeddings_are_shared_and_tied():
    model = tiny()
    assert model.source_embedding is model.target_embedding
    ids = torch.tensor([[5, 6, 2]])
    logits = model(ids, ids)
    assert logits.shape == (1, 3, 24)
    names = [name for name, _ in model.named_parameters()]
    assert sum("embedding" in name for name in names) == 1  # one matrix: source, target and pre-softmax
    with pytest.raises(ConfigError, match="joint vocabulary"):
        Seq2SeqConfig(source_vocab_size=10, target_vocab_size=12)


@pytest.mark.parametrize("positional_encoding", ["sinusoidal", "learned", "rotary"])
def test_cached_decoding_equals_uncached(positional_encoding):
    torch.manual_seed(0)
    model = tiny(positional_encoding).eval()
    source = torch.randint(4, 24, (3, 7))
    source[1, 4:] = 0  # padding
    source[:, -1] = 2
    prefix = torch.randint(4, 24, (3, 6))
    encoded = model.encode(source, source == 0)
    cache = model.start_cache(encoded)
    for length in range(1, 7):
        cached = model.decode_step(prefix[:, :length], encoded, cache)
        uncached = model.decode_step(prefix[:, :length], encoded, None)
        torch.testing.assert_close(cached, uncached, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(model(source, prefix)[:, -1], uncached, atol=1e-5, rtol=1e-4)
    assert greedy_decode(model, source, use_cache=True, extra_length=8) == \
        greedy_decode(model, source, use_cache=False, extra_length=8)


def test_schedule_is_equation_3():
    assert inverse_sqrt_lr(100, 512, 4000) == pytest.approx(512 ** -0.5 * 100 * 4000 ** -1.5)
    assert inverse_sqrt_lr(10000, 512, 4000) == pytest.approx(512 ** -0.5 * 10000 ** -0.5)
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])
    scheduler = inverse_sqrt_schedule(optimizer, 512, 4000, scale=2.0)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2.0 * inverse_sqrt_lr(1, 512, 4000))
    optimizer.step()
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2.0 * inverse_sqrt_lr(2, 512, 4000))


def test_label_smoothing_against_torch():
    torch.manual_seed(0)
    logits, targets = torch.randn(2, 5, 11), torch.randint(1, 11, (2, 5))
    targets[1, 3:] = 0
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=0,
                                                 label_smoothing=0.1, reduction="sum")
    torch.testing.assert_close(label_smoothed_cross_entropy(logits, targets, 0.1), expected)


def test_tiny_model_overfits_a_few_dozen_pairs():
    """Learning works: reversing 32 short sequences is learned to exact match in 150 steps (~3 s)."""
    torch.manual_seed(0)
    sources = [torch.randint(4, 16, (int(torch.randint(2, 6, ())),)).tolist() for _ in range(32)]
    targets = [list(reversed(s)) for s in sources]
    examples, _ = make_examples(sources, targets, max_length=16)
    batch = collate(examples)
    model = tiny(vocab=16)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = inverse_sqrt_schedule(optimizer, 32, warmup_steps=50, scale=0.3)
    for _ in range(150):
        loss = label_smoothed_cross_entropy(model(batch.source, batch.target_input), batch.target_output, 0.1)
        optimizer.zero_grad()
        (loss / batch.target_tokens).backward()
        optimizer.step()
        scheduler.step()
    model.eval()
    assert greedy_decode(model, batch.source) == targets
    assert [h.tokens for h in beam_search(model, batch.source, beam_size=3)] == targets
