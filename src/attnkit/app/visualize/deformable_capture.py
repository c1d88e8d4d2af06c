"""Where deformable attention reads, for pictures (Zhu et al. 2021, Deformable DETR, Figure 6 and appendix A.5).

Deformable attention has no (queries, keys) matrix to draw: each query reads K bilinearly sampled
points per head and level around its reference point or box, with weights A_mlqk that sum to 1
over each head's L * K points (section 4.1, Eq. 3). The paper draws exactly these, the sampling
points of a detected object's query coloured by their weight, around its reference point. Here one
run of the model keeps, through forward hooks that live only inside `capture_deformable`:

  decoder    every layer's cross-attention: each object query's sampling locations, weights and
             reference box (the box the layer samples around, the previous layer's prediction);
  encoder    every layer's self-attention: the same for each pixel the layer updates (all levels'
             pixels, or the coarse levels' only with `lite_encoder`);
  proposals  two-stage (`query_selection`): the K best encoder proposals the decoder started from.

The hooks ask each `MultiScaleDeformableAttention` for its sampling (`sampling`, the method its
`forward` reads its points through) with the call's own arguments: the outputs are unchanged, and
a model run outside `capture_deformable` computes nothing more.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.detection.output import DetectionOutput
from attnkit.detection.variants.multi_scale_deformable_attention import MultiScaleDeformableAttention
from attnkit.detection.variants.multi_scale_features import FlatLevels
from attnkit.detection.variants.query_selection import EncoderProposals, best_keys
from attnkit.errors import UserError

_LAYER = re.compile(r"(?:^|\.)(encoder|decoder)\.layers\.(\d+)\.(self_attn|cross_attn)$")


@dataclass(frozen=True)
class Sampling:
    """One deformable attention call as its module computed it (Eq. 3): batch first."""

    reference: Tensor  # (batch, queries, levels, 2 or 4): p_q, or its box cx, cy, w, h, in [0, 1] of each level's map
    locations: Tensor  # (batch, queries, heads, levels, points, 2): x, y in [0, 1] of each level's map
    weights: Tensor    # (batch, queries, heads, levels, points): A_mlqk, summing to 1 over each head's levels, points

    def in_image(self, valid_ratios: Tensor) -> Sampling:
        """The same in [0, 1] of the unpadded image: each level's map coordinates over its VALID_RATIOS
        (batch, levels, 2), the unpadded fraction (width, height) of the map (1 for an image run alone)."""
        ratios = valid_ratios[:, None]  # (batch, 1, levels, 2)
        reference = self.reference / (ratios if self.reference.shape[-1] == 2 else torch.cat([ratios] * 2, -1))
        return Sampling(reference, self.locations / ratios[:, :, None, :, None], self.weights)

    def cpu(self) -> Sampling:
        return Sampling(self.reference.cpu(), self.locations.cpu(), self.weights.cpu())


@dataclass(frozen=True)
class DeformableWeights:
    """A deformable detector's sampling for one batch of images; each list has one entry per layer."""

    outputs: DetectionOutput                # the model's usual output: logits, boxes, aux
    shapes: tuple[tuple[int, int], ...]     # (height, width) of each level, finest first; keys = sum of h * w
    valid_ratios: Tensor                    # (batch, levels, 2) the unpadded fraction (width, height) of each map
    encoder: list[Sampling]                 # queries: the keys the layer updates, the last ones (`encoder_first`)
    decoder: list[Sampling]                 # queries: the object queries (their cross-attention to the image)
    proposals: Tensor | None = None         # (batch, count, 4) two-stage: the decoder's first boxes, cx, cy, w, h
    proposal_scores: Tensor | None = None   # (batch, count) their selection scores, best first

    def cpu(self) -> DeformableWeights:
        """The sampling on the CPU, for drawing (the outputs stay where they are)."""
        proposals = [None if t is None else t.cpu() for t in (self.proposals, self.proposal_scores)]
        return DeformableWeights(self.outputs, self.shapes, self.valid_ratios.cpu(), [s.cpu() for s in self.encoder],
                                 [s.cpu() for s in self.decoder], *proposals)

    @property
    def encoder_first(self) -> int:
        """The first key the encoder updates (its first query): 0, or the finer levels' keys (`lite_encoder`)."""
        return sum(h * w for h, w in self.shapes) - self.encoder[-1].locations.shape[1]

    def encoder_levels(self) -> list[int]:
        """The levels whose pixels are the encoder's queries, finest first."""
        starts = [sum(h * w for h, w in self.shapes[:level]) for level in range(len(self.shapes))]
        return [level for level, start in enumerate(starts) if start >= self.encoder_first]

    def encoder_query(self, level: int, row: int, column: int) -> int:
        """The encoder query index of pixel (ROW, COLUMN) of LEVEL (one of `encoder_levels`)."""
        start = sum(h * w for h, w in self.shapes[:level])
        return start + row * self.shapes[level][1] + column - self.encoder_first


