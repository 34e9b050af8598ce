"""Fit a board's twin coefficients to its measurements (pure math: what ``lightning-edge calibrate`` measured, in).

    >>> from lightning_edge.twin.fit import Observation, WorkloadSpec, fit_board
    >>> result = fit_board(start, observations, workloads)      # start: a BoardFile (the catalogue's board)
    >>> result.board(label="measured", calibration={...})        # the fitted board file

The measurements of one power mode (:class:`Observation`): the microbenchmarks' rooflines per precision (peak FLOP/s,
bandwidth, and with a sensor the energy per FLOP and per byte: Pagoda's), the idle power, and the mean time and
power of a few reference steps (:class:`WorkloadSpec`: a zoo model, training or inference, its batch). The fit is
weighted least squares on log errors (scipy's ``least_squares``, as ``twin/calibrate.py``'s fit of the papers' board
to published figures), over the coefficients the measurements move: every coefficient of the physics that the
board file names and :data:`HELD` does not (hardware facts, structure), whose sensitivity at the start is not nil
(generic over the parameter set: a coefficient added to the physics is fitted when the measurements see it). Each
is fitted in log space within a factor :data:`SPAN` of its start (fractions stay at most 1), with a weak pull towards
its start (:data:`PRIOR_WEIGHT`) so that what the measurements cannot tell apart stays where the catalogue put it.
The forward model is the twin itself: its rooflines (:meth:`OrinTwin.roofline`) and its one workload model
(:class:`~lightning_edge.twin.workload_model.TwinWorkload`), so the fit never disagrees with what the twin predicts.

What the measurements cannot separate (a coefficient whose posterior spread at the start is above
:data:`IDENTIFIED_SD`) is held at the start and said (:func:`unidentified`). How far to trust the result:
:func:`validate` refits without each reference step and without each fold of the modes and predicts what was left
out; :func:`diagnose` and :func:`verdict` say when the twin cannot explain the measurements (residuals above
:data:`RESIDUAL_LIMIT` times their noise), in which measurements, workloads and knob.
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightning_edge.twin.board_files import BoardFile
from lightning_edge.twin.physics import DEFAULT_PARAMS, Physics

__all__ = ["Observation", "WorkloadSpec", "FitResult", "fit_board", "HELD", "SPAN", "PRIOR_WEIGHT", "SIGMA",
           "fitted_label", "IDENTIFIED_SD", "RESIDUAL_LIMIT", "MODES_LIMIT", "KNOB_R2", "MIN_VALIDATE_MODES", "unidentified", "diagnose",
           "Validation", "validate", "verdict"]

HELD = frozenset({"dram_bus_bits", "loader_workers", "p_cap_w"})
"""Coefficients never fitted: hardware facts (the memory bus width), structure (DataLoader workers), the rated cap."""

SPAN = 4.0
"""A fitted coefficient stays within a factor SPAN of its start (the catalogue's board is not that far off)."""

PRIOR_WEIGHT = 0.05
"""Weight of the pull of each fitted coefficient's log towards its start's (a 25 % move costs what a 0.01 % error of
one measurement does): only directions the measurements do not see are held by it."""

SIGMA = {"peak_flops": 0.03, "bandwidth": 0.03, "eps_flop": 0.15, "eps_mop": 0.15, "static_power_w": 0.02,
         "time_s": 0.01, "power_w": 0.01}
"""Relative error assumed of each kind of measurement (the residuals' weights)."""

IDENTIFIED_SD = 1.0
"""A fitted coefficient whose posterior spread (the standard deviation of its log, from the fit's Jacobian with the
errors :data:`SIGMA`) is above this is not identified by the measurements (they see it only together with another:
the always-on power and the idle GPU's leakage, the memory system's busy power and its energy per byte): it is held
at its start's value, the one it trades off with fitted, and the board file says so (:func:`unidentified`). With the
calibration's reference steps: the always-on power and the idle GPU's leakage, the busy memory power's clock exponent
and its clock-independent part, the element-wise kernels' efficiency and their energy per FLOP."""

RESIDUAL_LIMIT = 2.5
"""Fit residuals of one kind of measurement (RMS, in units of the error assumed of it: :data:`SIGMA`, a step's noise
over its steps) above which the twin does not explain the board: a fit of the twin's own physics leaves them below
1.5 (the measurements' noise)."""

MODES_LIMIT = 3.0
"""Error (%) of the steps at modes left out of the fit above which the twin does not explain the board."""

MIN_VALIDATE_MODES = 4
"""Measured modes below which no error estimate is made (:func:`validate`)."""

KNOB_R2 = 0.3
"""Share of the residuals' variance a knob must explain to be named as the one they follow."""

#: coefficients that are fractions (at most 1): their fit never goes above
_FRACTIONS = frozenset({"bw_dram_eff", "gpu_stall_frac", "spin_util", "eff_tc", "eff_cuda", "eff_dw", "eff_elt",
                        "eff_mem", "gpu_v_min", "cpu_v_min"})


@dataclass(frozen=True)
class WorkloadSpec:
    """A reference step: a zoo model, ``train`` or ``infer``, its batch size (and a text model's sequence length), and
    its precision (``fp32``, the default, or ``fp16``: the model in half precision)."""

    model: str
    kind: str
    batch_size: int
    seq_len: int | None = None
    dataloader: bool = False
    """Whether the step includes a DataLoader's work (the reference steps run on synthetic inputs already in memory:
    no loader, so the loader's coefficients are not measured)."""
    precision: str = "fp32"

    def __post_init__(self) -> None:
        if self.kind not in ("train", "infer"):
            raise ValueError(f"a reference step is 'train' or 'infer', not {self.kind!r}")
        if self.precision not in ("fp32", "fp16"):
            raise ValueError(f"a reference step's precision is 'fp32' or 'fp16', not {self.precision!r}")

    @property
    def id(self) -> str:
        seq = f"-seq{self.seq_len}" if self.seq_len is not None else ""
        half = "-fp16" if self.precision == "fp16" else ""
        return f"{self.model}-{self.kind}-bs{self.batch_size}{seq}{half}{'-loader' if self.dataloader else ''}"

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "kind": self.kind, "batch_size": self.batch_size, "seq_len": self.seq_len,
                "dataloader": self.dataloader, "precision": self.precision}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkloadSpec:
        return cls(str(d["model"]), str(d["kind"]), int(d["batch_size"]),
                   None if d.get("seq_len") is None else int(d["seq_len"]), bool(d.get("dataloader", False)),
                   str(d.get("precision") or "fp32"))

    def on(self, twin: Any) -> Any:
        """This step's one model on ``twin`` (a :class:`~lightning_edge.twin.workload_model.TwinWorkload`)."""
        return twin.workload(self.model, self.batch_size, self.kind, seq_len=self.seq_len, dataloader=self.dataloader,
                             precision=self.precision)


