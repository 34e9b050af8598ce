"""Choosing the power sensor: auto-detection (Jetson sysfs > jtop > NVML > RAPL > none) or by name.

::

    sensor = get_sensor()                      # "auto": the best one here, or EmptySensor saying why not
    sensor = get_sensor("rapl")                # explicit; unavailable -> EmptySensor(reason) (strict=True raises)
    sensor = get_sensor("sim:orin-agx", twin=twin)
    print(available_sensors())                 # {"jetson": None, "jtop": "jetson-stats is not installed...", ...}
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from lightning_edge.devices.sensors.base import EmptySensor, PowerSensor, SensorUnavailableError

SENSORS_HELP = "auto, jetson, jtop, nvml[:INDEX], rapl, none, sim:orin-agx"
AUTO_ORDER = ("jetson", "jtop", "nvml", "rapl")


def _why(kind: str, arg: str, root: Any, kw: dict[str, Any]) -> str | None:
    if kind == "jetson":
        from lightning_edge.devices.sensors.ina3221 import INA3221Sensor

        return INA3221Sensor.why_unavailable(root=root)
    if kind == "jtop":
        from lightning_edge.devices.sensors.jtop import JtopSensor

        return JtopSensor.why_unavailable(root=root, jtop_module=kw.get("jtop_module"))
    if kind == "nvml":
        from lightning_edge.devices.sensors.nvml import NvmlSensor

        return NvmlSensor.why_unavailable(index=_nvml_index(arg, kw), nvml=kw.get("nvml"))
    if kind == "rapl":
        from lightning_edge.devices.sensors.rapl import RaplSensor

        return RaplSensor.why_unavailable(root=root)
    if kind == "sim":
        try:
            from lightning_edge.devices.sim.sensor import SimPowerSensor  # noqa: F401
        except ImportError as exc:
            return f"the twin's simulated sensor is not available ({exc})"
        return None
    raise SensorUnavailableError(f"unknown power sensor {kind!r}: expected one of {SENSORS_HELP}")


def _nvml_index(arg: str, kw: dict[str, Any]) -> int:
    """``nvml:N`` -> N; plain ``nvml`` (and ``auto``) -> the GPU this process computes on when CUDA is in use (each
    DDP rank its own), else 0."""
    if arg:
        try:
            return int(arg)
        except ValueError:
            raise SensorUnavailableError(f"nvml:{arg}: expected an NVML GPU index such as nvml:0",
                                         {"nvml": f"bad index {arg!r}"}) from None
    from lightning_edge.devices.sensors.nvml import nvml_index_of_cuda_device

    found = nvml_index_of_cuda_device(nvml=kw.get("nvml"), cuda=kw.get("cuda"))
    return 0 if found is None else found


def _make(kind: str, arg: str, root: Any, clock_ns: Callable[[], int], kw: dict[str, Any]) -> PowerSensor:
    if kind == "jetson":
        from lightning_edge.devices.sensors.ina3221 import INA3221Sensor

        return INA3221Sensor(root=root, clock_ns=clock_ns, update_period_s=kw.get("update_period_s"))
    if kind == "jtop":
        from lightning_edge.devices.sensors.jtop import DEFAULT_INTERVAL_S, JtopSensor

        return JtopSensor(kw.get("interval_s", DEFAULT_INTERVAL_S), root=root, jtop_module=kw.get("jtop_module"),
                          clock_ns=clock_ns)
    if kind == "nvml":
        from lightning_edge.devices.sensors.nvml import NvmlSensor

        return NvmlSensor(_nvml_index(arg, kw), nvml=kw.get("nvml"), clock_ns=clock_ns,
                          update_period_s=kw.get("update_period_s"))
    if kind == "rapl":
        from lightning_edge.devices.sensors.rapl import RaplSensor

        return RaplSensor(root=root, clock_ns=clock_ns)
    if kind == "sim":
        return _sim(arg, clock_ns, kw)
    raise SensorUnavailableError(f"unknown power sensor {kind!r}: expected one of {SENSORS_HELP}")


def _sim(board: str, clock_ns: Callable[[], int], kw: dict[str, Any]) -> PowerSensor:
    if board not in ("", "orin-agx"):
        raise SensorUnavailableError(f"no simulated board {board!r}: the twin plays orin-agx")
    try:
        from lightning_edge.devices.sim.sensor import SimPowerSensor
    except ImportError as exc:
        raise SensorUnavailableError(f"sim: the twin's simulated sensor is not available ({exc})",
                                     {"sim": str(exc)}) from exc
    twin = kw.get("twin")
    if twin is None:
        from lightning_edge.devices.sim.twin import OrinTwin

        twin = OrinTwin()
    extra = {"update_period_s": kw["update_period_s"]} if kw.get("update_period_s") else {}
    return SimPowerSensor(twin, clock_ns=clock_ns, **extra)


def get_sensor(device: str = "auto", *, root: str | os.PathLike[str] = "/", strict: bool = False,
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
    kind, _, arg = str(device).strip().partition(":")
    kind = kind.lower()
    if kind == "ina3221":
        kind = "jetson"
    if kind in ("none", "null"):
        return EmptySensor("no power sensor requested (device 'none'): time-only profiling")
    if kind == "auto":
        reasons: dict[str, str] = {}
        for k in AUTO_ORDER:
            why = _why(k, "", root, kwargs)
            if why is None:
                try:
                    return _make(k, "", root, clock_ns, kwargs)
                except SensorUnavailableError as exc:
                    why = exc.reasons.get(k, str(exc))
            reasons[k] = why
        lines = ["no power sensor found, energy is unavailable (time-only profiling):"]
        lines += [f"  {k}: {v}" for k, v in reasons.items()]
        lines.append("For the simulated Orin AGX twin use device 'sim:orin-agx'.")
        return EmptySensor("\n".join(lines), reasons)
    why = _why(kind, arg, root, kwargs)
    if why is None:
        try:
            return _make(kind, arg, root, clock_ns, kwargs)
        except SensorUnavailableError as exc:
            why = exc.reasons.get(kind, str(exc))
    if strict:
        raise SensorUnavailableError(f"power sensor {device!r} unavailable: {why}", {kind: why})
    return EmptySensor(f"power sensor {device!r} unavailable: {why}", {kind: why})


def available_sensors(*, root: str | os.PathLike[str] = "/", **kwargs: Any) -> dict[str, str | None]:
    """``{backend: None if it would work here, else why not}`` for every backend, in auto-detection order
    (then ``sim`` and ``none``, which are never auto-selected)."""
    out = {k: _why(k, "", root, kwargs) for k in AUTO_ORDER}
    out["sim"] = _why("sim", "", root, kwargs)
    out["none"] = None
    return out


__all__ = ["AUTO_ORDER", "SENSORS_HELP", "available_sensors", "get_sensor"]
