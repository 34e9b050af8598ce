"""What the latency models know about a layer: its class, its dimensions and the slides' feature vector.

``describe(model, *inputs, **kwargs)`` runs the cost model (``lightning_edge.analyze``: nothing is computed, the
model runs on the meta device) and, during that same run, records each module's input and output shapes with
process-wide forward hooks. Layers are named, ordered and costed exactly as ``analyze`` names them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["LayerDesc", "describe", "CLASSES", "FEATURES", "classify"]

#: the layer classes the step-wise model has functions for; "other" falls back to the roofline
CLASSES = ("conv", "conv1x1", "dwconv", "linear", "pool", "norm", "eltwise", "other")

#: the slides' feature vector for the statistical model (seed 003: h, w, c, f, kh, kw, stride, #ops, #in, #out,
#: #weights), plus groups, batch, bytes and the layer class (one-hot)
FEATURES = ("h", "w", "c", "f", "kh", "kw", "stride", "ops", "in", "out", "weights", "groups", "batch", "bytes")

_NORM = ("BatchNorm", "LayerNorm", "GroupNorm", "InstanceNorm", "LocalResponseNorm", "RMSNorm")
_POOL = ("Pool",)


@dataclass
class LayerDesc:
    """One layer as the latency models see it (forward only). ``name``/``kind`` as in ``analyze``."""

    name: str
    kind: str
    cls: str
    flops: float
    bytes: float
    macs: float
    params: int = 0
    calls: int = 1
    batch: int = 1
    c: int = 0            # input channels / in_features
    f: int = 0            # output channels / out_features
    h: int = 1            # input height (1 when none)
    w: int = 1            # input width
    ho: int = 1           # output height
    wo: int = 1
    kh: int = 1
    kw: int = 1
    stride: int = 1
    groups: int = 1
    rows: int = 1         # linear: rows of the input matrix (product of the leading dims)
    n_in: int = 0         # input elements
    n_out: int = 0        # output elements
    extra: dict = field(default_factory=dict)

    def features(self) -> list[float]:
        vals = {"h": self.h, "w": self.w, "c": self.c, "f": self.f, "kh": self.kh, "kw": self.kw,
                "stride": self.stride, "ops": self.flops, "in": self.n_in, "out": self.n_out,
                "weights": self.params, "groups": self.groups, "batch": self.batch, "bytes": self.bytes}
        return [float(vals[k]) for k in FEATURES] + [1.0 if self.cls == c else 0.0 for c in CLASSES]

    @property
    def out_pixels(self) -> int:
        """batch x h_out x w_out (the implicit GEMM's M of a convolution)."""
        return self.batch * self.ho * self.wo

    def gemm_dims(self) -> tuple[int, int, int]:
        """(M, N, K) of the layer as a GEMM (for the refined roofline's u_eff)."""
        if self.cls in ("conv", "conv1x1", "dwconv"):
            return self.out_pixels, self.f, max(1, self.c // max(1, self.groups) * self.kh * self.kw)
        if self.cls == "linear":
            return self.rows, self.f, self.c
        raise AttributeError("gemm_dims")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> LayerDesc:
        return cls(**d)


def _numel(shape) -> int:
    return int(math.prod(shape)) if shape is not None else 0


def classify(module: Any, flops: float, macs: float) -> str:
    """The latency class of a module (its own ops)."""
    from torch import nn

    if isinstance(module, nn.Conv2d):
        if module.groups > 1 and module.groups == module.in_channels:
            return "dwconv"
        k = module.kernel_size
        if tuple(k) == (1, 1) and module.groups == 1:
            return "conv1x1"
        return "conv"
    if isinstance(module, nn.Linear):
        return "linear"
    name = type(module).__name__
    if any(p in name for p in _NORM):
        return "norm"
    if any(p in name for p in _POOL):
        return "pool"
    if macs > 0:
        return "other"
    return "eltwise"


def _pair(v) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        return int(v[0]), int(v[-1])
    return int(v), int(v)


def describe(model: Any, *inputs: Any, **kwargs: Any) -> tuple[list[LayerDesc], dict[str, int]]:
    """``(layers, container_calls)``: one ``LayerDesc`` per layer of ``analyze(model, *inputs, **kwargs)`` (forward
    costs), and the number of calls of every module that ran no op of its own (containers, whose only cost is the
    Python call)."""
    import torch
    from torch.nn.modules.module import register_module_forward_hook

    from lightning_edge.cost import analyze

    names = {m: n for n, m in model.named_modules()}
    first: dict[str, tuple] = {}
    calls: dict[str, int] = {}
    modules: dict[str, Any] = {}

    def shape_of(obj):
        if isinstance(obj, torch.Tensor):
            return tuple(obj.shape)
        if isinstance(obj, (list, tuple, dict)):
            items = obj.values() if isinstance(obj, dict) else obj
            return next((s for s in map(shape_of, items) if s is not None), None)
        return None

    def hook(mod, args, out):
        n = names.get(mod)
        if n is None:
            return
        calls[n] = calls.get(n, 0) + 1
        modules.setdefault(n, mod)
        if n not in first:
            first[n] = (shape_of(args), shape_of(out))

    handle = register_module_forward_hook(hook)
    try:
        cost = analyze(model, *inputs, **kwargs)
    finally:
        handle.remove()

    out: list[LayerDesc] = []
    seen = set()
    for lc in cost.layers:
        seen.add(lc.name)
        mod = modules.get(lc.name)
        fw = lc.forward
        ishape, oshape = first.get(lc.name, (None, None))
        cls = classify(mod, fw.flops, fw.macs) if mod is not None else ("other" if fw.macs else "eltwise")
        d = LayerDesc(name=lc.name, kind=lc.kind, cls=cls, flops=float(fw.flops), bytes=float(fw.bytes),
                      macs=float(fw.macs), params=int(lc.params), calls=max(1, int(lc.calls or calls.get(lc.name, 1))),
                      n_in=_numel(ishape), n_out=_numel(oshape))
        if ishape:
            d.batch = int(ishape[0]) if len(ishape) >= 2 else 1
        if cls in ("conv", "conv1x1", "dwconv") and ishape and oshape and len(ishape) == 4:
            d.c, d.h, d.w = int(ishape[1]), int(ishape[2]), int(ishape[3])
            d.f, d.ho, d.wo = int(oshape[1]), int(oshape[2]), int(oshape[3])
            d.kh, d.kw = _pair(mod.kernel_size)
            d.stride = _pair(mod.stride)[0]
            d.groups = int(mod.groups)
        elif cls == "linear" and ishape:
            d.c, d.f = int(mod.in_features), int(mod.out_features)
            d.rows = max(1, _numel(ishape) // max(1, d.c))
            d.batch = d.rows
        elif ishape and len(ishape) == 4:
            d.c, d.h, d.w = int(ishape[1]), int(ishape[2]), int(ishape[3])
            if oshape and len(oshape) == 4:
                d.f, d.ho, d.wo = int(oshape[1]), int(oshape[2]), int(oshape[3])
            k = getattr(mod, "kernel_size", None)
            if k is not None:
                d.kh, d.kw = _pair(k)
                d.stride = _pair(getattr(mod, "stride", None) or k)[0]
        out.append(d)
    containers = {n: c for n, c in calls.items() if n not in seen}
    return out, containers