@dataclass
class Observation:
    """One mode's measurements. ``mode``: (cores, CPU MHz, GPU MHz, EMC MHz); ``rooflines``: the twin's precision
    names (``fp32``: TF32 tensor cores, ``fp16``, ``fp32_cuda``) -> ``{peak_flops, bandwidth[, eps_flop, eps_mop]}``;
    ``static_power_w``: the idle board; ``steps``: workload id -> ``{time_s, power_w, n}`` (means over n steps)."""

    mode: tuple[float, float, float, float]
    rooflines: dict[str, dict[str, float]] = field(default_factory=dict)
    static_power_w: float | None = None
    steps: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": list(self.mode), "rooflines": self.rooflines, "static_power_w": self.static_power_w,
                "steps": self.steps}

    @classmethod
    def from_dict(cls, d: Any, where: str = "observation") -> Observation:
        """An observation from its JSON form, every field checked first (``ValueError``, one line naming the field:
        :func:`observation_problem`)."""
        why = observation_problem(d, where)
        if why:
            raise ValueError(why)
        return cls(tuple(float(x) for x in d["mode"]), {k: dict(v) for k, v in (d.get("rooflines") or {}).items()},
                   None if d.get("static_power_w") is None else float(d["static_power_w"]),
                   {k: dict(v) for k, v in (d.get("steps") or {}).items()})


#: no Jetson draws this much (the AGX Thor is rated 130 W): a power above it is not a reading of a board
MAX_BOARD_POWER_W = 1000.0
_ROOF_QUANTITIES = ("peak_flops", "bandwidth", "eps_flop", "eps_mop")


def _in_range(v: Any, lo: float, hi: float, strict_lo: bool = False) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        return False
    return (float(v) > lo if strict_lo else float(v) >= lo) and float(v) <= hi


