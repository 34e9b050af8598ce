"""The three optimisation problems of Fulcrum (section 4), what a tuner measures, and what it returns.

Formulas (Fulcrum, Table 2 and section 4; ``bs`` = inference minibatch size, ``alpha`` = arrival rate):

- queueing time of the first request of a minibatch: ``qt = (bs - 1) / alpha``
- peak inference latency: ``latency = (bs - 1) / alpha + t_in``
- the inference rate keeps up with arrivals: ``bs / t_in >= alpha``, i.e. ``t_in <= bs / alpha``
- managed interleaving (section 3, Fig. 4): one inference minibatch per cycle of ``bs / alpha`` seconds;
  the idle time ``bs / alpha - t_in`` runs ``tau = floor((bs / alpha - t_in) / t_tr)`` whole training
  minibatches, so the training throughput is ``theta = tau * alpha / bs`` minibatches per second
- concurrent power: ``max(p_tr, p_in)`` (section 6, "the interleaved power equals the maximum")

Every formula is a pure numpy function that works on scalars and on arrays of profiled
``(time, power)`` values, so one problem can be checked against all profiles at once.

Pure: numpy only (no Optuna, no torch, no hardware).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, Union, runtime_checkable

import numpy as np

from lightning_edge.modes import PowerMode
from lightning_edge.records import Measurement

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

KINDS: tuple[str, ...] = ("train", "infer", "concurrent")
"""Workload kinds: standalone training, standalone inference, concurrent training and inference."""

DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 4, 16, 32, 64)
"""Fulcrum's candidate inference minibatch sizes (section 6)."""

_REL_TOL = 1e-12  # relative slack for "<=" on floats computed two ways
_FLOOR_EPS = 1e-9  # floor((x / y)) where x / y is an integer up to rounding


# ----------------------------------------------------------------------------------------- measurements
# one record of a step, at the ground floor (lightning_edge.records)
class Timed(Protocol):
    """What a workload's ``train`` / ``infer`` may return besides a :class:`Measurement`: anything with ``time_s`` and
    ``power_w`` (and optionally ``label``), which :func:`as_measurement` turns into one."""

    time_s: float
    power_w: float


def as_measurement(obj: Measurement | Timed) -> Measurement:
    """A :class:`Measurement` from anything with ``time_s`` and ``power_w`` (and optionally ``label``)."""
    if isinstance(obj, Measurement):
        return obj
    try:
        return Measurement(obj.time_s, obj.power_w, getattr(obj, "label", "measured") or "measured")
    except AttributeError:
        raise TypeError(
            f"a workload must return an object with time_s and power_w (e.g. Measurement(time_s=..., power_w=...)), "
            f"got {type(obj).__name__}: {obj!r}"
        ) from None


@dataclass(frozen=True)
class ConcurrentMeasurement:
    """A concurrent point: the training minibatch at a mode and the inference minibatch at (mode, bs)."""

    train: Measurement
    infer: Measurement

    @property
    def power_w(self) -> float:
        """System power under managed interleaving: the larger of the two (section 6)."""
        return max(self.train.power_w, self.infer.power_w)

    @property
    def label(self) -> str:
        return self.train.label if self.train.label == self.infer.label else f"{self.train.label}+{self.infer.label}"


@runtime_checkable
class Workload(Protocol):
    """Anything a tuner can profile: one training minibatch at a mode, one inference minibatch of ``batch_size``.

    A workload may also expose ``fingerprint`` (str), the key of its profiles in a profile store.
    """

    def train(self, mode: PowerMode) -> Measurement | Timed: ...

    def infer(self, mode: PowerMode, batch_size: int) -> Measurement | Timed: ...


# ----------------------------------------------------------------------------------------- formulas
def queueing_time_s(batch_size: ArrayLike, arrival_rps: ArrayLike) -> Any:
    """Peak queueing time ``(bs - 1) / alpha``: the first request waits for ``bs - 1`` more (Table 2)."""
    return (np.asarray(batch_size, dtype=float) - 1.0) / np.asarray(arrival_rps, dtype=float)


def inference_latency_s(t_in: ArrayLike, batch_size: ArrayLike, arrival_rps: ArrayLike) -> Any:
    """Peak minibatch inference latency ``(bs - 1) / alpha + t_in`` (Table 2, section 4)."""
    return queueing_time_s(batch_size, arrival_rps) + np.asarray(t_in, dtype=float)


