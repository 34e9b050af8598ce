"""get_sensor / available_sensors: auto-detection order, explicit choice, and the reasons when nothing works."""

from __future__ import annotations

import socket

import pytest

from lightning_edge.devices.sensors import (
    EmptySensor,
    INA3221Sensor,
    SensorUnavailableError,
    available_sensors,
    get_sensor,
)
from lightning_edge.devices.sensors.jtop import JtopSensor
from lightning_edge.devices.sensors.nvml import NvmlSensor
from lightning_edge.devices.sensors.rapl import RaplSensor
from lightning_edge.profiling import PowerSampler
from tests.devices.sensors.fake_jtop import make_module
from tests.fakes.ina3221 import build_orin_agx_ina
from tests.fakes.nvml_power import FakeNvmlPower
from tests.fakes.rapl import build_rapl


def test_auto_on_a_bare_machine_is_an_empty_sensor_with_every_reason(tmp_path):
    s = get_sensor("auto", root=tmp_path, nvml=FakeNvmlPower(gpus=0))
    assert isinstance(s, EmptySensor) and not s.available
    assert set(s.reasons) == {"jetson", "jtop", "nvml", "rapl"}
    why = s.why_unavailable()
    assert "no INA3221 found" in why and "no RAPL domains" in why and "sim:orin-agx" in why
    # time-only profiling keeps working
    assert s.read().t_ns > 0
    with PowerSampler(s) as sampler:
        assert not sampler.running and "energy is unavailable" in sampler.why_no_energy


def test_auto_prefers_jetson_sysfs_over_everything(tmp_path):
    build_orin_agx_ina(tmp_path)
    build_rapl(tmp_path)
    s = get_sensor(root=tmp_path, nvml=FakeNvmlPower())
    assert isinstance(s, INA3221Sensor)


def test_auto_falls_through_jetson_nvml_to_rapl(tmp_path):
    build_rapl(tmp_path)
    s = get_sensor("auto", root=tmp_path, nvml=FakeNvmlPower.jetson())
    assert isinstance(s, RaplSensor)


def test_auto_order_jtop_then_nvml(tmp_path):
    (tmp_path / "run").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "run/jtop.sock"))
    try:
        assert isinstance(get_sensor(root=tmp_path, jtop_module=make_module(), nvml=FakeNvmlPower()), JtopSensor)
    finally:
        sock.close()
    assert isinstance(get_sensor(root=tmp_path, nvml=FakeNvmlPower()), NvmlSensor)


def test_explicit_choice_and_strict(tmp_path):
    build_rapl(tmp_path)
    assert isinstance(get_sensor("rapl", root=tmp_path), RaplSensor)
    assert isinstance(get_sensor("nvml:0", nvml=FakeNvmlPower()), NvmlSensor)
    s = get_sensor("jetson", root=tmp_path)
    assert isinstance(s, EmptySensor) and "no INA3221 found" in s.why_unavailable()
    with pytest.raises(SensorUnavailableError) as exc:
        get_sensor("jetson", root=tmp_path, strict=True)
    assert "no INA3221" in exc.value.reasons["jetson"]
    assert "time-only" in get_sensor("none").why_unavailable()
    with pytest.raises(SensorUnavailableError, match="expected one of"):
        get_sensor("wattmeter")


def test_available_sensors_lists_every_backend(tmp_path):
    build_orin_agx_ina(tmp_path)
    out = available_sensors(root=tmp_path, nvml=FakeNvmlPower.jetson())
    assert list(out) == ["jetson", "jtop", "nvml", "rapl", "sim", "none"]
    assert out["jetson"] is None and "Jetson's NVML" in out["nvml"] and out["none"] is None


def test_sim_sensor_is_explicit_only(tmp_path):
    reason = available_sensors(root=tmp_path)["sim"]
    if reason is not None:  # the twin's sensor not there yet: a clear error, never a crash
        with pytest.raises(SensorUnavailableError, match="sim"):
            get_sensor("sim:orin-agx", strict=True)
        return
    s = get_sensor("sim:orin-agx")
    assert s.name == "sim" and len(s.rails) == 4
    r = s.read()
    assert r.power_w > 0
    assert not isinstance(get_sensor("auto", root=tmp_path, nvml=FakeNvmlPower(gpus=0)), type(s))
    with pytest.raises(SensorUnavailableError, match="no simulated board"):
        get_sensor("sim:xavier", strict=True)
