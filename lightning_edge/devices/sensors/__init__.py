"""Power sensors: one interface (:class:`PowerSensor`), several backends, each saying why it is unavailable.

==================  ===================================================================  ======================
backend             class                                                                default rate
==================  ===================================================================  ======================
``jetson``          :class:`INA3221Sensor`: Jetson INA3221 rails straight from sysfs      chip update (>=100 Hz)
``jtop``            :class:`JtopSensor`: jetson-stats service (slow: about 1 Hz)          1 Hz
``nvml[:INDEX]``    :class:`NvmlSensor`: GPU total-energy counter, else power polling     50 Hz / 10 Hz
``rapl``            :class:`RaplSensor`: CPU package + DRAM energy counters (powercap)    1 kHz
``sim:orin-agx``    the twin's ``SimPowerSensor`` (simulated, never auto-selected)        100 Hz
``none``            :class:`EmptySensor`: time-only profiling, says why no energy         -
==================  ===================================================================  ======================

:func:`get_sensor` picks one (``"auto"``: jetson > jtop > nvml > rapl > none); :func:`available_sensors` says
why each is or is not usable here. :class:`ReplaySensor` plays back a recorded trace (CSV, npz, tegrastats log).

See docs/sensors.md.
"""

from __future__ import annotations

from lightning_edge.devices.sensors.base import (
    EmptySensor,
    PowerReading,
    PowerSensor,
    SensorError,
    SensorUnavailableError,
)
from lightning_edge.devices.sensors.detect import SENSORS_HELP, available_sensors, get_sensor
from lightning_edge.devices.sensors.ina3221 import INA3221Sensor
from lightning_edge.devices.sensors.jtop import JtopSensor
from lightning_edge.devices.sensors.nvml import NvmlSensor
from lightning_edge.devices.sensors.rapl import RaplSensor
from lightning_edge.devices.sensors.replay import ReplaySensor
from lightning_edge.devices.sensors.tegrastats import parse_tegrastats

__all__ = [
    "SENSORS_HELP",
    "EmptySensor",
    "INA3221Sensor",
    "JtopSensor",
    "NvmlSensor",
    "PowerReading",
    "PowerSensor",
    "RaplSensor",
    "ReplaySensor",
    "SensorError",
    "SensorUnavailableError",
    "available_sensors",
    "get_sensor",
    "parse_tegrastats",
]