def cycle_time_s(batch_size: ArrayLike, arrival_rps: ArrayLike) -> Any:
    """Time for ``bs`` requests to arrive: ``bs / alpha``, the period of one inference minibatch."""
    return np.asarray(batch_size, dtype=float) / np.asarray(arrival_rps, dtype=float)


def keeps_up(t_in: ArrayLike, batch_size: ArrayLike, arrival_rps: ArrayLike) -> Any:
    """True where the inference rate keeps up with arrivals: ``bs / t_in >= alpha`` (Fig. 3b)."""
    return slack(t_in, cycle_time_s(batch_size, arrival_rps), 0.0) <= 0


def interleaved_minibatches(t_tr: ArrayLike, t_in: ArrayLike, batch_size: ArrayLike, arrival_rps: ArrayLike) -> Any:
    """``tau``: whole training minibatches that fit in the idle time of one inference cycle (Fig. 4).

    ``tau = floor((bs / alpha - t_in) / t_tr)``, and 0 where inference alone does not keep up.
    """
    idle = cycle_time_s(batch_size, arrival_rps) - np.asarray(t_in, dtype=float)
    tau = np.floor(idle / np.asarray(t_tr, dtype=float) + _FLOOR_EPS)
    return np.maximum(tau, 0.0).astype(np.int64) if np.ndim(tau) else int(max(tau, 0.0))


def concurrent_throughput(t_tr: ArrayLike, t_in: ArrayLike, batch_size: ArrayLike, arrival_rps: ArrayLike) -> Any:
    """Training throughput under managed interleaving: ``theta = tau * alpha / bs`` minibatches/s."""
    tau = np.asarray(interleaved_minibatches(t_tr, t_in, batch_size, arrival_rps), dtype=float)
    out = tau * np.asarray(arrival_rps, dtype=float) / np.asarray(batch_size, dtype=float)
    return out if np.ndim(out) else float(out)


def concurrent_power_w(p_tr: ArrayLike, p_in: ArrayLike) -> Any:
    """Power of interleaved training and inference: ``max(p_tr, p_in)`` (section 6)."""
    return np.maximum(np.asarray(p_tr, dtype=float), np.asarray(p_in, dtype=float))


def slack(value: ArrayLike, budget: ArrayLike, abs_tol: float = 1e-15) -> Any:
    """How far ``value`` exceeds ``budget`` beyond the tolerance of :func:`within` (a constraint value: the
    budget holds where it is <= 0, exactly where :func:`within` is true)."""
    return np.asarray(value, dtype=float) - (np.asarray(budget, dtype=float) * (1.0 + _REL_TOL) + abs_tol)


def within(value: ArrayLike, budget: float) -> Any:
    """``value <= budget`` with a relative slack of 1e-12 (numbers computed two ways)."""
    return slack(value, budget) <= 0


# ----------------------------------------------------------------------------------------- assessment
class Assessment(NamedTuple):
    """A problem applied to arrays of profiled points (all arrays have one entry per point).

    ``rank`` is a tuple of arrays, most significant first, all to be minimised: the best point is the
    feasible one that is lexicographically smallest (ties broken by position).
    """

    feasible: np.ndarray
    power_w: np.ndarray
    latency_s: np.ndarray | None
    throughput: np.ndarray
    train_minibatches: np.ndarray | None
    rank: tuple[np.ndarray, ...]


def _holds(constraints: dict[str, Any]) -> np.ndarray:
    """Where every constraint value is <= 0."""
    return np.logical_and.reduce([np.asarray(v) <= 0 for v in constraints.values()])


def _arr(x: ArrayLike) -> np.ndarray:
    return np.atleast_1d(np.asarray(x, dtype=float))


def _check_positive(name: str, value: float) -> float:
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def _check_batch_sizes(batch_sizes: Sequence[int]) -> tuple[int, ...]:
    try:
        out = tuple(sorted({int(b) for b in batch_sizes}))
    except (TypeError, ValueError):
        raise ValueError(f"batch_sizes must be whole numbers >= 1, got {batch_sizes!r}") from None
    if not out or out[0] < 1 or any(float(b) != int(b) for b in batch_sizes):
        raise ValueError(f"batch_sizes must be a non-empty set of whole numbers >= 1, got {batch_sizes!r}")
    return out


