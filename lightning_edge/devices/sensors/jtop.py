"""jetson-stats (``jtop``) as a power backend, for boards where the sysfs files cannot be read directly.

jtop reads the same INA3221 files through a root service (``/run/jtop.sock``, group ``jtop``), at its own
interval (1 s by default). That is fine for whole epochs and far too slow for per-layer energy: prefer the
``jetson`` (INA3221 sysfs) sensor, which reads at 100 Hz and more. jetson-stats 4.x reports
``jetson.power = {"rail": {NAME: {"power": mW, "volt": mV, "curr": mA, ...}}, "tot": {"power": mW, ...}}``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning_edge.devices.sensors.base import PowerReading, PowerSensor, SensorError, SensorUnavailableError

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


class JtopSensor(PowerSensor):
    """Power through jetson-stats. ``JtopSensor(interval_s=1.0, root="/", jtop_module=None, clock_ns=...)``;
    ``jtop_module`` is the ``jtop`` module (injectable). Slow: see :data:`SLOW_NOTE`."""

    name = "jtop"

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, *, root: str | os.PathLike[str] = "/",
                 jtop_module: Any = None, clock_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        reason = _probe(root, jtop_module)
        if reason:
            raise SensorUnavailableError(f"jtop: {reason}", {"jtop": reason})
        mod = jtop_module or _import_jtop()
        try:
            self._jetson = mod.jtop(interval=interval_s)
            self._jetson.start()
            power = self._jetson.power
        except Exception as exc:  # noqa: BLE001 - JtopException: service version mismatch, socket refused...
            raise SensorUnavailableError(f"jtop: could not connect to the jtop service ({exc})",
                                         {"jtop": f"could not connect ({exc})"}) from exc
        self.update_period_s = float(interval_s)
        self.clock_ns = clock_ns
        self.rails = tuple((power or {}).get("rail", {}))
        tot = (power or {}).get("tot", {})
        self.label = f"jetson-stats (jtop) total = {tot.get('name', 'sum of rails')}, every {interval_s:g} s"
        self.notes = SLOW_NOTE

    @classmethod
    def why_unavailable(cls, root: str | os.PathLike[str] = "/", jtop_module: Any = None, **_: Any) -> str | None:
        return _probe(root, jtop_module)

    def read(self) -> PowerReading:
        t = int(self.clock_ns())
        try:
            if not self._jetson.ok():
                raise SensorError("jtop: the service stopped answering")
            power = self._jetson.power
        except SensorError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise SensorError(f"jtop: read failed ({exc})") from exc
        rails: dict[str, float] = {}
        missing: list[str] = []
        for name in self.rails:
            info = power.get("rail", {}).get(name)
            mw = info.get("power") if isinstance(info, dict) and info.get("online", True) else None
            if isinstance(mw, (int, float)) and math.isfinite(mw):
                rails[name] = mw / 1e3
            else:
                missing.append(name)
        tot = power.get("tot", {}).get("power")
        total = tot / 1e3 if isinstance(tot, (int, float)) else math.nan
        return PowerReading(t, total, rails, partial=not math.isfinite(total), missing=tuple(missing))

    def close(self) -> None:
        j, self._jetson = getattr(self, "_jetson", None), None
        if j is not None:
            try:
                j.close()
            except Exception:  # noqa: BLE001
                pass


__all__ = ["JtopSensor", "SLOW_NOTE"]
