"""Chrome / Perfetto traces of profiled steps: one span per layer call, counter tracks for every power rail.

::

    doc = chrome_trace([(timing, energy, "train step 12")], power=sampler.samples, costs=costs)
    path = write_trace(doc, trace_path(log_dir))     # <log_dir>/plugins/profile/<run>/<host>_<pid>.<ns>.pt.trace.json

The file is the Chrome trace-event JSON format (``{"traceEvents": [...]}``, times in microseconds), named and
placed like ``torch.profiler.tensorboard_trace_handler`` names its files (``<host>_<pid>.<time_ns>.pt.trace.json``),
so https://ui.perfetto.dev, ``chrome://tracing`` and the (deprecated, optional) torch-tb-profiler TensorBoard
plugin all open it. Layout:

* one process per trace (``pid`` = this process), threads: ``step`` (the ``ProfilerStep#N`` spans and the step's
  regions), ``forward`` and ``backward`` (module spans; a span that would not nest inside the spans already on a
  thread goes to an extra lane, ``backward 2`` ...), so every thread holds properly nested spans;
* layer spans have category ``cpu_op`` (as PyTorch's operators), so torch-tb-profiler counts them as CPU execution
  and lists them in its operator view, not as "Other"; step spans (``ProfilerStep#N``) and regions stay
  ``user_annotation`` as PyTorch writes them;
* span ``args``: the layer, its class, the call index, phase, the layer's ``flops`` and ``bytes`` in that phase (from
  the cost model, whole step), and the layer's self time and energy (``energy_mj``) in that step with the energy's
  method;
* counters (``ph: "C"``): ``power total (W)`` and ``power <rail> (W)`` for every rail, from the power samples
  inside each traced step (plus one sample either side).
"""

from __future__ import annotations

import json
import math
import os
import socket
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from lightning_edge._jsonfile import one_line, read_json, write_output

__all__ = ["chrome_trace", "trace_path", "write_trace", "nest_lanes", "merge_into", "TRACE_SUFFIX", "MERGED_PID"]

TRACE_SUFFIX = ".pt.trace.json"
_TID_STEP, _TID_FWD, _TID_BWD = 1, 10, 100
#: the process id lightning_edge's events get inside another profiler's trace (a process of their own there)
MERGED_PID = 7_000_000
#: the largest trace merged into (inflated, for a ``.gz``): ``torch.profiler`` writes tens of MB for a few steps
MAX_TRACE_BYTES = 1 << 30
#: beyond any time a trace holds (microseconds or nanoseconds since 1970: about 1.7e15 and 1.7e18)
_MAX_TIME = 1e19


def trace_path(log_dir: str | os.PathLike[str], run: str = "energy", worker: str | None = None) -> Path:
    """``<log_dir>/plugins/profile/<run>/<worker>.<time_ns>.pt.trace.json``; ``worker`` defaults to
    ``<hostname>_<pid>`` as ``torch.profiler.tensorboard_trace_handler`` uses."""
    worker = worker or f"{socket.gethostname()}_{os.getpid()}"
    return Path(log_dir) / "plugins" / "profile" / run / f"{worker}.{time.time_ns()}{TRACE_SUFFIX}"


def nest_lanes(spans: list[tuple[int, int]]) -> list[int]:
    """A lane for each ``(t0, t1)`` span so that spans on one lane nest properly (contained or disjoint)."""
    order = sorted(range(len(spans)), key=lambda i: (spans[i][0], -spans[i][1]))
    lanes: list[list[int]] = []  # per lane: stack of open span ends
    out = [0] * len(spans)
    for i in order:
        a, b = spans[i]
        for lane, stack in enumerate(lanes):
            while stack and stack[-1] <= a:
                stack.pop()
            if not stack or b <= stack[-1]:
                stack.append(b)
                out[i] = lane
                break
        else:
            lanes.append([b])
            out[i] = len(lanes) - 1
    return out


