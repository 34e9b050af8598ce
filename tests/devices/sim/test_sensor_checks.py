"""The twin's sensor is checked like a live one: a model fault is never reported as a simulated measurement."""

from __future__ import annotations

import math

import pytest

from lightning_edge.devices.sim.live import LiveTwin
from lightning_edge.devices.sim.sensor import SimPowerSensor


class Clock:
    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> int:
        self.t += 50_000_000
        return self.t


@pytest.mark.parametrize("bad", [-5.0, math.nan, 4.95e5])
def test_an_impossible_twin_total_is_rejected_not_reported(twin, monkeypatch, bad):
    """The twin's sensor passed whatever the model said (-5 W, nan, 4.95e5 W) as a full, ok reading."""
    live = LiveTwin(twin)
    s = SimPowerSensor(live, clock_ns=Clock())
    monkeypatch.setattr(live, "power_now", lambda: bad)
    r = s.read()
    assert not r.ok and r.rejected and s.rejected_count >= 1
    assert not (math.isfinite(r.power_w) and r.power_w < 0) and not r.power_w > 1e4


def test_a_plausible_twin_reading_is_unchanged(twin):
    s = SimPowerSensor(LiveTwin(twin), clock_ns=Clock())
    r = s.read()
    assert r.ok and not r.rejected and math.isclose(sum(r.rails_w.values()), r.power_w)
