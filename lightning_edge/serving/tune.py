"""Which tuner picks the serving plan, and re-solving when the arrival rate changes (Fulcrum sections 5.1, 5.3, 5.4).

``Retuner(tuner, space, workload, store=...)``, then ``retuner.solve(problem)`` -> ``(Solution or None, new_profiles)``:

- ``"gmd"``: :class:`~lightning_edge.tuning.GMD` (branch and bound, search, backtracking), one shared profile store:
  a point profiled for an earlier rate is reused for free;
- ``"dynamic"``: :class:`~lightning_edge.tuning.DynamicGMD` (section 5.4): look the new problem up among everything
  profiled so far and run GMD again (backtracking to a larger batch) only when nothing profiled meets it;
- ``"als"``: :class:`~lightning_edge.tuning.ALS` explores once over ``als_latency_range_s`` x ``als_rate_range_rps``
  (145 profiles), every problem after that is a table lookup;
- ``"exhaustive"``: every mode and batch size (the oracle; 441 x 5 profiles on Fulcrum's space);
- a :class:`~lightning_edge.tuning.ProfileTable`: lookup only; any ``Strategy`` instance: ``strategy.run``.
"""

from __future__ import annotations

from typing import Any

from lightning_edge.tuning.search import Strategy, open_backend, strategy_named

__all__ = ["Retuner", "TUNERS"]

TUNERS = ("gmd", "dynamic", "als", "exhaustive")


class Retuner:
    """Solves a sequence of problems of one workload with one tuner, sharing its profiles (see module docstring)."""

    def __init__(self, tuner: Any, space: Any, workload: Any, *, store: Any = None, seed: int | None = 0,
                 als_latency_range_s: tuple[float, float] | None = None,
                 als_rate_range_rps: tuple[float, float] | None = None) -> None:
        from lightning_edge.tuning.table import ProfileTable

        self.space = space
        self.workload = workload
        self.store = open_backend(store)  # issue 18: a store that cannot be used fails here, in one line
        self.seed = seed
        self.als_latency_range_s = als_latency_range_s
        self.als_rate_range_rps = als_rate_range_rps
        self.table: Any = None
        self.dynamic: Any = None
        self.strategy: Any = None
        if isinstance(tuner, ProfileTable):
            self.name, self.table = "table", tuner
        elif isinstance(tuner, Strategy):
            self.name, self.strategy = getattr(tuner, "name", type(tuner).__name__), tuner
        elif isinstance(tuner, str) and tuner.lower() in TUNERS:
            self.name = tuner.lower()
        else:
            raise ValueError(f"tuner: expected one of {', '.join(repr(t) for t in TUNERS)}, a ProfileTable, a tuning "
                             f"Strategy, or a fixed Solution/Plan; got {tuner!r}")
        if self.name in ("gmd", "dynamic", "als", "exhaustive") and (space is None or workload is None):
            raise ValueError(f"tuner {self.name!r} needs a mode space and a workload to profile")

    def solve(self, problem: Any) -> tuple[Any, int]:
        from lightning_edge.tuning import DynamicGMD

        if self.name == "table":
            return self.table.solve(problem), 0
        if self.name == "dynamic":
            if self.dynamic is None:
                self.dynamic = DynamicGMD(self.space, self.workload, store=self.store, seed=self.seed)
            r = self.dynamic.step(problem)
            return r.solution, r.new_profiles
        if self.name == "als":
            if self.table is None:
                from lightning_edge.tuning.als import ALS

                lat = self.als_latency_range_s or (problem.latency_budget_s, problem.latency_budget_s)
                rate = self.als_rate_range_rps or (problem.arrival_rps, problem.arrival_rps)
                self.table = ALS().explore(self.space, self.workload, kind=problem.kind,
                                           batch_sizes=problem.batch_sizes, latency_range_s=lat,
                                           arrival_range_rps=rate, seed=self.seed, store=self.store)
                return self.table.solve(problem), self.table.new_profiles
            return self.table.solve(problem), 0
        if self.strategy is None:
            self.strategy = strategy_named(self.name, allowed=("gmd", "exhaustive"))
        r = self.strategy.run(problem, self.space, self.workload, store=self.store, seed=self.seed)
        return r.solution, r.new_profiles
