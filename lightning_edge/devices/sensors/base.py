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
- ``available``, ``reason``: whether it measures power, and when not why (an :class:`EmptySensor`; ``""`` otherwise);
- ``read() -> PowerReading``;
- ``why_unavailable(**probe) -> str | None``: on the class, probes whether the backend can work here;
  on an :class:`EmptySensor` instance, says why there is no power measurement.

Every rail value is checked before it is believed (:func:`check_rail`, :meth:`PowerSensor.check`): per-rail
bounds from the board's own limits and, where the module is known, a plausibility cap from its rated power; a
rejected value (or one a backend refuses for another reason, :meth:`PowerSensor.reject`) is counted and left out,
and makes the total ``partial``.

Energy-counter sensors (NVML total energy, RAPL) set ``is_energy_counter = True``, fill
:attr:`PowerReading.energy_j` (cumulative, monotonic, wrap-around already unfolded) and implement
:meth:`PowerSensor.read_energy_j`; the sampler then differences the counter instead of integrating power.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lightning_edge.devices.registry import Backend

#: a rail may read slightly below zero at idle (offset of the shunt amplifier); below this it is not noise
NEGATIVE_NOISE_W = 0.05


@dataclass(frozen=True)
class RailBounds:
    """What one rail can physically report: ``max_w`` (W), and when known the bus voltage and current limits
    (``max_v``, ``max_a``). ``source`` says where the numbers come from (the channel's critical-current limit in
    sysfs, its shunt resistor and the chip's full scale, a documented per-board constant...). ``cap_w``: what the rail
    can plausibly draw on this board (the module's rated maximum power with a margin, by the rail's role), usually
    far below what the monitor can report; ``cap_source`` says how it was set."""

    max_w: float
    source: str
    max_v: float | None = None
    max_a: float | None = None
    cap_w: float | None = None
    cap_source: str = ""


def check_rail(power_w: float, bounds: RailBounds | None = None, *, volts: float | None = None,
               amps: float | None = None) -> tuple[float, str | None]:
    """Check one rail's value before it is believed: ``(power_w, None)`` when plausible (a small negative offset
    reads as 0 W), else ``(nan, why)``. The one place every backend validates a rail (see docs/sensors.md):

    - not a finite number: rejected;
    - negative power (below ``-NEGATIVE_NOISE_W``), negative voltage, or negative current beyond the same noise:
      rejected (a Jetson's supply rails never run backwards);
    - above the rail's physical maximum (``bounds.max_w``), or a voltage / current above the chip's limits:
      rejected;
    - above what the rail can plausibly draw on this board (``bounds.cap_w``: the module's rated power with a
      margin, by the rail's role): rejected."""
    if not math.isfinite(power_w) or (volts is not None and not math.isfinite(volts)) or (
            amps is not None and not math.isfinite(amps)):
        return math.nan, "not a finite number"
    if volts is not None:
        if volts < 0:
            return math.nan, f"negative voltage {volts:.4g} V"
        if bounds is not None and bounds.max_v is not None and volts > bounds.max_v:
            return math.nan, f"{volts:.4g} V is above the rail's {bounds.max_v:g} V maximum ({bounds.source})"
    if amps is not None:
        if volts is not None and amps * max(volts, 1.0) < -NEGATIVE_NOISE_W:
            return math.nan, f"negative current {amps:.4g} A"
        if bounds is not None and bounds.max_a is not None and amps > bounds.max_a:
            return math.nan, f"{amps:.4g} A is above the rail's {bounds.max_a:g} A maximum ({bounds.source})"
    if power_w < -NEGATIVE_NOISE_W:
        return math.nan, f"negative power {power_w:.4g} W"
    if bounds is not None and power_w > bounds.max_w:
        return math.nan, f"{power_w:.4g} W is above the rail's physical maximum {bounds.max_w:.4g} W ({bounds.source})"
    if bounds is not None and bounds.cap_w is not None and power_w > bounds.cap_w:
        return math.nan, f"{power_w:.4g} W is above the {bounds.cap_w:.4g} W this rail can draw ({bounds.cap_source})"
    return max(power_w, 0.0), None


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
      cumulative energy in J; ``None`` otherwise;
    - ``rejected``: rails whose value this time failed :func:`check_rail` (negative, above the rail's physical
      maximum or its plausible cap, not a number) or was refused (:meth:`PowerSensor.reject`): absent from
      ``rails_w``, never summed; a rejected rail of the total makes it
      ``partial``. With no valid rail of the total, ``power_w`` is ``nan`` (nothing to call measured).
    """

    t_ns: int
    power_w: float
    rails_w: dict[str, float] = field(default_factory=dict)
    energy_j: float | None = None
    partial: bool = False
    missing: tuple[str, ...] = ()
    rails_energy_j: dict[str, float] | None = None
    rejected: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """True when the total is a finite number formed from every rail it needs (none missing or rejected)."""
        return math.isfinite(self.power_w) and not self.partial

    @property
    def quality(self) -> str:
        """``ok``, ``partial`` (the total misses a rail: missing or rejected) or ``invalid`` (no total at all)."""
        if not math.isfinite(self.power_w) and self.energy_j is None:
            return "invalid"
        return "partial" if self.partial else "ok"


class PowerSensor(Backend, ABC):
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
    #: whether a reading's ``t_ns`` is when the hardware sampled it (jtop), not the time of the read
    dated_readings: ClassVar[bool] = False

    label: str = ""
    update_period_s: float = 0.01
    rails: tuple[str, ...] = ()
    #: free-text caveats shown to users (rates, what the total leaves out...)
    notes: str = ""
    #: why there is no power measurement (an :class:`EmptySensor`'s reason); ``""`` for a sensor that measures
    reason: str = ""
    #: per-rail plausibility bounds (:func:`check_rail`), from the board's own limits where it exposes them
    bounds: dict[str, RailBounds] = {}  # noqa: RUF012 - replaced per instance, never mutated
    #: rail values rejected so far by :meth:`check` (and the last reason), for reports
    rejected_count: int = 0
    last_rejection: str | None = None

    def check(self, rail: str, power_w: float, *, volts: float | None = None, amps: float | None = None,
              bounds: RailBounds | None = None) -> float:
        """Validate one rail's value against its bounds (:func:`check_rail`; ``bounds`` for a value with none in
        :attr:`bounds`, such as a total the hardware reports); a rejected value is counted on the sensor and
        returned as ``nan``."""
        w, why = check_rail(power_w, bounds or self.bounds.get(rail), volts=volts, amps=amps)
        return w if why is None else self.reject(rail, why)

    def reject(self, rail: str, why: str) -> float:
        """Refuse one rail's value this time (it failed :func:`check_rail`, or the backend cannot vouch for it: a
        relabelled channel, a sum above the module's cap): counted on the sensor with the reason; returns ``nan``."""
        self.rejected_count += 1
        self.last_rejection = f"{rail}: {why}"
        return math.nan

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
                 clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
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


__all__ = ["NEGATIVE_NOISE_W", "EmptySensor", "PowerReading", "PowerSensor", "RailBounds", "SensorError",
           "SensorUnavailableError", "check_rail"]
