"""One-to-many training with query groups (Chen et al. 2023, Group DETR, section 3).

One-to-one matching gives each object a single positive query per image, a slow teacher. Group
DETR trains G independent groups of object queries at once: self-attention stays within a group
(a block-diagonal mask; the decoder stacks the groups along the batch instead, the same with a
G-th of the attention scores, `stack_groups`), each group is matched one-to-one on its own, and
the loss is the mean over groups, so every object gets G positive queries per step. Only the
first group is used at inference, so the model stays a set predictor with no duplicate removal
(no NMS), and its inference cost is that of one group.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from attnkit.detection.output import DetectionOutput, SetPrediction
from attnkit.detection.set_criterion import SetCriterion


def group_attention_mask(groups: int, queries: int, device: torch.device | None = None) -> Tensor | None:
    """(groups * queries, groups * queries) bool, True where a query may NOT attend (another group).

    None for one group (nothing is masked)."""
    if groups == 1:
        return None
    group = torch.arange(groups * queries, device=device) // queries
    return group[:, None] != group[None, :]


def stack_groups(x: Tensor, groups: int) -> Tensor:
    """(batch, groups * queries, ...) -> (batch * groups, queries, ...): each group a sequence of its own.

    Self-attention over the stacked groups equals attention under `group_attention_mask`, with a G-th of
    the scores and no mask, as Group DETR's implementations do it (a `fast` training step about 3% faster
    on 2 CPU cores; on a GPU an unmasked call can run the flash kernel)."""
    return x if groups == 1 else x.unflatten(1, (groups, -1)).flatten(0, 1)


def unstack_groups(x: Tensor, groups: int) -> Tensor:
    """`stack_groups` undone: (batch * groups, queries, ...) -> (batch, groups * queries, ...)."""
    return x if groups == 1 else x.unflatten(0, (-1, groups)).flatten(1, 2)


def split_groups(layers: list[SetPrediction], groups: int) -> list[list[SetPrediction]]:
    """Per-layer predictions of all groups' queries (batch, groups * queries, ...) -> per group, per layer."""
    if groups == 1:
        return [layers]
    size = layers[0].boxes.shape[1] // groups
    return [[layer.queries(g * size, (g + 1) * size) for layer in layers] for g in range(groups)]


def group_losses(criterion: SetCriterion, groups: Sequence[DetectionOutput], targets: Sequence[dict[str, Tensor]],
                 num_boxes: float) -> tuple[dict[str, Tensor], Tensor]:
    """CRITERION on GROUPS, the outputs of query groups predicting the same TARGETS: every group's layers are
    matched and scored as one batch (`SetCriterion.set_terms`), each group one-to-one. Returns the first
    group's terms by name and the sum over the groups of their weighted totals (the loss is its mean: / G)."""
    terms = criterion.set_terms([layer for group in groups for layer in (group, *group.aux)], targets, num_boxes)
    return criterion.named(terms, groups[0], targets), criterion.weighted(terms)
