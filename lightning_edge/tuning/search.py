"""How a strategy talks to "something that can profile a point", and how its budget is counted.

Every strategy is written as a *generator*: it yields the :class:`Point` (or a batch of points) it
wants profiled and receives the measurements back. :func:`drive` runs the generator with a
:class:`Profiler`, which resolves points against a profile backend (:mod:`lightning_edge.tuning.backend`:
the in-memory :class:`MemoryStore`, or the Optuna profile store of :mod:`lightning_edge.tuning.store`),
measuring the workload on a miss. The same generators also run as Optuna samplers
(:mod:`lightning_edge.tuning.samplers`, for ``study.optimize``).

Budget: each distinct point (training: a mode; inference and concurrent: a mode and a batch size)
that a strategy asks for counts once (``SearchContext.used``), whether it was measured or found in
the store; points found in the store cost no measurement (``new_profiles``).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

from lightning_edge._lazy import Registry
from lightning_edge.modes import KNOBS, PowerMode, PowerModeSpace
from lightning_edge.tuning.backend import MemoryStore, ProfileBackend, ProfileKey
from lightning_edge.tuning.problems import (
    DEFAULT_BATCH_SIZES,
    ConcurrentMeasurement,
    Measurement,
    Solution,
    as_measurement,
    check_kind,
)
from lightning_edge.tuning.table import ProfileTable


class ProfilingStopped(Exception):
    """Raised by a workload's ``train``/``infer`` when no more profiles can be measured (the run that measures them
    ends before another window would): :meth:`Strategy.run` answers with what was profiled."""


class BudgetExhausted(RuntimeError):
    """A strategy asked for more distinct points than its profiling budget allows (a bug in the strategy)."""


@dataclass(frozen=True, order=True)
class Point:
    """A point to profile: ``kind`` ``"train"`` (mode only), ``"infer"`` or ``"concurrent"`` (mode and batch size)."""

    kind: str
    mode: PowerMode
    batch_size: int | None = None

    def keys(self) -> tuple[ProfileKey, ...]:
        """The store entries this point needs (a concurrent point needs a training and an inference profile)."""
        train = (ProfileKey("train", self.mode, None),) if self.kind != "infer" else ()
        infer = (ProfileKey("infer", self.mode, int(self.batch_size)),) if self.kind != "train" else ()  # type: ignore[arg-type]
        return train + infer

    def __str__(self) -> str:
        return f"{self.kind}:{self.mode}" + ("" if self.batch_size is None else f":bs{self.batch_size}")


Result = Union[Measurement, ConcurrentMeasurement]  # runtime alias: Python 3.8's typing


class SearchContext:
    """What a search has profiled so far (in order) and how much of its budget is left."""

    def __init__(self, budget: int | None = None) -> None:
        self.budget = None if budget is None else int(budget)
        self.results: dict[Point, Result] = {}

    @property
    def used(self) -> int:
        return len(self.results)

    @property
    def left(self) -> float:
        return math.inf if self.budget is None else self.budget - self.used

    @property
    def visited(self) -> tuple[Point, ...]:
        return tuple(self.results)

    def known(self, point: Point) -> Result | None:
        return self.results.get(point)

    def profile(self, point: Point) -> Generator[Point, Result, Result]:
        """``res = yield from ctx.profile(point)``: a known point costs nothing, a new one counts once."""
        if point in self.results:
            return self.results[point]
        if self.left < 1:
            raise BudgetExhausted(f"profiling budget of {self.budget} points exhausted (asked for {point})")
        res = yield point
        self.results[point] = res
        return res

    def profile_many(self, points: Iterable[Point]) -> Generator[list[Point], list[Result], list[Result]]:
        """``res = yield from ctx.profile_many(points)``: one batch (several boards can share it)."""
        pts = list(points)
        new = list(dict.fromkeys(p for p in pts if p not in self.results))
        if len(new) > self.left:
            raise BudgetExhausted(f"profiling budget of {self.budget} points exhausted (asked for {len(new)} more)")
        if new:
            got = yield new
            for p, r in zip(new, got):
                self.results[p] = r
        return [self.results[p] for p in pts]

    def table(self, kind: str, **kw: Any) -> ProfileTable:
        return ProfileTable.from_results(kind, self.results, profiles_used=self.used, **kw)

    def rows(self, points: Iterable[Point]) -> list[list[float]]:
        """``[time_s, power_w]`` of each profiled point (concurrent: ``[t_tr, p_tr, t_in, p_in]``)."""
        return [[r.train.time_s, r.train.power_w, r.infer.time_s, r.infer.power_w]
                if isinstance(r, ConcurrentMeasurement) else [r.time_s, r.power_w]
                for r in map(self.results.__getitem__, points)]


# --------------------------------------------------------------------------------------- profiling
def open_backend(store: Any) -> ProfileBackend:
    """The one place a ``store=`` argument becomes a profile backend: ``None`` -> a fresh :class:`MemoryStore`;
    a backend (a :class:`MemoryStore`, a :class:`~lightning_edge.tuning.store.ProfileStore`) as it is; anything
    else (``"default"``, a path, a storage URL, an Optuna storage) -> the Optuna profile store, which parses it.
    A store that cannot be used raises :class:`~lightning_edge.tuning.store.StoreError` here."""
    if store is None:
        return MemoryStore()
    if isinstance(store, ProfileBackend):
        return store
    from lightning_edge.tuning.store import ProfileStore  # Optuna only when a persistent store is asked for

    return ProfileStore(store)


class Profiler:
    """Resolves points against a backend's profiles of ``workload``, measuring it on a miss; counts new
    measurements. ``store``: anything :func:`open_backend` takes; the other arguments go to the backend."""

    def __init__(self, workload: Any, store: Any = None, *, workload_id: str | None = None,
                 device_model: str | None = None, problem: Any = None, strategy: str = "") -> None:
        self.workload = workload
        self.store = open_backend(store).profiles(workload, workload_id=workload_id, device_model=device_model,
                                                  problem=problem, strategy=strategy)
        self.context: dict[str, Any] = {}
        # a workload may say when to stop waiting for other processes' profiles, and hear how long it waits
        for name, attr in (("check", "check_cancelled"), ("on_wait", "on_store_wait")):
            fn = getattr(workload, attr, None)
            if callable(fn):
                self.context[name] = fn
        self.new_profiles = 0

    def measure(self, key: ProfileKey) -> Measurement:
        if key.kind == "train":
            return as_measurement(self.workload.train(key.mode))
        return as_measurement(self.workload.infer(key.mode, key.batch_size))

    def resolve_many(self, points: Sequence[Point]) -> list[Result]:
        keys = list(dict.fromkeys(k for p in points for k in p.keys()))
        got = self.store.fetch_or_measure_many(keys, self.measure, self.context)
        by_key = {k: m for k, (m, _) in zip(keys, got)}
        self.new_profiles += sum(bool(new) for _, new in got)
        found = [[by_key[k] for k in p.keys()] for p in points]
        return [ms[0] if len(ms) == 1 else ConcurrentMeasurement(*ms) for ms in found]


def drive(gen: Generator, profiler: Any) -> Any:
    """Run a strategy generator to completion, resolving what it yields with ``profiler``."""
    try:
        req = next(gen)
        while True:
            batch = profiler.resolve_many([req] if isinstance(req, Point) else list(req))
            req = gen.send(batch[0] if isinstance(req, Point) else batch)
    except StopIteration as stop:
        return stop.value


# --------------------------------------------------------------------------------------- grid helper
class Grid:
    """Index arithmetic over a :class:`PowerModeSpace` with cached :class:`PowerMode` objects.

    Strategies work on index tuples ``(i_cores, i_cpu, i_gpu, i_mem)``; ``grid.mode(idx)`` is the mode.
    """

    _cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def __init__(self, space: PowerModeSpace) -> None:
        self.space = space
        self.values = [space.values(k) for k in KNOBS]
        self.sizes = tuple(len(v) for v in self.values)
        self._modes: dict[tuple, PowerMode] = {}
        self._index: dict[PowerMode, tuple] = {}

    @classmethod
    def of(cls, space: PowerModeSpace) -> Grid:
        g = cls._cache.get(space)
        if g is None:
            g = cls._cache[space] = cls(space)
        return g

    def mode(self, idx: tuple) -> PowerMode:
        m = self._modes.get(idx)
        if m is None:
            m = self._modes[idx] = PowerMode(*(self.values[j][i] for j, i in enumerate(idx)))
            self._index[m] = idx
        return m

    def index(self, mode: PowerMode) -> tuple:
        idx = self._index.get(mode)
        if idx is None:
            idx = self._index[mode] = self.unflat(self.space.index(mode))
        return idx

    def mid(self) -> tuple:
        """Every knob at its middle value (index ``n // 2``), as :meth:`PowerModeSpace.midpoint`."""
        return tuple(n // 2 for n in self.sizes)

    def top(self) -> tuple:
        """Every knob at its highest value (MAXN)."""
        return tuple(n - 1 for n in self.sizes)

    def bottom(self) -> tuple:
        """Every knob at its lowest value: the least-power mode."""
        return tuple(0 for _ in self.sizes)

    def flat(self, idx: tuple) -> int:
        f = 0
        for i, n in zip(idx, self.sizes):
            f = f * n + i
        return f

    def unflat(self, f: int) -> tuple:
        out = []
        for n in reversed(self.sizes):
            f, r = divmod(int(f), n)
            out.append(r)
        return tuple(reversed(out))


# --------------------------------------------------------------------------------------- strategies
@dataclass
class SearchResult:
    """The answer of one run of a strategy, with everything it profiled."""

    solution: Solution | None
    visited: tuple[Point, ...]
    results: dict[Point, Result]
    profiles_used: int
    new_profiles: int
    table: ProfileTable | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ExploreSpec:
    """What an exploring strategy (ALS, RND, NN, Exhaustive) profiles for: a kind and, for inference
    and concurrent workloads, the batch sizes and the ranges of latency budgets and arrival rates of
    the problems the exploration should answer (ALS's quadrants, section 5.3.3)."""

    kind: str
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES
    latency_range_s: tuple[float, float] | None = None
    arrival_range_rps: tuple[float, float] | None = None
    seed: int | None = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", check_kind(self.kind))
        object.__setattr__(self, "batch_sizes", tuple(sorted({int(b) for b in self.batch_sizes})))

    def points(self, grid: Grid, flat_indices: Iterable[int]) -> list[Point]:
        out = []
        for f in flat_indices:
            mode = grid.mode(grid.unflat(int(f)))
            if self.kind == "train":
                out.append(Point("train", mode))
            else:
                out.extend(Point(self.kind, mode, int(b)) for b in self.batch_sizes)
        return out


#: tuning strategies by name, the one table of them: what ``strategy="gmd"`` (PowerModeTuner, OnlineTuner),
#: ``tuner="exhaustive"`` (serving) and ``--strategy`` (the demo) mean. Each :class:`Strategy` subclass that sets
#: ``strategy_name`` registers itself here when it is defined (``strategy_aliases``: other spellings); names match
#: in any case. The package's strategies are registered once ``lightning_edge.tuning`` is imported.
STRATEGIES = Registry("tuning strategy", attr="strategy_name", fold_case=True)


class Strategy:
    """Base of every tuner. Subclasses implement :meth:`budget` and :meth:`search` (a generator).

    ``solve(problem, space, workload)`` returns a :class:`Solution` or ``None``; ``run(...)`` returns the
    full :class:`SearchResult`. ``store`` selects where profiles live (see :func:`open_backend`): ``"default"``
    (the default: an Optuna study in an SQLite file under the user cache directory, see
    :mod:`lightning_edge.tuning.store`), a path or any Optuna storage URL (``postgresql://...``), a
    :class:`~lightning_edge.tuning.store.ProfileStore`, a shared :class:`MemoryStore`, or ``None`` (a
    fresh in-memory store: nothing persists, no Optuna involved).
    """

    #: the label of its profiles and tables (an instance may refine it: ``RND50``)
    name = "strategy"
    #: the name it is registered under in :data:`STRATEGIES` (a subclass that sets it registers itself)
    strategy_name: ClassVar[str] = ""
    #: other spellings of ``strategy_name`` (set beside it)
    strategy_aliases: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # only a class that names itself: a subclass of a registered strategy is not that strategy
        if "strategy_name" in vars(cls):
            STRATEGIES.register(cls, aliases=vars(cls).get("strategy_aliases", ()))

    def budget(self, problem: Any, space: PowerModeSpace) -> int | None:
        raise NotImplementedError

    def search(self, ctx: SearchContext, problem: Any, space: PowerModeSpace, seed: int | None) -> Generator:
        raise NotImplementedError

    def answer(self, ctx: SearchContext, problem: Any, space: PowerModeSpace, new_profiles: int) -> SearchResult:
        table = ctx.table(problem.kind, strategy=self.name, new_profiles=new_profiles)
        sol = table.solve(problem)
        return SearchResult(sol, ctx.visited, dict(ctx.results), ctx.used, new_profiles, table)

    def run(self, problem: Any, space: PowerModeSpace, workload: Any, *, store: Any = "default",
            workload_id: str | None = None, device_model: str | None = None, seed: int | None = 0) -> SearchResult:
        ctx = SearchContext(self.budget(problem, space))
        gen = self.search(ctx, problem, space, seed)
        new_profiles = _profile(self, gen, store, workload, workload_id, device_model, problem)
        return self.answer(ctx, problem, space, new_profiles)

    def solve(self, problem: Any, space: PowerModeSpace, workload: Any, **kw: Any) -> Solution | None:
        """The best feasible profiled point for ``problem``, or ``None`` when no feasible mode was found."""
        return self.run(problem, space, workload, **kw).solution

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def strategy_named(strategy: str | Strategy) -> Strategy:
    """A strategy instance: ``strategy`` itself when it is one (anything with ``run``), else a new instance of the
    strategy registered under that name or alias in :data:`STRATEGIES` (any case). An unknown name raises
    :class:`~lightning_edge._lazy.UnknownName` (a ``ValueError`` and a ``KeyError``) listing the registered names."""
    if isinstance(strategy, str):
        return STRATEGIES.get(strategy)()
    if not hasattr(strategy, "run"):
        raise TypeError(f"strategy: expected a name ({', '.join(STRATEGIES)}) or a tuning Strategy, "
                        f"got {type(strategy).__name__}")
    return strategy


def _profile(strategy: Strategy, gen: Generator, store: Any, workload: Any, workload_id: str | None,
             device_model: str | None, problem: Any) -> int:
    """Drive a search generator against the store; returns how many points were newly profiled."""
    profiler = Profiler(workload, store, workload_id=workload_id, device_model=device_model, problem=problem,
                        strategy=strategy.name)
    try:
        drive(gen, profiler)
    except ProfilingStopped:  # the answer is the best of what was profiled (the strategy's answer())
        gen.close()
        trace = getattr(strategy, "last_trace", None)
        if isinstance(trace, list):
            trace.append(("profiling-stopped", profiler.new_profiles))
    return profiler.new_profiles


class ExploringStrategy(Strategy):
    """A strategy that profiles once for a family of problems and answers each by table lookup."""

    def budget_for(self, spec: ExploreSpec, space: PowerModeSpace) -> int | None:
        raise NotImplementedError

    def explore_search(self, ctx: SearchContext, spec: ExploreSpec, space: PowerModeSpace) -> Generator:
        raise NotImplementedError

    def spec_for(self, problem: Any, seed: int | None) -> ExploreSpec:
        """The exploration a single problem needs (ranges covering just that problem)."""
        if problem.kind == "train":
            return ExploreSpec("train", seed=seed)
        lat = (problem.latency_budget_s, problem.latency_budget_s)
        rate = (problem.arrival_rps, problem.arrival_rps)
        return ExploreSpec(problem.kind, problem.batch_sizes, lat, rate, seed)

    def budget(self, problem: Any, space: PowerModeSpace) -> int | None:
        return self.budget_for(self.spec_for(problem, 0), space)

    def search(self, ctx: SearchContext, problem: Any, space: PowerModeSpace, seed: int | None) -> Generator:
        return self.explore_search(ctx, self.spec_for(problem, seed), space)

    def explore(self, space: PowerModeSpace, workload: Any, kind: str = "train", *,
                batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES, latency_range_s: tuple[float, float] | None = None,
                arrival_range_rps: tuple[float, float] | None = None, seed: int | None = 0, store: Any = "default",
                workload_id: str | None = None, device_model: str | None = None) -> ProfileTable:
        """Profile ``workload`` once; the returned table answers many problems (``table.solve(problem)``)."""
        spec = ExploreSpec(kind, tuple(batch_sizes), latency_range_s, arrival_range_rps, seed)
        ctx = SearchContext(self.budget_for(spec, space))
        gen = self.explore_search(ctx, spec, space)
        new_profiles = _profile(self, gen, store, workload, workload_id, device_model, None)
        return self.make_table(ctx, spec, space, new_profiles)

    def make_table(self, ctx: SearchContext, spec: ExploreSpec, space: PowerModeSpace, new_profiles: int) -> ProfileTable:
        return ctx.table(spec.kind, strategy=self.name, new_profiles=new_profiles)