def _phase_cost(cost: Any, phase: str) -> tuple[float | None, float | None]:
    if cost is None:
        return None, None
    part = getattr(cost, "forward" if phase == "fwd" else "backward", None)
    if part is None:
        return None, None
    return float(getattr(part, "flops", 0) or 0), float(getattr(part, "bytes", 0) or 0)


def chrome_trace(steps: Iterable[tuple[Any, Any, str]], power: Callable[[int, int], Any] | None = None,
                 costs: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]] | None = None,
                 pid: int | None = None, process_name: str = "lightning_edge", metadata: Mapping | None = None,
                 ts_offset_us: float = 0.0, power_window: tuple[int, int] | None = None) -> dict:
    """The trace document for ``steps``: ``(StepTiming, StepEnergy or None, label)`` each.

    ``power(t0_ns, t1_ns)``: the power samples of a window (``PowerSampler.samples``: ``t_ns``, ``power_w``,
    ``rails_w``, ``rails``), taken over each step, or over ``power_window`` (ns) when given; ``costs``:
    ``{layer: LayerCost}`` or a function of the timing giving it. ``ts_offset_us`` is added to every time stamp
    (to put the events on another trace's clock)."""
    pid = os.getpid() if pid is None else int(pid)

    def _us(t_ns: int) -> float:
        return t_ns / 1000.0 + ts_offset_us

    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": process_name}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": _TID_STEP, "args": {"name": "step"}},
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": _TID_STEP, "args": {"sort_index": 0}},
    ]
    named: set[int] = set()

    def thread(tid: int, name: str) -> int:
        if tid not in named:
            named.add(tid)
            ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
            ev.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
        return tid

    for n, (timing, energy, label) in enumerate(steps):
        layer_costs = costs(timing) if callable(costs) else (costs or {})
        layers = getattr(energy, "layers", None) or {}
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": pid, "tid": _TID_STEP,
                   "ts": _us(timing.t0_ns), "dur": timing.duration_ns / 1000.0,
                   "args": {"label": label, "energy_j": _num(getattr(energy, "energy_j", None)),
                            "method": getattr(energy, "label", None), "samples": getattr(energy, "samples", None)}})
        for r in timing.regions:
            ev.append({"ph": "X", "cat": "user_annotation", "name": r.name, "pid": pid, "tid": _TID_STEP,
                       "ts": _us(r.t0_ns), "dur": r.duration_ns / 1000.0, "args": {"phase": r.phase}})
        spans = [iv for iv in timing.inclusive() if iv.kind == "module"]
        for phase, base, tname in (("fwd", _TID_FWD, "forward"), ("bwd", _TID_BWD, "backward")):
            mine = [iv for iv in spans if iv.phase == phase]
            lanes = nest_lanes([(iv.t0_ns, iv.t1_ns) for iv in mine])
            for iv, lane in zip(mine, lanes):
                tid = thread(base + lane, tname if lane == 0 else f"{tname} {lane + 1}")
                w, q = _phase_cost(layer_costs.get(iv.name), phase)
                le = layers.get(iv.name)
                args = {"layer": iv.name, "kind": timing.kinds.get(iv.name, ""), "call": iv.call, "phase": phase,
                        "flops": w, "bytes": q}
                if le is not None:
                    args.update(self_time_ms=le.time_s * 1e3, energy_mj=_num(le.energy_j * 1e3),
                                host_self_time_ms=le.host_s * 1e3, method=le.label)
                ev.append({"ph": "X", "cat": "cpu_op", "name": iv.name, "pid": pid, "tid": tid,
                           "ts": _us(iv.t0_ns), "dur": iv.duration_ns / 1000.0, "args": args})
        if power is not None and power_window is None:
            _counters(ev, power, timing.t0_ns, timing.t1_ns, pid, _us)
    if power is not None and power_window is not None:
        _counters(ev, power, power_window[0], power_window[1], pid, _us)
    doc = {"schemaVersion": 1, "displayTimeUnit": "ms", "traceEvents": ev,
           "traceName": process_name}
    if metadata:
        doc["metadata"] = dict(metadata)
    return doc


