"""A stand-in for the ``jtop`` module of jetson-stats, behaving as the real client does (jtop/jtop.py, 4.x):

- ``jtop(interval)`` is a thread that receives a sample from the service every ``interval`` seconds; after each one
  it calls the observers registered with ``attach(fn)`` (``fn(jetson)``, in the reader thread);
- ``ok(spin=False)`` **blocks** until the next sample, up to ``interval * 3`` (``TIMEOUT_GAIN``), and returns False
  when none came (the connection is then considered lost for good); ``ok(spin=True)`` never blocks; both raise the
  error the reader thread stored (``JtopException``: "Lost connection with jtop server");
- ``power``: jetson-stats 4.2 and later, ``{"rail": {NAME: {"online", "volt", "curr", "power", "avg", "warn",
  "crit"...}}, "tot": {"power", "avg", "name"}}`` (mW / mV / mA); 4.0-4.1 (``version="4.0"``), a tuple
  ``(total, rails)`` with ``total = {"cur": mW, "avg": mW}`` and ``rails = {NAME: {"cur": mW, "avg": mW}}``.

The test drives it through ``mod.state``: ``power`` (the service's next samples, 4.2 shape), ``alive`` (False: the
service stops sending), ``error`` (an exception the reader thread stores), ``samples`` (how many were sent).
"""

from __future__ import annotations

import copy
import threading
import time
from types import SimpleNamespace

TIMEOUT_GAIN = 3


class JtopException(Exception):
    pass


def orin_agx_power(gpu_mw: int = 3186) -> dict:
    """What jtop 4.2 reports on an Orin AGX (no VDD_IN: its total "ALL" is the sum of the four rails)."""
    rails = {"VDD_GPU_SOC": (4976, gpu_mw), "VDD_CPU_CV": (4984, 796), "VIN_SYS_5V0": (5000, 3526),
             "VDDQ_VDD2_1V8AO": (4992, 503)}
    rail = {n: {"online": True, "type": "INA3221", "status": "ok", "volt": v, "curr": int(p * 1000 / v),
                "warn": 32760, "crit": 32760, "power": p, "avg": p} for n, (v, p) in rails.items()}
    total = sum(p for _, p in rails.values())
    return {"rail": rail, "tot": {"volt": -1, "curr": -1, "power": total, "avg": total, "name": "ALL"}}


def as_v40(power: dict) -> tuple:
    """The 4.2 dict in jetson-stats 4.0-4.1's shape: ``(total, rails)`` with ``cur``/``avg`` in mW."""
    rails = {n: {"cur": r["power"], "avg": r["avg"]} for n, r in power["rail"].items() if r.get("online", True)}
    return {"cur": power["tot"]["power"], "avg": power["tot"]["avg"]}, rails


def make_module(power: dict | None = None, refuse: bool = False, *, version: str = "4.2.0",
                interval_override: float | None = None):
    """A fake ``jtop`` module. ``interval_override``: the service's real interval (another jtop set it)."""
    state = SimpleNamespace(power=power or orin_agx_power(), started=False, closed=False, interval=None,
                            alive=True, error=None, samples=0, instances=[])

    class jtop(threading.Thread):  # noqa: N801 - the real class name
        def __init__(self, interval: float = 1.0) -> None:
            super().__init__(daemon=True)
            state.interval = interval
            state.instances.append(self)
            self._interval = float(interval)
            self._server_interval = float(interval_override or interval)
            self._trigger = threading.Event()
            self._running = False
            self._error = None
            self._observers: set = set()
            self._power = None

        def attach(self, observer) -> None:
            self._observers.add(observer)

        def detach(self, observer) -> None:
            self._observers.discard(observer)

        def _sample(self) -> None:
            p = copy.deepcopy(state.power)
            self._power = as_v40(p) if version.startswith(("4.0", "4.1", "3.")) else p
            state.samples += 1
            self._trigger.set()
            for fn in list(self._observers):
                fn(self)

        def start(self) -> None:
            if refuse:
                raise JtopException("The jtop.service is not active. Please run:\nsudo systemctl restart jtop.service")
            state.started = True
            self._sample()  # the real start() waits for the first value
            self._running = True
            super().start()

        def run(self) -> None:
            while self._running:
                time.sleep(self._server_interval)
                if not self._running:
                    break
                if state.error is not None:
                    self._error = state.error
                    break
                if state.alive:
                    self._sample()

        def ok(self, spin: bool = False) -> bool:
            if not spin and not self._trigger.is_set():
                if not self._trigger.wait(self._interval * TIMEOUT_GAIN):
                    self._running = False
            if self._error is not None:
                raise self._error
            if self._running:
                self._trigger.clear()
            return self._running

        @property
        def interval(self) -> float:
            return self._server_interval

        @property
        def power(self):
            return self._power

        def close(self) -> None:
            state.closed = True
            self._running = False

    return SimpleNamespace(jtop=jtop, JtopException=JtopException, state=state, __version__=version)
