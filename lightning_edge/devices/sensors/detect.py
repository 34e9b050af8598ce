"""Choosing the power sensor: auto-detection (Jetson sysfs > jtop > NVML > RAPL > none) or by name.

::

    sensor = get_sensor()                      # "auto": the best one here, or EmptySensor saying why not
    sensor = get_sensor("rapl")                # explicit; unavailable -> EmptySensor(reason) (strict=True raises)
    sensor = get_sensor("sim:orin-agx", live=live)    # a live simulated board (devices.sim.live.LiveTwin)
    print(available_sensors())                 # {"jetson": None, "jtop": "jetson-stats is not installed...", ...}
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from lightning_edge.devices.registry import Registry
from lightning_edge.devices.sensors.base import EmptySensor, PowerSensor, SensorUnavailableError
from lightning_edge.devices.spec import BoardSpec

SENSORS_HELP = "auto, jetson, jtop, nvml[:INDEX], rapl, none, sim:orin-agx"
AUTO_ORDER = ("jetson", "jtop", "nvml", "rapl")


#: power-sensor backends by name (``register`` adds one); ``ina3221`` is another name for ``jetson``
SENSORS = Registry("power sensor", {
    "jetson": "lightning_edge.devices.sensors.ina3221:INA3221Sensor",
    "jtop": "lightning_edge.devices.sensors.jtop:JtopSensor",
    "nvml": "lightning_edge.devices.sensors.nvml:NvmlSensor",
    "rapl": "lightning_edge.devices.sensors.rapl:RaplSensor",
    "sim": "lightning_edge.devices.sim.sensor:SimPowerSensor",
}, aliases={"ina3221": "jetson"})


def _backend(kind: str) -> type[PowerSensor]:
    try:
        return SENSORS.get(kind)
    except KeyError:
        raise SensorUnavailableError(f"unknown power sensor {kind!r}: expected one of {SENSORS_HELP}") from None


def _why(kind: str, arg: str, kw: dict[str, Any]) -> str | None:
    try:
        cls = _backend(kind)
    except ImportError as exc:  # an optional part of the package is missing
        return f"the {kind} sensor is not available ({exc})"
    return cls.probe(arg, **kw)


def _open(kind: str, arg: str, kw: dict[str, Any]) -> PowerSensor:
    why = _why(kind, arg, kw)
    if why is not None:
        raise SensorUnavailableError(why, {kind: why})
    return _backend(kind).open(arg, **kw)


def get_sensor(device: str | BoardSpec = "auto", *, root: str | os.PathLike[str] = "/", strict: bool = False,
               clock_ns: Callable[[], int] = time.perf_counter_ns, **kwargs: Any) -> PowerSensor:
    """The power sensor for ``device`` (one of :data:`SENSORS_HELP`).

    ``"auto"`` tries Jetson INA3221 sysfs, then jtop, then NVML, then RAPL (never the twin) and returns the first
    that works, else an :class:`EmptySensor` whose ``reasons`` say why each one did not. An explicit device that
    is unavailable gives an :class:`EmptySensor` with its reason too (time-only profiling keeps working), or
    raises :class:`SensorUnavailableError` with ``strict=True``. ``"none"`` is the null sensor.

    ``nvml`` / ``auto`` read the GPU this process computes on (matched by UUID: each DDP rank its own) when CUDA is
    in use, else GPU 0; ``nvml:N`` reads NVML's GPU N.

    ``kwargs``: ``nvml=`` (the pynvml module), ``jtop_module=``, ``interval_s=`` (jtop), ``update_period_s=``,
    ``twin=`` (for ``sim:orin-agx``: the :class:`OrinTwin` whose power to read; a new one by default), ``cuda=``
    (``torch.cuda`` or a stand-in, for the GPU lookup).
    """
    spec = BoardSpec.parse(device)
    device = spec.key  # for messages: the spec as a person writes it
    kind, arg = SENSORS.aliases.get(spec.kind, spec.kind), spec.arg
    kw = {"root": root, "clock_ns": clock_ns, **kwargs}
    if kind == "host":
        return EmptySensor("no power sensor requested (device 'none'): time-only profiling")
    if kind == "auto":
        reasons: dict[str, str] = {}
        for k in AUTO_ORDER:
            try:
                return _open(k, "", kw)
            except SensorUnavailableError as exc:
                reasons[k] = exc.reasons.get(k, str(exc))
        lines = ["no power sensor found, energy is unavailable (time-only profiling):"]
        lines += [f"  {k}: {v}" for k, v in reasons.items()]
        lines.append("For the simulated Orin AGX twin use device 'sim:orin-agx'.")
        return EmptySensor("\n".join(lines), reasons)
    why = _why(kind, arg, kw)  # an unknown name or a malformed spec (nvml:x) raises: never a silent time-only run
    if why is None:
        try:
            return _backend(kind).open(arg, **kw)
        except SensorUnavailableError as exc:
            why = exc.reasons.get(kind, str(exc))
    if strict:
        raise SensorUnavailableError(f"power sensor {device!r} unavailable: {why}", {kind: why})
    return EmptySensor(f"power sensor {device!r} unavailable: {why}", {kind: why})


def available_sensors(*, root: str | os.PathLike[str] = "/", **kwargs: Any) -> dict[str, str | None]:
    """``{backend: None if it would work here, else why not}`` for every backend, in auto-detection order
    (then ``sim`` and ``none``, which are never auto-selected)."""
    kw = {"root": root, **kwargs}
    out = {k: _why(k, "", kw) for k in AUTO_ORDER}
    out.update({k: _why(k, "", kw) for k in SENSORS if k not in out})
    out["none"] = None
    return out


__all__ = ["AUTO_ORDER", "SENSORS", "SENSORS_HELP", "available_sensors", "get_sensor"]
