"""The attention core: one concept of the papers per module."""

from attnkit.nn.attention import causal_mask, reference_attention, scaled_dot_product_attention
from attnkit.nn.kv_cache import KVCache
from attnkit.nn.multi_head_attention import MultiHeadAttention
from attnkit.nn.positional_encoding.rotary import RotaryEmbedding

__all__ = ["KVCache", "MultiHeadAttention", "RotaryEmbedding", "causal_mask", "reference_attention",
           "scaled_dot_product_attention"]
