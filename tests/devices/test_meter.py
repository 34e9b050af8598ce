"""The one step meter: the twin's (its prediction, noise and settling curve on a simulated clock) and a sensor's
(wall clock, a PowerSampler's mean, bad readings not believed), and Board.meter() picking between them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lightning_edge.devices import get_board
from lightning_edge.devices.meter import JETSON_SETTLE_S, SensorMeter, StepMeter, TwinMeter
from lightning_edge.devices.sensors.base import PowerReading, PowerSensor
from lightning_edge.modes import PowerMode
from lightning_edge.twin.model import OrinTwin
from lightning_edge.twin.sim_workload import SimWorkload

HIGH = PowerMode(12, 2201.6, 1300.5, 3199)  # MAXN
LOW = PowerMode(4, 1036.8, 522.75, 665.6)


# ------------------------------------------------------------------------------------------------ the twin
def twin_meter(*, settling: bool = False, noise: bool = False, seed: int | None = 0) -> tuple[TwinMeter, OrinTwin]:
    twin = OrinTwin(settle_tau_s=0.8)
    wl = SimWorkload("resnet18", twin, train_batch_size=16, noise=False)
    return TwinMeter(twin, train=wl, infer=wl, seed=seed, noise=noise, settling=settling), twin


def test_board_meter_is_the_twins_on_the_twin_and_the_sensors_elsewhere():
    sim = get_board("sim:orin-agx")
    host = get_board("none")
    try:
        tm, sm = sim.meter(), host.meter()
        assert isinstance(tm, TwinMeter) and tm.label == "simulated" and tm.simulated and tm.twin is sim.twin
        assert isinstance(sm, SensorMeter) and sm.label == "measured" and not sm.simulated and not sm.has_power
        assert isinstance(tm, StepMeter) and isinstance(sm, StepMeter)
        assert tm.settle_s == pytest.approx(3 * sim.twin.settle_tau_s) and sm.settle_s == JETSON_SETTLE_S
        sm.open()
        sm.start()
        r = sm.stop(HIGH)
        assert r.label == "measured" and r.time_s > 0 and math.isnan(r.power_w) and not r.trusted
        assert math.isnan(sm.energy_j(0.0, sm.now_s())) and math.isnan(sm.idle_power_w(HIGH))
        sm.close()
    finally:
        sim.close()
        host.close()


def test_a_twin_step_is_the_twins_prediction_for_that_workload_and_mode():
    meter, twin = twin_meter()
    for mode in (HIGH, LOW):
        for kind, bs in (("train", 16), ("infer", 4)):
            pred = twin.predict_workload("resnet18", bs, kind, mode)
            t, p = float(np.ravel(pred.time_s)[0]), float(np.ravel(pred.power_w)[0])
            before = meter.now_s()
            assert meter.start() == before
            r = meter.stop(mode, kind, None if kind == "train" else bs)
            assert (r.time_s, r.power_w, r.label) == (t, p, "simulated")
            assert r.energy_j == pytest.approx(t * p, rel=1e-12)
            assert meter.now_s() == pytest.approx(before + t, rel=1e-12)  # the simulated clock moved by the step
    assert meter.idle_power_w(LOW) == pytest.approx(float(np.ravel(twin.static_power(LOW))[0]))
    assert meter.energy_j(0.0, meter.now_s()) is None  # the steps' own energies are the record
    t0 = meter.now_s()
    assert meter.wait_until(t0 + 2.5) == pytest.approx(2.5) and meter.now_s() == pytest.approx(t0 + 2.5)
    assert meter.wait_until(t0) == 0.0  # never backwards
    with pytest.raises(RuntimeError, match="no train workload"):
        TwinMeter(twin).stop(HIGH)
    with pytest.raises(TypeError, match="Orin twin"):
        TwinMeter(object())


@pytest.mark.parametrize(("first", "second"), [(HIGH, LOW), (LOW, HIGH)], ids=["lowers", "raises"])
def test_after_a_mode_change_power_follows_the_twins_settling_curve(first, second):
    meter, twin = twin_meter(settling=True)
    p1 = meter.workload.expected("train", first)[1]
    p2 = meter.workload.expected("train", second)[1]
    static = meter.idle_power_w(first)
    # from idle: the first mode's static power rises to the step power along the curve
    r = meter.stop(first)
    assert r.power_w == pytest.approx(twin.settling_w(static, p1, 0.0, r.time_s), rel=1e-12)
    assert static < r.power_w < p1
    while meter.now_s() < 10 * twin.settle_tau_s:
        meter.stop(first)
    change = meter.now_s()
    level = twin.settling_w(static, p1, change)
    meter.mode_changed(second)
    powers = []
    while meter.now_s() - change < 6 * twin.settle_tau_s:
        a = meter.now_s() - change
        r = meter.stop(second)
        assert r.power_w == pytest.approx(twin.settling_w(level, p2, a, a + r.time_s), rel=1e-12)
        powers.append(r.power_w)
    steps = np.diff(powers)
    assert (steps < 0).all() if p2 < p1 else (steps > 0).all()  # monotone from the old level to the new one
    assert abs(powers[0] - p1) < abs(powers[0] - p2)  # the first step is still near the old mode's power
    assert powers[-1] == pytest.approx(p2, rel=0.01)
    # the twin with settling off, or a meter told not to settle: the mode's power at once
    flat, _ = twin_meter(settling=False)
    assert flat.stop(first).power_w == p1 and flat.settle_s == 0.0


def test_twin_noise_is_seeded_and_has_the_workloads_spread():
    a, _ = twin_meter(noise=True, seed=7)
    b, _ = twin_meter(noise=True, seed=7)
    ra = [a.stop(HIGH) for _ in range(2000)]
    assert ra[:50] == [b.stop(HIGH) for _ in range(50)]
    t, p = a.workload.expected("train", HIGH)
    times = np.array([r.time_s for r in ra]) / t
    powers = np.array([r.power_w for r in ra]) / p
    assert times.mean() == pytest.approx(1.0, abs=0.003) and times.std() == pytest.approx(0.025, rel=0.1)
    assert powers.mean() == pytest.approx(1.0, abs=0.003) and powers.std() == pytest.approx(0.02, rel=0.1)
    assert a.now_s() == pytest.approx(sum(r.time_s for r in ra), rel=1e-9)


# ------------------------------------------------------------------------------------------------ a sensor
class FakeClock:
    def __init__(self) -> None:
        self.t = 10**12  # a perf_counter-like origin, far from 0

    def __call__(self) -> int:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += int(round(s * 1e9))


class RampSensor(PowerSensor):
    """P(t) = 10 + 2 t W on a fake clock (t in s since it was made); ``bad`` replaces every reading's power."""

    name = "ramp"
    rails = ("VDD_IN",)
    update_period_s = 0.01

    def __init__(self, clock: FakeClock, bad: float | None = None) -> None:
        self.clock, self.t0, self.bad = clock, clock.t, bad

    def read(self) -> PowerReading:
        p = 10.0 + 2.0 * (self.clock.t - self.t0) / 1e9 if self.bad is None else self.bad
        return PowerReading(self.clock.t, p, {"VDD_IN": p})


