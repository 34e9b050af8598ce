"""Automatic generation of step-wise linear estimation functions (Jantsch, after Blackthorn, Lechner & Jantsch 2021).

Pure numpy: a measurement is any callable ``point -> seconds``, so the generation is tested on synthetic step
functions and run on real layers by ``lightning_edge.latency.measure``.

**The function.** Along one dimension ``x`` (filters, input channels, output pixels ...) the latency is

    f(x) = a + floor((x - 1) / w) * h                                     (a step of width w and height h)

where ``w = 1`` is the linear piece ``a + (x - 1) h`` and ``h = 0`` the constant ``a``. Over several dimensions
``x_1 .. x_D`` the parameters of dimension 1 are themselves functions of the next dimensions, and so on
(the slides' 2D example, found in two phases)::

    f(d_in, k) = 0.1418 + floor((d_in-1)/8)*0.0106 + floor((k-1)/32) * (0.044 + floor((d_in-1)/8)*0.0121)
               = a(d_in) + floor((k - 1) / 32) * h(d_in),  a and h step functions of d_in, w = 32 constant

**Generation** (``generate``):

* *phase 1*: one dimension, the others at their reference values. Hypotheses are every width ``w`` of
  ``WIDTHS`` that fits the domain; each is a linear least-squares fit of (a, h). Start from the two ends of the
  domain (every hypothesis fits two points exactly), then *iterative refinement*: measure the next point, drop
  the hypotheses it contradicts (relative residual above ``tol``), until one hypothesis is left (or the
  survivors agree everywhere on the domain) or ``max_points`` is reached.
* *next point selection* (the slides' criteria): for a step function, the candidate where the surviving
  hypotheses predict the *most distinct levels*, the *largest range of values*, and that is *furthest from the
  previous points*; for a linear function (one hypothesis, w = 1) the point furthest from the previous ones
  (a check); a width is tried only if it leaves ``MIN_LEVELS`` levels on the domain. The score is the sum of the three criteria, each normalised to [0, 1]; the highest score wins.
* *phase 2* (and further): how a, w and h move along the next dimension. w is kept (the slides find it
  constant); a and h are measured at the two ends of dimension 1 (two points give both) and generated as
  functions of the next dimension, jointly: one choice of points serves every parameter.

Every measured point, the points each 1D generation chose, and the time spent are recorded (``Generation``).

**Anchoring** (``Generation.anchored``, not in the slides). The tree's value at a point is interpolated between
the ends of every dimension: the points phase 1 measured inside a dimension only chose ``w``, and a dimension
whose cost bends (a cache level crossed, another kernel) is a straight line between its ends. On one CPU fit's
boxes the tree missed its own measured points by 13 % on average (depthwise planes on 8x8 maps 65-149 % high:
the line between 2x2 and 32x32 maps; a linear layer's 1024 -> 2145 rows 219 % high). The anchored value is the
tree's times the geometric mean of its ratios at the measured points near the point (Gaussian weights over the
log2 distance, ``ANCHOR_LOG2`` a factor of 2 per dimension), shrunk towards the tree alone by ``ANCHOR_PRIOR``
(far from every measured point it is the tree). Left-one-out over three fits' boxes: 13.2 / 13.8 / 11.2 % mean
error for the tree (which had the point itself) against 9.6 / 11.8 / 6.8 % anchored.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["WIDTHS", "ANCHOR_LOG2", "ANCHOR_PRIOR", "ANCHOR_MAX_RATIO", "Dim", "StepFn", "Node", "Fit1D", "Generation", "fit_step",
           "generate", "generate_1d", "evaluate_tree", "tree_from_dict"]

#: a step width is tried only if it leaves at least this many levels over the dimension's domain
MIN_LEVELS = 8

#: step widths tried: powers of two (SIMD lanes, warps, tiles) and three times powers of two (CPU GEMM micro-kernels)
WIDTHS: tuple[int, ...] = tuple(sorted({2 ** k for k in range(0, 12)} | {3 * 2 ** k for k in range(0, 11)}))

#: anchoring (``Generation.anchored``): the length of the weights, in log2 units per dimension (a measured point
#: twice or half the value in one dimension weighs exp(-1)), and the weight of the tree alone (no correction)
ANCHOR_LOG2 = 1.0
ANCHOR_PRIOR = 0.3
#: the most a measured point's ratio to the tree counts for (its log, either way): a tree nearly zero at a point
#: it was generated through would otherwise spread a ratio of thousands to its neighbours
ANCHOR_MAX_RATIO = 8.0


@dataclass(frozen=True)
class Dim:
    """One dimension of a layer type: its name, the values it may take (sorted integers >= 1), the reference
    value the other dimensions' generations hold it at, and the step widths tried along it (``None``: ``WIDTHS``;
    ``(1,)``: linear only, e.g. for output pixels, which a device iterates over rather than maps onto parallel
    resources)."""

    name: str
    values: tuple[int, ...]
    ref: int | None = None
    widths: tuple[int, ...] | None = None

    def __post_init__(self):
        vals = tuple(sorted({int(v) for v in self.values}))
        if not vals or vals[0] < 1:
            raise ValueError(f"Dim {self.name!r}: values must be integers >= 1, got {self.values!r}")
        object.__setattr__(self, "values", vals)
        ref = vals[-1] if self.ref is None else int(self.ref)
        if ref not in vals:
            raise ValueError(f"Dim {self.name!r}: reference {ref} is not one of its values")
        object.__setattr__(self, "ref", ref)

    @classmethod
    def range(cls, name: str, lo: int, hi: int, ref: int | None = None, widths: tuple[int, ...] | None = None) -> Dim:
        return cls(name, tuple(range(int(lo), int(hi) + 1)), ref, widths)

    @property
    def lo(self) -> int:
        return self.values[0]

    @property
    def hi(self) -> int:
        return self.values[-1]


@dataclass(frozen=True)
class StepFn:
    """``a + floor((x - 1) / w) * h``; ``w = 1``: linear; ``h = 0``: constant."""

    a: float
    w: int
    h: float

    def level(self, x):
        return np.floor((np.asarray(x, dtype=float) - 1) / self.w)

    def __call__(self, x):
        y = self.a + self.level(x) * self.h
        return y.item() if np.ndim(y) == 0 else y

    @property
    def shape(self) -> str:
        if self.h == 0:
            return "constant"
        return "linear" if self.w == 1 else "step"

    def formula(self, var: str = "x", nd: int = 4) -> str:
        if self.h == 0:
            return f"{self.a:.{nd}g}"
        if self.w == 1:
            return f"{self.a:.{nd}g} + ({var} - 1) * {self.h:.{nd}g}"
        return f"{self.a:.{nd}g} + floor(({var} - 1) / {self.w}) * {self.h:.{nd}g}"


def _levels(x: np.ndarray, w: int) -> np.ndarray:
    return np.floor((x - 1) / w)


def _scale(y: np.ndarray) -> np.ndarray:
    """Per-point error scale: the value itself (relative errors), floored at 5 % of the largest magnitude so that
    derived quantities near zero (a step height of nearly nothing) do not dominate."""
    big = max(float(np.max(np.abs(y))), 1e-300)
    return np.maximum(np.abs(y), 0.05 * big)


def fit_step(x: Sequence[float], y: Sequence[float], w: int) -> tuple[StepFn, float] | None:
    """Least-squares (a, h) for width ``w``, in relative terms (each point weighted by 1 / its value):
    ``(StepFn, max relative residual)``, or None when the points all lie on one level (h cannot be told)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    lev = _levels(x, w)
    if np.ptp(lev) == 0:
        return None
    A = np.stack([np.ones_like(lev), lev], axis=1)
    sc = _scale(y)
    (a, h), *_ = np.linalg.lstsq(A / sc[:, None], y / sc, rcond=None)
    fn = StepFn(float(a), int(w), float(h))
    res = float(np.max(np.abs(A @ np.array([a, h]) - y) / sc))
    return fn, res


