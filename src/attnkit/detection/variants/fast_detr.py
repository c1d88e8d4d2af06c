"""`fast`: DETR's set prediction with the techniques that make it converge fast (`--arch fast`).

    levels   = CNN(image)[C3, C4], Conv(C4)            multi_scale_features (strides 8, 16, 32; the ResNet
                                                        stops after C4, `last_stage=4`, in the `small` preset)
    memory   = Encoder(levels)                          deformable self-attention (linear in pixels)
               updating C5 only (C3, C4 read)            lite_encoder (encoder_levels; `small`: C4 and C5)
    memory   = CNN fusion, top-down and bottom-up       cross_scale_fusion (RT-DETR's CCFM)
    boxes_0  = learned anchor boxes                     box_refinement
    h_d      = DecoderLayer_d(h_{d-1}, MLP(sine(boxes_{d-1})), memory sampled around boxes_{d-1})
    boxes_d  = sigmoid(Delta_d(h_d) + sigmoid^-1(boxes_{d-1}))
               or four edge distributions, refined      distribution_refinement (D-FINE's FDR)
    training: earlier layers' edges towards the last's  localization_distillation (D-FINE's GO-LSD)
    classes  = sigmoid(Linear(h_d))                     focal_loss
    training: classes towards the boxes' IoUs            varifocal_loss (iou_aware)
               or towards IoU^1.5, misses too           matchability_aware_loss (DEIM's MAL)
    training: G query groups, each matched one-to-one  query_groups; inference: the first group
    boxes_0  = the best encoder proposals, instead      query_selection (two-stage)
    training: + noised copies of the targets to rebuild  denoising_queries (DN-DETR / DINO)

Each technique is one module, switched off by one `FastDetrConfig` field (`feature_levels=1`, `last_stage=5`,
`deformable_attention`, `encoder_levels=3`, `box_refinement`, `focal_loss` and `iou_aware`, `query_groups=1`,
`two_stage`, `denoising_groups=0`; `cross_scale_fusion`, `distribution_refinement`, `localization_distillation`
and `matchability_aware` are switched on);
with all of them off this model computes DETR (`attnkit.detection.detr`) exactly, from the same building blocks.
Its output is the shared `DetectionOutput` (`logits` in DETR's classes + 1 form, `boxes`, `aux`; `class_logits`,
the sigmoid form, with the focal loss), so the matcher, post-processing, evaluation and CLI serve it as is; in
training a `FastDetrOutput` adds the other query groups, the proposals (two-stage) and the denoising queries,
which its criterion (`FastCriterion`) scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast

import torch
from torch import Tensor, nn

from attnkit.detection.backbone import Backbone
from attnkit.detection.config import DetectionTrainConfig, FastDetrConfig
from attnkit.detection.detr import detr_transformer
from attnkit.detection.output import DetectionOutput, SetPrediction
from attnkit.detection.set_criterion import SetCriterion, build_set_criterion, global_box_count
from attnkit.detection.variants.box_refinement import AnchorBoxQueries, LayerBoxes, LearnedQueries
from attnkit.detection.variants.cross_scale_fusion import CrossScaleFusion
from attnkit.detection.variants.deformable_transformer import (
    DeformableDecoderLayer,
    DeformableEncoder,
    DeformableEncoderLayer,
)
from attnkit.detection.variants.denoising_queries import (
    DenoisingGenerator,
    DenoisingOutput,
    DenoisingQueries,
    denoising_attention_mask,
    denoising_losses,
)
from attnkit.detection.variants.distribution_refinement import DistributionQueries, FineGrainedLocalization
from attnkit.detection.variants.focal_loss import PRIOR_BIAS, build_focal_criterion, softmax_form
from attnkit.detection.variants.lite_encoder import LiteEncoder
from attnkit.detection.variants.localization_distillation import LocalizationDistillation
from attnkit.detection.variants.matchability_aware_loss import build_matchability_aware_criterion
from attnkit.detection.variants.multi_scale_features import FlatLevels, LevelProjection, MultiScaleJoiner
from attnkit.detection.variants.query_groups import group_attention_mask, group_losses, split_groups
from attnkit.detection.variants.query_selection import EncoderProposals, proposal_losses
from attnkit.detection.variants.varifocal_loss import build_varifocal_criterion
from attnkit.nn import PositionEmbeddingSine2D, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder


class DenseEncoder(nn.Module):
    """DETR's encoder (full self-attention over all keys) under the deformable encoder's signature."""

    def __init__(self, encoder: TransformerEncoder) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, levels: FlatLevels) -> Tensor:
        return self.encoder(levels.src, src_key_padding_mask=levels.padding, pos=levels.pos)  # (batch, keys, d_model)


class DenseDecoderLayer(nn.Module):
    """DETR's decoder layer (full cross-attention, `pos` on the keys) under the deformable layer's signature."""

    def __init__(self, layer: TransformerDecoderLayer) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: Tensor, query_pos: Tensor, reference: Tensor | None, memory: Tensor, pos: Tensor,
                padding: Tensor | None, shapes: Sequence[tuple[int, int]], self_mask: Tensor | None,
                groups: int = 1) -> Tensor:
        if groups > 1:  # the groups apart by a mask (the layer's cross-attention reads one memory per image)
            self_mask = group_attention_mask(groups, x.shape[1] // groups, x.device)
        return self.layer(x, memory, tgt_mask=self_mask, memory_key_padding_mask=padding, pos=pos,
                          query_pos=query_pos)  # (batch, queries, d_model)


class QueryDecoder(nn.Module):
    """The decoder layers run one by one, each reading (and, with refinement, moving) the queries' references."""

    def __init__(self, layers: list[nn.Module], norm: nn.LayerNorm, queries: AnchorBoxQueries | LearnedQueries) -> None:
        super().__init__()
        self.layers, self.norm, self.queries = nn.ModuleList(layers), norm, queries

    def forward(self, memory: Tensor, levels: FlatLevels, num_queries: int, self_mask: Tensor | None,
                reference: Tensor | None = None, denoising: DenoisingQueries | None = None,
                groups: int = 1) -> tuple[Tensor, list[LayerBoxes]]:
        """memory: (batch, keys, d_model) -> hidden states (layers, batch, queries, d_model), each layer's output
        through the shared final norm (DETR), and each layer's boxes (batch, queries, 4) with what made them.
        groups: the queries form this many groups that attend apart (given without `self_mask`).
        reference: the first boxes (batch, queries, 4) when chosen per image (two-stage), else the queries' own.
        denoising: training queries placed before the NUM_QUERIES others (their content and boxes are given)."""
        batch = len(memory)
        if reference is None:
            reference = self.queries.initial(batch, num_queries)  # (batch, queries, 4 or 2) or None
        x = memory.new_zeros(batch, num_queries, memory.shape[-1])  # DETR's zero content queries
        if denoising is not None:
            x = torch.cat([denoising.content.to(x.dtype), x], 1)
            assert reference is not None  # denoising needs box_refinement (FastDetrConfig), whose queries have boxes
            reference = torch.cat([denoising.boxes, reference], 1)
        hidden: list[Tensor] = []
        boxes: list[LayerBoxes] = []
        for index, layer in enumerate(self.layers):
            query_pos = self.queries.query_pos(reference, batch, num_queries)  # (batch, queries, d_model)
            x = layer(x, query_pos, level_reference(reference, levels), memory, levels.pos, levels.key_padding,
                      levels.shapes, self_mask, groups)
            hidden.append(self.norm(x))
            boxes.append(self.queries.boxes(index, hidden[-1], reference, boxes[-1] if boxes else None))
            reference = boxes[-1].boxes.detach() if self.queries.refines else reference
        return torch.stack(hidden), boxes