@torch.no_grad()
def capture_deformable(model: nn.Module, images: Tensor, mask: Tensor) -> DeformableWeights:
    """Run `model(images, mask)` ((batch, 3, H, W), True on padding) and keep its deformable attention's sampling."""
    samplings: dict[tuple[str, int], Sampling] = {}
    levels: list[FlatLevels] = []
    proposals: list[tuple[Tensor, Tensor]] = []
    with _hooks(model, samplings, levels, proposals):
        outputs = model(images, mask)
    if not samplings or not levels:
        raise UserError(f"{type(model).__name__} has no deformable attention to capture")
    layers = {part: [samplings[key] for key in sorted(samplings) if key[0] == part] for part in ("encoder", "decoder")}
    boxes, scores = proposals[-1] if proposals else (None, None)
    geometry = levels[-1].geometry
    return DeformableWeights(outputs, tuple(geometry.shapes), geometry.valid_ratios, layers["encoder"],
                             layers["decoder"], boxes, scores)


@contextmanager
def _hooks(model: nn.Module, samplings: dict[tuple[str, int], Sampling], levels: list[FlatLevels],
           proposals: list[tuple[Tensor, Tensor]]) -> Iterator[None]:
    """Forward hooks that fill SAMPLINGS ({(part, layer): ...}), LEVELS (the flattened levels the input
    projection made) and PROPOSALS ((boxes, scores) of the first stage); all removed on leaving."""
    handles = []
    for name, module in model.named_modules():
        match = _LAYER.search(name)
        if isinstance(module, MultiScaleDeformableAttention) and match is not None:
            key = (match.group(1), int(match.group(2)))
            handles.append(module.register_forward_hook(
                lambda m, args, kwargs, out, key=key: samplings.__setitem__(key, _sampling(m, args, kwargs)),
                with_kwargs=True))
        elif isinstance(module, EncoderProposals):
            handles.append(module.register_forward_hook(
                lambda m, args, out: proposals.append(_best_proposals(out[2], out[3]))))
    projection = getattr(model, "input_proj", None)
    if isinstance(projection, nn.Module):
        handles.append(projection.register_forward_hook(
            lambda m, args, out: levels.append(out) if isinstance(out, FlatLevels) else None))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _sampling(module: MultiScaleDeformableAttention, args: tuple, kwargs: dict) -> Sampling:
    """The module's sampling for the arguments of one of its calls."""
    call = inspect.signature(module.forward).bind(*args, **kwargs).arguments
    locations, weights = module.sampling(call["query"], call["reference"], call["shapes"])
    return Sampling(call["reference"].float(), locations.float(), weights.float())


def _best_proposals(score: Tensor, boxes: Tensor) -> tuple[Tensor, Tensor]:
    """The first stage's selection SCORE (batch, keys) and chosen BOXES (batch, count, 4) -> (boxes, their scores),
    both best first, as `EncoderProposals` chose them (`best_keys`)."""
    return boxes.float(), score.gather(1, best_keys(score, boxes.shape[1])).float()
