"""Importing trained DETR models (Carion et al. 2020): facebookresearch/detr checkpoints and Hugging
Face `DetrForObjectDetection` folders, into an attnkit detection run folder.

attnkit's DETR keeps the official module names (`backbone.0.body.*`, `input_proj`, `query_embed`,
`transformer.{encoder,decoder}.layers.N.*`, `class_embed`, `bbox_embed.layers.N`), so an official
checkpoint's `checkpoint["model"]` loads as it is. A Hugging Face folder is renamed with the
inverse of the published conversion table (transformers' `convert_detr_original_pytorch_checkpoint
_to_pytorch.py`), for both its old (4.x: `out_proj`, `fc1`, timm backbone) and new (5.x: `o_proj`,
`mlp.fc1`, HF ResNet backbone) key layouts; its separate q/k/v projections are packed into torch's
`in_proj_weight`. The backbone's ResNet (block type, blocks and channels per stage, stem width, 1 or 3
input channels: any layout, transformers' DetrModelTester's tiny ones included) and all sizes are read off
the tensors; a torchvision-named layout keeps its name (resnet50), any other is backbone "resnet" with its
backbone_* fields. The number of heads and DC5 are not in the tensors (official: `--heads`, default 8; DC5
from the name; a folder: its config, where a timm backbone's output_stride 16 is DC5 and transformers' own
ResNet is never dilated). What attnkit cannot compute as transformers does (another backbone, activation or
position embedding, a stride in the stem stage or in a bottleneck's 1x1, DETR reading another stage) is
refused with the config field named.
A COCO model's 91 outputs (label = category id, 11 ids unused: "N/A") become COCO's 80 categories
(`category_ids` keeps each label's id), the labels `detect` and `eval detection` use.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from attnkit.app.interop.weights_files import (
    fuse_qkv,
    hf_layer_to_torch,
    load_all_or_nothing,
    read_hf_folder,
    read_torch_file,
)
from attnkit.detection.architectures import build_model
from attnkit.detection.config import RESNETS, DetectionConfig, DetectionTrainConfig, DetrConfig, ResNetLayout
from attnkit.errors import CheckpointError, ConfigError

# COCO 2017 category id -> name; "N/A" where COCO has no category (DETR predicts ids directly, 91 labels).
COCO_91 = ("N/A", "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
           "traffic light", "fire hydrant", "N/A", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
           "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "N/A", "backpack", "umbrella", "N/A",
           "N/A", "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
           "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle", "N/A",
           "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange",
           "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant", "bed",
           "N/A", "dining table", "N/A", "N/A", "toilet", "N/A", "tv", "laptop", "mouse", "remote", "keyboard",
           "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "N/A", "book", "clock", "vase",
           "scissors", "teddy bear", "hair drier", "toothbrush")

# Hugging Face name (after the backbone prefix is handled) -> official name; applied in order, first match wins.
HF_TO_OFFICIAL = [
    (r"^model\.input_projection\.", "input_proj."),
    (r"^model\.query_position_embeddings\.", "query_embed."),
    (r"^class_labels_classifier\.", "class_embed."),
    (r"^bbox_predictor\.layers\.", "bbox_embed.layers."),
    (r"^model\.decoder\.layernorm\.", "transformer.decoder.norm."),
    (r"^model\.encoder\.layernorm\.", "transformer.encoder.norm."),
    (r"^model\.(encoder|decoder)\.layers\.(\d+)\.", r"transformer.\1.layers.\2."),
]
BACKBONE_PREFIXES = ("model.backbone.conv_encoder.model.", "model.backbone.model.")


def read_official_checkpoint(path: Path) -> dict[str, Tensor]:
    """A facebookresearch/detr `.pth`: `checkpoint["model"]` (or a bare state dict), official names."""
    checkpoint = read_torch_file(path)
    state = checkpoint.get("model", checkpoint)
    if not isinstance(state, dict) or "query_embed.weight" not in state:
        raise CheckpointError(f"{path}: not a DETR checkpoint (no model['query_embed.weight'])")
    return {k.removeprefix("module."): v for k, v in state.items() if not k.endswith("num_batches_tracked")}


def hf_to_official(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """A DetrForObjectDetection state dict -> official DETR names (q/k/v packed)."""
    renamed: dict[str, Tensor] = {}
    for name, tensor in tensors.items():
        if name.endswith("num_batches_tracked"):
            continue
        renamed[_official_name(name)] = tensor
    for name in sorted({n.rsplit(".", 2)[0] for n in renamed if re.search(r"\.[qkv]_proj\.", n)}):
        fuse_qkv(renamed, name, name.replace("encoder_attn", "multihead_attn"))
    return renamed


def _official_name(name: str) -> str:
    for prefix in BACKBONE_PREFIXES:
        if name.startswith(prefix):
            return "backbone.0.body." + hf_resnet_to_torchvision(name[len(prefix):])
    for pattern, replacement in HF_TO_OFFICIAL:
        new, count = re.subn(pattern, replacement, name)
        if count:
            name = new
            break
    match = re.match(r"^(transformer\.(encoder|decoder)\.layers\.\d+\.)(.*)$", name)
    if match:
        head, side, rest = match.groups()
        name = head + hf_layer_to_torch(rest, side)
    return name


def hf_resnet_to_torchvision(name: str) -> str:
    """transformers' ResNet names (`embedder.embedder.convolution`, `encoder.stages.S.layers.L.layer.I`) ->
    torchvision's (`conv1`, `layer{S+1}.L.conv{I+1}`); timm/torchvision names pass unchanged."""
    name = re.sub(r"^embedder\.embedder\.convolution\.", "conv1.", name)
    name = re.sub(r"^embedder\.embedder\.normalization\.", "bn1.", name)
    match = re.match(r"^encoder\.stages\.(\d+)\.layers\.(\d+)\.(.*)$", name)
    if not match:
        return name
    stage, block, rest = match.groups()
    rest = re.sub(r"^shortcut\.convolution\.", "downsample.0.", rest)
    rest = re.sub(r"^shortcut\.normalization\.", "downsample.1.", rest)
    rest = re.sub(r"^layer\.(\d+)\.convolution\.", lambda m: f"conv{int(m.group(1)) + 1}.", rest)
    rest = re.sub(r"^layer\.(\d+)\.normalization\.", lambda m: f"bn{int(m.group(1)) + 1}.", rest)
    return f"layer{int(stage) + 1}.{block}.{rest}"


