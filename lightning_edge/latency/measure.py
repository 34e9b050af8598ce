"""Measurements for the latency models: single units (microbenchmarks) timed in a network's context, whole networks
and their layers, and the per-layer times ``EnergyProfiler`` wrote to ``layers.json``.

**In a network's context.** A layer inside a network does not run as it does in a loop of itself: its code, its
weights and its neighbours' data were evicted from the core's caches by the layers between two of its calls, and
its input was just written by the layer before it. Timed in a loop of itself, MobileNetV2's layers at batch 1 add
up to 4.4 ms; the network takes 6.5 ms (the same layers replayed in order outside the network: 6.3 ms). Almost all
of the difference is per call (norms 1.9x, element-wise ops 2.7x, depthwise 1.8x, 1x1 convolutions 1.2x): code
and data the loop keeps in L1/L2. ``time_unit`` therefore times each call alone, after a *context*: a sweep
through twice the L2 cache (the data of the layers around it), a few small ops of other kinds (their code, which
every layer of a network shares and keeps warm), and the producer writing the unit's input. What the context
still misses, a fit measures on whole networks of the zoo (``network_cases``) and removes as a factor on every
layer and a cost per layer call (``UnitLatencyModel.network_calibration``). ``benchmarks/latency_models.py`` reports, per layer class, the time in a
network against the time in this context and in a hot loop.

* one unit: a module (``Conv2d``, ``Linear``) or an op (``torch.relu``, ``torch.cat``, ``torch.bmm`` ...) built on
  the device, each call timed alone after the context (``time_unit``); median of ``repeats`` calls. CPU: the
  clock of ``use_clock`` (``thread``: the thread's CPU time, which leaves out the time the OS gave to other
  processes), its own overhead subtracted. CUDA: events around the call.
* a network: its forward time by ``time_callable`` (median of blocks), its layers' self times by the profiler's
  ``LayerTimer`` (forward hooks), median over steps;
* ``layers.json``: the forward self time (``fwd_ms``) of each layer, joined by name with the layer's shapes from
  the model the user profiled (``describe``).

The CUDA paths are written with synchronisation but have been run on the CPU only in this repository;
``benchmarks/latency_models.py --torch-device cuda`` checks them on a GPU.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_edge.latency.features import LayerDesc, units_of
from lightning_edge.latency.stepwise import WIDTHS, Dim

__all__ = ["clock", "use_clock", "ClassSpec", "SPECS", "cache_sizes", "time_unit", "measure_point", "unit_path",
           "PATHS", "onednn", "build_unit",
           "unit_desc_for", "point_for", "sample_units", "time_network", "time_layers", "training_from_layers_json",
           "Sample", "host_meta", "call_overheads", "loadavg", "effective_llc", "page_faults", "network_page_faults",
           "page_fault_s", "keep_freed_memory", "switches", "preemption_counts", "disturbance", "use_disturbance",
           "SpeedTrack", "use_speed_track", "SPEED_INTERVAL_S", "SPEED_BAND", "SPEED_WAIT_SHARE",
           "SPEED_WAIT_MAX_HZ", "speed_wait_s",
           "disturbance_factor", "feature_map", "NETWORK_CASES", "network_cases", "network_label", "network_name",
           "network_family", "time_networks"]


_CLOCK = {"name": "wall"}


def clock() -> str:
    """The clock CPU timings use: ``"wall"`` (``perf_counter_ns``, default) or ``"thread"``."""
    return _CLOCK["name"]


def use_clock(name: str) -> None:
    """``"wall"``: wall time. ``"thread"``: the calling thread's CPU time (``thread_time_ns``), which leaves out the
    time the OS gave to other processes. Use it only with ``torch.set_num_threads(1)`` (then every op runs in the
    calling thread) to measure on a machine shared with other work; a model fitted on it predicts time on a
    quiet machine. CUDA timings always use CUDA events."""
    import torch

    if name not in ("wall", "thread"):
        raise ValueError(f"clock {name!r}: expected 'wall' or 'thread'")
    if name == "thread" and torch.get_num_threads() != 1:
        raise ValueError("the thread clock needs torch.set_num_threads(1): with more threads ops run on other "
                         "threads whose CPU time it does not see")
    _CLOCK["name"] = name


def _clock_ns():
    import time

    return time.thread_time_ns if _CLOCK["name"] == "thread" else time.perf_counter_ns


def loadavg() -> tuple[float, float, float] | None:
    """The 1, 5 and 15 minute load averages, or None where the OS does not say."""
    try:
        return os.getloadavg()
    except (OSError, AttributeError):
        return None


# ------------------------------------------------------------------------------------------ a busy machine
def switches() -> int | None:
    """Involuntary context switches of the calling thread so far (Linux: the OS took the CPU away to run another
    process), else None. A call during which this count moved was preempted: on the thread clock it pays for the
    caches the other process evicted, on the wall clock for the other process's time slice as well."""
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw)
    except (ImportError, AttributeError, OSError, ValueError):
        return None


#: calls ``time_unit`` timed, and those it rejected as preempted (since the process started)
_PREEMPTED = {"timed": 0, "preempted": 0}


def preemption_counts() -> dict[str, int]:
    """``{"timed": calls, "preempted": calls}``: the unit calls ``time_unit`` timed so far and how many of them the
    OS preempted (rejected; the least of the others counts)."""
    return dict(_PREEMPTED)


#: the disturbance of the machine as it is (``use_disturbance``): ([pass seconds], [factor]); none: quiet
_DISTURBANCE: dict[str, tuple[list[float], list[float]] | None] = {"curve": None}


def use_disturbance(pass_s: Sequence[float] | None, factor: Sequence[float] | None = None) -> None:
    """Set the disturbance curve ``disturbance`` measured (None: none). ``time_unit`` divides a unit that every
    call of which was preempted (a unit longer than the other process's time slices) by it."""
    if not pass_s:
        _DISTURBANCE["curve"] = None
        return
    if factor is None or len(factor) != len(pass_s):
        raise ValueError("use_disturbance: a factor for every pass length")
    _DISTURBANCE["curve"] = ([float(v) for v in pass_s], [float(v) for v in factor])


def disturbance_factor(t: float, pass_s: Sequence[float] | None = None, factor: Sequence[float] | None = None) -> float:
    """The disturbance factor of a pass of ``t`` undisturbed seconds: the curve (``pass_s``, ``factor``; default the
    one ``use_disturbance`` set) interpolated in log time, held at its ends; 1 without a curve."""
    if pass_s is None:
        cur = _DISTURBANCE["curve"]
        if cur is None:
            return 1.0
        pass_s, factor = cur
    if not pass_s or factor is None:
        return 1.0
    pts = sorted(zip(pass_s, factor))
    if t <= pts[0][0]:
        return float(pts[0][1])
    if t >= pts[-1][0]:
        return float(pts[-1][1])
    for (t0, f0), (t1, f1) in zip(pts, pts[1:]):
        if t0 <= t <= t1:
            w = math.log(t / t0) / math.log(t1 / t0) if t1 > t0 else 0.0
            return float(f0 + w * (f1 - f0))
    return float(pts[-1][1])


class _Probe:
    """A network-like chain for ``disturbance``: ``n`` blocks (3x3 convolution, BatchNorm, ReLU on 64 channels of a
    16x16 map), each with weights of its own (6 MB together, more than one core's L2, as a network's), called in
    sequence; a pass continues where the one before ended, so that short and long passes meet the same caches."""

    def __init__(self, device: str, n: int = 40):
        import torch
        from torch import nn

        gen = torch.Generator().manual_seed(0)
        self.blocks = []
        for _ in range(n):
            conv = nn.Conv2d(64, 64, 3, padding=1, bias=False)
            with torch.no_grad():
                conv.weight.copy_(torch.randn(conv.weight.shape, generator=gen) * 0.05)
            self.blocks.append(nn.Sequential(conv, nn.BatchNorm2d(64), nn.ReLU(inplace=True)).to(device).eval())
        self.x = torch.randn(1, 64, 16, 16, generator=gen).to(device)
        self.at = 0

    def run(self, length: int) -> None:
        x = self.x
        for _ in range(length):
            x = self.blocks[self.at](x)
            self.at = (self.at + 1) % len(self.blocks)


def disturbance(device: str = "cpu", lengths: Sequence[int] = (4, 16, 64, 192), rounds: int = 5,
                passes: int = 7, segment: int = 4) -> dict:
    """How much longer a pass of a network takes on the machine as it is than its undisturbed parts add up to,
    both measured as the benchmark measures a network's reference. A probe chain (``_Probe``) is timed in passes of
    each of ``lengths`` blocks, and in segments of ``segment`` blocks that no other process interrupted (calls the
    OS preempted rejected, as ``time_unit`` rejects them): per round the least of ``passes`` passes of each, over
    ``rounds`` interleaved rounds the median. The factor of a pass length is its pass time over as many undisturbed
    segments: about 1 on a quiet machine. With another process on the same CPU every pass longer than the time
    slice is preempted, and after each preemption the pass reads again what that process evicted from the caches:
    here 4-15 % more CPU time for the held-out networks. Returns ``{"pass_s": [...], "factor": [...],
    "preempt_hz": ...}``: the undisturbed pass seconds, the factors, and the preemptions per CPU second. CUDA:
    factor 1 (events time the GPU)."""
    import time

    import torch

    if device.startswith("cuda"):
        return {"pass_s": [], "factor": [], "preempt_hz": 0.0}
    clk = _clock_ns()
    probe = _Probe(device)
    seg_rounds: list[float] = []
    per_len: dict[int, list[float]] = {n: [] for n in lengths}
    sw0, cpu0 = switches(), time.thread_time_ns()
    with torch.inference_mode():
        probe.run(len(probe.blocks))  # warm-up
        for _ in range(max(1, rounds)):
            clean, every = [], []
            for _ in range(4 * passes):
                if len(clean) >= passes:
                    break
                s0 = switches()
                t0 = clk()
                probe.run(segment)
                t = (clk() - t0) * 1e-9
                every.append(t)
                if s0 is None or switches() == s0:
                    clean.append(t)
            seg_rounds.append(min(clean or every))
            for n in lengths:
                best = math.inf
                for _ in range(passes):
                    t0 = clk()
                    probe.run(n)
                    best = min(best, (clk() - t0) * 1e-9)
                per_len[n].append(best)
    sw1, cpu1 = switches(), time.thread_time_ns()
    seg = statistics.median(seg_rounds) / segment
    pass_s = [n * seg for n in lengths]
    factor = [max(0.5, statistics.median(per_len[n]) / (n * seg)) for n in lengths]
    hz = ((sw1 - sw0) / max(1e-9, (cpu1 - cpu0) * 1e-9)) if sw0 is not None and sw1 is not None else 0.0
    return {"pass_s": [round(v, 7) for v in pass_s], "factor": [round(v, 4) for v in factor],
            "preempt_hz": round(hz, 2)}


# ------------------------------------------------------------------------------------------ the machine's speed
#: a fit probes the machine's speed every SPEED_INTERVAL_S seconds (``SpeedTrack``) and corrects a unit or a
#: network timed while the machine ran more than SPEED_BAND slower or faster than usual
SPEED_INTERVAL_S = 2.0
SPEED_BAND = 0.10
#: the share of a fit's budget its tracker may spend waiting out bursts (``SpeedTrack(wait_s=...)``), on a machine
#: whose CPU no other process shares (``speed_wait_s``)
SPEED_WAIT_SHARE = 0.15
#: preemptions per CPU second (``disturbance``) above which another process shares the fit's CPU: about 2 alone,
#: 250 beside the benchmark's loader
SPEED_WAIT_MAX_HZ = 20.0


def speed_wait_s(budget_s: float, preempt_hz: float) -> float:
    """The seconds a fit of ``budget_s`` may wait out bursts: ``SPEED_WAIT_SHARE`` of it, none where another process
    shares the CPU (``preempt_hz`` above ``SPEED_WAIT_MAX_HZ``): that process does not go away, and beside the
    benchmark's loader 60-74 % of the probes lay outside the band; waiting there spent 25-42 s of a 280 s fit, and
    its sweep measured 1460-1603 units instead of 2775-2823."""
    return 0.0 if not (preempt_hz <= SPEED_WAIT_MAX_HZ) else SPEED_WAIT_SHARE * max(0.0, float(budget_s))


