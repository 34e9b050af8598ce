"""One ``Board``: what the profiler, the tuner, serving and the CLI need of a device, from one resolver.

``get_board(spec, control="read")`` accepts:

- ``"auto"`` / ``None``: the power sensor found here (Jetson sysfs > jtop > NVML > RAPL > none, as
  :func:`~lightning_edge.devices.get_sensor` probes) and the board's mode controller when there is one;
- a sensor or board name: ``"jetson"``, ``"jtop"``, ``"nvpmodel"``, ``"nvml"`` / ``"nvml:0"``, ``"rapl"``;
- ``"none"`` / ``"cpu"`` / ``"host"``: this machine, no power sensor, no controller (time-only profiling,
  wall-clock serving);
- ``"sim"`` / ``"sim:orin-agx"``: a new Orin AGX twin (:class:`~lightning_edge.devices.sim.device.SimulatedOrin`),
  closed with the board;
- a ``SimulatedOrin`` or any object with ``sensor`` and/or ``controller`` (and optionally ``twin``) attributes:
  that device, shared (not closed with the board); a bare ``PowerSensor``; a ``Board``.

``control``: ``"read"`` (the profiler: a controller only to read the mode, opened without safety handlers, and
optional: without one, a note says mode changes are not tracked) or ``"write"`` (the tuner, serving: a controller
that switches modes, with its state file and restore handlers; a board name without one raises, saying why).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any

from lightning_edge.devices.meter import JETSON_SETTLE_S, SensorMeter, TwinMeter
from lightning_edge.devices.sensors.base import EmptySensor, PowerSensor

__all__ = ["Board", "get_board", "ORIN_PROFILE", "JETSON_SETTLE_S", "HOST_NAMES"]

#: the published roofline profile used for the model energies on real boards (Pagoda's Orin AGX)
ORIN_PROFILE = "orin-agx-pagoda"
#: names of "this machine, nothing to measure or control"
HOST_NAMES = ("none", "null", "cpu", "host")


@dataclass
class Board:
    """A device: its power ``sensor`` (never None: an ``EmptySensor`` saying why when there is none), its mode
    ``controller`` (None when it has none), the ``twin`` when it is the simulated Orin, and the ``owner`` that
    :meth:`close` closes: what the resolver created (the ``SimulatedOrin`` of a ``"sim"`` spec, a sensor opened by
    name); a device you pass in stays open (yours to close)."""

    name: str
    sensor: PowerSensor
    controller: Any = None
    twin: Any = None
    owner: Any = None
    notes: list[str] = field(default_factory=list)

    @property
    def simulated(self) -> bool:
        return self.twin is not None or getattr(self.sensor, "source", "measured") == "simulated"

    @property
    def label(self) -> str:
        return "simulated" if self.simulated else "measured"

    @property
    def has_sensor(self) -> bool:
        return bool(getattr(self.sensor, "available", True))

    @property
    def source(self) -> str:
        """``measured``, ``simulated``, or ``model`` (no sensor: energies come from a model)."""
        return self.label if self.has_sensor else "model"

    @property
    def space(self) -> Any:
        return getattr(self.controller, "space", None)

    @property
    def update_period_s(self) -> float:
        v = float(getattr(self.sensor, "update_period_s", 0.0) or 0.0)
        return v if math.isfinite(v) else 0.0

    def mode(self) -> str | None:
        """The current power mode as a string, or None when there is no controller (or reading it failed)."""
        if self.controller is None:
            return None
        try:
            return str(self.controller.current())
        except Exception:  # noqa: BLE001 - a mode read must never stop training
            return None

    def seconds_since_mode_change(self) -> float | None:
        """Seconds since the controller last changed the mode (the twin's controller knows; real ones: None)."""
        fn = getattr(self.controller, "seconds_since_change", None)
        try:
            v = fn() if fn is not None else None
        except Exception:  # noqa: BLE001
            return None
        return None if v is None else float(v)

    def roofline(self, mode: str | None, precision: str = "fp32") -> tuple[Any, str]:
        """The roofline whose energy model apportions a step's energy: the twin's for the mode, else the published
        Orin AGX profile (the mode when it is one of its modes, else MAXN). ``(Roofline or None, description)``."""
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
            with contextlib.suppress(Exception):  # not one of the profile's modes: MAXN's
                return prof.roofline(mode, precision), f"{ORIN_PROFILE} (published) mode {mode}"
        maxn = prof.modes[0].mode
        return prof.roofline(maxn, precision), f"{ORIN_PROFILE} (published) mode {maxn} (MAXN)"

    def meter(self, *, seed: int | None = 0, settling: bool = True, wait: bool = True, **twin: Any) -> Any:
        """The board's step meter (:mod:`lightning_edge.devices.meter`): a ``TwinMeter`` on the twin (``seed``,
        ``settling``, and ``train=``/``infer=``/``precision=`` for it), else a ``SensorMeter`` of the sensor
        (``wait``: wait for a sample after each step)."""
        if self.twin is not None:
            return TwinMeter(self.twin, seed=seed, settling=settling, **twin)
        return SensorMeter(self.sensor, wait=wait)

    def describe(self) -> str:
        if not self.has_sensor:
            why = (getattr(self.sensor, "reason", None) or "no power sensor").splitlines()[0].rstrip(":")
            return f"no power sensor ({why}): energies are estimated from the roofline model"
        return f"{self.name}: {getattr(self.sensor, 'label', '') or type(self.sensor).__name__}"

    def close(self) -> None:
        close = getattr(self.owner, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()


def get_board(spec: Any = "auto", *, control: str = "read", seed: int | None = 0) -> Board:
    """The :class:`Board` for ``spec`` (see the module docstring); ``seed`` seeds a new twin's noise."""
    if control not in ("read", "write"):
        raise ValueError(f"control must be 'read' or 'write', got {control!r}")
    if isinstance(spec, Board):
        return spec
    if isinstance(spec, PowerSensor):
        return Board(getattr(spec, "name", "sensor"), spec, owner=spec)
    if spec is not None and not isinstance(spec, str):
        sensor, ctl = getattr(spec, "sensor", None), getattr(spec, "controller", None)
        if sensor is None and ctl is None:
            raise TypeError("device: expected 'auto', a name such as 'sim:orin-agx', 'jetson', 'nvml:0', 'rapl' or "
                            "'none', a PowerSensor, or an object with .sensor and/or .controller attributes "
                            f"(SimulatedOrin); got {type(spec).__name__}")
        return Board(str(getattr(spec, "name", type(spec).__name__)),
                     sensor if sensor is not None else EmptySensor(reason=f"{type(spec).__name__} has no sensor"),
                     ctl, getattr(spec, "twin", None))
    kind = (spec or "auto").strip().lower()
    if kind.startswith("sim"):
        from lightning_edge.devices.sim.device import SimulatedOrin

        sim = SimulatedOrin.from_name(kind, seed=seed)
        return Board("sim:orin-agx", sim.sensor, sim.controller, sim.twin, owner=sim)
    from lightning_edge.devices.sensors import get_sensor

    if kind in HOST_NAMES:
        sensor = get_sensor("none")
        return Board(kind, sensor, owner=sensor)
    from lightning_edge.devices.controllers import get_controller

    if control == "write":  # raises saying why there is no controllable board here
        ctl = get_controller(kind)
        sensor = get_sensor("auto" if kind in ("auto", "jetson", "nvpmodel") else kind)
        return Board(kind, sensor, ctl, owner=sensor)
    sensor = get_sensor(kind)
    ctl, notes = None, []
    if kind != "rapl" and not isinstance(sensor, EmptySensor):
        try:  # read only: never restore anything at exit, never recover someone else's leftover state
            ctl = get_controller("auto" if kind in ("auto", "jetson", "jtop") else kind, handle_exit=False,
                                 recover=False, safety=False)
        except Exception as exc:  # noqa: BLE001 - no controller: no mode tracking, still profiling
            notes.append(f"no mode controller ({str(exc).splitlines()[0]}): power-mode changes are not tracked")
    return Board(str(getattr(sensor, "name", kind) if kind == "auto" else kind), sensor, ctl, owner=sensor, notes=notes)
