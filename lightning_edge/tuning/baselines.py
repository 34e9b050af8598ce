"""The baselines of Fulcrum's evaluation (section 6): random sampling, the NN baseline, binary search
(Fig. 6a) and the exhaustive oracle.

- :class:`RandomSampling` (RND-N): profile ``N`` random points and look problems up in the observed
  Pareto. Training: ``N`` modes. Inference and concurrent: ``N / len(batch_sizes)`` modes, each at
  every batch size (RND150 = 30 modes x 5 sizes).
- :class:`NeuralBaseline` (NN-N, section 5.2, from PowerTrain): profile the same random points as
  RND-N, train the NN on them, predict every point, and answer from the *predicted* Pareto. As
  published (``verify=False``) its answer may break the budgets: its solutions are labelled
  ``estimated``. With ``verify=True`` (the default, so it honours the tuner contract) the chosen point is
  profiled and rejected if it misses a constraint, trying the next-best prediction up to ``max_verify``
  times.
- :class:`BinarySearch` (Fig. 6a): start at the centre of all knobs, visit the knobs round-robin and
  halve the remaining range of the visited knob by whether the profiled power is within budget.
  Inference: batch sizes from the smallest up until one gives a solution; concurrent: from the largest
  down (as GMD's starting points).
- :class:`Exhaustive`: every mode (and batch size) of the given space: the oracle of the evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence

import numpy as np

from lightning_edge.modes import PowerModeSpace
from lightning_edge.tuning.gmd import feasible_point
from lightning_edge.tuning.nn import MLP
from lightning_edge.tuning.pareto import best_index
from lightning_edge.tuning.problems import (
    ConcurrentProblem,
    InferenceProblem,
    Problem,
    TrainingProblem,
    queueing_time_s,
    within,
)
from lightning_edge.tuning.search import (
    ExploreSpec,
    ExploringStrategy,
    Grid,
    Point,
    SearchContext,
    SearchResult,
    Strategy,
)
from lightning_edge.tuning.table import ProfileTable


def _per_mode(spec: ExploreSpec) -> int:
    """Points per mode: 1 for training, one per batch size for inference and concurrent."""
    return 1 if spec.kind == "train" else len(spec.batch_sizes)


def random_modes(n_modes: int, space: PowerModeSpace, seed: int | None) -> np.ndarray:
    """The random modes (flat indices) of RND-N and NN-N: the same seed gives the same sample."""
    rng = np.random.default_rng(seed)
    return rng.choice(space.size, size=min(int(n_modes), space.size), replace=False)


class _RandomPoints(ExploringStrategy):
    """The sample of RND-N and NN-N: ``n_profiles`` random points (see the module docstring)."""

    n_profiles: int

    def _n_modes(self, spec: ExploreSpec, space: PowerModeSpace) -> int:
        return max(1, min(space.size, self.n_profiles // _per_mode(spec)))

    def budget_for(self, spec: ExploreSpec, space: PowerModeSpace) -> int:
        return self._n_modes(spec, space) * _per_mode(spec)

    def explore_search(self, ctx: SearchContext, spec: ExploreSpec, space: PowerModeSpace) -> Generator:
        modes = random_modes(self._n_modes(spec, space), space, spec.seed)
        yield from ctx.profile_many(spec.points(Grid.of(space), modes))


class RandomSampling(_RandomPoints):
    """RND-N: ``RandomSampling(n_profiles=50)``; ``explore`` profiles, ``table.solve(problem)`` looks up."""

    strategy_name = "rnd"
    strategy_aliases = ("randomsampling",)

    def __init__(self, n_profiles: int = 50) -> None:
        if int(n_profiles) < 1:
            raise ValueError(f"RandomSampling needs n_profiles >= 1, got {n_profiles!r}")
        self.n_profiles = int(n_profiles)
        self.name = f"RND{self.n_profiles}"

    def __repr__(self) -> str:
        return f"RandomSampling(n_profiles={self.n_profiles})"


class Exhaustive(ExploringStrategy):
    """Every mode of the space (at every batch size): the oracle over that space."""

    name = "Exhaustive"
    strategy_name = "exhaustive"

    def budget_for(self, spec: ExploreSpec, space: PowerModeSpace) -> int:
        return space.size * _per_mode(spec)

    def explore_search(self, ctx: SearchContext, spec: ExploreSpec, space: PowerModeSpace) -> Generator:
        yield from ctx.profile_many(spec.points(Grid.of(space), range(space.size)))


class NeuralBaseline(_RandomPoints):
    """NN-N: ``NeuralBaseline(n_profiles=250)``. See the module docstring for ``verify``."""

    strategy_name = "nn"
    strategy_aliases = ("neuralbaseline",)

    def __init__(self, n_profiles: int = 250, *, epochs: int = 1000, hidden: Sequence[int] = (256, 128, 64),
                 lr: float = 1e-3, under_penalty: float = 4.0, batch_size: int = 32, verify: bool = True,
                 max_verify: int = 5) -> None:
        self.n_profiles = int(n_profiles)
        self.epochs, self.hidden, self.lr = int(epochs), tuple(hidden), float(lr)
        self.under_penalty, self.batch_size = float(under_penalty), int(batch_size)
        self.verify, self.max_verify = bool(verify), int(max_verify)
        self.name = f"NN{self.n_profiles}"

    def __repr__(self) -> str:
        return f"NeuralBaseline(n_profiles={self.n_profiles}, verify={self.verify})"

    def budget(self, problem: Problem, space: PowerModeSpace) -> int:
        return self.budget_for(self.spec_for(problem, 0), space) + (self.max_verify if self.verify else 0)

    def predict_table(self, ctx: SearchContext, spec: ExploreSpec, space: PowerModeSpace) -> ProfileTable:
        """Train the NN on the profiled points and predict every point of the space ("estimated" rows)."""
        grid = Grid.of(space)
        X_modes = space.to_numpy()
        N = len(X_modes)
        pts = [p for p in ctx.results if p.kind == spec.kind]
        seed = int(np.random.default_rng(spec.seed).integers(2**31))
        modes_all = [grid.mode(grid.unflat(f)) for f in range(N)]
        bss = np.asarray(spec.batch_sizes, dtype=float)
        B = bss.size
        if spec.kind == "train":
            X = np.asarray([p.mode.as_tuple() for p in pts], dtype=float)
            feats_all = X_modes
        else:
            X = np.asarray([[*p.mode.as_tuple(), p.batch_size] for p in pts], dtype=float)
            feats_all = np.concatenate([np.repeat(X_modes, B, axis=0), np.tile(bss, N)[:, None]], axis=1)
        Y = np.asarray(ctx.rows(pts))
        net = MLP(feats_all.shape[1], Y.shape[1], self.hidden, seed=seed, lr=self.lr,
                  under_penalty=self.under_penalty, batch_size=self.batch_size)
        net.set_input_scaler(feats_all)
        net.fit(X, Y, epochs=self.epochs)
        P = np.maximum(net.predict(feats_all), 1e-9)
        if spec.kind == "train":
            return ProfileTable("train", modes_all, train_time_s=P[:, 0], train_power_w=P[:, 1],
                                labels=["estimated"] * N, strategy=self.name, profiles_used=ctx.used)
        modes_rep = [m for m in modes_all for _ in range(B)]
        bs_all = np.tile(bss, N).astype(np.int64)
        if spec.kind == "infer":
            return ProfileTable("infer", modes_rep, batch_size=bs_all, infer_time_s=P[:, 0], infer_power_w=P[:, 1],
                                labels=["estimated"] * len(modes_rep), strategy=self.name, profiles_used=ctx.used)
        return ProfileTable("concurrent", modes_rep, batch_size=bs_all, train_time_s=P[:, 0], train_power_w=P[:, 1],
                            infer_time_s=P[:, 2], infer_power_w=P[:, 3], labels=["estimated"] * len(modes_rep),
                            strategy=self.name, profiles_used=ctx.used)

    def make_table(self, ctx: SearchContext, spec: ExploreSpec, space: PowerModeSpace, new_profiles: int) -> ProfileTable:
        t = self.predict_table(ctx, spec, space)
        t.new_profiles = new_profiles
        return t

    # ---- solve: predicted answer, optionally verified by profiling it
    def search(self, ctx: SearchContext, problem: Problem, space: PowerModeSpace, seed: int | None) -> Generator:
        spec = self.spec_for(problem, seed)
        yield from self.explore_search(ctx, spec, space)
        table = self.predict_table(ctx, spec, space)
        ctx.nn_choice = None  # type: ignore[attr-defined]
        a = table.assess(problem)
        feasible = np.asarray(a.feasible, dtype=bool).copy()
        tries = self.max_verify if self.verify else 1
        for _ in range(tries):
            i = best_index(a._replace(feasible=feasible))
            if i is None:
                return
            mode = table.modes[i]
            bs = None if problem.kind == "train" else int(table.batch_size[i])
            if not self.verify:
                ctx.nn_choice = (table, i)  # type: ignore[attr-defined]
                return
            pt = Point(problem.kind, mode, bs)
            res = yield from ctx.profile(pt)
            if feasible_point(problem, pt, res):
                ctx.nn_choice = ("verified", pt, res)  # type: ignore[attr-defined]
                return
            feasible[i] = False

    def answer(self, ctx: SearchContext, problem: Problem, space: PowerModeSpace, new_profiles: int) -> SearchResult:
        choice = getattr(ctx, "nn_choice", None)
        sol = None
        observed = ctx.table(problem.kind, strategy=self.name, new_profiles=new_profiles)
        if choice is not None and choice[0] == "verified":
            _, pt, _res = choice
            rows = [j for j, (m, b) in enumerate(observed.points()) if m == pt.mode and b == pt.batch_size]
            sol = observed.solution_at(problem, rows[0])
        elif choice is not None:
            table, i = choice
            table.profiles_used, table.new_profiles = ctx.used, new_profiles
            sol = table.solution_at(problem, i)
        return SearchResult(sol, ctx.visited, dict(ctx.results), ctx.used, new_profiles, observed)


class BinarySearch(Strategy):
    """The simple binary search of Fig. 6a (round-robin over the knobs, halving by power)."""

    name = "BinarySearch"
    strategy_name = "binary-search"
    strategy_aliases = ("binarysearch",)

    def _per_bs(self, space: PowerModeSpace) -> int:
        return sum(math.ceil(math.log2(n)) for n in space.shape if n > 1) + 1

    def budget(self, problem: Problem, space: PowerModeSpace) -> int:
        return self._per_bs(space) * (1 if problem.kind == "train" else len(problem.batch_sizes))

    def search(self, ctx: SearchContext, problem: Problem, space: PowerModeSpace, seed: int | None = None) -> Generator:
        grid = Grid.of(space)
        p_hat = problem.power_budget_w
        if isinstance(problem, TrainingProblem):
            yield from self._bisect(ctx, grid, lambda i: Point("train", grid.mode(i)), p_hat)
            return
        if isinstance(problem, InferenceProblem):
            order = list(problem.batch_sizes)
        elif isinstance(problem, ConcurrentProblem):
            order = sorted(problem.batch_sizes, reverse=True)
        else:
            raise TypeError(f"BinarySearch cannot solve {problem!r}")
        for bs in order:
            if queueing_time_s(bs, problem.arrival_rps) > problem.latency_budget_s:
                continue
            yield from self._bisect(ctx, grid, lambda i, b=bs: Point(problem.kind, grid.mode(i), b), p_hat)
            if any(feasible_point(problem, p, r) for p, r in ctx.results.items()):
                return

    @staticmethod
    def _bisect(ctx: SearchContext, grid: Grid, point_at: Callable[[tuple], Point], p_hat: float) -> Generator:
        lo = [0] * 4
        hi = [n - 1 for n in grid.sizes]
        cur = [(a + b + 1) // 2 for a, b in zip(lo, hi)]
        d = 0
        while True:
            res = yield from ctx.profile(point_at(tuple(cur)))
            open_dims = [k for k in range(4) if lo[k] < hi[k]]
            if not open_dims:
                return
            k = next(k for k in [(d + j) % 4 for j in range(4)] if lo[k] < hi[k])
            if within(res.power_w, p_hat):
                lo[k] = cur[k]
            else:
                hi[k] = cur[k] - 1
            cur[k] = (lo[k] + hi[k] + 1) // 2
            d = k + 1
