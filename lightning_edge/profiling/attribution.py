"""Per-layer energy from a power trace: measured where the sensor resolves a layer, apportioned where it cannot.

Pure functions over numbers (no torch, no hardware)::

    model_j = model_energies(step.exclusive(), costs, roofline)         # eps_flop*W + eps_mop*Q + pi_0*T per layer
    e = attribute_step(step.exclusive(), step.t0_ns, step.t1_ns, trace=sampler,
                       update_period_s=sensor.update_period_s, model_energy_j=model_j, source=sensor.source)
    e.energy_j                       # the step's energy, integrated from the trace
    e.layers["layer1.0.conv1"]       # LayerEnergy(energy_j, time_s, method="measured"|"apportioned", ...)
    stats = aggregate([e1, e2, ...]) # mean and spread over steps, per layer

The rule (SyNERGY maps layers onto the power trace by time stamps, SyNERGY; a layer shorter than the sensor's
update period cannot be measured on its own, docs/sensors.md):

1. the step's energy ``E_step`` is the trace integrated over the step;
2. a layer whose self time in the step is at least ``k`` update periods (``k = 4`` by default) is
   **measured**: the trace integrated over exactly its exclusive time segments;
3. the rest of the step's energy, ``E_step - sum(measured)``, is **apportioned** over the other layers in
   proportion to their model energy in the current mode (Pagoda eq. 2 with the layer's measured self time:
   ``eps_flop*W + eps_mop*Q + pi_0*T``), so the layer energies always sum to ``E_step``;
4. without a sensor every layer's energy is the model's, **estimated**.

Every number carries ``method`` (``measured``, ``apportioned``, ``estimated``) and ``source`` (``measured`` for
hardware, ``simulated`` for the twin's sensor, ``model`` without a sensor); ``label`` combines them:
``measured``, ``apportioned``, ``estimated``, ``simulated-measured``, ``simulated-apportioned``; a measured or
apportioned number whose readings were partial (a rail missing or rejected, a failed read: the trace's ``quality``)
carries `` (partial)``: ``measured (partial)``.
"""

from __future__ import annotations

import math
import typing
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Union

import numpy as np

from lightning_edge.energy.base import (
    APPORTIONED,
    ESTIMATED,
    MEASURED,
    PARTIAL,
    SIMULATED,
    LayerEnergy,
    Method,
    label_of,
    layer_attr,
)
from lightning_edge.records import Measurement
from lightning_edge.roofline.model import pagoda_energy
from lightning_edge.twin.workload_model import IDLE_ROW

if TYPE_CHECKING:
    from lightning_edge.devices.sensors.base import PowerReading
    from lightning_edge.modes import PowerMode
    from lightning_edge.profiling.hooks import LayerSelf
    from lightning_edge.roofline.model import Roofline
    from lightning_edge.twin.timeline import LayerTimes

__all__ = [
    "Method", "MEASURED", "APPORTIONED", "ESTIMATED", "SIMULATED", "PARTIAL", "DEFAULT_K",
    "PowerTrace", "LayerEnergy", "StepEnergy", "LayerStats", "StepStats", "LayerCostLike",
    "attribute_step", "model_energies", "aggregate", "aggregate_steps", "label_of", "simulated_step",
    "TWIN_REST",
]

#: a layer is measured when its self time covers at least this many sensor update periods. The sensor blurs every
#: edge between layers: with samples every P seconds and linear interpolation, a power step of dP at an edge moves
#: dP * P * u**2 / 2 joules across it (u in [0, 1] the edge's phase between samples: P*dP/6 on average, P*dP/2 at
#: worst). A layer of k periods with such steps at both ends is therefore off by about dP/(3*k*p) of its energy
#: on average (dP/(k*p) at worst): k = 4 keeps that near 4 % for dP/p = 0.5, a large swing on a Jetson whose static
#: power is most of the total. Shorter layers are apportioned instead.
DEFAULT_K = 4.0


class _Trace(Protocol):
    def energy_j(self, t0_ns: int, t1_ns: int) -> float: ...

    def energy_j_intervals(self, t0_ns: Sequence[int] | np.ndarray,
                           t1_ns: Sequence[int] | np.ndarray) -> np.ndarray: ...


