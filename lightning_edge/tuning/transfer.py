"""Transfer between boards: what one board taught makes the tuner's prior on another.

    >>> from lightning_edge.tuning.transfer import transferred_prior, stored_profiles
    >>> table = stored_profiles(store, board_a.store_key, workload.fingerprint)   # profiles kept for board A
    >>> prior = transferred_prior(workload, board_b.space, target=board_b_file, source=calibrated_a, profiles=table)
    >>> OnlineTuner(budget, board_b.controller, meter, prior=prior)                  # or simulate_tuning(..., prior=)

Two things carry over from board A (the *source*) to board B (the *target*):

1. **A's calibrated board file** (``lightning-edge calibrate``): B's model is A's coefficients extrapolated to B by
   the hardware ratios (:func:`lightning_edge.twin.board_files.extrapolate`: SMs, memory bus, rated power), unless B has
   a calibrated file of its own (then B's). The silicon's efficiencies, CPU costs and energies per FLOP measured on A
   replace the papers' published-figure ones;
2. **the workload's profiles stored for A** (a profile store, or any ``{mode: (time_s, power_w)}``): what A's
   calibration could not measure and this workload depends on (its data loader's costs: the reference steps run on
   synthetic inputs) is fitted to them first (:func:`fit_to_profiles`, the calibration's own fit over those
   coefficients only: the same CPU on both modules, so they carry to B); then their remaining errors against that
   model, ``log(measured / predicted)`` of time and of power, are this workload's own (what the model still misses
   about it, on the same silicon); fitted as a ridge regression on the mode's position in its grid (each knob over
   its board's maximum: cores, CPU, GPU and memory clocks), they correct B's prediction at B's modes.

The prior says how far off it may be (``time_sd``, ``power_sd``: the relative standard deviations the search uses to
choose its first profiles, :mod:`lightning_edge.tuning.prior`): what A's profiles still scatter by around the
corrected model (their residuals' RMS), and, on another module than A, what moving to it adds (:data:`MODULE_SD`:
another module's power figures, regulators and board, mode by mode; :data:`MODULE_BIAS`: the offset they put on the
board's power as a whole, which B's first profile corrects).

The prior is a prediction, never an answer: the tuner profiles on B and corrects it (:mod:`lightning_edge.tuning.
prior`). Its ``source`` says what it was built from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from lightning_edge.modes import ModeLike, PowerMode, PowerModeSpace
from lightning_edge.tuning.prior import Prior

if TYPE_CHECKING:
    from lightning_edge.tuning.store import ProfileStore
    from lightning_edge.twin.board_files import BoardFile
    from lightning_edge.twin.sim_workload import SimWorkload
    from lightning_edge.twin.workload_model import TwinWorkload

__all__ = ["transferred_prior", "stored_profiles", "target_model", "fit_to_profiles", "RIDGE", "MODULE_SD",
           "MODULE_BIAS", "UNCORRECTED_SD"]

RIDGE = 1.0
"""Ridge penalty of the correction's slopes (per knob): with few profiles on A, the correction stays near a
constant ratio."""

MODULE_SD = (0.02, 0.05)
"""What moving a prediction from one module to another of the same silicon adds to its error, relative standard
deviation of (time, power): the hardware ratios carry the time (SMs, memory bus), but another module has its own
power figures (board, regulators, binning), not measured until it is profiled. An assumption, not a measurement:
``transferred_prior(..., module_sd=)`` takes another."""

MODULE_BIAS = 0.10
"""How far another module's power figures may offset B's predicted power as a whole (relative standard deviation;
the prior's :attr:`~lightning_edge.tuning.prior.Prior.power_error`): a module's idle and rail figures differ from
its catalogue's (binning, regulators, board), so B's first profile leaves room for it, then corrects it. An
assumption, not a measurement: benchmarks/transfer.py draws each of B's power figures x exp(0.1 N(0, 1)), which
offset its predicted power by -19 to +10 % over seeds 0-5 (MODULE_SD's 5 % alone left 5-18 % overshoots)."""

UNCORRECTED_SD = (0.05, 0.05)
"""The error assumed of a prediction no profile of the workload has corrected (time, power): what a calibration
leaves on a workload it did not measure (BENCHMARKS.md, calibration: within 5 % time, 3 % power)."""


def stored_profiles(store: ProfileStore, device_model: str, workload_id: str, kind: str = "train") -> dict[PowerMode,
                                                                                                    tuple[float, float]]:
    """The ``kind`` profiles a profile store keeps for one workload on one board (``device_model``: its store key,
    ``Board.store_key``: ``sim:orin-nx-16gb+<digest>`` for a simulated one): ``{mode: (time_s, power_w)}``."""
    table = store.bind(device_model, workload_id).table(kind)
    t = table.train_time_s if kind == "train" else table.infer_time_s
    p = table.train_power_w if kind == "train" else table.infer_power_w
    return {m: (float(a), float(b)) for m, a, b in zip(table.modes, t, p)}


def target_model(target: BoardFile, source: BoardFile | None) -> BoardFile:
    """B's model (module docstring, 1): B's own calibrated file, else A's calibrated coefficients extrapolated to B,
    else B's file as it is."""
    from lightning_edge.twin.board_files import extrapolate

    if target.calibration is not None or source is None or source.calibration is None:
        return target
    if source.key == target.key:
        return source
    return extrapolate(source, target.key)


def fit_to_profiles(source: BoardFile, workload: TwinWorkload, profiles: Mapping[ModeLike, tuple[float, float]],
                    space: PowerModeSpace, max_nfev: int = 30) -> BoardFile:
    """``source`` (A's calibrated board file) with the coefficients its calibration held because the reference steps
    do not measure them (``calibration["held"]`` but neither hardware facts nor ``unidentified``: the data loader's
    costs) fitted to the workload's profiles on A (``{mode of space: (time_s, power_w)}``;
    ``workload``: its :class:`~lightning_edge.twin.workload_model.TwinWorkload`), by the calibration's own fit
    (:func:`~lightning_edge.twin.fit.fit_board`: what the profiles cannot separate stays). ``source`` itself when
    there is nothing to fit or fewer than three profiles."""
    from lightning_edge.twin.fit import HELD, Observation, fit_board
    from lightning_edge.twin.physics import DEFAULT_PARAMS

    cal = source.calibration or {}
    free = set(cal.get("held", [])) - set(HELD) - set(cal.get("unidentified") or {})
    if not free or len(profiles) < 3:
        return source
    obs = []
    for m, (t, pw) in profiles.items():
        mode = space.coerce(m)
        obs.append(Observation(mode.as_tuple(), steps={"workload": {"time_s": float(t), "power_w": float(pw),
                                                                    "n": 10}}))
    res = fit_board(source, obs, {"workload": workload}, held=frozenset(set(DEFAULT_PARAMS) - free),
                    max_nfev=max_nfev)
    if not res.fitted:
        return source
    label = source.label if source.label in ("measured", "simulated") else "simulated"
    bf = res.board(label=label, calibration=dict(source.calibration or {}),
                   notes=[f"{', '.join(res.fitted)} fitted to {len(obs)} profiles of one workload on this board"])
    bf.calibration["fitted"] = sorted(set(source.calibration.get("fitted", [])) | set(res.fitted))
    bf.calibration["held"] = sorted(set(DEFAULT_PARAMS) - set(bf.calibration["fitted"]))
    bf.calibration["fitted_to_workload"] = sorted(res.fitted)
    return bf


def _features(knobs: np.ndarray, space: PowerModeSpace) -> np.ndarray:
    top = np.array([space.cores[-1], space.cpu_mhz[-1], space.gpu_mhz[-1], space.mem_mhz[-1]], dtype=float)
    return np.asarray(knobs, dtype=float) / top


def _ridge(x: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
    """Coefficients of ``y ~ a + x b`` with the slopes ``b`` penalised by ``lam`` (the intercept is not)."""
    X = np.hstack([np.ones((len(x), 1)), x])
    P = lam * np.eye(X.shape[1])
    P[0, 0] = 0.0
    return np.linalg.solve(X.T @ X + P, X.T @ y)


def transferred_prior(workload: SimWorkload, space: PowerModeSpace, *, target: BoardFile, source: BoardFile | None = None,
                      profiles: Mapping[ModeLike, tuple[float, float]] | None = None, source_space: PowerModeSpace | None
                      = None, ridge: float = RIDGE, module_sd: tuple[float, float] = MODULE_SD) -> Prior:
    """The prior of ``workload`` (a :class:`~lightning_edge.twin.sim_workload.SimWorkload`: a zoo name, a captured cost,
    or a module with its inputs) over ``space`` of board B, from what board A taught (module docstring). ``target``: B's
    board file (its catalogue's, or a calibrated one); ``source``: A's calibrated board file; ``profiles``: the
    workload's profiles stored for A (``{mode: (time_s, power_w)}``, modes of A's grid ``source_space``, default
    A's file's grid); ``module_sd``: what another module adds to the prediction's error (:data:`MODULE_SD`)."""
    from lightning_edge.twin.model import OrinTwin

    wl = workload.twin_workload("train")
    a_space = source_space or (source.space() if source is not None else None)
    if profiles and source is not None and source.calibration is not None:
        source = fit_to_profiles(source, wl, profiles, a_space)
    model = target_model(target, source)
    twin_b = OrinTwin(board=model, space=space, settling=False)
    pred = wl.on(twin_b).step(space.to_numpy())
    t_b, p_b = np.asarray(pred.time_s, dtype=float), np.asarray(pred.power_w, dtype=float)
    how = [f"{model.label} twin model of {model.key}"
           + (f" (extrapolated from the calibrated {source.key})" if model is not target and model is not source
              else "")]
    spread = np.array(UNCORRECTED_SD, dtype=float)
    fitted = (source.calibration or {}).get("fitted_to_workload") if source is not None else None
    if fitted:
        how.append(f"{', '.join(fitted)} fitted to the workload's profiles on {source.key}")
    if profiles and source is not None:
        twin_a = OrinTwin(board=source, space=a_space, settling=False)
        modes = [a_space.coerce(m) for m in profiles]
        knobs = np.array([m.as_tuple() for m in modes], dtype=float)
        meas = np.array([profiles[m] if m in profiles else profiles[str(m)] for m in modes], dtype=float)
        pa = wl.on(twin_a).step(knobs)
        y = np.stack([np.log(meas[:, 0] / np.asarray(pa.time_s)), np.log(meas[:, 1] / np.asarray(pa.power_w))], 1)
        xa, xb = _features(knobs, a_space), _features(space.to_numpy(), space)
        coef = _ridge(xa, y, ridge) if len(modes) >= 2 else np.vstack([y.mean(0), np.zeros((4, 2))])
        corr = np.hstack([np.ones((len(xb), 1)), xb]) @ coef
        t_b, p_b = t_b * np.exp(corr[:, 0]), p_b * np.exp(corr[:, 1])
        if len(modes) >= 2:  # what the profiles still scatter by around the corrected model (RMS, per degree left)
            res = y - np.hstack([np.ones((len(xa), 1)), xa]) @ coef
            spread = np.sqrt(np.sum(res ** 2, axis=0) / max(len(modes) - 2, 1))
        how.append(f"corrected by {len(modes)} profiles of the workload stored for {source.key} (their ratio to "
                   f"its calibrated model: time x{np.exp(y[:, 0].mean()):.3f}, power x{np.exp(y[:, 1].mean()):.3f} "
                   "on average)")
    other = source is not None and source.key != space.name and model is not source
    sd = np.sqrt(spread ** 2 + (np.asarray(module_sd, dtype=float) ** 2 if other else 0.0))
    how.append(f"uncertain by {100 * sd[0]:.1f} % in time, {100 * sd[1]:.1f} % in power (one standard deviation)")
    return Prior(space, t_b, p_b, "transferred: " + "; ".join(how) + ", of the analyze cost", time_sd=float(sd[0]),
                 power_sd=float(sd[1]), power_error=MODULE_BIAS if other else 0.0)
