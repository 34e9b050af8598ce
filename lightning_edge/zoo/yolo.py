"""A YOLOv8n detector in plain torch, structured as Ultralytics builds it from ``yolov8.yaml``.

Source: G. Jocher, A. Chaurasia, J. Qiu, "Ultralytics YOLOv8" (2023), https://github.com/ultralytics/ultralytics,
``ultralytics/cfg/models/v8/yolov8.yaml`` with scale ``n: [depth 0.33, width 0.25, max_channels 1024]`` and the
modules of ``ultralytics/nn/modules/{conv,block,head}.py`` (Conv, Bottleneck, C2f, SPPF, Detect, DFL).

Scaling, as ``parse_model`` does it: repeats ``n -> max(round(n * 0.33), 1)`` (3 -> 1, 6 -> 2); channels
``c -> make_divisible(min(c, 1024) * 0.25, 8)`` (64 -> 16, 128 -> 32, 256 -> 64, 512 -> 128, 1024 -> 256).
Detect head for ch=(64, 128, 256), 80 classes, reg_max 16: box branch width ``max(16, 64 // 4, 16 * 4) = 64``,
class branch width ``max(64, min(80, 100)) = 80``.

Parameter count: 3,157,200, which is what Ultralytics' ``model.info()`` prints for yolov8n ("3157200
parameters, 3157184 gradients"): it includes the 16 fixed, non-trainable weights of the DFL 1x1 conv
(``arange(16)``), and BatchNorm running statistics are buffers, not parameters.

Module names follow Ultralytics (``model.0.conv.weight`` ... ``model.22.dfl.conv.weight``). Differences kept
on purpose: every Conv owns its own ``nn.SiLU`` (Ultralytics shares one instance, which confuses per-module
attribution) and activations are not switched to in-place; strides (8, 16, 32) are fixed instead of being
measured with a dummy forward pass. Neither changes the maths or the parameter count.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ._common import DeviceLike, example_float, finish, on_device

__all__ = [
    "Conv",
    "Bottleneck",
    "C2f",
    "SPPF",
    "Concat",
    "DFL",
    "Detect",
    "YOLOv8",
    "yolov8n",
    "yolov8n_inputs",
    "make_anchors",
    "dist2bbox",
    "YOLOV8N_PARAMS",
]

#: Ultralytics yolov8n detect, 80 classes (includes the 16 fixed DFL weights).
YOLOV8N_PARAMS = 3_157_200


def autopad(k: int, p: int | None = None, d: int = 1) -> int:
    """'Same' padding for an odd kernel ``k`` with dilation ``d``."""
    if d > 1:
        k = d * (k - 1) + 1
    return k // 2 if p is None else p


class Conv(nn.Module):
    """Conv2d (no bias) + BatchNorm2d + SiLU, the Ultralytics ``Conv``."""

    def __init__(
        self,
        c1: int,
        c2: int,
        k: int = 1,
        s: int = 1,
        p: int | None = None,
        g: int = 1,
        d: int = 1,
        act: bool = True,
    ) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, autopad(k, p, d), groups=g, dilation=d, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act: nn.Module = nn.SiLU() if act else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    """Two 3x3 Convs with an optional residual (only when shortcut and c1 == c2)."""

    def __init__(
        self, c1: int, c2: int, shortcut: bool = True, g: int = 1, k: tuple[int, int] = (3, 3), e: float = 0.5
    ) -> None:
        super().__init__()
        c_ = int(c2 * e)
        self.cv1 = Conv(c1, c_, k[0], 1)
        self.cv2 = Conv(c_, c2, k[1], 1, g=g)
        self.add = shortcut and c1 == c2

    def forward(self, x: Tensor) -> Tensor:
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))


class C2f(nn.Module):
    """CSP bottleneck with 2 convs: split, ``n`` Bottlenecks chained on one half, concat all, 1x1 fuse."""

    def __init__(
        self, c1: int, c2: int, n: int = 1, shortcut: bool = False, g: int = 1, e: float = 0.5
    ) -> None:
        super().__init__()
        self.c = int(c2 * e)
        self.cv1 = Conv(c1, 2 * self.c, 1, 1)
        self.cv2 = Conv((2 + n) * self.c, c2, 1)
        self.m = nn.ModuleList(Bottleneck(self.c, self.c, shortcut, g, k=(3, 3), e=1.0) for _ in range(n))

    def forward(self, x: Tensor) -> Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three chained 5x5 max-pools, concatenated (Jocher, YOLOv5)."""

    def __init__(self, c1: int, c2: int, k: int = 5) -> None:
        super().__init__()
        c_ = c1 // 2
        self.cv1 = Conv(c1, c_, 1, 1)
        self.cv2 = Conv(c_ * 4, c2, 1, 1)
        self.m = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)

    def forward(self, x: Tensor) -> Tensor:
        y = [self.cv1(x)]
        y.extend(self.m(y[-1]) for _ in range(3))
        return self.cv2(torch.cat(y, 1))