class _Recorded:
    """A recorded trace as the sampler sees a sensor (a :class:`~lightning_edge.devices.protocols.SensorLike`):
    available, one update per sample period, never read (its samples are recorded into the sampler)."""

    name = "recorded trace"
    label = "a recorded power trace"
    available = True
    reason = ""
    rails: tuple[str, ...] = ()
    is_energy_counter = False
    is_sysfs = False
    dated_readings = False
    source = MEASURED

    def __init__(self, period_s: float) -> None:
        self.update_period_s = period_s

    def read(self) -> PowerReading:
        raise RuntimeError("a recorded power trace is not read: its samples are recorded into the sampler")

    def why_unavailable(self) -> str | None:
        return None


def PowerTrace(t_ns: Sequence[int] | np.ndarray, power_w: Sequence[float] | np.ndarray,  # noqa: N802 - a factory
               hold_ns: int | None = None) -> Any:
    """A recorded or synthetic power trace (``t_ns``, ``power_w`` in W) as a
    :class:`~lightning_edge.devices.sampler.PowerSampler` holding those samples (no thread, no sensor read): energy is
    integrated by the sampler's one integrator, with its rules (the piecewise-linear power between samples, the edge
    power held up to ``hold_ns`` beyond the first and last sample, default two median sample periods; a gap without
    readings longer than the sampler's ``max_gap_s`` is not bridged). Non-finite powers are dropped."""
    from lightning_edge.devices.sampler import PowerSampler

    t = np.asarray(t_ns, dtype=np.int64).ravel()
    p = np.asarray(power_w, dtype=np.float64).ravel()
    if t.shape != p.shape:
        raise ValueError(f"t_ns and power_w must have the same length, got {t.size} and {p.size}")
    order = np.argsort(t, kind="stable")
    t, p = t[order], p[order]
    ok = np.isfinite(p)
    t, p = t[ok], p[ok]
    period_s = float(np.median(np.diff(t))) / 1e9 if t.size > 1 else 1e-3
    period_s = period_s if period_s > 0 else 1e-3
    hold_s = (2.0 * period_s) if hold_ns is None else int(hold_ns) / 1e9
    sampler = PowerSampler(_Recorded(period_s), rate_hz=1.0 / period_s, capacity=max(int(t.size), 2), hold_s=hold_s)
    for ti, pi in zip(t.tolist(), p.tolist()):
        sampler.record(ti, pi)
    return sampler


