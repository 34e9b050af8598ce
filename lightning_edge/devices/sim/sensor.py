"""The twin's power sensor: reads the simulated board's instantaneous power, rail by rail.

``SimPowerSensor(live, update_period_s=0.01)`` samples the live simulated board's
:meth:`~lightning_edge.devices.sim.live.LiveTwin.power_now` (static power when idle, the running workload's power
while ``live.running(...)``, with the 2-3 s settling after a change and seeded noise) and splits it into the Orin
AGX's INA3221 rails (1-0040: VDD_GPU_SOC, VDD_CPU_CV, VIN_SYS_5V0; 1-0041: VDDQ_VDD2_1V8AO). The rails sum to the
total, as on the real AGX, which has no VDD_IN rail. Like the INA3221, the value only changes once per
``update_period_s``: reading faster returns the held value with a new timestamp. Everything it reads is
``simulated``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_edge.devices.sensors.base import PowerReading, PowerSensor, RailBounds, SensorUnavailableError
from lightning_edge.devices.sensors.ina3221 import (
    INA3221_MAX_BUS_V,
    INA3221_SHUNT_FULL_SCALE_V,
    JETSON_DEFAULT_SHUNT_OHM,
)

if TYPE_CHECKING:  # pragma: no cover
    from lightning_edge.devices.sim.live import LiveTwin

__all__ = ["SimPowerSensor", "ORIN_AGX_RAILS", "rail_split"]

ORIN_AGX_RAILS: tuple[str, ...] = ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO")

# where each part of the twin's power is drawn from (fractions per rail, each row sums to 1)
_SPLIT = {
    #            GPU_SOC CPU_CV SYS_5V0 VDDQ
    "base":     (0.40, 0.05, 0.45, 0.10),   # SoC always-on, carrier 5 V, DRAM self-refresh
    "cpu":      (0.00, 1.00, 0.00, 0.00),   # online cores idle
    "gpu":      (1.00, 0.00, 0.00, 0.00),   # clocked, idle GPU
    "emc":      (0.45, 0.00, 0.00, 0.55),   # memory controller (SoC) + DRAM background
    "gpu_dyn":  (1.00, 0.00, 0.00, 0.00),   # kernels running
    "cpu_dyn":  (0.00, 1.00, 0.00, 0.00),   # busy cores
    "mem_dyn":  (0.45, 0.00, 0.00, 0.55),   # bytes moved: controller + DRAM I/O
}


def rail_split(parts: dict[str, float], rails: tuple[str, ...] = ORIN_AGX_RAILS) -> dict[str, float]:
    """Split the twin's power parts (``base``, ``cpu``, ``gpu``, ``emc``, ``gpu_dyn``, ``cpu_dyn``, ``mem_dyn``)
    into rails, W."""
    out = np.zeros(len(rails))
    for k, v in parts.items():
        out += np.asarray(_SPLIT[k]) * float(v)
    return dict(zip(rails, out.tolist()))


class SimPowerSensor(PowerSensor):
    """Power sensor of the twin (``source = "simulated"``); see the module docstring.

    ``SimPowerSensor(live, update_period_s=0.01, clock_ns=time.perf_counter_ns)``: ``live``, the board it reads
    (a :class:`~lightning_edge.devices.sim.live.LiveTwin`); ``clock_ns`` stamps the readings (inject a fake one in
    tests, with the live board's ``clock`` driven by the same fake time).
    """

    name = "sim"
    source = "simulated"
    label = "simulated INA3221 rails of the Orin AGX twin (VDD_GPU_SOC+VDD_CPU_CV+VIN_SYS_5V0+VDDQ_VDD2_1V8AO)"
    rails = ORIN_AGX_RAILS
    notes = "simulated: the twin's model of the board, not a measurement"

    def __init__(self, live: LiveTwin, *, update_period_s: float = 0.01,
                 clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        if update_period_s <= 0:
            raise ValueError(f"update_period_s must be > 0 s, got {update_period_s!r}")
        self.live = live
        self.update_period_s = float(update_period_s)
        self.clock_ns = clock_ns
        self._slot: int | None = None
        self._held: PowerReading | None = None
        max_a = INA3221_SHUNT_FULL_SCALE_V / JETSON_DEFAULT_SHUNT_OHM
        self.bounds = {r: RailBounds(INA3221_MAX_BUS_V * max_a, f"the Orin's INA3221 full scale ({max_a:g} A over "
                                     f"its 5 mOhm shunts) at most {INA3221_MAX_BUS_V:g} V") for r in self.rails}

    @classmethod
    def probe(cls, arg: str = "", **kw: Any) -> str | None:
        return None if arg in ("", "orin-agx") else f"no simulated board {arg!r}: the twin plays orin-agx"

    @classmethod
    def open(cls, arg: str = "", **kw: Any) -> SimPowerSensor:
        """``sim:orin-agx``: the sensor of ``live=`` (a live simulated board; default: a new one of the Orin AGX
        twin, :class:`~lightning_edge.devices.sim.live.LiveTwin`)."""
        why = cls.probe(arg)
        if why:
            raise SensorUnavailableError(why, {"sim": why})
        live = kw.get("live")
        if live is None:
            from lightning_edge.devices.sim.live import LiveTwin
            from lightning_edge.twin.model import OrinTwin

            live = LiveTwin(OrinTwin())
        opts = {k: kw[k] for k in ("clock_ns", "update_period_s") if kw.get(k)}
        return cls(live, **opts)

    @property
    def energy_domain(self) -> str:
        """Each live board is its own simulated board (DDP ranks each simulate one: a fleet, not one shared board)."""
        return f"sim:{os.getpid()}:{id(self.live):x}"

    def _parts(self) -> dict[str, float]:
        live = self.live
        mode = live.current_mode()
        st = live.model.physics.static_parts(*np.array(mode.as_tuple(), dtype=float))
        parts = {k: float(v) for k, v in st.items()}
        dyn = live.power_parts_now()
        parts.update({"gpu_dyn": dyn["gpu"], "cpu_dyn": dyn["cpu"], "mem_dyn": dyn["mem"]})
        return parts

    def read(self) -> PowerReading:
        """The latest sample: total board power and the four rails (sum of rails == total)."""
        t_ns = int(self.clock_ns())
        slot = t_ns // max(int(self.update_period_s * 1e9), 1)
        if self._held is not None and slot == self._slot:
            h = self._held
            return PowerReading(t_ns, h.power_w, dict(h.rails_w), partial=h.partial, rejected=h.rejected)
        total = float(self.live.power_now())
        parts = self._parts()
        split = rail_split(parts, self.rails)
        s = sum(split.values())
        scale = total / s if s > 0 else 0.0
        rails_w = {k: v * scale for k, v in split.items()}
        last = self.rails[-1]
        rails_w[last] = total - sum(v for k, v in rails_w.items() if k != last)
        # checked like a live INA3221 (the twin models one): a model fault is rejected, never reported as simulated
        # power; the total is then the rails that passed, labelled partial (nan when none did)
        checked = {k: self.check(k, v) for k, v in rails_w.items()}
        rejected = tuple(k for k, v in checked.items() if not math.isfinite(v))
        if rejected:
            rails_w = {k: v for k, v in checked.items() if math.isfinite(v)}
            total = sum(rails_w.values()) if rails_w else math.nan
        self._slot = slot
        self._held = PowerReading(t_ns, total, rails_w, partial=bool(rejected), rejected=rejected)
        return PowerReading(t_ns, total, dict(rails_w), partial=bool(rejected), rejected=rejected)
