"""Which tuner picks the serving plan, and re-solving when the arrival rate changes (Fulcrum sections 5.1, 5.3, 5.4).

``Retuner(tuner, space, workload, store=...)``, then ``retuner.solve(problem)`` -> ``(Solution or None, new_profiles)``.
``tuner`` is the name of a registered tuning strategy (:data:`~lightning_edge.tuning.search.STRATEGIES`, any case
and alias), ``"dynamic"``, a table or a strategy instance:

- ``"gmd"``: :class:`~lightning_edge.tuning.GMD` (branch and bound, search, backtracking), one shared profile store:
  a point profiled for an earlier rate is reused for free;
- ``"dynamic"``: :class:`~lightning_edge.tuning.DynamicGMD` (section 5.4): look the new problem up among everything
  profiled so far and run GMD again (backtracking to a larger batch) only when nothing profiled meets it; a way of
  re-solving with GMD rather than a strategy of its own, so it is this module's name, not the registry's;
- ``"als"``: :class:`~lightning_edge.tuning.ALS` explores once over ``als_latency_range_s`` x ``als_rate_range_rps``
  (145 profiles), every problem after that is a table lookup;
- ``"exhaustive"``: every mode and batch size (the oracle; 441 x 5 profiles on Fulcrum's space);
- any other registered name (the baselines ``"rnd"``, ``"nn"``, ``"binary-search"``): a new instance of it, run for
  each problem on the shared store;
- a :class:`~lightning_edge.tuning.ProfileTable`: lookup only; any ``Strategy`` instance: ``strategy.run``.
"""

from __future__ import annotations

from typing import Any

from lightning_edge.tuning.als import ALS
from lightning_edge.tuning.gmd import DynamicGMD
from lightning_edge.tuning.search import STRATEGIES, Strategy, open_backend, strategy_named
from lightning_edge.tuning.table import ProfileTable

__all__ = ["Retuner", "DYNAMIC", "tuner_name", "tuner_names"]

#: serving's own way of re-solving (DynamicGMD), taken besides the registered strategies' names
DYNAMIC = "dynamic"


def tuner_names() -> tuple[str, ...]:
    """The names ``tuner=`` takes: :data:`DYNAMIC` and every registered strategy's (aliases resolve too)."""
    return (DYNAMIC, *STRATEGIES)


def tuner_name(name: str) -> str:
    """The tuner ``name`` spells (:data:`DYNAMIC` or a registered strategy's name; any case, aliases); a
    ``ValueError`` listing :func:`tuner_names` for any other."""
    if name.strip().lower() == DYNAMIC:
        return DYNAMIC
    if name in STRATEGIES:
        return STRATEGIES.canonical(name)
    raise ValueError(f"tuner: expected one of {', '.join(repr(t) for t in tuner_names())}, a ProfileTable, "
                     f"a tuning Strategy, or a fixed Solution/Plan; got {name!r}")


class Retuner:
    """Solves a sequence of problems of one workload with one tuner, sharing its profiles (see module docstring)."""

    def __init__(self, tuner: str | Strategy | ProfileTable, space: Any, workload: Any, *, store: Any = None,
                 seed: int | None = 0, als_latency_range_s: tuple[float, float] | None = None,
                 als_rate_range_rps: tuple[float, float] | None = None) -> None:
        self.space = space
        self.workload = workload
        self.store = open_backend(store)  # a store that cannot be used fails here, in one line
        self.seed = seed
        self.als_latency_range_s = als_latency_range_s
        self.als_rate_range_rps = als_rate_range_rps
        self.table: ProfileTable | None = None
        self.dynamic: DynamicGMD | None = None
        self.strategy: Strategy | None = None
        self.explore_once = False  # ALS by name: one exploration over the ranges, then lookups
        if isinstance(tuner, ProfileTable):
            self.name, self.table = "table", tuner
            return
        if isinstance(tuner, Strategy):
            self.name, self.strategy = tuner.name, tuner
            return
        if not isinstance(tuner, str):
            raise ValueError(f"tuner: expected one of {', '.join(repr(t) for t in tuner_names())}, a ProfileTable, "
                             f"a tuning Strategy, or a fixed Solution/Plan; got {tuner!r}")
        self.name = tuner_name(tuner)
        if self.name != DYNAMIC:
            self.strategy = strategy_named(self.name)
            self.explore_once = isinstance(self.strategy, ALS)
        if space is None or workload is None:
            raise ValueError(f"tuner {self.name!r} needs a mode space and a workload to profile")

    def solve(self, problem: Any) -> tuple[Any, int]:
        if self.name == DYNAMIC:
            if self.dynamic is None:
                self.dynamic = DynamicGMD(self.space, self.workload, store=self.store, seed=self.seed)
            r = self.dynamic.step(problem)
            return r.solution, r.new_profiles
        if self.table is not None:  # a table given, or ALS's exploration made
            return self.table.solve(problem), 0
        if self.explore_once and isinstance(self.strategy, ALS):
            lat = self.als_latency_range_s or (problem.latency_budget_s, problem.latency_budget_s)
            rate = self.als_rate_range_rps or (problem.arrival_rps, problem.arrival_rps)
            self.table = self.strategy.explore(self.space, self.workload, kind=problem.kind,
                                               batch_sizes=problem.batch_sizes, latency_range_s=lat,
                                               arrival_range_rps=rate, seed=self.seed, store=self.store)
            return self.table.solve(problem), self.table.new_profiles
        assert self.strategy is not None  # every other tuner is a strategy (see __init__)
        r = self.strategy.run(problem, self.space, self.workload, store=self.store, seed=self.seed)
        return r.solution, r.new_profiles
