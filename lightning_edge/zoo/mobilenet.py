"""MobileNetV2 and MobileNetV3-Large, layer for layer as torchvision defines them.

Sources:
- M. Sandler et al., "MobileNetV2: Inverted Residuals and Linear Bottlenecks", CVPR 2018 (arXiv:1801.04381),
  torchvision ``models/mobilenetv2.py``.
- A. Howard et al., "Searching for MobileNetV3", ICCV 2019 (arXiv:1905.02244), torchvision
  ``models/mobilenetv3.py`` (``mobilenet_v3_large``): hard-swish activations and squeeze-excitation blocks
  gated by hard-sigmoid, BatchNorm eps=1e-3 / momentum=0.01.

Module names match torchvision (``features.N...``, ``classifier.N``), so torchvision state dicts load as-is.
Faithful to torchvision, activations are in-place and V3 blocks add their residual with ``+=``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor, nn

from ._common import DeviceLike, finish, image_inputs, on_device

__all__ = [
    "Conv2dNormActivation",
    "SqueezeExcitation",
    "InvertedResidualV2",
    "InvertedResidualV3",
    "MobileNetV2",
    "MobileNetV3",
    "mobilenet_v2",
    "mobilenet_v3_large",
    "mobilenet_v2_inputs",
    "mobilenet_v3_large_inputs",
    "MOBILENET_V2_PARAMS",
    "MOBILENET_V3_LARGE_PARAMS",
]

#: torchvision ``mobilenet_v2`` (1000 classes).
MOBILENET_V2_PARAMS = 3_504_872
#: torchvision ``mobilenet_v3_large`` (1000 classes).
MOBILENET_V3_LARGE_PARAMS = 5_483_032


def _make_divisible(v: float, divisor: int, min_value: int | None = None) -> int:
    """Round ``v`` to a multiple of ``divisor`` without going more than 10 % below it (TF-slim rule)."""
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class Conv2dNormActivation(nn.Sequential):
    """Conv2d (no bias when normalised) + norm + optional activation, as ``torchvision.ops.Conv2dNormActivation``."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        stride: int = 1,
        groups: int = 1,
        norm_layer: Callable[..., nn.Module] | None = nn.BatchNorm2d,
        activation_layer: Callable[..., nn.Module] | None = nn.ReLU,
        dilation: int = 1,
        inplace: bool = True,
    ) -> None:
        padding = (kernel_size - 1) // 2 * dilation
        layers: list[nn.Module] = [
            nn.Conv2d(
                in_channels,
                out_channels,
                kernel_size,
                stride,
                padding,
                dilation=dilation,
                groups=groups,
                bias=norm_layer is None,
            )
        ]
        if norm_layer is not None:
            layers.append(norm_layer(out_channels))
        if activation_layer is not None:
            layers.append(activation_layer(inplace=inplace))
        super().__init__(*layers)
        self.out_channels = out_channels


class SqueezeExcitation(nn.Module):
    """Squeeze-and-excitation (Hu et al. 2018) with 1x1 convs; V3 gates with hard-sigmoid."""

    def __init__(
        self,
        input_channels: int,
        squeeze_channels: int,
        activation: Callable[..., nn.Module] = nn.ReLU,
        scale_activation: Callable[..., nn.Module] = nn.Sigmoid,
    ) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
        self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def forward(self, x: Tensor) -> Tensor:
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


class InvertedResidualV2(nn.Module):
    """MobileNetV2 block: 1x1 expand (ReLU6), 3x3 depthwise (ReLU6), 1x1 linear projection."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        if stride not in (1, 2):
            raise ValueError(f"stride should be 1 or 2, got {stride}")
        hidden_dim = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(Conv2dNormActivation(inp, hidden_dim, kernel_size=1, activation_layer=nn.ReLU6))
        layers += [
            Conv2dNormActivation(
                hidden_dim, hidden_dim, stride=stride, groups=hidden_dim, activation_layer=nn.ReLU6
            ),
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)
        self.out_channels = oup

    def forward(self, x: Tensor) -> Tensor:
        if self.use_res_connect:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 for ImageNet (width 1.0): 17 inverted-residual blocks, 1280-channel head."""

    #: t (expansion), c (channels), n (repeats), s (first stride)
    SETTING: tuple[tuple[int, int, int, int], ...] = (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    )

    def __init__(
        self, num_classes: int = 1000, width_mult: float = 1.0, round_nearest: int = 8, dropout: float = 0.2
    ) -> None:
        super().__init__()
        input_channel = _make_divisible(32 * width_mult, round_nearest)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult), round_nearest)
        features: list[nn.Module] = [
            Conv2dNormActivation(3, input_channel, stride=2, activation_layer=nn.ReLU6)
        ]
        for t, c, n, s in self.SETTING:
            output_channel = _make_divisible(c * width_mult, round_nearest)
            for i in range(n):
                features.append(InvertedResidualV2(input_channel, output_channel, s if i == 0 else 1, t))
                input_channel = output_channel
        features.append(
            Conv2dNormActivation(input_channel, self.last_channel, kernel_size=1, activation_layer=nn.ReLU6)
        )
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(self.last_channel, num_classes))
        _torchvision_init(self)

    def forward(self, x: Tensor) -> Tensor:
        """``x``: images ``(N, 3, 224, 224)``; returns logits ``(N, num_classes)``."""
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
        return self.classifier(torch.flatten(x, 1))


@dataclass(frozen=True)
class BneckConfig:
    """One MobileNetV3 bottleneck row of Table 1 of the paper."""

    input_channels: int
    kernel: int
    expanded_channels: int
    out_channels: int
    use_se: bool
    activation: str  # "RE" (ReLU) or "HS" (hard-swish)
    stride: int
    dilation: int = 1

    @property
    def use_hs(self) -> bool:
        return self.activation == "HS"