class StepEnergy:
    """One window's per-layer split (``layers`` sums to its energy); its totals are one
    :class:`~lightning_edge.records.Measurement` (``step``: time, power, energy, label, trust, window, samples).

    ``method``: ``measured`` (integrated from the trace), ``estimated`` (no sensor or no coverage: the sum of the
    layers' model energies) or ``simulated``; ``source``: the sensor's; ``resolved``: the step itself spans at least
    ``k`` sensor periods; ``notes``: why a fallback happened. ``StepEnergy(t0_ns, t1_ns, energy_j, method, source,
    layers, update_period_s=None, k=DEFAULT_K, resolved=True, notes=None, samples=None, partial=False,
    sim_time_s=None, mode=None)``: ``sim_time_s`` is the window's time on the simulated device (None: timed where it
    ran)."""

    def __init__(self, t0_ns: int, t1_ns: int, energy_j: float, method: str, source: str,
                 layers: dict[str, LayerEnergy], update_period_s: float | None = None, k: float = DEFAULT_K,
                 resolved: bool = True, notes: list[str] | None = None, samples: int | None = None,
                 partial: bool = False, sim_time_s: float | None = None,
                 mode: PowerMode | str | None = None) -> None:
        self.method = str(method)
        self.source = str(source)
        self.layers = layers
        self.update_period_s = update_period_s
        self.k = k
        self.resolved = resolved
        self.notes = list(notes or [])
        host_s = max((int(t1_ns) - int(t0_ns)) / 1e9, 1e-12)
        time_s = host_s if sim_time_s is None else float(sim_time_s)
        e = float(energy_j)
        self.step = Measurement(time_s, e / time_s if math.isfinite(e) else math.nan,
                                label_of(self.method, self.source, partial), not partial and math.isfinite(e), mode,
                                int(t0_ns), int(t1_ns), host_s, samples=samples)
        self._energy_j = e  # as given: the layers sum to it exactly

    @property
    def t0_ns(self) -> int:
        return int(self.step.t0_ns)

    @property
    def t1_ns(self) -> int:
        return int(self.step.t1_ns)

    @property
    def energy_j(self) -> float:
        return self._energy_j

    @property
    def samples(self) -> int | None:
        return self.step.samples

    @property
    def partial(self) -> bool:
        """The readings over the window missed a rail or a read (the trace's ``quality``)."""
        return self.label.endswith(f"({PARTIAL})")

    @property
    def sim_time_s(self) -> float | None:
        """The window's time on the simulated device (the twin's); None when it was timed where it ran."""
        return self.step.time_s if self.method == SIMULATED else None

    @property
    def host_time_s(self) -> float:
        """The window's wall time on this machine."""
        return float(self.step.host_time_s)

    @property
    def time_s(self) -> float:
        return self.step.time_s

    @property
    def power_w(self) -> float:
        return self.energy_j / self.time_s if self.time_s > 0 else math.nan

    @property
    def label(self) -> str:
        return self.step.label

    def method_counts(self) -> Counter:
        return Counter(le.label for le in self.layers.values())

    @property
    def layer_sum_j(self) -> float:
        return float(sum(le.energy_j for le in self.layers.values()))


class PhaseCostLike(Protocol):
    """The FLOP and bytes of one phase of a layer (a :class:`~lightning_edge.cost.types.Cost`)."""

    @property
    def flops(self) -> float: ...
    @property
    def bytes(self) -> float: ...


class LayerCostLike(Protocol):
    """What the model energies need of a layer's cost: FLOP and bytes of forward and backward."""

    @property
    def forward(self) -> PhaseCostLike: ...
    @property
    def backward(self) -> PhaseCostLike: ...


#: a layer's cost as the model energies take it: LayerCost-like, or ``{"fwd": (W, Q), "bwd": (W, Q)}``
LayerCostIn = Union[LayerCostLike, typing.Mapping[str, typing.Tuple[float, float]]]  # runtime alias (Python 3.8)
#: a layer's self time in a step: a :class:`~lightning_edge.profiling.hooks.LayerSelf`, or a dict of its fields
#: (``self_ns`` or ``self_s``, ``segments``, ``kind``, ``fwd_ns``, ``bwd_ns``, ``calls``)
SelfLike = Union["LayerSelf", typing.Mapping[str, Any]]  # runtime alias (Python 3.8)


def _phase_cost(cost: LayerCostIn | None, phase: str) -> tuple[float, float]:
    """(FLOP, bytes) of one phase of a LayerCost-like object or a dict ``{"fwd": (W, Q), "bwd": (W, Q)}``."""
    if cost is None:
        return 0.0, 0.0
    if isinstance(cost, Mapping) and phase in cost:
        w, q = cost[phase]
        return float(w), float(q)
    part = layer_attr(cost, "forward" if phase == "fwd" else "backward")
    if part is None:
        return 0.0, 0.0
    return float(layer_attr(part, "flops", 0) or 0), float(layer_attr(part, "bytes", 0) or 0)


