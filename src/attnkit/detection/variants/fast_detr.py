"""`fast`: DETR's set prediction with the techniques that make it converge fast (`--arch fast`).

    levels   = CNN(image)[C3, C4], Conv(C4)            multi_scale_features (strides 8, 16, 32; the ResNet
                                                        stops after C4, `last_stage=4`, in the `small` preset)
    memory   = Encoder(levels)                          deformable self-attention (linear in pixels)
               updating C4, C5 only (C3 read)            lite_encoder (encoder_levels)
    boxes_0  = learned anchor boxes                     box_refinement
    h_d      = DecoderLayer_d(h_{d-1}, MLP(sine(boxes_{d-1})), memory sampled around boxes_{d-1})
    boxes_d  = sigmoid(Delta_d(h_d) + sigmoid^-1(boxes_{d-1}))
    classes  = sigmoid(Linear(h_d))                     focal_loss
    training: G query groups, each matched one-to-one  query_groups; inference: the first group
    boxes_0  = the best encoder proposals, instead      query_selection (two-stage)
    training: + noised copies of the targets to rebuild  denoising_queries (DN-DETR / DINO)

Each technique is one module, switched off by one `DetrConfig` field (`feature_levels=1`, `last_stage=5`,
`deformable_attention`, `encoder_levels=3`, `box_refinement`, `focal_loss`, `query_groups=1`, `two_stage`,
`denoising_groups=0`); with all of them off
this model computes DETR (`attnkit.detection.detr`) exactly, from the same building blocks. Its
output is the shared one (`pred_logits` in DETR's classes + 1 form, `pred_boxes`,
`aux_outputs`), plus `class_logits` (sigmoid form) with the focal loss, and in training
`group_outputs` with several groups, `enc_outputs` (the proposals) with two-stage and
`dn_outputs` (with their fixed `matches`) with denoising, so the
matcher, post-processing, evaluation and CLI serve it as is.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from attnkit.detection.backbone import Backbone
from attnkit.detection.config import DetrConfig
from attnkit.detection.detr import detr_transformer
from attnkit.detection.hungarian_matcher import MatchCost
from attnkit.detection.set_criterion import LossWeights, SetCriterion
from attnkit.detection.variants.box_refinement import AnchorBoxQueries, LearnedQueries
from attnkit.detection.variants.deformable_transformer import (DeformableDecoderLayer, DeformableEncoder,
                                                               DeformableEncoderLayer)
from attnkit.detection.variants.denoising_queries import (DenoisingCriterion, DenoisingGenerator, DenoisingQueries,
                                                          denoising_attention_mask)
from attnkit.detection.variants.focal_loss import PRIOR_BIAS, FocalSetCriterion, softmax_form
from attnkit.detection.variants.lite_encoder import LiteEncoder
from attnkit.detection.variants.multi_scale_features import FlatLevels, LevelProjection, MultiScaleJoiner
from attnkit.detection.variants.query_groups import GroupCriterion, group_attention_mask, split_groups
from attnkit.detection.variants.query_selection import EncoderProposals
from attnkit.nn import PositionEmbeddingSine2D, TransformerDecoderLayer, TransformerEncoder


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

    def __init__(self, layers: list[nn.Module], norm: nn.LayerNorm,
                 queries: AnchorBoxQueries | LearnedQueries) -> None:
        super().__init__()
        self.layers, self.norm, self.queries = nn.ModuleList(layers), norm, queries

    def forward(self, memory: Tensor, levels: FlatLevels, num_queries: int, self_mask: Tensor | None,
                reference: Tensor | None = None, denoising: DenoisingQueries | None = None,
                groups: int = 1) -> tuple[Tensor, Tensor]:
        """memory: (batch, keys, d_model) -> hidden states (layers, batch, queries, d_model) and boxes
        (layers, batch, queries, 4), each layer's output through the shared final norm (DETR).
        groups: the queries form this many groups that attend apart (given without `self_mask`).
        reference: the first boxes (batch, queries, 4) when chosen per image (two-stage), else the queries' own.
        denoising: training queries placed before the NUM_QUERIES others (their content and boxes are given)."""
        batch = len(memory)
        if reference is None:
            reference = self.queries.initial(batch, num_queries)  # (batch, queries, 4 or 2) or None
        x = memory.new_zeros(batch, num_queries, memory.shape[-1])  # DETR's zero content queries
        if denoising is not None:
            x = torch.cat([denoising.content.to(x.dtype), x], 1)
            reference = torch.cat([denoising.boxes, reference], 1)
        hidden, boxes = [], []
        for index, layer in enumerate(self.layers):
            query_pos = self.queries.query_pos(reference, batch, num_queries)  # (batch, queries, d_model)
            x = layer(x, query_pos, level_reference(reference, levels), memory, levels.pos, levels.key_padding,
                      levels.shapes, self_mask, groups)
            hidden.append(self.norm(x))
            boxes.append(self.queries.boxes(index, hidden[-1], reference))
            reference = boxes[-1].detach() if self.queries.refines else reference
        return torch.stack(hidden), torch.stack(boxes)


def level_reference(reference: Tensor | None, levels: FlatLevels) -> Tensor | None:
    """Image-normalised references (batch, queries, 2 or 4) -> in each level's padded map

    (batch, queries, levels, 2 or 4); None stays None (full attention reads no reference)."""
    if reference is None:
        return None
    if not levels.geometry.padded:  # every map is the whole image
        return reference[:, :, None].expand(-1, -1, len(levels.shapes), -1)
    ratios = levels.valid_ratios if reference.shape[-1] == 2 else torch.cat([levels.valid_ratios] * 2, -1)
    return reference[:, :, None] * ratios[:, None]


class FastDETR(nn.Module):
    """Backbone levels, encoder, query decoder, class head; groups of queries in training only."""

    def __init__(self, backbone: MultiScaleJoiner, input_proj: LevelProjection, encoder: nn.Module,
                 decoder: QueryDecoder, num_classes: int, num_queries: int, groups: int = 1, focal: bool = False,
                 aux_loss: bool = True, proposals: EncoderProposals | None = None,
                 denoising: DenoisingGenerator | None = None) -> None:
        super().__init__()
        self.backbone, self.input_proj, self.encoder, self.decoder = backbone, input_proj, encoder, decoder
        self.proposals, self.denoising = proposals, denoising
        self.num_queries, self.groups, self.focal, self.aux_loss = num_queries, groups, focal, aux_loss
        self.class_embed = nn.Linear(decoder.norm.normalized_shape[0], num_classes + (0 if focal else 1))
        if focal:
            nn.init.constant_(self.class_embed.bias, PRIOR_BIAS)

    def forward(self, images: Tensor, mask: Tensor, targets: Sequence[dict[str, Tensor]] | None = None) -> dict:
        """images (batch, 3, H, W), mask (batch, H, W) True on padding -> the shared detector output.
        targets (per image "labels", "boxes"): read in training by the denoising queries only."""
        levels = self.input_proj(self.backbone(images, mask))
        memory = self.encoder(levels)
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
        per_layer = [self._layer_output(l, b) for l, b in zip(logits, boxes)]
        if denoising is not None:
            dn_layers = [{k: v[:, :denoising.count] for k, v in layer.items()} for layer in per_layer]
            per_layer = [{k: v[:, denoising.count:] for k, v in layer.items()} for layer in per_layer]
        first, *others = split_groups(per_layer, groups)
        output = set_output(first, self.aux_loss)
        if others:
            output["group_outputs"] = [set_output(group, self.aux_loss) for group in others]
        if self.proposals is not None and self.training:
            output["enc_outputs"] = self._layer_output(enc_logits, enc_boxes)
        if denoising is not None:
            output["dn_outputs"] = {**set_output(dn_layers, aux=True), "matches": denoising.matches}
        return output

    def _layer_output(self, logits: Tensor, boxes: Tensor) -> dict[str, Tensor]:
        if not self.focal:
            return {"pred_logits": logits, "pred_boxes": boxes}
        return {"pred_logits": softmax_form(logits), "pred_boxes": boxes, "class_logits": logits}


def set_output(per_layer: list[dict[str, Tensor]], aux: bool) -> dict:
    """The last layer's predictions, the earlier layers' as `aux_outputs` (when AUX)."""
    return {**per_layer[-1], "aux_outputs": per_layer[:-1] if aux else []}


def build_fast_detr(config: DetrConfig, backbone_weights: Path | None = None) -> FastDETR:
    """FastDETR from its config; the technique fields choose the modules."""
    d, levels = config.hidden_dim, config.feature_levels
    position = PositionEmbeddingSine2D(d // 2, normalize=True)
    backbone = MultiScaleJoiner(Backbone(config.backbone, config.dilation, config.frozen_batchnorm, backbone_weights,
                                         config.last_stage), position, levels)
    if config.deformable_attention:
        sizes = (d, config.num_heads, config.dim_feedforward, config.dropout, levels, config.deformable_points)
        encoder_layers = [DeformableEncoderLayer(*sizes) for _ in range(config.enc_layers)]
        encoder = (LiteEncoder(encoder_layers, config.encoder_levels) if config.encoder_levels < levels
                   else DeformableEncoder(encoder_layers))  # every level updated
        layers = [DeformableDecoderLayer(*sizes) for _ in range(config.dec_layers)]
    else:
        transformer = detr_transformer(config)
        encoder, layers = DenseEncoder(transformer.encoder), [DenseDecoderLayer(l) for l in transformer.decoder.layers]
    total = config.num_queries * config.query_groups
    queries = (AnchorBoxQueries(total, d, config.dec_layers, learned_anchors=not config.two_stage)
               if config.box_refinement else LearnedQueries(total, d, with_reference=config.deformable_attention))
    proposals = EncoderProposals(d, config.num_classes, config.focal_loss) if config.two_stage else None
    denoising = (DenoisingGenerator(config.num_classes, d, config.denoising_groups)
                 if config.denoising_groups else None)
    return FastDETR(backbone, LevelProjection(backbone.num_channels, d, backbone.made_levels), encoder,
                    QueryDecoder(layers, nn.LayerNorm(d), queries), config.num_classes, config.num_queries,
                    config.query_groups, config.focal_loss, config.aux_loss, proposals, denoising)


def build_fast_criterion(config: DetrConfig, cost: MatchCost, weights: LossWeights) -> nn.Module:
    """The set criterion the config's techniques need: focal classification, averaged over query groups,
    plus the denoising queries' reconstruction."""
    criterion = (FocalSetCriterion if config.focal_loss else SetCriterion)(config.num_classes, cost, weights)
    grouped = GroupCriterion(criterion) if config.query_groups > 1 else criterion
    return DenoisingCriterion(grouped, criterion) if config.denoising_groups else grouped
