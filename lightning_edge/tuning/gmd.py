"""GMD: gradient-descent based multi-dimensional search (Fulcrum section 5.1, Algorithm 1, Fig. 15b/c).

Training (Algorithm 1, section 5.1.2)
    1. Profile the midpoint mode ``mid`` (every knob at its middle value; L7-8).
    2. If ``p_mid > p_hat`` profile the four modes that set one knob to its lowest value, else to its
       highest (L9-21). From ``mid`` and each of them compute the time slope and the power slope of
       that knob and their ratio ``rho = |dt| / dp``: the time saved per watt spent (L22-26).
    3. Pick the knob with the largest ``rho`` (L27) and prune its half of the range that cannot hold
       the answer (L28): values at and above ``mid`` when ``mid`` is over budget, below it otherwise.
    4. Loop (L29-47): profile the middle of the knob's remaining values with the other knobs unchanged;
       over budget -> prune the values above it, within budget -> it is a candidate and the values
       below it are pruned (power rises monotonically along every knob); update that knob's ``rho``
       from the new point and the previous one on the line (L44); pick the knob with the largest
       ``rho`` again (L45). A knob whose values are exhausted gives way to the next-largest ``rho``
       (section 5.1.2, step 8). Stop when the profiling budget (10) is spent or nothing is left.
    5. Return the best candidate (L48).

Inference (section 5.1.3, Fig. 15b): run the search with ``bs = 1`` (the least latency). If nothing
is feasible, *backtrack*: the visited modes that meet the power budget but whose inference rate
cannot keep up with the arrivals are tried at larger batch sizes, sorted by increasing latency, until
one is feasible (budget 11 = 10 + 1 for backtracking).

Concurrent (section 5.1.4, Fig. 15c): start from the largest batch size. *Branch and bound*: profile
MAXN at that size and drop the size if even MAXN misses the latency budget, moving to the next
smaller one. Search at the retained size, using at each step the slope ratios of the *dominant*
workload (the one drawing more power at the last profiled mode). If nothing is feasible,
*backtrack*: drop the visited modes that cannot keep up with the arrivals, and try the others at the
next smaller batch sizes sorted by increasing latency (budget 15).

Where the published pseudo-code is loose we make these choices (documented in docs/tuning.md):

- The ``while (tries < max_tries) OR (|space| > 1)`` of L29 is read as AND, and the budget counts
  every distinct point profiled (mid and the four extremes included), so GMD10 profiles <= 10 modes.
- ``rho = (t_low - t_high) / max(p_high - p_low, power_eps_w)`` between two modes that differ in one
  knob: the "thresholding logic" that stops a negligible power change from inflating the slope.
- The search moves along a *line* (one knob varied, the others fixed at the current base mode).
  Known points on the line bound the search: the largest value within budget and the smallest value
  over budget; the next value profiled is the upper middle of the unprofiled values between them
  (inside the knob's pruned range). After each profile the base moves to the best point of the line:
  the highest value within budget, or, when none is, the lowest value over budget (so a search that
  starts over budget keeps descending). A knob can be chosen without a profile when the known points
  on its line already move the base (for example the highest extreme is within budget).
- Every profiled point that meets the constraints is a candidate (the midpoint and the extremes too).

Three additions, on by default and off in ``GMD.as_published()`` (docs/tuning.md has their effect):
the MAXN branch and bound of 5.1.4 applied to inference too (``inference_bound``); ``finish_line``:
after a step the same knob is bisected again while its line still has unprofiled values between one
within the budget and one over it, before the knob is re-picked by slope ratio; and, for concurrent
problems, ``stall_aware``: a mode within the power budget whose training minibatch and inference batch
do not fit in one inference cycle is *stalled*, and so is every slower mode on its line. The search then
goes on from the line's lowest value over the budget when that one misses the power budget by less
(relatively) than the stalled mode misses the cycle, and while stalled ranks knobs by the slope ratio
of the whole cycle (``t_tr + t_in`` against the larger power) rather than the dominant workload's.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_edge.modes import PowerModeSpace
from lightning_edge.tuning.pareto import best_index
from lightning_edge.tuning.prior import (
    DEFAULT_PRIOR_PROFILES,
    EXTRA_PROFILES,
    POWER_GUARD,
    Prior,
    is_within,
    prior_search,
    sems_under,
)
from lightning_edge.tuning.problems import (
    ConcurrentMeasurement,
    ConcurrentProblem,
    InferenceProblem,
    Problem,
    TrainingProblem,
    Workload,
    cycle_time_s,
    inference_latency_s,
    interleaved_minibatches,
    keeps_up,
    queueing_time_s,
    within,
)
from lightning_edge.tuning.search import (
    Grid,
    Point,
    Result,
    SearchContext,
    SearchResult,
    Strategy,
    open_backend,
)
from lightning_edge.tuning.table import ProfileTable

if TYPE_CHECKING:
    from lightning_edge.tuning.store import StoreSpec

DEFAULT_MAX_PROFILES = {"train": 10, "infer": 11, "concurrent": 15}
"""Fulcrum's GMD budgets: GMD10 (training), GMD11 (inference), GMD15 (concurrent)."""


