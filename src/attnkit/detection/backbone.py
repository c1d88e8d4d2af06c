"""The CNN backbone of DETR (Carion et al. 2020, section 3.2): a ResNet's stride-32 feature map.

A ResNet (He et al. 2016; attnkit.detection.resnet: torchvision's, or any depths and widths, 1 or 3
input channels) without its pooling and classifier; `body` keeps torchvision's layer names (conv1, bn1,
layer1..layer4), as facebookresearch/detr's `Backbone` does, so `backbone.0.body.*` of a DETR checkpoint
loads unchanged. Trained from scratch it uses ordinary, trainable BatchNorm; from a pretrained weights file
the user supplies, it uses FrozenBatchNorm2d (statistics and affine terms fixed) and, as DETR, leaves conv1
and layer1 frozen. With `dilation` the last stage is dilated (DC5: stride 16). With `last_stage=4` the ResNet
stops after C4 (stride 16): layer4 is neither built nor run. Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.models._utils import IntermediateLayerGetter
from torchvision.ops.misc import FrozenBatchNorm2d

from attnkit.detection.config import RESNETS, ResNetLayout
from attnkit.detection.resnet import build_resnet
from attnkit.errors import CheckpointError, ConfigError
from attnkit.nn import PositionEmbeddingSine2D


class Backbone(nn.Module):
    """images (batch, channels, height, width) -> features (batch, channels, height / stride, width / stride).

    RESNET: a named torchvision ResNet ("resnet50", config.RESNETS) or any layout (attnkit.detection.resnet).
    """

    def __init__(self, resnet: str | ResNetLayout, dilation: bool = False, frozen_batchnorm: bool = False,
                 weights: Path | None = None, last_stage: int = 5) -> None:
        super().__init__()
        frozen_batchnorm = frozen_batchnorm or weights is not None
        norm_layer = FrozenBatchNorm2d if frozen_batchnorm else nn.BatchNorm2d
        layout = RESNETS[resnet] if isinstance(resnet, str) else resnet
        if dilation and layout.block == "basic":
            raise ConfigError("dilation (DC5) needs a bottleneck ResNet; this one has basic blocks")
        network = build_resnet(layout, norm_layer, dilate_last=dilation)
        if weights is not None:
            load_resnet_weights(network, Path(weights))
        if frozen_batchnorm:  # a pretrained backbone: conv1 and layer1 stay as they are (DETR)
            for parameter_name, parameter in network.named_parameters():
                if not parameter_name.startswith(("layer2", "layer3", "layer4")):
                    parameter.requires_grad_(False)
        # the layers after the returned one are dropped (C5 = layer4, C4 = layer3)
        self.body = IntermediateLayerGetter(network, return_layers={f"layer{last_stage - 1}": "0"})
        self.num_channels = stage_channels(self.body, f"layer{last_stage - 1}")
        self.stride = 16 if dilation or last_stage == 4 else 32

    def train(self, mode: bool = True) -> Backbone:
        """Set the mode, and lay the convolution weights out for it: channels-last for inference, contiguous
        for training (BENCHMARKS.md, "Backbone layout").

        oneDNN re-lays contiguous weights out on every call, which dominates small-batch inference
        (channels-last: 1.3-1.55x faster at batch 1 on a CPU); in training, fused AdamW and the convolutions'
        backward are slower on channels-last weights (a step 6-7% slower). Moving keeps every Parameter
        object, so an optimizer's references stay valid; it steps in training mode, where its moments and the
        weights share one layout. Inputs stay as given; saved weights are written contiguous."""
        super().train(mode)
        layout = torch.contiguous_format if mode else torch.channels_last
        if not self.body.conv1.weight.is_contiguous(memory_format=layout):
            self.body.to(memory_format=layout)
        return self

    def forward(self, images: Tensor) -> Tensor:
        return self.body(images)["0"]  # (batch, channels, height / stride, width / stride)


def fold_batch_norms(module: nn.Module) -> nn.Module:
    """MODULE (in place, in eval mode) with every BatchNorm folded into the convolution before it (the ResNet's conv1
    and bn1, conv2 and bn2, conv3 and bn3; a Sequential(conv, norm): a downsample's, the cross-scale fusion's) and
    replaced by Identity. At inference the statistics
    are fixed, so BN(conv(x)) is one convolution with rescaled weights and a bias (`fuse_conv_bn_eval`): one pass
    over each feature map fewer, as ONNX Runtime's graph optimizer folds them. For inference only: the folded
    model cannot train or save weights in the run's layout."""
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    norms = (nn.BatchNorm2d, FrozenBatchNorm2d)
    module.eval()
    for parent in list(module.modules()):
        pairs = [(f"conv{i}", f"bn{i}") for i in (1, 2, 3)]
        if isinstance(parent, nn.Sequential) and len(parent) == 2 and isinstance(parent[1], norms):
            pairs.append(("0", "1"))  # a downsample: Sequential(conv, norm)
        for conv_name, norm_name in pairs:
            conv, norm = getattr(parent, conv_name, None), getattr(parent, norm_name, None)
            if isinstance(conv, nn.Conv2d) and isinstance(norm, norms):
                setattr(parent, conv_name, fuse_conv_bn_eval(conv, norm))
                setattr(parent, norm_name, nn.Identity())
    return module


