"""What a detector returns: a set of N predictions per image, from every decoder layer (Carion et al. 2020,
section 3.2, "Prediction feed-forward networks" and "Auxiliary decoding losses").

Every detector in attnkit returns a `DetectionOutput`: the last decoder layer's class logits and
boxes, and the earlier layers' (`aux`), which the auxiliary losses score. The matcher, the set
criterion, post-processing, evaluation, export and the pictures read it. A variant that trains
more sets than these (query groups, proposals, denoising queries) returns a subclass that carries
them (`variants.fast_detr.FastDetrOutput`); at inference it is this output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from torch import Tensor

Output = TypeVar("Output", bound="DetectionOutput")


@dataclass(frozen=True)
class SetPrediction:
    """One set of predictions for every image of a batch: a decoder layer's, or a first stage's proposals."""
    logits: Tensor  # (batch, queries, classes + 1) softmax logits, the last is "no object"
    boxes: Tensor  # (batch, queries, 4) normalised cx, cy, w, h in [0, 1]
    class_logits: Tensor | None = None  # (batch, queries, classes) sigmoid logits (the focal loss); None otherwise
    corners: Tensor | None = None  # (batch, queries, 4, bins + 1) edge distributions' logits (distribution refinement)
    anchors: Tensor | None = None  # (batch, queries, 4) the boxes those edges are measured from
    teacher: SetPrediction | None = None  # the last layer's, detached, that this layer's edges are distilled from

    def queries(self, start: int, stop: int | None = None) -> SetPrediction:
        """The predictions of queries START to STOP (exclusive; None: the last)."""
        def part(x: Tensor | None) -> Tensor | None:
            return None if x is None else x[:, start:stop]

        return SetPrediction(self.logits[:, start:stop], self.boxes[:, start:stop], part(self.class_logits),
                             part(self.corners), part(self.anchors),
                             None if self.teacher is None else self.teacher.queries(start, stop))


@dataclass(frozen=True)
class DetectionOutput(SetPrediction):
    """The last decoder layer's predictions (its fields) and the earlier layers', for the auxiliary losses."""
    aux: list[SetPrediction] = field(default_factory=list)  # decoder layers 1 .. L-1 in order; [] without aux_loss

    @classmethod
    def from_layers(cls: type[Output], layers: Sequence[SetPrediction], aux: bool = True, **extra: Any) -> Output:
        """The output of decoder LAYERS' predictions (first to last): the last, and the others when AUX.
        EXTRA: a subclass's own fields."""
        last = layers[-1]
        return cls(last.logits, last.boxes, last.class_logits, last.corners, last.anchors, last.teacher,
                   list(layers[:-1]) if aux else [], **extra)