def resnet_layout(tensors: dict[str, Tensor]) -> ResNetLayout:
    """The ResNet the official-named `tensors` hold (`backbone.0.body.*`): block type, blocks and output channels
    per stage, stem and input channels, read off the tensors' shapes. CheckpointError for what attnkit's ResNet
    (attnkit.detection.resnet) cannot hold."""
    body = "backbone.0.body."
    depths = tuple(len({k[len(f"{body}layer{i}."):].split(".")[0] for k in tensors if k.startswith(f"{body}layer{i}.")})
                   for i in range(1, 6))
    if depths[4] or not all(depths[:4]):
        raise CheckpointError(f"the backbone has {sum(1 for d in depths if d)} ResNet stages; attnkit's has 4 "
                              f"(layer1..layer4)")
    block: Literal["basic", "bottleneck"] = "bottleneck" if f"{body}layer1.0.conv3.weight" in tensors else "basic"
    last = "conv3" if block == "bottleneck" else "conv2"
    widths = tuple(tensors[f"{body}layer{i}.0.{last}.weight"].shape[0] for i in range(1, 5))
    inner = tuple(tensors[f"{body}layer{i}.0.conv1.weight"].shape[0] for i in range(1, 5))
    if block == "bottleneck" and inner != tuple(width // 4 for width in widths):
        raise CheckpointError(f"bottleneck widths {list(inner)} are not a quarter of the stages' {list(widths)} "
                              f"(a wide or grouped ResNet); attnkit's bottleneck has a quarter")
    stem_width, in_channels = tensors[f"{body}conv1.weight"].shape[:2]
    return ResNetLayout(block, depths[:4], widths, stem_width, in_channels)


def backbone_fields(layout: ResNetLayout) -> dict[str, Any]:
    """DetrConfig's backbone fields for LAYOUT: a named ResNet where it is one, else backbone "resnet"."""
    named = [name for name, known in RESNETS.items() if known == replace(layout, in_channels=3)]
    fields: dict[str, Any] = {"backbone": named[0]} if named else {
        "backbone": "resnet", "backbone_block": layout.block, "backbone_depths": layout.depths,
        "backbone_widths": layout.widths, "backbone_stem_width": layout.stem_width}
    return {**fields, "num_channels": layout.in_channels}


def infer_config(tensors: dict[str, Tensor], num_heads: int = 8, dilation: bool = False) -> DetrConfig:
    """The DetrConfig the official-named `tensors` were trained with (sizes read off their shapes)."""
    def count(prefix: str) -> int:
        return len({k[len(prefix):].split(".")[0] for k in tensors if k.startswith(prefix)})

    try:
        hidden_dim = tensors["query_embed.weight"].shape[1]
        return DetrConfig(
            num_classes=tensors["class_embed.weight"].shape[0] - 1, **backbone_fields(resnet_layout(tensors)),
            dilation=dilation, frozen_batchnorm=True, hidden_dim=hidden_dim, num_heads=num_heads,
            enc_layers=count("transformer.encoder.layers."), dec_layers=count("transformer.decoder.layers."),
            dim_feedforward=tensors["transformer.decoder.layers.0.linear1.weight"].shape[0],
            num_queries=tensors["query_embed.weight"].shape[0],
            pre_norm="transformer.encoder.norm.weight" in tensors)
    except KeyError as error:
        raise CheckpointError(f"not a DETR state dict: no tensor {error}") from None


def hf_backbone_dilation(hf_config: dict[str, Any], source: str) -> bool:
    """Whether the folder's backbone dilates its last stage; CheckpointError naming the config field of a backbone
    attnkit's ResNet cannot compute as transformers does.

    transformers builds either a timm model (`use_timm_backbone`, 4.x; backbone_config.model_type "timm_backbone",
    5.x; torchvision's names), dilated when `dilation` (4.x) or `output_stride` 16 (5.x), or its own ResNetBackbone
    (model_type "resnet"), which has no dilation (transformers ignores `dilation` there: so does the import).
    """
    backbone = hf_config.get("backbone_config") or {}
    kind = backbone.get("model_type") or ("timm_backbone" if hf_config.get("use_timm_backbone", True) else "resnet")
    if hf_config.get("position_embedding_type", "sine") != "sine":
        raise CheckpointError(f"{source}: position_embedding_type {hf_config['position_embedding_type']!r}; "
                              f"attnkit's DETR has the sine positions")
    if kind == "resnet":
        problems = [f"backbone_config.{name} {backbone.get(name)!r} (attnkit: {value!r})" for name, value in
                    (("hidden_act", "relu"), ("downsample_in_first_stage", False), ("downsample_in_bottleneck", False))
                    if backbone.get(name, value) != value and not (name == "downsample_in_bottleneck"
                                                                   and backbone.get("layer_type") == "basic")]
        if len(backbone.get("depths") or [3, 4, 6, 3]) != 4:
            problems.append(f"backbone_config.depths {backbone['depths']} (attnkit's ResNet has 4 stages)")
        elif (backbone.get("out_features") or ["stage4"])[-1] != "stage4":
            problems.append(f"backbone_config.out_features {backbone['out_features']} (DETR reads the last; "
                            f"attnkit: stage4)")
        if problems:
            raise CheckpointError(f"{source}: cannot import this ResNet backbone: {'; '.join(problems)}")
        return False
    if kind != "timm_backbone":
        raise CheckpointError(f"{source}: backbone_config.model_type {kind!r}; attnkit's DETR backbone is a ResNet "
                              f"(transformers' 'resnet', or a timm ResNet)")
    name = str(backbone.get("backbone") or hf_config.get("backbone") or "resnet50")
    if not re.fullmatch(r"resnet\d+", name.removeprefix("timm/").split(".")[0]):
        raise CheckpointError(f"{source}: backbone {name!r} (timm): attnkit's DETR backbone is a plain ResNet "
                              f"(timm's resnet18, resnet34, resnet50, resnet101, ...)")
    if (backbone.get("out_indices") or [4])[-1] != 4:
        raise CheckpointError(f"{source}: backbone_config.out_indices {backbone['out_indices']}: DETR reads the "
                              f"last feature map, attnkit's is layer4 (out index 4)")
    stride = (backbone.get("output_stride") if backbone else 16 if hf_config.get("dilation") else None) or 32
    if stride not in (16, 32):
        raise CheckpointError(f"{source}: backbone_config.output_stride {stride}; attnkit's ResNet has 32, or 16 "
                              f"with dilation (DC5)")
    return stride == 16


def read_detr(path: Path, num_heads: int | None = None, dilation: bool | None = None):
    """(DetrConfig, official-named tensors, class names) from an official `.pth` or a Hugging Face folder."""
    path = Path(path)
    if path.is_dir():
        hf_config, weights = read_hf_folder(path)
        if hf_config.get("model_type", "detr") != "detr":
            raise CheckpointError(f"{path}: model_type is {hf_config.get('model_type')!r}, not 'detr'")
        if hf_config.get("activation_function", "relu") != "relu":
            raise CheckpointError(f"{path}: activation {hf_config['activation_function']!r}; DETR uses relu")
        dilated = hf_backbone_dilation(hf_config, str(path))
        tensors = hf_to_official(weights)
        heads = num_heads or hf_config.get("encoder_attention_heads", 8)
        config = infer_config(tensors, heads, dilated if dilation is None else dilation)
        labels = hf_config.get("id2label") or {}
        names = tuple(labels.get(str(i), labels.get(i, str(i))) for i in range(config.num_classes))
    else:
        tensors = read_official_checkpoint(path)
        config = infer_config(tensors, num_heads or 8, "dc5" in path.name.lower() if dilation is None else dilation)
        names = COCO_91 if config.num_classes == len(COCO_91) else tuple(str(i) for i in range(config.num_classes))
    return config, tensors, names


def drop_unused_labels(config: DetrConfig, tensors: dict[str, Tensor], names):
    """Drop the class outputs named "N/A" (COCO ids without a category: never a training target).

    The official and Hugging Face COCO models predict category ids directly (91 labels, 11 unused);
    attnkit's labels are the dataset's categories in order, as `eval detection` reads COCO. Returns
    (config, tensors, names, category_ids): label i is category id category_ids[i].
    """
    keep = [label for label, name in enumerate(names) if name != "N/A"]
    if len(keep) == len(names):
        return config, tensors, names, list(range(len(names)))
    rows = torch.tensor(keep + [config.num_classes])  # the real classes, then "no object"
    tensors = {**tensors, **{k: tensors[k][rows] for k in ("class_embed.weight", "class_embed.bias")}}
    return replace(config, num_classes=len(keep)), tensors, [names[i] for i in keep], keep


def import_detr(path: Path, out: Path, num_heads: int | None = None, dilation: bool | None = None):
    """Write an attnkit detection run folder at `out` from a DETR checkpoint or HF folder; returns the RunFolder."""
    from attnkit.storage import RunFolder, save_weights

    config, tensors, names = read_detr(Path(path), num_heads, dilation)
    config, tensors, names, category_ids = drop_unused_labels(config, tensors, names)
    model = build_model(config)
    load_all_or_nothing(model, tensors, str(path))  # names every unmatched, missing or mis-shaped tensor
    run_config = DetectionConfig(model=config, train=DetectionTrainConfig(), preset="imported", data="coco",
                                 class_names=tuple(names), category_ids=tuple(category_ids))
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} already exists and is not empty; choose another --out")
    run = RunFolder.create(out, "detection", {**run_config.to_dict(), "imported_from": str(path)})
    metadata = {"imported_from": str(path)}
    save_weights(run.last_weights, model.state_dict(), metadata)
    save_weights(run.best_weights, model.state_dict(), metadata)
    return run
