"""jtop (jetson-stats) backend with a fake jtop module and a fake /run/jtop.sock."""

from __future__ import annotations

import socket

import pytest

from lightning_edge.devices.sensors import SensorError, SensorUnavailableError
from lightning_edge.devices.sensors.jtop import JtopSensor
from tests.devices.sensors.fake_jtop import make_module, orin_agx_power


@pytest.fixture
def root(tmp_path):
    (tmp_path / "run").mkdir()
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(tmp_path / "run/jtop.sock"))
    yield tmp_path
    s.close()


def test_reads_rails_and_total_and_says_it_is_slow(root):
    mod = make_module()
    s = JtopSensor(root=root, jtop_module=mod)
    assert mod.state.started and mod.state.interval == 1.0
    assert s.update_period_s == 1.0 and "too coarse for per-layer" in s.notes
    assert s.rails == ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO")
    r = s.read()
    assert r.power_w == pytest.approx(8.011) and r.rails_w["VDD_GPU_SOC"] == pytest.approx(3.186)
    mod.state.power = orin_agx_power(gpu_mw=20000)
    assert s.read().rails_w["VDD_GPU_SOC"] == pytest.approx(20.0)
    mod.state.power["rail"]["VDD_CPU_CV"]["online"] = False
    assert s.read().missing == ("VDD_CPU_CV",)
    mod.state.alive = False
    with pytest.raises(SensorError, match="stopped answering"):
        s.read()
    s.close()
    assert mod.state.closed


def test_unavailable_reasons(tmp_path, root):
    assert "not running" in JtopSensor.why_unavailable(root=tmp_path / "nowhere", jtop_module=make_module())
    assert JtopSensor.why_unavailable(root=root, jtop_module=make_module()) is None
    try:
        import jtop  # noqa: F401
    except ImportError:
        assert "jetson-stats is not installed" in JtopSensor.why_unavailable(root=root)
    with pytest.raises(SensorUnavailableError, match="could not connect"):
        JtopSensor(root=root, jtop_module=make_module(refuse=True))
