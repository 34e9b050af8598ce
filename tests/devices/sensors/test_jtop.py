"""jtop (jetson-stats) backend with the fake jtop client (tests/fakes/jtop.py) and a fake /run/jtop.sock."""

from __future__ import annotations

import math
import socket
import time

import pytest

from lightning_edge.devices.sampler import PowerSampler
from lightning_edge.devices.sensors import SensorError, SensorUnavailableError
from lightning_edge.devices.sensors.jtop import JtopSensor
from tests.fakes.jtop import make_module, orin_agx_power


@pytest.fixture
def root(tmp_path):
    (tmp_path / "run").mkdir()
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(tmp_path / "run/jtop.sock"))
    yield tmp_path
    s.close()


def _wait_samples(mod, n, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while mod.state.samples < n:
        assert time.monotonic() < deadline, "the fake jtop service sent no sample"
        time.sleep(0.005)


def test_reads_rails_and_total_and_says_it_is_slow(root):
    mod = make_module()
    s = JtopSensor(root=root, jtop_module=mod, interval_s=0.05)
    assert mod.state.started and mod.state.interval == 0.05
    assert "too coarse for per-layer" in s.notes
    assert s.rails == ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO")
    r = s.read()
    assert r.power_w == pytest.approx(8.011) and r.rails_w["VDD_GPU_SOC"] == pytest.approx(3.186) and r.ok
    mod.state.power = orin_agx_power(gpu_mw=20000)
    _wait_samples(mod, mod.state.samples + 2)
    assert s.read().rails_w["VDD_GPU_SOC"] == pytest.approx(20.0)
    mod.state.power["rail"]["VDD_CPU_CV"]["online"] = False
    _wait_samples(mod, mod.state.samples + 2)
    r = s.read()
    assert r.missing == ("VDD_CPU_CV",) and r.partial  # jtop's "ALL" total is the rail sum: it lost a rail
    s.close()
    assert mod.state.closed


def test_jetson_stats_4_0_and_4_1_power_tuple(root):
    """jetson-stats 4.0-4.1 return ``jetson.power`` as ``(total, rails)`` with ``cur``/``avg`` in mW."""
    mod = make_module(version="4.0.2")
    s = JtopSensor(root=root, jtop_module=mod, interval_s=0.05)
    assert s.rails == ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO")
    r = s.read()
    assert r.power_w == pytest.approx(8.011) and r.rails_w["VIN_SYS_5V0"] == pytest.approx(3.526) and r.ok
    s.close()


def test_read_never_blocks_on_jtops_next_sample(root):
    """``jetson.ok()`` (spin=False) waits up to 3 intervals for the next sample; a read must not."""
    mod = make_module()
    s = JtopSensor(root=root, jtop_module=mod, interval_s=1.5)
    s.read()
    t0 = time.perf_counter()
    r = s.read()  # the same sample again, at once
    assert time.perf_counter() - t0 < 0.5
    assert math.isfinite(r.power_w)
    s.close()


def test_the_reading_is_dated_at_jtops_sample_not_at_the_read(root):
    mod = make_module()
    s = JtopSensor(root=root, jtop_module=mod, interval_s=0.3)
    marks = []
    mod.state.instances[0].attach(lambda j: marks.append(time.perf_counter_ns()))
    _wait_samples(mod, 2)
    time.sleep(0.15)  # halfway to the next sample
    sampler = PowerSampler(s)
    assert sampler.sample_once()
    t = int(sampler.samples().t_ns[-1])
    assert abs(t - marks[-1]) < 20_000_000  # the sample's arrival, not the read 150 ms later
    assert time.perf_counter_ns() - t > 100_000_000
    assert sampler.sample_once() and len(sampler) == 1  # the same jtop sample is stored once
    s.close()


def test_a_service_that_stops_answering_fails_reads_after_our_own_timeout(root):
    mod = make_module()
    s = JtopSensor(root=root, jtop_module=mod, interval_s=0.05)
    s.read()
    mod.state.alive = False
    time.sleep(0.3)  # more than 3 intervals without a sample
    t0 = time.perf_counter()
    with pytest.raises(SensorError, match="no new sample"):
        s.read()
    assert time.perf_counter() - t0 < 0.1
    s.close()


def test_a_lost_connection_is_a_sensor_error(root):
    mod = make_module()
    s = JtopSensor(root=root, jtop_module=mod, interval_s=0.05)
    mod.state.error = mod.JtopException("Lost connection with jtop server")
    time.sleep(0.2)
    with pytest.raises(SensorError, match="Lost connection"):
        s.read()
    s.close()


@pytest.mark.parametrize("bad", [-55000, 999 * 999 * 1000, "n/a", float("nan")], ids=["negative", "absurd",
                                                                                     "garbage", "nan"])
def test_implausible_rail_values_are_rejected_not_summed(root, bad):
    mod = make_module()
    s = JtopSensor(root=root, jtop_module=mod, interval_s=0.05)
    mod.state.power["rail"]["VDD_GPU_SOC"]["power"] = bad
    mod.state.power["tot"]["power"] = bad if not isinstance(bad, str) else 4825
    _wait_samples(mod, mod.state.samples + 2)
    r = s.read()
    assert "VDD_GPU_SOC" not in r.rails_w and r.partial and not r.ok
    assert ("VDD_GPU_SOC" in r.rejected) or ("VDD_GPU_SOC" in r.missing)
    assert not (r.power_w < 0) and not (r.power_w > 100)
    s.close()


def test_unavailable_reasons(tmp_path, root):
    assert "not running" in JtopSensor.why_unavailable(root=tmp_path / "nowhere", jtop_module=make_module())
    assert JtopSensor.why_unavailable(root=root, jtop_module=make_module()) is None
    try:
        import jtop  # noqa: F401
    except ImportError:
        assert "jetson-stats is not installed" in JtopSensor.why_unavailable(root=root)
    with pytest.raises(SensorUnavailableError, match="could not connect"):
        JtopSensor(root=root, jtop_module=make_module(refuse=True))


def test_4_0_tuple_with_an_input_rail_is_not_re_summed():
    """jetson-stats 4.0 takes VDD_IN out of the rails and returns it as the total: a missing sub-rail does not make
    that total partial, and it is never replaced by the sum of the sub-rails."""
    from lightning_edge.devices.sensors.jtop import parse_power

    total = {"cur": 5955, "avg": 5955}
    rails = {"VDD_CPU_GPU_CV": {"cur": 920, "avg": 920}, "VDD_SOC": {"cur": 1520, "avg": 1520}}
    r, tot, is_sum = parse_power((total, rails))
    assert tot == 5955 and not is_sum and r == {"VDD_CPU_GPU_CV": 920, "VDD_SOC": 1520}
    _, _, is_sum = parse_power(({"cur": 2440, "avg": 2440}, rails))
    assert is_sum