def stage_channels(body: nn.Module, stage: str) -> int:
    """A ResNet stage's output channels: its last convolution's (a basic block's conv2, a bottleneck's conv3)."""
    convolutions = [m for m in body.get_submodule(stage).modules() if isinstance(m, nn.Conv2d)]
    return convolutions[-1].out_channels


def load_resnet_weights(resnet: nn.Module, path: Path) -> None:
    """Load a local torchvision-ResNet state dict (`.pth` read with weights_only=True, or `.safetensors`).

    The classifier (`fc.*`) is ignored; a DETR checkpoint's `backbone.0.body.` prefix is accepted.
    """
    tensors: Any  # a state dict, a checkpoint holding one, or whatever else the file holds
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file
            tensors = load_file(str(path))
        else:
            tensors = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: backbone weights file not found") from None
    except Exception as error:  # noqa: BLE001 - any unreadable file is the user's to fix
        raise CheckpointError(f"{path}: cannot read backbone weights ({error})") from None
    if isinstance(tensors, dict) and isinstance(tensors.get("model"), dict):
        tensors = tensors["model"]  # a DETR checkpoint
    if not isinstance(tensors, dict):
        raise CheckpointError(f"{path}: expected a state dict of tensors")
    tensors = {k.removeprefix("backbone.0.body."): v for k, v in tensors.items() if not k.startswith("fc.")}
    expected = {k: v for k, v in resnet.state_dict().items() if not k.startswith("fc.")}
    missing = [k for k in expected if k not in tensors]
    misshaped = [k for k in expected if k in tensors and tensors[k].shape != expected[k].shape]
    unexpected = [k for k in tensors if k not in expected and not k.endswith("num_batches_tracked")]
    if missing or misshaped or unexpected:
        raise CheckpointError(f"{path} does not fit this ResNet: missing {missing[:5]}, mis-shaped {misshaped[:5]}, "
                              f"unexpected {unexpected[:5]}")
    resnet.load_state_dict({k: tensors[k] for k in expected}, strict=False)


class Joiner(nn.Sequential):
    """Backbone and position embedding; DETR's `backbone` (`backbone.0` is the ResNet, `backbone.1` the positions)."""

    def __init__(self, backbone: Backbone, position_embedding: PositionEmbeddingSine2D) -> None:
        super().__init__(backbone, position_embedding)
        self.num_channels = backbone.num_channels

    def forward(self, images: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:  # type: ignore[override]
        """images (batch, channels, H, W), mask (batch, H, W) True on padding -> features (batch, channels, h, w),
        the mask at feature resolution (batch, h, w) and positions (batch, hidden, h, w)."""
        features = self[0](images)
        mask = F.interpolate(mask[None].float(), size=features.shape[-2:])[0].bool()  # (batch, h, w)
        return features, mask, self[1](mask, dtype=torch.float32)  # float32 positions, also under autocast
