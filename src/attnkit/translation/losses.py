"""Label-smoothed cross-entropy: "During training, we employed label smoothing of value
epsilon_ls = 0.1. This hurts perplexity, as the model learns to be more unsure, but improves
accuracy and BLEU score" (Vaswani et al. 2017, section 5.4; Szegedy et al. 2016).

The target distribution puts 1 - epsilon on the reference token and spreads epsilon uniformly over
the vocabulary; padding positions contribute nothing.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from attnkit.translation.tokenizer import PAD_ID


def label_smoothed_cross_entropy(logits: Tensor, targets: Tensor, smoothing: float = 0.1,
                                 pad_id: int = PAD_ID) -> Tensor:
    """Sum over non-padding positions of -sum_k q(k) log p(k), q = (1 - eps) one_hot + eps / vocab.

    logits: (batch, length, vocab); targets: (batch, length) ids, `pad_id` where there is no token.
    Returns the summed loss (divide by the token count for a per-token mean).
    """
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (batch, length, vocab)
    nll = -log_probs.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (batch, length)
    uniform = -log_probs.mean(dim=-1)  # cross-entropy with the uniform distribution: (batch, length)
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    return loss.masked_fill(targets == pad_id, 0.0).sum()