#: Table 1 of the MobileNetV3 paper (Large), as torchvision ``_mobilenet_v3_conf("mobilenet_v3_large")``.
V3_LARGE_SETTING: tuple[BneckConfig, ...] = (
    BneckConfig(16, 3, 16, 16, False, "RE", 1),
    BneckConfig(16, 3, 64, 24, False, "RE", 2),  # C1
    BneckConfig(24, 3, 72, 24, False, "RE", 1),
    BneckConfig(24, 5, 72, 40, True, "RE", 2),  # C2
    BneckConfig(40, 5, 120, 40, True, "RE", 1),
    BneckConfig(40, 5, 120, 40, True, "RE", 1),
    BneckConfig(40, 3, 240, 80, False, "HS", 2),  # C3
    BneckConfig(80, 3, 200, 80, False, "HS", 1),
    BneckConfig(80, 3, 184, 80, False, "HS", 1),
    BneckConfig(80, 3, 184, 80, False, "HS", 1),
    BneckConfig(80, 3, 480, 112, True, "HS", 1),
    BneckConfig(112, 3, 672, 112, True, "HS", 1),
    BneckConfig(112, 5, 672, 160, True, "HS", 2),  # C4
    BneckConfig(160, 5, 960, 160, True, "HS", 1),
    BneckConfig(160, 5, 960, 160, True, "HS", 1),
)


class InvertedResidualV3(nn.Module):
    """MobileNetV3 bneck: optional 1x1 expand, kxk depthwise, optional SE (hard-sigmoid), 1x1 linear projection."""

    def __init__(self, cnf: BneckConfig, norm_layer: Callable[..., nn.Module]) -> None:
        super().__init__()
        if cnf.stride not in (1, 2):
            raise ValueError(f"illegal stride value {cnf.stride}")
        self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels
        act = nn.Hardswish if cnf.use_hs else nn.ReLU
        layers: list[nn.Module] = []
        if cnf.expanded_channels != cnf.input_channels:
            layers.append(
                Conv2dNormActivation(
                    cnf.input_channels,
                    cnf.expanded_channels,
                    kernel_size=1,
                    norm_layer=norm_layer,
                    activation_layer=act,
                )
            )
        stride = 1 if cnf.dilation > 1 else cnf.stride
        layers.append(
            Conv2dNormActivation(
                cnf.expanded_channels,
                cnf.expanded_channels,
                kernel_size=cnf.kernel,
                stride=stride,
                dilation=cnf.dilation,
                groups=cnf.expanded_channels,
                norm_layer=norm_layer,
                activation_layer=act,
            )
        )
        if cnf.use_se:
            squeeze = _make_divisible(cnf.expanded_channels // 4, 8)
            layers.append(SqueezeExcitation(cnf.expanded_channels, squeeze, scale_activation=nn.Hardsigmoid))
        layers.append(
            Conv2dNormActivation(
                cnf.expanded_channels,
                cnf.out_channels,
                kernel_size=1,
                norm_layer=norm_layer,
                activation_layer=None,
            )
        )
        self.block = nn.Sequential(*layers)
        self.out_channels = cnf.out_channels

    def forward(self, x: Tensor) -> Tensor:
        result = self.block(x)
        if self.use_res_connect:
            result += x
        return result


class MobileNetV3(nn.Module):
    """MobileNetV3 (torchvision layout): hard-swish stem, bnecks, 1x1 conv to 6x, pooled 2-layer classifier."""

    def __init__(
        self,
        setting: tuple[BneckConfig, ...] = V3_LARGE_SETTING,
        last_channel: int = 1280,
        num_classes: int = 1000,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        norm_layer = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)
        first = setting[0].input_channels
        layers: list[nn.Module] = [
            Conv2dNormActivation(
                3, first, kernel_size=3, stride=2, norm_layer=norm_layer, activation_layer=nn.Hardswish
            )
        ]
        layers.extend(InvertedResidualV3(cnf, norm_layer) for cnf in setting)
        lastconv_in = setting[-1].out_channels
        lastconv_out = 6 * lastconv_in
        layers.append(
            Conv2dNormActivation(
                lastconv_in, lastconv_out, kernel_size=1, norm_layer=norm_layer, activation_layer=nn.Hardswish
            )
        )
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(lastconv_out, last_channel),
            nn.Hardswish(inplace=True),
            nn.Dropout(p=dropout, inplace=True),
            nn.Linear(last_channel, num_classes),
        )
        _torchvision_init(self)

    def forward(self, x: Tensor) -> Tensor:
        """``x``: images ``(N, 3, 224, 224)``; returns logits ``(N, num_classes)``."""
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def _torchvision_init(model: nn.Module) -> None:
    """torchvision's MobileNet init (works on meta tensors)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)


def mobilenet_v2(
    num_classes: int = 1000, device: DeviceLike = None, dtype: torch.dtype | None = None
) -> MobileNetV2:
    """MobileNetV2 (width 1.0); 3,504,872 parameters at 1000 classes, as torchvision. Built directly on ``device``."""
    with on_device(device):
        model = MobileNetV2(num_classes=num_classes)
    return finish(model, dtype)


def mobilenet_v3_large(
    num_classes: int = 1000, device: DeviceLike = None, dtype: torch.dtype | None = None
) -> MobileNetV3:
    """MobileNetV3-Large; 5,483,032 parameters at 1000 classes, as torchvision. Built directly on ``device``."""
    with on_device(device):
        model = MobileNetV3(V3_LARGE_SETTING, last_channel=1280, num_classes=num_classes)
    return finish(model, dtype)


mobilenet_v2_inputs = mobilenet_v3_large_inputs = image_inputs
