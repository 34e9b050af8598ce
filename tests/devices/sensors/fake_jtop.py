"""A stand-in for the ``jtop`` module of jetson-stats 4.x: ``jtop(interval=...)`` with ``start/ok/close`` and the
``power`` dict shape it really returns (mW / mV / mA), for an Orin AGX (no VDD_IN: jtop's total is the rail sum)."""

from __future__ import annotations

from types import SimpleNamespace


class JtopException(Exception):
    pass


def orin_agx_power(gpu_mw: int = 3186) -> dict:
    rails = {"VDD_GPU_SOC": (4976, gpu_mw), "VDD_CPU_CV": (4984, 796), "VIN_SYS_5V0": (5000, 3526),
             "VDDQ_VDD2_1V8AO": (4992, 503)}
    rail = {n: {"online": True, "type": "INA3221", "status": "ok", "volt": v, "curr": int(p * 1000 / v),
                "warn": 32760, "crit": 32760, "power": p, "avg": p} for n, (v, p) in rails.items()}
    total = sum(p for _, p in rails.values())
    return {"rail": rail, "tot": {"volt": -1, "curr": -1, "power": total, "avg": total, "name": "ALL"}}


def make_module(power: dict | None = None, refuse: bool = False):
    state = SimpleNamespace(power=power or orin_agx_power(), started=False, closed=False, interval=None, alive=True)

    class jtop:  # noqa: N801 - the real class name
        def __init__(self, interval: float = 1.0) -> None:
            state.interval = interval

        def start(self) -> None:
            if refuse:
                raise JtopException("The jtop.service is not active. Please run: sudo systemctl restart jtop.service")
            state.started = True

        def ok(self) -> bool:
            return state.alive

        @property
        def power(self) -> dict:
            return state.power

        def close(self) -> None:
            state.closed = True

    return SimpleNamespace(jtop=jtop, JtopException=JtopException, state=state)
