"""The Transformer encoder (Vaswani et al. 2017, section 3.1): N identical layers, each

    x = LayerNorm(x + SelfAttention(x))      post-norm, the paper's
    x = LayerNorm(x + FFN(x))

or, with `norm_first` (pre-norm, Xiong et al. 2020), x = x + SelfAttention(LayerNorm(x)) and
x = x + FFN(LayerNorm(x)).

`TransformerEncoderLayer` and `TransformerEncoder` are drop-ins for torch.nn's: the same
constructor and forward arguments, masks (bool True = not allowed), state-dict keys
(`self_attn.*`, `linear1`, `linear2`, `norm1`, `norm2`; `layers.N.*`, `norm`), which are also
DETR's names, and error types. The stack calls its layers as modules, in the caller's layout, so
hooks on them fire and any layer with torch's forward may sit in `.layers` (a
torch.nn.TransformerEncoderLayer too). Beyond torch: DETR's positions (`pos`, added to the
queries and keys of self-attention, not the values; Carion et al. 2020, appendix A.3) and an
optional rotary embedding for the self-attention.

The layout and mask checks shared with the decoder live here too (`SequenceLayout`, `check_*`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from torch import Tensor, nn

from attnkit.nn.attention import is_causal_mask, sequence_length
from attnkit.nn.dropout import Dropout
from attnkit.nn.errors import InputError, ShapeError
from attnkit.nn.feed_forward import Activation, FeedForwardMixin
from attnkit.nn.multi_head_attention import MultiHeadAttention, nested_message
from attnkit.nn.positional_encoding.rotary import RotaryEmbedding


@dataclass(frozen=True)
class SequenceLayout:
    """The caller's layout: (length, batch, d_model), batch first (batch, length, d_model), or unbatched."""

    batch_first: bool
    unbatched: bool

    @classmethod
    def of(cls, name: str, x: Tensor, d_model: int, batch_first: bool) -> SequenceLayout:
        if x.is_nested:
            raise ShapeError(nested_message(name))
        if x.dim() not in (2, 3) or x.size(-1) != d_model:
            expected = "(batch, length, d_model)" if batch_first else "(length, batch, d_model)"
            raise ShapeError(f"{name} must be {expected} or unbatched (length, d_model) with d_model={d_model}, "
                             f"got {tuple(x.shape)}")
        return cls(batch_first, x.dim() == 2)

    def sizes(self, x: Tensor) -> tuple[int, int]:
        """(batch, length) of a sequence in this layout; batch 1 when unbatched."""
        if self.unbatched:
            return 1, x.size(0)
        return (x.size(0), x.size(1)) if self.batch_first else (x.size(1), x.size(0))

    def enter_padding(self, mask: Tensor | None) -> Tensor | None:
        """Key padding mask (batch, keys), or (keys,) unbatched -> (batch, keys)."""
        return mask.unsqueeze(0) if mask is not None and self.unbatched else mask


def check_heads(d_model: int, nhead: int) -> None:
    if d_model <= 0 or nhead <= 0:
        raise ValueError(f"d_model ({d_model}) and nhead ({nhead}) must be greater than 0")
    if d_model % nhead:
        raise ShapeError(f"d_model ({d_model}) must be divisible by nhead ({nhead})")


def check_same_shape(name: str, x: Tensor | None, reference_name: str, reference: Tensor) -> None:
    if x is not None and x.shape != reference.shape:
        raise ShapeError(f"{name} must have the shape of {reference_name} {tuple(reference.shape)}, "
                         f"got {tuple(x.shape)}")


def check_padding_mask(name: str, mask: Tensor | None, batch: int, keys: int) -> None:
    """mask: (batch, keys) after the layout's enter_padding."""
    if mask is not None and mask.shape != (batch, keys):
        raise ShapeError(f"{name} must be (batch, keys) = {(batch, keys)}, got {tuple(mask.shape)}")


def check_attn_mask(name: str, mask: Tensor | None, batch: int, heads: int, queries: int, keys: int) -> None:
    """mask: (queries, keys) or (batch * heads, queries, keys), torch's two forms."""
    if mask is None or tuple(mask.shape) in ((queries, keys), (batch * heads, queries, keys)):
        return
    raise InputError(f"{name} must be (queries, keys) = {(queries, keys)} or (batch * heads, queries, keys) = "
                     f"{(batch * heads, queries, keys)}, got {tuple(mask.shape)}")


def check_encoder_inputs(d_model: int, nhead: int, batch_first: bool, src: Tensor, mask: Tensor | None,
                         key_padding_mask: Tensor | None, pos: Tensor | None) -> None:
    """The encoder's inputs in the caller's layout, checked against each other (errors name the arguments)."""
    layout = SequenceLayout.of("src", src, d_model, batch_first)
    check_same_shape("pos", pos, "src", src)
    batch, length = layout.sizes(src)
    check_padding_mask("src_key_padding_mask", layout.enter_padding(key_padding_mask), batch, length)
    check_attn_mask("src_mask", mask, batch, nhead, length, length)


