"""Where serving runs: the twin (simulated time) or real hardware (wall clock), and what controls its mode.

``resolve_serving_device(device)``:

- ``"sim:orin-agx"`` / ``"sim"``: a new :class:`~lightning_edge.devices.sim.device.SimulatedOrin` (closed with the
  run); a ``SimulatedOrin`` instance: that one (its controller is shared). Simulated clock, twin timings.
- ``"cpu"`` / ``"host"`` / ``None``: this machine, wall clock, no mode controller, no power sensor.
- ``"jetson"`` / ``"auto"``: a real board: :func:`~lightning_edge.devices.controllers.get_controller` and
  :func:`~lightning_edge.devices.sensors.get_sensor` (wall clock; power from the sensor through a ``PowerSampler``).
- any other object with ``controller`` and/or ``sensor`` attributes: a real device you built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ServingDevice", "resolve_serving_device"]


@dataclass
class ServingDevice:
    """``simulated``: the twin (``sim`` is the ``SimulatedOrin``); ``controller``/``sensor``: ``None`` when absent."""

    name: str
    simulated: bool
    controller: Any = None
    sensor: Any = None
    sim: Any = None
    owned: bool = False

    @property
    def label(self) -> str:
        return "simulated" if self.simulated else "measured"

    @property
    def space(self) -> Any:
        ctl = self.controller
        return getattr(ctl, "space", None) if ctl is not None else None

    def close(self) -> None:
        if self.owned and self.sim is not None:
            self.sim.close()


def resolve_serving_device(device: Any = "sim:orin-agx", *, seed: int | None = 0) -> ServingDevice:
    if isinstance(device, ServingDevice):
        return device
    if device is None or (isinstance(device, str) and device.strip().lower() in ("cpu", "host")):
        return ServingDevice("cpu", False)
    if isinstance(device, str):
        kind = device.strip().lower()
        if kind.startswith("sim"):
            from lightning_edge.devices.sim.device import SimulatedOrin

            sim = SimulatedOrin.from_name(device, seed=seed)
            return ServingDevice("sim:orin-agx", True, sim.controller, sim.sensor, sim, owned=True)
        if kind in ("jetson", "auto"):
            from lightning_edge.devices.controllers import get_controller
            from lightning_edge.devices.sensors import get_sensor

            return ServingDevice(kind, False, get_controller(kind), get_sensor(kind))
        raise ValueError(f"device {device!r}: expected 'sim:orin-agx', 'cpu', 'jetson', 'auto', a SimulatedOrin, or "
                         "an object with .controller / .sensor")
    twin = getattr(device, "twin", None)
    if twin is not None and getattr(device, "label", "") == "simulated":
        return ServingDevice(str(getattr(device, "name", "sim:orin-agx")), True, getattr(device, "controller", None),
                             getattr(device, "sensor", None), device)
    if not (hasattr(device, "controller") or hasattr(device, "sensor")):
        raise TypeError(f"device: expected 'sim:orin-agx', 'cpu', a SimulatedOrin or an object with .controller / "
                        f".sensor, got {type(device).__name__}")
    return ServingDevice(str(getattr(device, "name", type(device).__name__)), False,
                         getattr(device, "controller", None), getattr(device, "sensor", None))
