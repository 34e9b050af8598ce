"""Intel / AMD RAPL energy counters through Linux powercap (``/sys/class/powercap``).

Layout (the same for Intel and for AMD Zen, whose RAPL the kernel's ``intel_rapl`` driver also serves since
Linux 5.8, under the same ``intel-rapl`` names)::

    /sys/class/powercap/intel-rapl:0/{name=package-0, energy_uj, max_energy_range_uj}
    /sys/class/powercap/intel-rapl:0:0/{name=core | uncore | dram, energy_uj, max_energy_range_uj}

Rails are the package domains (``package-N``) and their DRAM domains (``dram-N``); ``core``/``uncore`` are parts of
the package and ``psys``/``intel-rapl-mmio`` would double count, so they are left out. Board total = sum of the
packages and DRAM domains. ``energy_uj`` is a counter in uJ that wraps at ``max_energy_range_uj``: the sensor
unfolds it into a cumulative energy (one wrap between two reads is detected; reads must come at least once per
wrap period, minutes even at full load). Power is the counter difference over the time between two reads.

Since Linux 5.10 ``energy_uj`` is readable by root only (CVE-2020-8694, the PLATYPUS power side channel): the
probe says so, with the fix.
"""

from __future__ import annotations

import glob
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_edge.devices.sensors.base import (
    PowerReading,
    PowerSensor,
    RailBounds,
    SensorError,
    SensorUnavailableError,
)
from lightning_edge.devices.sensors.ina3221 import _read_text

#: no CPU package (or its DRAM) draws more: the largest server CPUs have a 500 W TDP (PL2 bursts stay below 2x);
#: a counter step that implies more is a glitch (a re-read after a driver reload, garbage), not energy
RAPL_MAX_W = 1000.0

POWERCAP_GLOB = "sys/class/powercap/intel-rapl:*"

FIX_PERMISSION = (
    "energy_uj is readable by root only since Linux 5.10 (CVE-2020-8694, PLATYPUS). Run as root, or for this boot "
    "`sudo chmod a+r /sys/class/powercap/intel-rapl:*/energy_uj`, or permanently a udev rule in "
    "/etc/udev/rules.d/99-rapl.rules: "
    "SUBSYSTEM==\"powercap\", KERNEL==\"intel-rapl:*\", RUN+=\"/bin/chmod a+r /sys%p/energy_uj\" "
    "(this re-opens the side channel to local users: only on a machine you trust)"
)


@dataclass
class Domain:
    rail: str  # "package-0", "dram-0"
    path: str  # the energy_uj file
    max_uj: int
    last_uj: int | None = None
    total_uj: int = 0  # unfolded since open

    def read_total_uj(self) -> int:
        with open(self.path, "rb") as f:
            raw = int(f.read())
        if raw < 0 or (self.max_uj and raw > self.max_uj):
            raise ValueError(f"implausible energy_uj {raw} in {self.path} (range 0..{self.max_uj})")
        if self.last_uj is not None:
            delta = raw - self.last_uj
            if delta < 0:  # wrapped around max_energy_range_uj
                delta += self.max_uj
            self.total_uj += delta
        self.last_uj = raw
        return self.total_uj


def _probe(root: str | os.PathLike[str]) -> tuple[list[Domain], str | None]:
    base = Path(root) / "sys/class/powercap"
    dirs = sorted(glob.glob(str(Path(root) / POWERCAP_GLOB)))
    if not dirs:
        return [], (f"no RAPL domains under {base} (intel-rapl:*): not an x86 machine, the intel_rapl driver not "
                    "loaded (`sudo modprobe intel_rapl_msr`), or a VM/container without powercap")
    domains: list[Domain] = []
    for d in dirs:
        parts = os.path.basename(d).split(":")[1:]  # intel-rapl:0 -> [0] ; intel-rapl:0:1 -> [0, 1]
        try:
            name = _read_text(os.path.join(d, "name"))
        except OSError:
            continue
        pkg = parts[0]
        if len(parts) == 1 and name.startswith("package"):
            rail = name if name.startswith("package-") else f"package-{pkg}"
        elif len(parts) == 2 and name == "dram":
            rail = f"dram-{pkg}"
        else:
            continue  # core / uncore (inside the package), psys (would double count)
        f = os.path.join(d, "energy_uj")
        try:
            max_uj = int(_read_text(os.path.join(d, "max_energy_range_uj")))
        except (OSError, ValueError):
            max_uj = 0
        dom = Domain(rail, f, max_uj)
        try:
            dom.read_total_uj()
        except PermissionError:
            return [], f"permission denied reading {f}. {FIX_PERMISSION}"
        except (OSError, ValueError) as exc:
            return [], f"cannot read {f} ({exc})"
        domains.append(dom)
    if not domains:
        return [], f"RAPL under {base} has no package domain"
    domains.sort(key=lambda x: (not x.rail.startswith("package"), x.rail))
    return domains, None