def level_reference(reference: Tensor | None, levels: FlatLevels) -> Tensor | None:
    """Image-normalised references (batch, queries, 2 or 4) -> in each level's padded map

    (batch, queries, levels, 2 or 4); None stays None (full attention reads no reference)."""
    if reference is None:
        return None
    if not levels.geometry.padded:  # every map is the whole image
        return reference[:, :, None].expand(-1, -1, len(levels.shapes), -1)
    ratios = levels.valid_ratios if reference.shape[-1] == 2 else torch.cat([levels.valid_ratios] * 2, -1)
    return reference[:, :, None] * ratios[:, None]


@dataclass(frozen=True)
class FastDetrOutput(DetectionOutput):
    """The first query group's output (the detections), and in training what the techniques train besides."""
    groups: list[DetectionOutput] = field(default_factory=list)  # query groups 2 .. G, in training
    proposals: SetPrediction | None = None  # two-stage, in training: every encoder token's, (batch, keys, ...)
    denoising: DenoisingOutput | None = None  # denoising queries, in training with targets


class FastDETR(nn.Module):
    """Backbone levels, encoder, query decoder, class head; groups of queries in training only."""

    def __init__(self, backbone: MultiScaleJoiner, input_proj: LevelProjection, encoder: nn.Module,
                 decoder: QueryDecoder, num_classes: int, num_queries: int, groups: int = 1, focal: bool = False,
                 aux_loss: bool = True, proposals: EncoderProposals | None = None,
                 denoising: DenoisingGenerator | None = None, fusion: CrossScaleFusion | None = None) -> None:
        super().__init__()
        self.backbone, self.input_proj, self.encoder, self.decoder = backbone, input_proj, encoder, decoder
        self.proposals, self.denoising, self.fusion = proposals, denoising, fusion
        self.num_queries, self.groups, self.focal, self.aux_loss = num_queries, groups, focal, aux_loss
        self.class_embed = nn.Linear(decoder.norm.normalized_shape[0], num_classes + (0 if focal else 1))
        if focal:
            nn.init.constant_(self.class_embed.bias, PRIOR_BIAS)

    def forward(self, images: Tensor, mask: Tensor,
                targets: Sequence[dict[str, Tensor]] | None = None) -> FastDetrOutput:
        """images (batch, 3, H, W), mask (batch, H, W) True on padding -> the shared detector output.
        targets (per image "labels", "boxes"): read in training by the denoising queries only."""
        levels = self.input_proj(self.backbone(images, mask))
        memory = self.encoder(levels)
        if self.fusion is not None:
            memory = self.fusion(memory, levels)
        groups = self.groups if self.training else 1
        self_mask, apart = None, groups  # each group's self-attention apart: the groups stacked along the batch
        denoising = None
        if self.denoising is not None and self.training and targets is not None:
            denoising = self.denoising(targets)  # one sequence, where a mask keeps groups and denoising apart
            group_mask = group_attention_mask(groups, self.num_queries, memory.device)
            self_mask = denoising_attention_mask(denoising, group_mask, groups * self.num_queries, memory.device)
            apart = 1
        reference = None
        if self.proposals is not None:  # every group starts from the same proposals
            enc_logits, enc_boxes, _, reference = self.proposals(memory, levels, self.num_queries)
            reference = reference.repeat(1, groups, 1)
        hidden, boxes = self.decoder(memory, levels, groups * self.num_queries, self_mask, reference, denoising,
                                     apart)
        logits = self.class_embed(hidden)  # (layers, batch, [denoising +] groups * queries, classes [+ 1])
        layers = [self._prediction(layer_logits, *layer_boxes[:3]) for layer_logits, layer_boxes in zip(logits, boxes)]
        if boxes[0].initial is not None:  # distribution refinement: b^0 trained as one more layer's prediction, the
            layers = [self._prediction(logits[0], boxes[0].initial), *distilled(layers)]  # last layer a teacher
        denoised = None
        if denoising is not None:
            denoised = DenoisingOutput([layer.queries(0, denoising.count) for layer in layers], denoising.matches)
            layers = [layer.queries(denoising.count) for layer in layers]
        first, *others = split_groups(layers, groups)
        proposals = self._prediction(enc_logits, enc_boxes) if self.proposals is not None and self.training else None
        return FastDetrOutput.from_layers(first, self.aux_loss, denoising=denoised, proposals=proposals,
                                          groups=[DetectionOutput.from_layers(g, self.aux_loss) for g in others])

    def _prediction(self, logits: Tensor, boxes: Tensor, corners: Tensor | None = None,
                    anchors: Tensor | None = None) -> SetPrediction:
        """One layer's (or the proposals') predictions from the class head's logits and the boxes (with the edge
        distributions that made them, under distribution refinement)."""
        if not self.focal:
            return SetPrediction(logits, boxes, None, corners, anchors)
        return SetPrediction(softmax_form(logits), boxes, logits, corners, anchors)