def run_for(meter: SensorMeter, clock: FakeClock, seconds: float, period_s: float = 0.01) -> None:
    """Time passes with the sampler reading the sensor every ``period_s`` (what its thread does)."""
    end = clock.t + int(round(seconds * 1e9))
    while clock.t < end:
        clock.t += int(round(period_s * 1e9))
        meter.sampler.sample_once()


def sensor_meter(bad: float | None = None) -> tuple[SensorMeter, FakeClock]:
    clock = FakeClock()
    meter = SensorMeter(RampSensor(clock, bad), sync=lambda: None, wait=False, clock_ns=clock, sleep=clock.sleep)
    meter.sampler.sample_once()
    return meter, clock


def test_a_sensor_step_is_its_wall_time_and_the_sensors_mean_power():
    meter, clock = sensor_meter()
    run_for(meter, clock, 1.0)
    assert meter.start() == pytest.approx(1.0)
    run_for(meter, clock, 1.0)
    r = meter.stop(HIGH)
    # the ramp's mean over [1 s, 2 s] is 13 W; a linear trace is integrated exactly
    assert (r.time_s, r.power_w, r.label, r.trusted) == (pytest.approx(1.0), pytest.approx(13.0, rel=1e-9), "measured", True)
    assert meter.energy_j(1.0, 2.0) == pytest.approx(13.0, rel=1e-9)
    # a step shorter than the sensor's update period gets the mean of the last period (it cannot resolve less)
    meter.period_ns = int(0.1e9)
    meter.start()
    run_for(meter, clock, 0.02)
    assert meter.stop(HIGH).power_w == pytest.approx(10 + 2 * (2.02 - 0.05), rel=1e-9)
    # idle time on the wall clock is slept
    t = meter.now_s()
    assert meter.wait_until(t + 0.5) == pytest.approx(0.5) and meter.now_s() == pytest.approx(t + 0.5)


@pytest.mark.parametrize("bad", [-5.0, math.nan], ids=["negative", "nan"])
def test_bad_sensor_readings_are_not_believed(bad):
    meter, clock = sensor_meter(bad)
    meter.start()
    run_for(meter, clock, 0.5)
    r = meter.stop(HIGH)
    assert math.isnan(r.power_w) and not r.trusted and r.time_s == pytest.approx(0.5)
    from lightning_edge.tuning.online import ProfileWindow, WindowSpec

    window = ProfileWindow(0, HIGH, 0.0, 0.0, WindowSpec(settle_s=0.0, warmup_steps=0))
    assert not window.feed(meter.now_s(), r.time_s, r.power_w, r.trusted)  # measured again, not kept


def test_the_tuner_refuses_a_meter_without_a_power_sensor():
    from lightning_edge.devices.sim.device import SimulatedOrin
    from lightning_edge.tuning.online import OnlineTuner

    board = SimulatedOrin(seed=0)
    try:
        with pytest.raises(ValueError, match="needs a power sensor"):
            OnlineTuner(20.0, board.controller, get_board("none").meter(), store=None)
    finally:
        board.close()