def observation_problem(d: Any, where: str = "observation") -> str | None:
    """Why ``d`` is not one mode's measurements (``None``: it is): ``mode`` four positive numbers; ``rooflines``
    precision -> {peak_flops, bandwidth, eps_flop, eps_mop: finite > 0}; ``static_power_w`` null or a power in
    [0, 1000] W; ``steps`` id -> {time_s > 0, power_w in [0, 1000] W, n >= 1 whole}."""
    if not isinstance(d, Mapping):
        return f"{where}: expected an object (mode, rooflines, static_power_w, steps), got a JSON {type(d).__name__}"
    mode = d.get("mode")
    if not isinstance(mode, list) or len(mode) != 4 or not all(_in_range(x, 0.0, 1e5, True) for x in mode):
        return f"{where}.mode: expected [cores, cpu_mhz, gpu_mhz, mem_mhz], four positive numbers, got {mode!r:.60}"
    roofs = d.get("rooflines") or {}
    if not isinstance(roofs, Mapping):
        return f"{where}.rooflines: expected an object (precision -> its roofline), got {roofs!r:.40}"
    for prec, entry in roofs.items():
        if not isinstance(entry, Mapping):
            return f"{where}.rooflines.{prec}: expected an object, got {entry!r:.40}"
        for q, v in entry.items():
            if q not in _ROOF_QUANTITIES:
                return f"{where}.rooflines.{prec}.{q}: unknown quantity ({', '.join(_ROOF_QUANTITIES)})"
            if not _in_range(v, 0.0, 1e30, True):
                return f"{where}.rooflines.{prec}.{q}: expected a finite number > 0, got {v!r:.40}"
    sp = d.get("static_power_w")
    if sp is not None and not _in_range(sp, 0.0, MAX_BOARD_POWER_W):
        return (f"{where}.static_power_w: expected a power in [0, {MAX_BOARD_POWER_W:g}] W (or null), got "
                f"{sp!r:.40}")
    steps = d.get("steps") or {}
    if not isinstance(steps, Mapping):
        return f"{where}.steps: expected an object (step id -> time_s, power_w, n), got {steps!r:.40}"
    for sid, st in steps.items():
        at = f"{where}.steps.{sid}"
        if not isinstance(st, Mapping):
            return f"{at}: expected an object (time_s, power_w, n), got {st!r:.40}"
        if not _in_range(st.get("time_s"), 0.0, 1e6, True):
            return f"{at}.time_s: expected a finite time > 0 s, got {st.get('time_s')!r:.40}"
        if not _in_range(st.get("power_w"), 0.0, MAX_BOARD_POWER_W):
            return f"{at}.power_w: expected a power in [0, {MAX_BOARD_POWER_W:g}] W, got {st.get('power_w')!r:.40}"
        n = st.get("n", 1)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            return f"{at}.n: expected a whole number of steps >= 1, got {n!r:.40}"
    return None


@dataclass
class FitResult:
    """What the fit found: ``params`` (every coefficient), ``fitted`` and ``held`` names, the start it moved from,
    and the residuals (relative errors) of each kind of measurement at the end (``errors``: kind -> RMS, %)."""

    start: BoardFile
    params: dict[str, float]
    fitted: list[str]
    held: list[str]
    errors: dict[str, float]
    cost: float
    nfev: int
    elapsed_s: float
    n_observations: int
    unidentified: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The coefficients the measurements cannot separate from another, held at the start's (:func:`unidentified`)."""
    diagnosis: dict[str, Any] = field(default_factory=dict)
    """Whether the twin explains the measurements (:func:`diagnose`)."""
    spread_percent: dict[str, float] = field(default_factory=dict)
    """How well the measurements pin each fitted coefficient: the posterior standard deviation of its log at the
    fit, % (from the Jacobian and the errors :data:`SIGMA`)."""

    def board(self, *, label: str, calibration: Mapping[str, Any] | None = None,
              notes: Sequence[str] = ()) -> BoardFile:
        """The fitted board file: ``label`` ``measured`` (a real board's measurements) or ``simulated`` (a twin's);
        the fitted coefficients get that provenance, the held ones keep theirs."""
        if label not in ("measured", "simulated"):
            raise ValueError(f"a calibrated board is labelled 'measured' or 'simulated', not {label!r}")
        prov = {k: (label if k in self.fitted else self.start.provenance_of(k)) for k in self.params}
        kept = sorted(k for k in self.held if prov.get(k) == "extrapolated")
        cal = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "label": label,
               "fitted": sorted(self.fitted), "held": sorted(self.held), "errors_percent": self.errors,
               "cost": self.cost, "nfev": self.nfev, "fit_s": round(self.elapsed_s, 2),
               "observations": self.n_observations, "start": self.start.key,
               "start_label": self.start.label, "unidentified": dict(self.unidentified),
               "spread_percent": dict(self.spread_percent), "diagnosis": dict(self.diagnosis),
               **dict(calibration or {})}
        out_notes = [f"calibrated ({label} measurements): {len(self.fitted)} coefficients fitted from "
                     f"{self.n_observations} measurements; the rest held at the start's ({self.start.label})"]
        if self.unidentified:
            out_notes.append("held at the start's, the measurements cannot separate them: " + "; ".join(
                f"{k} (from {v['with']})" if v.get("with") else k for k, v in self.unidentified.items()))
        if kept:
            out_notes.append(f"still extrapolated (the measurements do not move them): {', '.join(kept)}")
        out_notes += list(notes)
        return BoardFile(self.start.key, dict(self.params), prov, label=label, name=self.start.name,
                         mode_space=self.start.mode_space, extrapolation=self.start.extrapolation, calibration=cal,
                         notes=out_notes)


