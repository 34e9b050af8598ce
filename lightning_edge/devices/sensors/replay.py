"""Replay a recorded power trace as if it were a live sensor (tests, and users with a tegrastats / jtop log).

::

    sensor = ReplaySensor.from_csv("trace.csv")            # columns t_s, power_w[, one column per rail]
    sensor = ReplaySensor.from_tegrastats("tegrastats.log", interval_s=0.1)
    with PowerSampler(sensor) as sampler: ...

The trace plays at its recorded rate against ``clock_ns`` (injectable): a read at elapsed time ``t`` returns the
last recorded sample at or before ``t`` (a real sensor also holds its value between updates). The clock starts
at the first read (or :meth:`ReplaySensor.restart`). Past the end the trace loops (``loop=True``) or holds its last
value (``finished`` becomes True). Readings are stamped with ``clock_ns``.
"""

from __future__ import annotations

import csv
import io
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightning_edge.devices.sensors.base import PowerReading, PowerSensor, RailBounds
from lightning_edge.devices.sensors.tegrastats import parse_tegrastats

#: a replayed trace may come from any board: no rail or total of one is above this (a corrupt file is)
REPLAY_MAX_W = 10_000.0


class ReplaySensor(PowerSensor):
    """``ReplaySensor(t_s, power_w, rails_w=None, *, clock_ns=time.perf_counter_ns, loop=False, label=None)``.

    ``t_s``: strictly increasing sample times (s, any origin); ``power_w``: board total per sample;
    ``rails_w``: ``{rail: array}`` (same length). ``update_period_s`` is the median recorded sample period.
    """

    name = "replay"

    def __init__(self, t_s: Sequence[float] | np.ndarray, power_w: Sequence[float] | np.ndarray,
                 rails_w: Mapping[str, Sequence[float] | np.ndarray] | None = None, *,
                 clock_ns: Callable[[], int] = time.perf_counter_ns, loop: bool = False,
                 label: str | None = None) -> None:
        t = np.asarray(t_s, dtype=np.float64).ravel()
        p = np.asarray(power_w, dtype=np.float64).ravel()
        if t.size < 2 or t.shape != p.shape:
            raise ValueError(f"a trace needs at least 2 samples and as many times as powers (got {t.size}, {p.size})")
        if np.any(np.diff(t) <= 0):
            raise ValueError("trace times must be strictly increasing")
        self.t_ns = np.round((t - t[0]) * 1e9).astype(np.int64)
        self.power_w = p
        self.rails = tuple(rails_w or ())
        self.rails_w = np.column_stack([np.asarray(rails_w[r], dtype=np.float64) for r in self.rails]) \
            if self.rails else np.zeros((t.size, 0))
        if self.rails_w.shape[0] != t.size:
            raise ValueError("every rail needs one value per sample")
        self.bounds = {r: RailBounds(REPLAY_MAX_W, f"{REPLAY_MAX_W:g} W: above any board's rail") for r in self.rails}
        self._total_bounds = RailBounds(REPLAY_MAX_W * max(1, len(self.rails)), "the sum of the rails' maxima")
        self.period_ns = int(np.median(np.diff(self.t_ns)))
        self.duration_ns = int(self.t_ns[-1]) + self.period_ns  # the last sample lasts one period
        self.update_period_s = self.period_ns / 1e9
        self.clock_ns = clock_ns
        self.loop = loop
        self.label = label or f"replayed trace ({t.size} samples at {1e9 / self.period_ns:g} Hz)"
        self.notes = "a recorded trace played back at its recorded rate"
        self._start_ns: int | None = None
        self.finished = False

    # ------------------------------------------------------------------ construction from files
    @classmethod
    def from_csv(cls, path: str | os.PathLike[str] | io.TextIOBase, **kw: Any) -> ReplaySensor:
        """CSV with a header: ``t_s``, ``power_w`` and optionally one column per rail (W). ``#`` lines are
        comments. Without a ``power_w`` column the total is the sum of the rail columns."""
        text = path.read() if hasattr(path, "read") else Path(path).read_text()
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        rows = list(csv.reader(lines))
        if not rows:
            raise ValueError(f"{path}: empty trace")
        header = [h.strip() for h in rows[0]]
        if "t_s" not in header:
            raise ValueError(f"{path}: the header must name a t_s column (got {header})")
        data = np.array([[float(x) for x in r] for r in rows[1:]], dtype=np.float64)
        cols = {h: data[:, i] for i, h in enumerate(header)}
        rails = {h: v for h, v in cols.items() if h not in ("t_s", "power_w")}
        power = cols["power_w"] if "power_w" in cols else np.sum(list(rails.values()), axis=0)
        kw.setdefault("label", f"replay of {getattr(path, 'name', path)}")
        return cls(cols["t_s"], power, rails, **kw)

    @classmethod
    def from_npz(cls, path: str | os.PathLike[str], **kw: Any) -> ReplaySensor:
        """``.npz`` with ``t_s``, ``power_w`` and optionally ``rails_w`` (n x k) with ``rails`` (k names)."""
        with np.load(path, allow_pickle=False) as z:
            named = "rails_w" in z and "rails" in z
            rails = {str(n): z["rails_w"][:, i] for i, n in enumerate(z["rails"])} if named else {}
            kw.setdefault("label", f"replay of {path}")
            return cls(z["t_s"], z["power_w"], rails, **kw)

    @classmethod
    def from_tegrastats(cls, path: str | os.PathLike[str], interval_s: float | None = None,
                        **kw: Any) -> ReplaySensor:
        """A ``tegrastats`` log (JetPack 5/6 ``VDD_GPU_SOC 3186mW/3186mW`` fields, or JetPack 4 ``VDD_IN 2358/2358``).
        ``interval_s``: the ``--interval`` it ran with (needed when its 1 s time stamps cannot tell)."""
        trace = parse_tegrastats(Path(path).read_text(), interval_s=interval_s)
        kw.setdefault("label", f"replay of tegrastats log {path} (total = {trace.total_desc})")
        return cls(trace.t_s, trace.power_w, trace.rails_w, **kw)

    def save_csv(self, path: str | os.PathLike[str], comment: str | None = None) -> None:
        """Write the trace as CSV (``t_s, power_w, rails...``), readable by :meth:`from_csv`, atomically
        (:func:`lightning_edge._jsonfile.write_file`: a full disk leaves an earlier file whole; a link or a device at
        ``path`` is refused); ``OSError`` naming the path when it cannot be written."""
        import io

        from lightning_edge._jsonfile import write_output

        f = io.StringIO(newline="")
        if comment:
            for line in comment.splitlines():
                f.write(f"# {line}\n")
        w = csv.writer(f)
        w.writerow(["t_s", "power_w", *self.rails])
        for i in range(self.t_ns.size):
            w.writerow([f"{self.t_ns[i] / 1e9:.6f}", f"{self.power_w[i]:.4f}",
                        *(f"{v:.4f}" for v in self.rails_w[i])])
        write_output(path, f.getvalue(), what="power trace")

    # ------------------------------------------------------------------ playback
    def restart(self) -> None:
        """Start playing from the first sample now."""
        self._start_ns = int(self.clock_ns())
        self.finished = False

    def index_at(self, elapsed_ns: int) -> int:
        """The recorded sample that is current ``elapsed_ns`` after the start."""
        if self.loop:
            elapsed_ns %= self.duration_ns
        elif elapsed_ns >= self.duration_ns:
            self.finished = True
        i = int(np.searchsorted(self.t_ns, elapsed_ns, side="right")) - 1
        return min(max(i, 0), self.t_ns.size - 1)

    def read(self) -> PowerReading:
        now = int(self.clock_ns())
        if self._start_ns is None:
            self._start_ns = now
        i = self.index_at(now - self._start_ns)
        rails: dict[str, float] = {}
        missing: list[str] = []
        rejected: list[str] = []
        for k, r in enumerate(self.rails):
            v = float(self.rails_w[i, k])
            if math.isnan(v):
                missing.append(r)  # not in the recording at that time
                continue
            w = self.check(r, v)  # a recording is checked like a live sensor (negative: rejected)
            if math.isfinite(w):
                rails[r] = w
            else:
                rejected.append(r)
        total = float(self.power_w[i])
        if not math.isnan(total):
            total = self.check("total", total, bounds=self._total_bounds)
        if rejected:
            # the recorded total summed a value that was not believed: never that total; the rails that passed,
            # labelled partial (nan when none did)
            total = sum(rails.values()) if rails else math.nan
        return PowerReading(now, total, rails, partial=not math.isfinite(total) or bool(rejected),
                            missing=tuple(missing), rejected=tuple(rejected))

    def energy_j(self, t0_s: float, t1_s: float) -> float:
        """The exact energy of the replayed (held) trace between two elapsed times, J (for tests and checks)."""
        edges = np.append(self.t_ns, self.duration_ns) / 1e9
        lo = np.clip(edges[:-1], t0_s, t1_s)
        hi = np.clip(edges[1:], t0_s, t1_s)
        return float(np.sum(self.power_w * (hi - lo)))


__all__ = ["ReplaySensor"]
