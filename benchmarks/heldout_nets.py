"""Held-out networks for the latency-model benchmark (issue 30): families that are not in ``lightning_edge.zoo``
and that no latency model is fitted on. Plain torch, written for this benchmark (torchvision is not used); widths
are scaled down from the published networks so that a batch-8 pass takes tens of milliseconds on one CPU thread.

* ``alexnet_like``  - large kernels: 11x11 stride 4, 5x5, max pooling, three fully connected layers
  (after Krizhevsky et al. 2012, "one weird trick" widths halved);
* ``squeezenet_like`` - fire modules: 1x1 squeeze, parallel 1x1 and 3x3 expands concatenated, a 1x1 classifier
  (after Iandola et al. 2016, SqueezeNet 1.1 layout);
* ``dwsep_like``   - a depthwise-separable stack: 3x3 depthwise + 1x1 pointwise, BatchNorm, ReLU, stride-2
  depthwise steps (after Howard et al. 2017, MobileNetV1 at width 0.5);
* ``allconv_like`` - all-convolutional: 3x3 convolutions, strided 3x3 in place of pooling, 1x1 convolutions and
  global average pooling, no fully connected layer (after Springenberg et al. 2015, All-CNN-C, CIFAR-sized input);
* ``resnext_like`` - grouped 3x3 convolutions (32 groups) in bottleneck blocks with residual adds (after Xie et
  al. 2017, ResNeXt, shallow and narrow);
* ``vit_like``     - a small vision transformer: 8x8 patch embedding, learned position embedding, pre-norm blocks
  of multi-head self-attention (written out: q/k/v projections, matmul, softmax) and a GELU MLP (after Dosovitskiy
  et al. 2021, ViT, tiny).

``NETS[name] = (builder, image_size)``; ``build(name)`` returns ``(model, image_size)``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["NETS", "build", "names"]


def _conv_bn_relu(c: int, f: int, k: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c, f, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(f),
                         nn.ReLU(inplace=True))


class AlexNetLike(nn.Module):
    def __init__(self, classes: int = 100):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 48, 11, 4, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
            nn.Conv2d(48, 128, 5, 1, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2),
            nn.Conv2d(128, 192, 3, 1, 1), nn.ReLU(inplace=True),
            nn.Conv2d(192, 192, 3, 1, 1), nn.ReLU(inplace=True),
            nn.Conv2d(192, 128, 3, 1, 1), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2))
        self.avgpool = nn.AdaptiveAvgPool2d(3)
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Linear(128 * 9, 1024), nn.ReLU(inplace=True),
            nn.Dropout(0.5), nn.Linear(1024, 1024), nn.ReLU(inplace=True), nn.Linear(1024, classes))

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class Fire(nn.Module):
    def __init__(self, c: int, s: int, e: int):
        super().__init__()
        self.squeeze = nn.Conv2d(c, s, 1)
        self.squeeze_act = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(s, e, 1)
        self.expand1x1_act = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(s, e, 3, padding=1)
        self.expand3x3_act = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.squeeze_act(self.squeeze(x))
        return torch.cat([self.expand1x1_act(self.expand1x1(x)), self.expand3x3_act(self.expand3x3(x))], 1)


class SqueezeNetLike(nn.Module):
    def __init__(self, classes: int = 100):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(64, 16, 64), Fire(128, 16, 64), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(128, 32, 128), Fire(256, 32, 128), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(256, 48, 192), Fire(384, 48, 192), Fire(384, 64, 256), Fire(512, 64, 256))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(512, classes, 1), nn.ReLU(inplace=True),
                                        nn.AdaptiveAvgPool2d(1))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


class DwSepLike(nn.Module):
    def __init__(self, classes: int = 100, width: float = 0.5):
        super().__init__()

        def ch(c):
            return max(8, int(c * width))

        cfg = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (512, 1), (512, 1),
               (512, 1), (1024, 2), (1024, 1)]
        layers = [_conv_bn_relu(3, ch(32), 3, 2)]
        c = ch(32)
        for f, s in cfg:
            layers += [_conv_bn_relu(c, c, 3, s, groups=c), _conv_bn_relu(c, ch(f), 1)]
            c = ch(f)
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


class AllConvLike(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 96, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(96, 96, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(96, 96, 3, 2, 1), nn.ReLU(inplace=True),
            nn.Conv2d(96, 192, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(192, 192, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(192, 192, 3, 2, 1), nn.ReLU(inplace=True),
            nn.Conv2d(192, 192, 3), nn.ReLU(inplace=True),
            nn.Conv2d(192, 192, 1), nn.ReLU(inplace=True),
            nn.Conv2d(192, classes, 1), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1))

    def forward(self, x):
        return torch.flatten(self.net(x), 1)


class XBlock(nn.Module):
    def __init__(self, c: int, width: int, f: int, stride: int, groups: int = 32):
        super().__init__()
        self.conv1 = _conv_bn_relu(c, width, 1)
        self.conv2 = _conv_bn_relu(width, width, 3, stride, groups)
        self.conv3 = nn.Conv2d(width, f, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(f)
        self.down = (nn.Sequential(nn.Conv2d(c, f, 1, stride, bias=False), nn.BatchNorm2d(f))
                     if stride != 1 or c != f else nn.Identity())
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.act(self.bn3(self.conv3(self.conv2(self.conv1(x)))) + self.down(x))


class ResNeXtLike(nn.Module):
    def __init__(self, classes: int = 100):
        super().__init__()
        self.stem = nn.Sequential(_conv_bn_relu(3, 32, 3, 2), nn.MaxPool2d(3, 2, 1))
        self.blocks = nn.Sequential(XBlock(32, 64, 128, 1), XBlock(128, 64, 128, 1), XBlock(128, 128, 256, 2),
                                    XBlock(256, 128, 256, 1), XBlock(256, 256, 512, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        h = self.heads

        def split(t):
            return t.reshape(b, n, h, d // h).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        att = torch.softmax(q @ k.transpose(-2, -1) * (1.0 / math.sqrt(d // h)), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(mlp, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(self.act(self.fc1(self.norm2(x))))


class ViTLike(nn.Module):
    def __init__(self, image: int = 64, patch: int = 8, dim: int = 192, depth: int = 4, heads: int = 3,
                 classes: int = 100):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.pos = nn.Parameter(torch.zeros(1, (image // patch) ** 2, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, 4 * dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x.mean(1))


#: name -> (builder, input image side)
NETS = {
    "alexnet_like": (AlexNetLike, 128),
    "squeezenet_like": (SqueezeNetLike, 128),
    "dwsep_like": (DwSepLike, 128),
    "allconv_like": (AllConvLike, 32),
    "resnext_like": (ResNeXtLike, 96),
    "vit_like": (ViTLike, 64),
}


def names() -> list[str]:
    return list(NETS)


def build(name: str, device: str = "cpu") -> tuple[nn.Module, int]:
    """``(model in eval mode, image side)``; weights are torch's default initialisation (latency does not depend on
    their values)."""
    cls, size = NETS[name]
    torch.manual_seed(0)
    return cls().to(device).eval(), size