def model_energies(selfs: Mapping[str, SelfLike], costs: Mapping[str, LayerCostIn] | None,
                   roofline: Roofline | None, static: bool = True) -> dict[str, float]:
    """Each layer's model energy in the roofline's mode: ``eps_flop*W + eps_mop*Q + pi_0*T`` (Pagoda eq. 2),
    with ``T`` the layer's measured self time and ``W``, ``Q`` the FLOP and bytes of the phases it ran in this
    step (forward, and backward when it had backward time). Layers without a cost (containers, regions) get
    ``pi_0*T``. ``selfs``: ``{name: LayerSelf-like}`` (``self_s``/``self_ns``, ``fwd_ns``, ``bwd_ns``).
    Coefficients that are ``nan`` or absent count as zero; with none at all the weight is the time ``T``."""
    eps_f = _finite(layer_attr(roofline, "eps_flop", math.nan)) if roofline is not None else 0.0
    eps_m = _finite(layer_attr(roofline, "eps_mop", math.nan)) if roofline is not None else 0.0
    pi0 = _finite(layer_attr(roofline, "static_power", math.nan)) if (roofline is not None and static) else 0.0
    time_only = eps_f == 0.0 and eps_m == 0.0 and pi0 == 0.0
    out: dict[str, float] = {}
    costs = costs or {}
    for name, s in selfs.items():
        t = _self_s(s)
        if time_only:
            out[name] = t
            continue
        cost = costs.get(name)
        w = q = 0.0
        if cost is not None:
            for phase, ns in (("fwd", layer_attr(s, "fwd_ns", 0)), ("bwd", layer_attr(s, "bwd_ns", 0))):
                if ns:
                    pw, pq = _phase_cost(cost, phase)
                    w += pw
                    q += pq
        out[name] = pagoda_energy(w, q, t, eps_f, eps_m, pi0)
    return out


def _finite(x: float | np.ndarray | None) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return 0.0
    return v if math.isfinite(v) else 0.0


def _self_s(s: SelfLike) -> float:
    v = layer_attr(s, "self_s")
    if v is None:
        v = layer_attr(s, "self_ns", 0) / 1e9
    return float(v)


def attribute_step(selfs: Mapping[str, SelfLike], t0_ns: int, t1_ns: int, *, trace: _Trace | None = None,
                   update_period_s: float | None = None, model_energy_j: Mapping[str, float] | None = None,
                   k: float = DEFAULT_K, source: str = MEASURED, samples: int | None = None) -> StepEnergy:
    """Energy of one step and of each of its layers; see the module docstring for the rule.

    Args:
        selfs: ``{name: LayerSelf-like}``: ``self_ns`` (or ``self_s``), ``segments`` (exclusive ``(t0, t1)`` ns),
            optional ``kind``, ``fwd_ns``, ``bwd_ns``, ``calls``. They should tile ``[t0_ns, t1_ns]``.
        trace: anything with ``energy_j(t0, t1)`` and ``energy_j_intervals(t0s, t1s)`` (a ``PowerSampler``, a
            :class:`PowerTrace`); ``None``: no sensor, model energies only (``estimated``).
        update_period_s: how often the sensor produces a new value.
        model_energy_j: each layer's model energy (the apportioning weights; the estimate without a sensor).
        k: a layer is measured when its self time is at least ``k * update_period_s``.
        source: the sensor's ``source`` (``measured`` or ``simulated``).
    """
    model = dict(model_energy_j or {})
    names = list(selfs)
    times = {n: _self_s(selfs[n]) for n in names}
    notes: list[str] = []
    step_s = (t1_ns - t0_ns) / 1e9
    period = float(update_period_s) if update_period_s and update_period_s > 0 else 0.0
    e_step = math.nan
    if trace is not None:
        e_step = float(trace.energy_j(int(t0_ns), int(t1_ns)))
        if not math.isfinite(e_step):
            notes.append("the power trace does not cover this step: model energies only (estimated)")
    if trace is None or not math.isfinite(e_step):
        layers = {n: _layer(n, selfs[n], _finite(model.get(n, 0.0)), ESTIMATED, "model", model.get(n))
                  for n in names}
        total = float(sum(le.energy_j for le in layers.values()))
        return StepEnergy(int(t0_ns), int(t1_ns), total, ESTIMATED, "model", layers, update_period_s, k,
                          False, notes, samples)

    threshold = k * period
    measured = [n for n in names if period > 0 and times[n] >= threshold and layer_attr(selfs[n], "segments")]
    energies: dict[str, float] = {}
    if measured:
        a: list[int] = []
        b: list[int] = []
        owner: list[int] = []
        for j, n in enumerate(measured):
            for s0, s1 in layer_attr(selfs[n], "segments"):
                a.append(int(s0))
                b.append(int(s1))
                owner.append(j)
        seg = np.asarray(trace.energy_j_intervals(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)))
        per = np.bincount(np.asarray(owner), weights=np.nan_to_num(seg), minlength=len(measured))
        if np.isnan(seg).any():
            notes.append("some layer segments fell outside the trace; their energy was apportioned instead")
            bad = {owner[i] for i in np.flatnonzero(np.isnan(seg))}
            measured = [n for j, n in enumerate(measured) if j not in bad]
            per = np.array([per[j] for j in range(len(per)) if j not in bad])
        energies.update(zip(measured, per.tolist()))
    rest = [n for n in names if n not in energies]
    remainder = e_step - sum(energies.values())
    if remainder < 0:
        if remainder < -1e-9 * max(abs(e_step), 1e-12):
            notes.append(f"measured layers exceed the step energy by {-remainder:.3g} J (trace edges); "
                         "the remainder was set to zero")
        remainder = 0.0
    if rest:
        w = np.array([max(_finite(model.get(n, 0.0)), 0.0) for n in rest])
        if not w.sum() > 0:
            w = np.array([times[n] for n in rest])
            if rest and model:
                notes.append("no model energy for the apportioned layers: apportioned by self time")
        if not w.sum() > 0:
            w = np.ones(len(rest))
        shares = remainder * w / w.sum()
        energies.update(zip(rest, shares.tolist()))
    elif abs(remainder) > 0:
        # every layer was measured: the segments tile the step, so this is rounding; keep the sum exact
        biggest = max(energies, key=energies.__getitem__)
        energies[biggest] += remainder
    partial = False
    quality = getattr(trace, "quality", None)  # a PowerSampler says what its readings were worth
    if callable(quality):
        q = quality(int(t0_ns), int(t1_ns))
        partial = bool(getattr(q, "is_partial", False))
        if partial:
            notes.append(f"partial power readings over this step: {q.describe()}")
    layers = {}
    for n in names:
        method = MEASURED if n in measured else APPORTIONED
        layers[n] = _layer(n, selfs[n], energies[n], method, source, model.get(n), partial)
    return StepEnergy(int(t0_ns), int(t1_ns), e_step, MEASURED, source, layers, update_period_s, k,
                      bool(period > 0 and step_s >= threshold), notes, samples, partial)


