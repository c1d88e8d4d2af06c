"""The encoder-decoder Transformer (Vaswani et al. 2017, section 3.1, Figure 1).

The encoder maps the source to a sequence of representations, the memory; the decoder produces
the target from it one position at a time, attending to its own earlier outputs (masked
self-attention) and to the memory (encoder-decoder attention). Embeddings, positional encodings
and the output softmax belong to the model that uses this module (translation, detection).

`Transformer` is a drop-in for torch.nn.Transformer: same arguments, masks, state-dict keys
(`encoder.layers.N.*`, `encoder.norm`, `decoder.layers.N.*`, `decoder.norm`) and error types.
`encode` and `decode` split the forward for step-wise decoding with a `DecoderCache`. `capture_attention`
records attention weights for visualisation without touching the normal path.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from attnkit.nn.attention import causal_mask
from attnkit.nn.decoder import DecoderCache, TransformerDecoder, TransformerDecoderLayer
from attnkit.nn.encoder import TransformerEncoder, TransformerEncoderLayer, check_heads
from attnkit.nn.errors import InputError, ShapeError
from attnkit.nn.feed_forward import Activation
from attnkit.nn.multi_head_attention import MultiHeadAttention
from attnkit.nn.positional_encoding.rotary import RotaryEmbedding


class Transformer(nn.Module):
    """Encoder-decoder; the defaults are the paper's base model (Table 3). A drop-in for torch.nn.Transformer."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                 dim_feedforward: int = 2048, dropout: float = 0.1, activation: Activation = "relu",
                 custom_encoder: nn.Module | None = None, custom_decoder: nn.Module | None = None,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None, rotary: RotaryEmbedding | None = None) -> None:
        super().__init__()
        check_heads(d_model, nhead)
        layer = {"d_model": d_model, "nhead": nhead, "dim_feedforward": dim_feedforward, "dropout": dropout,
                 "activation": activation, "layer_norm_eps": layer_norm_eps, "batch_first": batch_first,
                 "norm_first": norm_first, "bias": bias, "device": device, "dtype": dtype, "rotary": rotary}
        norm = {"eps": layer_norm_eps, "bias": bias, "device": device, "dtype": dtype}
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(**layer), num_encoder_layers, nn.LayerNorm(d_model, **norm))
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(**layer), num_decoder_layers, nn.LayerNorm(d_model, **norm))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """torch's initialisation: Xavier-uniform for every matrix."""
        for parameter in self.parameters():
            if parameter.dim() > 1:
                nn.init.xavier_uniform_(parameter)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                tgt_key_padding_mask: Tensor | None = None, memory_key_padding_mask: Tensor | None = None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        """src: (source, batch, d_model), tgt: (target, batch, d_model), or batch first; tgt's shape out.

        As torch's: the encoder, then the decoder on its output; the is_causal hints want their masks.
        """
        self._check_pair(src, tgt)
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                            tgt_is_causal=tgt_is_causal, memory_is_causal=memory_is_causal)

    def encode(self, src: Tensor, src_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
               src_is_causal: bool | None = None) -> Tensor:
        """The memory: src's shape, (source, batch, d_model) or batch first."""
        return self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)

    def decode(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None, memory_mask: Tensor | None = None,
               tgt_key_padding_mask: Tensor | None = None, memory_key_padding_mask: Tensor | None = None,
               tgt_is_causal: bool | None = None, memory_is_causal: bool = False,
               cache: DecoderCache | None = None) -> Tensor:
        """Decoder outputs, tgt's shape. With a cache (`self.decoder.new_cache()`), tgt is only the new positions.

        Unlike `forward` (torch's), tgt_is_causal=True needs no tgt_mask here: the causal mask is made
        for the target (or, with a cache, the layers apply it to the new positions).
        """
        if tgt_is_causal and tgt_mask is None and cache is None:
            length = tgt.size(1 if self.batch_first and tgt.dim() == 3 else 0)
            tgt_mask = ~causal_mask(length, length, device=tgt.device)  # True above the diagonal: the future
        extra = {} if cache is None else {"cache": cache}  # a custom decoder need not know caches
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal, **extra)

    def _check_pair(self, src: Tensor, tgt: Tensor) -> None:
        """torch's checks, in torch's order (RuntimeError: InputError), then batched against unbatched (ShapeError,
        an AssertionError as torch's attention raises)."""
        batch_dim = 0 if self.batch_first else 1
        if src.dim() == 3 and tgt.dim() > batch_dim and src.size(batch_dim) != tgt.size(batch_dim):
            raise InputError(f"src {tuple(src.shape)} and tgt {tuple(tgt.shape)} differ in batch size "
                             f"(batch_first={self.batch_first}): the batch number of src and tgt must be equal")
        if src.size(-1) != self.d_model or tgt.size(-1) != self.d_model:
            raise InputError(f"src {tuple(src.shape)} and tgt {tuple(tgt.shape)} must have d_model={self.d_model} "
                             f"features")
        if src.dim() != tgt.dim():
            raise ShapeError(f"src {tuple(src.shape)} and tgt {tuple(tgt.shape)} must both be batched or both not")

    @staticmethod
    def generate_square_subsequent_mask(size: int, device: torch.device | None = None,
                                        dtype: torch.dtype | None = None) -> Tensor:
        """torch's causal mask: (size, size) float, -inf above the diagonal (future positions), 0 elsewhere."""
        return torch.triu(torch.full((size, size), float("-inf"), device=device, dtype=dtype), diagonal=1)


@contextmanager
def capture_attention(model: nn.Module) -> Iterator[dict[str, Tensor]]:
    """Record the attention weights of every MultiHeadAttention in `model` during the `with` block.

    Yields a dict filled as the model runs: the attention module's name (e.g.
    "decoder.layers.0.multihead_attn") -> its weights of the last call, (batch, heads, queries, keys),
    detached. Inside the block those modules take the explicit path that forms the weights;
    outside, nothing changes (the hooks are removed on exit).
    """
    captured: dict[str, Tensor] = {}
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, MultiHeadAttention):
            handles.append(module.register_forward_pre_hook(_ask_for_weights, with_kwargs=True))
            handles.append(module.register_forward_hook(_recorder(captured, name)))
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def _ask_for_weights(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    call = inspect.signature(module.forward).bind(*args, **kwargs)  # need_weights may have come positionally
    call.arguments.update(need_weights=True, average_attn_weights=False)
    return call.args, call.kwargs


def _recorder(captured: dict[str, Tensor], name: str):
    def record(module: nn.Module, args: tuple, output: tuple[Tensor, Tensor | None]) -> None:
        if output[1] is not None:
            captured[name] = output[1].detach()
    return record
