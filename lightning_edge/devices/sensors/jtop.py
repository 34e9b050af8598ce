"""jetson-stats (``jtop``) as a power backend, for boards where the sysfs files cannot be read directly.

jtop reads the same INA3221 files through a root service (``/run/jtop.sock``, group ``jtop``), at its own
interval (1 s by default). That is fine for whole epochs and far too slow for per-layer energy: prefer the
``jetson`` (INA3221 sysfs) sensor, which reads at 100 Hz and more.

Supported: jetson-stats 4.0 and later. 4.2+ reports ``jetson.power = {"rail": {NAME: {"power": mW, "volt": mV,
"curr": mA, ...}}, "tot": {"power": mW, ...}}``; 4.0-4.1 a tuple ``(total, rails)`` with ``{"cur": mW, "avg": mW}``
entries (:func:`parse_power` reads both). The client's ``ok()`` blocks until the next sample (up to 3 intervals):
this sensor never calls it blocking; it keeps the samples jtop's reader thread delivers (``attach``), each dated
at its arrival, and checks every rail value (:func:`~lightning_edge.devices.sensors.base.check_rail`).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning_edge.devices.sensors.base import (
    PowerReading,
    PowerSensor,
    RailBounds,
    SensorError,
    SensorUnavailableError,
)

SOCKET = "run/jtop.sock"
DEFAULT_INTERVAL_S = 1.0
SLOW_NOTE = ("jtop samples about once a second through its service: too coarse for per-layer energy; "
             "read the INA3221 sysfs files directly (device 'jetson') for 100+ Hz")


def _import_jtop() -> Any:
    try:
        import jtop  # jetson-stats
    except ImportError:
        return None
    return jtop


def _probe(root: str | os.PathLike[str], module: Any) -> str | None:
    mod = module or _import_jtop()
    if mod is None:
        return "jetson-stats is not installed (sudo pip3 install -U jetson-stats, or pip install 'lightning-edge[jetson]')"
    sock = Path(root) / SOCKET
    if not sock.exists():
        return f"the jtop service is not running ({sock} missing): `sudo systemctl restart jtop.service`"
    if not os.access(sock, os.R_OK | os.W_OK):
        return (f"no permission on {sock}: add yourself to the jtop group (`sudo usermod -aG jtop $USER`, then log "
                "in again)")
    return None


#: jtop's client gives up on the service after this many intervals without a sample (jtop.TIMEOUT_GAIN); so do we
TIMEOUT_GAIN = 3
#: the INA3221's bus voltage limit (V), for bounds from a rail's ``crit`` current
_MAX_BUS_V = 26.0
_DEFAULT_MAX_A = 0.16384 / 0.005  # full scale over a Jetson's 5 mOhm shunt, when jtop gives no ``crit``


def parse_power(power: Any) -> tuple[dict[str, Any], Any, bool]:
    """``jetson.power`` of any supported jetson-stats -> ``(rails: {name: mW or junk}, total mW or junk, total_is_sum)``.

    - 4.2 and later: ``{"rail": {NAME: {"online", "power", "volt", "curr", "crit"...}}, "tot": {"power", "name"}}``;
      an offline rail is left out; the total is a rail sum when its ``name`` is ``ALL`` (boards without VDD_IN);
    - 4.0-4.1 (and 3.x): a tuple ``(total, rails)``, ``total = {"cur": mW, "avg": mW}``, ``rails = {NAME: {"cur":
      mW, ...}}``; the total is the input rail when the board has one (jtop takes it out of the rails: the total
      then differs from the rails' sum), else the sum.
    """
    if isinstance(power, dict):
        rails = {name: info.get("power") if isinstance(info, dict) and info.get("online", True) else None
                 for name, info in (power.get("rail") or {}).items()}
        tot = power.get("tot") or {}
        return rails, tot.get("power"), str(tot.get("name", "ALL")).upper() == "ALL"
    if isinstance(power, (tuple, list)) and len(power) == 2:
        total, rails_in = power
        rails = {name: (info.get("cur", info.get("power")) if isinstance(info, dict) else None)
                 for name, info in (rails_in or {}).items()}
        tot = total.get("cur", total.get("power")) if isinstance(total, dict) else None
        # jtop took the input rail (VDD_IN, POM_5V_IN) out of the rails when there is one; else it summed them
        nums = [v for v in rails.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        is_sum = True
        if isinstance(tot, (int, float)) and not isinstance(tot, bool) and len(nums) == len(rails) and nums:
            is_sum = abs(float(tot) - float(sum(nums))) <= max(1.0, 0.01 * abs(float(tot)))
        return rails, tot, is_sum
    raise SensorError(f"jtop: unexpected jetson.power {type(power).__name__}: this jetson-stats version is not "
                      "supported (4.0 and later are)")


def _crit_amps(power: Any) -> dict[str, float]:
    out = {}
    if isinstance(power, dict):
        for name, info in (power.get("rail") or {}).items():
            crit = info.get("crit") if isinstance(info, dict) else None
            if isinstance(crit, (int, float)) and math.isfinite(crit) and crit > 0:
                out[name] = crit / 1e3
    return out


class JtopSensor(PowerSensor):
    """Power through jetson-stats 4.0 and later (4.0-4.1's tuple ``power`` and 4.2's dict are both read).
    ``JtopSensor(interval_s=1.0, root="/", jtop_module=None, clock_ns=...)``; ``jtop_module`` is the ``jtop``
    module (injectable). Slow: see :data:`SLOW_NOTE`.

    Reads never block: jtop's reader thread calls us (``attach``) when a sample arrives; we keep it, dated on
    ``clock_ns`` at its arrival, and :meth:`read` returns the newest one (``ok(spin=True)`` only surfaces the
    service's error). No new sample for ``TIMEOUT_GAIN`` intervals is a :class:`SensorError` (the service
    stopped). Readings carry their own time (``dated_readings``): the sampler stores them at that time, once."""

    name = "jtop"
    dated_readings = True

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, *, root: str | os.PathLike[str] = "/",
                 jtop_module: Any = None, clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        reason = _probe(root, jtop_module)
        if reason:
            raise SensorUnavailableError(f"jtop: {reason}", {"jtop": reason})
        mod = jtop_module or _import_jtop()
        self.clock_ns = clock_ns
        self._lock = threading.Lock()
        self._latest: tuple[int, Any] | None = None
        try:
            self._jetson = mod.jtop(interval=interval_s)
            self._jetson.attach(self._on_sample)  # before start(): start() delivers the first sample
            self._jetson.start()
            power = self._jetson.power
        except Exception as exc:  # noqa: BLE001 - JtopException: service version mismatch, socket refused...
            raise SensorUnavailableError(f"jtop: could not connect to the jtop service ({exc})",
                                         {"jtop": f"could not connect ({exc})"}) from exc
        if self._latest is None:  # a client that did not call the observer for the first sample
            self._on_sample(self._jetson)
        served = getattr(self._jetson, "interval", interval_s)
        self.update_period_s = float(served if isinstance(served, (int, float)) and served > 0 else interval_s)
        self.timeout_ns = int(TIMEOUT_GAIN * self.update_period_s * 1e9)
        rails, _, self._total_is_sum = parse_power(power)
        self.rails = tuple(rails)
        crit = _crit_amps(power)
        self.bounds = {n: RailBounds(_MAX_BUS_V * crit.get(n, _DEFAULT_MAX_A),
                                     f"jtop's critical current {crit[n]:g} A at most {_MAX_BUS_V:g} V" if n in crit
                                     else "INA3221 full scale over a 5 mOhm shunt", _MAX_BUS_V,
                                     crit.get(n, _DEFAULT_MAX_A)) for n in self.rails}
        self._total_bounds = RailBounds(sum(b.max_w for b in self.bounds.values()) or 1e3, "the sum of the rails' maxima")
        tot_name = (power or {}).get("tot", {}).get("name", "sum of rails") if isinstance(power, dict) else \
            "input rail or sum of rails"
        self.label = (f"jetson-stats (jtop) total = {tot_name}, every {self.update_period_s:g} s")
        self.notes = SLOW_NOTE

    def _on_sample(self, jetson: Any) -> None:
        """jtop's reader thread, right after a new sample arrived: keep it, dated now."""
        t = int(self.clock_ns())
        try:
            power = jetson.power
        except Exception:  # noqa: BLE001 - a broken sample: the next read says so
            return
        with self._lock:
            self._latest = (t, power)

    @classmethod
    def why_unavailable(cls, root: str | os.PathLike[str] = "/", jtop_module: Any = None, **_: Any) -> str | None:
        return _probe(root, jtop_module)

    def read(self) -> PowerReading:
        try:
            running = self._jetson.ok(spin=True)  # never blocks; raises what the reader thread caught
        except Exception as exc:  # noqa: BLE001
            raise SensorError(f"jtop: the service connection failed ({exc})") from exc
        if not running:
            raise SensorError("jtop: the connection to the jtop service is closed")
        with self._lock:
            latest = self._latest
        now = int(self.clock_ns())
        if latest is None or now - latest[0] > self.timeout_ns:
            age = "ever" if latest is None else f"{(now - latest[0]) / 1e9:.1f} s"
            raise SensorError(f"jtop: no new sample for {age} (the service samples every {self.update_period_s:g} "
                              "s): it stopped answering (`sudo systemctl restart jtop.service`)")
        t, power = latest
        rails_mw, tot_mw, total_is_sum = parse_power(power)
        rails: dict[str, float] = {}
        missing: list[str] = []
        rejected: list[str] = []
        for name in self.rails:
            mw = rails_mw.get(name)
            if mw is None or isinstance(mw, bool) or not isinstance(mw, (int, float)):
                missing.append(name)
                continue
            w = self.check(name, float(mw) / 1e3)
            if math.isfinite(w):
                rails[name] = w
            else:
                rejected.append(name)
        total = math.nan
        if isinstance(tot_mw, (int, float)) and not isinstance(tot_mw, bool):
            total = self.check("total", float(tot_mw) / 1e3, bounds=self._total_bounds)
        lost = bool(missing or rejected)
        if total_is_sum and lost:
            total = sum(rails.values()) if rails else math.nan  # jtop's sum would include the bad rail
        partial = (lost and total_is_sum) or not math.isfinite(total)
        return PowerReading(t, total, rails, partial=partial, missing=tuple(missing), rejected=tuple(rejected))

    def close(self) -> None:
        j, self._jetson = getattr(self, "_jetson", None), None
        if j is not None:
            try:
                j.close()
            except Exception:  # noqa: BLE001
                pass


__all__ = ["JtopSensor", "SLOW_NOTE", "parse_power"]
