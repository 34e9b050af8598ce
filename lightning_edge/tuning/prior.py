"""A prior for the search: every mode's minibatch time and power *predicted* by a device model, before any profile.

With a prior, GMD profiles the predicted fastest mode within the budget first instead of the midpoint, and
ALS starts from the predicted time-power front instead of random modes. Profiles confirm and correct: each
mode's prediction is scaled by ``measured / predicted`` of the nearest profiled mode (in knob-index space), so
a model that is 20 % off in power still ranks the modes around the profiled ones. A predicted value is never an
answer: a mode is chosen only from profiles that show it within the budget (``ProfileTable.solve``).

The budget holds while tuning too: until a profile is within the budget, and when climbing a knob from the best
one, a mode is profiled only when its predicted power, raised by :data:`FIRST_Z` times the prediction's own error,
is within the budget; a mode picked for its expected gain must be predicted within it. Before any profile that error
is the prior's declared one (:attr:`Prior.power_error`, a model's bias; :attr:`Prior.power_sd`, its scatter mode by
mode; both, their root sum of squares, before the first profile); once the prior is corrected by profiles, the
scatter shrinks near the profiled modes (:meth:`Prior.uncertainty`) but never below what the last corrected
prediction profiled missed the measured power by (at least :data:`MARGIN_FLOOR`, a profile's own noise). So the first
window is within the budget unless the prior is off by more than it says, and after a miss the next pick leaves room
for it: a calibrated prior runs at most one window over the budget. Predictions aim one standard error of a profile
under the budget (:data:`POWER_GUARD` / :data:`GUARD_Z`); a mode predicted between that and the budget is profiled for
a gain only when the gain is large (:data:`EDGE_GAIN`). A profile counts as within the budget :data:`GUARD_Z` of its
own standard errors under it (:func:`is_within`). With nothing within the budget and every mode predicted over it,
the least-power mode (every knob at its lowest) is profiled; once it reads over the budget, the search stops: every
other mode draws more (tests/tuning/test_prior.py; BENCHMARKS.md, "Short fine-tunes", counts the minibatches and windows over the budget
while tuning).

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

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from lightning_edge.modes import PowerModeSpace
from lightning_edge.tuning.pareto import pareto_front

if TYPE_CHECKING:
    from lightning_edge.cost.model_cost import ModelCost
    from lightning_edge.roofline.model import Roofline
    from lightning_edge.tuning.search import Grid, Point, SearchContext
    from lightning_edge.twin.board_files import BoardFile
    from lightning_edge.twin.sim_workload import SimWorkload

__all__ = ["Prior", "prior_search", "prior_for_twin", "prior_from_rooflines", "DEFAULT_PRIOR_PROFILES", "guarded",
           "profile_guard", "is_within", "sems_under", "widened_sem", "GUARD_Z", "SEM_FLOOR",
           "POWER_GUARD", "PROFILE_SD", "FIRST_Z", "EXPECTED_GAIN", "EDGE_GAIN", "EXTRA_PROFILES", "EXTRA_GAIN",
           "SPREAD_DISTANCE", "MARGIN_FLOOR", "CALIBRATED_ERROR", "UNCALIBRATED_ERROR"]

DEFAULT_PRIOR_PROFILES = 4
"""Profiles a prior-guided GMD spends before it stops (or, with nothing within the budget yet, falls back to
Algorithm 1 with the rest of its budget), unless a large gain is still expected (:data:`EXTRA_PROFILES`)."""

EXTRA_PROFILES = 2
"""After its profiles (``limit``, :data:`DEFAULT_PRIOR_PROFILES`), a prior-guided search profiles up to this many more
while the largest expected gain (:data:`EXPECTED_GAIN`'s measure) is at least :data:`EXTRA_GAIN`: a climb that has
not reached the budget's edge yet. Never beyond the search's own budget, and never before a mode within the budget
was found (that is Algorithm 1's fallback). ``PowerModeTuner`` takes none in a run the Trainer plans shorter than
``THOROUGH_AFTER_STEPS`` minibatches (``GMD(extra_profiles=0)``): a window there can cost hundreds of its minibatches
in settling alone."""

EXTRA_GAIN = 0.01
"""The expected gain (relative time) one more profile beyond the limit must promise: one window of about 40
minibatches against a run trained 1 % faster from then on."""

PROFILE_SD = 0.003
"""Relative standard error of a profile's power: the mean of 40 minibatches (Fulcrum's window;
``WindowSpec(rel_sem=0.004)`` measures that many) whose readings scatter by about 2 %. The default window stops at
10 minibatches once both standard errors are under 1 % (~0.7 %): a budget at its edge needs the longer one
(docs/tuning.md)."""

SEM_FLOOR = PROFILE_SD / 4
"""The least standard error a profile's power is taken to have (relative; that of 16 x 40 minibatches, the longest
window at the budget's edge): a sensor whose update period is longer than a step gives consecutive steps the same
samples, and their scatter then understates the error (identical readings would say 0)."""

GUARD_Z = 3.0
"""A prior-guided search counts a profile as within the budget when it is at least this many of its standard errors
under it (:func:`profile_guard`): a mode whose true power is at the budget then reads within it once in 740 profiles
(one-sided normal), not once in 44 as with 2. With 2, benchmarks/transfer.py (held-out seeds 6-11) chose a mode 0.05 %
over the budget, read 3.2 standard errors low by a 640-minibatch window at the budget's edge."""

POWER_GUARD = GUARD_Z * PROFILE_SD
"""A prior aims at the budget's edge, where a profile's noise decides: a prior-guided search counts a profile as
within the budget, and answers with it, only when it is at least :data:`GUARD_Z` standard errors under it, so that a
mode whose true power is just over the budget is not taken for one within it: this much (relative) for a profile
that does not say its standard error (:data:`GUARD_Z` of :data:`PROFILE_SD`: 0.9 %), that many of its own for one that does
(:func:`profile_guard`; a window at the budget's edge is measured longer, ``WindowSpec.edge_steps``, and its guard
is smaller). ``GMD(power_guard=)`` takes another (in the same units: 0 turns it off)."""

FIRST_Z = 1.0
"""Until a profile is within the budget, the search profiles the predicted fastest mode whose predicted power raised
by this many times the prediction's own error (:attr:`Prior.power_error`, :attr:`Prior.power_sd`, after a profile
what the last corrected prediction missed by) is within it: a first profile that is likely within the budget; the
same room when climbing a knob."""

EXPECTED_GAIN = 0.002
"""Once a profile is within the budget, the search profiles the mode of the largest expected gain: the expected
shortening of the best time within the budget (relative, over the prediction's uncertainty of the mode's time)
times the probability that the mode is within the budget (over the uncertainty of its power); it stops when the
largest is below this (0.2 %). Away from the profiles, a time is taken to be uncertain by at least what the last
profile's corrected prediction missed its time by: a model that was 10 % off in one mode may be as far off in the
next (benchmarks/transfer.py: MobileNetV2 on a board whose core count and GPU clock trade otherwise than A's). Only
within the search's ``limit``: the :data:`EXTRA_PROFILES` past it are bought by the prior's own expected gain (with
the miss they were too, and short fine-tunes took 5 profiles at the median instead of 4)."""

EDGE_GAIN = 0.03
"""What a profile must be expected to gain (relative time) to be spent on a mode predicted between the budget and one
standard error of a profile under it (:data:`POWER_GUARD` / :data:`GUARD_Z`: within the budget, but too close to it
to be an answer unless it reads lower): such a mode may
read over the budget, and only a large gain is worth that window. A mode predicted over the budget itself is never
profiled for a gain."""

SPREAD_DISTANCE = 1.0
"""A profile's correction (``measured / predicted``) is exact at the profiled mode (up to :data:`PROFILE_SD`) and
tells less about modes farther from it: the prediction's standard deviation grows back to the prior's own over this
distance in scaled knob indices (each knob over [0, 1])."""

MARGIN_FLOOR = 0.02
"""The least error a corrected prediction's power is given before it is profiled (a profile's own noise: the twin's
meter, 2 % per step, over the default window)."""

#: what each source of a prior declares as its power error (:attr:`Prior.power_error`, relative; before any profile): the
#: twin's calibration is validated within 10 % of the published figures (BENCHMARKS.md); the uncalibrated twin model
#: (the prior on the twin itself) is 26 % low in power at the median of the Fulcrum workloads (docs/tuning.md)
CALIBRATED_ERROR = 0.10
UNCALIBRATED_ERROR = 0.26


@dataclass
class Prior:
    """Predicted ``time_s`` and ``power_w`` of one workload on every mode of ``space`` (space order; ``label``
    ``predicted``). ``source`` says which model made them (printed in the tuner's summary)."""

    space: PowerModeSpace
    time_s: np.ndarray
    power_w: np.ndarray
    source: str
    kind: str = "train"
    label: str = "predicted"
    measured: dict = field(default_factory=dict)  # {space index: (time_s, power_w)} profiled earlier (a re-tune)
    _coords: np.ndarray | None = field(default=None, repr=False)
    time_sd: float | np.ndarray | None = None
    """How far off the predicted times may be before any profile on this board: the relative standard deviation of
    their logs, one number or one per mode (``None``: not said; the search then takes the prediction at its word)."""
    power_sd: float | np.ndarray | None = None
    """The same for the predicted powers (:func:`~lightning_edge.tuning.transfer.transferred_prior` says it): a
    scatter mode by mode, which a profile's correction removes only near the profiled mode."""
    power_error: float = 0.0
    """How far off the power predictions may be as a whole before any profile (relative; 0: not known): a model's
    bias, which the first profile's correction removes (the twin's model declares :data:`CALIBRATED_ERROR` or
    :data:`UNCALIBRATED_ERROR`). The first profile leaves room for it; after it, what a corrected prediction missed
    by takes its place (:func:`prior_search`)."""

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
        for name, v in (("time_sd", self.time_sd), ("power_sd", self.power_sd)):
            if v is not None:
                a = np.asarray(v, dtype=float)
                if a.ndim > 1 or (a.ndim == 1 and a.shape != (n,)) or not np.all(np.isfinite(a)) or np.any(a < 0):
                    raise ValueError(f"Prior ({self.source}): {name} is one relative standard deviation >= 0 or one "
                                     f"per mode ({n}), got {v!r}")

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

    def uncertainty(self, measured: dict[int, tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
        """Relative standard deviations of the corrected predictions (:meth:`corrected`) of every mode: the prior's
        own (:attr:`time_sd`, :attr:`power_sd`; 0 where not said) before any profile; after, a profile's noise
        (:data:`PROFILE_SD`) at the profiled modes, growing back to the prior's own with the distance to the
        nearest profile (:data:`SPREAD_DISTANCE`)."""
        n = self.space.size
        base = [np.broadcast_to(np.asarray(0.0 if v is None else v, dtype=float), (n,)) for v in (self.time_sd,
                                                                                                   self.power_sd)]
        if not measured:
            return base[0].copy(), base[1].copy()
        idx = np.fromiter(measured, dtype=np.int64)
        d = np.linalg.norm(self.coords[:, None, :] - self.coords[idx][None, :, :], axis=2).min(axis=1)
        f = np.minimum(d / SPREAD_DISTANCE, 1.0)
        return tuple(np.sqrt(PROFILE_SD ** 2 + (b * f) ** 2) for b in base)  # type: ignore[return-value]

    def with_measured(self, measured: dict[int, tuple[float, float]]) -> Prior:
        """A copy whose corrections start from profiles measured earlier (``{space index: (time_s, power_w)}``,
        e.g. a re-tune's history): they correct the prediction but are not counted or returned by a search."""
        return replace(self, measured=dict(measured), _coords=self._coords)

    def front(self) -> np.ndarray:
        """Space indices of the predicted time-power Pareto front."""
        return np.asarray(pareto_front(self.time_s, self.power_w), dtype=np.int64)


def prior_search(ctx: SearchContext, grid: Grid, point_at: Callable[[tuple], Point], p_hat: float, prior: Prior, limit: int,
                 min_gain: float = 0.0, trace: list | None = None, guard: float = POWER_GUARD,
                 extra: int = EXTRA_PROFILES) -> Generator:
    """Profile the predicted fastest mode within ``p_hat`` (every prediction corrected by the profiles so far; until
    one is within the budget, with :data:`FIRST_Z` times the prediction's own error to spare: the prior's declared
    :attr:`Prior.power_error` or :attr:`Prior.power_sd` before any profile, after one its scatter near the profiles
    but never less than what the last corrected prediction missed by), then, among the modes predicted within the
    budget, the mode of the largest expected gain over the best profiled mode within it (:data:`EXPECTED_GAIN`; a gain
    counts beyond ``min_gain``, relative), until none is left or ``limit`` points were profiled in ``ctx`` (then up to
    ``extra`` more, :data:`EXTRA_PROFILES`, while one promises :data:`EXTRA_GAIN`). A prediction is "within the
    budget" ``guard / GUARD_Z`` (relative) under it, a profile :func:`is_within` (``guard`` in its own standard errors).
    Without a stated uncertainty every prediction is taken at its word: the
    fastest mode predicted within the budget and faster than the best one. Returns the number profiled."""
    trace = [] if trace is None else trace
    measured: dict[int, tuple[float, float]] = dict(prior.measured)
    # where a prediction aims: one standard error of a 40-minibatch profile under the budget (a profile there, at the
    # budget's edge, is measured longer and held to its own noise: is_within)
    limit_w = guarded(p_hat, guard / GUARD_Z)
    ok_at = {i for i, (_, pw) in measured.items() if pw <= guarded(p_hat, guard)}  # the profiles counted within
    for p, r in ctx.results.items():  # anything this search already knows corrects the prediction too
        if p.kind == "train":
            i = grid.flat(grid.index(p.mode))
            measured[i] = (r.time_s, r.power_w)
            if is_within(r, p_hat, guard):
                ok_at.add(i)
    best_t = min((measured[i][0] for i in ok_at), default=np.inf)
    missed = 0.0  # how much the last corrected prediction profiled was low in power (relative)
    missed_t = 0.0  # how far off in time it was (the absolute log of measured / predicted)
    n = 0
    n_max = limit + max(int(extra), 0)
    while ctx.used < n_max and ctx.left >= 1:
        past = ctx.used >= limit  # beyond the limit: only for a large expected gain over a mode within the budget
        if past and not np.isfinite(best_t):
            break
        t, p = prior.corrected(measured)
        sd_t, sd_p = prior.uncertainty(measured)
        done = np.zeros(len(t), dtype=bool)
        if measured:
            done[np.fromiter(measured, dtype=np.int64)] = True
            # a corrected prediction is off by what the last one missed, and at least by a profile's own noise
            err_p = np.where(done, sd_p, np.maximum(sd_p, max(missed, MARGIN_FLOOR)))
        else:
            err_p = np.hypot(sd_p, max(float(prior.power_error or 0.0), 0.0))  # the model's bias, not yet corrected
        # the budget holds while tuning: no mode the prediction puts over it beyond its own error is profiled
        high_w = p * (1.0 + FIRST_Z * err_p)
        safe = (high_w <= limit_w) & ~done
        if np.isfinite(best_t):  # the largest expected gain over the best within the budget
            # (among the modes predicted within it: a mode predicted over is never profiled for a gain)
            # a time the model missed by this much before may be missed as much again away from the profiles (within
            # the search's own profiles: the extra ones past them stay for a gain the prior itself expects)
            if not past:
                sd_t = np.where(done, sd_t, np.maximum(sd_t, missed_t))
            gain = _expected_gain(t, sd_t, best_t * (1.0 - min_gain)) * _probability_within(p, sd_p, limit_w)
            gain[(p > p_hat) | done | ((p > limit_w) & (gain < EDGE_GAIN))] = 0.0
            j = int(np.argmax(gain))
            ok = gain[j] > (EXPECTED_GAIN if prior.power_sd is not None or prior.time_sd is not None else 0.0)
            if past and not (ok and gain[j] >= EXTRA_GAIN):
                trace.append(("prior-done", len(measured)))
                break
        else:  # first a mode likely within the budget: the fastest predicted within it with FIRST_Z sd to spare
            j = int(np.argmin(np.where(safe, t, np.inf)))
            ok = bool(safe.any())
        if not ok:
            # no mode is predicted faster: with profiles left, step one value up along one knob from the best
            # mode within the budget (the model may miss what that knob does), the least predicted time first
            j = _climb(grid, measured, ok_at, limit_w, t, high_w) if np.isfinite(best_t) else \
                _least_power(measured, limit_w, p, grid.flat(grid.bottom()))
            if j is None:
                trace.append(("prior-done", len(measured)))
                break
            trace.append(("prior-climb", grid.unflat(j)))
        r = yield from ctx.profile(point_at(grid.unflat(j)))
        n += 1
        if measured and p[j] > 0:
            missed = max(r.power_w / float(p[j]) - 1.0, 0.0)
            if r.time_s > 0 and math.isfinite(r.time_s):
                missed_t = abs(math.log(r.time_s / float(t[j])))
        measured[j] = (r.time_s, r.power_w)
        within = is_within(r, p_hat, guard)
        if within:
            ok_at.add(j)
            best_t = min(best_t, r.time_s)
        trace.append(("prior", grid.unflat(j), "within" if within else "over", float(t[j]), float(p[j]),
                      round(float(high_w[j] / p[j]) - 1.0, 4)))
        if not within and grid.unflat(j) == grid.bottom() and getattr(r, "trusted", True) and \
                math.isfinite(r.power_w):  # a partial profile (no power) says nothing about the budget
            # the least-power mode is over: every other mode draws more (a board's power rises with every knob),
            # so none is within the budget and profiling more of them only runs over it
            trace.append(("prior-none-within", r.power_w))
            break
    return n


def _probability_within(p: np.ndarray, sd: np.ndarray, limit_w: float) -> np.ndarray:
    """P(a mode's power <= ``limit_w``) with its log normal around the prediction ``p`` (relative sd ``sd``; a step
    at the limit where ``sd`` is 0)."""
    from scipy.special import ndtr

    sd = np.asarray(sd, dtype=float)
    z = np.log(limit_w / p) / np.where(sd > 0, sd, 1.0)
    return np.where(sd > 0, ndtr(z), (p <= limit_w).astype(float))


def _expected_gain(t: np.ndarray, sd: np.ndarray, best_t: float) -> np.ndarray:
    """E[max(0, log(best_t / T))] with log T normal around log ``t`` (sd ``sd``): the expected relative shortening of
    the best time (the gain itself where ``sd`` is 0)."""
    from scipy.special import ndtr

    mu = np.log(best_t / t)
    sd = np.asarray(sd, dtype=float)
    safe = np.where(sd > 0, sd, 1.0)
    z = mu / safe
    ei = safe * np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi) + mu * ndtr(z)
    return np.where(sd > 0, ei, np.maximum(mu, 0.0))


def guarded(p_hat: float, guard: float = POWER_GUARD) -> float:
    """The power a prior-guided search's profile must be under to count as within the budget ``p_hat``
    (``guard``: :data:`POWER_GUARD`) when the profile does not say its own noise (:func:`profile_guard`)."""
    return p_hat * (1.0 - guard)


def profile_guard(power_rel_sem: float | None, guard: float = POWER_GUARD) -> float:
    """The guard one profile is held to (relative): ``guard`` as it is when the profile does not say its standard
    error (a profile stored without it); else ``guard`` counted in :data:`PROFILE_SD` units (:data:`POWER_GUARD`:
    :data:`GUARD_Z` of them) of the profile's own standard error (``Measurement.power_rel_sem``: a window measured
    longer at the budget's edge has less noise, and a short one more)."""
    sem = _said_sem(power_rel_sem)
    return guard if sem is None else min(guard * sem / PROFILE_SD, 0.49)


def _said_sem(power_rel_sem: float | None) -> float | None:
    """A profile's own relative standard error as the guard takes it: at least :data:`SEM_FLOOR`; None when it does
    not say one (or says a negative or non-finite one)."""
    if power_rel_sem is None or not math.isfinite(power_rel_sem) or power_rel_sem < 0:
        return None
    return max(float(power_rel_sem), SEM_FLOOR)


def widened_sem(rel_sem: float, n: int) -> float:
    """A standard error estimated from the scatter of ``n`` readings, widened so that :data:`GUARD_Z` of it is as safe
    as :data:`GUARD_Z` true standard errors: times Student's t quantile with ``n - 1`` degrees of freedom at the
    guard's level over :data:`GUARD_Z` (1.36 for 10 readings, 1.07 for 40, 1.004 for 640; infinite for fewer than 2).
    Few readings may scatter less than the sensor does by chance (10 readings of a 2 % noise once said 0.7 %, and a
    mode 0.3 % over the budget counted as within it: benchmarks/autotune.py, MobileNetV3 at 20 W, seed 2)."""
    from scipy.special import ndtr, stdtrit

    if n < 2 or not math.isfinite(rel_sem):
        return math.inf
    return float(rel_sem) * float(stdtrit(n - 1, ndtr(GUARD_Z))) / GUARD_Z


def is_within(m: object, p_hat: float, guard: float = POWER_GUARD) -> bool:
    """A profile (a :class:`~lightning_edge.records.Measurement`) counts as within the budget ``p_hat``: its power is
    under it by its guard (:func:`profile_guard`)."""
    pw = float(getattr(m, "power_w", math.nan))
    return math.isfinite(pw) and pw <= guarded(p_hat, profile_guard(getattr(m, "power_rel_sem", None), guard))


def sems_under(m: object, p_hat: float) -> float:
    """How many of its own standard errors a profile's power is under the budget ``p_hat`` (negative: over it;
    ``PROFILE_SD`` for a profile that does not say its own, at least ``SEM_FLOOR``); -inf without a power."""
    pw = float(getattr(m, "power_w", math.nan))
    if not (math.isfinite(pw) and pw > 0):
        return -math.inf
    sem = _said_sem(getattr(m, "power_rel_sem", None))
    return (p_hat - pw) / (pw * (PROFILE_SD if sem is None else sem))


def _least_power(measured: dict[int, tuple[float, float]], p_hat: float, p: np.ndarray, bottom: int,
                 slack: float = 0.1) -> int | None:
    """Nothing is within the budget yet and nothing is predicted to be: the unprofiled mode of least corrected
    predicted power, when that is within ``slack`` of the budget (the prediction may be that far off); else the
    least-power mode itself (``bottom``: every knob at its lowest), unprofiled: if it reads over the budget, so does
    every other mode and the search stops (:func:`prior_search`); searching down from the top instead (Algorithm
    1) would run every window over the budget, by up to 74 % in benchmarks/transfer.py."""
    q = p.copy()
    if measured:
        q[np.fromiter(measured, dtype=np.int64)] = np.inf
    j = int(np.argmin(q))
    if q[j] <= p_hat * (1.0 + slack):
        return j
    return bottom if bottom not in measured else None


def _climb(grid: Grid, measured: dict[int, tuple[float, float]], ok_at: set[int], p_hat: float, t: np.ndarray,
           p: np.ndarray) -> int | None:
    """An unprofiled neighbour one value up along one knob of the fastest profiled mode within the budget (``ok_at``)
    whose corrected predicted power is within ``p_hat`` (the guarded budget): the least predicted time, then the
    least predicted power."""
    within = [(measured[i][0], i) for i in ok_at]
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
def prior_for_twin(workload: SimWorkload, space: PowerModeSpace, *, simulated: bool,
                   board: BoardFile | None = None) -> Prior:
    """The prior of a :class:`~lightning_edge.twin.sim_workload.SimWorkload` (a zoo name, a captured cost, or a module with
    its example inputs) over ``space``: the twin's one model of its training minibatch
    (``workload.twin_workload("train")``, analysed once) on a board model. With ``simulated=True`` (the measurements
    come from a twin) the model is one that does not know the simulated truth
    (:func:`~lightning_edge.twin.board_files.prior_board`: for the papers' board its *uncalibrated* coefficients; for an
    extrapolated board the extrapolation of those; for a board file, the catalogue's board of its module); else
    ``board`` (a :class:`~lightning_edge.twin.board_files.BoardFile`: a real board's calibrated file, or its catalogue
    board), by default the papers' calibrated twin."""
    from lightning_edge.twin.board_files import prior_board, seed_board
    from lightning_edge.twin.model import OrinTwin

    truth = workload.twin.board
    if simulated:
        model = prior_board(truth) if truth is not None else seed_board(calibrated=False)
    else:
        model = board if board is not None else seed_board()
    model_twin = OrinTwin(board=model, space=space, settling=False)
    pred = workload.twin_workload("train").on(model_twin).step(space.to_numpy())
    # calibrated: a board file the kit fitted (simulated or measured), or the papers' calibrated twin on a real AGX
    calibrated = bool(model.calibration) or (not simulated and model.label == "simulated")
    if simulated and model.key == "orin-agx" and model.label == "simulated" and not model.calibration:
        src = "twin model, uncalibrated coefficients (not the simulated truth), of the analyze cost"
    elif simulated:
        src = f"{model.label} twin model of {model.key} (not the simulated truth), of the analyze cost"
    elif model.key == "orin-agx" and model.calibration is None and model.label == "simulated":
        src = "Orin AGX twin model of the analyze cost"
    else:
        src = f"{model.label} twin model of {model.key} ({model.describe()}), of the analyze cost"
    err = CALIBRATED_ERROR if calibrated else UNCALIBRATED_ERROR
    return Prior(space, np.asarray(pred.time_s), np.asarray(pred.power_w), src, power_error=err)


def prior_from_rooflines(cost: ModelCost, space: PowerModeSpace, rooflines: Roofline, *, source: str = "device profile") -> Prior:
    """The roofline model alone: per layer ``max(W / peak, Q / BW)`` summed over the minibatch's layers and
    power ``pi_0 + (eps_flop W + eps_mop Q) / T`` (Pagoda eq. 1-2), with ``rooflines`` a
    :class:`~lightning_edge.roofline.model.Roofline` over the modes of ``space`` (space order). No CPU side: a
    weak prior for CPU-bound minibatches."""
    W = np.array([float(layer.flops or 0) for layer in cost.layers])
    Q = np.array([float(layer.bytes or 0) for layer in cost.layers])
    peak = np.asarray(rooflines.peak_flops, dtype=float).reshape(-1, 1)
    bw = np.asarray(rooflines.bandwidth, dtype=float).reshape(-1, 1)
    t = np.maximum(np.maximum(W[None, :] / peak, Q[None, :] / bw).sum(axis=1), 1e-9)
    e = (np.asarray(rooflines.eps_flop, dtype=float) * W.sum() + np.asarray(rooflines.eps_mop, dtype=float) * Q.sum()
         + np.asarray(rooflines.static_power, dtype=float) * t)
    return Prior(space, t, e / t, f"{source} rooflines (roofline model only)")