class RaplSensor(PowerSensor):
    """CPU package + DRAM energy through powercap. ``RaplSensor(root="/", clock_ns=time.perf_counter_ns)``.

    An energy counter: readings carry the cumulative ``energy_j`` (and per-domain ``rails_energy_j``);
    ``power_w`` is the mean power since the previous read (``nan`` on the first read).
    """

    name = "rapl"
    is_energy_counter = True
    is_sysfs = True
    #: RAPL updates its counters about every millisecond (Intel: 976 us)
    update_period_s = 0.001

    def __init__(self, root: str | os.PathLike[str] = "/", *, clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        domains, err = _probe(root)
        if err:
            raise SensorUnavailableError(f"rapl: {err}", {"rapl": err})
        self.root = Path(root)
        self._domains = domains
        self.rails = tuple(d.rail for d in domains)
        self.clock_ns = clock_ns
        self.label = f"RAPL (powercap) total = {' + '.join(self.rails)}"
        self.notes = ("CPU package(s) and DRAM only: not the GPU, not the rest of the machine; counters update "
                      "about every 1 ms")
        self._t_last: int | None = None
        self._e_last: dict[str, float] = {}
        self.bounds = {r: RailBounds(RAPL_MAX_W, f"{RAPL_MAX_W:g} W: above any CPU package") for r in self.rails}

    @classmethod
    def why_unavailable(cls, root: str | os.PathLike[str] = "/", **_: Any) -> str | None:
        return _probe(root)[1]

    def read(self) -> PowerReading:
        t = int(self.clock_ns())
        energies: dict[str, float] = {}
        missing: list[str] = []
        for d in self._domains:
            try:
                energies[d.rail] = d.read_total_uj() / 1e6
            except (OSError, ValueError):
                missing.append(d.rail)
        if not energies:
            raise SensorError(f"rapl: no energy counter could be read ({', '.join(missing)})")
        dt = (t - self._t_last) / 1e9 if self._t_last is not None else 0.0
        rails_w: dict[str, float] = {}
        rejected: list[str] = []
        for d in self._domains:
            r = d.rail
            if r not in energies:
                continue
            prev = self._e_last.get(r)
            if prev is None or dt <= 0:
                rails_w[r] = math.nan
                continue
            w = self.check(r, (energies[r] - prev) / dt)
            if not math.isfinite(w):  # an impossible jump: not energy; the counter continues from here
                rejected.append(r)
                d.total_uj = int(round(prev * 1e6))
                energies[r] = prev
            rails_w[r] = w
        self._t_last = t
        self._e_last.update(energies)
        bad = bool(missing or rejected)
        power = sum(rails_w.values()) if not bad else math.nan
        total = sum(energies.values()) if not bad else None
        return PowerReading(t, power, {k: v for k, v in rails_w.items() if math.isfinite(v)}, energy_j=total,
                            partial=bad, missing=tuple(missing), rails_energy_j=energies, rejected=tuple(rejected))

    def read_energy_j(self) -> float:
        """Cumulative package + DRAM energy since the sensor was opened, J."""
        return sum(d.read_total_uj() for d in self._domains) / 1e6


__all__ = ["RaplSensor"]