def fitted_label(simulated: bool) -> str:
    """The label of a board file calibrated from a twin's measurements (``simulated``) or a board's (``measured``)."""
    return "simulated" if simulated else "measured"


class _Model:
    """The forward model: the twin of ``start`` (its space), with one TwinWorkload per reference workload
    (``compiled``: the same workloads already compiled for another twin, reused)."""

    def __init__(self, start: BoardFile, workloads: Mapping[str, WorkloadSpec], obs: Sequence[Observation],
                 compiled: Mapping[str, Any] | None = None) -> None:
        from lightning_edge.twin.model import OrinTwin

        self.twin = OrinTwin(board=start, settling=False)
        self.knobs = np.array([o.mode for o in obs], dtype=float)
        self.obs = obs
        compiled = compiled or {}
        self.wls = {wid: (compiled[wid] if wid in compiled else w).on(self.twin) for wid, w in workloads.items()
                    if any(wid in o.steps for o in obs)}
        # the targets, as arrays: (kind, selector, log target, sigma)
        self.rows: list[tuple] = []
        precs = sorted({p for o in obs for p in o.rooflines})
        for prec in precs:
            for q in ("peak_flops", "bandwidth", "eps_flop", "eps_mop"):
                idx = [i for i, o in enumerate(obs) if _finite(o.rooflines.get(prec, {}).get(q))]
                if idx:
                    vals = np.log([float(obs[i].rooflines[prec][q]) for i in idx])
                    self.rows.append(("roof", (prec, q), np.array(idx), vals, SIGMA[q]))
        idx = [i for i, o in enumerate(obs) if _finite(o.static_power_w)]
        if idx:
            self.rows.append(("static", None, np.array(idx), np.log([float(obs[i].static_power_w) for i in idx]),
                              SIGMA["static_power_w"]))
        for wid in self.wls:
            idx = [i for i, o in enumerate(obs) if wid in o.steps]
            for q in ("time_s", "power_w"):
                vals = [float(obs[i].steps[wid][q]) for i in idx]
                n = np.array([max(float(obs[i].steps[wid].get("n", 1)), 1.0) for i in idx])
                sig = np.maximum(SIGMA[q], 0.025 / np.sqrt(n))  # a step's own noise (~2.5 %) averaged over n steps
                self.rows.append(("step", (wid, q), np.array(idx), np.log(vals), sig))

    def n(self) -> int:
        return int(sum(len(r[2]) for r in self.rows))

    def predict(self, params: Mapping[str, float]) -> list[np.ndarray]:
        """log of each row's model values, in row order."""
        self.twin.physics = Physics(params)
        cache: dict[Any, Any] = {}
        out = []
        for kind, what, idx, _vals, _sig in self.rows:
            k = self.knobs[idx]
            if kind == "roof":
                prec, q = what
                key = ("roof", prec, tuple(idx))
                if key not in cache:
                    cache[key] = self.twin.roofline(k, prec)
                out.append(np.log(np.maximum(np.asarray(getattr(cache[key], q), dtype=float).reshape(-1), 1e-30)))
            elif kind == "static":
                out.append(np.log(np.asarray(self.twin.physics.static_power(*k.T), dtype=float)))
            else:
                wid, q = what
                key = ("step", wid, tuple(idx))
                if key not in cache:
                    cache[key] = self.wls[wid].step(k)
                out.append(np.log(np.asarray(getattr(cache[key], q), dtype=float).reshape(-1)))
        return out

    def residuals(self, params: Mapping[str, float]) -> np.ndarray:
        pred = self.predict(params)
        return np.concatenate([(p - r[3]) / r[4] for p, r in zip(pred, self.rows)])

    @staticmethod
    def group(row: tuple) -> str:
        """The name of a row's kind of measurement: ``fp16 peak_flops``, ``static_power_w``, ``<step id> time_s``."""
        return f"{row[1][0]} {row[1][1]}" if row[0] in ("roof", "step") else "static_power_w"

    def relative(self, params: Mapping[str, float]) -> list[np.ndarray]:
        """Each row's relative errors, model / measured - 1, in row order."""
        return [np.exp(p - r[3]) - 1.0 for p, r in zip(self.predict(params), self.rows)]

    def errors(self, params: Mapping[str, float]) -> dict[str, float]:
        """RMS relative error (%) per kind of measurement."""
        groups: dict[str, list[float]] = {}
        for e, r in zip(self.relative(params), self.rows):
            groups.setdefault(self.group(r), []).extend(e.tolist())
        return {k: round(100 * float(np.sqrt(np.mean(np.square(v)))), 3) for k, v in groups.items()}


def _finite(v: Any) -> bool:
    try:
        return v is not None and math.isfinite(float(v)) and float(v) > 0
    except (TypeError, ValueError):
        return False


