"""Hungarian matching of predictions to ground-truth objects (Carion et al. 2020, section 3.1, Eq. 1).

    sigma_hat = argmin_sigma  sum_i L_match(y_i, y_hat_sigma(i)),
    L_match = -1{c_i != no-object} p_hat_sigma(i)(c_i) + 1{c_i != no-object} L_box(b_i, b_hat_sigma(i)),
    L_box = lambda_iou L_GIoU + lambda_L1 ||b - b_hat||_1        (Eq. 2; lambdas 2 and 5, class weight 1)

solved per image with SciPy's `linear_sum_assignment` (the Hungarian algorithm).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor
from torchvision.ops import box_convert, generalized_box_iou

from attnkit.errors import ConfigError


@dataclass(frozen=True)
class MatchCost:
    """Weights of the matching cost terms; the defaults are the paper's."""
    cls: float = 1.0
    l1: float = 5.0
    giou: float = 2.0

    def __post_init__(self) -> None:
        if min(self.cls, self.l1, self.giou) < 0 or self.cls + self.l1 + self.giou == 0:
            raise ConfigError(f"matching costs must be non-negative and not all zero, got {self}")


@dataclass(frozen=True)
class Match:
    """Query `queries[j]` is matched to target object `objects[j]`."""
    queries: Tensor  # (matches,) int64
    objects: Tensor  # (matches,) int64


CostMatrix = Callable[[Tensor, Tensor, Tensor, Tensor, "MatchCost"], Tensor]


def match_cost_matrix(logits: Tensor, boxes: Tensor, labels: Tensor, target_boxes: Tensor,
                      cost: MatchCost) -> Tensor:
    """L_match for every (query, object) pair of one image.

    logits: (queries, classes + 1); boxes: (queries, 4) and target_boxes: (objects, 4) normalised
    cx, cy, w, h; labels: (objects,). Returns (queries, objects).
    """
    prob = logits.softmax(-1)[:, labels]  # (queries, objects)
    l1 = torch.cdist(boxes, target_boxes, p=1)  # (queries, objects)
    giou = generalized_box_iou(box_convert(boxes, "cxcywh", "xyxy"),
                               box_convert(target_boxes, "cxcywh", "xyxy"))  # (queries, objects)
    return cost.l1 * l1 - cost.cls * prob - cost.giou * giou


@torch.no_grad()
def hungarian_match(logits: Tensor, boxes: Tensor, targets: Sequence[dict[str, Tensor]],
                    cost: MatchCost = MatchCost(), cost_matrix: CostMatrix | None = None) -> list[Match]:
    """argmin over permutations of sum_i L_match(y_i, y_hat_sigma(i))  (Eq. 1), per image.

    logits: (batch, queries, classes + 1); boxes: (batch, queries, 4) normalised cx, cy, w, h;
    targets: per image {"labels": (objects,), "boxes": (objects, 4)}. An image without objects
    gets an empty match. cost_matrix: another L_match with `match_cost_matrix`'s arguments
    (a variant's classification cost, e.g. the focal one); the paper's by default.
    The costs of the whole batch are one matrix (every query against every object of the batch,
    one computation instead of one per image); each image solves its own block.
    Several sets of predictions of the same targets (decoder layers, query groups) are matched at once
    when logits and boxes stack them, (sets * batch, ...) set after set: one match per (set, image).
    """
    cost_matrix = cost_matrix or match_cost_matrix
    if not len(targets) and not len(logits):
        return []
    if not len(targets) or len(logits) % len(targets):
        raise ValueError(f"{len(logits)} images of predictions but {len(targets)} targets")
    sizes = [len(t["labels"]) for t in targets]
    empty = torch.zeros(0, dtype=torch.int64)
    if not sum(sizes):
        return [Match(empty, empty) for _ in range(len(logits))]
    queries = logits.shape[1]
    labels = torch.cat([t["labels"] for t in targets]).to(logits.device)
    target_boxes = torch.cat([t["boxes"] for t in targets]).to(boxes.device, torch.float32)
    matrix = cost_matrix(logits.flatten(0, 1).float(), boxes.flatten(0, 1).float(), labels, target_boxes, cost)
    matrix = torch.nan_to_num(matrix, nan=1e8, posinf=1e8, neginf=-1e8)  # a diverged step still matches;
    blocks = matrix.view(len(logits), queries, -1).cpu().numpy()         # its loss is non-finite and skipped
    starts = [0, *itertools.accumulate(sizes)]  # each image's first column
    matches = []
    for row in range(len(logits)):
        image = row % len(targets)
        if not sizes[image]:
            matches.append(Match(empty, empty))
            continue
        rows, cols = linear_sum_assignment(blocks[row, :, starts[image]:starts[image] + sizes[image]])
        matches.append(Match(torch.as_tensor(rows, dtype=torch.int64), torch.as_tensor(cols, dtype=torch.int64)))
    return matches
