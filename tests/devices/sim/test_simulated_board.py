"""Noise, settling, the simulated sensor and the SimulatedOrin device (fake clocks, no sleeping)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lightning_edge.devices.sim.device import SimulatedOrin
from lightning_edge.devices.sim.live import LiveTwin
from lightning_edge.devices.sim.sensor import ORIN_AGX_RAILS, SimPowerSensor
from lightning_edge.twin.model import OrinTwin
from lightning_edge.twin.sim_workload import Measurement, SimWorkload
from lightning_edge.twin.validation import LOW, MAXN


def test_simworkload_noise_is_seeded_and_switchable(twin):
    a = SimWorkload("resnet18", twin, seed=7)
    b = SimWorkload("resnet18", twin, seed=7)
    ma = [a.train(MAXN) for _ in range(5)]
    mb = [b.train(MAXN) for _ in range(5)]
    assert ma == mb
    assert len({m.time_s for m in ma}) == 5
    exact = SimWorkload("resnet18", twin, noise=False)
    m = exact.train(MAXN)
    assert isinstance(m, Measurement) and m.label == "simulated"
    ref = twin.predict_workload("resnet18", 16, "train", MAXN)
    assert m.time_s == float(ref.time_s) and m.power_w == float(ref.power_w)
    rel = np.array([x.time_s for x in ma]) / m.time_s - 1
    assert np.all(np.abs(rel) < 0.15)
    assert a.calls["train"] == 5
    a.reset()
    assert a.train(MAXN) == ma[0]


def test_simworkload_infer_uses_batch_size(twin):
    w = SimWorkload("mobilenet_v3_large", twin, noise=False)
    assert w.infer(MAXN, 64).time_s > w.infer(MAXN, 1).time_s


def _device(clock, **kw):
    return SimulatedOrin(clock=clock, clock_ns=clock.ns, **kw)


def test_settling_after_a_mode_change_with_fake_clock(clock):
    dev = _device(clock, noise=False)
    with dev.live.running("resnet18", "train", 16):
        clock.t += 30.0
        before = dev.sensor.read().power_w
        dev.controller.apply(LOW)
        target = dev.live.target_power()
        assert target < before
        levels = []
        for dt in (0.0, 0.8, 1.6, 2.5, 5.0):
            clock.t = dev.controller.last_change_s + dt
            levels.append(dev.sensor.read().power_w)
    assert levels[0] == pytest.approx(before)
    assert all(x > y for x, y in zip(levels, levels[1:]))
    gap = [(x - target) / (before - target) for x in levels]
    assert gap[1] == pytest.approx(math.exp(-1.0), rel=1e-6)       # tau = 0.8 s
    assert gap[3] < 0.05                                           # within 5 % after 2.5 s
    assert levels[-1] == pytest.approx(target, rel=0.01)


def test_settling_switch_off_jumps_at_once(clock):
    dev = _device(clock, noise=False, settling=False)
    with dev.live.running("resnet18", "train", 16):
        clock.t += 1.0
        dev.controller.apply(LOW)
        assert dev.sensor.read().power_w == pytest.approx(dev.live.target_power())


def test_workload_start_settles_from_idle(clock):
    dev = _device(clock, noise=False)
    idle = dev.sensor.read().power_w
    assert idle == pytest.approx(float(dev.twin.static_power(MAXN)))
    with dev.live.running("resnet18", "train", 16):
        clock.t += 0.8
        mid = dev.sensor.read().power_w
        clock.t += 10.0
        busy = dev.sensor.read().power_w
    assert idle < mid < busy
    clock.t += 20.0
    assert dev.sensor.read().power_w == pytest.approx(idle, rel=1e-6)


def test_sensor_rails_sum_to_total_and_hold_between_updates(clock):
    dev = _device(clock, noise=True, seed=3, update_period_s=0.01)
    with dev.live.running("bert_large", "infer", 1):
        clock.t += 5.0
        r = dev.sensor.read()
        assert tuple(r.rails_w) == ORIN_AGX_RAILS
        assert sum(r.rails_w.values()) == pytest.approx(r.power_w, rel=1e-12)
        assert max(r.rails_w, key=r.rails_w.get) == "VDD_GPU_SOC"
        assert all(v > 0 for v in r.rails_w.values())
        clock.t += 0.004                      # same INA3221 update slot: the value is held
        r2 = dev.sensor.read()
        assert r2.power_w == r.power_w and r2.t_ns > r.t_ns
        clock.t += 0.02
        assert dev.sensor.read().power_w != r.power_w  # a new (noisy) sample


def test_sensor_noise_is_seeded(clock):
    def run(seed):
        c = type(clock)(100.0)
        dev = SimulatedOrin(clock=c, clock_ns=c.ns, seed=seed)
        out = []
        for _ in range(5):
            c.t += 0.05
            out.append(dev.sensor.read().power_w)
        return out

    assert run(1) == run(1) != run(2)
    assert np.std(run(1)) > 0


def test_simulated_orin_wiring(clock):
    dev = _device(clock)
    assert dev.name == "sim:orin-agx" and dev.label == "simulated"
    assert dev.space.size == 18096 and dev.space is dev.controller.space
    assert isinstance(dev.sensor, SimPowerSensor) and dev.sensor.source == "simulated"
    assert dev.live.controller is dev.controller and dev.live.model is dev.twin
    dev.controller.apply("8c/1344/727/2133")
    assert str(dev.live.current_mode()) == "8c/1344/726.75/2133"
    w = dev.workload("resnet18", noise=False)
    assert w.train(dev.current_mode()).time_s > w.train(MAXN).time_s


def test_live_twin_keeps_its_own_mode_without_controller(clock):
    tw = LiveTwin(OrinTwin(), clock=clock, noise=False)
    idle_maxn = tw.power_now()
    tw.set_mode(LOW)
    clock.t += 10
    assert tw.current_mode() == LOW
    assert tw.power_now() < idle_maxn


def test_the_board_holds_the_model_and_the_live_board():
    """A simulated Board's ``twin`` is the pure model, its ``live`` the board running in its controller's mode; a real
    board has no live twin."""
    from lightning_edge.devices.board import get_board

    b = get_board("sim:orin-agx")
    try:
        assert isinstance(b.live, LiveTwin) and isinstance(b.twin, OrinTwin)
        assert b.live.model is b.twin and b.live.controller is b.controller
        assert b.live.current_mode() == b.controller.current()
    finally:
        b.close()
    host = get_board("none")
    try:
        assert host.live is None and host.twin is None
    finally:
        host.close()