def _layer(name: str, s: SelfLike, energy: float, method: str, source: str, model_j: float | None,
           partial: bool = False) -> LayerEnergy:
    fwd = layer_attr(s, "fwd_ns", 0) or 0
    bwd = layer_attr(s, "bwd_ns", 0) or 0
    return LayerEnergy(float(energy), _self_s(s), method, name, source, str(layer_attr(s, "kind", "module") or "module"),
                       math.nan if model_j is None else float(model_j), fwd / 1e9, bwd / 1e9,
                       int(layer_attr(s, "calls", 0) or 0), partial)


#: the twin's share of a step that no layer holds: what follows the GPU's last kernel (the synchronisation, the CPU
#: finishing its dispatch, the run's CPU work outside the layers, a modelled data loader) at the board's powers: the
#: last row of the twin's per-layer table
TWIN_REST = IDLE_ROW


def simulated_step(selfs: Mapping[str, SelfLike], t0_ns: int, t1_ns: int, twin_layers: LayerTimes,
                   name_of: Mapping[str, str] | None = None, *, samples: int | None = None,
                   training: bool = True, reading: Measurement | None = None) -> StepEnergy:
    """One step as the simulated device runs it: every layer's time and energy from the twin's per-layer table of
    the workload (``twin_layers``: a :class:`~lightning_edge.twin.workload_model.LayerTimes`), whose rows sum to the
    twin's step by construction, so the layers sum to the step's energy (``time_s * power_w``) and the step lasts the
    twin's ``time_s``. ``selfs`` (this machine's timings) only supply each layer's host time (``host_time_s``), kind
    and calls; a layer the twin does not model gets zero time and energy. ``name_of`` maps the twin's row names to
    the profiler's layer names (default: same). A layer's time is its kernels' GPU time plus the GPU's wait for their
    launches; what follows the GPU's last kernel (the synchronisation, the CPU work outside the layers) is the twin's
    row :data:`TWIN_REST`, and ``twin_layers.notes`` say how it was formed. ``reading``: the step as the board's
    step meter gave it (the twin's time and power with its measurement noise and the power's settling after a mode
    change): every row's time is scaled by ``reading.time_s / model time`` and its energy by ``reading.energy_j /
    model energy``, so the layers sum to that one number of the step."""
    name_of = dict(name_of or {})
    rows: dict[str, list[float]] = {}  # name -> [time s, energy j, fwd s, bwd s]
    for n, ph, w, e in zip(twin_layers.names, twin_layers.phase, np.asarray(twin_layers.wall_s, dtype=float),
                           np.asarray(twin_layers.energy_j, dtype=float)):
        if ph == "backward" and not training:
            continue
        name = name_of.get(n, n)
        r = rows.setdefault(name, [0.0, 0.0, 0.0, 0.0])
        r[0] += float(w)
        r[1] += float(e)
        if ph != "idle":
            r[3 if ph == "backward" else 2] += float(w)
    step_t = float(twin_layers.time_s)
    step_e = step_t * float(twin_layers.power_w)
    if reading is not None and reading.has_power and step_t > 0 and step_e > 0:
        rt, re_ = reading.time_s / step_t, reading.energy_j / step_e
        rows = {n: [r[0] * rt, r[1] * re_, r[2] * rt, r[3] * rt] for n, r in rows.items()}
        step_t, step_e = reading.time_s, reading.energy_j
    layers: dict[str, LayerEnergy] = {}
    for n, sel in selfs.items():
        r = rows.pop(n, None)
        g, e, f, b = r if r is not None else (0.0, 0.0, 0.0, 0.0)
        layers[n] = LayerEnergy(e, g, SIMULATED, n, SIMULATED, str(layer_attr(sel, "kind", "module") or "module"),
                                math.nan, f, b, int(layer_attr(sel, "calls", 0) or 0), host_time_s=_self_s(sel))
    for n, (g, e, f, b) in rows.items():  # twin rows without a timed module: input copy, loss, the rest
        layers[n] = LayerEnergy(e, g, SIMULATED, n, SIMULATED, "region", math.nan, f, b, 0, host_time_s=0.0)
    return StepEnergy(int(t0_ns), int(t1_ns), step_e, SIMULATED, SIMULATED, layers, None, DEFAULT_K, True, [],
                      samples, sim_time_s=step_t, mode=None if reading is None else reading.mode)


