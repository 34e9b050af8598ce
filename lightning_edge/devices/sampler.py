"""A background thread that samples a power sensor into a bounded ring buffer, and integrates it.

::

    sensor = get_sensor("auto")
    with PowerSampler(sensor) as sampler:          # default rate: as fast as the sensor updates
        t0 = time.perf_counter_ns(); model(x); t1 = time.perf_counter_ns()
        sampler.wait_for(t1)                       # a sample at or after t1 exists (bounded wait)
        e = sampler.energy_j(t0, t1)               # J, trapezoidal, pro-rata at the interval edges
        p = sampler.mean_power_w(t0, t1)           # W
        s = sampler.samples(t0, t1)                # numpy arrays: s.t_ns, s.power_w, s.rails_w, s.partial
        gpu = sampler.energy_j(t0, t1, rail="VDD_GPU_SOC")
    print(sampler.overhead())                      # its own CPU cost and achieved rate

How energy is obtained: power sensors are integrated with the trapezoidal rule over the samples inside the
interval plus the power *interpolated* at both edges, so an interval shorter than a sample period still gets
its exact pro-rata share of the piecewise-linear power curve (SyNERGY's per-layer mapping of a power trace, with
interpolation instead of whole rectangular strips). Energy-counter sensors (NVML total energy, RAPL) are
differenced instead: the cumulative counter is interpolated at both edges, which is more accurate than
integrating a power that was itself derived from the counter.

Samples are stamped with ``clock_ns`` (``time.perf_counter_ns``: the clock layer timers use) at the midpoint of
the sensor read, or, for a sensor with ``dated_readings`` (jtop), at the time its reading carries (stored once). A read that raises is counted and skipped: the sampler never takes training down. What each reading
was worth is kept beside it (partial: the total missed a rail; rejected rail values; failed reads) and
:meth:`PowerSampler.quality` says it for any interval, so partial energy is labelled partial wherever it is shown. The buffer is
bounded (``capacity`` samples, oldest overwritten); an interval that is not covered by the retained samples (or
extends further than ``hold_s`` past the newest one) gives ``nan``, never a guess.

Gaps: nothing is interpolated across more than ``MAX_GAP_PERIODS`` periods (at least ``MAX_GAP_FLOOR_S``) without a
reading (a stalled read, a run of failed reads). Such a gap is covered only within ``hold_s`` of the readings on each
side, the edge power held there; an interval inside the rest gives ``nan`` (``estimated`` downstream), one that
overlaps it gets the energy of its covered part only and ``quality(...).coverage < 1`` (``partial``). A read that
took longer than the gap is not stored (when, within it, the sensor sampled is unknown): it counts as a failed read.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from lightning_edge.devices.protocols import SensorLike
    from lightning_edge.devices.sensors.base import PowerReading

#: the default rate is the sensor's update rate, clamped to [MIN_SYSFS_RATE_HZ (sysfs sensors only), MAX_RATE_HZ]
MIN_SYSFS_RATE_HZ = 100.0
MAX_RATE_HZ = 1000.0
#: default capacity: this many seconds at the sampling rate (bounded to [4096, 2**20] samples)
DEFAULT_HISTORY_S = 300.0
#: waits up to this long use time.sleep (cheap); longer ones an Event (so stop() is prompt)
_SLEEP_MAX_NS = 20_000_000
#: the longest time without a reading that is still interpolated, in periods (the longer of the sampler's period and
#: the sensor's update period): four, so that no bridged moment lies further than two periods (the default
#: ``hold_s``) from a reading, as at the ends of the trace. Longer gaps (a read that hung, failed reads in a row) are
#: not bridged; a read that itself took longer is not stored
MAX_GAP_PERIODS = 4.0
#: ... and never less than this (s): the sampler is a Python thread, and a loaded machine keeps a runnable one waiting
#: for tens of ms (the GIL, the kernel's scheduler; up to 38 ms seen at 167 Hz on a 2-core VM at load 3.6, nothing
#: stalled). That is not a stalled sensor; with a Jetson's averaging INA3221 (hundreds of ms) four periods are longer
MAX_GAP_FLOOR_S = 0.1


class Samples(NamedTuple):
    """A window of samples, oldest first: ``t_ns`` (int64), ``power_w`` (float64, ``nan`` when the total could not
    be formed), ``rails_w`` (n x len(rails), ``nan`` for a missing rail), ``partial`` (bool: total misses a rail),
    ``energy_j`` (cumulative counter, J; all ``nan`` for power sensors), ``rails`` (column names)."""

    t_ns: np.ndarray
    power_w: np.ndarray
    rails_w: np.ndarray
    partial: np.ndarray
    energy_j: np.ndarray
    rails: tuple[str, ...]

    def rail(self, name: str) -> np.ndarray:
        return self.rails_w[:, self.rails.index(name)]


@dataclass(frozen=True)
class ReadingQuality:
    """How trustworthy the readings behind an interval are (:meth:`PowerSampler.quality`).

    ``samples``: readings stored in the interval; ``partial``: those whose total missed a rail (missing or
    rejected) or had none at all; ``failed``: reads that raised or stalled (nothing stored); ``rejected``: rail values
    that failed the plausibility checks (negative, above a maximum, a relabelled channel); ``missing_rails`` /
    ``rejected_rails``: their names; ``covered_ns`` of ``span_ns``: how much of the interval had readings (within a
    bridged gap or ``hold_s`` of one), :attr:`coverage` the fraction. ``is_partial``: a reading missed a rail of the
    total, a read failed, or part of the interval had no reading; ``trusted``: none of the above happened;
    ``valid``: at least one complete reading."""

    samples: int = 0
    partial: int = 0
    failed: int = 0
    rejected: int = 0
    missing_rails: tuple[str, ...] = ()
    rejected_rails: tuple[str, ...] = ()
    covered_ns: int = 0
    span_ns: int = 0

    @property
    def coverage(self) -> float:
        """The fraction of the interval that had readings (1.0 for an instant that had one, or no interval)."""
        return self.covered_ns / self.span_ns if self.span_ns > 0 else 1.0

    @property
    def is_partial(self) -> bool:
        """A reading missed a rail of the total (missing or rejected), a read failed (the trace is bridged), or
        part of the interval had no reading at all (a gap that is not bridged)."""
        return bool(self.partial or self.failed or self.coverage < 1.0)

    @property
    def trusted(self) -> bool:
        """Every reading complete, no rail value rejected (not even one outside the total), no failed read, and
        readings over the whole interval."""
        return not (self.partial or self.failed or self.rejected or self.coverage < 1.0)

    @property
    def valid(self) -> bool:
        return self.samples - self.partial > 0

    def describe(self) -> str:
        """``"readings cover 60 % of it (12 readings), 3 of 40 readings partial (VDD_CPU_CV missing), 2 rail values
        rejected, 1 read failed"``; ``""`` when every reading was complete."""
        if self.trusted:
            return ""
        parts = []
        if self.coverage < 1.0:
            parts.append(f"readings cover {100 * self.coverage:.0f} % of it ({self.samples} readings; a gap without "
                         "one: the sensor stalled or stopped)")
        if self.partial:
            why = ", ".join(x for x in (
                f"{'/'.join(self.missing_rails)} missing" if self.missing_rails else "",
                f"{'/'.join(self.rejected_rails)} rejected" if self.rejected_rails else "") if x)
            parts.append(f"{self.partial} of {self.samples} readings partial" + (f" ({why})" if why else ""))
        if self.rejected:
            parts.append(f"{self.rejected} rail value(s) rejected (negative, above a maximum, or a relabelled "
                         "channel)")
        if self.failed:
            parts.append(f"{self.failed} read(s) failed")
        return ", ".join(parts)

    def __add__(self, other: ReadingQuality) -> ReadingQuality:
        return ReadingQuality(self.samples + other.samples, self.partial + other.partial,
                              self.failed + other.failed, self.rejected + other.rejected,
                              tuple(dict.fromkeys(self.missing_rails + other.missing_rails)),
                              tuple(dict.fromkeys(self.rejected_rails + other.rejected_rails)),
                              self.covered_ns + other.covered_ns, self.span_ns + other.span_ns)