class Concat(nn.Module):
    """Concatenate a list of tensors along ``dimension``."""

    def __init__(self, dimension: int = 1) -> None:
        super().__init__()
        self.d = dimension

    def forward(self, x: list[Tensor]) -> Tensor:
        return torch.cat(x, self.d)


class DFL(nn.Module):
    """Distribution focal loss integral (Li et al., "Generalized Focal Loss", NeurIPS 2020).

    A fixed 1x1 conv with weights ``0..c1-1`` turns a softmax over ``c1`` bins into an expected distance.
    Its 16 weights are a parameter with ``requires_grad=False``, as in Ultralytics.
    """

    def __init__(self, c1: int = 16) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c1, 1, 1, bias=False).requires_grad_(False)
        with torch.no_grad():
            w = self.conv.weight
            self.conv.weight.copy_(torch.arange(c1, dtype=w.dtype, device=w.device).view(1, c1, 1, 1))
        self.c1 = c1

    def forward(self, x: Tensor) -> Tensor:
        b, _, a = x.shape  # batch, 4 * c1, anchors
        return self.conv(x.view(b, 4, self.c1, a).transpose(2, 1).softmax(1)).view(b, 4, a)


def make_anchors(
    feats: list[Tensor], strides: tuple[float, ...], offset: float = 0.5
) -> tuple[Tensor, Tensor]:
    """Anchor points (cell centres, in grid units) and their strides for every level, as Ultralytics."""
    anchor_points, stride_tensor = [], []
    dtype, device = feats[0].dtype, feats[0].device
    for feat, stride in zip(feats, strides):
        _, _, h, w = feat.shape
        sx = torch.arange(end=w, device=device, dtype=dtype) + offset
        sy = torch.arange(end=h, device=device, dtype=dtype) + offset
        sy, sx = torch.meshgrid(sy, sx, indexing="ij")
        anchor_points.append(torch.stack((sx, sy), -1).view(-1, 2))
        stride_tensor.append(torch.full((h * w, 1), stride, dtype=dtype, device=device))
    return torch.cat(anchor_points), torch.cat(stride_tensor)


def dist2bbox(distance: Tensor, anchor_points: Tensor, xywh: bool = True, dim: int = -1) -> Tensor:
    """(left, top, right, bottom) distances from anchors to boxes, as xywh (or xyxy)."""
    lt, rb = distance.chunk(2, dim)
    x1y1 = anchor_points - lt
    x2y2 = anchor_points + rb
    if xywh:
        return torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), dim)
    return torch.cat((x1y1, x2y2), dim)


class Detect(nn.Module):
    """YOLOv8 decoupled, anchor-free head: per level a box branch (4 x reg_max DFL bins) and a class branch."""

    def __init__(
        self, nc: int = 80, ch: tuple[int, ...] = (), strides: tuple[float, ...] = (8.0, 16.0, 32.0)
    ) -> None:
        super().__init__()
        self.nc = nc
        self.nl = len(ch)
        self.reg_max = 16
        self.no = nc + self.reg_max * 4
        self.stride = tuple(float(s) for s in strides)
        c2, c3 = max(16, ch[0] // 4, self.reg_max * 4), max(ch[0], min(self.nc, 100))
        self.cv2 = nn.ModuleList(
            nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * self.reg_max, 1)) for x in ch
        )
        self.cv3 = nn.ModuleList(
            nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, self.nc, 1)) for x in ch
        )
        self.dfl = DFL(self.reg_max)

    def bias_init(self, imgsz: int = 640) -> None:
        """Ultralytics' prior: box logits 1.0, class logits for ~5 objects per 640 image (works on meta)."""
        with torch.no_grad():
            for a, b, s in zip(self.cv2, self.cv3, self.stride):
                a[-1].bias.fill_(1.0)
                b[-1].bias[: self.nc].fill_(math.log(5 / self.nc / (imgsz / s) ** 2))

    def forward(self, x: list[Tensor]) -> list[Tensor] | Tensor:
        """Training: the raw per-level maps ``(N, 4*16 + nc, H_i, W_i)``.
        Eval: decoded ``(N, 4 + nc, anchors)``: xywh boxes in input pixels, then sigmoid class scores."""
        x = [torch.cat((self.cv2[i](x[i]), self.cv3[i](x[i])), 1) for i in range(self.nl)]
        if self.training:
            return x
        return self._inference(x)

    def _inference(self, x: list[Tensor]) -> Tensor:
        b = x[0].shape[0]
        x_cat = torch.cat([xi.view(b, self.no, -1) for xi in x], 2)
        anchors, strides = (t.transpose(0, 1) for t in make_anchors(x, self.stride, 0.5))
        box, cls = x_cat.split((self.reg_max * 4, self.nc), 1)
        dbox = dist2bbox(self.dfl(box), anchors.unsqueeze(0), xywh=True, dim=1) * strides
        return torch.cat((dbox, cls.sigmoid()), 1)


