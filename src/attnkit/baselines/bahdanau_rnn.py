"""RNNsearch, the RNN encoder-decoder with attention of Bahdanau et al. 2015, "Neural Machine Translation
by Jointly Learning to Align and Translate" (section 3, appendix A.2): the model the source article
names as the first use of attention in NLP, and the baseline the Transformer is measured against.

    encoder   h_j = [h->_j ; h<-_j]            a bidirectional GRU over the source embeddings (section 3.2)
    start     s_0 = tanh(W_s h<-_1)            from the backward RNN's first state (appendix A.2.2)
    attention c_i = sum_j alpha_ij h_j         additive attention of s_{i-1} over all h_j (Eq. 5-6)
    readout   t_i = maxout(U_o s_{i-1} + V_o E y_{i-1} + C_o c_i)   the deep output, pool size 2
              p(y_i | y_<i, x) = softmax(W_o t_i)
    update    s_i = GRU(s_{i-1}, [E y_{i-1} ; c_i])

Differences from the paper, to share the Transformer's recipe: W_o is the target embedding matrix
(tied, as in Vaswani et al. 2017, section 3.4), so the maxout size is the embedding size; with a
joint vocabulary the source embedding is that matrix too; dropout is applied to the embeddings and
to t_i. The paper's sizes are m = 620 (embedding), n = n' = 1000 (hidden, alignment), l = 500.

The model implements the decoding protocol of `attnkit.translation.decoding` (encode, start_cache,
decode_step) and the translation task's `forward(source, target_input) -> logits`, so the same
training loop, greedy and beam search, evaluation and Translator run it. Its cache is the decoder
state s_{i-1}: one decoding step costs the same at every position. Attention weights are captured
per step as (batch, target, source), the same way as the Transformer's: `capture_alignment`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnkit.errors import CheckpointError, ConfigError
from attnkit.nn.additive_attention import AdditiveAttention
from attnkit.nn.dropout import Dropout

PAD_ID = 0  # the padding token's id, as attnkit's tokenizers number it (<pad>, <s>, </s>, <unk>)

ARCH = "rnn"
ARCH_NAMES = {"rnn": "an RNN encoder-decoder with additive attention (--arch rnn)",
              "transformer": "a Transformer (--arch transformer)"}
_WEIGHT_PREFIXES = {"rnn": "decoder.cell.", "transformer": "transformer."}  # a key only that architecture has


@dataclass(frozen=True)
class BahdanauRNNConfig:
    """Model size; the defaults are the paper's RNNsearch (appendix A.2). Vocabulary sizes come from the tokenizer."""

    embedding_dim: int = 620   # m
    hidden_size: int = 1000    # n: each direction of the encoder, and the decoder
    attention_dim: int = 1000  # n': the alignment model's hidden layer
    dropout: float = 0.1
    share_embeddings: bool = True  # source embedding = target embedding (needs a joint vocabulary)
    source_vocab_size: int = 0
    target_vocab_size: int = 0

    def __post_init__(self) -> None:
        if min(self.embedding_dim, self.hidden_size, self.attention_dim) < 1:
            raise ConfigError(f"embedding_dim, hidden_size and attention_dim must be at least 1, got "
                              f"{self.embedding_dim}, {self.hidden_size}, {self.attention_dim}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.share_embeddings and self.source_vocab_size != self.target_vocab_size:
            raise ConfigError("share_embeddings needs one joint vocabulary (source and target sizes differ)")

    @property
    def d_model(self) -> int:
        """The width the learning-rate schedule (Vaswani et al. 2017, Eq. 3) is scaled by: the embedding size,
        which a matched config shares with its Transformer, so that both follow the same learning-rate curve."""
        return self.embedding_dim


@dataclass
class RNNEncodedSource:
    """The encoder's output for a batch: what every decoding step attends to."""

    states: Tensor         # h_j: (batch, source_length, 2 hidden)
    keys: Tensor           # U_a h_j, pre-computed: (batch, source_length, attention_dim)
    padding_mask: Tensor   # (batch, source_length), True at padding
    initial_state: Tensor  # s_0: (batch, hidden)

    def select(self, rows: Tensor) -> RNNEncodedSource:
        return RNNEncodedSource(*(t.index_select(0, rows) for t in (self.states, self.keys, self.padding_mask,
                                                                     self.initial_state)))


@dataclass
class RNNDecoderCache:
    """The decoder's state between steps: s_{i-1} and how many target tokens it has read."""

    state: Tensor  # (batch, hidden)
    length: int = 0

    def reorder(self, rows: Tensor) -> None:
        """Keep batch rows `rows` (beam search: the surviving hypotheses), in that order."""
        self.state = self.state.index_select(0, rows)


class AttentionDecoder(nn.Module):
    """The decoder's recurrence (appendix A.2.2): attend with s_{i-1}, then update
    s_i = GRU(s_{i-1}, [E y_{i-1}; c_i])."""

    def __init__(self, embedding_dim: int, hidden_size: int, attention_dim: int) -> None:
        super().__init__()
        self.attention = AdditiveAttention(hidden_size, 2 * hidden_size, attention_dim)
        self.cell = nn.GRUCell(embedding_dim + 2 * hidden_size, hidden_size)

    def forward(self, embedded: Tensor, encoded: RNNEncodedSource,
                state: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """embedded: E y_{i-1} for each step, (batch, steps, embedding_dim); state: s before the first step.

        Returns the states s_{i-1} each step read (batch, steps, hidden), the contexts c_i
        (batch, steps, 2 hidden), the attention weights (batch, steps, source_length) and the last s_i.
        """
        states, contexts, weights = [], [], []
        for step in range(embedded.size(1)):  # the recurrence: one position after the other
            context, alpha = self.attention(state.unsqueeze(1), encoded.states, encoded.padding_mask,
                                            projected_keys=encoded.keys)  # (batch, 1, 2 hidden), (batch, 1, source)
            states.append(state)
            contexts.append(context.squeeze(1))
            weights.append(alpha.squeeze(1))
            state = self.cell(torch.cat([embedded[:, step], context.squeeze(1)], dim=-1), state)  # s_i: (batch, hidden)
        return torch.stack(states, 1), torch.stack(contexts, 1), torch.stack(weights, 1), state


class BahdanauRNN(nn.Module):
    """Bidirectional GRU encoder, attention decoder with a maxout readout, tied output projection."""

    arch = ARCH

    def __init__(self, config: BahdanauRNNConfig) -> None:
        super().__init__()
        if config.source_vocab_size < 5 or config.target_vocab_size < 5:
            raise ConfigError("the vocabulary sizes must be set (from the tokenizer) before building the model")
        self.config, m, n = config, config.embedding_dim, config.hidden_size
        self.target_embedding = _embedding(config.target_vocab_size, m)
        self.source_embedding = (self.target_embedding if config.share_embeddings
                                 else _embedding(config.source_vocab_size, m))
        self.encoder = nn.GRU(m, n, batch_first=True, bidirectional=True)
        self.init_state = nn.Linear(n, n)  # W_s
        self.decoder = AttentionDecoder(m, n, config.attention_dim)
        self.readout = nn.Linear(n + m + 2 * n, 2 * m)  # [U_o V_o C_o] on [s_{i-1}; E y_{i-1}; c_i]
        self.dropout = Dropout(config.dropout)

    def forward(self, source: Tensor, target_input: Tensor) -> Tensor:
        """source: (batch, source_length), target_input: (batch, target_length) ids
        -> logits (batch, target_length, vocab)."""
        encoded = self.encode(source, source == PAD_ID)
        logits, _, _ = self._decode(target_input, encoded, encoded.initial_state)
        return logits

    def encode(self, source: Tensor, source_padding_mask: Tensor) -> RNNEncodedSource:
        """Run the bidirectional GRU over each sentence's real tokens (padding must come last)."""
        x = self.dropout(self.source_embedding(source))  # (batch, source_length, embedding_dim)
        lengths = (~source_padding_mask).sum(dim=1).clamp(min=1).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        output, final = self.encoder(packed)  # final: (2 directions, batch, hidden)
        # states: (batch, source_length, 2 hidden)
        states, _ = pad_packed_sequence(output, batch_first=True, total_length=source.size(1))
        initial_state = self.init_state(final[1]).tanh()  # s_0 = tanh(W_s h<-_1): (batch, hidden)
        keys = self.decoder.attention.project_keys(states)  # (batch, source_length, attention_dim)
        return RNNEncodedSource(states, keys, source_padding_mask, initial_state)

    def start_cache(self, encoded: RNNEncodedSource) -> RNNDecoderCache:
        return RNNDecoderCache(encoded.initial_state)

    def decode_step(self, prefix: Tensor, encoded: RNNEncodedSource, cache: RNNDecoderCache | None) -> Tensor:
        """Next-token logits (batch, vocab). With a cache only the tokens it has not read yet are run."""
        if cache is None:
            logits, _, _ = self._decode(prefix, encoded, encoded.initial_state)
            return logits[:, -1]
        logits, _, cache.state = self._decode(prefix[:, cache.length:], encoded, cache.state)
        cache.length = prefix.size(1)
        return logits[:, -1]

    def _decode(self, tokens: Tensor, encoded: RNNEncodedSource, state: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(logits (batch, steps, vocab), attention weights (batch, steps, source_length), the last state)."""
        embedded = self.dropout(self.target_embedding(tokens))  # E y_{i-1}: (batch, steps, embedding_dim)
        states, contexts, weights, state = self.decoder(embedded, encoded, state)
        readout = self.readout(torch.cat([states, embedded, contexts], dim=-1))  # (batch, steps, 2 embedding_dim)
        t = readout.unflatten(-1, (self.config.embedding_dim, 2)).amax(dim=-1)  # maxout: (batch, steps, embedding_dim)
        return self.dropout(t) @ self.target_embedding.weight.t(), weights, state  # W_o = E: (batch, steps, vocab)


def _embedding(vocab_size: int, dim: int) -> nn.Embedding:
    embedding = nn.Embedding(vocab_size, dim, padding_idx=PAD_ID)
    nn.init.normal_(embedding.weight, std=dim ** -0.5)  # unit-norm rows; the tied readout starts near uniform
    with torch.no_grad():
        embedding.weight[PAD_ID].zero_()
    return embedding


@contextmanager
def capture_alignment(model: nn.Module) -> Iterator[dict[str, Tensor]]:
    """Record the attention weights of every `AttentionDecoder` in `model` during the `with` block.

    Like `attnkit.nn.capture_attention` for the Transformer: yields a dict filled as the model runs,
    the decoder's name ("decoder") -> its weights of the last call, (batch, 1 head, target, source),
    detached. Run the model on (source, <s> + translation) to see the alignment of a whole translation.
    """
    captured: dict[str, Tensor] = {}
    handles = [module.register_forward_hook(_recorder(captured, name))
               for name, module in model.named_modules() if isinstance(module, AttentionDecoder)]
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def _recorder(captured: dict[str, Tensor], name: str):
    def record(module: nn.Module, args: tuple, output: tuple[Tensor, ...]) -> None:
        captured[name] = output[2].detach().unsqueeze(1)  # (batch, 1, target, source)
    return record


@torch.no_grad()
def alignment(model: BahdanauRNN, source: Tensor, target_input: Tensor) -> Tensor:
    """alpha_ij for a teacher-forced target: (batch, target_length, source_length), rows summing to one."""
    with capture_alignment(model) as captured:
        model(source, target_input)
    return captured["decoder"].squeeze(1)


def parameter_count(config: BahdanauRNNConfig) -> int:
    """Parameters of the model `config` builds (tied embeddings counted once), without allocating them."""
    config = _with_vocab(config)
    with torch.device("meta"):
        return sum(p.numel() for p in BahdanauRNN(config).parameters())


def match_parameters(parameters: int, base: BahdanauRNNConfig) -> BahdanauRNNConfig:
    """`base` with the hidden size (and the alignment size n' = n, as in the paper) whose parameter count is
    closest to `parameters`; the embedding size and vocabularies stay as they are."""
    def sized(hidden: int) -> BahdanauRNNConfig:
        return dataclasses.replace(base, hidden_size=hidden, attention_dim=hidden)

    low, high = 1, 1
    while parameter_count(sized(high)) < parameters:
        low, high = high, 2 * high
    while high - low > 1:  # the count grows with the hidden size: bisect for the first size at or over it
        middle = (low + high) // 2
        low, high = (middle, high) if parameter_count(sized(middle)) < parameters else (low, middle)
    return min((sized(low), sized(high)), key=lambda c: abs(parameter_count(c) - parameters))


def match_transformer(transformer: Any, parameters: int) -> BahdanauRNNConfig:
    """The RNN with PARAMETERS parameters (those of the translation Transformer `transformer`, a
    `Seq2SeqConfig`): the same embedding size, dropout and embedding sharing, the hidden size chosen to match."""
    vocab = max(transformer.source_vocab_size, transformer.target_vocab_size, 5)
    base = BahdanauRNNConfig(embedding_dim=transformer.d_model, dropout=transformer.dropout,
                             share_embeddings=transformer.share_embeddings, source_vocab_size=vocab,
                             target_vocab_size=vocab)
    matched = match_parameters(parameters, base)
    return dataclasses.replace(matched, source_vocab_size=transformer.source_vocab_size,
                               target_vocab_size=transformer.target_vocab_size)


def _with_vocab(config: BahdanauRNNConfig) -> BahdanauRNNConfig:
    if config.source_vocab_size >= 5 and config.target_vocab_size >= 5:
        return config
    vocab = max(config.source_vocab_size, config.target_vocab_size, 5)  # no vocabulary yet: count a token-less one
    return dataclasses.replace(config, source_vocab_size=vocab, target_vocab_size=vocab)


def weights_architecture(tensors: Mapping[str, Tensor]) -> str | None:
    """Which translation model saved `tensors`, by their names: "rnn", "transformer", or None if neither."""
    for arch, prefix in _WEIGHT_PREFIXES.items():
        if any(name.startswith(prefix) for name in tensors):
            return arch
    return None


def check_architecture(tensors: Mapping[str, Tensor], arch: str, source: str) -> None:
    """CheckpointError naming both architectures when `tensors` were saved by the other one than `arch`."""
    found = weights_architecture(tensors)
    if found is not None and found != arch:
        raise CheckpointError(f"{source} holds the weights of {ARCH_NAMES[found]}, but this model is "
                              f"{ARCH_NAMES.get(arch, arch)}; load it with a run of the same architecture")