@dataclass(frozen=True)
class SamplerOverhead:
    """The sampler's own cost: CPU time of its thread over the wall time it ran, and the rate it achieved."""

    cpu_s: float
    wall_s: float
    samples: int
    errors: int
    target_rate_hz: float
    mean_read_s: float

    @property
    def cpu_fraction(self) -> float:
        """CPU time / wall time (fraction of one core)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def cpu_percent(self) -> float:
        return 100.0 * self.cpu_fraction

    @property
    def achieved_rate_hz(self) -> float:
        return self.samples / self.wall_s if self.wall_s > 0 else 0.0

    def __str__(self) -> str:
        return (f"power sampler: {self.cpu_percent:.2f} % of one core, {self.achieved_rate_hz:.0f} Hz achieved "
                f"(target {self.target_rate_hz:.0f} Hz), {self.samples} samples, {self.errors} read errors, "
                f"{self.mean_read_s * 1e6:.0f} us per read")


def default_rate_hz(sensor: SensorLike) -> float:
    """As fast as the sensor updates; at least 100 Hz for sysfs sensors; at most 1 kHz."""
    period = float(sensor.update_period_s or 0.0)
    rate = 1.0 / period if period > 0 else MAX_RATE_HZ
    if sensor.is_sysfs:
        rate = max(rate, MIN_SYSFS_RATE_HZ)
    return min(rate, MAX_RATE_HZ)


class PowerSampler:
    """Background sampler of a :class:`~lightning_edge.devices.sensors.base.PowerSensor`.

    ``PowerSampler(sensor, rate_hz=None, capacity=None, clock_ns=time.perf_counter_ns, hold_s=None, max_gap_s=None)``

    - ``rate_hz``: default :func:`default_rate_hz` (the sensor's update rate, >= 100 Hz for sysfs, <= 1 kHz);
    - ``capacity``: ring-buffer size in samples (default 5 minutes at ``rate_hz``, within [4096, 2**20]);
    - ``clock_ns``: the time stamp source; inject a fake one in tests and drive :meth:`sample_once` by hand;
    - ``hold_s``: how far past the newest sample (or before the oldest) an interval edge may lie and still be
      answered, holding the edge sample's power (default: two sample periods or two sensor update periods);
    - ``max_gap_s``: the longest time without a reading that is interpolated (default :data:`MAX_GAP_PERIODS`
      sample or sensor update periods, at least :data:`MAX_GAP_FLOOR_S`); longer gaps are covered only within
      ``hold_s`` of their ends.

    ``start()`` / ``stop()`` or ``with``; the thread is a daemon. A sensor that is not available
    (:class:`EmptySensor`) starts no thread: every energy is ``nan`` and :attr:`why_no_energy` says why.
    """

    def __init__(self, sensor: SensorLike, rate_hz: float | None = None, capacity: int | None = None,
                 clock_ns: Callable[[], int] = time.perf_counter_ns, hold_s: float | None = None,
                 max_gap_s: float | None = None) -> None:
        self.sensor = sensor
        self.rate_hz = float(rate_hz) if rate_hz else default_rate_hz(sensor)
        if not (self.rate_hz > 0 and math.isfinite(self.rate_hz)):
            raise ValueError(f"rate_hz must be a positive number, got {rate_hz!r}")
        if capacity is None:
            capacity = int(min(max(self.rate_hz * DEFAULT_HISTORY_S, 4096), 2**20))
        if capacity < 2:
            raise ValueError(f"capacity must be at least 2 samples, got {capacity}")
        self.capacity = int(capacity)
        self.clock_ns = clock_ns
        period = 1.0 / self.rate_hz
        upd = float(sensor.update_period_s or 0.0)
        self.hold_ns = int((hold_s if hold_s is not None else 2.0 * max(period, upd)) * 1e9)
        if max_gap_s is None:
            max_gap_s = max(MAX_GAP_PERIODS * max(period, upd), MAX_GAP_FLOOR_S)
        self.max_gap_ns = int(max_gap_s * 1e9)
        self.rails: tuple[str, ...] = tuple(sensor.rails or ())
        self._rail_col = {r: i for i, r in enumerate(self.rails)}
        self.is_energy_counter = bool(sensor.is_energy_counter)
        self._dated = bool(sensor.dated_readings)
        cap, k = self.capacity, len(self.rails)
        self._t = np.zeros(cap, dtype=np.int64)
        self._p = np.full(cap, np.nan)
        self._r = np.full((cap, k), np.nan)
        self._partial = np.zeros(cap, dtype=bool)
        self._nrej = np.zeros(cap, dtype=np.int16)  # rail values rejected in this reading
        self._miss = np.zeros(cap, dtype=np.int64)  # bit i: rail i missing; bit 62: no total at all
        self._rejm = np.zeros(cap, dtype=np.int64)  # bit i: rail i rejected
        self._fail_t: list[int] = []  # when reads raised (nothing stored for them), ascending, at most 2 x capacity
        self.rejected = 0  # rail values rejected over the run
        self._e = np.full(cap, np.nan)
        self._re = np.full((cap, k), np.nan) if self.is_energy_counter else None
        self._n = 0  # samples ever pushed
        self._waiters = 0  # threads in wait_for()
        self._lock = threading.Lock()  # guards the ring
        self._cond = threading.Condition(self._lock)
        self._read_lock = threading.Lock()  # one sensor read at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0
        self.last_error: str | None = None
        self._cpu_ns = 0
        self._wall_ns = 0
        self._wall_start: int | None = None
        self._thread_samples = 0
        self._read_ns_total = 0

    # ------------------------------------------------------------------ lifecycle
    @property
    def energy_available(self) -> bool:
        return bool(self.sensor.available)

    @property
    def why_no_energy(self) -> str | None:
        """None when the sensor measures power, else why energy is unavailable."""
        if self.energy_available:
            return None
        return str(self.sensor.why_unavailable())

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> PowerSampler:
        if self.running or not self.energy_available:
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"power-sampler[{self.sensor.name}]", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def __enter__(self) -> PowerSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        cpu0 = time.thread_time_ns()
        wall0 = time.perf_counter_ns()
        self._wall_start = wall0
        cpu_before = self._cpu_ns
        wall_before = self._wall_ns
        period_ns = int(1e9 / self.rate_hz)
        next_ns = wall0
        try:
            while not self._stop.is_set():
                if self.sample_once(_from_thread=True):
                    self._thread_samples += 1
                now = time.perf_counter_ns()
                self._cpu_ns = cpu_before + time.thread_time_ns() - cpu0
                self._wall_ns = wall_before + now - wall0
                next_ns += period_ns
                delay = next_ns - now
                if delay < -period_ns:  # fell behind (slow read, loaded machine): no burst to catch up
                    next_ns = now
                elif delay > _SLEEP_MAX_NS:
                    self._stop.wait(delay / 1e9)  # long waits (slow sensors) stay interruptible by stop()
                elif delay > 0:
                    time.sleep(delay / 1e9)  # cheaper wake-up than Event.wait at 100 Hz - 1 kHz
        finally:
            self._cpu_ns = cpu_before + time.thread_time_ns() - cpu0
            self._wall_ns = wall_before + time.perf_counter_ns() - wall0
            self._wall_start = None

    # ------------------------------------------------------------------ sampling
    def sample_once(self, _from_thread: bool = False) -> bool:
        """Read the sensor now and store the sample (what the thread does each period). False on a read error."""
        with self._read_lock:
            r0 = time.perf_counter_ns()
            try:
                a = int(self.clock_ns())
                reading = self.sensor.read()
                b = int(self.clock_ns())
                if b - a > self.max_gap_ns and not self._dated:  # a stalled read: when it sampled is unknown
                    raise TimeoutError(f"the read took {(b - a) / 1e9:.3g} s, longer than the "
                                       f"{self.max_gap_ns / 1e9:.3g} s the sampler bridges: not stored")
                if self._dated:  # the sensor dates its readings (jtop: at the sample's arrival): store each once
                    t = int(reading.t_ns)
                    if self._n and t == self._t[(self._n - 1) % self.capacity]:
                        return True
                    self._push(t, reading)
                else:
                    self._push((a + b) // 2, reading)
            except Exception as exc:  # noqa: BLE001 - a sensor must never take training down
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                self._note_failure(int(self.clock_ns()))
                return False
            finally:
                if _from_thread:
                    self._read_ns_total += time.perf_counter_ns() - r0
            return True

    def _push(self, t_ns: int, reading: PowerReading) -> None:
        rails_w = reading.rails_w or {}
        with self._cond:
            n = self._n
            if n and t_ns < self._t[(n - 1) % self.capacity]:
                return  # never store time going backwards
            i = n % self.capacity
            self._t[i] = t_ns
            self._p[i] = float(reading.power_w)
            if self.rails:
                self._r[i] = [rails_w.get(r, math.nan) for r in self.rails]
            rejected = tuple(reading.rejected or ())
            missing = tuple(reading.missing or ())
            e = reading.energy_j
            no_total = not math.isfinite(float(reading.power_w)) and e is None
            self._partial[i] = bool(reading.partial) or no_total
            self._nrej[i] = len(rejected)
            self._miss[i] = self._mask(missing) | ((1 << 62) if no_total else 0)
            self._rejm[i] = self._mask(rejected)
            self.rejected += len(rejected)
            self._e[i] = np.nan if e is None else float(e)
            if self._re is not None:
                rrow = self._re[i]
                rrow[:] = np.nan
                for name, ej in (reading.rails_energy_j or {}).items():
                    c = self._rail_col.get(name)
                    if c is not None:
                        rrow[c] = ej
            self._n = n + 1
            if self._waiters:
                self._cond.notify_all()

    def _mask(self, names: tuple[str, ...]) -> int:
        m = 0
        for n in names:
            c = self._rail_col.get(n)
            m |= (1 << min(c, 61)) if c is not None else (1 << 61)
        return m

    def record(self, t_ns: int, power_w: float, rails_w: dict[str, float] | None = None, *,
               energy_j: float | None = None, partial: bool = False, missing: tuple[str, ...] = (),
               rejected: tuple[str, ...] = ()) -> None:
        """Store a sample taken elsewhere (a replayed trace, a test). Times must not go backwards."""
        from lightning_edge.devices.sensors.base import PowerReading

        self._push(int(t_ns), PowerReading(int(t_ns), float(power_w), dict(rails_w or {}), energy_j, partial,
                                           tuple(missing), None, tuple(rejected)))

    def _note_failure(self, t_ns: int) -> None:
        with self._lock:
            f = self._fail_t
            if f and t_ns < f[-1]:
                t_ns = f[-1]  # kept ascending (bisect)
            f.append(t_ns)
            if len(f) > 2 * self.capacity:
                del f[: self.capacity]

    def record_failure(self, t_ns: int) -> None:
        """Note a read that failed at ``t_ns`` (what :meth:`sample_once` does when the sensor raises)."""
        self.errors += 1
        self._note_failure(int(t_ns))

    def quality(self, t0_ns: int | None = None, t1_ns: int | None = None) -> ReadingQuality:
        """How trustworthy the readings in ``[t0_ns, t1_ns]`` are (all retained ones when omitted): partial
        readings, rejected rail values, failed reads, and how much of the interval had readings (``coverage``: a
        gap longer than ``max_gap_s`` is covered only within ``hold_s`` of its ends). Energy over an interval with
        ``quality(...).is_partial`` is labelled partial (see :func:`~lightning_edge.profiling.attribution.label_of`)."""
        with self._lock:
            near = self._t[self._window(t0_ns, t1_ns, 1)]  # with a neighbour each side: the gaps at the edges
            idx = self._window(t0_ns, t1_ns, 0)
            part = self._partial[idx]
            miss = np.bitwise_or.reduce(self._miss[idx]) if idx.size else 0
            rejm = np.bitwise_or.reduce(self._rejm[idx]) if idx.size else 0
            nrej = int(self._nrej[idx].sum())
            f = self._fail_t
            a = 0 if t0_ns is None else bisect.bisect_left(f, int(t0_ns))
            b = len(f) if t1_ns is None else bisect.bisect_right(f, int(t1_ns))
            failed = max(b - a, 0)

        def names(mask: int) -> tuple[str, ...]:
            out = [r for i, r in enumerate(self.rails) if int(mask) >> min(i, 61) & 1]
            if int(mask) >> 62 & 1:
                out.append("every rail")
            return tuple(dict.fromkeys(out))

        covered = span = 0
        if near.size:
            a = int(near[0]) if t0_ns is None else int(t0_ns)
            b = max(int(near[-1]) if t1_ns is None else int(t1_ns), a + 1)  # an instant: is it covered?
            span = b - a
            covered = int(_covered_ns(near, np.array([a]), np.array([b]), self.hold_ns, self.max_gap_ns)[0])
        elif t0_ns is not None and t1_ns is not None:
            span = max(int(t1_ns) - int(t0_ns), 1)  # no reading retained: nothing covered
        return ReadingQuality(int(idx.size), int(part.sum()), int(failed), nrej, names(miss), names(rejm),
                              covered, span)

    def wait_for(self, t_ns: int, timeout_s: float = 1.0) -> bool:
        """Block until a sample stamped at or after ``t_ns`` exists (so an interval ending at ``t_ns`` can be
        interpolated instead of held); False after ``timeout_s`` or when no thread is sampling."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._waiters += 1
            try:
                while not (self._n and self._t[(self._n - 1) % self.capacity] >= t_ns):
                    left = deadline - time.monotonic()
                    if left <= 0 or not self.running:
                        return False
                    self._cond.wait(min(left, 0.05))
                return True
            finally:
                self._waiters -= 1

    # ------------------------------------------------------------------ snapshots
    def __len__(self) -> int:
        return min(self._n, self.capacity)

    @property
    def n_total(self) -> int:
        """Samples ever stored (including those overwritten)."""
        return self._n

    @property
    def overwritten(self) -> int:
        return max(self._n - self.capacity, 0)

    def _window(self, t0: int | None, t1: int | None, pad: int) -> np.ndarray:
        """Physical indices, oldest first, of the samples in [t0, t1] plus ``pad`` neighbours each side.
        Call with the lock held."""
        n, cap = self._n, self.capacity
        size = min(n, cap)
        if size == 0:
            return np.zeros(0, dtype=np.int64)
        oldest = n % cap if n > cap else 0
        a = self._t[oldest:size] if n > cap else self._t[:size]
        b = self._t[:oldest] if n > cap else self._t[:0]

        def pos(t: int, side: str) -> int:
            if a.size and t <= a[-1]:
                return int(np.searchsorted(a, t, side=side))
            return a.size + int(np.searchsorted(b, t, side=side))

        lo = 0 if t0 is None else pos(int(t0), "left")
        hi = size if t1 is None else pos(int(t1), "right")
        lo, hi = max(lo - pad, 0), min(hi + pad, size)
        return (oldest + np.arange(lo, hi, dtype=np.int64)) % cap

    def samples(self, t0_ns: int | None = None, t1_ns: int | None = None) -> Samples:
        """The retained samples with ``t0_ns <= t <= t1_ns`` (all when omitted), as numpy arrays (copies)."""
        with self._lock:
            idx = self._window(t0_ns, t1_ns, 0)
            return Samples(self._t[idx], self._p[idx], self._r[idx], self._partial[idx], self._e[idx], self.rails)

    def power_at(self, t_ns: int, rail: str | None = None) -> float:
        """Power (W) at ``t_ns``, linearly interpolated between samples (held within ``hold_s`` of the ends and of
        a gap longer than ``max_gap_s``; ``nan`` inside such a gap)."""
        t, p, _ = self._series(t_ns, t_ns, rail, counter=False)
        if t.size == 0 or not self._covered(t, t_ns, t_ns):
            return math.nan
        if t.size == 2 and t[1] - t[0] > self.max_gap_ns:  # in a gap that is not bridged: hold an end, or nothing
            if not _covered_ns(t, np.array([t_ns]), np.array([t_ns + 1]), self.hold_ns, self.max_gap_ns)[0]:
                return math.nan
            return float(p[0] if t_ns - t[0] <= t[1] - t_ns else p[1])
        return float(np.interp(float(t_ns - t[0]), (t - t[0]).astype(np.float64), p))

    def _series(self, t0: int, t1: int, rail: str | None, counter: bool):
        col = None
        if rail is not None:
            if rail not in self._rail_col:
                raise KeyError(f"no rail {rail!r}: this sensor's rails are {', '.join(self.rails) or 'none'}")
            col = self._rail_col[rail]
        with self._lock:
            idx = self._window(t0, t1, 1)
            t = self._t[idx]
            p = self._p[idx] if col is None else self._r[idx, col]
            e = None
            if counter:
                if col is None:
                    e = self._e[idx]
                elif self._re is not None:
                    e = self._re[idx, col]
        if e is not None:  # a counter: only the counter has to be valid (the first power of a counter is nan)
            ok = np.isfinite(e)
            return t[ok], p[ok], e[ok]
        ok = np.isfinite(p)
        return t[ok], p[ok], None

    def _covered(self, t: np.ndarray, t0: int, t1: int) -> bool:
        return bool(t.size) and t0 >= t[0] - self.hold_ns and t1 <= t[-1] + self.hold_ns

    # ------------------------------------------------------------------ energy
    def energy_j(self, t0_ns: int, t1_ns: int, rail: str | None = None) -> float:
        """Energy (J) drawn between ``t0_ns`` and ``t1_ns`` (board total, or one ``rail``); ``nan`` when the
        retained samples do not cover the interval or the sensor is unavailable."""
        t0, t1 = int(t0_ns), int(t1_ns)
        if t1 < t0:
            raise ValueError(f"interval ends before it starts: t0_ns={t0} > t1_ns={t1}")
        if not self.energy_available:
            return math.nan
        return float(self._energies(np.array([t0], dtype=np.int64), np.array([t1], dtype=np.int64), rail)[0])

    def energy_j_intervals(self, t0_ns: Sequence[int] | np.ndarray, t1_ns: Sequence[int] | np.ndarray,
                           rail: str | None = None) -> np.ndarray:
        """:meth:`energy_j` for many intervals at once (vectorised; e.g. every layer of a step)."""
        a = np.asarray(t0_ns, dtype=np.int64).ravel()
        b = np.asarray(t1_ns, dtype=np.int64).ravel()
        if a.shape != b.shape:
            raise ValueError("t0_ns and t1_ns must have the same length")
        out = np.full(a.shape, np.nan)
        if a.size == 0 or not self.energy_available:
            return out
        if np.any(b < a):
            raise ValueError("an interval ends before it starts")
        return self._energies(a, b, rail)

    def _energies(self, a: np.ndarray, b: np.ndarray, rail: str | None) -> np.ndarray:
        """Energy over each ``[a, b]`` (int64 ns); ``nan`` where the readings do not cover it: an edge further than
        ``hold_s`` beyond the retained ones, or no reading at all over it (inside a gap longer than ``max_gap_s``).
        Across such a gap only ``hold_s`` at each end is integrated (the edge power held): a lower bound, which
        ``quality(...).coverage < 1`` labels partial."""
        out = np.full(a.shape, np.nan)
        lo, hi = int(a.min()), int(b.max())
        use_counter = self.is_energy_counter
        t, p, e = self._series(lo, hi, rail, counter=use_counter)
        if use_counter and (e is None or e.size < 2):
            use_counter = False  # no per-rail counter (or too few counter samples): integrate power
            t, p, e = self._series(lo, hi, rail, counter=False)
        if t.size == 0:
            return out
        x = (t - lo).astype(np.float64) / 1e9  # seconds relative to lo: no float64 precision loss on ns stamps
        c = _cumulative_counter(x, p, e) if use_counter else _cumulative_trapezoid(x, p)
        c, gaps = _unbridge(x, p, c, use_counter, self.max_gap_ns / 1e9, self.hold_ns / 1e9)
        ea = _energy_at((a - lo).astype(np.float64) / 1e9, x, p, c, use_counter, gaps)
        eb = _energy_at((b - lo).astype(np.float64) / 1e9, x, p, c, use_counter, gaps)
        ok = (a >= t[0] - self.hold_ns) & (b <= t[-1] + self.hold_ns)
        if gaps is not None:  # no reading at all over it (or at that instant): nothing to integrate
            ok &= _covered_ns(t, a, np.maximum(b, a + 1), self.hold_ns, self.max_gap_ns) > 0
        out[ok] = (eb - ea)[ok]
        return out

    def mean_power_w(self, t0_ns: int, t1_ns: int, rail: str | None = None) -> float:
        """Mean power (W) over the interval: ``energy_j / duration`` (the interpolated power for a zero-length one)."""
        if int(t1_ns) == int(t0_ns):
            return self.power_at(int(t0_ns), rail) if self.energy_available else math.nan
        return self.energy_j(t0_ns, t1_ns, rail) / ((int(t1_ns) - int(t0_ns)) / 1e9)

    def energy_j_by_rail(self, t0_ns: int, t1_ns: int) -> dict[str, float]:
        """``{rail: energy_j}`` for every rail of the sensor."""
        return {r: self.energy_j(t0_ns, t1_ns, rail=r) for r in self.rails}

    def mean_power_w_by_rail(self, t0_ns: int, t1_ns: int) -> dict[str, float]:
        return {r: self.mean_power_w(t0_ns, t1_ns, rail=r) for r in self.rails}

    def partial_fraction(self, t0_ns: int, t1_ns: int) -> float:
        """Share of the samples in the interval whose total missed a rail (0.0 when all were complete)."""
        s = self.samples(t0_ns, t1_ns)
        return float(s.partial.mean()) if s.partial.size else 0.0

    # ------------------------------------------------------------------ cost
    def overhead(self) -> SamplerOverhead:
        """CPU time of the sampler thread (``time.thread_time_ns`` inside it) over the wall time it ran."""
        wall = self._wall_ns
        if self._wall_start is not None and self.running:
            wall = max(wall, time.perf_counter_ns() - self._wall_start)
        n = self._thread_samples
        return SamplerOverhead(
            cpu_s=self._cpu_ns / 1e9,
            wall_s=wall / 1e9,
            samples=n,
            errors=self.errors,
            target_rate_hz=self.rate_hz,
            mean_read_s=(self._read_ns_total / n / 1e9) if n else 0.0,
        )

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return (f"<PowerSampler {self.sensor.name} {self.rate_hz:.0f} Hz {state}: "
                f"{len(self)}/{self.capacity} samples, {self.errors} errors>")


def _cumulative_trapezoid(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    c = np.zeros(x.size)
    if x.size > 1:
        c[1:] = np.cumsum(np.diff(x) * (p[1:] + p[:-1]) / 2.0)
    return c


def _cumulative_counter(x: np.ndarray, p: np.ndarray, e: np.ndarray) -> np.ndarray:
    return e - e[0]  # the counter is the cumulative energy; relative to the window's first sample


def _covered_ns(t: np.ndarray, a: np.ndarray, b: np.ndarray, hold_ns: int, max_gap_ns: int) -> np.ndarray:
    """How many ns of each ``[a, b]`` had readings (at times ``t``, ascending): between two readings at most
    ``max_gap_ns`` apart, or within ``hold_ns`` (at most half the gap) of the readings at the ends of the trace and of
    a longer gap."""
    dx = np.diff(t)
    cut = np.flatnonzero(dx > max_gap_ns)
    h = np.minimum(hold_ns, dx[cut] // 2)
    lo = np.concatenate(([t[0] - hold_ns], t[cut + 1] - h))  # the covered stretches, disjoint and ascending
    hi = np.concatenate((t[cut] + h, [t[-1] + hold_ns]))
    return np.clip(np.minimum(hi[None, :], b[:, None]) - np.maximum(lo[None, :], a[:, None]), 0, None).sum(axis=1)


def _unbridge(x: np.ndarray, p: np.ndarray, c: np.ndarray, counter: bool, max_gap: float, hold: float):
    """Take out of the cumulative energy ``c`` (at the samples ``x``, s) what would be interpolated across gaps
    longer than ``max_gap``: only ``hold`` (at most half the gap) at each end of such a gap counts, at the edge
    power (a counter: the rate of the interval beside it). Returns ``(c, gaps)``; ``gaps`` = (long, h, left, right)
    per interval for :func:`_energy_at`, ``None`` when there is no long gap."""
    dx = np.diff(x)
    long = dx > max_gap
    if not long.any():
        return c, None
    h = np.where(long, np.minimum(hold, dx / 2.0), 0.0)
    inc = np.diff(c)
    if counter:
        rate = np.where(long | (dx <= 0), np.nan, inc / np.where(dx > 0, dx, 1.0))
        left = np.nan_to_num(np.concatenate(([np.nan], rate[:-1])))
        right = np.nan_to_num(np.concatenate((rate[1:], [np.nan])))
    else:
        left, right = p[:-1], p[1:]
    inc = np.where(long, h * (left + right), inc)
    return np.concatenate(([c[0]], c[0] + np.cumsum(inc))), (long, h, left, right)


def _energy_at(q: np.ndarray, x: np.ndarray, p: np.ndarray, c: np.ndarray, counter: bool = False,
               gaps: tuple | None = None) -> np.ndarray:
    """Cumulative energy at query times ``q`` (s): exact integral of the piecewise-linear power (or the linearly
    interpolated counter) between samples; before the first / after the last sample the edge power is held; in a
    gap that is not bridged (``gaps`` from :func:`_unbridge`) the edge power is held ``h`` from each end, and
    nothing counts between."""
    q = np.asarray(q, dtype=np.float64)
    out = np.empty(q.shape)
    if x.size == 1:
        return (q - x[0]) * (0.0 if counter or not np.isfinite(p[0]) else p[0])
    i = np.clip(np.searchsorted(x, q, side="right") - 1, 0, x.size - 2)
    x0, x1 = x[i], x[i + 1]
    dx = x1 - x0
    frac = np.where(dx > 0, (q - x0) / np.where(dx > 0, dx, 1.0), 0.0)
    inside = (q >= x[0]) & (q <= x[-1])
    # trapezoid from x0 to q with the interpolated power at q (exact for piecewise-linear power);
    # for a counter c is itself interpolated linearly, which is the same formula applied to c directly
    pq = p[i] + frac * (p[i + 1] - p[i])
    seg_trap = (q - x0) * (p[i] + pq) / 2.0
    seg_lin = frac * (c[i + 1] - c[i])
    seg = seg_lin if counter else seg_trap
    out[:] = c[i] + seg
    if gaps is not None:
        long, h, left, right = gaps
        g = inside & long[i]
        k = i[g]
        off = q[g] - x[k]
        out[g] = c[k] + left[k] * np.minimum(off, h[k]) + right[k] * np.clip(off - (dx[g] - h[k]), 0.0, None)
    before = q < x[0]
    after = q > x[-1]
    if counter:  # hold the counter's own rate at the ends (none known beside a gap that is not bridged)
        long0, long1 = (bool(gaps[0][0]), bool(gaps[0][-1])) if gaps is not None else (False, False)
        p_first = (c[1] - c[0]) / (x[1] - x[0]) if x[1] > x[0] and not long0 else 0.0
        p_last = (c[-1] - c[-2]) / (x[-1] - x[-2]) if x[-1] > x[-2] and not long1 else 0.0
    else:
        p_first, p_last = p[0], p[-1]
    out[before] = c[0] - (x[0] - q[before]) * p_first
    out[after] = c[-1] + (q[after] - x[-1]) * p_last
    out[~(inside | before | after)] = np.nan
    return out


__all__ = ["MAX_GAP_FLOOR_S", "MAX_GAP_PERIODS", "PowerSampler", "ReadingQuality", "SamplerOverhead", "Samples",
           "default_rate_hz"]
