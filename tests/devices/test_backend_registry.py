"""Backend factories are registries keyed by each backend's ``name`` (issue 16 item 7): a sensor or controller
added by name is found by ``get_sensor`` / ``get_controller`` / ``get_board``, and every backend receives only the
options its constructor takes (no per-backend blacklists of other backends' options)."""

from __future__ import annotations

import pytest

from lightning_edge.devices.controllers import CONTROLLERS, available_backends, get_controller
from lightning_edge.devices.registry import Registry, accepted_kwargs
from lightning_edge.devices.sensors import get_sensor
from lightning_edge.devices.sensors.base import PowerReading, PowerSensor
from lightning_edge.devices.sensors.detect import SENSORS, available_sensors


class BenchMeter(PowerSensor):
    """A lab wattmeter on a serial port, as a third party would add one."""

    name = "benchmeter"
    label = "bench wattmeter"
    rails = ("VIN",)

    def __init__(self, port: str = "/dev/ttyUSB0", *, clock_ns=None) -> None:
        self.port = port

    @classmethod
    def why_unavailable(cls, root="/", **_):
        return None if root == "/lab" else f"no wattmeter on {root}"

    @classmethod
    def open(cls, arg: str = "", **kw):
        return cls(arg or "/dev/ttyUSB0")

    @classmethod
    def probe(cls, arg: str = "", **kw):
        return cls.why_unavailable(**kw)

    def read(self) -> PowerReading:
        return PowerReading(0, 12.0, {"VIN": 12.0})


@pytest.fixture
def benchmeter():
    SENSORS.register(BenchMeter)
    yield BenchMeter
    SENSORS._entries.pop("benchmeter")


def test_a_registered_sensor_is_found_by_name(benchmeter):
    s = get_sensor("benchmeter:/dev/ttyACM1", root="/lab", strict=True)
    assert isinstance(s, BenchMeter) and s.port == "/dev/ttyACM1"
    missing = get_sensor("benchmeter", root="/elsewhere")
    assert "no wattmeter on /elsewhere" in missing.why_unavailable()
    assert "benchmeter" in available_sensors(root="/lab")


def test_registering_twice_needs_override(benchmeter):
    with pytest.raises(ValueError, match="already registered; pass override=True"):
        SENSORS.register(BenchMeter)
    SENSORS.register(BenchMeter, override=True)


def test_a_backend_needs_a_name():
    reg = Registry("thing", {})
    with pytest.raises(ValueError, match="needs a class attribute name"):
        reg.register(type("Nameless", (), {}))
    with pytest.raises(KeyError, match="unknown thing 'x': expected one of"):
        reg.get("x")


def test_lazy_entries_are_checked_against_their_name():
    reg = Registry("thing", {"nvml": "lightning_edge.devices.sensors.rapl:RaplSensor"})
    with pytest.raises(TypeError, match="has name 'rapl', registered as 'nvml'"):
        reg.get("nvml")


def test_each_backend_gets_only_its_own_options():
    from lightning_edge.devices.controllers.jetson import JetsonSysfsController
    from lightning_edge.devices.sim.controller import SimModeController

    opts = {"root": "/", "runner": object(), "power_limit_w": 50.0, "board_file": "x", "dry_run": True,
            "state_dir": "/tmp", "initial": "maxn"}
    # the Jetson controller's **common reaches ModeController.__init__ (dry_run, state_dir), not the twin's options
    assert set(accepted_kwargs(JetsonSysfsController, opts)) == {"root", "dry_run", "state_dir"}
    assert set(accepted_kwargs(SimModeController, opts)) == {"board_file", "dry_run", "state_dir", "initial"}
    ctl = get_controller("sim:orin-agx", runner=object(), power_limit_w=50.0, safety=False, handle_exit=False)
    assert ctl.name == "sim"


def test_every_registered_controller_is_listed():
    assert list(available_backends()) == list(CONTROLLERS) == ["jetson", "nvpmodel", "nvml", "sim"]
    assert available_backends()["sim"] is None
