"""Additive attention (Bahdanau et al. 2015, section 3.1, Eq. 5-6; appendix A.1.2):

    e_ij = a(s_{i-1}, h_j) = v_a^T tanh(W_a s_{i-1} + U_a h_j)      the alignment model
    alpha_ij = exp(e_ij) / sum_k exp(e_ik)                            softmax over source positions j
    c_i = sum_j alpha_ij h_j                                          the context vector

A one-hidden-layer feed-forward network scores every (query, key) pair, where dot-product attention
(Vaswani et al. 2017) takes q . k / sqrt(d). "U_a h_j does not depend on i, so it can be
pre-computed" (appendix A.1.2): `project_keys` does that once per source sentence and `forward`
accepts the result, so a decoder that attends at every step projects the keys only once.

Padding follows torch.nn.MultiheadAttention: `key_padding_mask` is a bool (batch, keys) tensor, True
where a key is padding; those keys get weight exactly 0 and every row of weights sums to 1.
"""

from __future__ import annotations

from torch import Tensor, nn


class AdditiveAttention(nn.Module):
    """score(s, h) = v^T tanh(W s + U h); returns the context vectors and the weights alpha."""

    def __init__(self, query_dim: int, key_dim: int, attention_dim: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attention_dim, bias=False)  # W_a
        self.key_proj = nn.Linear(key_dim, attention_dim)  # U_a (its bias is the layer's one bias)
        self.score = nn.Linear(attention_dim, 1, bias=False)  # v_a

    def project_keys(self, keys: Tensor) -> Tensor:
        """U_a h_j for every key, computed once: (batch, keys, key_dim) -> (batch, keys, attention_dim)."""
        return self.key_proj(keys)

    def forward(self, query: Tensor, keys: Tensor, key_padding_mask: Tensor | None = None,
                projected_keys: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """query: (batch, queries, query_dim); keys (also the values, as in the paper): (batch, keys, key_dim).

        Returns (context (batch, queries, key_dim), weights (batch, queries, keys)). Every row needs at
        least one key that is not padding.
        """
        if projected_keys is None:
            projected_keys = self.project_keys(keys)  # (batch, keys, attention_dim)
        # (batch, queries, keys, attention_dim)
        hidden = (self.query_proj(query).unsqueeze(2) + projected_keys.unsqueeze(1)).tanh()
        scores = self.score(hidden).squeeze(-1)  # e_ij: (batch, queries, keys)
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask.unsqueeze(1), float("-inf"))
        weights = scores.softmax(dim=-1)  # alpha_ij: (batch, queries, keys)
        return weights @ keys, weights  # c_i = sum_j alpha_ij h_j: (batch, queries, key_dim)
