"""Which device the profiler measures: its power sensor, its mode (to skip steps after a change), its roofline.

``resolve_device(device)`` accepts ``"auto"`` (Jetson sysfs > jtop > NVML > RAPL > none, as
:func:`~lightning_edge.devices.get_sensor` probes), a sensor name (``"jetson"``, ``"rapl"``, ``"nvml:0"``,
``"none"``), ``"sim:orin-agx"`` (the twin: simulated power and energy, this machine's timings), a device object
with a ``sensor`` attribute (``SimulatedOrin`` or your own: ``controller``/``twin`` are optional), or a bare
``PowerSensor``. No Lightning here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from lightning_edge.devices.sensors.base import EmptySensor, PowerSensor

__all__ = ["ProfilerDevice", "resolve_device", "ORIN_PROFILE", "JETSON_SETTLE_S"]

#: the published roofline profile used for the model energies on real boards (Pagoda's Orin AGX)
ORIN_PROFILE = "orin-agx-pagoda"
#: seconds the board's power takes to settle after a mode change (Pagoda: 2-3 s; the twin: tau 0.8 s)
JETSON_SETTLE_S = 2.5


@dataclass
class ProfilerDevice:
    """What the profiler needs of a device: ``sensor`` (never None: ``EmptySensor`` when there is none),
    optionally a mode ``controller`` (read only: never applied or restored here) and the ``twin``."""

    name: str
    sensor: PowerSensor
    controller: Any = None
    twin: Any = None
    owner: Any = None  # an object to close with the device (e.g. the SimulatedOrin we created)
    notes: list[str] = field(default_factory=list)

    @property
    def simulated(self) -> bool:
        return getattr(self.sensor, "source", "measured") == "simulated" or self.twin is not None

    @property
    def has_sensor(self) -> bool:
        return bool(getattr(self.sensor, "available", True))

    @property
    def source(self) -> str:
        """``measured``, ``simulated``, or ``model`` (no sensor)."""
        if not self.has_sensor:
            return "model"
        return "simulated" if self.simulated else "measured"

    def mode(self) -> str | None:
        """The current power mode as a string, or None when the device has no controller (or it failed)."""
        ctl = self.controller
        if ctl is None:
            return None
        try:
            return str(ctl.current())
        except Exception:  # noqa: BLE001 - a mode read must never stop training
            return None

    def seconds_since_mode_change(self) -> float | None:
        """Seconds since the controller last changed the mode (the twin's controller knows; real ones: None)."""
        fn = getattr(self.controller, "seconds_since_change", None)
        if fn is None:
            return None
        try:
            v = fn()
        except Exception:  # noqa: BLE001
            return None
        return None if v is None else float(v)

    def roofline(self, mode: str | None, precision: str = "fp32") -> tuple[Any, str]:
        """The roofline whose energy model apportions the step's energy: the twin's for the current mode, else the
        published Orin AGX profile (the current mode when it is one of its modes, else MAXN). Returns
        ``(Roofline or None, description)``."""
        if self.twin is not None:
            try:
                m = mode or str(self.twin.current_mode())
                return self.twin.roofline(m, precision), f"twin roofline of the Orin AGX in mode {m} (simulated)"
            except Exception as exc:  # noqa: BLE001
                self.notes.append(f"twin roofline unavailable: {exc}")
        try:
            from lightning_edge.roofline.profile import load_profile

            prof = load_profile(ORIN_PROFILE)
        except Exception as exc:  # noqa: BLE001
            return None, f"no roofline ({exc}): energies apportioned by time"
        if mode is not None:
            try:
                return prof.roofline(mode, precision), f"{ORIN_PROFILE} (published) mode {mode}"
            except Exception:  # noqa: BLE001
                pass
        maxn = prof.modes[0].mode
        return prof.roofline(maxn, precision), f"{ORIN_PROFILE} (published) mode {maxn} (MAXN)"

    def describe(self) -> str:
        label = getattr(self.sensor, "label", "") or type(self.sensor).__name__
        if not self.has_sensor:
            why = (getattr(self.sensor, "reason", None) or "no power sensor").splitlines()[0].rstrip(":")
            return f"no power sensor ({why}): energies are estimated from the roofline model"
        if self.simulated:
            return f"{self.name}: {label}"
        return f"{self.name}: {label}"

    @property
    def update_period_s(self) -> float:
        v = float(getattr(self.sensor, "update_period_s", 0.0) or 0.0)
        return v if math.isfinite(v) else 0.0

    def close(self) -> None:
        target = self.owner if self.owner is not None else self.sensor
        close = getattr(target, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001
                pass


def _read_only_controller(name: str) -> Any:
    from lightning_edge.devices.controllers import get_controller

    # read only: never restore anything at exit, never recover someone else's leftover state
    return get_controller(name, handle_exit=False, recover=False, safety=False)


def resolve_device(device: Any = "auto", *, controller: bool = True) -> ProfilerDevice:
    """A :class:`ProfilerDevice` for ``device`` (see the module docstring). ``controller=False`` skips the mode
    controller (no mode tracking, and the roofline defaults to MAXN)."""
    if isinstance(device, ProfilerDevice):
        return device
    if device is None:
        device = "auto"
    if isinstance(device, PowerSensor):
        return ProfilerDevice(getattr(device, "name", "sensor"), device)
    if not isinstance(device, str):
        sensor = getattr(device, "sensor", None)
        if sensor is None:
            raise TypeError(f"device: expected 'auto', a device name such as 'sim:orin-agx' or 'rapl', a PowerSensor, "
                            f"or an object with a .sensor attribute (SimulatedOrin); got {type(device).__name__}")
        return ProfilerDevice(str(getattr(device, "name", type(device).__name__)), sensor,
                              getattr(device, "controller", None), getattr(device, "twin", None))
    kind = device.strip().lower()
    if kind.startswith("sim"):
        from lightning_edge.devices.sim.device import SimulatedOrin

        sim = SimulatedOrin.from_name(device)
        return ProfilerDevice("sim:orin-agx", sim.sensor, sim.controller, sim.twin, owner=sim)
    from lightning_edge.devices.sensors import get_sensor

    sensor = get_sensor(kind)
    ctl = None
    notes: list[str] = []
    if controller and kind not in ("none", "null", "rapl") and not isinstance(sensor, EmptySensor):
        try:
            ctl = _read_only_controller("auto" if kind in ("auto", "jetson", "jtop") else kind)
        except Exception as exc:  # noqa: BLE001 - no controller: no mode tracking, still profiling
            notes.append(f"no mode controller ({str(exc).splitlines()[0]}): power-mode changes are not tracked")
    name = getattr(sensor, "name", kind) if kind == "auto" else kind
    return ProfilerDevice(str(name), sensor, ctl, None, notes=notes)