def _parts(res: Result) -> dict[str, tuple[float, float]]:
    """(time, power) of each workload in a profiled result."""
    if isinstance(res, ConcurrentMeasurement):
        return {"train": (res.train.time_s, res.train.power_w), "infer": (res.infer.time_s, res.infer.power_w)}
    return {"w": (res.time_s, res.power_w)}


def _power(res: Result) -> float:
    return max(p for _, p in _parts(res).values())


def _dominant(res: Result) -> str:
    parts = _parts(res)
    return max(parts, key=lambda w: (parts[w][1], w == "train"))


def _with(idx: tuple, d: int, v: int) -> tuple:
    return idx[:d] + (v,) + idx[d + 1:]


def slope_ratio(t_low: float, p_low: float, t_high: float, p_high: float, power_eps_w: float) -> float:
    """``rho``: time saved per watt added when a knob goes from its lower to its higher value.

    ``m_time / m_pow`` of Fulcrum with the sign chosen so that a knob that cuts time is positive; the
    knob's own step cancels out. A power change below ``power_eps_w`` counts as ``power_eps_w``.
    """
    return (t_low - t_high) / max(p_high - p_low, power_eps_w)


class _Line:
    """The search state of Algorithm 1: base mode, pruned range per knob, slope ratios per workload."""

    def __init__(self, ctx: SearchContext, grid: Grid, point_at: Callable[[tuple], Point], p_hat: float,
                 power_eps_w: float, stalled: Callable[[Any], float] | None = None) -> None:
        self.ctx, self.grid, self.point_at, self.p_hat = ctx, grid, point_at, p_hat
        self.stalled = stalled
        self.eps = power_eps_w
        self.lo = [0] * 4
        self.hi = [n - 1 for n in grid.sizes]
        self.rho: dict[str, list[float]] = {}
        self._limit_w = p_hat * (1.0 + 1e-12) + 1e-15  # the slack of problems.within
        self._known: dict[tuple, Result | None] = {}  # memo of ctx lookups: only this search adds points meanwhile
        self.descend_min = False
        # set by moved(): the base is within the budget but too slow for the problem (stall_ascent), or over
        # the budget because the line below it was too slow (stall_descent)
        self.stall_ascent = self.stall_descent = False

    def over(self, res: Result) -> bool:
        return _power(res) > self._limit_w

    def known(self, idx: tuple) -> Result | None:
        if idx not in self._known:
            self._known[idx] = self.ctx.known(self.point_at(idx))
        return self._known[idx]

    def record(self, idx: tuple, res: Result) -> None:
        self._known[idx] = res

    def line(self, base: tuple, d: int) -> tuple[list[int], list[int]]:
        """Values of knob ``d`` profiled on the line through ``base``: (within budget, over budget)."""
        f, i = [], []
        for v in range(self.grid.sizes[d]):
            r = self.known(_with(base, d, v))
            if r is not None:
                (i if self.over(r) else f).append(v)
        return f, i

    def candidates(self, base: tuple, d: int) -> list[int]:
        f, i = self.line(base, d)
        a = max(f) if f else -1
        b = min(i) if i else self.grid.sizes[d]
        lo, hi = max(self.lo[d], a + 1), min(self.hi[d], b - 1)
        return list(range(lo, hi + 1))

    def best_on_line(self, base: tuple, d: int) -> tuple:
        f, i = self.line(base, d)
        if f and i and self.stalled is not None:
            # the highest value within the budget is too slow for the problem (and so is every lower value of
            # the knob) while the lowest value over the budget is fast enough: go on from whichever of the two
            # misses its constraint by less (relative shortfall against relative power excess)
            lo_v, hi_v = max(f), min(i)
            short = self.stalled(self.known(_with(base, d, lo_v)))
            if short > 0 and self.stalled(self.known(_with(base, d, hi_v))) <= 0:
                excess = _power(self.known(_with(base, d, hi_v))) / self.p_hat - 1.0
                return _with(base, d, hi_v if excess < short else lo_v)
        if f:
            return _with(base, d, max(f))
        if i:
            return _with(base, d, min(i))
        return base

    def set_rho(self, a: tuple, ra: Result, b: tuple, rb: Result, d: int) -> None:
        (low, rl), (high, rh) = sorted([(a, ra), (b, rb)], key=lambda x: x[0][d])
        pl, ph = _parts(rl), _parts(rh)
        if len(pl) > 1:  # the interleaved cycle: both workloads' times at the larger power
            pl["cycle"] = (sum(t for t, _ in pl.values()), max(p for _, p in pl.values()))
            ph["cycle"] = (sum(t for t, _ in ph.values()), max(p for _, p in ph.values()))
        for w in pl:
            self.rho.setdefault(w, [-math.inf] * 4)[d] = slope_ratio(pl[w][0], pl[w][1], ph[w][0], ph[w][1], self.eps)

    def argmax(self, dom: str, dims: list[int]) -> int | None:
        r = self.rho.get(dom, [-math.inf] * 4)
        return max(dims, key=lambda d: (r[d], -d), default=None)

    def argmin(self, dom: str, dims: list[int]) -> int | None:
        """The knob that gives up the least time per watt saved (``-inf`` ratios, never measured, last)."""
        r = self.rho.get(dom, [-math.inf] * 4)
        return min(dims, key=lambda d: (r[d] if math.isfinite(r[d]) else math.inf, d), default=None)

    def choose(self, dom: str, dims: list[int], descending: bool) -> int | None:
        """The knob to step next. A stalled search ranks knobs by the interleaved cycle's slope ratio (both
        workloads' times at the larger power): descending, the one that loses the least cycle time per watt
        saved; ascending from a mode that is too slow, the one that saves the most."""
        cycle = "cycle" if "cycle" in self.rho else dom
        if descending and self.stall_descent:
            return self.argmin(cycle, dims)
        if not descending and self.stall_ascent:
            return self.argmax(cycle, dims)
        if descending and self.descend_min:
            return self.argmin(dom, dims)
        return self.argmax(dom, dims)

    def moved(self, base: tuple, d: int) -> None:
        """Update the stall state after the base moved along knob ``d``."""
        if self.stalled is None:
            return
        r = self.known(base)
        if self.over(r):  # over the budget with values of the knob within it: only the stall rule does that
            self.stall_descent = self.stall_descent or bool(self.line(base, d)[0])
            self.stall_ascent = False
        else:
            self.stall_descent = False
            self.stall_ascent = self.stalled(r) > 0


