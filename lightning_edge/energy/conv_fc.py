"""Empirical energy model of convolutional and fully connected layers (Lahmer, Khoshsirat,
Rossi, Zanella, "Energy Consumption of Neural Networks on NVIDIA Edge Boards: an Empirical Model").

Transcription (equation numbers are the paper's):

* FC layer L_i with i_size inputs and o_size outputs: computational load CLF = i_size x o_size   (eq. 1)
* conv layer on a w x h x d input (w = h = i_size, d = ifm), ofm kernels of k x k x d, stride s:
  KCLC = ((i_size - ksize)/stride + 1)^2 * ifm * ksize^2  ~=  (i_size/stride)^2 * ifm * ksize^2    (eq. 2)
  (MACs of one kernel, padding neglected), CLC = KCLC * ofm                                         (eq. 3)
* slope of energy against CLC for a fixed ofm: H(ofm) ~= a_c / ofm + b_c                             (eq. 5)
  fitted by least squares in closed form                                                             (eq. 6)
* E_conv2d = CLC * H(ofm) = KCLC * (a_c + b_c * ofm)                                                 (eq. 7)
* E_fc = CLF * a_f   (b_f = 0: no load, no energy)                                                   (eq. 8)
* a network's energy is the sum over its conv and FC layers (Algorithm 1; energies of layers run in
  sequence add up, section III)

Board parameters, Table III ("Empirical Parameters"):

    a_c (TX2)        2.6727e-08        b_c (TX2)        1.21334e-10
    a_c (Xavier NX)  2.8674e-08        b_c (Xavier NX)  4.7639e-10
    a_f (Xavier NX)  6.2454e-09        (no a_f is published for the TX2)

Units: the paper does not print them; energy is board power x time (eq. 4), so we read the parameters
as joules per MAC, which gives plausible numbers (a 224x224x3 -> 64-channel 3x3 conv: 79 mJ on Xavier NX).
Caveats the paper itself states: measurements were single layers, batch 1, 50 runs with 0.1 ms power
sampling, inference *on the CPU* of the boards (section V); nothing else (GPU, power modes, other
boards such as Orin) is covered. The model has no time. Beyond the paper (flagged in ``details``): the
exact output size with padding and stride (floor), non-square inputs/kernels, groups (ifm per group)
and batch > 1 (energy x batch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch
    from torch import nn

from lightning_edge.energy.base import EnergyEstimator, EnergyLayer, EnergyTarget, LayerEnergy, layer_attr

__all__ = ["ConvShape", "FCShape", "ConvFCParams", "TX2", "XAVIER_NX", "BOARDS", "ConvFCEnergyModel",
           "fit_h_params", "shapes_from_model"]


def _pair(v) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"expected one int or a pair (h, w), got {v!r}")
        return int(v[0]), int(v[1])
    return int(v), int(v)


@dataclass(frozen=True)
class ConvShape:
    """A 2-D convolution as the conv/FC energy model describes it (names follow the paper).

    ``i_size`` (input height/width, or an (h, w) pair), ``ifm`` input channels, ``ofm`` output channels,
    ``ksize`` (or (kh, kw)), ``stride``, ``padding`` (the paper neglects it: default 0), ``groups``,
    ``batch``. ``name``/``kind`` let a shape stand in for a layer.
    """

    i_size: int | tuple[int, int]
    ifm: int
    ofm: int
    ksize: int | tuple[int, int] = 3
    stride: int | tuple[int, int] = 1
    padding: int | tuple[int, int] = 0
    groups: int = 1
    batch: int = 1
    name: str | None = None
    kind: str = "Conv2d"

    def __post_init__(self):
        for fld, v in (("ifm", self.ifm), ("ofm", self.ofm), ("groups", self.groups), ("batch", self.batch)):
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"ConvShape.{fld}: expected a positive integer, got {v!r}")
        if self.ifm % self.groups or self.ofm % self.groups:
            raise ValueError(f"ConvShape: groups={self.groups} must divide ifm={self.ifm} and ofm={self.ofm}")
        (kh, kw), (ih, iw) = _pair(self.ksize), _pair(self.i_size)
        ph, pw = _pair(self.padding)
        if ih + 2 * ph < kh or iw + 2 * pw < kw:
            raise ValueError(f"ConvShape: kernel {kh}x{kw} larger than the padded input {ih + 2 * ph}x{iw + 2 * pw}")

    @property
    def out_size(self) -> tuple[int, int]:
        """(h_out, w_out) = floor((i + 2p - k) / s) + 1 per dimension (eq. 2's (i - k)/s + 1 with p = 0)."""
        (ih, iw), (kh, kw) = _pair(self.i_size), _pair(self.ksize)
        (sh, sw), (ph, pw) = _pair(self.stride), _pair(self.padding)
        return (ih + 2 * ph - kh) // sh + 1, (iw + 2 * pw - kw) // sw + 1

    def kclc(self, approx: bool = False) -> float:
        """KCLC, MACs of one kernel over the output map (eq. 2); ``approx`` uses (i_size/stride)^2."""
        (kh, kw) = _pair(self.ksize)
        cin = self.ifm // self.groups
        if approx:
            (ih, iw), (sh, sw) = _pair(self.i_size), _pair(self.stride)
            return (ih / sh) * (iw / sw) * cin * kh * kw
        oh, ow = self.out_size
        return float(oh * ow * cin * kh * kw)

    def clc(self, approx: bool = False) -> float:
        """CLC = KCLC x ofm, MACs of the layer for one sample (eq. 3)."""
        return self.kclc(approx) * self.ofm

    @property
    def macs(self) -> float:
        return self.clc() * self.batch

    def gemm_dims(self) -> tuple[int, int, int]:
        """Implicit-GEMM view (M, N, K) = (batch*h_out*w_out, ofm, ifm/groups*kh*kw) for tiling models."""
        oh, ow = self.out_size
        kh, kw = _pair(self.ksize)
        return self.batch * oh * ow, self.ofm, self.ifm // self.groups * kh * kw

    @classmethod
    def from_module(cls, module: nn.Conv2d, input_hw: int | tuple[int, int], batch: int = 1,
                    name: str | None = None) -> ConvShape:
        """From a ``torch.nn.Conv2d`` (any object with in_channels, out_channels, kernel_size, stride,
        padding, groups) and the input's (h, w)."""
        pad = module.padding
        if isinstance(pad, str):
            if pad != "valid" and pad != "same":
                raise ValueError(f"ConvShape.from_module: unsupported padding {pad!r}")
            kh, kw = _pair(module.kernel_size)
            pad = (0, 0) if pad == "valid" else (kh // 2, kw // 2)
        return cls(i_size=tuple(int(v) for v in _pair(input_hw)), ifm=int(module.in_channels),
                   ofm=int(module.out_channels), ksize=_pair(module.kernel_size), stride=_pair(module.stride),
                   padding=_pair(pad), groups=int(module.groups), batch=int(batch), name=name)


@dataclass(frozen=True)
class FCShape:
    """A fully connected layer: ``i_size`` inputs, ``o_size`` outputs (paper's names), ``batch``."""

    i_size: int
    o_size: int
    batch: int = 1
    name: str | None = None
    kind: str = "Linear"

    def __post_init__(self):
        for fld, v in (("i_size", self.i_size), ("o_size", self.o_size), ("batch", self.batch)):
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"FCShape.{fld}: expected a positive integer, got {v!r}")

    def clf(self) -> float:
        """CLF = i_size x o_size (eq. 1)."""
        return float(self.i_size * self.o_size)

    @property
    def macs(self) -> float:
        return self.clf() * self.batch

    def gemm_dims(self) -> tuple[int, int, int]:
        return self.batch, self.o_size, self.i_size

    @classmethod
    def from_module(cls, module: nn.Linear, batch: int = 1, name: str | None = None) -> FCShape:
        """From a ``torch.nn.Linear`` (in_features, out_features). ``batch`` counts rows of the input."""
        return cls(int(module.in_features), int(module.out_features), int(batch), name)


@dataclass(frozen=True)
class ConvFCParams:
    """Board parameters of eqs. 7-8 (J per MAC). ``a_f`` None where the paper gives none."""

    board: str
    a_c: float
    b_c: float
    a_f: float | None
    source: str = "published"
    reference: str = "Lahmer et al., Table III"


# Table III of Lahmer et al. ("Empirical Parameters"), read as J per MAC.
TX2 = ConvFCParams("jetson-tx2", a_c=2.6727e-08, b_c=1.21334e-10, a_f=None)
XAVIER_NX = ConvFCParams("jetson-xavier-nx", a_c=2.8674e-08, b_c=4.7639e-10, a_f=6.2454e-09)
BOARDS = {"tx2": TX2, "jetson-tx2": TX2, "xavier-nx": XAVIER_NX, "jetson-xavier-nx": XAVIER_NX, "xavier_nx": XAVIER_NX}


def fit_h_params(ofm: Sequence[float], slopes: Sequence[float]) -> tuple[float, float]:
    """Least-squares a_c, b_c of H(ofm) = a_c / ofm + b_c from (ofm, slope) pairs, closed form of eq. 6:

    a_c = (sum y/x - (1/N) sum 1/x sum y) / (sum 1/x^2 - (1/N) (sum 1/x)^2),  b_c = (sum y - a_c sum 1/x) / N
    """
    x = np.asarray(ofm, dtype=float)
    y = np.asarray(slopes, dtype=float)
    if x.shape != y.shape or x.size < 2 or len(np.unique(x)) < 2:
        raise ValueError("fit_h_params: need slopes for at least two different ofm values, one slope per ofm")
    n = x.size
    inv = 1.0 / x
    a_c = ((y * inv).sum() - inv.sum() * y.sum() / n) / ((inv ** 2).sum() - inv.sum() ** 2 / n)
    b_c = (y.sum() - a_c * inv.sum()) / n
    return float(a_c), float(b_c)


class ConvFCEnergyModel(EnergyEstimator):
    """Per-layer energy of conv and FC layers from the seed-002 model (eqs. 7 and 8).

    Layers need a shape: a ``ConvShape``/``FCShape`` passed as the layer, found as ``layer.shape``, or
    given in ``shapes={layer_name: shape}`` (``shapes_from_model`` builds that mapping from a torch
    model). Other layers raise, or, with ``skip_unsupported=True``, get energy 0 and
    ``details["skipped"]`` saying why. ``approx=True`` uses the paper's (i_size/stride)^2 approximation.
    Times are not modelled (``time_s`` is None).
    """

    method = "conv_fc_empirical"

    def __init__(self, params: ConvFCParams | str = XAVIER_NX, shapes: Mapping[str, Any] | None = None,
                 approx: bool = False, skip_unsupported: bool = False):
        if isinstance(params, str):
            key = params.lower()
            if key not in BOARDS:
                raise ValueError(f"ConvFCEnergyModel: unknown board {params!r}; published parameters exist for "
                                 "'tx2' and 'xavier-nx' (Lahmer et al., Table III), or pass ConvFCParams(...)")
            params = BOARDS[key]
        self.params = params
        self.shapes = dict(shapes or {})
        self.approx = approx
        self.skip_unsupported = skip_unsupported

    def _shape(self, layer):
        if isinstance(layer, (ConvShape, FCShape)):
            return layer
        name = layer_attr(layer, "name")
        if name is not None and name in self.shapes:
            return self.shapes[name]
        shape = layer_attr(layer, "shape")
        return shape if isinstance(shape, (ConvShape, FCShape)) else None

    def conv_energy_j(self, shape: ConvShape) -> float:
        """E_conv2d = KCLC x (a_c + b_c x ofm), per sample (eq. 7)."""
        return shape.kclc(self.approx) * (self.params.a_c + self.params.b_c * shape.ofm)

    def fc_energy_j(self, shape: FCShape) -> float:
        """E_fc = CLF x a_f, per sample (eq. 8)."""
        if self.params.a_f is None:
            raise ValueError(f"ConvFCEnergyModel: no a_f for {self.params.board} (Lahmer et al., Table III publishes a_f "
                             "for the Xavier NX only); use params='xavier-nx', fit one, or skip_unsupported=True")
        return shape.clf() * self.params.a_f

    def estimate(self, layer: EnergyLayer, target: EnergyTarget = None) -> LayerEnergy:
        name = layer_attr(layer, "name")
        shape = self._shape(layer)
        details: dict[str, Any] = {"board": self.params.board, "params": self.params.reference}
        if shape is None:
            why = (f"layer {name!r} (kind {layer_attr(layer, 'kind')!r}) has no ConvShape/FCShape; the conv/FC model "
                   "needs one: pass shapes={name: ConvShape(...)} or build them with shapes_from_model(model, x)")
            if self.skip_unsupported:
                return LayerEnergy(0.0, None, self.method, name=name, details={**details, "skipped": why})
            raise ValueError(why)
        if isinstance(shape, ConvShape):
            e1 = self.conv_energy_j(shape)
            details.update(eq="E = KCLC * (a_c + b_c * ofm) (eq. 7)", kclc=shape.kclc(self.approx), ofm=shape.ofm)
            extended = []
            if _pair(shape.padding) != (0, 0):
                extended.append("padding")
            if shape.groups != 1:
                extended.append("groups")
            if len(set(_pair(shape.i_size))) > 1 or len(set(_pair(shape.ksize))) > 1:
                extended.append("non-square input or kernel")
            if extended:
                details["beyond_paper"] = extended
        else:
            e1 = self.fc_energy_j(shape)
            details.update(eq="E = CLF * a_f (eq. 8)", clf=shape.clf())
        if shape.batch != 1:
            details.setdefault("beyond_paper", []).append(f"batch {shape.batch}: energy scaled linearly")
        return LayerEnergy(e1 * shape.batch, None, self.method, name=name or shape.name, details=details)

    @classmethod
    def fit(cls, conv_samples: Sequence[tuple[ConvShape, float]] = (),
            fc_samples: Sequence[tuple[FCShape, float]] = (), board: str = "fitted") -> ConvFCEnergyModel:
        """Refit the parameters on new measurements (e.g. an Orin) the way the paper does:
        per ofm, the slope of E against CLC (least squares through the origin); then a_c, b_c from the
        slopes by eq. 6; a_f as the slope of E against CLF (through the origin, b_f = 0)."""
        a_c = b_c = a_f = math.nan
        if conv_samples:
            by_ofm: dict[int, list[tuple[float, float]]] = {}
            for shape, e in conv_samples:
                by_ofm.setdefault(shape.ofm, []).append((shape.clc() * shape.batch, float(e)))
            ofms = sorted(by_ofm)
            a_c, b_c = fit_h_params(ofms, [_slope_through_origin(by_ofm[ofm]) for ofm in ofms])
        if fc_samples:
            a_f = _slope_through_origin([(s.clf() * s.batch, float(e)) for s, e in fc_samples])
        params = ConvFCParams(board, a_c, b_c, None if math.isnan(a_f) else a_f, source="measured",
                              reference="fitted with ConvFCEnergyModel.fit (Lahmer et al. eqs. 6-8)")
        return cls(params)


def _slope_through_origin(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of y = slope * x through the origin over (x, y) points."""
    x, y = np.array(points, dtype=float).T
    return float((x * y).sum() / (x * x).sum())


def shapes_from_model(model: nn.Module, *inputs: torch.Tensor) -> dict[str, ConvShape | FCShape]:
    """Run ``model(*inputs)`` once under ``torch.no_grad`` with forward hooks on every ``Conv2d`` and
    ``Linear`` and return ``{qualified module name: shape}`` (names match ``model.named_modules()``,
    which is how the cost model names layers)."""
    import torch

    shapes: dict[str, ConvShape | FCShape] = {}
    handles = []

    def hook_for(name):
        def hook(mod, args, _out):
            x = args[0]
            if isinstance(mod, torch.nn.Conv2d):
                batch = x.shape[0] if x.dim() == 4 else 1
                shapes[name] = ConvShape.from_module(mod, tuple(x.shape[-2:]), batch=batch, name=name)
            else:
                batch = int(np.prod(x.shape[:-1])) if x.dim() > 1 else 1
                shapes[name] = FCShape.from_module(mod, batch=batch, name=name)
        return hook

    for name, mod in model.named_modules():
        if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
            handles.append(mod.register_forward_hook(hook_for(name)))
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return shapes