def _counters(ev: list, power: Callable[[int, int], Any], t0_ns: int, t1_ns: int, pid: int,
              us: Callable[[int], float]) -> None:
    try:
        s = power(t0_ns, t1_ns)
    except Exception:  # noqa: BLE001 - a trace without counters is still a trace
        s = None
    if s is None or not len(s.t_ns):
        return
    rails = tuple(getattr(s, "rails", ()) or ())
    for i in range(len(s.t_ns)):
        ts = us(int(s.t_ns[i]))
        p = float(s.power_w[i])
        if math.isfinite(p):
            ev.append({"ph": "C", "name": "power total (W)", "pid": pid, "ts": ts, "args": {"W": p}})
        for k, rail in enumerate(rails):
            v = float(s.rails_w[i, k])
            if math.isfinite(v):
                ev.append({"ph": "C", "name": f"power {rail} (W)", "pid": pid, "ts": ts, "args": {"W": v}})


STEP_MARK = "lightning_edge: "
"""The name's start of the annotation :func:`mark_step` leaves in a running ``torch.profiler``'s trace."""


def mark_step(label: str) -> None:
    """A step of ours begins (``label``: ``"train step 3"``): while a ``torch.profiler`` records (this thread's
    autograd profiler on), leave an annotation named ``STEP_MARK + label`` in its trace, so :func:`merge_into` puts
    our spans on the trace's clock by the step's own start rather than by two clocks' offset (on a VM that offset
    moves by up to 0.25 ms from one reading to the next, as long as a small layer's span). A flag read otherwise."""
    import torch

    if torch.autograd._profiler_enabled():
        with torch.profiler.record_function(STEP_MARK + label):
            pass


def _marked_offset_us(evs: list, steps: list[tuple[Any, Any, str]], off_us: float) -> float | None:
    """The offset (microseconds) from our clock to the trace's, from the annotations :func:`mark_step` left (their
    end: a first annotation of a process takes a millisecond, and the step's start is read after it): each traced
    step paired with its label's annotation nearest where the clocks' offset ``off_us`` puts it (a label
    repeats when a session runs again), their median; None when no step has one."""
    marks: dict[str, list[float]] = {}
    for e in evs:
        name = e.get("name") if isinstance(e, dict) else None
        if isinstance(name, str) and name.startswith(STEP_MARK) and e.get("ph") == "X":
            t, d = _num(e.get("ts")), _num(e.get("dur"))
            if t is not None and d is not None and abs(t) < _MAX_TIME and 0 <= d < _MAX_TIME:
                marks.setdefault(name[len(STEP_MARK):], []).append(t + d)  # its end: our step's clock read next
    got = []
    for timing, _, label in steps:
        ours = timing.t0_ns / 1000.0
        near = min(marks.get(label, ()), key=lambda t: abs(t - ours - off_us), default=None)
        if near is not None:
            got.append(near - ours)
    return statistics.median(got) if got else None