class SpeedTrack:
    """The machine's speed through a fit, and the correction of what was timed while it was not its usual one.

    On a shared host the CPU time of the same work changes for seconds to minutes: other virtual machines on the
    core's sibling thread, the shared caches and memory, a frequency change (on a Jetson, the governor's clocks
    and a camera pipeline starting). In one quiet benchmark fit, the two calibration rounds after the units ran
    1.3-1.8 times slower than the round before them, and the model came out 31 % slow; in another, a burst
    during the units made them slow and the calibration's factor 0.83 (``benchmarks/results/latency_models.md``).
    The least of a unit's calls cannot see it: every call of the burst is slow.

    So every ``interval_s`` (at the next unit or network timed) the tracker times a probe: four units as
    ``time_unit`` times a unit (a 3x3, a depthwise and a 1x1 convolution, a linear layer; 0.3 ms of CPU time in
    all, about 6 ms of wall time). The usual speed is the lower quartile of the probes so far (a burst slows; the
    machine's usual speed is its faster one). Where the last two probes both lie more than ``band`` slower than
    usual (one slow probe is not a burst), ``time_unit`` and ``time_network`` divide what they timed on the
    tracker's device by the faster of them over the usual; both faster, by the slower of them: the model
    describes the machine at its usual speed. Nothing is corrected before ``MIN_PROBES`` probes, and a machine
    faster than usual not before nine (until then the lower quartile is the fastest or second fastest probe).
    Within the band nothing is corrected (the probe's own noise on a quiet machine is a few per cent). A steady
    other process (the benchmark's loaded condition) is part of the usual speed, not a burst. A probe that fails or
    returns no positive time ends the tracking (nothing more is corrected; ``summary`` says why): the measurements
    go on uncorrected.

    A burst does not slow every unit alike: in one fit, probes 1.2-1.4 times their usual time went with a grouped
    convolution's small points 2-3 times theirs (the host's other work competes for the caches, which small units
    live in). So where the machine is slow and ``wait_s`` (seconds in all) is not spent, the tracker first waits
    the burst out: it sleeps ``WAIT_STEP_S``, probes again, and measures once a probe is back within the band
    (at most ``WAIT_MAX_S`` a burst, and never past ``wait_until``, the fit's end; a longer burst is corrected as
    above, and not waited for again until a probe is back within the band). Probes taken while waiting are kept
    (``summary``) but do not count towards the usual speed (a long burst would make itself usual).

    Its probe's unit calls are not counted in ``preemption_counts``. ``probe``: a callable returning seconds
    (default: the four units on ``device``); tests give a scripted one."""

    #: probes before anything is corrected
    MIN_PROBES = 3
    #: probes kept for ``summary`` (evenly thinned beyond)
    KEEP_PROBES = 1000
    #: seconds between probes while waiting out a burst, and the longest wait for one burst
    WAIT_STEP_S = 0.5
    WAIT_MAX_S = 15.0

    def __init__(self, device: str = "cpu", interval_s: float = SPEED_INTERVAL_S, band: float = SPEED_BAND,
                 probe: Callable[[], float] | None = None, wait_s: float = 0.0,
                 sleep: Callable[[float], None] | None = None, wait_until: float = math.inf):
        import time

        if not (interval_s > 0) or not (0 <= band < 1) or not (0 <= wait_s < math.inf):
            raise ValueError(f"SpeedTrack: interval_s > 0, 0 <= band < 1 and 0 <= wait_s < inf, got {interval_s!r}, "
                             f"{band!r}, {wait_s!r}")
        self.device, self.interval_s, self.band = device, float(interval_s), float(band)
        self.t0 = time.monotonic()
        self.probes: list[tuple[float, float]] = []    # (seconds since t0, probe seconds)
        self.timed = 0
        self.applied: list[float] = []                 # the factor of each corrected measurement
        self._probe = probe or self._unit_probe(device)
        self._busy = False
        self._next = -math.inf
        self.stopped = ""                              # why the tracking ended early ("" while it runs)
        self.wait_s = float(wait_s)                    # seconds it may wait out bursts, in all
        self.waited_s = 0.0
        self.waits = [0, 0]                            # bursts waited for, and of them those that ended in time
        self._sleep = sleep or time.sleep
        self._usual: list[float] = []                  # the probes not taken while waiting
        self.wait_until = float(wait_until)            # time.monotonic() past which it does not wait
        self._waited_out = False                       # this burst waited for already (until a probe in the band)

    @staticmethod
    def _unit_probe(device: str) -> Callable[[], float]:
        import torch
        from torch import nn

        gen = torch.Generator().manual_seed(1)
        units = [(nn.Conv2d(32, 32, 3, padding=1, bias=False), (1, 32, 16, 16)),
                 (nn.Conv2d(96, 96, 3, padding=1, groups=96, bias=False), (1, 96, 24, 24)),
                 (nn.Conv2d(64, 128, 1, bias=False), (1, 64, 16, 16)), (nn.Linear(256, 256), (8, 256))]
        units = [(m.to(device).eval(), (torch.randn(shape, generator=gen).to(device),)) for m, shape in units]

        mkldnn = torch.backends.mkldnn.enabled   # the probe's paths stay those of its first run (a box measured
                                                  # with oneDNN off, ``measure_point(path="im2col")``, may call it)

        def probe() -> float:
            with onednn(mkldnn):
                return sum(time_unit(m, args, device, repeats=5, warmup=1, min_span_s=0.0) for m, args in units)
        return probe

    def probe(self, waiting: bool = False) -> float:
        """Time the probe now (its units are not corrected) and keep it (``waiting``: not for the usual speed)."""
        import time

        self._busy = True
        counts = dict(_PREEMPTED)
        try:
            s = float(self._probe())
        finally:
            self._busy = False
            _PREEMPTED.update(counts)   # the probe's calls are not the fit's
        now = time.monotonic()
        self.probes.append((now - self.t0, s))
        if not waiting:
            self._usual.append(s)
        self._next = now + self.interval_s
        return s

    def usual_s(self) -> float | None:
        """The probe's usual seconds: the lower quartile of the probes so far (None before ``MIN_PROBES``)."""
        if len(self._usual) < self.MIN_PROBES:
            return None
        v = sorted(self._usual)
        return v[(len(v) - 1) // 4]

    def factor(self) -> float:
        """How much slower than usual the machine runs now (probing it first if ``interval_s`` has passed since
        the last probe): where the last two probes both lie more than ``band`` slower than usual, the faster of
        them over the usual; both faster, the slower of them; else 1. Slow, with ``wait_s`` left: the burst waited
        out first (1 if it ended)."""
        import time

        if self._busy or self.stopped:
            return 1.0
        if time.monotonic() >= self._next and not self._take():
            return 1.0
        f = self._off()
        if f <= 1.0:
            self._waited_out = False
        elif not self._waited_out and self.waited_s < self.wait_s and time.monotonic() < self.wait_until:
            self.waits[0] += 1
            self._waited_out = True
            left = min(self.WAIT_MAX_S, self.wait_s - self.waited_s, self.wait_until - time.monotonic())
            while f > 1.0 and left > 0:
                step = min(self.WAIT_STEP_S, left)
                t = time.monotonic()
                self._sleep(step)
                if not self._take(waiting=True):
                    return 1.0
                spent = max(step, time.monotonic() - t)   # the sleep and the probe
                self.waited_s += spent
                left -= spent
                f = self._off()
            if f <= 1.0:
                self.waits[1] += 1
                self._waited_out = False
        return f

    def _take(self, waiting: bool = False) -> bool:
        """A probe, kept if it is a positive time; else the tracking stops (False)."""
        try:
            s = self.probe(waiting)
        except Exception as e:  # noqa: BLE001 - a probe's failure is not the measurement's
            self.stopped = f"the probe failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            return False
        if not (s > 0 and math.isfinite(s)):
            self.stopped = f"the probe returned {s!r} s, not a positive time"
            return False
        return True

    def _off(self) -> float:
        """The last two probes' factor (``factor``), without probing."""
        usual = self.usual_s()
        if not usual:
            return 1.0
        a, b = (s / usual for _t, s in self.probes[-2:])
        if min(a, b) > 1.0 + self.band:        # both slow: the faster of them
            return min(a, b)
        if max(a, b) < 1.0 - self.band:        # both fast: the slower of them
            return max(a, b)
        return 1.0

    def correct(self, seconds: float, factor: float) -> float:
        """``seconds`` timed at ``factor`` (``factor()`` before the timing), at the usual speed."""
        if self._busy:
            return seconds
        self.timed += 1
        if factor != 1.0:
            self.applied.append(factor)
        return seconds / factor

    def summary(self) -> dict:
        """What a fit records (``fit_cost["speed"]``): the probes (seconds since the start, ms), the usual probe, the
        share of probes outside the band, and the measurements corrected (count, timed, factor range)."""
        usual = self.usual_s()
        step = max(1, math.ceil(len(self.probes) / self.KEEP_PROBES))
        out = {"interval_s": self.interval_s, "band": self.band, "n_probes": len(self.probes),
               "probes": [[round(t, 2), round(s * 1e3, 4)] for t, s in self.probes[::step]],
               "usual_ms": round(usual * 1e3, 4) if usual else None,
               "off_share": (round(sum(abs(s / usual - 1) > self.band for s in self._usual) / len(self._usual), 3)
                             if usual else None),
               "corrected": [len(self.applied), self.timed],
               "waited": {"wait_s": self.wait_s, "waited_s": round(self.waited_s, 2), "bursts": self.waits[0],
                          "ended": self.waits[1]}}
        if self.applied:
            out["factor_range"] = [round(min(self.applied), 3), round(max(self.applied), 3)]
        if self.stopped:
            out["stopped"] = self.stopped
        return out


#: the fit's speed tracker (``use_speed_track``); None: nothing corrected
_SPEED: dict[str, SpeedTrack | None] = {"track": None}


def use_speed_track(track: SpeedTrack | None) -> SpeedTrack | None:
    """Let ``track`` correct what ``time_unit`` and ``time_network`` time from now (None: stop); returns the one it
    replaces. ``LatencyModel.fit`` sets one on a CPU for its measurements and restores the one before."""
    prev = _SPEED["track"]
    _SPEED["track"] = track
    return prev


def _speed_factor(device: str) -> float | None:
    """The tracker's factor now for a measurement on ``device`` (None: not tracked: no tracker, another device)."""
    track = _SPEED["track"]
    return track.factor() if track is not None and track.device == device else None


def _at_usual_speed(seconds: float, factor: float | None) -> float:
    track = _SPEED["track"]
    return track.correct(seconds, factor) if track is not None and factor is not None else seconds


# ------------------------------------------------------------------------------------------ caches
def cache_sizes(device: str = "cpu") -> dict[str, int]:
    """``{"l2": bytes, "llc": bytes}`` of the device: one core's L2 and the last-level cache (CPU: sysfs of cpu0;
    CUDA: the GPU's L2 for both). Unknown sizes fall back to 1 MiB and 32 MiB."""
    if device.startswith("cuda"):
        import torch

        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or 4 << 20
        return {"l2": l2, "llc": l2}
    sizes: dict[int, int] = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for idx in os.listdir(base):
            try:
                with open(f"{base}/{idx}/level") as fh:
                    level = int(fh.read().strip())
                with open(f"{base}/{idx}/type") as fh:
                    kind = fh.read().strip()
                with open(f"{base}/{idx}/size") as fh:
                    s = fh.read().strip()
            except (OSError, ValueError):
                continue
            m = re.match(r"(\d+)([KMG]?)", s)
            if m and kind != "Instruction":
                sizes[level] = int(m.group(1)) * {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}[m.group(2)]
    except OSError:
        pass
    l2 = sizes.get(2) or 1 << 20
    llc = max(sizes.values()) if sizes else 32 << 20
    return {"l2": int(l2), "llc": int(max(llc, l2))}


def effective_llc(device: str = "cpu", nominal: int | None = None) -> int:
    """The last-level cache this process gets, measured: the largest buffer (0.5 MB to twice the nominal size)
    that is read at least at the geometric mean of the in-cache and the in-memory bandwidth. On a shared machine
    it is smaller than the nominal size: other cores (other virtual machines, on a cloud host) use the same cache.
    Here: 12 MB of a nominal 32 MB under load (an AMD EPYC host), 16 MB of a nominal 480 MB (an Intel Xeon host).
    The in-cache rate is the last level's: that of buffers larger than twice the L2. Reads are timed on the
    thread's clock, those another process preempted rejected (``_read_bandwidths``). CUDA: the GPU's L2."""
    import torch

    nominal = nominal or cache_sizes(device)["llc"]
    if device.startswith("cuda"):
        return nominal
    sizes = [1 << 19]
    while sizes[-1] < 2 * nominal:
        sizes.append(sizes[-1] * 2)
    bw = {}
    prev = torch.get_num_threads()
    torch.set_num_threads(1)  # what one core gets (a second thread would wait for a busy core)
    try:
        bw = _read_bandwidths(sizes)
    finally:
        torch.set_num_threads(prev)
    mem = bw[max(bw)]
    # the last level's own bandwidth: buffers larger than twice one core's L2 (on a core with a 2 MB L2 the L2 is
    # read at 4-5 times the L3's rate, and a cut between the L2's and the memory's rate fell at the L2)
    l2 = cache_sizes(device)["l2"]
    beyond = [v for k, v in bw.items() if 2 * l2 <= k <= nominal // 4]
    in_cache = max(beyond) if beyond else max(v for k, v in bw.items() if k <= nominal // 4 or k == sizes[0])
    cut = math.sqrt(in_cache * mem)
    fit = [k for k in sizes if bw[k] >= cut]
    return int(max(fit)) if fit else int(sizes[0])


def _read_bandwidths(sizes: list[int]) -> dict[int, float]:
    """Bytes per ns reading a buffer of each size (``sum``), the best of three reads after a first one, on the
    thread's CPU clock (another process's time slices left out), reads the OS preempted rejected where others
    ran through (after a preemption the buffer is read again from wherever the other process left it)."""
    import time

    import torch

    bw = {}
    with torch.inference_mode():
        for size in sizes:
            buf = torch.ones(size // 4)
            buf.sum()
            best, best_clean = math.inf, math.inf
            for _ in range(3):
                s0 = switches()
                t0 = time.thread_time_ns()
                buf.sum()
                t = time.thread_time_ns() - t0
                best = min(best, t)
                if s0 is not None and switches() == s0:
                    best_clean = min(best_clean, t)
            bw[size] = size / max(best_clean if best_clean < math.inf else best, 1)
            del buf
    return bw


# ------------------------------------------------------------------------------------------ the allocator
def page_faults() -> int | None:
    """Minor page faults of the calling thread so far (Linux), else None."""
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt)
    except (ImportError, AttributeError, OSError, ValueError):
        return None


def network_page_faults(model: Any, inputs: tuple, passes: int = 3, kwargs: dict | None = None) -> int | None:
    """Page faults of one forward pass after two warm-up passes (the median of ``passes``), or None where the OS
    does not count them. Not zero when the allocator hands freed activation memory back to the OS and the next
    pass touches it afresh (glibc: large blocks are mapped and unmapped, the heap's top is trimmed): MobileNetV2
    at batch 8 on 96x96 inputs faults 1600 times a pass, and a BatchNorm that takes 0.6 ms without takes 3.5 ms
    with 1700 of them. The latency models predict the time without: ``page_fault_s`` prices them."""
    import torch

    if page_faults() is None:
        return None
    kwargs = kwargs or {}
    counts = []
    with torch.inference_mode():
        for i in range(2 + max(1, passes)):
            f0 = page_faults()
            model(*inputs, **kwargs)
            if i >= 2:
                counts.append(page_faults() - f0)
    return int(statistics.median(counts))


def keep_freed_memory() -> bool:
    """Tell glibc's allocator to keep freed memory in the process (raise ``M_TRIM_THRESHOLD`` and
    ``M_MMAP_THRESHOLD``, as the environment variables ``MALLOC_TRIM_THRESHOLD_`` and ``MALLOC_MMAP_THRESHOLD_``
    do), so that a unit or a network called again reuses its memory instead of page-faulting on fresh pages.
    Without it, a depthwise convolution on (8, 16, 64, 64) faulted 1000 times a call in a loop of itself and took
    4.3 ms instead of 0.42. It stays set for the process (glibc then keeps its mapping threshold fixed). Returns
    whether it was applied (False off glibc)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim, m_mmap = -1, -3
    ok_trim = bool(mallopt(m_trim, 1 << 30))
    ok_mmap = bool(mallopt(m_mmap, 1 << 30)) or bool(mallopt(m_mmap, 1 << 25))  # glibc caps it at 32 MB
    return ok_trim and ok_mmap


def page_fault_s(device: str = "cpu", mb: int = 32) -> float | None:
    """Seconds one page fault adds (the first write to freshly mapped memory, against a second write), or None
    where the OS does not count them or on a GPU."""
    import time

    import torch

    if device.startswith("cuda") or page_faults() is None:
        return None
    n = (mb << 20) // 4
    with torch.inference_mode():
        x = torch.empty(n)
        f0, t0 = page_faults(), time.thread_time_ns()
        x.fill_(1.0)
        t_first, faults = time.thread_time_ns() - t0, page_faults() - f0
        t0 = time.thread_time_ns()
        x.fill_(2.0)
        t_second = time.thread_time_ns() - t0
    cost = (t_first - t_second) * 1e-9 / max(1, faults)
    return cost if faults >= 16 and cost > 0 else None


# ------------------------------------------------------------------------------------------ the context
class _Context:
    """What runs before each timed call (``time_unit``): a sweep through twice the L2 cache (the data of the layers
    between two calls of this one), then small ops of other kinds (a 3x3 and a 1x1 convolution, a BatchNorm, a
    ReLU, an add, a pool, a linear layer: the code around a layer in a network, which the sweep evicted from the L2
    and which a network keeps warm, every layer running the same dispatch code).

    The order matters at batch 1, where a call takes tens of microseconds: with the ops before the sweep (until
    November 2026) the code was cold too, and the zoo's networks at batch 1 were predicted 0.6-1.05 times their
    passes (MobileNetV2 +50 %, the depthwise-separable held-out network +60-75 %) while at batch 8 they were
    0.93-1.05: no single calibration could correct both. With the code warm, every network was predicted
    0.70-0.96 times its pass (``benchmarks/results/latency_models.md``), a shortfall that ``LatencyModel.fit``'s
    network calibration measures and removes."""

    def __init__(self, device: str):
        import torch
        from torch import nn

        self.device = device
        l2 = cache_sizes(device)["l2"]
        self.evict = torch.zeros(max(1, 2 * l2 // 4), device=device)
        kw = {"device": device}
        x4 = torch.randn(2, 8, 6, 6, **kw)
        self.junk = [(nn.Conv2d(8, 8, 3, padding=1, **kw).eval(), x4), (nn.Conv2d(8, 16, 1, **kw).eval(), x4),
                     (nn.BatchNorm2d(8, **kw).eval(), x4), (nn.ReLU(), x4), (lambda t: t + t, x4),
                     (nn.MaxPool2d(3, 2, 1), x4), (nn.Linear(8, 8, **kw), torch.randn(4, 8, **kw))]
        self.overhead_ns = 0.0
        if not device.startswith("cuda"):
            clk = _clock_ns()
            pairs = []
            for _ in range(201):
                a = clk()
                pairs.append(clk() - a)
            self.overhead_ns = float(statistics.median(pairs))

    def run(self) -> None:
        self.evict.add_(1.0)
        for m, x in self.junk:
            m(x)


_CONTEXTS: dict[tuple[str, str], _Context] = {}


def _context(device: str) -> _Context:
    key = (device, _CLOCK["name"])
    if key not in _CONTEXTS:
        import torch

        with torch.inference_mode():
            _CONTEXTS[key] = _Context(device)
    return _CONTEXTS[key]


def _produce(args: tuple) -> None:
    """The producer writes the unit's floating-point inputs (as the layer before it did)."""
    for a in args:
        if isinstance(a, (list, tuple)):
            _produce(tuple(a))
        elif hasattr(a, "is_floating_point") and a.is_floating_point():
            a.mul_(1.0)


def time_unit(fn: Callable, args: tuple, device: str = "cpu", repeats: int = 7, warmup: int = 2,
              context: bool = True, cold: bool = False, min_span_s: float = 0.02, path: str = "") -> float:
    """Seconds of one call ``fn(*args)`` under ``torch.inference_mode``: the least of ``repeats`` calls, each timed
    alone (on a shared machine the other work slows some calls, even on the thread clock, through the caches and
    memory it shares; the fastest call is the one it disturbed least). A call the OS preempted (``switches``: another
    process ran on this CPU meanwhile and evicted the caches) is rejected and the unit called again, within the
    ``4 x repeats`` calls; a unit none of whose first ``repeats`` calls ran through (longer than the other process's
    time slices) is not called again: it is the least call divided by the disturbance factor of a pass that long
    (``use_disturbance``). ``context``:
    before each call, the network context (``_Context``: a sweep through twice the L2 cache, other ops' code) and
    the producer writing the floating-point inputs; False: a hot loop (what a layer costs when nothing else runs).
    CPU: the ``use_clock`` clock minus its own overhead; CUDA: events around the call. ``cold``: the weights come
    from memory, as in a network larger than the last-level cache: the calls cycle through copies of the module
    whose weights together exceed twice that cache (only for weights of 64 KB or more). ``min_span_s``: a cheap
    unit is called more often (up to 4 x ``repeats``) until its calls span that long, so that its least call is
    not taken from one burst of other work. ``path`` ``"im2col"`` (CPU): oneDNN switched off around each call (not
    around the context or the speed probe), so that PyTorch runs a convolution as im2col and GEMM."""
    import time

    import torch

    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    cuda = device.startswith("cuda")
    if isinstance(fn, _Op):  # an op unit is timed inside a module call, as in a network
        fn = fn.module()
    fns = [fn]
    if cold and hasattr(fn, "parameters"):
        import copy

        wb = sum(t.numel() * t.element_size() for t in [*fn.parameters(), *fn.buffers()])
        if wb >= COLD_MIN_BYTES:
            n = min(64, max(2, math.ceil(2 * cache_sizes(device)["llc"] / wb)))
            fns += [copy.deepcopy(fn) for _ in range(n - 1)]
    speed = _speed_factor(device)   # the machine's speed now (a probe first, where one is due)
    native = path == "im2col" and not cuda
    with torch.inference_mode():
        ctx = _context(device)
        times: list[float] = []
        clean: list[float] = []
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        clk = _clock_ns()
        t_start = time.perf_counter()
        i = -1
        while True:
            i += 1
            done = i - max(0, warmup)
            # enough calls that ran through; or none of `repeats` did (a unit longer than the other process's time
            # slice: calling it 4 x repeats times would not change that, and overran the fit's budget)
            if done >= repeats and (done >= 4 * repeats or ((len(clean) >= repeats or not clean)
                                                            and time.perf_counter() - t_start >= min_span_s)):
                break
            if context:
                ctx.run()
                _produce(args)
            f = fns[i % len(fns)]
            with onednn(False) if native else contextlib.nullcontext():   # the call only, outside its timing
                if cuda:
                    start.record()
                    f(*args)
                    end.record()
                    end.synchronize()
                    t = start.elapsed_time(end) / 1e3
                    preempted = False
                else:
                    s0 = switches()
                    t0 = clk()
                    f(*args)
                    t = max(0.0, (clk() - t0 - ctx.overhead_ns) * 1e-9)
                    preempted = s0 is not None and switches() != s0
            if i >= warmup:
                times.append(t)
                _PREEMPTED["timed"] += 1
                if preempted:
                    _PREEMPTED["preempted"] += 1
                else:
                    clean.append(t)
    if clean:
        return _at_usual_speed(float(min(clean)), speed)
    # every call was preempted (a unit longer than the other process's time slice): as a pass, less its disturbance
    best = float(min(times))
    return _at_usual_speed(best / disturbance_factor(best), speed)


#: weights smaller than this are not read cold (``time_unit(cold=True)``): their read is lost in the call
COLD_MIN_BYTES = 64 << 10


def call_overheads(device: str = "cpu", repeats: int = 15) -> tuple[float, float]:
    """``(module_s, container_s)`` in the network context: what one ``nn.Module`` call adds to the ops it runs
    (``Identity()(x)`` against the bare function), and what a container adds (``Sequential(Identity)`` against
    ``Identity``). The least of three medians."""
    import torch
    from torch import nn

    x = torch.zeros(1, device=device)
    inner, outer = nn.Identity(), nn.Sequential(nn.Identity())

    def bare(t):
        return t

    def best(fn):
        return min(time_unit(fn, (x,), device, repeats, 2) for _ in range(3))

    b = best(bare)
    i = best(inner)
    o = best(outer)
    return max(0.0, i - b), max(0.0, o - i)


# ------------------------------------------------------------------------------------------ classes
LINEAR = (1,)  # output pixels, rows, batches and element counts are iterated over, not mapped onto parallel units


def _squares(lo: int, hi: int) -> tuple[int, ...]:
    return tuple(s * s for s in range(lo, hi + 1))


#: element counts of the op classes: 1 to 32 elements (a classifier's scores, a scalar), then 64 channels of s x s
#: maps
def _elements(lo: int, hi: int) -> tuple[int, ...]:
    return (1, 2, 4, 8, 16, 32) + tuple(64 * s * s for s in range(lo, hi + 1))


@dataclass(frozen=True)
class ClassSpec:
    """A class of the step-wise model: its dimensions (ranges measured) and the representative unit."""

    cls: str
    dims: tuple[Dim, ...]
    what: str
    cold: bool = False      # weights read from memory (``time_unit(cold=True)``), not from the last-level cache
    path: str = ""          # the kernel path its units take (``unit_path``): "" (PyTorch's choice) or one of PATHS


#: step widths tried along a channel dimension: SIMD lanes, micro-kernel tiles and cache blocks are at most 64
#: channels wide; a wider step fitted to a few points over 8..4096 channels made every layer below it as cheap as
#: one channel
CH_WIDTHS = tuple(w for w in WIDTHS if w <= 64)


def _ch(name: str, lo: int, hi: int, ref: int) -> Dim:
    return Dim.range(name, lo, hi, ref, CH_WIDTHS)


#: the kernel paths some classes' units take besides PyTorch's usual one, each measured in boxes of its own
#: (``ClassSpec.path``, ``unit_path``)
PATHS = ("im2col", "ragged", "s2")


def _cb16(dim: Dim, offset: int) -> Dim:
    """``dim`` (depthwise planes) on the values ``offset`` more than a multiple of 16 up to its highest (``offset`` 0:
    the multiples of 16 from 16), the reference the nearest such value."""
    vals = tuple(range(offset or 16, dim.hi + 1, 16))
    return Dim(dim.name, vals, min(vals, key=lambda v: (abs(v - dim.ref), v)), dim.widths)


def _hw(lo: int, hi: int, ref: int) -> Dim:
    """Output pixels per image: the square maps lo x lo .. hi x hi (a layer's map need not be square: its pixel
    count is interpolated)."""
    return Dim("hw", _squares(lo, hi), ref * ref, LINEAR)


_B = Dim.range("b", 1, 8, 1, LINEAR)
_B2 = Dim.range("b", 2, 8, 2, LINEAR)
_B1 = Dim("b", (1,), 1, LINEAR)

#: the step-wise model's classes on a CPU-sized budget (dimension values are what is measured; units beyond them
#: are extrapolated along the generated function and reported as such). Convolutions have the dimensions the
#: device sees: output pixels per image (hw) and images (b) apart, because PyTorch runs a 1x1 convolution at one
#: thread as one GEMM per image (the weights read again for each): batch 8 of 2x2 maps takes 7 times as long as
#: one 5x5 map of the same 32 pixels.
#:
#: Each class has boxes (``class/box``) along the shapes networks use: few channels on large maps, many channels on
#: small ones. A unit is predicted from the smallest box that holds it. Inside a box the function interpolates
#: between the box's corners, and efficiency is not linear in size: over 8..512 channels a small layer got a large
#: one's efficiency, and a corner no network has (1024 depthwise channels on a 64x64 map: 33 ms, 5 times slower per
#: element than its neighbours) bent the whole box.
SPECS: dict[str, ClassSpec] = {
    "conv": ClassSpec("conv", (_ch("f", 8, 512, 128), _ch("c", 3, 512, 128), _hw(4, 32, 8), _B2),
                      "Conv2d 3x3, stride 1, pad 1 on (b, c, s, s), hw = s*s output pixels per image; other kernels "
                      "scale c by kh*kw/9, strides count output pixels"),
    "conv/small": ClassSpec("conv", (_ch("f", 8, 128, 64), _ch("c", 3, 128, 32), _hw(4, 16, 8), _B2),
                            "as conv, channels up to 128, maps from 4x4 to 16x16"),
    "conv/map": ClassSpec("conv", (_ch("f", 8, 128, 64), _ch("c", 3, 128, 32), _hw(16, 64, 32), _B2),
                          "as conv, channels up to 128, maps from 16x16 to 64x64"),
    "conv/px4": ClassSpec("conv", (_ch("f", 8, 2048, 256), _ch("c", 8, 2048, 256), _hw(2, 3, 2), _B2),
                          "as conv on 2x2 and 3x3 maps (fewer pixels than a SIMD row: another kernel)"),
    "conv/px1": ClassSpec("conv", (_ch("f", 8, 2048, 256), _ch("c", 8, 2048, 256), _hw(1, 1, 1), _B2),
                          "as conv on 1x1 maps (only the centre tap works: another path)"),
    "stem": ClassSpec("stem", (_ch("f", 8, 256, 64), Dim("kk", _squares(3, 16), 49, LINEAR), _hw(2, 64, 16), _B),
                      "Conv2d(3, f, k, stride max(2, k//2), pad k//2) (kk = k*k) on (b, 3, .., ..): a network's "
                      "first convolution (at most 4 input channels)"),
    "conv1x1": ClassSpec("conv1x1", (_ch("f", 8, 1024, 256), _ch("c", 8, 1024, 256), _hw(4, 32, 8), _B),
                         "Conv2d 1x1 on (b, c, s, s), hw = s*s output pixels per image"),
    "conv1x1/small": ClassSpec("conv1x1", (_ch("f", 8, 128, 64), _ch("c", 8, 128, 64), _hw(4, 16, 8), _B),
                               "as conv1x1, channels up to 128, maps from 4x4 to 16x16"),
    "conv1x1/map": ClassSpec("conv1x1", (_ch("f", 8, 128, 64), _ch("c", 8, 128, 64), _hw(16, 64, 32), _B),
                             "as conv1x1, channels up to 128, maps from 16x16 to 64x64"),
    "conv1x1/px4": ClassSpec("conv1x1", (_ch("f", 8, 2048, 256), _ch("c", 8, 2048, 256), _hw(2, 3, 2), _B),
                             "as conv1x1 on 2x2 and 3x3 maps: the GEMM has fewer columns than a SIMD row, and one "
                             "such image costs more than a 4x4 map (at one thread, PyTorch's GEMM per image)"),
    "conv1x1/px1": ClassSpec("conv1x1", (_ch("f", 8, 2048, 256), _ch("c", 8, 2048, 256), _hw(1, 1, 1), _B),
                             "as conv1x1 on 1x1 maps (squeeze-excite): a matrix-vector product per image, 15 times "
                             "faster than on 3x3 maps"),
    "dwconv": ClassSpec("dwconv", (_ch("cb", 8, 8192, 256), _hw(2, 32, 8)),
                        "depthwise Conv2d 3x3, pad 1 on (1, cb, s, s): cb = channels x images (each image's channel "
                        "is a plane of its own: 16 channels of 64x64 at batch 8 took 0.394 ms, 128 channels at batch "
                        "1 0.420 ms); other kernels scale hw by kh*kw/9"),
    "dwconv/small": ClassSpec("dwconv", (_ch("cb", 8, 2048, 64), _hw(2, 16, 8)),
                              "as dwconv, planes up to 2048, maps up to 16x16"),
    "dwconv/map": ClassSpec("dwconv", (_ch("cb", 8, 1024, 32), _hw(16, 64, 32)),
                            "as dwconv, planes up to 1024, maps from 16x16 to 64x64"),
    "gconv": ClassSpec("gconv", (Dim("cc", _squares(2, 64), 64, LINEAR), _ch("g", 2, 64, 32), _hw(2, 32, 8), _B),
                       "grouped Conv2d 3x3 (g groups of cg channels in and out, cc = cg*cg: a group's MACs per "
                       "pixel / 9, what its time is linear in) on (b, g*cg, s, s); other shapes map to "
                       "cc = c/g * f/g * kh*kw/9"),
    "linear": ClassSpec("linear", (_ch("f", 8, 4096, 1024), _ch("c", 8, 4096, 1024),
                                   Dim.range("rows", 1, 256, 16, LINEAR)), "Linear(c, f) on (rows, c)"),
    "linear/mid": ClassSpec("linear", (_ch("f", 8, 1024, 256), _ch("c", 8, 1024, 256),
                                       Dim.range("rows", 1, 1024, 64, LINEAR)), "as linear, features up to 1024"),
    "linear/small": ClassSpec("linear", (_ch("f", 8, 256, 64), _ch("c", 8, 256, 64),
                                         Dim.range("rows", 1, 1024, 64, LINEAR)), "as linear, features up to 256"),
    "linear/r1": ClassSpec("linear", (_ch("f", 8, 4096, 1024), _ch("c", 8, 4096, 1024), Dim("rows", (1,), 1, LINEAR)),
                           "as linear on one row (a classifier at batch 1): a matrix-vector product, another kernel "
                           "than 2 rows' GEMM (a line from 1 to 256 rows put 1152->1024 on 1 row 52 % high)"),
    "matmul": ClassSpec("matmul", (_ch("n", 8, 512, 64), _ch("k", 8, 512, 64), Dim.range("m", 1, 512, 64, LINEAR),
                                   Dim.range("batch", 1, 64, 8, LINEAR)),
                        "torch.bmm of (batch, m, k) and (batch, k, n): attention's products"),
    "sdpa": ClassSpec("sdpa", (Dim.range("s", 1, 512, 64, LINEAR), _ch("e", 8, 128, 64),
                               Dim.range("l", 1, 512, 64, LINEAR), Dim.range("batch", 1, 96, 12, LINEAR)),
                      "F.scaled_dot_product_attention of (batch, l, e) queries and (batch, s, e) keys and values "
                      "(queries and keys apart: the work is their product)"),
}
#: the op classes: one dimension, the elements the op produces (reads, for a reduction; output elements times
#: kh*kw/9, for a pool), on 64 channels of s x s maps (rows of 256 for layer_norm and 64 for softmax); a small
#: box below 1 MB (64 x 64 x 64 fp32) and the full range, because per element an op whose data stay in L2 is not
#: one that streams from memory
OP_SPECS = {
    "relu": "torch.relu", "relu_": "torch.relu_ (in place)", "add": "x + y", "add_": "x.add_(y) (in place)",
    "gelu": "F.gelu", "silu": "F.silu", "silu_": "F.silu(inplace=True)", "hardswish": "F.hardswish",
    "hardswish_": "F.hardswish(inplace=True)", "tanh": "torch.tanh", "softmax": "torch.softmax over rows of 64",
    "cat": "torch.cat of two halves along channels", "copy": "x.clone()",
    "copy_t": "a transposed copy (x.transpose(2, 3).contiguous(): reshape of a transposed tensor)",
    "mean": "x.mean((2, 3)) (n = elements read)", "batch_norm": "BatchNorm2d (eval)",
    "layer_norm": "F.layer_norm over rows of 256", "max_pool": "MaxPool2d(3, 2, 1) (n = output elements * 9 / 9)",
    "avg_pool": "AvgPool2d(3, 2, 1)", "embedding": "F.embedding, 256-wide rows of a 10000-row table",
}
#: 3x3 convolutions at batch 1 in boxes of their own, one family per path PyTorch takes. At batch 1 it runs a 3x3
#: convolution whose input has at most 20480 elements (c*h*w) as im2col and one GEMM (``slow2d``), a larger one, and
#: every batch of 2 or more, through oneDNN (``features.conv_backend`` asks PyTorch which). The paths differ by up to
#: 40 % per MAC on the same shape (256 filters on 6x6 maps: 560 input channels, im2col, 1.57 ms; 576, oneDNN,
#: 1.09 ms), so one box across the line bent both sides: AlexNet-like's 3x3 convolutions on 7x7 maps (im2col) were
#: predicted 20-25 % short from a box whose corners ran through oneDNN.
#:
#: ``BOX-im2col``: measured with oneDNN switched off (``measure_point(path="im2col")``), which leaves PyTorch only
#: im2col, whatever the shape; a unit PyTorch would run so (``unit_path``) is predicted from them. ``BOX-b1``: the
#: batch-1 units PyTorch runs through oneDNN; each box lies where c*h*w > 20480 at every corner (its units then take
#: that path when measured; ``tests/latency/test_measure.py`` checks it on the running torch), and a unit between
#: them is extrapolated from the nearest.
_IM2COL_BOXES = {
    "conv/im2col": ((_ch("f", 8, 512, 128), _ch("c", 3, 512, 128), _hw(4, 8, 6)), "as conv, maps 4x4 to 8x8"),
    "conv/small-im2col": ((_ch("f", 8, 128, 64), _ch("c", 3, 128, 32), _hw(4, 16, 8)),
                          "as conv, channels up to 128, maps 4x4 to 16x16"),
    "conv/map-im2col": ((_ch("f", 8, 128, 64), _ch("c", 3, 64, 16), _hw(16, 32, 16)),
                        "as conv, filters up to 128, inputs up to 64 channels, maps 16x16 to 32x32"),
    "conv/px4-im2col": ((_ch("f", 8, 2048, 256), _ch("c", 8, 2048, 256), _hw(2, 3, 2)), "as conv/px4"),
    "conv/px1-im2col": ((_ch("f", 8, 2048, 256), _ch("c", 8, 2048, 256), _hw(1, 1, 1)), "as conv/px1"),
}
_ONEDNN_B1_BOXES = {
    "conv/b1": ((_ch("f", 8, 512, 128), _ch("c", 96, 512, 128), _hw(15, 32, 16)),
                "as conv, 96 to 512 input channels, maps 15x15 to 32x32"),
    "conv/map-b1": ((_ch("f", 8, 128, 64), _ch("c", 24, 128, 64), _hw(32, 64, 32)),
                    "as conv, 24 to 128 input channels, maps 32x32 to 64x64"),
    "conv/deep-b1": ((_ch("f", 8, 512, 128), _ch("c", 424, 512, 512), _hw(7, 14, 7)),
                     "as conv, 424 to 512 input channels, maps 7x7 to 14x14"),
}
for _k, (_dims, _what) in _IM2COL_BOXES.items():
    SPECS[_k] = ClassSpec("conv", _dims + (_B1,), _what + "; batch 1, im2col + GEMM (oneDNN off)", path="im2col")
for _k, (_dims, _what) in _ONEDNN_B1_BOXES.items():
    SPECS[_k] = ClassSpec("conv", _dims + (_B1,), _what + "; batch 1, through oneDNN")

#: strided convolutions through oneDNN (``s2``: measured at stride 2, the input twice the output's side). oneDNN's
#: strided 1x1 convolution is another kernel than the GEMM PyTorch runs a 1x1 convolution as at one thread: 64 to
#: 128 channels, 12x12 to 28x28 outputs, took 1.3-1.6 times as long at stride 2 as at stride 1 (32 channels at
#: batch 2: 2.6 times), 512 to 1024 channels 0.8-0.9 times. A strided 3x3 convolution at batch 1 goes through oneDNN
#: where its input (4 times its output) is large: on 7x7 and 8x8 outputs, where a stride-1 one runs as im2col, the
#: stride-2 one took 0.75-0.91 times as long, and the stride-1 boxes of oneDNN start at 15x15 (AllConv-like's
#: 192-channel 16x16 -> 8x8 layer, 0.54 ms in the network, was extrapolated from them to 0.10 and to 1.54 ms in two
#: fits). Where both run through oneDNN (batch 2 and more) the strides differ by 5-18 %: those keep the stride-1
#: boxes. The batch-1 boxes lie where the input has more than 20480 elements at every corner (c * s * s > 5120).
_S2_BOXES = {
    "conv/s2-b1": ("conv", (_ch("f", 8, 512, 128), _ch("c", 96, 512, 128), _hw(8, 16, 8), _B1),
                   "as conv at stride 2, 96 to 512 input channels, outputs 8x8 to 16x16; batch 1, oneDNN"),
    "conv/map-s2-b1": ("conv", (_ch("f", 8, 128, 64), _ch("c", 24, 128, 64), _hw(16, 32, 16), _B1),
                       "as conv at stride 2, 24 to 128 input channels, outputs 16x16 to 32x32; batch 1, oneDNN"),
    "conv/deep-s2-b1": ("conv", (_ch("f", 8, 512, 128), _ch("c", 384, 512, 512), _hw(4, 8, 4), _B1),
                        "as conv at stride 2, 384 to 512 input channels, outputs 4x4 to 8x8; batch 1, oneDNN"),
    "conv1x1/s2": ("conv1x1", (_ch("f", 8, 2048, 256), _ch("c", 8, 1024, 256), _hw(2, 16, 8), _B2),
                   "as conv1x1 at stride 2 (oneDNN), outputs 2x2 to 16x16, batches 2 to 8"),
    "conv1x1/s2-b1": ("conv1x1", (_ch("f", 8, 1024, 256), _ch("c", 96, 1024, 256), _hw(8, 16, 8), _B1),
                      "as conv1x1 at stride 2, 96 to 1024 input channels, outputs 8x8 to 16x16; batch 1, oneDNN"),
    "conv1x1/deep-s2-b1": ("conv1x1", (_ch("f", 8, 2048, 512), _ch("c", 384, 2048, 512), _hw(4, 8, 4), _B1),
                           "as conv1x1 at stride 2, 384 to 2048 input channels, outputs 4x4 to 8x8; batch 1, oneDNN"),
}
for _k, (_cls, _dims, _what) in _S2_BOXES.items():
    SPECS[_k] = ClassSpec(_cls, _dims, _what, path="s2")

#: depthwise convolutions whose channels per image are not a multiple of 16 (``dwconv/ragged``, ``dwconv/BOX-ragged``):
#: oneDNN's fast depthwise kernel works on blocks of 16 channels; 72 channels of 32x32 take 0.240 ms, 80 channels
#: 0.175 ms, and 520 channels of 32x32 twice as long as 528. The other dwconv boxes measure multiples of 16 (a line
#: through 516, 897 and 961 planes was 40-60 % high for 16 to 64 channels), these 8 more than a multiple of 16.
for _k in [k for k, v in SPECS.items() if v.cls == "dwconv"]:
    _v = SPECS[_k]
    _cb = _v.dims[0]
    SPECS[_k] = ClassSpec("dwconv", (_cb16(_cb, 0),) + _v.dims[1:], _v.what)
    SPECS[f"{_k}-ragged" if "/" in _k else f"{_k}/ragged"] = ClassSpec(
        "dwconv", (_cb16(_cb, 8),) + _v.dims[1:], _v.what + "; channels per image not a multiple of 16",
        path="ragged")

#: the same boxes with the weights in memory (``/dram``, ``/BOX-dram``): a network whose weights and activations
#: overflow the last-level cache reads each layer's weights from DRAM. ResNet-18's 512-channel 3x3 convolutions
#: (9.4 MB of weights, 3x3 maps) take 4 ms in the network and 0.7 ms with their weights in L3.
for _k in [k for k, v in SPECS.items() if v.cls in ("conv", "stem", "conv1x1", "linear")]:
    _v = SPECS[_k]
    SPECS[f"{_k}-dram" if "/" in _k else f"{_k}/dram"] = ClassSpec(_v.cls, _v.dims, _v.what + "; weights in memory",
                                                                   cold=True, path=_v.path)
for _k, _what in OP_SPECS.items():
    _lo = 4 if _k == "copy_t" else 1   # a transposed copy of fewer than 2 x 2 elements is no copy
    SPECS[_k] = ClassSpec(_k, (Dim("n", [v for v in _elements(1, 256) if v >= _lo], 64 * 32 * 32, LINEAR),), _what)
    SPECS[f"{_k}/small"] = ClassSpec(_k, (Dim("n", [v for v in _elements(1, 64) if v >= _lo], 64 * 16 * 16, LINEAR),),
                                     _what + ", up to 1 MB")


@dataclass
class Sample:
    """One measured unit (or layer): what it is, its forward time per forward pass (all its calls), and where the
    number came from."""

    layer: LayerDesc
    time_s: float
    source: str = "microbench"

    def to_dict(self) -> dict:
        return {"layer": self.layer.to_dict(), "time_s": self.time_s, "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> Sample:
        return cls(LayerDesc.from_dict(d["layer"]), float(d["time_s"]), str(d.get("source", "")))


def host_meta(device: str, dtype: str = "float32") -> dict:
    """The conditions a model is fitted under (recorded in its file; ``predict`` compares them)."""
    import platform

    import torch

    from lightning_edge.calibrate.microbench import _device_name

    caches = cache_sizes(device)
    fault_s = page_fault_s(device)  # before the allocator keeps its memory: fresh pages, as a fault meets them
    kept = keep_freed_memory() if not device.startswith("cuda") else False
    la = loadavg()
    return {"device": device, "device_name": _device_name(device), "threads": torch.get_num_threads(),
            "clock": clock() if device == "cpu" else "cuda events",
            "dtype": dtype, "torch": torch.__version__, "python": platform.python_version(),
            "machine": platform.machine(), "cpus": os.cpu_count() or 1, "l2_bytes": caches["l2"],
            "llc_bytes": effective_llc(device, caches["llc"]), "llc_nominal_bytes": caches["llc"],
            "page_fault_s": fault_s,
            "allocator": "glibc keeps freed memory (keep_freed_memory): no page faults" if kept else "as it was",
            "context": "network (time_unit: other ops, a 2 x L2 sweep, the producer; least of repeats)",
            "load_before": [round(v, 2) for v in la] if la else None}


# ------------------------------------------------------------------------------------------ one unit
def _side(p: int) -> int:
    return max(1, math.isqrt(int(p)))


def _ops_fns():
    import torch
    import torch.nn.functional as F

    return {
        "relu": lambda x: torch.relu(x), "relu_": lambda x: torch.relu_(x), "add": lambda x, y: x + y,
        "add_": lambda x, y: x.add_(y), "gelu": lambda x: F.gelu(x), "silu": lambda x: F.silu(x),
        "silu_": lambda x: F.silu(x, inplace=True), "hardswish": lambda x: F.hardswish(x),
        "hardswish_": lambda x: F.hardswish(x, inplace=True), "tanh": lambda x: torch.tanh(x),
        "softmax": lambda x: torch.softmax(x, -1), "cat": lambda xs: torch.cat(xs, 1), "copy": lambda x: x.clone(),
        "copy_t": lambda x: x.transpose(2, 3).contiguous(), "mean": lambda x: x.mean((2, 3)),
        "layer_norm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b),
        "max_pool": lambda x: F.max_pool2d(x, 3, 2, 1), "avg_pool": lambda x: F.avg_pool2d(x, 3, 2, 1),
        "embedding": lambda i, w: F.embedding(i, w), "matmul": lambda a, b: torch.bmm(a, b),
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
    }


class _Op:
    """An op as a callable with the name the step-wise table shows, and a module for ``describe``."""

    def __init__(self, key: str, fn: Callable):
        self.key, self.fn = key, fn

    def __call__(self, *args):
        return self.fn(*args)

    def module(self):
        from torch import nn

        fn = self.fn

        class OpUnit(nn.Module):
            def forward(self, *args):
                return fn(*args)

        return OpUnit()


def feature_map(shape: tuple[int, int, int, int], device: str = "cpu", dtype: Any = None) -> Any:
    """A tensor of ``shape`` (b, c, h, w) shaped like a CNN's activation: the ReLU output of a 3x3 convolution with
    random weights over positive-mean data (an image, or the ReLU'd activations before it), so neighbouring values
    are correlated. What a max pool reads: its comparisons branch on the data, and on independent normal values
    they mispredict. The max pools of the held-out networks (benchmarks/heldout_nets.py) took 10-18 % longer on
    ``torch.randn`` inputs of their shapes than on their own inputs, and 2-6 % apart on this one."""
    import torch

    b, c, h, w = (max(1, int(v)) for v in shape)
    # drawn from a generator of its own: the same map whatever ran before (the global generator's state depends on
    # how many units a fit happened to build), so a fit or a test never gets a rare degenerate one by chance
    gen = torch.Generator().manual_seed(0)
    src = torch.rand(b, 4, h, w, generator=gen)
    weight = torch.randn(c, 4, 3, 3, generator=gen) / 6
    with torch.no_grad():
        return torch.relu(torch.nn.functional.conv2d(src, weight, padding=1)).to(device=device,
                                                                                 dtype=dtype or torch.float32)


def op_inputs(key: str, n: int, device: str = "cpu", dtype: Any = None) -> tuple:
    """Inputs of op ``key`` producing (or, for ``mean``, reading) about ``n`` elements (see ``OP_SPECS``)."""
    import torch

    kw = {"device": device, "dtype": dtype or torch.float32}
    n = max(1, int(n))
    if n < 64:  # a few elements: one row
        if key == "cat":
            return ([torch.randn(1, max(1, n // 2), 1, 1, **kw), torch.randn(1, max(1, n - n // 2), 1, 1, **kw)],)
        if key in ("max_pool", "avg_pool"):
            return (torch.randn(1, n, 2, 2, **kw),)
        if key == "layer_norm":
            return torch.randn(1, n, **kw), torch.ones(n, **kw), torch.zeros(n, **kw)
        if key == "embedding":
            return torch.randint(0, 10000, (1,), device=device), torch.randn(10000, n, **kw)
        if key == "copy_t":  # a transposed copy needs two dimensions of at least 2
            return (torch.randn(1, 1, 2, max(2, n // 2), **kw),)
        x = torch.randn(1, n, 1, 1, **kw)
        return (x, torch.randn(1, n, 1, 1, **kw)) if key in ("add", "add_") else (x,)
    s = _side(n // 64)
    if key in ("add", "add_"):
        return torch.randn(1, 64, s, s, **kw), torch.randn(1, 64, s, s, **kw)
    if key == "cat":
        return ([torch.randn(1, 32, s, s, **kw), torch.randn(1, 32, s, s, **kw)],)
    if key == "max_pool":  # its time depends on the data: a network's activations, not independent values
        return (feature_map((1, 64, 2 * s, 2 * s), device, dtype),)
    if key == "avg_pool":
        return (torch.randn(1, 64, 2 * s, 2 * s, **kw),)
    if key == "softmax":
        return (torch.randn(max(1, n // 64), 64, **kw),)
    if key == "layer_norm":
        return torch.randn(max(1, n // 256), 256, **kw), torch.ones(256, **kw), torch.zeros(256, **kw)
    if key == "embedding":
        idx = torch.randint(0, 10000, (max(1, n // 256),), device=device)
        return idx, torch.randn(10000, 256, **kw)
    return (torch.randn(1, 64, s, s, **kw),)


def build_unit(cls: str, point: Sequence[int], device: str = "cpu", dtype: Any = None,
               path: str = "") -> tuple[Callable, tuple]:
    """(callable, inputs) of the representative unit of class ``cls`` at ``point`` (one value per SPECS dim);
    ``path`` ``"s2"``: a convolution at stride 2 (its input twice the side of the output ``hw`` counts)."""
    import torch
    from torch import nn

    dtype = dtype or torch.float32
    kw = {"device": device, "dtype": dtype}
    if cls in ("conv", "conv1x1"):
        f, c, hw, b = (int(v) for v in point)
        k = 3 if cls == "conv" else 1
        s = _side(hw)
        st = 2 if path == "s2" else 1
        return (nn.Conv2d(c, f, k, st, padding=k // 2, bias=False, **kw).eval(),
                (torch.randn(b, c, st * s, st * s, **kw),))
    if cls == "stem":
        f, kk, hw, b = (int(v) for v in point)
        k = _side(kk)
        st = max(2, k // 2)
        so = _side(hw)
        si = (so - 1) * st + k - 2 * (k // 2)
        return (nn.Conv2d(3, f, k, st, k // 2, bias=False, **kw).eval(), (torch.randn(b, 3, max(si, k), max(si, k), **kw),))
    if cls == "sdpa":
        sk, e, lq, batch = (int(v) for v in point)
        return _Op("sdpa", _ops_fns()["sdpa"]), (torch.randn(1, batch, lq, e, **kw),
                                                 torch.randn(1, batch, sk, e, **kw),
                                                 torch.randn(1, batch, sk, e, **kw))
    if cls == "dwconv":
        c, hw = (int(v) for v in point)
        s = _side(hw)
        return nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False, **kw).eval(), (torch.randn(1, c, s, s, **kw),)
    if cls == "gconv":
        cc, g, hw, b = (int(v) for v in point)
        cg, s = _side(cc), _side(hw)
        return (nn.Conv2d(cg * g, cg * g, 3, padding=1, groups=g, bias=False, **kw).eval(),
                (torch.randn(b, cg * g, s, s, **kw),))
    if cls == "linear":
        f, c, rows = (int(v) for v in point)
        return nn.Linear(c, f, **kw).eval(), (torch.randn(rows, c, **kw),)
    if cls == "matmul":
        n, k, m, batch = (int(v) for v in point)
        return _Op("matmul", _ops_fns()["matmul"]), (torch.randn(batch, m, k, **kw), torch.randn(batch, k, n, **kw))
    if cls == "batch_norm":
        (n,) = point
        x = op_inputs(cls, n, device, dtype)
        return nn.BatchNorm2d(x[0].shape[1], **kw).eval(), x
    fns = _ops_fns()
    if cls in fns:
        (n,) = point
        return _Op(cls, fns[cls]), op_inputs(cls, n, device, dtype)
    raise ValueError(f"no representative unit for class {cls!r}; expected one of "
                     f"{', '.join(sorted({s.cls for s in SPECS.values()}))}")


def measure_point(cls: str, point: Sequence[int], device: str = "cpu", repeats: int = 5, dtype: Any = None,
                  cold: bool = False, path: str = "", warmup: int = 2) -> float:
    """Seconds of one call of the representative ``cls`` unit at ``point``, in a network's context, as
    ``time_unit`` times it (``repeats`` calls after ``warmup``; ``cold``: its weights in memory; ``path``
    ``"im2col"``: a convolution with oneDNN switched off, so that PyTorch runs it as im2col and GEMM whatever its
    shape; ``"s2"``: a convolution at stride 2; see ``unit_path``)."""
    fn, args = build_unit(cls, point, device, dtype, path=path)
    return time_unit(fn, args, device, repeats, warmup=warmup, cold=cold, path=path)


@contextlib.contextmanager
def onednn(enabled: bool) -> Iterator[None]:
    """PyTorch's oneDNN (mkldnn) CPU kernels switched on or off within (``torch.backends.mkldnn.enabled``, every
    supported torch; its ``flags()`` also resets the TF32 setting, with a warning on torch 2.13)."""
    import torch

    prev = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = bool(enabled)
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = prev


def unit_path(unit: LayerDesc) -> str:
    """The kernel path of a unit, where a class's units take more than one (the boxes of ``SPECS`` with that
    ``path``): ``"im2col"``, a 3x3 convolution (not a network's first) that PyTorch runs as im2col and GEMM
    (``LayerDesc.backend`` ``slow2d`` at batch 1: a small input; the ``-im2col`` boxes hold batch 1 only, and a
    torch without oneDNN runs every batch so, as its other boxes measured); ``"s2"``, a strided convolution
    PyTorch runs through oneDNN: a 1x1 one at any batch (a stride-1 one is a GEMM), a 3x3 one at batch 1 (the
    stride-1 oneDNN boxes stop where a stride-1 input gets small enough for im2col; kernels up to 3x3; the stride
    is the first dimension's, ``LayerDesc.stride``); ``"ragged"``, a depthwise convolution whose channels are not a
    multiple of 16 (oneDNN's fast kernel works on blocks of 16); else ``""``."""
    stem = unit.c <= 4 and unit.kh * unit.kw >= 9
    b1 = max(1, unit.batch) == 1
    if unit.cls == "conv" and unit.backend == "slow2d" and b1 and not stem:
        return "im2col"
    if (unit.stride > 1 and unit.backend == "mkldnn" and not stem
            and (unit.cls == "conv1x1" or (unit.cls == "conv" and b1 and unit.kh * unit.kw <= 9))):
        return "s2"   # (a larger kernel runs through oneDNN at any size: the stride-1 boxes, c scaled, as before)
    if unit.cls == "dwconv" and unit.c % 16:
        return "ragged"
    return ""


def unit_desc_for(fn: Callable, args: tuple) -> LayerDesc:
    """The unit description (costs from ``analyze``, as for a network's units) of a module or ``_Op`` called on
    ``args`` (real tensors: described on the meta device)."""
    import torch

    from lightning_edge.latency.features import describe

    def meta(a):
        if isinstance(a, (list, tuple)):
            return type(a)(meta(x) for x in a)
        if isinstance(a, torch.Tensor):
            if not a.is_floating_point():
                return a.to("cpu")  # integer inputs (token ids) keep their values
            return torch.empty(a.shape, dtype=a.dtype, device="meta")
        return a

    mod = fn.module() if isinstance(fn, _Op) else fn
    layers, _ = describe(mod, *[meta(a) for a in args])
    top = next(d for d in layers if d.name == "")
    units = units_of(top)
    if len(units) != 1:
        raise ValueError(f"unit_desc_for: {type(mod).__name__} is {len(units)} units, expected one")
    return units[0]


def point_for(unit: LayerDesc) -> tuple[str, tuple[int, ...], float] | None:
    """(class, point in that class's dims, multiplier) of one unit, per call, or None (no class: the roofline)."""
    cls = unit.cls
    hw = max(1, unit.ho * unit.wo)
    b = max(1, unit.batch)
    if cls == "conv" and unit.c <= 4 and unit.kh * unit.kw >= 9:
        return "stem", (max(1, unit.f), unit.kh * unit.kw, hw, b), 1.0
    if cls in ("conv", "conv1x1"):
        c = unit.c if cls == "conv1x1" else max(1, round(unit.c * unit.kh * unit.kw / 9))
        return cls, (max(1, unit.f), max(1, c), hw, b), 1.0
    if cls == "dwconv":   # batch and channels are interchangeable: planes
        return cls, (max(1, unit.c) * b, max(1, round(hw * unit.kh * unit.kw / 9))), 1.0
    if cls == "gconv":
        g = max(1, unit.groups)
        return cls, (max(1, round(unit.c / g * unit.f / g * unit.kh * unit.kw / 9)), g, hw, b), 1.0
    if cls == "linear":
        return cls, (max(1, unit.f), max(1, unit.c), max(1, unit.rows)), 1.0
    if unit.op == "sdpa":
        return "sdpa", (max(1, unit.f), max(1, unit.c), max(1, unit.rows), b), 1.0
    if cls == "matmul":
        return cls, (max(1, unit.f), max(1, unit.c), max(1, unit.rows), b), 1.0
    key = unit.op
    if key in OP_SPECS:
        n = unit.n_in if key == "mean" else unit.n_out
        if key in ("max_pool", "avg_pool"):  # a window costs less than in proportion to its size (2x2: 0.7 of 3x3)
            n = round(unit.n_out * (unit.kh * unit.kw + 9) / 18)
        return key, (max(1, int(n)),), 1.0
    return None


# ------------------------------------------------------------------------------------------ the sweep
#: channel counts, map sides and batches the sweep draws from: the widths, feature-map sizes and batches of CNNs
#: and transformers from 32x32 to 224x224 inputs
_CH = (3, 8, 16, 24, 32, 40, 48, 64, 72, 80, 96, 112, 120, 128, 144, 160, 192, 240, 256, 288, 320, 384, 480, 512,
       576, 640, 768, 960, 1024, 1280, 2048)
_SIDES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16, 20, 24, 27, 28, 31, 32, 40, 48, 56, 63, 64, 80, 96, 112)
_BATCH = (1, 1, 1, 2, 4, 8, 8, 16)
_TOKENS = (16, 49, 50, 64, 65, 128, 196, 197, 256)
_FAMILIES = (("conv", 20), ("conv1x1", 14), ("dwconv", 8), ("gconv", 5), ("linear", 10), ("matmul", 5), ("op", 38))
#: the most work one drawn unit may do (FLOP) and the largest tensor (elements): one call stays under ~50 ms
_MAX_FLOPS = 4e9
_MAX_NUMEL = 8 << 20


def draw_unit(rng, device: str = "cpu") -> tuple[Callable, tuple] | None:
    """One random unit shaped like those real networks use (``sample_units``), or None when the draw is too
    large: large kernels (5x5 to 11x11) and strides, grouped and depthwise convolutions, linear layers on tokens,
    attention's batched products, and every op class (``OP_SPECS``) on feature maps and token sequences."""
    import torch
    from torch import nn

    kw = {"device": device}
    fam = rng.choices([f for f, _w in _FAMILIES], [w for _f, w in _FAMILIES])[0]
    b = rng.choice(_BATCH)
    so = rng.choice(_SIDES)
    if fam in ("conv", "conv1x1", "dwconv", "gconv"):
        if fam == "conv1x1":
            k, stride = 1, rng.choice((1, 1, 1, 1, 2))
        elif fam == "conv":
            k = rng.choice((3, 3, 3, 3, 3, 5, 5, 7, 11, 1))
            stride = 4 if k == 11 and rng.random() < 0.7 else rng.choice((1, 1, 1, 2))
            if k == 1:
                stride = 2
        else:
            k, stride = rng.choice((3, 3, 3, 5, 7)), rng.choice((1, 1, 2))
        pad = k // 2 if rng.random() < 0.85 else 0
        si = (so - 1) * stride + k - 2 * pad
        if si < 1 or (pad == 0 and si < k):
            return None
        if fam == "dwconv":
            c = f = rng.choice(_CH[1:])
            g = c
        elif fam == "gconv":
            g = rng.choice((2, 4, 8, 16, 32, 32, 64))
            c = g * rng.choice((1, 2, 4, 4, 8, 8, 16, 32))
            f = g * rng.choice((1, 2, 4, 4, 8, 8, 16, 32)) if rng.random() < 0.3 else c
        else:
            c, f = rng.choice(_CH), rng.choice(_CH[1:])
            g = 1
        if c > 2048 or f > 2048:
            return None
        flops = 2 * b * so * so * f * (c // g) * k * k
        if flops > _MAX_FLOPS or b * c * si * si > _MAX_NUMEL or b * f * so * so > _MAX_NUMEL:
            return None
        return (nn.Conv2d(c, f, k, stride, pad, groups=g, bias=rng.random() < 0.3, **kw).eval(),
                (torch.randn(b, c, si, si, **kw),))
    if fam == "linear":
        c, f = rng.choice(_CH[1:] + (768, 1000, 3072, 4096)), rng.choice(_CH[1:] + (768, 1000, 3072, 4096))
        rows = b * rng.choice((1, 1, 1) + _TOKENS)
        if 2 * c * f * rows > _MAX_FLOPS:
            return None
        x = torch.randn(rows, c, **kw) if rng.random() < 0.5 or rows == b else torch.randn(b, rows // b, c, **kw)
        return nn.Linear(c, f, **kw).eval(), (x,)
    if fam == "matmul":
        heads = rng.choice((1, 2, 3, 4, 6, 8, 12, 16))
        n_tok = rng.choice(_TOKENS)
        d = rng.choice((16, 32, 48, 64, 64, 96, 128))
        m, k, n = (n_tok, d, n_tok) if rng.random() < 0.5 else (n_tok, n_tok, d)
        bb = b * heads
        if 2 * bb * m * k * n > _MAX_FLOPS:
            return None
        if rng.random() < 0.3:  # fused attention: softmax(q k^T) v in one op
            return _Op("sdpa", _ops_fns()["sdpa"]), tuple(torch.randn(b, heads, n_tok, d, **kw) for _ in range(3))
        return _Op("matmul", _ops_fns()["matmul"]), (torch.randn(bb, m, k, **kw), torch.randn(bb, k, n, **kw))
    # an op
    key = rng.choice(tuple(OP_SPECS))
    c = rng.choice(_CH[1:20])
    tokens = rng.random() < 0.35 and key not in ("max_pool", "avg_pool", "batch_norm", "copy_t")
    if tokens:  # a (b, tokens, width) activation of a transformer
        shape = (b, rng.choice(_TOKENS), rng.choice((64, 128, 192, 256, 384, 512, 768, 1024, 3072)))
    else:
        shape = (b, c, so, so)
    if math.prod(shape) > _MAX_NUMEL:
        return None

    def t(*s):
        return torch.randn(*s, **kw)

    if key in ("add", "add_"):
        y = t(*shape) if rng.random() < 0.8 else t(*shape[:2], *([1] * (len(shape) - 2)))  # a broadcast scale
        fn = (lambda a, bb: a + bb) if key == "add" else (lambda a, bb: a.add_(bb))
        if rng.random() < 0.3:
            fn = (lambda a, bb: a * bb) if key == "add" else (lambda a, bb: a.mul_(bb))
        return _Op(key, fn), (t(*shape), y)
    if key == "cat":
        parts = rng.choice((2, 2, 2, 3, 4))
        return _Op(key, lambda xs: torch.cat(xs, 1)), ([t(shape[0], max(1, shape[1] // parts), *shape[2:])
                                                         for _ in range(parts)],)
    if key in ("max_pool", "avg_pool"):
        kk, st = rng.choice(((3, 2), (3, 2), (2, 2), (3, 1))) if so > 1 else (1, 1)
        pad = rng.choice((0, 1)) if kk == 3 else 0
        if so * st + 2 * pad < kk:
            return None
        ceil = rng.random() < 0.3
        pool = (nn.MaxPool2d if key == "max_pool" else nn.AvgPool2d)(kk, st, pad, ceil_mode=ceil)
        x = feature_map((b, c, so * st, so * st), device) if key == "max_pool" else \
            t(b, c, so * st, so * st)  # a max pool branches on its data (feature_map)
        return pool, (x,)
    if key == "mean":
        if tokens:
            return _Op(key, lambda a: a.mean(1)), (t(*shape),)
        out = rng.choice((1, 1, 1, 3, 7))
        return nn.AdaptiveAvgPool2d(out) if out > 1 or rng.random() < 0.5 else _Op(key, lambda a: a.mean((2, 3))), \
            (t(*shape),)
    if key == "batch_norm":
        return nn.BatchNorm2d(c, **kw).eval(), (t(*shape),)
    if key == "layer_norm":
        return nn.LayerNorm(shape[-1], **kw).eval(), (t(*shape),)
    if key == "softmax":
        if not tokens:
            n_tok = rng.choice(_TOKENS)
            shape = (b * rng.choice((1, 3, 4, 8, 12)), n_tok, n_tok)
            if math.prod(shape) > _MAX_NUMEL:
                return None
        return _Op(key, lambda a: torch.softmax(a, -1)), (t(*shape),)
    if key == "embedding":
        vocab, width = rng.choice((1000, 8192, 30522)), rng.choice((64, 128, 256, 512, 768))
        rows = b * rng.choice(_TOKENS)
        return (nn.Embedding(vocab, width, **kw).eval(),
                (torch.randint(0, vocab, (b, max(1, rows // b)), device=device),))
    if key == "copy_t":
        return _Op(key, lambda a: a.transpose(1, 2).contiguous()), (t(*shape),)
    mods = {"relu": nn.ReLU(), "relu_": nn.ReLU(inplace=True), "gelu": nn.GELU(), "silu": nn.SiLU(),
            "silu_": nn.SiLU(inplace=True), "hardswish": nn.Hardswish(), "hardswish_": nn.Hardswish(inplace=True),
            "tanh": nn.Tanh()}
    if key in mods:
        m = mods[key]
        if key == "relu" and rng.random() < 0.3:
            m = nn.ReLU6()
        return m, (t(*shape),)
    return _Op(key, lambda a: a.clone()), (t(*shape),)


def sample_units(budget_s: float, device: str = "cpu", repeats: int = 5, seed: int = 0,
                 log: Callable[[str], None] | None = None, deadline: float | None = None) -> list[Sample]:
    """Measure random units (``draw_unit``) in a network's context for ``budget_s`` seconds: the statistical and
    mixed models' own training set, from this device alone."""
    import random
    import time

    log = log or (lambda _m: None)
    rng = random.Random(seed)
    end = time.monotonic() + budget_s if deadline is None else min(deadline, time.monotonic() + budget_s)
    out: list[Sample] = []
    tries = 0
    while time.monotonic() < end and tries < 100_000:
        tries += 1
        drawn = draw_unit(rng, device)
        if drawn is None:
            continue
        fn, args = drawn
        try:
            desc = unit_desc_for(fn, args)
        except (ValueError, RuntimeError):  # a draw PyTorch refuses (a window larger than its padded input)
            continue
        cold = 4 * desc.params >= COLD_MIN_BYTES and rng.random() < 0.5
        desc.cold = 1.0 if cold else 0.0
        out.append(Sample(desc, time_unit(fn, args, device, repeats, cold=cold), "microbench"))
    log(f"  sweep: {len(out)} units measured in a network's context")
    return out


# ------------------------------------------------------------------------------------------ networks
def time_module(mod: Any, args: tuple, device: str = "cpu", repeats: int = 5, warmup: int = 2,
                kwargs: dict | None = None) -> float:
    """Median seconds per call of ``mod(*args, **kwargs)`` under ``torch.inference_mode``, calls looped in blocks
    (``time_callable``: a whole network, or anything long enough that its context does not matter)."""
    import torch

    from lightning_edge.calibrate.microbench import time_callable

    kwargs = kwargs or {}

    def fn():
        return mod(*args, **kwargs)

    with torch.inference_mode():
        t, _inner = time_callable(fn, device, repeats=repeats, warmup=warmup, min_block_s=1e-3,
                                  clock_ns=_clock_ns())
    return float(t)


def time_network(model: Any, inputs: tuple, device: str = "cpu", repeats: int = 10, warmup: int = 2,
                 kwargs: dict | None = None, stat: str = "min") -> float:
    """Forward seconds of ``model(*inputs, **kwargs)`` (eval, inference mode), each pass timed alone with the
    ``use_clock`` clock (CUDA: events): the least of ``repeats`` passes (``stat="min"``, as ``time_unit`` times a
    unit: the pass other work disturbed least) or their median (``stat="median"``)."""
    import torch

    if stat not in ("min", "median"):
        raise ValueError(f"stat {stat!r}: expected 'min' or 'median'")
    model.eval()
    kwargs = kwargs or {}
    cuda = device.startswith("cuda")
    clk = _clock_ns()
    times = []
    speed = _speed_factor(device)
    with torch.inference_mode():
        for i in range(max(0, warmup) + max(1, repeats)):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                model(*inputs, **kwargs)
                end.record()
                end.synchronize()
                t = start.elapsed_time(end) / 1e3
            else:
                t0 = clk()
                model(*inputs, **kwargs)
                t = (clk() - t0) * 1e-9
            if i >= warmup:
                times.append(t)
    return _at_usual_speed(float(min(times) if stat == "min" else statistics.median(times)), speed)



# ------------------------------------------------------------------------------------------ calibration networks
#: the zoo networks a fit times whole (``network_cases``): (case, zoo name, input size: image side or sequence
#: length, overrides). Families of every unit class the held-out benchmark networks have (dense, depthwise and 1x1
#: convolutions, residual adds, SiLU/Hardswish, pools, linear layers, attention), scaled so that a batch-8 pass
#: takes tens of milliseconds on one CPU thread. None of them is a held-out network of the benchmark.
#:
#: Small networks as well as large ones (``name@size``: smaller inputs, 100 classes): with only the 64-96 pixel,
#: 1000-class networks, whose weights (13-150 MB) all stream from memory, the calibration learnt the shortfall of
#: large networks at batch 1 (their passes 10-23 % longer than predicted) and put it on every network; networks
#: whose weights stay in the cache at batch 1 were not short of it. In one quiet fit the held-out networks went from
#: 5.2 to 4.2 % MAPE with these four added (none uncalibrated: 4.1 %), and the leave-one-network-out error rose from
#: 4.9 to 8.3 %: it had flattered the calibration.
NETWORK_CASES: tuple[tuple[str, str, int, dict], ...] = (
    ("mobilenet_v2", "mobilenet_v2", 96, {}), ("mobilenet_v3_large", "mobilenet_v3_large", 96, {}),
    ("resnet18", "resnet18", 96, {}), ("resnet50", "resnet50", 64, {}), ("yolov8n", "yolov8n", 96, {}),
    ("bert_base", "bert_base", 32, {"num_hidden_layers": 2}),
    ("mobilenet_v2@48", "mobilenet_v2", 48, {"num_classes": 100}),
    ("mobilenet_v3_large@48", "mobilenet_v3_large", 48, {"num_classes": 100}),
    ("resnet18@32", "resnet18", 32, {"num_classes": 100}), ("yolov8n@64", "yolov8n", 64, {}))
NETWORK_BATCHES = (1, 8)


def network_cases(device: str = "cpu", names: Sequence[str] | None = None):
    """The calibration networks, one at a time: ``(label, model, inputs)`` for each of ``NETWORK_CASES`` (or of
    ``names``, cases among them) at each of ``NETWORK_BATCHES``; the label is ``"<case> b<batch>"`` (what a model
    file stores). Built with random weights on ``device`` (nothing is downloaded)."""
    import torch

    from lightning_edge import zoo

    known = {case for case, _n, _s, _o in NETWORK_CASES}
    if names is not None and not set(names) <= known:
        raise ValueError(f"calibration networks {sorted(set(names) - known)}: expected some of {sorted(known)}")
    for case, name, size, over in NETWORK_CASES:
        if names is not None and case not in names:
            continue
        gen = torch.Generator().manual_seed(size)   # a case's inputs do not depend on which others are built
        model = getattr(zoo, name)(**over).to(device).eval()
        for b in NETWORK_BATCHES:
            if name.startswith("bert"):
                inputs = tuple(t.to(device) for t in zoo.bert_base_inputs(b, size))
            else:
                inputs = (torch.rand(b, 3, size, size, generator=gen).to(device),)
            yield network_label(case, b), model, inputs
        del model


def network_label(case: str, batch: int) -> str:
    """A calibration network's label, ``"<case> b<batch>"`` (what a model file stores)."""
    return f"{case} b{batch}"


def network_name(label: str) -> str:
    """The case in a calibration network's ``label`` (``network_label``)."""
    return label.rsplit(" b", 1)[0]


def network_family(label: str) -> str:
    """The zoo network of a calibration network's ``label`` (``mobilenet_v2`` for ``mobilenet_v2@48 b1``): what
    the calibration's leave-one-network-out error leaves out together."""
    return network_name(label).split("@", 1)[0]


def time_networks(device: str = "cpu", deadline: float | None = None, repeats: int = 7,
                  names: Sequence[str] | None = None, layers: dict | None = None) -> list[tuple[str, float]]:
    """``[(label, seconds)]``: each calibration network's forward pass (``network_cases``) timed as a reference is
    (``time_network``: the least of ``repeats`` passes), on the machine as it is. Stops before a network once
    ``time.monotonic()`` passes ``deadline``. ``layers``: a dict that gets each network's ``describe`` output
    under its label where it lacks it (the network is built once for both)."""
    import time

    from lightning_edge.latency.features import describe

    out = []
    for label, model, inputs in network_cases(device, names):
        if deadline is not None and time.monotonic() > deadline:
            break
        out.append((label, time_network(model, inputs, device, repeats=repeats)))
        if layers is not None and label not in layers:
            layers[label] = describe(model, *inputs)
    return out

def time_layers(model: Any, inputs: tuple, steps: int = 5, kwargs: dict | None = None) -> dict[str, float]:
    """Forward self time (seconds) of every module, the least over ``steps`` forward passes, named as in
    ``model.named_modules()`` (the root is ``""``), measured by the profiler's ``LayerTimer`` (whose hooks add
    their own time to each module's parent)."""
    import torch

    from lightning_edge.profiling.hooks import LayerTimer

    kwargs = kwargs or {}
    model.eval()
    root = "(root)"
    timer = LayerTimer(model, backward=False, root_name=root, clock_ns=_clock_ns())
    per: dict[str, list[float]] = {}
    with torch.inference_mode():
        model(*inputs, **kwargs)  # warm-up
        for _ in range(max(1, steps)):
            with timer.step() as st:
                model(*inputs, **kwargs)
            for name, ls in st.timing.exclusive().items():
                per.setdefault("" if name == root else name, []).append(ls.fwd_ns / 1e9)
    return {k: min(v) for k, v in per.items()}


#: the size limit on a layers.json read back (a few KB per layer and stage: far above a large network's)
LAYERS_JSON_MAX_BYTES = 64 << 20


def match_layer_names(profiled: list[str], model_names: list[str]) -> dict[str, str]:
    """Map the layer names of a profile onto ``model_names`` whatever prefix separates them: ``EnergyProfiler`` names
    a LightningModule's layers after its attribute (``net.conv1``), the inner model has ``conv1``; or the other way
    round. Tries every prefix that turns a profiled name into a model name (``net.``) and every one that turns a
    model name into a profiled name, and keeps the one that matches the most names (no prefix wins a tie, then the
    shortest). Returns ``{profiled name: model name}`` for the names it matched."""
    known = set(model_names)
    counts: dict[tuple[int, str], int] = {}
    for name in set(profiled):
        if name in known:
            counts[(0, "")] = counts.get((0, ""), 0) + 1
        parts = name.split(".")
        for i in range(1, len(parts)):  # profiled = prefix + model name
            if ".".join(parts[i:]) in known:
                key = (1, ".".join(parts[:i]) + ".")
                counts[key] = counts.get(key, 0) + 1
    profiled_set = set(profiled)
    for m in known:  # model name = prefix + profiled name
        parts = m.split(".")
        for i in range(1, len(parts)):
            if ".".join(parts[i:]) in profiled_set:
                key = (2, ".".join(parts[:i]) + ".")
                counts[key] = counts.get(key, 0) + 1
    if not counts:
        return {}
    (way, prefix), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0] == (0, ""), -len(kv[0][1])))
    out = {}
    for name in profiled:
        if way == 0 and name in known:
            out[name] = name
        elif way == 1 and name.startswith(prefix) and name[len(prefix):] in known:
            out[name] = name[len(prefix):]
        elif way == 2 and prefix + name in known:
            out[name] = prefix + name
    return out


def training_from_layers_json(path: str | Path, model: Any, *inputs: Any, stage: str | None = None,
                              **kwargs: Any) -> list[Sample]:
    """Training samples from an ``EnergyProfiler`` ``layers.json``: each layer's forward self time per step
    (``fwd_ms``), joined by name with its shapes from ``describe(model, *inputs)``; ``inputs`` must be one step's
    batch as profiled. ``model`` may be the LightningModule that was profiled or the network inside it: names are
    matched whatever prefix the module's attribute adds (``net.conv1`` and ``conv1``, :func:`match_layer_names`).
    A sample is one unit (``features.units_of``): layers without a forward time, and layers of several ops (a
    block's own adds and concatenations), are skipped."""
    from lightning_edge._jsonfile import one_line, read_json
    from lightning_edge.latency.features import describe

    p = Path(path)
    what = "expected the layers.json EnergyProfiler writes"
    try:
        data = read_json(p, lambda why: ValueError(f"{p} {why}; {what}"), limit=LAYERS_JSON_MAX_BYTES)
    except FileNotFoundError:
        raise FileNotFoundError(f"{p}: no such layers.json; EnergyProfiler writes it to the run's log dir") from None
    if not isinstance(data, dict) or data.get("schema") != "lightning_edge.energy_profile":
        raise ValueError(f"{p}: not an EnergyProfiler layers.json (schema 'lightning_edge.energy_profile' expected)")

    def bad(field: str, expected: str, got: Any) -> ValueError:
        shown = repr(got) if isinstance(got, (int, float)) and not isinstance(got, bool) else type(got).__name__
        return ValueError(f"{p}: {one_line(field)}: expected {expected}, got {one_line(shown, 40)}; {what}")

    stages = data.get("stages") or {}
    if not isinstance(stages, dict):
        raise bad("stages", "an object of stages (train, validate, predict ...)", stages)
    if stage is None:
        stage = "predict" if "predict" in stages else ("train" if "train" in stages else next(iter(stages), None))
    if stage not in stages:
        raise ValueError(f"{p}: no stage {one_line(repr(stage), 40)}; it has {one_line(repr(sorted(stages)))}")
    if not isinstance(stages[stage], dict):
        raise bad(f"stages.{stage}", "an object with a list of layers", stages[stage])
    rows = stages[stage].get("layers", [])
    if not isinstance(rows, list):
        raise bad(f"stages.{stage}.layers", "a list of layers", rows)
    for i, row in enumerate(rows):
        field = f"stages.{stage}.layers[{i}]"
        if not isinstance(row, dict):
            raise bad(field, "an object {layer, fwd_ms, ...}", row)
        if not isinstance(row.get("layer"), str):
            raise bad(f"{field}.layer", "a layer name", row.get("layer"))
        fwd = row.get("fwd_ms")
        if fwd is not None and (isinstance(fwd, bool) or not isinstance(fwd, (int, float)) or not fwd <= 1e7):
            raise bad(f"{field}.fwd_ms", "a forward time of at most 1e7 ms, or null", fwd)
    descs, _ = describe(model, *inputs, **kwargs)
    by_name = {d.name: d for d in descs}
    names = match_layer_names([row["layer"] for row in rows], list(by_name))
    out = []
    for row in rows:
        matched = names.get(row["layer"])  # an unmatched row ("(other)", a region) is no layer, not the root
        d = by_name.get(matched) if matched is not None else None
        fwd = row.get("fwd_ms")
        if d is None or fwd is None or not math.isfinite(fwd) or fwd <= 0:
            continue
        units = units_of(d)
        if len(units) != 1:  # a layer of several ops: its time cannot be split between them
            continue
        u = units[0]
        u.calls = d.calls
        out.append(Sample(u, fwd / 1e3, f"layers.json:{p.name}:{stage}"))
    if not out:
        raise ValueError(f"{p}: no layer of stage {stage!r} matched the model's layers by name with a forward time; "
                         "pass the model and the inputs that were profiled")
    return out