class _Problem:
    """The least-squares problem over ``fitted`` (logs of each coefficient over its start's, within :data:`SPAN`;
    fractions at most 1), with the weak pull of each towards its start."""

    def __init__(self, model: _Model, p0: Mapping[str, float], fitted: Sequence[str], prior_weight: float) -> None:
        self.model, self.p0, self.fitted, self.prior_weight = model, dict(p0), list(fitted), float(prior_weight)
        self.lo = np.array([-math.log(SPAN)] * len(self.fitted))
        hi = np.array([min(math.log(SPAN), math.log(1.0 / p0[k]) if k in _FRACTIONS else math.log(SPAN))
                       for k in self.fitted])
        self.hi = np.maximum(hi, self.lo + 1e-9)

    def params_of(self, x: np.ndarray) -> dict[str, float]:
        p = dict(self.p0)
        p.update({k: self.p0[k] * math.exp(v) for k, v in zip(self.fitted, x)})
        return p

    def f(self, x: np.ndarray) -> np.ndarray:
        return np.concatenate([self.model.residuals(self.params_of(x)), self.prior_weight * x])

    def solve(self, max_nfev: int, x0: np.ndarray | None = None) -> Any:
        from scipy.optimize import least_squares

        x0 = np.zeros(len(self.fitted)) if x0 is None else np.asarray(x0, dtype=float)
        x0 = np.clip(x0, self.lo, self.hi - 1e-12)
        return least_squares(self.f, x0, bounds=(self.lo, self.hi), x_scale=1.0, diff_step=1e-3, max_nfev=max_nfev,
                             loss="soft_l1", f_scale=3.0)


def _sensitivity(model: _Model, p0: Mapping[str, float], names: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The coefficients the measurements see (the residuals move when one is moved by 2 % at the start) and the
    Jacobian of the residuals over their logs there (one column each)."""
    r0 = model.residuals(p0)
    seen, cols = [], []
    for k in names:
        p = dict(p0)
        p[k] = p0[k] * 1.02
        d = model.residuals(p) - r0
        if np.max(np.abs(d)) > 1e-6:
            seen.append(k)
            cols.append(d / math.log(1.02))
    return seen, (np.stack(cols, axis=1) if cols else np.zeros((len(r0), 0)))


def unidentified(jac: np.ndarray, names: Sequence[str], limit: float = IDENTIFIED_SD) -> dict[str, dict[str, Any]]:
    """What the measurements cannot separate, from the fit's Jacobian ``jac`` (its residuals over the logs of the
    coefficients ``names``, the pull towards the start included): the posterior spread of each log is the square
    root of the diagonal of ``(J^T J)^-1``; while the largest is above ``limit``, that coefficient is held (its
    column dropped, the rest recomputed) and recorded with the one it is most correlated with (what it trades off
    against). ``{name: {"sd_percent", "with", "correlation"}}``, in the order they were held."""
    cols = list(range(len(names)))
    out: dict[str, dict[str, Any]] = {}
    J = np.asarray(jac, dtype=float)
    while cols:
        sub = J[:, cols]
        cov = np.linalg.pinv(sub.T @ sub)
        sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
        i = int(np.argmax(sd))
        if sd[i] <= limit:
            break
        corr = cov[i] / np.maximum(sd * sd[i], 1e-300)
        corr[i] = 0.0
        j = int(np.argmax(np.abs(corr))) if len(cols) > 1 else i
        out[names[cols[i]]] = {"sd_percent": round(100 * float(sd[i]), 1),
                               "with": names[cols[j]] if j != i else None,
                               "correlation": round(float(corr[j]), 2) if j != i else None}
        del cols[i]
    return out


def fit_board(start: BoardFile, observations: Sequence[Observation], workloads: Mapping[str, WorkloadSpec] |
              Sequence[WorkloadSpec], *, held: frozenset[str] = HELD, max_nfev: int = 200,
              prior_weight: float = PRIOR_WEIGHT, identify: bool = True,
              log: Callable[[str], None] | None = None) -> FitResult:
    """Fit ``start``'s coefficients to ``observations`` (module docstring). ``workloads``: the reference steps the
    observations name (by :attr:`WorkloadSpec.id`). ``identify``: hold what the measurements cannot separate
    (:func:`unidentified`) at the start's value and fit the rest again."""
    log = log or (lambda _m: None)
    t0 = time.perf_counter()
    if not isinstance(workloads, Mapping):
        workloads = {w.id: w for w in workloads}
    if not observations:
        raise ValueError("no measurements to fit: calibrate measures at least one mode")
    model = _Model(start, workloads, observations)
    if model.n() == 0:
        raise ValueError("the measurements hold nothing the twin predicts (no roofline, idle power or step)")
    p0 = start.full_params
    fitted, jac0 = _sensitivity(model, p0, [k for k in DEFAULT_PARAMS if k not in held and p0[k] > 0])
    lost: dict[str, dict[str, Any]] = {}
    if identify and fitted:
        # what the measurements cannot separate, judged at the start (the pull towards it included): held there
        lost = unidentified(np.vstack([jac0, prior_weight * np.eye(len(fitted))]), fitted)
        if lost:
            log(f"not identified by the measurements, held at the start's: {', '.join(lost)}")
            fitted = [k for k in fitted if k not in lost]
    log(f"fitting {len(fitted)} coefficients to {model.n()} measurements ({len(DEFAULT_PARAMS) - len(fitted)} held)")
    prob = _Problem(model, p0, fitted, prior_weight)
    res = prob.solve(max_nfev)
    nfev = int(res.nfev)
    params = prob.params_of(res.x)
    errors = model.errors(params)
    log("fit: " + ", ".join(f"{k} {v:.2f} %" for k, v in errors.items()))
    spread = _spread(res.jac, len(fitted))
    return FitResult(start, params, fitted, sorted(set(DEFAULT_PARAMS) - set(fitted)), errors, float(res.cost), nfev,
                     time.perf_counter() - t0, model.n(), unidentified=lost,
                     spread_percent={k: round(100 * float(v), 1) for k, v in zip(fitted, spread)},
                     diagnosis=diagnose(model, params, start.space()))


