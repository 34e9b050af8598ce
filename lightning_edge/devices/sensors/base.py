"""The one interface every power sensor implements, and the null object used when there is none.

A sensor answers one question, "what is the board drawing right now?"::

    sensor = get_sensor("auto")            # a Jetson's INA3221, jtop, NVML, RAPL, or EmptySensor
    r = sensor.read()                      # PowerReading(t_ns, power_w, rails_w, ...)
    print(r.power_w, r.rails_w)            # board total in W, and every rail by name in W

The API every backend (and the twin's simulated sensor) keeps:

- ``name``: the backend's short name (``"jetson"``, ``"jtop"``, ``"nvml"``, ``"rapl"``, ``"sim"``, ``"none"``);
- ``label``: a human description of what is measured (``"INA3221 (hwmon) VDD_GPU_SOC+VDD_CPU_CV+..."``);
- ``update_period_s``: how often the hardware produces a new value (reading faster only repeats it);
- ``rails``: the rail names, in a fixed order (may be empty);
- ``read() -> PowerReading``;
- ``why_unavailable(**probe) -> str | None``: on the class, probes whether the backend can work here;
  on an :class:`EmptySensor` instance, says why there is no power measurement.

Energy-counter sensors (NVML total energy, RAPL) set ``is_energy_counter = True``, fill
:attr:`PowerReading.energy_j` (cumulative, monotonic, wrap-around already unfolded) and implement
:meth:`PowerSensor.read_energy_j`; the sampler then differences the counter instead of integrating power.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar


class SensorError(RuntimeError):
    """A sensor read failed as a whole (no rail could be read). The sampler counts and skips these."""


class SensorUnavailableError(SensorError):
    """An explicitly requested sensor backend cannot work here; ``reasons`` maps backend -> why not."""

    def __init__(self, message: str, reasons: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.reasons: dict[str, str] = dict(reasons or {})


@dataclass(frozen=True)
class PowerReading:
    """One reading of a power sensor.

    - ``t_ns``: when it was taken, on the sensor's clock (``time.perf_counter_ns`` unless injected);
    - ``power_w``: the board total in W (``nan`` when it could not be formed at all);
    - ``rails_w``: every rail by name in W (a rail that could not be read this time is absent from the dict
      and listed in ``missing``);
    - ``energy_j``: for energy-counter sensors, the cumulative energy in J since the sensor was opened
      (monotonic, counter wrap-around unfolded); ``None`` for power sensors;
    - ``partial``: True when the total misses at least one rail that normally contributes to it;
    - ``missing``: names of the rails that could not be read this time;
    - ``rails_energy_j``: for energy-counter sensors with several domains (RAPL package/DRAM), each domain's
      cumulative energy in J; ``None`` otherwise.
    """

    t_ns: int
    power_w: float
    rails_w: dict[str, float] = field(default_factory=dict)
    energy_j: float | None = None
    partial: bool = False
    missing: tuple[str, ...] = ()
    rails_energy_j: dict[str, float] | None = None

    @property
    def ok(self) -> bool:
        """True when the total is a finite number and nothing is missing."""
        return math.isfinite(self.power_w) and not self.partial


class PowerSensor(ABC):
    """Base class of power sensors. Subclasses set ``name``/``label``/``update_period_s``/``rails``
    and implement :meth:`read`; probing is a classmethod :meth:`why_unavailable`.
    """

    #: backend short name, as accepted by :func:`~lightning_edge.devices.sensors.get_sensor`
    name: ClassVar[str] = "sensor"
    #: how the numbers are obtained: ``measured`` (hardware) or ``simulated`` (the twin)
    source: ClassVar[str] = "measured"
    #: True for sensors whose native output is a cumulative energy counter
    is_energy_counter: ClassVar[bool] = False
    #: whether reads are cheap sysfs-style reads (the sampler then samples at least 100 Hz)
    is_sysfs: ClassVar[bool] = False

    label: str = ""
    update_period_s: float = 0.01
    rails: tuple[str, ...] = ()
    #: free-text caveats shown to users (rates, what the total leaves out...)
    notes: str = ""

    @abstractmethod
    def read(self) -> PowerReading:
        """Read the sensor now. Never raises for one bad rail (it is marked missing); raises
        :class:`SensorError` only when nothing at all could be read."""

    def read_energy_j(self) -> float:
        """Cumulative energy in J (energy-counter sensors only)."""
        raise NotImplementedError(f"{type(self).__name__} is a power sensor, not an energy counter")

    @property
    def energy_domain(self) -> str:
        """What this sensor's energy covers, as a key: readers with the same key on one host read the same
        energy. Every DDP rank on a Jetson reads the one board's rails, so a sum over ranks must count that
        board once (``EnergyProfiler`` does). Board- and node-level backends (INA3221, jtop, RAPL): the
        backend's name; per-device backends add the device (``nvml:0``); the twin is one board per instance."""
        return self.name

    @classmethod
    def why_unavailable(cls, **probe: Any) -> str | None:
        """None when this backend can work here, else why not (and how to fix it). Never raises."""
        return None

    @property
    def available(self) -> bool:
        return True

    def close(self) -> None:  # noqa: B027 - an optional hook, deliberately a no-op by default
        """Release handles (files, sockets, libraries). Idempotent."""

    def __enter__(self) -> PowerSensor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}: {self.label or '-'} every {self.update_period_s * 1e3:g} ms>"


class EmptySensor(PowerSensor):
    """The null sensor: time-only profiling keeps working; every read is ``nan`` W.

    ``EmptySensor(reason, reasons=None)``: ``reason`` says why energy is unavailable (and how to fix
    it); ``reasons`` maps each backend that was tried to why it was not usable.
    ``sensor.why_unavailable()`` returns ``reason``.
    """

    name = "none"
    update_period_s = 0.1

    def __init__(self, reason: str = "no power sensor selected", reasons: dict[str, str] | None = None,
                 clock_ns: Any = time.perf_counter_ns) -> None:
        self.reason = str(reason)
        self.reasons: dict[str, str] = dict(reasons or {})
        self.label = "no power sensor"
        self.notes = self.reason
        self._clock_ns = clock_ns
        # an instance attribute shadows the probing classmethod: on this instance it gives the reason
        self.why_unavailable = self._why  # type: ignore[method-assign]

    def _why(self, **_: Any) -> str:
        return self.reason

    @property
    def available(self) -> bool:
        return False

    def read(self) -> PowerReading:
        return PowerReading(int(self._clock_ns()), math.nan, {})

    def __repr__(self) -> str:
        return f"<EmptySensor: {self.reason}>"


__all__ = ["EmptySensor", "PowerReading", "PowerSensor", "SensorError", "SensorUnavailableError"]
