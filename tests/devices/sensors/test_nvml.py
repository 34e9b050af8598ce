"""NVML power sensor with a fake pynvml: energy counter, power polling, Jetson's "Not Supported"."""

from __future__ import annotations

import math

import pytest

from lightning_edge.devices.sensors import SensorError, SensorUnavailableError
from lightning_edge.devices.sensors.nvml import NvmlSensor
from lightning_edge.profiling import PowerSampler
from tests.fakes.nvml_power import FakeNvmlPower


class Clock:
    def __init__(self) -> None:
        self.t = 10**12

    def __call__(self) -> int:
        return self.t


def test_energy_counter_mode_is_differenced_by_the_sampler():
    nv = FakeNvmlPower()
    clock = Clock()
    s = NvmlSensor(nvml=nv, clock_ns=clock)
    assert s.is_energy_counter and s.mode == "energy" and s.rails == ("GPU0",)
    assert "A100" in s.label and s.update_period_s == pytest.approx(0.02)
    sampler = PowerSampler(s, clock_ns=clock)
    assert sampler.is_energy_counter and sampler.rate_hz == pytest.approx(50.0)
    t0 = clock.t
    for _ in range(20):  # 250 W for 20 x 20 ms
        sampler.sample_once()
        nv.advance(250 * 0.02)
        clock.t += 20_000_000
    sampler.sample_once()
    assert sampler.energy_j(t0, clock.t) == pytest.approx(100.0)
    assert sampler.energy_j(t0 + 5_000_000, t0 + 15_000_000, rail="GPU0") == pytest.approx(2.5)
    r = s.read()
    assert r.energy_j == pytest.approx(100.0)
    s.close()
    assert nv.shutdowns == 1


def test_power_polling_when_no_energy_counter():
    nv = FakeNvmlPower(energy=False)
    s = NvmlSensor(nvml=nv)
    assert not s.is_energy_counter and s.mode == "power"
    nv.power_mw = 123_400
    r = s.read()
    assert r.power_w == pytest.approx(123.4) and r.energy_j is None
    assert "averages power over 1 s" in s.notes


def test_jetson_nvml_not_supported_is_detected():
    reason = NvmlSensor.why_unavailable(nvml=FakeNvmlPower.jetson())
    assert "Jetson's NVML does not report power" in reason and "INA3221" in reason
    with pytest.raises(SensorUnavailableError) as exc:
        NvmlSensor(nvml=FakeNvmlPower.jetson())
    assert "jetson" in exc.value.reasons["nvml"]


def test_other_unavailable_reasons():
    assert "no NVIDIA GPU with index 0" in NvmlSensor.why_unavailable(nvml=FakeNvmlPower(gpus=0))
    assert "no NVIDIA driver" in NvmlSensor.why_unavailable(nvml=FakeNvmlPower(fail_init="Driver Not Loaded"))
    assert "neither energy nor power" in NvmlSensor.why_unavailable(
        nvml=FakeNvmlPower(energy=False, power=False, name="Tesla K80"))
    try:
        import pynvml  # noqa: F401
    except ImportError:
        assert "pip install nvidia-ml-py" in NvmlSensor.why_unavailable()


def test_gpu_lost_mid_run_is_a_sensor_error_the_sampler_skips():
    nv = FakeNvmlPower()
    clock = Clock()
    s = NvmlSensor(nvml=nv, clock_ns=clock)
    s.read()
    nv.lost = True
    with pytest.raises(SensorError, match="GPU is lost"):
        s.read()
    sampler = PowerSampler(s, clock_ns=clock)
    assert not sampler.sample_once() and sampler.errors == 1
    assert math.isnan(sampler.energy_j(clock.t, clock.t + 1))