def _spread(jac: np.ndarray, n: int) -> np.ndarray:
    """The posterior standard deviation of each fitted log (the diagonal of ``(J^T J)^-1``)."""
    if n == 0:
        return np.zeros(0)
    J = np.asarray(jac, dtype=float)
    return np.sqrt(np.maximum(np.diag(np.linalg.pinv(J.T @ J)), 0.0))


# ============================================================================================ how far to trust it
KNOB_NAMES = ("CPU cores", "CPU clock", "GPU clock", "memory clock")


def diagnose(model: _Model, params: Mapping[str, float], space: Any) -> dict[str, Any]:
    """Whether the twin explains the measurements: each kind of measurement's fit residuals (``rms_percent``: RMS
    relative error, %; ``rms_sigma``: RMS in units of the error assumed of each measurement), the kinds above
    :data:`RESIDUAL_LIMIT` (``unexplained``, worst first), and the knob the residuals follow: for each knob, the share
    of the residuals' variance within each kind of measurement that a straight line in the knob (its value over its
    top value) explains (``knob_r2``: pooled over the unexplained kinds, else over all), the knob above
    :data:`KNOB_R2` and the sign of its line (``knob_direction``: the twin too high or too low as the knob rises)."""
    rel = model.relative(params)
    by: dict[str, tuple[list[float], list[float], list[np.ndarray]]] = {}
    for e, r in zip(rel, model.rows):
        errs, norm, idx = by.setdefault(model.group(r), ([], [], []))
        e = np.asarray(e, dtype=float)
        errs.extend(e.tolist())
        norm.extend((np.log1p(e) / np.broadcast_to(r[4], e.shape)).tolist())
        idx.append(np.asarray(r[2]))
    rms = {g: round(100 * float(np.sqrt(np.mean(np.square(v[0])))), 3) for g, v in by.items()}
    zs = {g: round(float(np.sqrt(np.mean(np.square(v[1])))), 2) for g, v in by.items()}
    poor = sorted((g for g, v in zs.items() if v > RESIDUAL_LIMIT), key=lambda g: -zs[g])
    top = np.array([space.cores[-1], space.cpu_mhz[-1], space.gpu_mhz[-1], space.mem_mhz[-1]], dtype=float)
    z_all = model.knobs / top
    r2, slope = {}, {}
    for d, knob in enumerate(KNOB_NAMES):
        ss_res = ss_tot = sxy = sxx = 0.0
        for g in poor or list(by):
            u = np.log1p(np.asarray(by[g][0]))
            if len(u) < 3:
                continue
            z = z_all[np.concatenate(by[g][2]), d]
            uc, zc = u - u.mean(), z - z.mean()
            sxx_g, sxy_g = float(zc @ zc), float(zc @ uc)
            ss_tot += float(uc @ uc)
            ss_res += float(uc @ uc) - (sxy_g * sxy_g / sxx_g if sxx_g > 0 else 0.0)
            sxx, sxy = sxx + sxx_g, sxy + sxy_g
        r2[knob] = round(1.0 - ss_res / ss_tot, 3) if ss_tot > 0 else 0.0
        slope[knob] = sxy / sxx if sxx > 0 else 0.0
    knob = max(r2, key=lambda k: r2[k]) if r2 else None
    named = knob if knob is not None and r2[knob] >= KNOB_R2 else None
    return {"rms_percent": rms, "rms_sigma": zs, "limit_sigma": RESIDUAL_LIMIT, "unexplained": poor,
            "knob_r2": r2, "knob": named,
            "knob_direction": None if named is None else ("too high" if slope[named] > 0 else "too low")}


