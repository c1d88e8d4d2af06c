"""DETR: DEtection TRansformer (Carion et al. 2020, section 3.2, Figure 2).

    features = CNN(image)                           (batch, C, H/32, W/32)
    src      = Conv1x1(features)                    input_proj: C -> d, flattened to (batch, HW, d)
    memory   = Encoder(src, pos)                    2-D sine positions added to queries and keys
    hs       = Decoder(queries = 0, memory, query_pos = learned object queries, pos)
    classes  = Linear(hs)                           (batch, queries, classes + 1), last = "no object"
    boxes    = sigmoid(MLP_3(hs))                   (batch, queries, 4) normalised cx, cy, w, h

All N object queries are decoded in parallel; every decoder layer's output goes through the shared
heads for the auxiliary losses. Names follow facebookresearch/detr (`backbone.0.body`,
`input_proj`, `query_embed`, `transformer.encoder/decoder`, `class_embed`, `bbox_embed.layers`),
so its checkpoints map onto this module.

The interface every detector in attnkit shares: `model(images, mask)` with images
(batch, 3, height, width) and mask (batch, height, width), True on padding, returns a
`DetectionOutput` (attnkit.detection.output): the last layer's logits and boxes, the others' as `aux`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.detection.backbone import Backbone, Joiner
from attnkit.detection.config import DetrConfig
from attnkit.detection.output import DetectionOutput, SetPrediction
from attnkit.nn import (
    PositionEmbeddingSine2D,
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)


class MLP(nn.Module):
    """A plain multi-layer perceptron with ReLU between layers (DETR's box head: 3 layers)."""

    def __init__(self, input_dim: int, hidden_dim: int, output_dim: int, num_layers: int) -> None:
        super().__init__()
        sizes = [input_dim] + [hidden_dim] * (num_layers - 1)
        self.layers = nn.ModuleList(nn.Linear(n, k) for n, k in zip(sizes, sizes[1:] + [output_dim]))

    def forward(self, x: Tensor) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = F.relu(layer(x)) if i < len(self.layers) - 1 else layer(x)
        return x


def detr_transformer(config: DetrConfig) -> Transformer:
    """DETR's encoder-decoder: an encoder norm only when pre-norm, a final decoder norm, all layers returned."""
    layer: dict[str, Any] = {"d_model": config.hidden_dim, "nhead": config.num_heads,
                             "dim_feedforward": config.dim_feedforward, "dropout": config.dropout,
                             "norm_first": config.pre_norm, "batch_first": True}
    encoder = TransformerEncoder(TransformerEncoderLayer(**layer), max(config.enc_layers, 1),
                                 nn.LayerNorm(config.hidden_dim) if config.pre_norm else None)
    if config.enc_layers == 0:
        encoder.layers = nn.ModuleList()
    decoder = TransformerDecoder(TransformerDecoderLayer(**layer), config.dec_layers,
                                 nn.LayerNorm(config.hidden_dim), return_intermediate=True)
    return Transformer(config.hidden_dim, config.num_heads, batch_first=True, custom_encoder=encoder,
                       custom_decoder=decoder)


class DETR(nn.Module):
    """Backbone, Transformer, learned object queries and the class and box heads (Figure 2)."""

    def __init__(self, backbone: Joiner, transformer: Transformer, num_classes: int, num_queries: int,
                 aux_loss: bool = True) -> None:
        super().__init__()
        hidden_dim = transformer.d_model
        self.backbone, self.transformer, self.aux_loss = backbone, transformer, aux_loss
        self.input_proj = nn.Conv2d(backbone.num_channels, hidden_dim, kernel_size=1)
        self.query_embed = nn.Embedding(num_queries, hidden_dim)  # the object queries (positional)
        self.class_embed = nn.Linear(hidden_dim, num_classes + 1)
        self.bbox_embed = MLP(hidden_dim, hidden_dim, 4, 3)

    def forward(self, images: Tensor, mask: Tensor, targets: object = None) -> DetectionOutput:
        """images (batch, 3, H, W), mask (batch, H, W) True on padding; targets: unread (the paper's
        model learns from the loss alone; variants with denoising queries read them)."""
        features, mask, pos = self.backbone(images, mask)  # (batch, C, h, w), (batch, h, w), (batch, d, h, w)
        src = self.input_proj(features).flatten(2).transpose(1, 2)  # (batch, h*w, d_model)
        pos = pos.flatten(2).transpose(1, 2)  # (batch, h*w, d_model)
        padding = mask.flatten(1)  # (batch, h*w), True = padding
        memory = self.transformer.encoder(src, src_key_padding_mask=padding, pos=pos)  # (batch, h*w, d_model)
        query_pos = self.query_embed.weight.unsqueeze(0).expand(len(src), -1, -1)  # (batch, queries, d_model)
        hs = self.transformer.decoder(query_pos.new_zeros(query_pos.shape), memory, memory_key_padding_mask=padding,
                                      pos=pos, query_pos=query_pos)  # (layers, batch, queries, d_model)
        logits = self.class_embed(hs)  # (layers, batch, queries, classes + 1)
        boxes = self.bbox_embed(hs).sigmoid()  # (layers, batch, queries, 4)
        return heads_output(logits, boxes, self.aux_loss)


def heads_output(logits: Tensor, boxes: Tensor, aux: bool = True) -> DetectionOutput:
    """The shared output from per-layer predictions: logits (layers, batch, queries, classes + 1) and boxes
    (layers, batch, queries, 4); the earlier layers' as `aux` when AUX."""
    return DetectionOutput.from_layers([SetPrediction(*layer) for layer in zip(logits, boxes)], aux)


def build_detr(config: DetrConfig, backbone_weights: Path | None = None) -> DETR:
    """DETR from its config; BACKBONE_WEIGHTS: an optional local pretrained ResNet file."""
    position = PositionEmbeddingSine2D(config.hidden_dim // 2, normalize=True)
    resnet = Backbone(config.resnet_layout, config.dilation, config.frozen_batchnorm, backbone_weights)
    backbone = Joiner(resnet, position)
    return DETR(backbone, detr_transformer(config), config.num_classes, config.num_queries, config.aux_loss)