# ---------------------------------------------------------------------- aggregation over steps
@dataclass
class LayerStats:
    """A layer over several profiled steps: mean and spread (sample standard deviation, 0 for one step) of its
    self time, energy and average power; how often each label occurred; its cost when known."""

    name: str
    kind: str
    steps: int
    time_s: float
    time_s_std: float
    energy_j: float
    energy_j_std: float
    power_w: float
    power_w_std: float
    fwd_s: float
    bwd_s: float
    calls: float
    labels: Counter
    model_energy_j: float = math.nan
    flops: float | None = None
    bytes: float | None = None
    host_time_s: float = math.nan  # mean self time on this machine (the same as time_s unless simulated)

    @property
    def label(self) -> str:
        """The most frequent label (ties: the first seen), marked partial when any step's readings were."""
        return _overall_label(self.labels)

    @property
    def intensity(self) -> float | None:
        if self.flops is None or not self.bytes:
            return None
        return self.flops / self.bytes

    def to_dict(self) -> dict:
        return {
            "name": self.name, "kind": self.kind, "steps": self.steps,
            "time_s": self.time_s, "time_s_std": self.time_s_std, "host_time_s": _none_if_nan(self.host_time_s),
            "fwd_s": self.fwd_s, "bwd_s": self.bwd_s,
            "energy_j": self.energy_j, "energy_j_std": self.energy_j_std,
            "power_w": _none_if_nan(self.power_w), "power_w_std": _none_if_nan(self.power_w_std),
            "calls": self.calls, "method": self.label, "labels": dict(self.labels),
            "model_energy_j": _none_if_nan(self.model_energy_j),
            "flops": self.flops, "bytes": self.bytes, "intensity": self.intensity,
        }


