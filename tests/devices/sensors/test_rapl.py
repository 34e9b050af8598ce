"""RAPL through powercap on fake trees: domains, wrap-around, root-only energy_uj, garbage."""

from __future__ import annotations

import math

import pytest

from lightning_edge.devices.sensors import SensorUnavailableError
from lightning_edge.devices.sensors.rapl import RaplSensor
from lightning_edge.profiling import PowerSampler
from tests.fakes.ina3221 import remove_tree, run_unprivileged, world_tmpdir
from tests.fakes.rapl import build_rapl


class Clock:
    def __init__(self) -> None:
        self.t = 5 * 10**12

    def __call__(self) -> int:
        return self.t


def test_intel_package_and_dram_domains(tmp_path):
    rapl = build_rapl(tmp_path, packages=2)
    clock = Clock()
    s = RaplSensor(root=tmp_path, clock_ns=clock)
    assert s.rails == ("package-0", "package-1", "dram-0", "dram-1")  # no core/uncore/mmio
    assert s.is_energy_counter and s.update_period_s == pytest.approx(0.001)
    first = s.read()
    assert first.energy_j == 0.0 and math.isnan(first.power_w)
    for r, j in {"package-0": 3.0, "package-1": 2.0, "dram-0": 0.5, "dram-1": 0.25}.items():
        rapl.advance(r, j)
    clock.t += 100_000_000  # 0.1 s
    r = s.read()
    assert r.energy_j == pytest.approx(5.75)
    assert r.power_w == pytest.approx(57.5)
    assert r.rails_w["package-0"] == pytest.approx(30.0) and r.rails_energy_j["dram-1"] == pytest.approx(0.25)
    assert s.read_energy_j() == pytest.approx(5.75)


def test_amd_uses_the_same_powercap_names(tmp_path):
    build_rapl(tmp_path, vendor="amd")
    assert RaplSensor(root=tmp_path).rails == ("package-0",)


def test_counter_wrap_around(tmp_path):
    rapl = build_rapl(tmp_path, max_uj=10_000_000)  # a 10 J range, to wrap quickly
    clock = Clock()
    s = RaplSensor(root=tmp_path, clock_ns=clock)
    sampler = PowerSampler(s, clock_ns=clock)
    t0 = clock.t
    for _ in range(50):  # 50 x 10 ms at 200 W: 2 J per read, wraps every 5 reads
        sampler.sample_once()
        rapl.advance("package-0", 2.0)
        clock.t += 10_000_000
    sampler.sample_once()
    assert s.read_energy_j() == pytest.approx(100.0, rel=1e-6)
    assert sampler.energy_j(t0, clock.t) == pytest.approx(100.0, rel=1e-6)
    assert sampler.energy_j(t0 + 5_000_000, t0 + 15_000_000) == pytest.approx(2.0, rel=1e-6)


def test_root_only_energy_uj_says_why_and_how(tmp_path):
    d = world_tmpdir()
    try:
        rapl = build_rapl(d)
        rapl.root_only()
        reason = run_unprivileged(RaplSensor.why_unavailable, d)
        assert "permission denied" in reason and "CVE-2020-8694" in reason and "udev" in reason
    finally:
        remove_tree(d)


def test_no_powercap(tmp_path):
    reason = RaplSensor.why_unavailable(root=tmp_path)
    assert "no RAPL domains" in reason
    with pytest.raises(SensorUnavailableError):
        RaplSensor(root=tmp_path)


def test_garbage_mid_run_is_partial_not_a_crash(tmp_path):
    rapl = build_rapl(tmp_path)
    clock = Clock()
    s = RaplSensor(root=tmp_path, clock_ns=clock)
    s.read()
    rapl.garbage("dram-0")
    clock.t += 10**6
    r = s.read()
    assert r.partial and r.missing == ("dram-0",) and r.energy_j is None
    rapl.set_counter("dram-0", 9_876_543 + 1_000_000)  # 1 J later, readable again
    clock.t += 10**6
    assert s.read().rails_energy_j["dram-0"] == pytest.approx(1.0)
    assert "garbage" not in (RaplSensor.why_unavailable(root=tmp_path) or "")
