"""The calibration's fit (issue 38, parts 1-2): what the measurements cannot separate is held and said, the
leave-one-workload-out and leave-modes-out refits never see what they predict, and residuals that follow a knob are
named."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_edge.calibrate.kit import design_modes
from lightning_edge.twin.board_files import board_file
from lightning_edge.twin.fit import (
    KNOB_NAMES,
    Observation,
    WorkloadSpec,
    diagnose,
    fit_board,
    unidentified,
    validate,
    verdict,
)
from lightning_edge.twin.model import OrinTwin

LSTM = WorkloadSpec("lstm", "infer", 1, 1)
R18 = WorkloadSpec("resnet18", "infer", 1)


def observations(bf, steps, n_modes=8, seed=0, scale=None):
    """Noise-free measurements of ``bf`` (its rooflines, idle power and ``steps``) at ``n_modes`` modes of its
    design; ``scale``: {step id: factor} on that step's measured time (what the twin does not model of it)."""
    twin = OrinTwin(board=bf, settling=False)
    out = []
    for m in design_modes(twin.space, n_modes, seed):
        o = Observation(m.as_tuple(), static_power_w=float(twin.static_power(m)))
        for prec in ("fp32", "fp16", "fp32_cuda"):
            r = twin.roofline(m, prec)
            o.rooflines[prec] = {q: float(getattr(r, q)) for q in ("peak_flops", "bandwidth", "eps_flop", "eps_mop")}
        for s in steps:
            st = s.on(twin).step(m)
            o.steps[s.id] = {"time_s": float(st.time_s) * (scale or {}).get(s.id, 1.0), "power_w": float(st.power_w),
                             "n": 50}
        out.append(o)
    return out


def test_what_the_measurements_cannot_separate_is_held_and_said():
    """Two coefficients the measurements see only as their sum: one is held (the one with the larger spread), the
    other named as what it trades off with; a well-measured one is not touched."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(40), rng.standard_normal(40)
    jac = np.vstack([np.stack([10 * x, 10 * y, 10 * y], axis=1), 0.05 * np.eye(3)])  # columns 2 and 3: the same
    lost = unidentified(jac, ["peak", "base", "leak"])
    assert list(lost) in (["base"], ["leak"])
    held = next(iter(lost))
    assert lost[held]["with"] == ({"base", "leak"} - {held}).pop() and lost[held]["correlation"] == pytest.approx(
        -1.0, abs=0.01)
    assert lost[held]["sd_percent"] > 100
    assert unidentified(jac[:, :1], ["peak"]) == {}


def test_a_fit_holds_the_inseparable_at_the_start_and_says_so():
    """The idle power's always-on part and the idle GPU's leakage are seen only together: the fit holds one at the
    catalogue's value (its provenance too), names the other, and the board file says both."""
    bf = board_file("orin-nano-8gb")
    res = fit_board(bf, observations(bf, [LSTM], n_modes=6), [LSTM], max_nfev=3)
    assert res.unidentified and all(k not in res.fitted for k in res.unidentified)
    assert {"p_base_w", "p_gpu_idle_leak_w"} & set(res.unidentified)
    out = res.board(label="simulated")
    for k in res.unidentified:
        assert out.params[k] == bf.full_params[k] and out.provenance[k] == bf.provenance_of(k)
    assert set(out.calibration["unidentified"]) == set(res.unidentified)
    assert any("cannot separate" in n for n in out.notes)
    assert set(res.spread_percent) == set(res.fitted)


def test_leaving_a_workload_out_predicts_it_without_seeing_it():
    """A workload the twin misjudges by 25 % (its measured time scaled): fitted with it, its residuals are what the
    fit could absorb; left out, the refit from the other reference step predicts it far off (the estimate a user's
    unseen workload gets; the other, left out in turn, is off too: the fit bent the CPU costs they share towards
    it), and leaving modes out predicts the steps at those modes."""
    bf = board_file("orin-nano-8gb")
    obs = observations(bf, [LSTM, R18], scale={R18.id: 1.25})
    res = fit_board(bf, obs, [LSTM, R18], max_nfev=8)
    val = validate(res, obs, [LSTM, R18], max_nfev=8)
    assert set(val.workloads) == {LSTM.id, R18.id}
    assert val.workloads[R18.id]["time_percent"] > 15  # never fitted to its own measurements
    assert val.workloads[R18.id]["time_percent"] > res.errors[f"{R18.id} time_s"]
    assert len(val.folds) == 3 and sum(len(f["modes"]) for f in val.folds) == len(obs)
    assert val.modes_time_percent is not None and val.worst["time_percent"] > 15
    d = val.to_dict()
    assert d["leave_one_workload_out"][R18.id]["modes"] == len(obs) and d["time_percent"] == round(
        float(np.median([v["time_percent"] for v in val.workloads.values()])), 2)


def test_one_reference_step_or_few_modes_say_what_was_not_estimated():
    bf = board_file("orin-nano-8gb")
    obs = observations(bf, [LSTM], n_modes=3)
    val = validate(fit_board(bf, obs, [LSTM], max_nfev=1), obs, [LSTM], max_nfev=1)
    assert val.time_percent is None and val.modes_time_percent is None and len(val.notes) == 2


def test_residuals_that_follow_a_knob_are_named():
    """A dispatch-bound step whose time grows as CPU cores go offline, where the twin's does not depend on them: the
    kind of measurement the fit cannot follow is named, and the CPU cores as the knob its residuals follow."""
    bf = board_file("orin-nano-8gb")
    obs = observations(bf, [LSTM], n_modes=10)
    for o in obs:  # 30 % slower on one core than on all six
        o.steps[LSTM.id]["time_s"] *= 1.0 + 0.3 * (6.0 - o.mode[0]) / 5.0
    res = fit_board(bf, obs, [LSTM], max_nfev=5)
    d = diagnose_of(res, bf, obs)
    assert f"{LSTM.id} time_s" in d["unexplained"] and d["knob"] == "CPU cores" and d["knob_direction"] == "too high"
    trust, reasons = verdict(d)
    assert trust == "poorly explained" and any("CPU cores" in r for r in reasons)
    assert any(LSTM.id in r for r in reasons)
    clean = fit_board(bf, observations(bf, [LSTM], n_modes=10), [LSTM], max_nfev=5)
    assert verdict(clean.diagnosis) == ("explained", [])
    assert set(d["knob_r2"]) == set(KNOB_NAMES)


def diagnose_of(res, bf, obs):
    from lightning_edge.twin.fit import _Model

    return diagnose(_Model(bf, {LSTM.id: LSTM}, obs), res.params, bf.space())
