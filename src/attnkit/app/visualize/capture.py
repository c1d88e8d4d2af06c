"""Attention weights of a whole model, per layer and head, for pictures: translation and detection.

Built on `attnkit.nn.capture_attention` (and the RNN baseline's `capture_alignment`): hooks that
ask each attention module for its weights only inside the `with` block, so a model run without
capture takes the fast path unchanged. The functions here run the model once, collect the weights
and arrange them by what they mean:

  translation  encoder self-attention (source x source), decoder masked self-attention
               (target x target) and the encoder-decoder ("cross") attention, target x source: the
               alignment of Bahdanau et al. 2015, Figure 3, and of Vaswani et al. 2017, Figures 3-5;
  detection    encoder self-attention between feature-map cells (Carion et al. 2020, Figure 3) and
               each object query's decoder attention over the feature map (Figure 6), reshaped to
               (height, width).

Every tensor is (batch, heads, queries, keys) as in `nn.MultiheadAttention(average_attn_weights=False)`;
rows sum to one and padded keys get weight zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.detection.output import DetectionOutput
from attnkit.errors import UserError
from attnkit.nn import capture_attention

_NOT_DENSE = ("{} has no dense attention over one feature map to draw (deformable attention samples a few "
              "points per query instead); attention maps are drawn for DETR (--arch detr)")
_LAYER = re.compile(r"(?:^|\.)(encoder|decoder)\.layers\.(\d+)\.(self_attn|multihead_attn)$")


@dataclass(frozen=True)
class TranslationWeights:
    """A translation model's attention for one teacher-forced batch; each list has one entry per layer."""

    logits: Tensor        # (batch, target, vocab)
    encoder: list[Tensor]  # (batch, heads, source, source)
    decoder: list[Tensor]  # (batch, heads, target, target): masked, no weight on later positions
    cross: list[Tensor]    # (batch, heads, target, source): what each target position reads in the source

    def alignment(self) -> Tensor:
        """The cross-attention averaged over layers and heads: (batch, target, source)."""
        return torch.stack([layer.mean(1) for layer in self.cross]).mean(0)


@dataclass(frozen=True)
class DetectionWeights:
    """A detector's attention for one batch of images; each list has one entry per layer."""

    outputs: DetectionOutput       # the model's usual output: logits, boxes, aux
    feature_size: tuple[int, int]  # (height, width) of the feature map the Transformer reads
    encoder: list[Tensor]          # (batch, heads, cells, cells), cells = height * width, row-major
    decoder: list[Tensor]          # (batch, heads, queries, queries): object queries attending to each other
    cross: list[Tensor]            # (batch, heads, queries, height, width): each query's look at the image


def attention_layers(captured: dict[str, Tensor]) -> dict[str, list[Tensor]]:
    """Sort `capture_attention`'s {module name: weights} into "encoder", "decoder" and "cross" lists, by layer."""
    found: dict[str, list[tuple[int, Tensor]]] = {"encoder": [], "decoder": [], "cross": []}
    for name, weights in captured.items():
        match = _LAYER.search(name)
        if match is None:
            continue
        part, layer, module = match.group(1), int(match.group(2)), match.group(3)
        found["cross" if module == "multihead_attn" else part].append((layer, weights))
    return {part: [weights for _, weights in sorted(layers, key=lambda item: item[0])]
            for part, layers in found.items()}


@torch.no_grad()
def capture_translation(model: nn.Module, source: Tensor, target_input: Tensor) -> TranslationWeights:
    """Run `model(source, target_input)` (ids, (batch, source) and (batch, target)) and keep its attention.

    For a Transformer: every layer's encoder, decoder and cross-attention, each head. For the RNN
    baseline (additive attention): one cross-attention "layer" with one head, and no self-attention.
    """
    from attnkit.baselines.bahdanau_rnn import capture_alignment

    with capture_attention(model) as captured, capture_alignment(model) as aligned:
        logits = model(source, target_input)
    layers = attention_layers(captured)
    if aligned:
        layers["cross"] = [aligned[name] for name in sorted(aligned)]
    if not layers["cross"]:
        raise UserError(f"{type(model).__name__} has no encoder-decoder attention to capture")
    return TranslationWeights(logits, layers["encoder"], layers["decoder"], layers["cross"])


@torch.no_grad()
def capture_detection(model: nn.Module, images: Tensor, mask: Tensor) -> DetectionWeights:
    """Run `model(images, mask)` ((batch, 3, H, W), True on padding) and keep its attention.

    The feature map's size is read from the model's `input_proj` (DETR's 1x1 convolution after the
    backbone), so the decoder's attention over the flattened map can be folded back to (height, width).
    """
    projection = getattr(model, "input_proj", None)
    if not isinstance(projection, nn.Conv2d):
        raise UserError(_NOT_DENSE.format(type(model).__name__))
    sizes: list[tuple[int, int]] = []
    handle = projection.register_forward_hook(lambda module, args, out: sizes.append(tuple(out.shape[-2:])))
    try:
        with capture_attention(model) as captured:
            outputs = model(images, mask)
    finally:
        handle.remove()
    layers = attention_layers(captured)
    if not layers["cross"] or not sizes:
        raise UserError(_NOT_DENSE.format(type(model).__name__))
    height, width = sizes[-1]
    cross = [weights.unflatten(-1, (height, width)) for weights in layers["cross"]]  # (batch, heads, queries, h, w)
    return DetectionWeights(outputs, (height, width), layers["encoder"], layers["decoder"], cross)


@dataclass(frozen=True)
class SentenceAttention:
    """One sentence pair's attention with the tokens that label its axes (batch index 0 of `weights`)."""

    source_tokens: list[str]  # the source's subword tokens and </s>: the keys of the cross-attention
    target_tokens: list[str]  # the tokens the decoder produced at each position, ending in </s>
    weights: TranslationWeights

    @property
    def target_input_tokens(self) -> list[str]:
        """What the decoder read at each position, <s> y_1 ... y_n: the keys of its self-attention."""
        return ["<s>"] + self.target_tokens[:-1]


def sentence_attention(model: nn.Module, tokenizer, source_text: str, target_text: str,
                       max_length: int = 256) -> SentenceAttention:
    """The attention of `model` translating SOURCE_TEXT into TARGET_TEXT (teacher-forced: usually the
    model's own translation, so the pictures show what it looked at while producing each token)."""
    from attnkit.translation.tokenizer import BOS_ID, EOS_ID

    source_ids = tokenizer.encode_source([source_text])[0][:max_length - 1] + [EOS_ID]
    target_ids = tokenizer.encode_target([target_text])[0][:max_length - 1]
    device = next(model.parameters()).device
    source = torch.tensor([source_ids], device=device)  # (1, source)
    target_input = torch.tensor([[BOS_ID] + target_ids], device=device)  # (1, target): <s> y_1 ... y_n
    was_training = model.training
    model.eval()
    try:
        weights = capture_translation(model, source, target_input)
    finally:
        model.train(was_training)
    return SentenceAttention([tokenizer.source.id_to_token(i) for i in source_ids],
                             [tokenizer.target.id_to_token(i) for i in target_ids + [EOS_ID]], weights)
