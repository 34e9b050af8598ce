"""Readings that are partial never decide (issue 36 item 2): a rail of the Orin's total unplugged, or two rail labels
swapped, in the middle of tuning, on the fake INA3221 tree, with the tuner choosing.

Was: VDD_GPU_SOC unplugged mid-tuning (budget 20 W on a board) and the tuner chose a mode at "8.7 W (profile, measured)" whose
true power was 21.8 W; with two labels swapped, one at "8.0 W" that drew 29.2 W. A window that kept partial steps
returned their power as the profile's. Now such a profile has no power (untrusted, labelled partial): GMD leaves the
mode out, the store keeps it as a failed row with its label, the summary never compares with a partial MAXN.
"""

from __future__ import annotations

import math
import time

import pytest

from lightning_edge.devices.meter import SensorMeter
from lightning_edge.devices.sensors import INA3221Sensor
from lightning_edge.devices.sim.controller import SimModeController
from lightning_edge.modes import PowerModeSpace
from lightning_edge.tuning.online import OnlineTuner, WindowSpec
from tests.fakes.ina3221 import build_orin_agx_ina

# a small grid of the AGX Orin's own values (the sensor's checks use the module's rating)
SPACE = PowerModeSpace(cores=(4, 8, 12), cpu_mhz=(729.6, 1344.0, 2201.6), gpu_mhz=(318.75, 726.75, 1300.5),
                       mem_mhz=(665.6, 2133.0, 3199.0), name="orin-agx")
SHARES = {"VDD_GPU_SOC": 0.6, "VDD_CPU_CV": 0.2, "VIN_SYS_5V0": 0.15, "VDDQ_VDD2_1V8AO": 0.05}
WINDOW = WindowSpec(settle_s=0.0, warmup_steps=1, min_steps=3, max_steps=5)
BUDGET_W = 21.0


def true_power_w(m) -> float:
    """What the board really draws in mode ``m`` (the fake tree's truth)."""
    return 4.0 + 0.5 * m.cores + 0.002 * m.cpu_mhz + 0.012 * m.gpu_mhz + 0.0015 * m.mem_mhz


def step_time_s(m) -> float:
    return 0.004 * (1300.5 / m.gpu_mhz) ** 0.5 * (2201.6 / m.cpu_mhz) ** 0.2


def _tune(tmp_path, fault) -> tuple[OnlineTuner, object]:
    ina = build_orin_agx_ina(tmp_path / "root")
    sensor = INA3221Sensor(root=tmp_path / "root")
    ctl = SimModeController("orin-agx", space=SPACE, safety=False, handle_exit=False)
    meter = SensorMeter(sensor, rate_hz=400, sync=lambda: None)
    t = OnlineTuner(BUDGET_W, ctl, meter, space=SPACE, store=None, window=WINDOW, fingerprint="partial-readings",
                    prior=None)
    t.start()
    faulted, shown = False, None
    for _ in range(3000):
        if t.phase in ("tuned", "infeasible") and t._pending_mode is None:
            break
        t.before_step()
        mode = ctl.current()
        if mode != shown:  # the board's rails follow its mode (written once per switch, as a kernel's would change)
            for rail, share in SHARES.items():
                if ina.files(rail)[0].exists():  # an unplugged rail stays unplugged
                    ina.set_power_w(rail, true_power_w(mode) * share)
            shown = mode
        time.sleep(step_time_s(mode))
        t.after_step()
        if not faulted and len(t.profiles) >= 2:  # mid-tuning: the strategy has profiled two modes
            fault(ina)
            faulted = True
    assert faulted and t.phase in ("tuned", "infeasible"), (t.phase, len(t.profiles))
    return t, ctl


def _trusted(p: dict) -> bool:
    return p.get("trusted", not p["label"].endswith("(partial)"))


def _check(t: OnlineTuner) -> None:
    s = t.summary()
    partial = [p for p in t.profiles if not _trusted(p)]
    assert partial and all(p["label"].endswith("(partial)") and not p["within_budget"] for p in partial)
    assert all(math.isnan(p["power_w"]) for p in partial)  # no number a budget could be checked against
    assert t.solution is not None, t.phase  # a mode profiled on complete readings meets the budget: chosen
    chosen = t.solution.mode
    # the decision rests on complete readings only: the mode chosen really meets the budget
    assert true_power_w(chosen) <= BUDGET_W, (str(chosen), true_power_w(chosen), s.power_w)
    assert str(chosen) in {str(p["mode"]) for p in t.profiles if _trusted(p)}
    if t.solution is not None:
        assert "partial" not in (getattr(s, "mode_label", None) or "") and s.power_w == pytest.approx(true_power_w(chosen), rel=0.05)
    if getattr(s, "maxn_label", None) and "partial" in s.maxn_label:  # never a full reading compared with a partial one
        assert s.energy_vs_maxn is None and s.maxn_power_w is None


def test_a_rail_of_the_total_unplugged_mid_tuning_never_decides(tmp_path):
    t, _ = _tune(tmp_path, lambda ina: ina.remove("VDD_GPU_SOC"))
    _check(t)
    t.close()


def test_two_rail_labels_swapped_mid_tuning_never_decide(tmp_path):
    t, _ = _tune(tmp_path, lambda ina: ina.swap_labels("VDD_GPU_SOC", "VDDQ_VDD2_1V8AO"))
    _check(t)
    t.close()


def test_readings_turning_partial_in_the_chosen_mode_are_drift_too(tmp_path):
    """Was: with a rail unplugged after tuning, the chosen mode's readings looked within the budget (a partial sum)
    and drift re-tuning never fired. Now reading quality is drift as well as level: one re-tune per episode."""
    ina = build_orin_agx_ina(tmp_path / "root")
    sensor = INA3221Sensor(root=tmp_path / "root")
    ctl = SimModeController("orin-agx", space=SPACE, safety=False, handle_exit=False)
    meter = SensorMeter(sensor, rate_hz=400, sync=lambda: None)
    events = []
    t = OnlineTuner(BUDGET_W, ctl, meter, space=SPACE, store=None, window=WINDOW, fingerprint="drift-quality",
                    prior=None, drift_window=8, drift_patience=1, on_event=lambda k, i: events.append((str(k), i)))
    t.start()
    shown, unplugged_at = None, None
    for i in range(3000):
        t.before_step()
        mode = ctl.current()
        if mode != shown:
            for rail, share in SHARES.items():
                if ina.files(rail)[0].exists():
                    ina.set_power_w(rail, true_power_w(mode) * share)
            shown = mode
        time.sleep(step_time_s(mode))
        t.after_step()
        if unplugged_at is None and t.phase == "tuned" and t._pending_mode is None and i > 5:
            ina.remove("VDD_GPU_SOC")
            unplugged_at = i
        if unplugged_at is not None and i > unplugged_at + 40:
            break
    assert unplugged_at is not None
    drifts = [info for kind, info in events if kind == "drift"]
    assert len(drifts) == 1 and drifts[0]["quality"] == "partial", events
    t.close()