@dataclass(frozen=True)
class TrainingProblem:
    """Standalone training (section 4): maximise throughput ``1 / t_tr`` subject to ``p_tr <= p_hat``."""

    power_budget_w: float
    kind: ClassVar[str] = "train"

    def __post_init__(self) -> None:
        object.__setattr__(self, "power_budget_w", _check_positive("power_budget_w", self.power_budget_w))

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        return ()

    def constraints(self, time_s: ArrayLike, power_w: ArrayLike, batch_size: ArrayLike | None = None) -> dict[str, Any]:
        """Constraint values of profiles (the budget holds where <= 0): what :meth:`assess` checks."""
        return {"power_w": slack(power_w, self.power_budget_w)}

    def assess(self, time_s: ArrayLike, power_w: ArrayLike) -> Assessment:
        """Feasibility and rank of training profiles: minimise time, then power."""
        t, p = _arr(time_s), _arr(power_w)
        return Assessment(_holds(self.constraints(t, p)), p, None, 1.0 / t, None, (t, p))

    def describe(self) -> str:
        return f"training, power <= {self.power_budget_w:g} W"


@dataclass(frozen=True)
class _ServingProblem:
    """The fields, checks and latency formula shared by the inference and concurrent problems."""

    power_budget_w: float
    latency_budget_s: float
    arrival_rps: float
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES

    def __post_init__(self) -> None:
        object.__setattr__(self, "power_budget_w", _check_positive("power_budget_w", self.power_budget_w))
        object.__setattr__(self, "latency_budget_s", _check_positive("latency_budget_s", self.latency_budget_s))
        object.__setattr__(self, "arrival_rps", _check_positive("arrival_rps", self.arrival_rps))
        object.__setattr__(self, "batch_sizes", _check_batch_sizes(self.batch_sizes))

    def constraints(self, time_s: ArrayLike, power_w: ArrayLike, batch_size: ArrayLike | None = None) -> dict[str, Any]:
        """Constraint values (a budget holds where <= 0), what :meth:`assess` checks: the power budget; for
        inference minibatches (``batch_size`` given) also the latency budget and keeping up with the arrivals."""
        out = {"power_w": slack(power_w, self.power_budget_w)}
        if batch_size is not None:
            lat = inference_latency_s(time_s, batch_size, self.arrival_rps)
            out["latency_s"] = slack(lat, self.latency_budget_s)
            out["keep_up_s"] = slack(time_s, cycle_time_s(batch_size, self.arrival_rps), 0.0)
        return out

    def _in_sizes(self, bs: np.ndarray) -> np.ndarray:
        return np.isin(bs, np.asarray(self.batch_sizes, dtype=float))


@dataclass(frozen=True)
class InferenceProblem(_ServingProblem):
    """Standalone inference (section 4): choose mode and ``bs`` minimising the latency
    ``(bs - 1) / alpha + t_in`` subject to latency <= ``latency_budget_s``, ``p_in <= p_hat`` and the
    inference rate keeping up with the arrivals (``t_in <= bs / alpha``)."""

    kind: ClassVar[str] = "infer"

    def assess(self, time_s: ArrayLike, power_w: ArrayLike, batch_size: ArrayLike) -> Assessment:
        """Feasibility and rank of inference profiles: minimise latency, then power, then batch size."""
        t, p, bs = _arr(time_s), _arr(power_w), _arr(batch_size)
        lat = inference_latency_s(t, bs, self.arrival_rps)
        feasible = _holds(self.constraints(t, p, bs)) & self._in_sizes(bs)
        return Assessment(feasible, p, lat, bs / t, None, (lat, p, bs))

    def describe(self) -> str:
        return (
            f"inference, power <= {self.power_budget_w:g} W, latency <= {self.latency_budget_s * 1e3:g} ms, "
            f"{self.arrival_rps:g} requests/s, bs in {list(self.batch_sizes)}"
        )


