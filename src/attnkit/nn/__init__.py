"""The attention core: one concept of the papers per module."""

from attnkit.nn.attention import causal_mask, reference_attention, scaled_dot_product_attention
from attnkit.nn.decoder import (
    DecoderCache,
    DecoderLayerCache,
    DecoderMasks,
    TransformerDecoder,
    TransformerDecoderLayer,
)
from attnkit.nn.dropout import Dropout
from attnkit.nn.encoder import TransformerEncoder, TransformerEncoderLayer
from attnkit.nn.errors import InputError, ShapeError
from attnkit.nn.feed_forward import FeedForwardMixin, get_activation
from attnkit.nn.kv_cache import KVCache
from attnkit.nn.multi_head_attention import MultiHeadAttention
from attnkit.nn.positional_encoding.learned import LearnedPositionalEmbedding
from attnkit.nn.positional_encoding.rotary import RotaryEmbedding
from attnkit.nn.positional_encoding.sine_2d import PositionEmbeddingSine2D
from attnkit.nn.positional_encoding.sinusoidal import SinusoidalPositionalEncoding
from attnkit.nn.transformer import Transformer, capture_attention

__all__ = ["DecoderCache", "DecoderLayerCache", "DecoderMasks", "Dropout", "FeedForwardMixin", "InputError", "KVCache",
           "LearnedPositionalEmbedding", "MultiHeadAttention", "PositionEmbeddingSine2D", "RotaryEmbedding",
           "ShapeError", "SinusoidalPositionalEncoding",
           "Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
           "TransformerEncoderLayer", "capture_attention", "causal_mask", "get_activation", "reference_attention",
           "scaled_dot_product_attention"]
