"""A prior for the search: every mode's minibatch time and power *predicted* by a device model, before any profile.

With a prior, GMD profiles the predicted fastest mode within the budget first instead of the midpoint, and
ALS starts from the predicted time-power front instead of random modes. Profiles confirm and correct: each
mode's prediction is scaled by ``measured / predicted`` of the nearest profiled mode (in knob-index space), so
a model that is 20 % off in power still ranks the modes around the profiled ones. A predicted value is never an
answer: a mode is chosen only from profiles that show it within the budget (``ProfileTable.solve``).

A budget holds while tuning too (issue 37): a mode is profiled only when its predicted power, raised by the
prediction's own error, is within the budget. Before any profile that error is the prior's declared one
(:attr:`Prior.power_error`: what its source is known to be off by); once the prior is corrected by a profile, what
the last corrected prediction profiled missed the measured power by (at least :data:`MARGIN_FLOOR`, a profile's own
noise). So the first window is within the budget unless the prior is off by more than it says, and after a miss the
next pick leaves room for it: a calibrated prior runs at most one window over the budget (tests/tuning/test_prior.py;
BENCHMARKS.md, "Short fine-tunes", counts the minibatches and windows over the budget while tuning).

Where the prediction comes from (:func:`prior_for_twin`, :func:`prior_from_rooflines`):

- the Orin AGX (a real board): the twin's model (``OrinTwin`` with its fitted coefficients) of the workload's
  ``analyze`` cost: per-layer FLOPs and bytes on the mode's rooflines, CPU dispatch, data loader, power;
- the twin itself (``sim:orin-agx``): the same model with the twin's *uncalibrated* coefficients
  (``OrinTwin(profile_path=False)``: the physics defaults before the fit to the published figures), because the
  calibrated twin's noise-free prediction *is* the simulated truth: a prior from it would know the answer. The
  uncalibrated model is off by as much as the calibration moved it (median power -26 %, times -1 to -8 % on the
  Fulcrum training workloads; docs/tuning.md), more than the twin's validated error against the published
  figures (within 10 %), so the benchmark on the twin is, if anything, pessimistic about the prior;
- any other device with a device profile that has a roofline for every mode searched: the roofline model alone
  (Pagoda eq. 1-2 per layer; no CPU side), a weak prior (docs/tuning.md).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from lightning_edge.modes import PowerModeSpace
from lightning_edge.tuning.pareto import pareto_front

__all__ = ["Prior", "prior_search", "prior_for_twin", "prior_from_rooflines", "DEFAULT_PRIOR_PROFILES", "MARGIN_FLOOR",
           "CALIBRATED_ERROR", "UNCALIBRATED_ERROR"]

DEFAULT_PRIOR_PROFILES = 4
"""Profiles a prior-guided GMD spends before it stops (or, with nothing within the budget yet, falls back to
Algorithm 1 with the rest of its budget)."""

MARGIN_FLOOR = 0.02
"""The least margin a corrected prediction's power gets: a profile's own noise (the twin's meter: 2 % per step)."""

#: what each source of a prior declares as its power error (relative; the search's margin before any profile): the
#: twin's calibration is validated within 10 % of the published figures (BENCHMARKS.md); the uncalibrated twin model
#: (the prior on the twin itself) is 26 % low in power at the median of the Fulcrum workloads (docs/tuning.md)
CALIBRATED_ERROR = 0.10
UNCALIBRATED_ERROR = 0.26


@dataclass
class Prior:
    """Predicted ``time_s`` and ``power_w`` of one workload on every mode of ``space`` (space order; ``label``
    ``predicted``). ``source`` says which model made them (printed in the tuner's summary); ``power_error``: how far
    off its power predictions are known to be (relative; 0: not known), the search's margin before a profile."""

    space: PowerModeSpace
    time_s: np.ndarray
    power_w: np.ndarray
    source: str
    kind: str = "train"
    label: str = "predicted"
    measured: dict = field(default_factory=dict)  # {space index: (time_s, power_w)} profiled earlier (a re-tune)
    _coords: np.ndarray | None = field(default=None, repr=False)
    power_error: float = 0.0

    def __post_init__(self) -> None:
        self.time_s = np.asarray(self.time_s, dtype=float).reshape(-1)
        self.power_w = np.asarray(self.power_w, dtype=float).reshape(-1)
        n = self.space.size
        if self.time_s.shape != (n,) or self.power_w.shape != (n,):
            raise ValueError(f"a Prior needs one time and one power per mode of the space ({n} modes), got "
                             f"{self.time_s.shape} and {self.power_w.shape}")
        if not (np.all(np.isfinite(self.time_s)) and np.all(self.time_s > 0) and np.all(np.isfinite(self.power_w))
                and np.all(self.power_w > 0)):
            raise ValueError(f"Prior ({self.source}): every predicted time and power must be finite and > 0")

    def __len__(self) -> int:
        return self.space.size

    @property
    def coords(self) -> np.ndarray:
        """Knob indices scaled to [0, 1] per knob: the distance that picks a mode's nearest profile."""
        if self._coords is None:
            inv = [np.unique(col, return_inverse=True)[1] for col in self.space.to_numpy().T]
            self._coords = np.stack([i / max(int(i.max()), 1) for i in inv], axis=1)
        return self._coords

    def corrected(self, measured: dict[int, tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
        """``(time_s, power_w)`` of every mode, each scaled by ``measured / predicted`` of the nearest mode in
        ``measured`` (``{space index: (time_s, power_w)}``; the prediction as is when it is empty)."""
        if not measured:
            return self.time_s.copy(), self.power_w.copy()
        idx = np.fromiter(measured, dtype=np.int64)
        m = np.array([measured[int(i)] for i in idx], dtype=float)
        rt, rp = m[:, 0] / self.time_s[idx], m[:, 1] / self.power_w[idx]
        d = np.linalg.norm(self.coords[:, None, :] - self.coords[idx][None, :, :], axis=2)
        near = np.argmin(d, axis=1)
        return self.time_s * rt[near], self.power_w * rp[near]

    def with_measured(self, measured: dict[int, tuple[float, float]]) -> Prior:
        """A copy whose corrections start from profiles measured earlier (``{space index: (time_s, power_w)}``,
        e.g. a re-tune's history): they correct the prediction but are not counted or returned by a search."""
        return replace(self, measured=dict(measured), _coords=self._coords)

    def front(self) -> np.ndarray:
        """Space indices of the predicted time-power Pareto front."""
        return np.asarray(pareto_front(self.time_s, self.power_w), dtype=np.int64)


def prior_search(ctx: Any, grid: Any, point_at: Any, p_hat: float, prior: Prior, limit: int,
                 min_gain: float = 0.0, trace: list | None = None) -> Generator:
    """Profile the predicted fastest mode within ``p_hat`` (every prediction corrected by the profiles so far),
    then the next one predicted faster than the best profiled mode within the budget by more than ``min_gain``
    (relative), until none is left or ``limit`` points were profiled in ``ctx``. Returns the number profiled."""
    trace = [] if trace is None else trace
    measured: dict[int, tuple[float, float]] = dict(prior.measured)
    for p, r in ctx.results.items():  # anything this search already knows corrects the prediction too
        if p.kind == "train":
            measured[grid.flat(grid.index(p.mode))] = (r.time_s, r.power_w)
    best_t = min((t for t, pw in measured.values() if pw <= p_hat), default=np.inf)
    raw_error = max(float(getattr(prior, "power_error", 0.0) or 0.0), 0.0)
    missed: list[float] = []  # how much each corrected prediction profiled was low in power (relative)

    def margin(corrected: bool) -> float:
        """The prediction's own error: the prior's declared one before any profile; once corrected by a profile,
        what the last corrected prediction profiled missed by (at least MARGIN_FLOOR)."""
        if not corrected:
            return raw_error
        return max(missed[-1], MARGIN_FLOOR) if missed else MARGIN_FLOOR

    n = 0
    while ctx.used < limit:
        t, p = prior.corrected(measured)
        corrected = bool(measured)
        k = 1.0 + margin(corrected)
        ok = p * k <= p_hat
        if measured:
            ok[np.fromiter(measured, dtype=np.int64)] = False
        ok &= t < best_t * (1.0 - min_gain)
        if not ok.any():
            # no mode is predicted faster: with profiles left, step one value up along one knob from the best
            # mode within the budget (the model may miss what that knob does), the least predicted time first
            j = _climb(grid, measured, p_hat, t, p * k) if np.isfinite(best_t) else \
                _least_power(measured, p_hat, p)
            if j is None:
                trace.append(("prior-done", len(measured)))
                break
            trace.append(("prior-climb", grid.unflat(j)))
        else:
            j = int(np.argmin(np.where(ok, t, np.inf)))
        r = yield from ctx.profile(point_at(grid.unflat(j)))
        n += 1
        if corrected and p[j] > 0:
            missed.append(max(r.power_w / float(p[j]) - 1.0, 0.0))
        measured[j] = (r.time_s, r.power_w)
        within = r.power_w <= p_hat * (1.0 + 1e-12) + 1e-15
        if within:
            best_t = min(best_t, r.time_s)
        trace.append(("prior", grid.unflat(j), "within" if within else "over", float(t[j]), float(p[j]),
                      round(k - 1.0, 4)))
    return n


def _least_power(measured: dict[int, tuple[float, float]], p_hat: float, p: np.ndarray,
                 slack: float = 0.1) -> int | None:
    """Nothing is within the budget yet and nothing is predicted to be: the unprofiled mode of least corrected
    predicted power, when that is within ``slack`` of the budget (the prediction may be that far off)."""
    q = p.copy()
    if measured:
        q[np.fromiter(measured, dtype=np.int64)] = np.inf
    j = int(np.argmin(q))
    return j if q[j] <= p_hat * (1.0 + slack) else None


def _climb(grid: Any, measured: dict[int, tuple[float, float]], p_hat: float, t: np.ndarray,
           p: np.ndarray) -> int | None:
    """An unprofiled neighbour one value up along one knob of the fastest profiled mode within ``p_hat`` whose
    corrected predicted power is within it too: the least predicted time, then the least predicted power."""
    within = [(v[0], i) for i, v in measured.items() if v[1] <= p_hat]
    if not within:
        return None
    base = grid.unflat(min(within)[1])
    cands = []
    for d in range(len(base)):
        if base[d] + 1 < grid.sizes[d]:
            j = grid.flat(base[:d] + (base[d] + 1,) + base[d + 1:])
            if j not in measured and p[j] <= p_hat:
                cands.append((float(t[j]), float(p[j]), j))
    return min(cands)[2] if cands else None


# ------------------------------------------------------------------------------------------ sources
def prior_for_twin(workload: Any, space: PowerModeSpace, *, simulated: bool, board: Any = None) -> Prior:
    """The prior of a :class:`~lightning_edge.twin.live.SimWorkload` (a zoo name, a captured cost, or a module with
    its example inputs) over ``space``: the twin's one model of its training minibatch
    (``workload.twin_workload("train")``, analysed once) on a board model. With ``simulated=True`` (the measurements
    come from a twin) the model is one that does not know the simulated truth
    (:func:`~lightning_edge.twin.boards.prior_board`: for the papers' board its *uncalibrated* coefficients; for an
    extrapolated board the extrapolation of those; for a board file, the catalogue's board of its module); else
    ``board`` (a :class:`~lightning_edge.twin.boards.BoardFile`: a real board's calibrated file, or its catalogue
    board), by default the papers' calibrated twin."""
    from lightning_edge.twin.boards import prior_board, seed_board
    from lightning_edge.twin.model import OrinTwin

    truth = getattr(getattr(workload, "twin", None), "board", None)
    if simulated:
        model = prior_board(truth) if truth is not None else seed_board(calibrated=False)
    else:
        model = board if board is not None else seed_board()
    model_twin = OrinTwin(board=model, space=space, noise=False, settling=False)
    pred = workload.twin_workload("train").on(model_twin).step(space.to_numpy())
    calibrated = not simulated or bool(getattr(model, "calibration", None))
    if simulated and model.key == "orin-agx" and model.label == "simulated" and not model.calibration:
        src = "twin model, uncalibrated coefficients (not the simulated truth), of the analyze cost"
    elif simulated:
        src = f"{model.label} twin model of {model.key} (not the simulated truth), of the analyze cost"
    elif model.key == "orin-agx" and model.calibration is None and model.label == "simulated":
        src = "Orin AGX twin model of the analyze cost"
    else:
        src = f"{model.label} twin model of {model.key} ({model.describe()}), of the analyze cost"
    err = CALIBRATED_ERROR if calibrated and getattr(model, "label", "simulated") == "simulated" else \
        UNCALIBRATED_ERROR
    return Prior(space, np.asarray(pred.time_s), np.asarray(pred.power_w), src, power_error=err)


def prior_from_rooflines(cost: Any, space: PowerModeSpace, rooflines: Any, *, source: str = "device profile") -> Prior:
    """The roofline model alone: per layer ``max(W / peak, Q / BW)`` summed over the minibatch's layers and
    power ``pi_0 + (eps_flop W + eps_mop Q) / T`` (Pagoda eq. 1-2), with ``rooflines`` a
    :class:`~lightning_edge.roofline.model.Roofline` over the modes of ``space`` (space order). No CPU side: a
    weak prior for CPU-bound minibatches."""
    W = np.array([float(getattr(layer, "flops", 0) or 0) for layer in cost.layers])
    Q = np.array([float(getattr(layer, "bytes", 0) or 0) for layer in cost.layers])
    peak = np.asarray(rooflines.peak_flops, dtype=float).reshape(-1, 1)
    bw = np.asarray(rooflines.bandwidth, dtype=float).reshape(-1, 1)
    t = np.maximum(np.maximum(W[None, :] / peak, Q[None, :] / bw).sum(axis=1), 1e-9)
    e = (np.asarray(rooflines.eps_flop, dtype=float) * W.sum() + np.asarray(rooflines.eps_mop, dtype=float) * Q.sum()
         + np.asarray(rooflines.static_power, dtype=float) * t)
    return Prior(space, t, e / t, f"{source} rooflines (roofline model only)")