def merge_into(path: str | os.PathLike[str], steps: Iterable[tuple[Any, Any, str]], *, epoch_offset_ns: int,
               power: Callable[[int, int], Any] | None = None,
               costs: Mapping[str, Any] | Callable[[Any], Mapping[str, Any]] | None = None,
               metadata: Mapping | None = None) -> int:
    """Add lightning_edge's layer spans (FLOP, bytes, energy as args) and power counter tracks to a trace written by
    ``torch.profiler`` (Kineto's Chrome trace: ``ts`` in microseconds after ``baseTimeNanoseconds``), as a
    process of their own (``MERGED_PID``), so torch-tb-profiler and Perfetto show operators and power together.

    ``steps`` are ``(StepTiming, StepEnergy, label)`` on this process's ``perf_counter_ns`` clock and
    ``epoch_offset_ns`` is ``time.time_ns() - time.perf_counter_ns()``, used where the trace holds none of our
    steps' annotations (:func:`mark_step`). Only what falls inside the trace's window is added; power covers the
    whole window. ``metadata`` (with ``clock``: how our spans were put on the trace's clock) goes to the file's top
    level under ``lightning_edge``. Plain or gzipped files. Returns the number of events added (0: nothing
    overlapped, the file is left as it was)."""
    import gzip

    p = Path(path)
    gz = p.name.endswith(".gz")
    # the file is replaced afterwards, so a link there is refused (the writer refuses it too), before any work
    doc = read_json(p, lambda why: ValueError(f"{p} {why}; expected a Chrome trace written by torch.profiler"),
                    limit=MAX_TRACE_BYTES, expect=dict, follow_symlinks=False, gzipped=gz)
    evs = doc.get("traceEvents")
    if not isinstance(evs, list):
        raise ValueError(f"{p}: not a Chrome trace (no traceEvents list)")
    if any(e.get("pid") == MERGED_PID for e in evs if isinstance(e, dict)):
        return 0  # merged already
    base = doc.get("baseTimeNanoseconds", 0) or 0
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not -_MAX_TIME < base < _MAX_TIME:  # NaN too
        raise ValueError(f"{p}: baseTimeNanoseconds: expected a number of nanoseconds, got {one_line(repr(base), 40)}")
    spans: list[tuple[float, float]] = []  # (ts, dur) of every complete event with a time
    for e in evs:
        t = _num(e.get("ts")) if isinstance(e, dict) and e.get("ph") == "X" else None
        if t is not None and abs(t) < _MAX_TIME:
            d = _num(e.get("dur")) or 0.0
            spans.append((t, d if abs(d) < _MAX_TIME else 0.0))
    if not spans:
        return 0
    lo = min(t for t, _ in spans)
    hi = max(t + d for t, d in spans)
    steps = list(steps)
    off_us = (int(epoch_offset_ns) - base) / 1000.0
    marked = _marked_offset_us(evs, steps, off_us)
    if marked is not None:
        off_us = marked
    metadata = {**(metadata or {}), "clock": "aligned on our steps' annotations" if marked is not None else
                "aligned by this machine's clocks' offset (no step annotation in the trace)"}
    window = (int((lo - off_us) * 1000), int((hi - off_us) * 1000))  # on our clock
    inside = [st for st in steps if st[0].t1_ns >= window[0] and st[0].t0_ns <= window[1]]
    ours = chrome_trace(inside, power=power, costs=costs, pid=MERGED_PID,
                        process_name="lightning_edge: layers, energy and power",
                        ts_offset_us=off_us, power_window=window)["traceEvents"]
    added = [e for e in ours if e["ph"] == "M" or lo - 1e3 <= float(e.get("ts", lo)) <= hi + 1e3]
    if not [e for e in added if e["ph"] != "M"]:
        return 0
    evs.extend(added)
    doc["lightning_edge"] = metadata  # ours at the top level (a trace's own "metadata" is left as it was)
    text = json.dumps(doc, separators=(",", ":"), allow_nan=False)
    write_output(p, gzip.compress(text.encode()) if gz else text, what="trace")  # replaced whole, or left as it was
    return len(added)


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def write_trace(doc: Mapping, path: str | os.PathLike[str]) -> Path:
    """Write the trace (creating the directories) atomically (:func:`lightning_edge._jsonfile.write_output`: a full
    or read-only disk leaves an earlier file whole; a link, a device or a folder there is refused); ``OSError`` naming
    the path and why when it cannot be written. Returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    # the C encoder: json.dump's is Python's
    return write_output(p, json.dumps(doc, separators=(",", ":"), allow_nan=False), what="trace")

