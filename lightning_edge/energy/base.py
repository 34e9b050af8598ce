"""The one interface every per-layer energy estimator follows.

``estimator.estimate(layer, target) -> LayerEnergy`` and ``estimator.estimate_many(layers, target) ->
LayerEnergies``. A *layer* is anything LayerCost-like (``name``, ``kind``, ``flops``, ``macs``, ``bytes``;
see ``lightning_edge.cost.types``), optionally carrying shape information (``ConvShape``/``FCShape``)
for the estimators that need it. A *target* says which device and mode: a ``Roofline``, a profile mode
entry, or a mode string resolved against the estimator's profile. Estimators whose parameters are tied
to one board (the conv/FC model, a fitted regression) ignore it.

Every number an estimator returns is labelled ``estimated`` (model only, nothing measured).
"""

from __future__ import annotations

import math
import typing
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from lightning_edge.roofline.model import Roofline
from lightning_edge.roofline.profile import DeviceProfile, ModeEntry

if TYPE_CHECKING:
    from lightning_edge.cost.types import LayerCost
    from lightning_edge.energy.conv_fc import ConvShape, FCShape
    from lightning_edge.modes import PowerMode

__all__ = ["LayerEnergy", "LayerEnergies", "EnergyEstimator", "resolve_roofline", "layer_attr", "Method", "MEASURED",
           "APPORTIONED", "ESTIMATED", "SIMULATED", "PARTIAL", "label_of", "EnergyLayer", "EnergyTarget"]

#: what an estimator estimates (see the module docstring): a layer's cost, a plain dict of its fields, or the shape of
#: a convolution or a fully connected layer
EnergyLayer = Union["LayerCost", typing.Mapping[str, Any], "ConvShape", "FCShape"]  # runtime alias (Python 3.8)
#: where (see :func:`resolve_roofline`): a roofline, a profile's mode entry or its dict, a mode of the estimator's
#: profile, or None (the estimator's default)
EnergyTarget = Union[Roofline, ModeEntry, typing.Mapping[str, Any], "PowerMode", str, None]  # runtime alias (3.8)


class Method(str, Enum):
    """How an energy was obtained: ``measured`` over the layer's own time, ``apportioned`` from a measured step by the
    cost model, ``estimated`` by the roofline model, ``simulated`` by the Orin twin. Members compare equal to (and
    print as) their strings; a label (:func:`label_of`) qualifies one (``simulated-measured``,
    ``measured (partial)``)."""

    MEASURED = "measured"
    APPORTIONED = "apportioned"
    ESTIMATED = "estimated"
    SIMULATED = "simulated"
    __str__ = str.__str__
    __format__ = str.__format__


MEASURED, APPORTIONED, ESTIMATED, SIMULATED = Method
_METHODS = frozenset(Method)

#: appended to a measured / apportioned label when the readings behind it were partial (a rail missing or
#: rejected, a read failed): ``measured (partial)``
PARTIAL = "partial"


def label_of(method: str, source: str, partial: bool = False) -> str:
    """``method`` qualified by ``source``: ``simulated-measured``, ``simulated-apportioned``; else ``method``.
    ``partial``: the readings behind it missed a rail or a read (``measured (partial)``)."""
    label = f"{SIMULATED}-{method}" if source == SIMULATED and method in (MEASURED, APPORTIONED) else method
    if partial and method in (MEASURED, APPORTIONED):
        label = f"{label} ({PARTIAL})"
    return label


@dataclass(frozen=True)
class LayerEnergy:
    """Energy and time of one layer: an estimator's estimate, or the profiler's number for one step.

    ``method``: an estimator's name (``roofline``, ``conv_fc``, ...) or the profiler's :class:`Method`;
    ``source``: ``model`` (an estimate), ``measured`` (hardware) or ``simulated`` (the twin's sensor); ``label``
    combines them (:func:`label_of`), ``estimated`` for an estimator's number. ``time_s`` is ``None`` when the
    method models no time; from the profiler it is the layer's self (exclusive) time in the step, and
    ``model_energy_j`` the roofline model's estimate that served as its apportioning weight."""

    energy_j: float
    time_s: float | None
    method: str
    name: str | None = None
    source: str = "model"
    kind: str = "module"
    model_energy_j: float = math.nan
    fwd_s: float = 0.0
    bwd_s: float = 0.0
    calls: int = 0
    partial: bool = False  # the readings behind it missed a rail or a read
    #: the layer's self time measured on this machine; ``nan``: the same as ``time_s`` (timed where it ran)
    host_time_s: float = math.nan
    details: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return label_of(self.method, self.source, self.partial) if self.method in _METHODS else ESTIMATED.value

    @property
    def power_w(self) -> float | None:
        """Average power energy_j / time_s: ``None`` when the method gives no time, ``nan`` when it is zero."""
        return None if self.time_s is None else self.energy_j / self.time_s if self.time_s > 0 else math.nan

    @property
    def host_s(self) -> float | None:
        """This machine's self time of the layer (``time_s`` unless the time is the twin's)."""
        return self.time_s if math.isnan(self.host_time_s) else self.host_time_s