@dataclass
class Fit1D:
    """The result of one (joint) 1D generation: the dimension, the points it chose (in the order chosen), the
    values seen for each component there, and each component's step function."""

    dim: str
    points: list[int]
    values: list[list[float]]          # values[c][i]: component c at points[i]
    fns: list[StepFn]
    residuals: list[float]             # max relative residual of each chosen function on its points
    labels: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"dim": self.dim, "points": list(self.points), "values": [list(v) for v in self.values],
                "fns": [{"a": f.a, "w": f.w, "h": f.h} for f in self.fns], "residuals": list(self.residuals),
                "labels": list(self.labels)}

    @classmethod
    def from_dict(cls, d: dict) -> Fit1D:
        return cls(d["dim"], list(d["points"]), [list(v) for v in d["values"]],
                   [StepFn(float(f["a"]), int(f["w"]), float(f["h"])) for f in d["fns"]],
                   list(d["residuals"]), list(d.get("labels", [])))


class _Component:
    """Hypotheses (one per width) for one component along one dimension."""

    def __init__(self, widths: Sequence[int], tol: float):
        self.widths = list(widths)
        self.tol = tol
        self.fits: dict[int, tuple[StepFn, float]] = {}

    def refit(self, x: np.ndarray, y: np.ndarray) -> None:
        self.fits = {w: r for w in self.widths if (r := fit_step(x, y, w)) is not None}

    def alive(self) -> list[StepFn]:
        ok = [fn for fn, res in self.fits.values() if res <= self.tol]
        if ok:
            return ok
        if not self.fits:
            return []
        # nothing fits within tol (noisy or not step-shaped): keep the best and those close to it
        best = min(res for _fn, res in self.fits.values())
        return [fn for fn, res in self.fits.values() if res <= 1.5 * best + 1e-12]

    def best(self, x: np.ndarray, y: np.ndarray) -> tuple[StepFn, float]:
        """The chosen function: a constant when the values agree within tol; else the hypothesis with the least
        leave-one-out error (relative RMS: each point predicted from the others, so a wide step that explains a
        lone point by itself does not win), the linear one or the widest step among those within 10 % of it."""
        sc = _scale(y)
        if np.max(np.abs(y - np.mean(y)) / sc) <= self.tol:
            return StepFn(float(np.mean(y)), 1, 0.0), float(np.max(np.abs(y - np.mean(y)) / sc))
        scored = []
        for w, (fn, res) in self.fits.items():
            if res <= self.tol * 1e-3 or x.size < 3:
                loo = res  # exact: the leave-one-out error adds nothing
            else:
                errs = []
                for i in range(x.size):
                    keep = np.arange(x.size) != i
                    r = fit_step(x[keep], y[keep], w)
                    errs.append(math.inf if r is None else abs(r[0](x[i]) - y[i]) / sc[i])
                loo = float(np.sqrt(np.mean(np.square(errs))))
            scored.append((loo, fn, res))
        lo = min(sc_[0] for sc_ in scored)
        # Occam: the linear piece unless a step explains the points clearly better (half the leave-one-out error)
        lin = [(loo, f, r) for loo, f, r in scored if f.w == 1]
        if lin and lin[0][0] <= max(2.0 * lo, lo + self.tol * 1e-3):
            return lin[0][1], lin[0][2]
        near = [(f, r) for loo, f, r in scored if loo <= max(1.1 * lo, lo + self.tol * 1e-3)]
        near.sort(key=lambda fr: (-fr[0].w, fr[1]))
        return near[0]