def clones(layer: nn.Module, num_layers: int) -> nn.ModuleList:
    """N independent copies of a layer (torch.nn's and DETR's `_get_clones`)."""
    return nn.ModuleList([copy.deepcopy(layer) for _ in range(num_layers)])


def attention_sizes(name: str, layer: nn.Module) -> tuple[int, int, bool]:
    """(d_model, nhead, batch_first) of a layer, read off its `self_attn` as torch's stacks do."""
    attention = getattr(layer, "self_attn", None)
    d_model, nhead, batch_first = (getattr(attention, size, None) for size in ("embed_dim", "num_heads", "batch_first"))
    if d_model is None or nhead is None or batch_first is None:
        raise ValueError(f"{name} must be a Transformer layer with a multi-head `self_attn`, got {type(layer)}")
    return d_model, nhead, batch_first


class TransformerEncoderLayer(FeedForwardMixin, nn.Module):
    """Self-attention then FFN, each wrapped in a residual and LayerNorm; a drop-in for torch.nn's."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: Activation = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None,
                 rotary: RotaryEmbedding | None = None) -> None:
        super().__init__()
        check_heads(d_model, nhead)
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            rotary=rotary, **factory)
        self._init_feed_forward(d_model, dim_feedforward, dropout, activation, bias, **factory)
        self.norm_first, self.batch_first = norm_first, batch_first
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)

    def forward(self, src: Tensor, src_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool = False, pos: Tensor | None = None) -> Tensor:
        """src: (length, batch, d_model), or (batch, length, d_model) with batch_first, or unbatched; same shape out.

        is_causal: torch's hint that src_mask is the causal mask (which must be given, as for torch).
        pos: DETR's positions, src's shape, added to the self-attention's queries and keys.
        """
        check_encoder_inputs(self.self_attn.embed_dim, self.self_attn.num_heads, self.batch_first, src, src_mask,
                             src_key_padding_mask, pos)
        x = src
        if self.norm_first:
            x = x + self._self_attention(self.norm1(x), src_mask, src_key_padding_mask, is_causal, pos)
            return x + self.dropout2(self.feed_forward(self.norm2(x)))
        x = self.norm1(x + self._self_attention(x, src_mask, src_key_padding_mask, is_causal, pos))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))

    def _self_attention(self, x: Tensor, mask: Tensor | None, key_padding_mask: Tensor | None, is_causal: bool,
                        pos: Tensor | None) -> Tensor:
        q = k = x if pos is None else x + pos  # positions on queries and keys only (DETR)
        out, _ = self.self_attn(q, k, x, attn_mask=mask, key_padding_mask=key_padding_mask, need_weights=False,
                                is_causal=is_causal)
        return self.dropout1(out)  # x's shape


class TransformerEncoder(nn.Module):
    """N copies of `encoder_layer`, then `norm` if given; a drop-in for torch.nn.TransformerEncoder.

    encoder_layer: attnkit's TransformerEncoderLayer, or any module with torch's layer forward and
    a `self_attn` (torch.nn.TransformerEncoderLayer). enable_nested_tensor and mask_check are
    accepted for torch compatibility and have no effect: padded positions are computed like the
    others (torch's nested-tensor path, in eval mode without autograd, returns zeros there).
    num_layers may be 0 (then the encoder is `norm`, or the identity): DETR's encoder ablation.
    """

    def __init__(self, encoder_layer: nn.Module, num_layers: int, norm: nn.Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        if num_layers < 0:
            raise ValueError(f"num_layers must be at least 0, got {num_layers}")
        self.d_model, self.nhead, self.batch_first = attention_sizes("encoder_layer", encoder_layer)  # 0 layers too
        self.layers = clones(encoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm
        self.enable_nested_tensor, self.mask_check = enable_nested_tensor, mask_check

    def forward(self, src: Tensor, mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool | None = None, pos: Tensor | None = None) -> Tensor:
        """src: (length, batch, d_model), or batch first, or unbatched; same shape out. pos: as src (DETR).

        Each layer is called as a module: layer(x, src_mask=mask, src_key_padding_mask=..., is_causal=...),
        and pos=pos when given; is_causal=None: whether mask is the causal mask (`is_causal_mask`), as torch's.
        """
        check_encoder_inputs(self.d_model, self.nhead, self.batch_first, src, mask, src_key_padding_mask, pos)
        positions = {} if pos is None else {"pos": pos}  # a layer without DETR's positions need not know them
        if is_causal is None:  # as torch's stack: tell the layers when the mask is the causal one
            is_causal = is_causal_mask(mask, sequence_length(src, self.batch_first))
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal, **positions)
        return x if self.norm is None else self.norm(x)