@dataclass
class LayerEnergies:
    """Energies of many layers (arrays, one entry per layer; (M, L) for M modes of an array roofline)."""

    energy_j: np.ndarray
    time_s: np.ndarray | None
    method: str
    names: list[str]
    label: str = "estimated"
    details: list[dict] = field(default_factory=list)

    @property
    def total_energy_j(self):
        """Sum over layers (per mode for (M, L) results)."""
        s = np.sum(self.energy_j, axis=-1)
        return float(s) if np.ndim(s) == 0 else s

    @property
    def total_time_s(self):
        if self.time_s is None:
            return None
        s = np.sum(self.time_s, axis=-1)
        return float(s) if np.ndim(s) == 0 else s

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[LayerEnergy]:
        if np.ndim(self.energy_j) != 1:
            raise TypeError("iterate over a one-mode result; this one has shape "
                            f"{np.shape(self.energy_j)} (modes x layers): index it first")
        for i, name in enumerate(self.names):
            t = None if self.time_s is None or math.isnan(self.time_s[i]) else float(self.time_s[i])
            yield LayerEnergy(float(self.energy_j[i]), t, self.method, name,
                              details=self.details[i] if i < len(self.details) else {})

    def to_rows(self) -> list[dict]:
        return [{"name": e.name, "energy_j": e.energy_j, "time_s": e.time_s, "method": e.method, "label": e.label}
                for e in self]


def layer_attr(layer: Any, name: str, default=None):
    """``layer.name`` or ``layer[name]`` (LayerCost objects and plain dicts both work)."""
    if isinstance(layer, Mapping):
        return layer.get(name, default)
    return getattr(layer, name, default)


def resolve_roofline(target: EnergyTarget, profile: DeviceProfile | None = None, precision: str = "fp32",
                     default: Roofline | None = None) -> Roofline:
    """Turn an estimator target into a Roofline.

    Accepts a Roofline; a ``ModeEntry`` or a mode-entry dict; a mode (string or ``PowerMode``) looked up
    in ``profile``; or None for ``default``.
    """
    if isinstance(target, Roofline):
        return target
    if isinstance(target, ModeEntry):
        return target.roofline(precision)
    if isinstance(target, Mapping) and "precision" in target:
        return ModeEntry.from_dict(dict(target)).roofline(precision)
    if target is None:
        if default is not None:
            return default
        if profile is not None:
            return profile.roofline(None, precision)
        raise ValueError("no device given: pass a Roofline (or a mode with profile= set on the estimator), "
                         "e.g. estimator.estimate(layer, load_profile('orin-agx-pagoda').roofline('12c/2201.6/1300.5/3199'))")
    if profile is None:
        raise ValueError(f"mode {str(target)!r} given but the estimator has no profile to look it up in: "
                         "construct it with profile=load_profile(...) or pass a Roofline")
    return profile.roofline(target, precision)


class EnergyEstimator(ABC):
    """Base class: implement ``estimate``; override ``estimate_many`` when it can be vectorised."""

    method: str = "abstract"

    @abstractmethod
    def estimate(self, layer: EnergyLayer, target: EnergyTarget = None) -> LayerEnergy:
        """Energy of one layer on ``target`` (a Roofline, mode entry or mode; see the module docstring)."""

    def estimate_many(self, layers: Sequence[EnergyLayer], target: EnergyTarget = None) -> LayerEnergies:
        """Energies of many layers; the default loops over ``estimate``."""
        res = [self.estimate(layer, target) for layer in layers]
        times = [np.nan if r.time_s is None else r.time_s for r in res]
        return LayerEnergies(
            energy_j=np.array([r.energy_j for r in res], dtype=float),
            time_s=None if all(r.time_s is None for r in res) else np.array(times, dtype=float),
            method=self.method, names=[r.name or "" for r in res], details=[r.details for r in res],
        )
