"""Parse ``tegrastats`` logs into a power trace (for :class:`~lightning_edge.devices.sensors.replay.ReplaySensor`).

JetPack 5/6 lines start with a time stamp and carry one ``NAME <now>mW/<avg>mW`` field per rail::

    11-21-2026 22:40:01 RAM 4711/30536MB (lfb 5961x4MB) SWAP 0/15268MB (cached 0MB) CPU [2%@1728,...]
    EMC_FREQ 0%@2133 GR3D_FREQ 0%@[1300,1300] ... tj@47.937C VDD_GPU_SOC 3186mW/3186mW VDD_CPU_CV 796mW/796mW
    VIN_SYS_5V0 3526mW/3526mW VDDQ_VDD2_1V8AO 503mW/503mW

JetPack 4 prints ``POM_5V_IN 2358/2358`` (mW without the unit) and no time stamp. The instantaneous value
(before the ``/``) is used; the board total follows the same rules as the INA3221 sensor (``VDD_IN`` /
``POM_5V_IN`` when present, else the documented sum, e.g. the four Orin AGX rails).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from lightning_edge.devices.sensors.ina3221 import board_total

_RAIL = re.compile(r"(?<![\w@])([A-Z][A-Z0-9_]*) (\d+)(?:mW)?/(\d+)(?:mW)?(?![\w%])")
_STAMP = re.compile(r"^\s*(\d{2}-\d{2}-\d{4} \d{2}:\d{2}:\d{2})\s")
_NOT_RAILS = {"RAM", "SWAP", "IRAM", "LFB"}


@dataclass(frozen=True)
class TegrastatsTrace:
    """``t_s`` (s from the first line), ``power_w`` (board total), ``rails_w`` ({rail: W array}),
    ``total_desc`` (how the total was formed)."""

    t_s: np.ndarray
    power_w: np.ndarray
    rails_w: dict[str, np.ndarray]
    total_desc: str


def parse_line(line: str) -> tuple[datetime | None, dict[str, float]]:
    """One tegrastats line -> (time stamp or None, {rail: instantaneous W})."""
    m = _STAMP.match(line)
    stamp = datetime.strptime(m.group(1), "%m-%d-%Y %H:%M:%S") if m else None
    rails = {name: int(now) / 1e3 for name, now, _avg in _RAIL.findall(line) if name not in _NOT_RAILS}
    return stamp, rails


def parse_tegrastats(text: str, interval_s: float | None = None) -> TegrastatsTrace:
    """Parse a whole log. Lines without any rail are skipped. Times come from ``interval_s`` when given,
    else from the JetPack 5 time stamps (which must then be strictly increasing: 1 s resolution)."""
    stamps: list[datetime | None] = []
    rows: list[dict[str, float]] = []
    for line in text.splitlines():
        stamp, rails = parse_line(line)
        if rails:
            stamps.append(stamp)
            rows.append(rails)
    if len(rows) < 2:
        raise ValueError("tegrastats log: fewer than 2 lines with power rails (expected e.g. 'VDD_IN 5000mW/5000mW')")
    names = list(rows[0])
    for r in rows[1:]:
        names += [n for n in r if n not in names]
    if interval_s is not None:
        t = np.arange(len(rows), dtype=np.float64) * float(interval_s)
    elif all(s is not None for s in stamps):
        t = np.array([(s - stamps[0]).total_seconds() for s in stamps])  # type: ignore[operator]
        if np.any(np.diff(t) <= 0):
            raise ValueError("tegrastats time stamps have 1 s resolution and repeat: pass interval_s= (the "
                             "--interval tegrastats ran with, in s)")
    else:
        raise ValueError("this tegrastats log has no time stamps (JetPack 4): pass interval_s= (its --interval, s)")
    rails_w = {n: np.array([r.get(n, np.nan) for r in rows]) for n in names}
    parts, _board, desc = board_total(names)
    power = np.sum([rails_w[p] for p in parts], axis=0)
    return TegrastatsTrace(t, power, rails_w, desc)


__all__ = ["TegrastatsTrace", "parse_line", "parse_tegrastats"]