def _none_if_nan(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


@dataclass
class StepStats:
    """Steps' totals: mean and spread of time, energy, power; counts of the step labels."""

    steps: int
    time_s: float
    time_s_std: float
    energy_j: float
    energy_j_std: float
    power_w: float
    labels: Counter
    host_time_s: float = math.nan  # mean wall time of the steps on this machine

    @property
    def label(self) -> str:
        return _overall_label(self.labels)


def _overall_label(labels: Counter) -> str:
    """The most frequent label; `` (partial)`` added when some of the numbers averaged were partial."""
    if not labels:
        return ESTIMATED
    top = labels.most_common(1)[0][0]
    suffix = f" ({PARTIAL})"
    if not top.endswith(suffix) and any(k.endswith(suffix) for k in labels) and top != ESTIMATED:
        top += suffix
    return top


def _mean_std(v: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation of the finite values (plain Python: a few values per layer, where numpy's
    per-call cost dominated the end-of-run report)."""
    a = [float(x) for x in v if x is not None and math.isfinite(x)]
    n = len(a)
    if n == 0:
        return math.nan, math.nan
    m = math.fsum(a) / n
    return m, math.sqrt(math.fsum((x - m) ** 2 for x in a) / (n - 1)) if n > 1 else 0.0


def aggregate(steps: Iterable[StepEnergy], costs: Mapping[str, Any] | None = None) -> dict[str, LayerStats]:
    """Per-layer mean and spread over ``steps`` (layers in order of first appearance). A layer absent from a step
    counts as zero time and energy there. ``costs``: optional ``{name: LayerCost-like}`` for FLOP and bytes."""
    steps = list(steps)
    order: dict[str, str] = {}
    for s in steps:
        for n, le in s.layers.items():
            order.setdefault(n, le.kind)
    out: dict[str, LayerStats] = {}
    costs = costs or {}
    for n, kind in order.items():
        rows = [s.layers.get(n) for s in steps]
        t = [r.time_s if r else 0.0 for r in rows]
        e = [r.energy_j if r else 0.0 for r in rows]
        p = [r.power_w for r in rows if r and r.time_s > 0]
        tm, ts = _mean_std(t)
        em, es = _mean_std(e)
        pm, ps = _mean_std(p)
        labels = Counter(r.label for r in rows if r)
        cost = costs.get(n)
        flops = nbytes = None
        if cost is not None:
            fw, fq = _phase_cost(cost, "fwd")
            bw, bq = _phase_cost(cost, "bwd")
            bwd_seen = any(r and r.bwd_s > 0 for r in rows)
            flops, nbytes = fw + (bw if bwd_seen else 0.0), fq + (bq if bwd_seen else 0.0)
        mj = [r.model_energy_j for r in rows if r]
        out[n] = LayerStats(
            n, kind, len(steps), tm, ts, em, es, pm, ps,
            _mean_std([r.fwd_s if r else 0.0 for r in rows])[0],
            _mean_std([r.bwd_s if r else 0.0 for r in rows])[0],
            _mean_std([float(r.calls) if r else 0.0 for r in rows])[0],
            labels, _mean_std(mj)[0], flops, nbytes, _mean_std([r.host_s if r else 0.0 for r in rows])[0],
        )
    return out


def aggregate_steps(steps: Iterable[StepEnergy]) -> StepStats:
    """Mean and spread of the steps' totals."""
    steps = list(steps)
    tm, ts = _mean_std([s.time_s for s in steps])
    em, es = _mean_std([s.energy_j for s in steps])
    return StepStats(len(steps), tm, ts, em, es, em / tm if tm and tm > 0 else math.nan,
                     Counter(s.label for s in steps), _mean_std([s.host_time_s for s in steps])[0])
