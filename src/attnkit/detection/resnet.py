"""ResNet (He et al. 2016, section 3 and Table 1) of any depths and widths, with torchvision's module names.

    conv1 7x7/2 -> bn1 -> relu -> maxpool 3x3/2 -> layer1 .. layer4     (stride 4, then x2 per later stage)
    basic block:       x + bn2(conv2 3x3(relu(bn1(conv1 3x3(x)))))                  then relu
    bottleneck block:  x + bn3(conv3 1x1(relu(bn2(conv2 3x3(relu(bn1(conv1 1x1(x))))))))  then relu

The first block of a stage that changes the stride or the channels carries `downsample` (1x1 conv + norm) on
its shortcut; a bottleneck strides in its 3x3 convolution (torchvision's and timm's "ResNet v1.5"). A
torchvision-shaped layout (stem 64, widths 64 * 2^i, x4 for bottlenecks, 3 input channels) is built by
torchvision's own `ResNet` with any depths, so named presets draw the same initial weights as before;
any other layout (transformers' `ResNetConfig` with its `embedding_size` and `hidden_sizes`, a greyscale
stem) is built here, with the same names, so its weights load either way. With `dilate_last` the last stage
keeps stride 16 and dilates its 3x3 convolutions by 2 (DC5; bottleneck only, as torchvision).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from torch import Tensor, nn
from torchvision.models import resnet as tv

from attnkit.detection.config import ResNetLayout

NormLayer = Callable[[int], nn.Module]


class BasicBlock(nn.Module):
    """Two 3x3 convolutions and the shortcut (He et al. 2016, Figure 5 left)."""

    def __init__(self, in_channels: int, channels: int, stride: int, norm_layer: NormLayer) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride, padding=1, bias=False)
        self.bn1 = norm_layer(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = norm_layer(channels)
        self.downsample = _shortcut(in_channels, channels, stride, norm_layer)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class Bottleneck(nn.Module):
    """1x1 reduce to a quarter, 3x3 (strided, or dilated), 1x1 expand, and the shortcut (Figure 5 right)."""

    def __init__(self, in_channels: int, channels: int, stride: int, dilation: int, norm_layer: NormLayer) -> None:
        super().__init__()
        inner = channels // 4
        self.conv1 = nn.Conv2d(in_channels, inner, 1, bias=False)
        self.bn1 = norm_layer(inner)
        self.conv2 = nn.Conv2d(inner, inner, 3, stride, padding=dilation, dilation=dilation, bias=False)
        self.bn2 = norm_layer(inner)
        self.conv3 = nn.Conv2d(inner, channels, 1, bias=False)
        self.bn3 = norm_layer(channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _shortcut(in_channels, channels, stride, norm_layer)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


def _shortcut(in_channels: int, channels: int, stride: int, norm_layer: NormLayer) -> nn.Module | None:
    if stride == 1 and in_channels == channels:
        return None  # identity
    return nn.Sequential(nn.Conv2d(in_channels, channels, 1, stride, bias=False), norm_layer(channels))


def build_resnet(layout: ResNetLayout, norm_layer: NormLayer, dilate_last: bool = False) -> nn.Module:
    """The ResNet of LAYOUT without pooling and classifier: children conv1, bn1, relu, maxpool, layer1..layer4."""
    if _torchvision_shaped(layout):
        block = tv.BasicBlock if layout.block == "basic" else tv.Bottleneck
        resnet = tv.ResNet(block, list(layout.depths), norm_layer=norm_layer,
                           replace_stride_with_dilation=[False, False, dilate_last])
        return nn.Sequential(OrderedDict((name, module) for name, module in resnet.named_children()
                                         if name not in ("avgpool", "fc")))
    stem = layout.stem_width
    modules: OrderedDict[str, nn.Module] = OrderedDict(
        conv1=nn.Conv2d(layout.in_channels, stem, 7, 2, padding=3, bias=False), bn1=norm_layer(stem),
        relu=nn.ReLU(inplace=True), maxpool=nn.MaxPool2d(3, 2, padding=1))
    in_channels = stem
    for stage, (depth, width) in enumerate(zip(layout.depths, layout.widths)):
        last = stage == len(layout.depths) - 1
        stride = 1 if stage == 0 or (last and dilate_last) else 2
        blocks = []
        for index in range(depth):
            first, dilation = index == 0, 2 if last and dilate_last and index else 1  # torchvision's DC5
            blocks.append(Bottleneck(in_channels, width, stride if first else 1, dilation, norm_layer)
                          if layout.block == "bottleneck" else
                          BasicBlock(in_channels, width, stride if first else 1, norm_layer))
            in_channels = width
        modules[f"layer{stage + 1}"] = nn.Sequential(*blocks)
    resnet = nn.Sequential(modules)
    for module in resnet.modules():  # torchvision's initialisation
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
    return resnet


def _torchvision_shaped(layout: ResNetLayout) -> bool:
    expansion = 4 if layout.block == "bottleneck" else 1
    widths = tuple(64 * 2 ** i * expansion for i in range(len(layout.depths)))
    return (layout.stem_width, layout.widths, layout.in_channels, len(layout.depths)) == (64, widths, 3, 4)
