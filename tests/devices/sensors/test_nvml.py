"""NVML power sensor with a fake pynvml: energy counter, power polling, Jetson's "Not Supported"."""

from __future__ import annotations

import math

import pytest

from lightning_edge.devices.sensors import SensorError, SensorUnavailableError
from lightning_edge.devices.sensors.nvml import NvmlSensor
from lightning_edge.profiling import PowerSampler
from tests.fakes.nvml_power import FakeNvmlPower, uuid_of


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


class FakeCuda:
    """``torch.cuda`` as a DDP rank sees it: ``visible`` lists the NVML indices of its CUDA devices, in CUDA order
    (after ``CUDA_VISIBLE_DEVICES``); ``current`` is the rank's device."""

    def __init__(self, visible, current=0, initialized=True):
        self.visible, self.current, self.initialized = list(visible), current, initialized

    def is_available(self):
        return bool(self.visible)

    def is_initialized(self):
        return self.initialized

    def current_device(self):
        return self.current

    def get_device_properties(self, i):
        from types import SimpleNamespace

        return SimpleNamespace(uuid=uuid_of(self.visible[i])[4:])  # torch's uuid has no "GPU-" prefix


def test_nvml_reads_the_gpu_this_rank_computes_on():
    from lightning_edge.devices.sensors import get_sensor
    from lightning_edge.devices.sensors.nvml import nvml_index_of_cuda_device

    nv = FakeNvmlPower(gpus=4)
    # rank 1 of a job started with CUDA_VISIBLE_DEVICES=3,1: its cuda:1 is NVML's GPU 1, its cuda:0 GPU 3
    assert nvml_index_of_cuda_device(nvml=nv, cuda=FakeCuda([3, 1], current=1)) == 1
    assert nvml_index_of_cuda_device(0, nvml=nv, cuda=FakeCuda([3, 1], current=1)) == 3
    s = get_sensor("nvml", nvml=nv, cuda=FakeCuda([3, 1], current=0), strict=True)
    assert s.index == 3 and s.energy_domain == "nvml:3" and "GPU 3" in s.label
    assert get_sensor("auto", root="/nonexistent", nvml=nv, cuda=FakeCuda([2])).index == 2
    # an explicit index wins; CUDA not in use (never initialised here) or a UUID NVML does not know -> GPU 0
    assert get_sensor("nvml:1", nvml=nv, cuda=FakeCuda([3]), strict=True).index == 1
    assert get_sensor("nvml", nvml=nv, cuda=FakeCuda([3], initialized=False), strict=True).index == 0
    assert get_sensor("nvml", nvml=FakeNvmlPower(gpus=2), cuda=FakeCuda([5]), strict=True).index == 0
    with pytest.raises(SensorUnavailableError, match="nvml:x: expected an NVML GPU index"):
        get_sensor("nvml:x", nvml=nv)
