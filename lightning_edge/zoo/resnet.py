"""ResNet-18 and ResNet-50, layer for layer as torchvision defines them.

Source: K. He, X. Zhang, S. Ren, J. Sun, "Deep Residual Learning for Image Recognition", CVPR 2016
(arXiv:1512.03385), in the torchvision ``models/resnet.py`` variant ("ResNet V1.5": the stride-2 of a
bottleneck sits on the 3x3 conv). Module names match torchvision, so torchvision state dicts load as-is.

Faithful to torchvision, the blocks use ``nn.ReLU(inplace=True)`` and ``out += identity``; both are
autograd-safe, and profilers should expect them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ._common import DeviceLike, finish, image_inputs, on_device

__all__ = [
    "BasicBlock",
    "Bottleneck",
    "ResNet",
    "resnet18",
    "resnet50",
    "resnet18_inputs",
    "resnet50_inputs",
    "RESNET18_PARAMS",
    "RESNET50_PARAMS",
]

#: torchvision ``resnet18`` (1000 classes): conv/bn/fc weights and biases, BN running stats excluded.
RESNET18_PARAMS = 11_689_512
#: torchvision ``resnet50`` (1000 classes).
RESNET50_PARAMS = 25_557_032


def conv3x3(
    in_planes: int, out_planes: int, stride: int = 1, groups: int = 1, dilation: int = 1
) -> nn.Conv2d:
    """3x3 convolution with padding, no bias (a BatchNorm follows)."""
    return nn.Conv2d(
        in_planes,
        out_planes,
        kernel_size=3,
        stride=stride,
        padding=dilation,
        groups=groups,
        bias=False,
        dilation=dilation,
    )


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    """1x1 convolution, no bias."""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convs with an identity (or 1x1 projection) shortcut; used by ResNet-18/34."""

    expansion: int = 1

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride, V1.5), 1x1 expand by 4; used by ResNet-50/101/152."""

    expansion: int = 4

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        groups: int = 1,
        base_width: int = 64,
        dilation: int = 1,
    ) -> None:
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride, groups, dilation)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """The ImageNet ResNet: 7x7 stem, max-pool, four stages of residual blocks, global pool, FC."""

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        layers: list[int],
        num_classes: int = 1000,
        zero_init_residual: bool = False,
    ) -> None:
        super().__init__()
        self.inplanes = 64
        self.dilation = 1
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

        # torchvision's init; nn.init works on meta tensors (it just records nothing).
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, Bottleneck):
                    nn.init.constant_(m.bn3.weight, 0)
                elif isinstance(m, BasicBlock):
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(
        self, block: type[BasicBlock] | type[Bottleneck], planes: int, blocks: int, stride: int = 1
    ) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers: list[nn.Module] = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers.extend(block(self.inplanes, planes) for _ in range(1, blocks))
        return nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        """``x``: images ``(N, 3, H, W)`` (224x224 for ImageNet); returns logits ``(N, num_classes)``."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(num_classes: int = 1000, device: DeviceLike = None, dtype: torch.dtype | None = None) -> ResNet:
    """ResNet-18 (BasicBlock x [2, 2, 2, 2]); 11,689,512 parameters at 1000 classes, as torchvision.

    Built directly on ``device`` (``"meta"`` allocates nothing); randomly initialised, no weights are loaded.
    """
    with on_device(device):
        model = ResNet(BasicBlock, [2, 2, 2, 2], num_classes=num_classes)
    return finish(model, dtype)


def resnet50(num_classes: int = 1000, device: DeviceLike = None, dtype: torch.dtype | None = None) -> ResNet:
    """ResNet-50 (Bottleneck x [3, 4, 6, 3]); 25,557,032 parameters at 1000 classes, as torchvision."""
    with on_device(device):
        model = ResNet(Bottleneck, [3, 4, 6, 3], num_classes=num_classes)
    return finish(model, dtype)


resnet18_inputs = resnet50_inputs = image_inputs