@dataclass(frozen=True)
class ConcurrentProblem(_ServingProblem):
    """Concurrent training and inference under managed interleaving (section 4).

    Primary: maximise the training throughput ``theta = tau * alpha / bs``; secondary: minimise the
    inference latency. Subject to latency <= ``latency_budget_s``, ``max(p_tr, p_in) <= p_hat``, the
    inference keeping up with arrivals, and at least one whole training minibatch per cycle (``tau >= 1``;
    with ``tau = 0`` training never runs, which we do not count as a solution).
    """

    kind: ClassVar[str] = "concurrent"

    def assess(self, train_time_s: ArrayLike, train_power_w: ArrayLike, infer_time_s: ArrayLike,
               infer_power_w: ArrayLike, batch_size: ArrayLike) -> Assessment:
        """Feasibility and rank of concurrent profiles: maximise throughput, then minimise latency, power, bs."""
        t_tr, p_tr = _arr(train_time_s), _arr(train_power_w)
        t_in, p_in, bs = _arr(infer_time_s), _arr(infer_power_w), _arr(batch_size)
        lat = inference_latency_s(t_in, bs, self.arrival_rps)
        tau = np.asarray(interleaved_minibatches(t_tr, t_in, bs, self.arrival_rps))
        theta = tau * self.arrival_rps / bs
        p = concurrent_power_w(p_tr, p_in)
        feasible = _holds(self.constraints(t_in, p, bs)) & (tau >= 1) & self._in_sizes(bs)
        return Assessment(feasible, p, lat, theta, tau, (-theta, lat, p, bs))

    def describe(self) -> str:
        return (
            f"concurrent, power <= {self.power_budget_w:g} W, latency <= {self.latency_budget_s * 1e3:g} ms, "
            f"{self.arrival_rps:g} requests/s, bs in {list(self.batch_sizes)}"
        )


def check_kind(kind: str) -> str:
    k = str(kind).lower()
    aliases = {"training": "train", "inference": "infer", "train": "train", "infer": "infer",
               "concurrent": "concurrent", "both": "concurrent"}
    if k not in aliases:
        raise ValueError(f"unknown workload kind {kind!r}: expected one of {', '.join(KINDS)}")
    return aliases[k]


Problem = Union["TrainingProblem", "InferenceProblem", "ConcurrentProblem"]  # runtime alias: Python 3.8's typing
"""Any of the three problems a tuner solves (Fulcrum's training, inference and concurrent problems)."""


# ----------------------------------------------------------------------------------------- solutions
@dataclass(frozen=True)

class Solution:
    """What a tuner returns: a profiled (mode, batch size) that meets every constraint of ``problem``.

    - ``time_s`` / ``power_w``: the training minibatch time (training and concurrent) or the inference
      minibatch time (inference), and the power load (concurrent: the larger of the two).
    - ``latency_s``: peak inference latency (inference and concurrent), else ``None``.
    - ``throughput``: training minibatches/s (training: ``1 / t_tr``; concurrent: ``tau * alpha / bs``);
      inference: requests/s the mode can serve (``bs / t_in``).
    - ``profiles_used``: distinct points the strategy looked at for this answer (its profiling cost
      when the store is empty); ``new_profiles``: points actually measured (store misses).
    - ``label``: ``measured`` / ``simulated`` (from the workload) or ``estimated`` (a model's prediction).
    """

    problem: Problem
    mode: PowerMode
    batch_size: int | None
    time_s: float
    power_w: float
    latency_s: float | None = None
    throughput: float = 0.0
    train_minibatches: int | None = None
    infer_time_s: float | None = None
    infer_power_w: float | None = None
    train_power_w: float | None = None
    profiles_used: int = 0
    new_profiles: int = 0
    strategy: str = ""
    label: str = "measured"
    extra: dict = field(default_factory=dict, compare=False)

    def describe(self) -> str:
        bits = [f"{self.mode}"]
        if self.batch_size is not None:
            bits.append(f"bs {self.batch_size}")
        bits.append(f"{self.power_w:.1f} W")
        if self.problem.kind == "concurrent":
            bits.append(f"{self.throughput:.2f} train minibatches/s ({self.train_minibatches} per cycle)")
        else:
            bits.append(f"{self.time_s * 1e3:.1f} ms/minibatch")
        if self.latency_s is not None:
            bits.append(f"latency {self.latency_s * 1e3:.1f} ms")
        bits.append(f"{self.profiles_used} profiles ({self.new_profiles} new), {self.label}")
        return ", ".join(bits)