@dataclass
class Validation:
    """How far the fitted board can be trusted beyond what it was fitted on, from refits that leave measurements out
    (:func:`validate`). ``workloads``: for each reference step, the fit without it predicting it at its modes
    (``time_percent`` / ``power_percent``: mean absolute relative errors, %); ``folds``: the fit without a fold of
    the modes predicting every step measured there; the summaries: ``time_percent`` / ``power_percent`` (the median
    over left-out workloads: the error to expect on a workload like the reference steps that the kit did not measure;
    each reference step has a sibling that covers the same thing, so leaving one out is such a workload),
    ``worst`` (the left-out workload predicted worst, and its errors: a workload unlike any other reference step),
    ``modes_time_percent`` / ``modes_power_percent`` (over every step at a left-out mode: the error at a mode it did
    not measure)."""

    workloads: dict[str, dict[str, float]] = field(default_factory=dict)
    folds: list[dict[str, Any]] = field(default_factory=list)
    time_percent: float | None = None
    power_percent: float | None = None
    modes_time_percent: float | None = None
    modes_power_percent: float | None = None
    worst: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(float(v), 2)

        return {"time_percent": r(self.time_percent), "power_percent": r(self.power_percent),
                "modes_time_percent": r(self.modes_time_percent), "modes_power_percent": r(self.modes_power_percent),
                "worst": {q: r(v) if q.endswith("percent") else v for q, v in self.worst.items()},
                "leave_one_workload_out": {k: {q: r(v) if q != "modes" else v for q, v in d.items()}
                                           for k, d in self.workloads.items()},
                "leave_modes_out": [{q: r(v) if q.endswith("percent") else v for q, v in d.items()}
                                    for d in self.folds],
                "notes": list(self.notes), "validate_s": round(self.elapsed_s, 1),
                "method": "refits from the start's coefficients without one reference step (each in turn), and "
                          "without a fold of the modes (each in turn); mean absolute relative errors, %; the workload "
                          "estimate is the median over the left-out steps"}


def _step_errors(model: _Model, params: Mapping[str, float], compiled: Mapping[str, Any],
                 pairs: Sequence[tuple[int, str]], obs: Sequence[Observation]) -> tuple[np.ndarray, np.ndarray]:
    """Relative errors of time and power of the steps ``pairs`` (observation index, step id) under ``params``."""
    model.twin.physics = Physics(params)
    t_err, p_err = [], []
    by: dict[str, list[int]] = {}
    for i, wid in pairs:
        by.setdefault(wid, []).append(i)
    for wid, idx in by.items():
        knobs = np.array([obs[i].mode for i in idx], dtype=float)
        pred = compiled[wid].on(model.twin).step(knobs)
        meas = np.array([[obs[i].steps[wid]["time_s"], obs[i].steps[wid]["power_w"]] for i in idx], dtype=float)
        t_err.extend((np.asarray(pred.time_s, dtype=float).reshape(-1) / meas[:, 0] - 1.0).tolist())
        p_err.extend((np.asarray(pred.power_w, dtype=float).reshape(-1) / meas[:, 1] - 1.0).tolist())
    return np.asarray(t_err), np.asarray(p_err)