class YOLOv8(nn.Module):
    """YOLOv8 detection model: the 23 layers of ``yolov8.yaml`` in ``self.model``, routed by their ``from``."""

    def __init__(
        self, nc: int = 80, depth: float = 0.33, width: float = 0.25, max_channels: int = 1024
    ) -> None:
        super().__init__()

        def ch(c: int) -> int:  # make_divisible(min(c, max_channels) * width, 8)
            return int(math.ceil(min(c, max_channels) * width / 8) * 8)

        def rep(n: int) -> int:
            return max(round(n * depth), 1)

        c64, c128, c256, c512, c1024 = ch(64), ch(128), ch(256), ch(512), ch(1024)
        layers: list[nn.Module] = [
            # backbone
            Conv(3, c64, 3, 2),  # 0 P1/2
            Conv(c64, c128, 3, 2),  # 1 P2/4
            C2f(c128, c128, rep(3), True),  # 2
            Conv(c128, c256, 3, 2),  # 3 P3/8
            C2f(c256, c256, rep(6), True),  # 4
            Conv(c256, c512, 3, 2),  # 5 P4/16
            C2f(c512, c512, rep(6), True),  # 6
            Conv(c512, c1024, 3, 2),  # 7 P5/32
            C2f(c1024, c1024, rep(3), True),  # 8
            SPPF(c1024, c1024, 5),  # 9
            # head
            nn.Upsample(scale_factor=2.0, mode="nearest"),  # 10
            Concat(1),  # 11 cat backbone P4
            C2f(c1024 + c512, c512, rep(3)),  # 12
            nn.Upsample(scale_factor=2.0, mode="nearest"),  # 13
            Concat(1),  # 14 cat backbone P3
            C2f(c512 + c256, c256, rep(3)),  # 15 (P3/8-small)
            Conv(c256, c256, 3, 2),  # 16
            Concat(1),  # 17 cat head P4
            C2f(c256 + c512, c512, rep(3)),  # 18 (P4/16-medium)
            Conv(c512, c512, 3, 2),  # 19
            Concat(1),  # 20 cat head P5
            C2f(c512 + c1024, c1024, rep(3)),  # 21 (P5/32-large)
            Detect(nc, (c256, c512, c1024)),  # 22
        ]
        self.model = nn.ModuleList(layers)
        #: the ``from`` column of yolov8.yaml: -1 is the previous layer
        self.sources: tuple[int | tuple[int, ...], ...] = (
            -1,
            -1,
            -1,
            -1,
            -1,
            -1,
            -1,
            -1,
            -1,
            -1,
            -1,
            (-1, 6),
            -1,
            -1,
            (-1, 4),
            -1,
            -1,
            (-1, 12),
            -1,
            -1,
            (-1, 9),
            -1,
            (15, 18, 21),
        )
        self.save = {6, 4, 12, 9, 15, 18, 21}
        self.nc = nc
        self.stride = self.model[-1].stride
        for m in self.modules():  # Ultralytics initialize_weights
            if isinstance(m, nn.BatchNorm2d):
                m.eps = 1e-3
                m.momentum = 0.03
        self.model[-1].bias_init()

    def forward(self, x: Tensor) -> list[Tensor] | Tensor:
        """``x``: images ``(N, 3, 640, 640)`` in [0, 1]. Eval: ``(N, 4 + nc, 8400)``; train: 3 raw level maps."""
        outputs: dict[int, Tensor] = {}
        y: Tensor | list[Tensor] = x
        for i, (m, f) in enumerate(zip(self.model, self.sources)):
            if f != -1:
                idx = (f,) if isinstance(f, int) else f
                inp = [y if j == -1 else outputs[j] for j in idx]
                y = m(inp)
            else:
                y = m(y)
            if i in self.save:
                outputs[i] = y
        return y


def yolov8n(num_classes: int = 80, device: DeviceLike = None, dtype: torch.dtype | None = None) -> YOLOv8:
    """YOLOv8n (depth 0.33, width 0.25); 3,157,200 parameters at 80 classes, as Ultralytics reports.

    Built directly on ``device`` (``"meta"`` allocates nothing); randomly initialised, no weights are loaded.
    """
    with on_device(device):
        model = YOLOv8(nc=num_classes, depth=0.33, width=0.25, max_channels=1024)
    return finish(model, dtype)


def yolov8n_inputs(
    batch_size: int = 1,
    device: DeviceLike = None,
    dtype: torch.dtype | None = None,
    image_size: int = 640,
    seed: int = 0,
) -> tuple[Tensor]:
    """One image batch ``(batch_size, 3, 640, 640)``, uniform in [0, 1) like Ultralytics' ``/255`` inputs."""
    return (example_float((batch_size, 3, image_size, image_size), device, dtype, seed, uniform=True),)
