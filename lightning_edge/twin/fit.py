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
(:class:`~lightning_edge.twin.timeline.TwinWorkload`), so the fit never disagrees with what the twin predicts.
"""

from __future__ import annotations

import datetime as _dt
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightning_edge.twin.boards import BoardFile
from lightning_edge.twin.physics import DEFAULT_PARAMS, Physics

__all__ = ["Observation", "WorkloadSpec", "FitResult", "fit_board", "HELD", "SPAN", "PRIOR_WEIGHT", "SIGMA",
           "fitted_label"]

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

#: coefficients that are fractions (at most 1): their fit never goes above
_FRACTIONS = frozenset({"bw_dram_eff", "gpu_stall_frac", "spin_util", "eff_tc", "eff_cuda", "eff_dw", "eff_elt",
                        "eff_mem", "gpu_v_min", "cpu_v_min"})


@dataclass(frozen=True)
class WorkloadSpec:
    """A reference step: a zoo model, ``train`` or ``infer``, its batch size (and a text model's sequence length)."""

    model: str
    kind: str
    batch_size: int
    seq_len: int | None = None
    dataloader: bool = False
    """Whether the step includes a DataLoader's work (the reference steps run on synthetic inputs already in memory:
    no loader, so the loader's coefficients are not measured)."""

    @property
    def id(self) -> str:
        seq = f"-seq{self.seq_len}" if self.seq_len is not None else ""
        return f"{self.model}-{self.kind}-bs{self.batch_size}{seq}{'-loader' if self.dataloader else ''}"

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "kind": self.kind, "batch_size": self.batch_size, "seq_len": self.seq_len,
                "dataloader": self.dataloader}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkloadSpec:
        return cls(str(d["model"]), str(d["kind"]), int(d["batch_size"]),
                   None if d.get("seq_len") is None else int(d["seq_len"]), bool(d.get("dataloader", False)))

    def on(self, twin: Any) -> Any:
        """This step's one model on ``twin`` (a :class:`~lightning_edge.twin.timeline.TwinWorkload`)."""
        return twin.workload(self.model, self.batch_size, self.kind, seq_len=self.seq_len, dataloader=self.dataloader)


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
               "start_label": self.start.label, **dict(calibration or {})}
        out_notes = [f"calibrated ({label} measurements): {len(self.fitted)} coefficients fitted from "
                     f"{self.n_observations} measurements; the rest held at the start's ({self.start.label})"]
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
    """The forward model: the twin of ``start`` (its space), with one TwinWorkload per reference workload."""

    def __init__(self, start: BoardFile, workloads: Mapping[str, WorkloadSpec], obs: Sequence[Observation]) -> None:
        from lightning_edge.twin.model import OrinTwin

        self.twin = OrinTwin(board=start, noise=False, settling=False)
        self.knobs = np.array([o.mode for o in obs], dtype=float)
        self.obs = obs
        self.wls = {wid: w.on(self.twin) for wid, w in workloads.items() if any(wid in o.steps for o in obs)}
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

    def errors(self, params: Mapping[str, float]) -> dict[str, float]:
        """RMS relative error (%) per kind of measurement."""
        pred = self.predict(params)
        groups: dict[str, list[float]] = {}
        for p, r in zip(pred, self.rows):
            name = f"{r[1][0]} {r[1][1]}" if r[0] in ("roof", "step") else "static_power_w"
            groups.setdefault(name, []).extend((np.exp(p - r[3]) - 1.0).tolist())
        return {k: round(100 * float(np.sqrt(np.mean(np.square(v)))), 3) for k, v in groups.items()}


def _finite(v: Any) -> bool:
    try:
        return v is not None and math.isfinite(float(v)) and float(v) > 0
    except (TypeError, ValueError):
        return False


def fit_board(start: BoardFile, observations: Sequence[Observation], workloads: Mapping[str, WorkloadSpec] |
              Sequence[WorkloadSpec], *, held: frozenset[str] = HELD, max_nfev: int = 200,
              prior_weight: float = PRIOR_WEIGHT, log: Callable[[str], None] | None = None) -> FitResult:
    """Fit ``start``'s coefficients to ``observations`` (module docstring). ``workloads``: the reference steps the
    observations name (by :attr:`WorkloadSpec.id`)."""
    from scipy.optimize import least_squares

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
    names = [k for k in DEFAULT_PARAMS if k not in held and p0[k] > 0]
    # what the measurements see: the sensitivity of the residuals to each coefficient at the start
    r0 = model.residuals(p0)
    seen = []
    for k in names:
        p = dict(p0)
        p[k] = p0[k] * 1.02
        if np.max(np.abs(model.residuals(p) - r0)) > 1e-6:
            seen.append(k)
    fitted = seen
    held_all = sorted(set(DEFAULT_PARAMS) - set(fitted))
    log(f"fitting {len(fitted)} coefficients to {model.n()} measurements ({len(held_all)} held)")
    lo = np.array([-math.log(SPAN)] * len(fitted))
    hi = np.array([min(math.log(SPAN), math.log(1.0 / p0[k]) if k in _FRACTIONS else math.log(SPAN))
                   for k in fitted])
    hi = np.maximum(hi, lo + 1e-9)
    x0 = np.clip(np.zeros(len(fitted)), lo, hi - 1e-12)

    def params_of(x: np.ndarray) -> dict[str, float]:
        p = dict(p0)
        p.update({k: p0[k] * math.exp(v) for k, v in zip(fitted, x)})
        return p

    def f(x: np.ndarray) -> np.ndarray:
        return np.concatenate([model.residuals(params_of(x)), prior_weight * x])

    res = least_squares(f, x0, bounds=(lo, hi), x_scale=1.0, diff_step=1e-3, max_nfev=max_nfev, loss="soft_l1",
                        f_scale=3.0)
    params = params_of(res.x)
    errors = model.errors(params)
    log("fit: " + ", ".join(f"{k} {v:.2f} %" for k, v in errors.items()))
    return FitResult(start, params, fitted, held_all, errors, float(res.cost), int(res.nfev),
                     time.perf_counter() - t0, model.n())