def validate(result: FitResult, observations: Sequence[Observation], workloads: Mapping[str, WorkloadSpec] |
             Sequence[WorkloadSpec], *, folds: int = 3, max_nfev: int = 200, prior_weight: float = PRIOR_WEIGHT,
             seed: int = 0, log: Callable[[str], None] | None = None) -> Validation:
    """Leave-one-workload-out and leave-modes-out errors of a fit (:class:`Validation`): each refit starts from
    ``result.start`` (never from the fit that saw what it leaves out), fits the same coefficients and predicts what
    was left out. Needs four measured modes (fewer cannot say how far to trust a fit) and two reference steps for the
    first (else a note says why not)."""
    log = log or (lambda _m: None)
    t0 = time.perf_counter()
    if not isinstance(workloads, Mapping):
        workloads = {w.id: w for w in workloads}
    start, p0 = result.start, result.start.full_params
    base = _Model(start, workloads, observations)
    compiled = base.wls
    out = Validation()

    def refit(obs: Sequence[Observation]) -> tuple[_Model, dict[str, float]]:
        m = _Model(start, workloads, obs, compiled)
        prob = _Problem(m, p0, result.fitted, prior_weight)
        return m, prob.params_of(prob.solve(max_nfev).x)

    measured = [wid for wid in compiled if sum(wid in o.steps for o in observations) > 0]
    n = len(observations)
    if len(measured) >= 2 and n >= MIN_VALIDATE_MODES:
        for wid in measured:
            obs = [Observation(o.mode, o.rooflines, o.static_power_w, {k: v for k, v in o.steps.items() if k != wid})
                   for o in observations]
            m, params = refit(obs)
            pairs = [(i, wid) for i, o in enumerate(observations) if wid in o.steps]
            te, pe = _step_errors(m, params, compiled, pairs, observations)
            out.workloads[wid] = {"time_percent": 100 * float(np.mean(np.abs(te))),
                                  "power_percent": 100 * float(np.mean(np.abs(pe))), "modes": len(pairs)}
            log(f"without {wid}: its time {out.workloads[wid]['time_percent']:.2f} %, power "
                f"{out.workloads[wid]['power_percent']:.2f} %")
        out.time_percent = float(np.median([d["time_percent"] for d in out.workloads.values()]))
        out.power_percent = float(np.median([d["power_percent"] for d in out.workloads.values()]))
        wid = max(out.workloads, key=lambda w: max(out.workloads[w]["time_percent"], out.workloads[w]["power_percent"]))
        out.worst = {"workload": wid, "time_percent": out.workloads[wid]["time_percent"],
                     "power_percent": out.workloads[wid]["power_percent"]}
    else:
        out.notes.append(f"leave-one-workload-out needs two reference steps and {MIN_VALIDATE_MODES} modes: not "
                         "computed")
    k = min(int(folds), n // 2)
    if measured and n >= MIN_VALIDATE_MODES and k >= 2:
        order = np.random.default_rng(seed).permutation(n)
        t_all, p_all = [], []
        for f in range(k):
            test = sorted(int(i) for i in order[f::k])
            obs = [o for i, o in enumerate(observations) if i not in test]
            m, params = refit(obs)
            pairs = [(i, wid) for i in test for wid in observations[i].steps if wid in compiled]
            if not pairs:
                continue
            te, pe = _step_errors(m, params, compiled, pairs, observations)
            t_all.append(te)
            p_all.append(pe)
            out.folds.append({"modes": [_mode_label(observations[i].mode) for i in test],
                              "time_percent": 100 * float(np.mean(np.abs(te))),
                              "power_percent": 100 * float(np.mean(np.abs(pe)))})
            log(f"without {len(test)} modes: their steps' time {out.folds[-1]['time_percent']:.2f} %, power "
                f"{out.folds[-1]['power_percent']:.2f} %")
        if t_all:
            out.modes_time_percent = 100 * float(np.mean(np.abs(np.concatenate(t_all))))
            out.modes_power_percent = 100 * float(np.mean(np.abs(np.concatenate(p_all))))
    else:
        out.notes.append(f"leave-modes-out needs {MIN_VALIDATE_MODES} measured modes and a reference step: not "
                         "computed")
    out.elapsed_s = time.perf_counter() - t0
    return out


def _mode_label(mode: Sequence[float]) -> str:
    c, fc, fg, fm = mode
    return f"{int(c)}c/{fc:g}/{fg:g}/{fm:g}"


def verdict(diagnosis: Mapping[str, Any], validation: Validation | None = None,
            show: int = 4) -> tuple[str, list[str]]:
    """``("explained", [])`` or ``("poorly explained", reasons)``: the twin cannot explain the board where a kind of
    measurement's fit residuals are above :data:`RESIDUAL_LIMIT` or the steps at modes left out of the fit are
    predicted worse than :data:`MODES_LIMIT` (time or power); the reasons name the worst ``show`` measurements, the
    workloads among them and the knob the residuals follow."""
    reasons = []
    poor = list(diagnosis.get("unexplained", []))
    rms, zs = diagnosis.get("rms_percent", {}), diagnosis.get("rms_sigma", {})
    if poor:
        worst = ", ".join(f"{g} {rms[g]:.1f} % ({zs[g]:.1f} x its noise)" for g in poor[:show])
        reasons.append(f"{len(poor)} kinds of measurement the fit cannot follow (residuals above {RESIDUAL_LIMIT:g} x "
                       f"their noise): {worst}" + (f" and {len(poor) - show} more" if len(poor) > show else ""))
        steps = sorted({g.rsplit(" ", 1)[0] for g in poor if g.endswith((" time_s", " power_w"))})
        if steps:
            reasons.append(f"workloads: {', '.join(steps)}")
    if validation is not None:
        for q in ("time", "power"):
            v = getattr(validation, f"modes_{q}_percent")
            if v is not None and v > MODES_LIMIT:
                reasons.append(f"the steps' {q} at modes left out of the fit: {v:.1f} % off (above {MODES_LIMIT:g} %)")
    if reasons and diagnosis.get("knob"):
        k = diagnosis["knob"]
        reasons.append(f"knob: the residuals follow the {k} (R^2 {diagnosis['knob_r2'][k]:.2f}; the twin "
                       f"{diagnosis['knob_direction']} at high {k}, the other way at low): the board's physics in the "
                       f"{k} is not the twin's")
    return ("poorly explained" if reasons else "explained"), reasons
