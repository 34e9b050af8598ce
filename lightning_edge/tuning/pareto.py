"""Pareto fronts, feasibility and best-feasible selection over arrays of profiled points.

Fulcrum answers a problem by looking it up in a Pareto front of time versus power built from the
profiles (sections 5.2, 5.3): ALS, RND and the oracle use the *observed* front, the NN baseline a
*predicted* one. Pure numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lightning_edge.tuning.problems import Assessment

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def pareto_front(cost_a: ArrayLike, cost_b: ArrayLike) -> np.ndarray:
    """Indices of the points not dominated when minimising both costs, sorted by ``cost_a``.

    A point is dominated when another is no worse in both costs and better in one. Ties (equal in
    both) keep the first occurrence. ``pareto_front(time, power)`` is Fulcrum's time-power Pareto;
    to maximise a quantity pass its negative.
    """
    a = np.asarray(cost_a, dtype=float).ravel()
    b = np.asarray(cost_b, dtype=float).ravel()
    if a.shape != b.shape:
        raise ValueError(f"pareto_front: costs have different lengths ({a.size} and {b.size})")
    if a.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(a.size), b, a))  # by a, then b, then position
    keep = []
    best_b = np.inf
    for i in order:
        if b[i] < best_b:
            keep.append(i)
            best_b = b[i]
    return np.asarray(keep, dtype=np.int64)


def best_index(assessment: Assessment) -> int | None:
    """Position of the best feasible point (lexicographic minimum of ``assessment.rank``), or ``None``."""
    feasible = np.asarray(assessment.feasible, dtype=bool)
    if not feasible.any():
        return None
    idx = np.nonzero(feasible)[0]
    keys = [np.asarray(k, dtype=float)[idx] for k in assessment.rank]
    order = np.lexsort(tuple([idx] + keys[::-1]))
    return int(idx[order[0]])


def cummin_by_power(power_w: ArrayLike, cost: ArrayLike, budgets_w: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """For each power budget, the least ``cost`` among points with power <= budget, and its position.

    Vectorised lookup used by the evaluation: sort by power once, take a running minimum, then
    ``searchsorted`` the budgets. Returns ``(best_cost, index)`` with ``inf`` / ``-1`` where no point fits.
    Ties in cost keep the lower power (then the earlier position).
    """
    p = np.asarray(power_w, dtype=float).ravel()
    c = np.asarray(cost, dtype=float).ravel()
    budgets = np.asarray(budgets_w, dtype=float).ravel()
    if p.size == 0:
        return np.full(budgets.shape, np.inf), np.full(budgets.shape, -1, dtype=np.int64)
    order = np.lexsort((np.arange(p.size), p))
    ps, cs = p[order], c[order]
    run_idx = np.zeros(ps.size, dtype=np.int64)
    best = 0
    for k in range(1, ps.size):
        if cs[k] < cs[best]:
            best = k
        run_idx[k] = best
    pos = np.searchsorted(ps, budgets * (1 + 1e-12) + 1e-15, side="right") - 1
    ok = pos >= 0
    out_idx = np.full(budgets.shape, -1, dtype=np.int64)
    out_cost = np.full(budgets.shape, np.inf)
    out_idx[ok] = order[run_idx[pos[ok]]]
    out_cost[ok] = c[out_idx[ok]]
    return out_cost, out_idx
