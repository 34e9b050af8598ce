"""Per-request latency statistics and the minibatch log of a serving run (pure numpy).

Latency of a request = completion time of its minibatch - its arrival time (queueing + execution, the quantity
whose peak Fulcrum bounds: ``(bs - 1) / alpha + t_in``, section 4).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["LatencySummary", "summarize_latencies", "MinibatchLog"]


@dataclass(frozen=True)
class LatencySummary:
    """Percentiles of per-request latency (s), and how many requests missed ``budget_s``."""

    n_requests: int
    budget_s: float
    p50_s: float
    p95_s: float
    p99_s: float
    max_s: float
    mean_s: float
    deadline_misses: int
    label: str = "measured"

    @property
    def within_budget(self) -> float:
        """Fraction of requests whose latency is within the budget (1.0 when there were none)."""
        return 1.0 if self.n_requests == 0 else 1.0 - self.deadline_misses / self.n_requests

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["within_budget"] = self.within_budget
        return d

    def describe(self) -> str:
        if self.n_requests == 0:
            return f"no requests served ({self.label})"
        ms = 1e3
        return (f"{self.n_requests} requests: latency p50 {self.p50_s * ms:.1f} ms, p95 {self.p95_s * ms:.1f} ms, "
                f"p99 {self.p99_s * ms:.1f} ms, max {self.max_s * ms:.1f} ms; {self.within_budget * 100:.2f} % within "
                f"{self.budget_s * ms:g} ms ({self.deadline_misses} misses), {self.label}")


def summarize_latencies(latencies_s: ArrayLike, budget_s: float, label: str = "measured") -> LatencySummary:
    """:class:`LatencySummary` of an array of per-request latencies (s) against ``budget_s``."""
    lat = np.asarray(latencies_s, dtype=float).ravel()
    budget_s = float(budget_s)
    if not (math.isfinite(budget_s) and budget_s > 0):
        raise ValueError(f"budget_s must be a latency budget > 0 s, got {budget_s!r}")
    if lat.size and (np.any(~np.isfinite(lat)) or lat.min() < -1e-9):
        raise ValueError("latencies_s must be finite times >= 0 s")
    if lat.size == 0:
        nan = math.nan
        return LatencySummary(0, budget_s, nan, nan, nan, nan, nan, 0, label)
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    misses = int(np.count_nonzero(lat > budget_s * (1 + 1e-9)))
    return LatencySummary(int(lat.size), budget_s, float(p50), float(p95), float(p99), float(lat.max()),
                          float(lat.mean()), misses, label)


@dataclass
class MinibatchLog:
    """What ran, when: one entry per minibatch (``kind`` ``infer`` or ``background``), plus idle time.

    ``power_w`` is the board power while it ran (simulated on the twin, measured with a sensor, ``nan`` without).
    """

    kind: list[str] = field(default_factory=list)
    start_s: list[float] = field(default_factory=list)
    duration_s: list[float] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)
    size: list[int] = field(default_factory=list)
    idle_s: float = 0.0
    idle_energy_j: float = 0.0

    def add(self, kind: str, start_s: float, duration_s: float, power_w: float, size: int) -> None:
        self.kind.append(kind)
        self.start_s.append(float(start_s))
        self.duration_s.append(float(duration_s))
        self.power_w.append(float(power_w))
        self.size.append(int(size))

    def add_idle(self, duration_s: float, power_w: float) -> None:
        if duration_s > 0:
            self.idle_s += float(duration_s)
            self.idle_energy_j += float(duration_s) * float(power_w)

    def count(self, kind: str) -> int:
        return sum(1 for k in self.kind if k == kind)

    def busy_s(self, kind: str | None = None) -> float:
        return float(sum(d for k, d in zip(self.kind, self.duration_s) if kind is None or k == kind))

    def energy_j(self) -> float:
        """Energy of every minibatch (time x power) plus idle time at idle power; ``nan`` if any power is unknown."""
        e = float(np.dot(np.asarray(self.duration_s), np.asarray(self.power_w))) if self.kind else 0.0
        return e + self.idle_energy_j