def distilled(layers: list[SetPrediction]) -> list[SetPrediction]:
    """LAYERS, each but the last with the last as its (detached) teacher (localization_distillation)."""
    last = layers[-1]
    teacher = SetPrediction(last.logits.detach(), last.boxes.detach(),
                            None if last.class_logits is None else last.class_logits.detach(),
                            None if last.corners is None else last.corners.detach())
    return [replace(layer, teacher=teacher) for layer in layers[:-1]] + [last]


class FastCriterion(nn.Module):
    """`fast`'s loss: CRITERION (DETR's, or the focal one) on the query groups (their mean: Group DETR), the
    proposals counted with the first group (two-stage: weighted 1 / G, as one group's part of the mean), and
    the denoising queries' reconstruction added."""

    def __init__(self, criterion: SetCriterion) -> None:
        super().__init__()
        self.criterion = criterion

    def forward(self, output: FastDetrOutput, targets: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
        """The first group's terms by name (and the proposals' `_enc`, the denoising queries' `_dn`) and "loss"."""
        num_boxes = global_box_count(sum(len(t["labels"]) for t in targets), output.boxes.device)
        groups = [output, *output.groups]
        losses, total = group_losses(self.criterion, groups, targets, num_boxes)
        if output.proposals is not None:
            named, proposals = proposal_losses(self.criterion, output.proposals, targets, num_boxes)
            losses, total = {**losses, **named}, total + proposals
        losses["loss"] = total / len(groups)
        if output.denoising is not None:
            named, denoising = denoising_losses(self.criterion, output.denoising, targets)
            losses = {**losses, "loss": losses["loss"] + denoising, **named}
        return losses


def build_fast_detr(config: FastDetrConfig, backbone_weights: Path | None = None) -> FastDETR:
    """FastDETR from its config; the technique fields choose the modules."""
    d, levels = config.hidden_dim, config.feature_levels + config.stride4_level
    position = PositionEmbeddingSine2D(d // 2, normalize=True)
    resnet = Backbone(config.resnet_layout, config.dilation, config.frozen_batchnorm, backbone_weights,
                      config.last_stage)
    backbone = MultiScaleJoiner(resnet, position, config.feature_levels, config.stride4_level)
    encoder: nn.Module
    layers: list[nn.Module]
    if config.deformable_attention:
        sizes = (d, config.num_heads, config.dim_feedforward, config.dropout, levels, config.deformable_points)
        encoder_layers = [DeformableEncoderLayer(*sizes) for _ in range(config.enc_layers)]
        encoder = (LiteEncoder(encoder_layers, config.encoder_levels)
                   if config.encoder_levels < levels else DeformableEncoder(encoder_layers))  # every level updated
        layers = [DeformableDecoderLayer(*sizes) for _ in range(config.dec_layers)]
    else:
        transformer = detr_transformer(config)
        assert isinstance(transformer.encoder, TransformerEncoder)  # detr_transformer's own encoder and decoder
        assert isinstance(transformer.decoder, TransformerDecoder)
        encoder = DenseEncoder(transformer.encoder)
        layers = [DenseDecoderLayer(cast(TransformerDecoderLayer, layer)) for layer in transformer.decoder.layers]
    total = config.num_queries * config.query_groups
    anchor_queries = DistributionQueries if config.distribution_refinement else AnchorBoxQueries
    queries = (anchor_queries(total, d, config.dec_layers, learned_anchors=not config.two_stage)
               if config.box_refinement else LearnedQueries(total, d, with_reference=config.deformable_attention))
    proposals = EncoderProposals(d, config.num_classes, config.focal_loss) if config.two_stage else None
    denoising = (DenoisingGenerator(config.num_classes, d, config.denoising_groups, config.denoising_label_noise,
                                    config.denoising_box_noise) if config.denoising_groups else None)
    return FastDETR(backbone, LevelProjection(backbone.num_channels, d, backbone.made_levels), encoder,
                    QueryDecoder(layers, nn.LayerNorm(d), queries), config.num_classes, config.num_queries,
                    config.query_groups, config.focal_loss, config.aux_loss, proposals, denoising,
                    CrossScaleFusion(d, levels) if config.cross_scale_fusion else None)


def build_fast_criterion(config: FastDetrConfig, train: DetectionTrainConfig) -> FastCriterion:
    """The loss the config's techniques need, with the training config's weights: the focal set criterion (the
    varifocal one with `iou_aware`) or DETR's, over the query groups, the proposals and the denoising queries
    that the model returns."""
    if config.focal_loss and config.iou_aware:
        criterion: SetCriterion = (build_matchability_aware_criterion if config.matchability_aware
                                   else build_varifocal_criterion)(config, train)
    else:
        criterion = (build_focal_criterion if config.focal_loss else build_set_criterion)(config, train)
    if config.distribution_refinement:
        criterion.extra_terms = (FineGrainedLocalization(),
                                 *([LocalizationDistillation()] if config.localization_distillation else []))
    return FastCriterion(criterion)