def _candidates(values: tuple[int, ...], limit: int = 4096) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    if v.size <= limit:
        return v
    idx = np.unique(np.linspace(0, v.size - 1, limit).round().astype(int))
    return v[idx]


def generate_1d(dim: Dim, measure: Callable[[int], Sequence[float]], n_components: int = 1, *, tol: float = 0.02,
                max_points: int = 10, min_points: int = 3, deadline: float | None = None,
                widths: Sequence[int] = WIDTHS, labels: Sequence[str] = ()) -> Fit1D:
    """Generate step functions of one dimension for ``n_components`` quantities measured together.

    ``measure(x)`` returns one value per component. Points are chosen by the slides' next-point selection; the
    loop stops when every component has one surviving hypothesis (or its survivors agree on the whole domain),
    at ``max_points``, or at ``deadline`` (``time.monotonic()``; the two end points are always measured).
    """
    span = dim.hi - dim.lo
    # a step must leave at least MIN_LEVELS levels over the domain: fewer cannot be told from noise with a few points
    ws = [w for w in (dim.widths or widths) if w <= max(1, span // MIN_LEVELS)] or [1]
    comps = [_Component(ws, tol) for _ in range(n_components)]
    pts: list[int] = []
    ys: list[list[float]] = [[] for _ in range(n_components)]

    def take(x: int) -> None:
        v = list(measure(int(x)))
        if len(v) != n_components:
            raise ValueError(f"measure({x}) returned {len(v)} values, expected {n_components}")
        pts.append(int(x))
        for c in range(n_components):
            ys[c].append(float(v[c]))

    take(dim.lo)
    if dim.hi != dim.lo:
        take(dim.hi)
    cand = _candidates(dim.values)
    while dim.hi != dim.lo and len(pts) < max_points and len(pts) < len(dim.values):
        if deadline is not None and time.monotonic() > deadline and len(pts) >= 3:
            break
        x = np.asarray(pts, dtype=float)
        score = np.zeros_like(cand)
        undecided = False
        for c, comp in enumerate(comps):
            y = np.asarray(ys[c])
            comp.refit(x, y)
            alive = comp.alive()
            if not alive:
                continue
            pred = np.stack([f(cand) for f in alive])                     # (hypotheses, candidates)
            yscale = max(float(np.max(np.abs(y))), 1e-300)
            rounded = np.round(pred / (yscale * max(tol, 1e-9)))
            distinct = np.array([len(np.unique(rounded[:, j])) for j in range(cand.size)], dtype=float)
            rng = np.ptp(pred, axis=0)
            if distinct.max() > 1:
                undecided = True
                score += (distinct - 1) / max(distinct.max() - 1, 1) + rng / max(rng.max(), 1e-300)
        if not undecided:
            # one hypothesis left in every component: stop once it was confirmed by points beyond the first two
            if len(pts) >= max(3, min_points):
                break
        taken = np.isin(cand, x)
        dist = np.min(np.abs(cand[:, None] - x[None, :]), axis=1)
        score += dist / max(dist.max(), 1e-300)
        score[taken] = -np.inf
        if not np.isfinite(score).any():
            break
        take(int(cand[int(np.argmax(score))]))
    x = np.asarray(pts, dtype=float)
    fns, res = [], []
    for c, comp in enumerate(comps):
        y = np.asarray(ys[c])
        if len(pts) == 1:
            fn, r = StepFn(float(y[0]), 1, 0.0), 0.0
        else:
            comp.refit(x, y)
            fn, r = comp.best(x, y)
        fns.append(fn)
        res.append(r)
    return Fit1D(dim.name, pts, ys, fns, res, list(labels))


# ------------------------------------------------------------------------------------------ nested functions
@dataclass
class Node:
    """``a(rest) + floor((x_dim - 1) / w) * h(rest)``; a and h are Nodes of later dimensions or floats."""

    dim: int
    name: str
    w: int
    a: Any
    h: Any

    def __call__(self, point: Sequence[float]) -> float:
        return evaluate_tree(self, point)

    def to_dict(self) -> dict:
        def enc(v):
            return v.to_dict() if isinstance(v, Node) else float(v)
        return {"dim": self.dim, "name": self.name, "w": self.w, "a": enc(self.a), "h": enc(self.h)}

    def formula(self, nd: int = 4) -> str:
        def fmt(v):
            return v.formula(nd) if isinstance(v, Node) else f"{v:.{nd}g}"
        h = fmt(self.h)
        if isinstance(self.h, float) and self.h == 0:
            return fmt(self.a)
        lev = f"({self.name} - 1)" if self.w == 1 else f"floor(({self.name} - 1) / {self.w})"
        return f"{fmt(self.a)} + {lev} * ({h})"


def evaluate_tree(tree: Any, point: Sequence[float]) -> float:
    if not isinstance(tree, Node):
        return float(tree)
    lev = math.floor((float(point[tree.dim]) - 1) / tree.w)
    return evaluate_tree(tree.a, point) + lev * evaluate_tree(tree.h, point)


def tree_from_dict(d: Any) -> Any:
    if not isinstance(d, dict):
        return float(d)
    return Node(int(d["dim"]), str(d["name"]), int(d["w"]), tree_from_dict(d["a"]), tree_from_dict(d["h"]))


@dataclass
class Generation:
    """A generated D-dimensional function with how it was found: every measured point (``points``: the full
    point and its value, in measurement order), every 1D generation (``phases``) and the time spent."""

    dims: list[Dim]
    tree: Any
    points: list[tuple[tuple[int, ...], float]]
    phases: list[Fit1D]
    elapsed_s: float

    def __call__(self, point: Sequence[float]) -> float:
        return evaluate_tree(self.tree, point)

    def anchored(self, point: Sequence[float], log2: float = ANCHOR_LOG2, prior: float = ANCHOR_PRIOR) -> float:
        """The tree's value at ``point`` times the weighted geometric mean of its ratios at the measured points
        (``measured / tree``), each weighted ``exp(-d^2 / log2^2)`` by its squared log2 distance ``d^2`` to
        ``point`` (summed over the dimensions), ``prior`` the weight of ratio 1: at a measured point far from the
        others, about the measurement; far from every point, the tree. Where the tree is not positive, the tree
        (a ratio cannot correct it)."""
        base = evaluate_tree(self.tree, point)
        lq, r = self._anchors()
        if not (base > 0 and math.isfinite(base)) or not r.size or not log2 > 0 or len(point) != lq.shape[1]:
            return base
        lp = np.log2(np.maximum(np.asarray(point, dtype=float), 1.0))
        w = np.exp(-np.sum((lq - lp) ** 2, axis=1) / (log2 * log2))
        total = float(np.sum(w)) + max(0.0, prior)
        return base * math.exp(float(np.dot(w, r)) / total) if total > 0 else base

    def _anchors(self) -> tuple[np.ndarray, np.ndarray]:
        """(log2 of the measured points, log of measured / tree there, within ``ANCHOR_MAX_RATIO`` either way), for
        the points of the generation's dimensions where both are positive and finite; computed once for this tree
        and these points."""
        key = (id(self.tree), id(self.points), len(self.points))
        got = self.__dict__.get("_anchor_cache")
        if got is None or got[0] != key:
            nd, cap = len(self.dims), math.log(ANCHOR_MAX_RATIO)
            pts, r = [], []
            for p, y in self.points:
                t = evaluate_tree(self.tree, p) if len(p) == nd else 0.0
                if y > 0 and t > 0 and math.isfinite(y) and math.isfinite(t):
                    pts.append(p)
                    r.append(min(cap, max(-cap, math.log(y) - math.log(t))))
            lq = np.log2(np.maximum(np.array(pts, dtype=float).reshape(len(pts), nd), 1.0))
            got = (key, lq, np.array(r, dtype=float))
            self.__dict__["_anchor_cache"] = got
        return got[1], got[2]

    @property
    def n_points(self) -> int:
        return len(self.points)

    @property
    def full_sweep_points(self) -> int:
        return int(np.prod([len(d.values) for d in self.dims], dtype=float))

    def formula(self, nd: int = 4) -> str:
        return self.tree.formula(nd) if isinstance(self.tree, Node) else f"{self.tree:.{nd}g}"

    def to_dict(self) -> dict:
        return {
            "dims": [{"name": d.name, "lo": d.lo, "hi": d.hi, "n_values": len(d.values), "ref": d.ref,
                      "widths": list(d.widths) if d.widths else None,
                      "values": list(d.values) if len(d.values) <= 512 else None} for d in self.dims],
            "tree": self.tree.to_dict() if isinstance(self.tree, Node) else float(self.tree),
            "points": [[list(p), v] for p, v in self.points],
            "phases": [f.to_dict() for f in self.phases],
            "elapsed_s": self.elapsed_s,
            "formula": self.formula(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> Generation:
        dims = []
        for dd in d["dims"]:
            vals = dd.get("values") or list(range(int(dd["lo"]), int(dd["hi"]) + 1))
            dims.append(Dim(dd["name"], tuple(vals), dd.get("ref"), tuple(dd["widths"]) if dd.get("widths") else None))
        return cls(dims, tree_from_dict(d["tree"]), [(tuple(int(v) for v in p), float(y)) for p, y in d["points"]],
                   [Fit1D.from_dict(f) for f in d["phases"]], float(d.get("elapsed_s", 0.0)))


def generate(dims: Sequence[Dim], measure: Callable[[tuple[int, ...]], float], *, tol: float = 0.02,
             max_points: int = 10, min_points: int = 3, deadline: float | None = None,
             widths: Sequence[int] = WIDTHS) -> Generation:
    """Generate a D-dimensional step-wise linear function of ``measure(point)`` (point: one int per dim).

    Phase 1 generates dimension 0 with the others at their reference values; each later phase generates, jointly,
    the parameters (a, h) of every function found so far along the next dimension (w kept, as in the slides),
    measuring them at the two ends of the earlier dimensions. Measurements are cached: a point is measured once.
    """
    dims = list(dims)
    if not dims:
        raise ValueError("generate: need at least one dimension")
    t0 = time.monotonic()
    cache: dict[tuple[int, ...], float] = {}
    order: list[tuple[tuple[int, ...], float]] = []

    def m(point: tuple[int, ...]) -> float:
        point = tuple(int(v) for v in point)
        if point not in cache:
            v = float(measure(point))
            if not math.isfinite(v):
                raise ValueError(f"measurement at {point} is not a finite number: {v!r}")
            cache[point] = v
            order.append((point, v))
        return cache[point]

    phases: list[Fit1D] = []
    # a component is a function of the remaining dims, given as (prefix assignments -> value) through a
    # linear combination of measurements: value(rest) = sum_k coef_k * m(prefix_k + rest)
    comps: list[list[tuple[float, tuple[int, ...]]]] = [[(1.0, ())]]
    labels = ["f"]
    trees_by_level: list[list[tuple[int, Any, Any]]] = []  # per level: per component (w, a_index, h_index)
    for i, dim in enumerate(dims):
        tail = tuple(d.ref for d in dims[i + 1:])

        def measure_x(x, comps=comps, tail=tail):
            return [sum(c * m(prefix + (x,) + tail) for c, prefix in comp) for comp in comps]

        fit = generate_1d(dim, measure_x, len(comps), tol=tol, max_points=max_points, min_points=min_points,
                          deadline=deadline, widths=widths, labels=labels)
        phases.append(fit)
        if i == len(dims) - 1:
            trees_by_level.append([(fn.w, fn.a, fn.h) for fn in fit.fns])
            break
        # the parameters of each function become the next level's components
        new_comps: list[list[tuple[float, tuple[int, ...]]]] = []
        new_labels: list[str] = []
        level: list[tuple[int, Any, Any]] = []
        lo, hi = dim.lo, dim.hi
        for comp, fn, lab in zip(comps, fit.fns, labels):
            a_idx = len(new_comps)
            if fn.h == 0 or lo == hi:
                new_comps.append([(c, prefix + (lo,)) for c, prefix in comp])   # a(rest) = value at x = lo
                new_labels.append(f"{lab}.a")
                level.append((fn.w, a_idx, None))
                continue
            l_lo = math.floor((lo - 1) / fn.w)
            l_hi = math.floor((hi - 1) / fn.w)
            # h = (v_hi - v_lo) / (l_hi - l_lo);  a = v_lo - l_lo * h
            hc = [(c / (l_hi - l_lo), prefix + (hi,)) for c, prefix in comp] + \
                 [(-c / (l_hi - l_lo), prefix + (lo,)) for c, prefix in comp]
            ac = [(c, prefix + (lo,)) for c, prefix in comp] + [(-l_lo * c, p) for c, p in hc]
            new_comps.append(ac)
            new_comps.append(hc)
            new_labels += [f"{lab}.a", f"{lab}.h"]
            level.append((fn.w, a_idx, a_idx + 1))
        trees_by_level.append(level)
        comps, labels = new_comps, new_labels

    # assemble from the last level back: level L's entries are leaves (a, h floats)
    last = trees_by_level[-1]
    nodes: list[Any] = [Node(len(dims) - 1, dims[-1].name, w, a, h) if h != 0 else a for (w, a, h) in last]
    for lvl in range(len(trees_by_level) - 2, -1, -1):
        built = []
        for w, a_idx, h_idx in trees_by_level[lvl]:
            a = nodes[a_idx]
            if h_idx is None:
                built.append(a)
            else:
                built.append(Node(lvl, dims[lvl].name, w, a, nodes[h_idx]))
        nodes = built
    return Generation(dims, nodes[0], order, phases, time.monotonic() - t0)