def gmd_core(ctx: SearchContext, grid: Grid, point_at: Callable[[tuple], Point], p_hat: float, limit: int,
             power_eps_w: float = 0.5, trace: list | None = None,
             descend_min: bool = False, finish_line: bool = False,
             stalled: Callable[[Any], float] | None = None) -> Generator:
    """Algorithm 1 over the four knobs for one kind of point; profiles at most ``limit`` points in ``ctx``.

    ``descend_min``: while the base mode is over the power budget, lower the knob with the *smallest*
    slope ratio (the least time lost per watt saved) instead of the largest (L27, L45).
    ``finish_line``: after a step along a knob, keep bisecting that knob while its line through the base
    still has unprofiled values between a value within the budget and a value over it (the budget's
    crossing on that knob is not pinned down yet); only then pick the knob with the largest ratio again.
    ``stalled(result)``: the relative shortfall of a profiled point on the problem's other constraint, which
    only a faster setting can meet (concurrent: ``(t_tr + t_in) / cycle - 1``, > 0 when no training
    minibatch fits in an inference cycle; <= 0 when met). When the line's highest value within the budget
    falls short and its lowest value over the budget does not, the base moves to whichever of the two misses
    its constraint by less (power excess ``p / p_hat - 1`` against the shortfall): from the over-budget one
    the search lowers another knob instead of raising the others of a mode that is too slow. While stalled,
    knobs are ranked by the slope ratio of the whole cycle (see ``_Line.choose``).
    """
    trace = [] if trace is None else trace
    L = _Line(ctx, grid, point_at, p_hat, power_eps_w, stalled)
    L.descend_min = bool(descend_min)
    if ctx.used >= limit:
        return
    mid = grid.mid()
    r_mid = yield from ctx.profile(point_at(mid))
    L.record(mid, r_mid)
    over = L.over(r_mid)
    trace.append(("mid", mid, "over" if over else "within"))
    for d in range(4):  # L9-26: one extreme per knob, its slope ratio against mid
        target = 0 if over else grid.sizes[d] - 1
        if target == mid[d]:
            continue
        if ctx.used >= limit:
            break
        idx = _with(mid, d, target)
        r = yield from ctx.profile(point_at(idx))
        L.record(idx, r)
        L.set_rho(mid, r_mid, idx, r, d)
        trace.append(("extreme", idx, d))
    dom = _dominant(r_mid)
    d0 = L.choose(dom, [d for d in range(4) if grid.sizes[d] > 1], over)
    if d0 is not None:  # L27-28: prune the knob with the largest ratio
        if over:
            L.hi[d0] = min(L.hi[d0], mid[d0] - 1)
        else:
            L.lo[d0] = max(L.lo[d0], mid[d0])
        trace.append(("prune", d0, "high" if over else "low"))
    base = mid
    moves = 0
    last = None
    while ctx.used < limit and moves < 64:
        cands = {d: L.candidates(base, d) for d in range(4)}
        progress = [d for d in range(4) if cands[d] or L.best_on_line(base, d) != base]
        d = last if finish_line and last is not None and cands[last] and all(L.line(base, last)) else None
        if d is None:
            d = L.choose(dom, progress, L.over(L.known(base)))
        if d is None:
            break
        if not cands[d]:  # the line's known points already move the base
            base = L.best_on_line(base, d)
            L.moved(base, d)
            trace.append(("move", d, base))
            moves += 1
            continue
        vals = cands[d]
        v = vals[len(vals) // 2]  # L30: MID(dim_vals)
        idx = _with(base, d, v)
        r_base = L.known(base)
        r = yield from ctx.profile(point_at(idx))
        L.record(idx, r)
        if L.over(r):  # L34-36
            L.hi[d] = min(L.hi[d], v - 1)
        else:  # L37-42
            L.lo[d] = max(L.lo[d], v)
        L.set_rho(base, r_base, idx, r, d)  # L44
        dom = _dominant(r)
        trace.append(("step", idx, d, "over" if L.over(r) else "within"))
        base = L.best_on_line(base, d)
        L.moved(base, d)
        last = d


def _le(x: float, budget: float) -> bool:
    return x <= budget * (1.0 + 1e-12) + 1e-15  # problems.within, for one number


def feasible_point(problem: Problem, point: Point, res: Result) -> bool:
    """The problem's constraints for one profiled point (scalar twin of ``problem.assess``; also the
    baselines')."""
    if isinstance(problem, TrainingProblem):
        return _le(res.power_w, problem.power_budget_w)
    bs, alpha = point.batch_size, problem.arrival_rps
    if bs not in problem.batch_sizes:
        return False
    t_in = res.time_s if isinstance(problem, InferenceProblem) else res.infer.time_s
    if not (_le(res.power_w, problem.power_budget_w) and _le((bs - 1) / alpha + t_in, problem.latency_budget_s)
            and t_in <= bs / alpha * (1.0 + 1e-12)):
        return False
    if isinstance(problem, ConcurrentProblem):
        return interleaved_minibatches(res.train.time_s, t_in, bs, alpha) >= 1
    return True


def _by_latency(cands: list[tuple], tie: float) -> list[tuple]:
    """Backtracking order: increasing latency; latencies within ``tie`` (relative) of the lowest count as
    equal and go lowest power first, since a larger batch draws more power (measurement noise should not
    send the one extra profile to the mode with the least power headroom)."""
    if not cands:
        return cands
    cands = sorted(cands, key=lambda c: c[:3])
    best = cands[0][0]
    head = sorted([c for c in cands if c[0] <= best * (1 + tie)], key=lambda c: (c[1], c[0], c[2]))
    return head + [c for c in cands if c[0] > best * (1 + tie)]


def _any_feasible(ctx: SearchContext, problem: Problem) -> bool:
    return any(p.kind == problem.kind and feasible_point(problem, p, r) for p, r in ctx.results.items())


class GMD(Strategy):
    """Fulcrum's GMD. ``GMD().solve(problem, space, workload)`` -> :class:`Solution` or ``None``.

    - ``max_profiles``: budget per kind (default 10 / 11 / 15 for train / infer / concurrent).
    - ``search_profiles``: points of one multi-dimensional search (default 10); the rest of the budget
      is for branch and bound and backtracking.
    - ``power_eps_w``: the threshold below which a power change does not inflate a slope ratio.
    - ``latency_tie``: backtracking candidates whose latencies differ by less than this (relative) are
      tried lowest power first (0 = strictly by latency).
    - ``inference_bound``: the MAXN branch and bound of 5.1.4 applied to inference too (our addition).
    - ``descend_min_rho``: while over the power budget, lower the knob with the smallest slope ratio
      instead of the largest (default ``False``: Algorithm 1's ``argmax``; docs/tuning.md has the trade-off).
    - ``finish_line``: keep bisecting the knob just stepped while the budget's crossing on its line is not
      pinned down, before re-picking the knob by slope ratio (our addition, default ``True``; Algorithm 1
      re-picks after every step).
    - ``stall_aware``: concurrent only (our addition, default ``True``): do not descend into, or climb out of,
      modes too slow for one training minibatch per inference cycle by the dominant workload's slopes; see
      the module docstring. ``GMD.as_published()`` turns our additions off.
    - ``prior``: a :class:`~lightning_edge.tuning.prior.Prior` (predicted time and power of every mode; default
      ``None``: Algorithm 1 as above). Training only: GMD first profiles the predicted fastest mode within the
      budget, corrects every prediction by the nearest profile and goes on while a mode is predicted faster than
      the best profiled one within the budget, for at most ``prior_profiles`` profiles; when none of them is
      within the budget it goes on with Algorithm 1 and its full budget (so at most ``prior_profiles`` + 10
      training profiles in all), and so it does after them with ``prior_then_search=True`` (for long runs: the
      answer is the best of everything profiled). ``with_prior(prior)`` is a copy.
    - ``power_guard``: with a prior, a profile counts as within the budget (for the search and the answer) when it is
      this much (relative) under it (:data:`~lightning_edge.tuning.prior.POWER_GUARD`), counted in the profile's own
      standard errors when it says one (:func:`~lightning_edge.tuning.prior.profile_guard`); the answer falls back to
      one within the budget as measured when none is.
    - ``extra_profiles``: with a prior, past ``prior_profiles`` up to this many more while one promises a large gain
      (:data:`~lightning_edge.tuning.prior.EXTRA_PROFILES`, :data:`~lightning_edge.tuning.prior.EXTRA_GAIN`); 0 for a
      short run.
    """

    name = "GMD"
    strategy_name = "gmd"

    def __init__(self, *, max_profiles: int | dict | None = None, search_profiles: int | dict = 10,
                 power_eps_w: float = 0.5, latency_tie: float = 0.02, inference_bound: bool = True,
                 descend_min_rho: bool = False, finish_line: bool = True, stall_aware: bool = True,
                 prior: Prior | None = None, prior_profiles: int | None = None, prior_then_search: bool = False,
                 power_guard: float = POWER_GUARD, extra_profiles: int | None = None) -> None:
        mp = dict(DEFAULT_MAX_PROFILES)
        if isinstance(max_profiles, dict):
            mp.update(max_profiles)
        elif max_profiles is not None:
            mp = dict.fromkeys(mp, int(max_profiles))
        self.max_profiles = mp
        self.search_profiles = ({**dict.fromkeys(mp, 10), **search_profiles} if isinstance(search_profiles, dict)
                                else dict.fromkeys(mp, int(search_profiles)))
        self.power_eps_w = float(power_eps_w)
        self.latency_tie = float(latency_tie)
        self.inference_bound = bool(inference_bound)
        self.descend_min_rho = bool(descend_min_rho)
        self.finish_line = bool(finish_line)
        self.stall_aware = bool(stall_aware)
        self.prior = prior
        self.prior_then_search = bool(prior_then_search)
        self.prior_profiles = int(DEFAULT_PRIOR_PROFILES if prior_profiles is None else prior_profiles)
        if self.prior_profiles < 1:
            raise ValueError(f"prior_profiles must be >= 1, got {prior_profiles!r}")
        self.extra_profiles = int(EXTRA_PROFILES if extra_profiles is None else extra_profiles)
        if self.extra_profiles < 0:
            raise ValueError(f"extra_profiles must be >= 0, got {extra_profiles!r}")
        self.power_guard = float(power_guard)
        if not 0.0 <= self.power_guard < 0.5:
            raise ValueError(f"power_guard is a fraction of the budget in [0, 0.5), got {power_guard!r}")
        self.last_trace: list = []

    def with_prior(self, prior: Prior | None, then_search: bool | None = None) -> GMD:
        """A copy of this GMD that starts from ``prior`` (``None``: without one); ``then_search`` sets
        ``prior_then_search`` (default: unchanged)."""
        out = copy.copy(self)
        out.prior = prior
        if then_search is not None:
            out.prior_then_search = bool(then_search)
        out.last_trace = []
        return out

    @classmethod
    def as_published(cls, **kw: Any) -> GMD:
        """Algorithm 1 and sections 5.1.3-5.1.4 to the letter: no MAXN bound for inference, the knob re-picked
        by slope ratio after every step, stalled concurrent modes treated like any other."""
        return cls(**{"inference_bound": False, "finish_line": False, "stall_aware": False, **kw})

    def __repr__(self) -> str:
        return f"GMD(max_profiles={self.max_profiles}, search_profiles={self.search_profiles})"

    def budget(self, problem: Problem, space: PowerModeSpace) -> int:
        extra = self.prior_profiles if self.prior is not None and isinstance(problem, TrainingProblem) else 0
        return int(self.max_profiles[problem.kind]) + extra  # with a prior: its profiles, then Algorithm 1's

    def answer(self, ctx: SearchContext, problem: Problem, space: PowerModeSpace, new_profiles: int) -> SearchResult:
        """The best profiled point (:meth:`Strategy.answer`); with a prior, training's answer is the fastest profile
        within the budget by its guard when there is one (``power_guard``, in the profile's own standard errors when
        it says one: :func:`~lightning_edge.tuning.prior.is_within`; a prior aims at the budget's edge, where a
        profile's noise decides), else, of those within it as measured, the one most surely within (the most of its
        own standard errors under it: :func:`~lightning_edge.tuning.prior.sems_under`), not the fastest: the
        fastest of readings all within the guard's width of the budget is the likeliest to be over it."""
        res = super().answer(ctx, problem, space, new_profiles)
        if self.prior is None or not isinstance(problem, TrainingProblem) or res.table is None or not len(res.table):
            return res
        # the table's rows are ctx's training profiles, in order (ctx.table): each held to its own guard
        rows = [r for p, r in ctx.results.items() if p.kind == "train"]
        budget = problem.power_budget_w
        a = res.table.assess(problem)
        i = best_index(a._replace(feasible=a.feasible & np.array([is_within(r, budget, self.power_guard)
                                                                  for r in rows], dtype=bool)))
        if i is None and np.any(a.feasible):
            margin = [sems_under(r, budget) if ok else -math.inf for r, ok in zip(rows, a.feasible)]
            i = int(np.argmax(margin))
        if i is not None:
            res.solution = res.table.solution_at(problem, i)
        return res

    def search(self, ctx: SearchContext, problem: Problem, space: PowerModeSpace, seed: int | None = None) -> Generator:
        grid = Grid.of(space)
        self.last_trace = trace = []
        ctx.trace = trace  # type: ignore[attr-defined]
        limit = self.budget(problem, space)
        if isinstance(problem, TrainingProblem):
            prior = self.prior
            if prior is not None and prior.space.size == space.size:
                yield from prior_search(ctx, grid, lambda i: Point("train", grid.mode(i)), problem.power_budget_w,
                                        prior, min(limit, self.prior_profiles), trace=trace, guard=self.power_guard,
                                        extra=self.extra_profiles)
                if _any_feasible(ctx, problem) and not self.prior_then_search:
                    return
                if trace and trace[-1][0] == "prior-none-within":
                    return  # the least-power mode is over the budget: no mode is within it (prior_search)
                trace.append(("prior-then-search", ctx.used))  # Algorithm 1 in full: nothing within the budget
                # yet, or asked for (a long run: the best of both; the answer is the best of everything profiled)
            yield from gmd_core(ctx, grid, lambda i: Point("train", grid.mode(i)), problem.power_budget_w,
                                min(limit, ctx.used + self.search_profiles["train"]), self.power_eps_w, trace,
                                descend_min=self.descend_min_rho, finish_line=self.finish_line)
        elif isinstance(problem, InferenceProblem):
            yield from self._infer(ctx, grid, problem, limit, trace)
        elif isinstance(problem, ConcurrentProblem):
            yield from self._concurrent(ctx, grid, problem, limit, trace)
        else:
            raise TypeError(f"GMD cannot solve {problem!r}")

    # ------------------------------------------------------------------------------ inference (5.1.3)
    def _infer(self, ctx: SearchContext, grid: Grid, problem: InferenceProblem, limit: int, trace: list) -> Generator:
        bss = list(problem.batch_sizes)
        bs0 = bss[0]
        alpha, lat_hat = problem.arrival_rps, problem.latency_budget_s
        if self.inference_bound:  # the branch and bound of 5.1.4, from the smallest size up
            maxn = grid.mode(grid.top())
            for k, bs in enumerate(bss):
                if queueing_time_s(bs, alpha) > lat_hat or ctx.used >= limit:
                    return
                r = yield from ctx.profile(Point("infer", maxn, bs))
                lat = float(inference_latency_s(r.time_s, bs, alpha))
                ok_rate = bool(keeps_up(r.time_s, bs, alpha))
                trace.append(("bound", bs, "kept" if ok_rate and lat <= lat_hat else "dropped"))
                if lat > lat_hat * (1 + 1e-12):
                    return  # MAXN, the fastest mode, misses the latency: larger sizes only queue longer
                if ok_rate:
                    bs0, bss = bs, bss[k:]
                    break
            else:
                return
        reserve = 1 if bs0 != bss[-1] else 0  # at least one profile left for backtracking (5.1.3)
        yield from gmd_core(ctx, grid, lambda i: Point("infer", grid.mode(i), bs0), problem.power_budget_w,
                            min(limit - reserve, ctx.used + self.search_profiles["infer"]), self.power_eps_w, trace,
                            descend_min=self.descend_min_rho, finish_line=self.finish_line)
        if _any_feasible(ctx, problem):
            return
        # backtracking (B, C in Fig. 15b): within power, too slow for the arrivals at bs0
        cands = [(float(inference_latency_s(r.time_s, bs0, alpha)), r.power_w, i, p)
                 for i, (p, r) in enumerate(ctx.results.items())
                 if p.batch_size == bs0 and within(r.power_w, problem.power_budget_w)
                 and not keeps_up(r.time_s, bs0, alpha)]
        cands = _by_latency(cands, self.latency_tie)
        trace.append(("backtrack", [str(c[3].mode) for c in cands]))
        for *_, p in cands:
            t1 = ctx.results[p].time_s
            for bs in bss[1:]:
                # a minibatch of bs takes at least as long as one of bs0: sizes that could not keep up or meet
                # the latency even then are skipped without a profile (larger sizes queue longer still)
                if queueing_time_s(bs, alpha) + t1 > lat_hat * (1 + 1e-12):
                    break
                if t1 > bs / alpha * (1 + 1e-12):
                    continue
                if ctx.used >= limit:
                    return
                pt = Point("infer", p.mode, bs)
                r = yield from ctx.profile(pt)
                if feasible_point(problem, pt, r):
                    return
                if not (within(r.power_w, problem.power_budget_w) and not keeps_up(r.time_s, bs, alpha)):
                    break  # a larger batch only helps a mode that is too slow for the arrivals

    # ------------------------------------------------------------------------------ concurrent (5.1.4)
    def _concurrent(self, ctx: SearchContext, grid: Grid, problem: ConcurrentProblem, limit: int,
                    trace: list) -> Generator:
        alpha, lat_hat = problem.arrival_rps, problem.latency_budget_s
        bss = sorted(problem.batch_sizes, reverse=True)
        maxn = grid.top()
        chosen = None
        for bs in bss:  # branch and bound (D, E in Fig. 15c)
            if queueing_time_s(bs, alpha) > lat_hat:
                trace.append(("bound", bs, "queueing"))
                continue
            if ctx.used >= limit:
                return
            r = yield from ctx.profile(Point("concurrent", grid.mode(maxn), bs))
            ok = bool(within(inference_latency_s(r.infer.time_s, bs, alpha), lat_hat))
            trace.append(("bound", bs, "kept" if ok else "dropped"))
            if ok:
                chosen = bs
                break
        if chosen is None:
            return
        core_limit = min(limit, ctx.used + self.search_profiles["concurrent"])
        stalled = None
        if self.stall_aware:
            def stalled(r: ConcurrentMeasurement) -> float:
                return (r.train.time_s + r.infer.time_s) / cycle_time_s(chosen, alpha) - 1.0
        yield from gmd_core(ctx, grid, lambda i: Point("concurrent", grid.mode(i), chosen), problem.power_budget_w,
                            core_limit, self.power_eps_w, trace, descend_min=self.descend_min_rho,
                            finish_line=self.finish_line, stalled=stalled)
        if _any_feasible(ctx, problem):
            return
        # backtracking (F in Fig. 15c): drop modes that cannot keep up; try the rest at smaller sizes
        cands = [(float(inference_latency_s(r.infer.time_s, chosen, alpha)), r.power_w, i, p)
                 for i, (p, r) in enumerate(ctx.results.items())
                 if p.batch_size == chosen and within(r.power_w, problem.power_budget_w)
                 and keeps_up(r.infer.time_s, chosen, alpha)]
        cands = _by_latency(cands, 0.0)  # smaller batches draw less power: strictly by latency
        trace.append(("backtrack", [str(c[3].mode) for c in cands]))
        for bs in [b for b in bss if b < chosen]:
            for *_, p in cands:
                if ctx.used >= limit:
                    return
                pt = Point("concurrent", p.mode, bs)
                r = yield from ctx.profile(pt)
                if feasible_point(problem, pt, r):
                    return


class DynamicGMD:
    """GMD for a changing arrival rate (section 5.4).

    ``step(problem)`` first looks the new problem up among *every* point profiled so far; only when none
    of them meets it (typically the rate rose and the old batch size no longer keeps up or meets the
    latency) does it run GMD again, which reuses the stored profiles for free and backtracks to a larger
    batch size. ``profiles`` is everything profiled so far.
    """

    def __init__(self, space: PowerModeSpace, workload: Workload, gmd: GMD | None = None, *, store: StoreSpec = None,
                 **run_kw: Any) -> None:
        self.space, self.workload = space, workload
        self.gmd = gmd if gmd is not None else GMD()
        self.store = open_backend(store)
        self.run_kw = run_kw
        self.profiles: dict[Point, Result] = {}

    def step(self, problem: Problem) -> SearchResult:
        if self.profiles:
            table = ProfileTable.from_results(problem.kind, self.profiles, strategy="GMD-dynamic", profiles_used=0)
            sol = table.solve(problem) if len(table) else None
            if sol is not None:
                return SearchResult(sol, (), {}, 0, 0, table, {"reused": True})
        r = self.gmd.run(problem, self.space, self.workload, store=self.store, **self.run_kw)
        self.profiles.update(r.results)
        table = ProfileTable.from_results(problem.kind, self.profiles, strategy="GMD-dynamic",
                                          profiles_used=r.profiles_used, new_profiles=r.new_profiles)
        return SearchResult(table.solve(problem), r.visited, r.results, r.profiles_used, r.new_profiles, table,
                            {"reused": False})


__all__ = ["GMD", "DynamicGMD", "gmd_core", "slope_ratio", "DEFAULT_MAX_PROFILES"]
