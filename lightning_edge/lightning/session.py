"""The profiling session behind the Lightning callbacks: which steps to profile, timing, power, attribution.

No Lightning import: :class:`~lightning_edge.lightning.reporter.EnergyReporter` (TensorBoard, the loggers, reports)
drives it, and the callbacks are thin glue over that reporter. A plain training loop can drive the session itself::

    session = EnergySession(model, device="sim:orin-agx")
    session.subscribe(on_step=lambda stage, index, gstep, m, profiled: print(m.time_s, m.energy_j, m.label))
    for batch in loader:
        session.step_begin("train", batch)
        loss = model(batch).sum(); session.mark("(backward)", "bwd"); loss.backward(); opt.step()
        session.step_end("train")                 # measures the step once and publishes it when its numbers are known
    session.epoch_end("train")
    session.close()

How a step flows (docs/architecture.md, "A step"): ``step_begin`` reads the board's mode and starts the step's
clock; ``step_end`` stops it and queues the step; the step is *resolved* as soon as its numbers are known (on the
twin at once: the board's one step meter, :meth:`~lightning_edge.lightning.steps.StepLoop.twin_meter`, gives its
simulated time and power; on a board with a sensor when the sampler has a reading after the step: its energy over
the step's window, integrated once, by the sampler; without a sensor, estimated from the profiled steps' power).
A resolved step is one immutable :class:`~lightning_edge.records.Measurement`, appended to ``totals[stage]`` and
published to the subscribers (the reporter writes it to TensorBoard and the Trainer's loggers; the tuner of the same
Trainer trains its windows on it). A profiled step is attributed per layer when it is resolved
(:class:`ProfiledStep`: its timing, its layers, the same Measurement).

The session has three parts, one job each: ``schedule`` (:class:`~lightning_edge.lightning.schedule.StepScheduler`:
every ``every_n_steps``-th step is profiled per layer, warm-up and settling skipped, "auto" N within the budget),
``twin`` (a :class:`~lightning_edge.lightning.twin_driver.TwinDriver` when the device is a twin: its per-layer model
of the captured workload) and resolution/attribution, its own. What it may spend is one
:class:`~lightning_edge.lightning.budget.OverheadBudget` (``budget``). The model's calls come from the model's shared
capture (:func:`~lightning_edge.cost.shared.shared_capture`), which the tuner and the interleaver of the same Trainer
ask too, so a step is captured and analysed once.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lightning_edge.cost.capture import batch_size
from lightning_edge.cost.shared import CapturedStep, FirstStep, shared_capture
from lightning_edge.devices.board import JETSON_SETTLE_S, Board, get_board
from lightning_edge.lightning.budget import DISPATCH_FACTOR, OverheadBudget
from lightning_edge.lightning.config import ProfilerConfig, configure
from lightning_edge.lightning.schedule import AUTO_START, StepScheduler
from lightning_edge.lightning.steps import shared_loop
from lightning_edge.lightning.twin_driver import TwinDriver
from lightning_edge.profiling.attribution import (
    ESTIMATED,
    StepEnergy,
    attribute_step,
    label_of,
    model_energies,
    simulated_step,
)
from lightning_edge.profiling.hooks import LayerTimer, StepTiming
from lightning_edge.records import Measurement, merge

__all__ = ["EnergySession", "ProfiledStep", "Epoch", "mode_runs", "AUTO_START"]

STAGES = ("train", "validate", "test", "predict")


@dataclass
class ProfiledStep:
    """One profiled step, attributed: its timing (intervals), its layers (``energy``: the per-layer split) and its
    record (``step``, the same :class:`~lightning_edge.records.Measurement` as in ``totals``)."""

    stage: str
    index: int
    global_step: int
    timing: StepTiming
    energy: StepEnergy
    step: Measurement

    @property
    def mode(self) -> str | None:
        return None if self.step.mode is None else str(self.step.mode)

    @property
    def samples(self) -> int | None:
        return self.step.samples


@dataclass
class Epoch:
    """An epoch of one stage: ``total`` (one Measurement: the sampler over the epoch's wall window, or its steps
    merged), ``runs`` (:func:`mode_runs`: the steps of each power mode in order, a tuner's profiling windows apart),
    and the DDP ``ranks`` and energy ``domains`` the total covers."""

    stage: str
    epoch: int
    total: Measurement
    runs: list[dict] = field(default_factory=list)
    ranks: int = 1
    domains: int = 1

    @property
    def energy_j(self) -> float:
        return self.total.energy_j

    @property
    def time_s(self) -> float:
        return self.total.time_s

    @property
    def steps(self) -> int:
        return self.total.steps

    @property
    def samples(self) -> int:
        return int(self.total.samples or 0)

    @property
    def label(self) -> str:
        return self.total.shown_label

    @property
    def readings(self) -> Any:
        return self.total.readings

    @property
    def j_per_sample(self) -> float:
        return self.energy_j / self.samples if self.samples else math.nan


@dataclass
class _Open:
    """A step that ended and waits for its numbers (its window, mode, timing, the twin's reading)."""

    stage: str
    index: int
    global_step: int
    t0_ns: int
    t1_ns: int
    samples: int | None
    mode: str | None
    settled: bool = True  # not within the board's settling time of a mode change (on the twin: the meter says)
    timing: StepTiming | None = None
    reading: Measurement | None = None
    energy: StepEnergy | None = None  # a profiled step's layers, attributed (possibly before its turn)


def mode_runs(steps: list[Measurement], windows: dict[int, str] | None = None, first: int = 0) -> list[dict]:
    """Steps (in order; the first is the stage's step ``first``) as runs of one power mode, a tuner's profiling
    windows apart (``windows``: step index -> window name): each run's mode, window (None outside them), first step,
    steps, time, energy, mean power (the run merged: :func:`~lightning_edge.records.merge`) and label."""
    windows = windows or {}
    out: list[dict] = []
    cur: list[Measurement] = []
    key = None
    start = first
    for i, m in enumerate(steps, start=first):
        k = (str(m.mode), windows.get(i))
        if cur and k != key:
            out.append(_run(cur, key, start))
            cur = []
        if not cur:
            start, key = i, k
        cur.append(m)
    if cur:
        out.append(_run(cur, key, start))
    return out


def _run(ms: list[Measurement], key: tuple, first: int) -> dict:
    m = merge(ms)
    return {"mode": key[0] if key[0] != "None" else "unknown", "window": key[1], "first_step": first,
            "steps": m.steps, "time_s": m.time_s, "energy_j": m.energy_j, "power_w": m.power_w,
            "method": m.shown_label, "measurement": m}


class EnergySession:
    """See the module docstring. ``config``: a :class:`~lightning_edge.lightning.config.ProfilerConfig` (or its
    fields as keyword arguments); ``budget``: an :class:`~lightning_edge.lightning.budget.OverheadBudget` to spend
    (default: one with ``overhead_target`` as its fraction, on ``clock_ns``)."""

    def __init__(self, model: Any, device: Any = "auto", config: ProfilerConfig | None = None, *,
                 budget: OverheadBudget | None = None, clock_ns: Callable[[], int] = time.perf_counter_ns,
                 keep_timings: int | None = None, **options: Any) -> None:
        cfg = self.config = configure(config, ProfilerConfig, **options)
        self.budget = budget if budget is not None else OverheadBudget(cfg.overhead_target, clock_ns=clock_ns)
        self.schedule = StepScheduler(cfg.every_n_steps, cfg.warmup_steps, self.budget, cfg.settle_s)
        self.model = model
        self.device_arg = device
        self.k = float(cfg.k)
        self.analyze = cfg.analyze
        # the model's shared capture (the tuner and the interleaver of the same Trainer ask it too)
        self.captures = shared_capture(model) if cfg.analyze and cfg.cost is None and hasattr(model, "named_modules") \
            else None
        self._first: dict[bool, FirstStep] = {}  # training? -> this session's first step of that kind
        self.loop = shared_loop(model)
        self._capturing: str | None = None  # the stage whose step this session is capturing
        self._deferred: dict[str, tuple[CapturedStep, int | None]] = {}  # captured, analysis not yet decided
        self._n_modules: int | None = None  # the modules the timer hooks (see _module_calls)
        self.clock_ns = clock_ns
        self.keep_timings = int(cfg.trace_steps if keep_timings is None else keep_timings)
        self.timer = LayerTimer(model, depth=cfg.depth, include=cfg.include, clock_ns=clock_ns, cuda=cfg.cuda)
        self.device: Board | None = None
        self.sampler: Any = None
        self.meter: Any = None  # the twin's step meter (the StepLoop's: one per board and model)
        self.twin: TwinDriver | None = None  # when the device is a twin (and no cost= is given)
        self.started = False
        self.sync = False  # resolve every step at its end (a tuner waits for it)
        self.costs: dict[bool, dict[str, Any]] = {}  # training? -> {layer name: LayerCost}
        self.cost_notes: list[str] = []
        self.profiled: dict[str, list[ProfiledStep]] = {}
        self.totals: dict[str, list[Measurement]] = {}  # every resolved step, in order (index = position)
        self.windows: dict[str, dict[int, str]] = {}  # stage -> {step index: the tuner's window it belongs to}
        self.epochs: list[Epoch] = []
        self.notes: list[str] = []
        self.roofline_desc = ""
        self._open: list[_Open] = []
        self._subscribers: list[dict[str, Callable | None]] = []
        self._current: tuple | None = None  # stage, profiling?, t0, batch, mode
        self._batch_sizes: dict[str, int | None] = {}
        self._roof_cache: dict[str | None, tuple[Any, str]] = {}
        self._power_cache: dict[str, tuple[Any, float | None]] = {}  # stage -> (last profiled step, mean power)
        self._epoch_first: dict[str, int] = {}  # stage -> the index of its open epoch's first step
        self._change: tuple[str | None, float] = (None, 0.0)  # the mode last seen, simulated seconds in it
        self._seen: tuple[str | None, int | None] = (None, None)  # the mode last seen, when it was first seen (ns)
        self._cpu_end: tuple[str, int] | None = None  # (stage, this thread's CPU time at its last step's end)

    @property
    def mode(self) -> str | None:
        """The power mode the session last saw."""
        return self.schedule.mode

    @property
    def expected_batches(self) -> dict[str, int | None]:
        """Per stage, the batches this run (a Trainer call) is expected to have, as announced by :meth:`expect`."""
        return self.budget.expected

    def new_run(self) -> None:
        """A new run (a Trainer call) starts: its expected lengths and its overhead budget start afresh."""
        self.schedule.new_run()
        self.budget.start()

    def expect(self, stage: str, batches: int | None) -> None:
        """How many batches of ``stage`` this run (a Trainer call) is expected to have (None: unknown)."""
        self.budget.expect(stage, batches)

    def subscribe(self, on_step: Callable | None = None, on_profiled: Callable | None = None,
                  on_epoch: Callable | None = None) -> None:
        """Hear every resolved step (``on_step(stage, index, global_step, measurement, profiled)``; ``profiled``:
        its :class:`ProfiledStep` or None), every attributed profiled step (``on_profiled(list of ProfiledStep)``,
        charged to the budget's attribution) and every closed epoch (``on_epoch(Epoch)``)."""
        self._subscribers.append({"step": on_step, "profiled": on_profiled, "epoch": on_epoch})

    def _publish(self, kind: str, *args: Any) -> None:
        for sub in self._subscribers:
            fn = sub.get(kind)
            if fn is not None:
                fn(*args)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> EnergySession:
        if self.started:
            return self
        self.device = get_board(self.device_arg)
        # the board's one sampler: the tuner's meter on the same board integrates the same readings
        self.sampler = self.device.sampler(rate_hz=self.config.sampler_rate_hz, clock_ns=self.clock_ns)
        if self.schedule.settle_s is None:
            # on the twin a profiled step's layers are the model's rows scaled to the step's one number, so the power's
            # settling does not bend them: only the warm-up after a change is skipped there, unless settle_s is given
            board_settles = self.device.controller is not None and self.device.twin is None
            self.schedule.settle_s = JETSON_SETTLE_S if board_settles else 0.0
        if self.device.twin is not None and self.config.cost is None:
            self.twin = TwinDriver(self.device.twin, self.model, self.timer.root_name, self.notes,
                                   host_cpu_s=self.config.host_cpu_s, live=self.device.live)
            self.meter = self.loop.twin_meter(self.device)
        self.schedule.mode = self.device.mode()
        self._change = (self.schedule.mode, math.inf)  # the mode found at the start: no change to settle from
        self._seen = (self.schedule.mode, None)
        self.started = True
        return self

    def close(self) -> None:
        """Stop the sampler and release the device (idempotent). Results stay available."""
        if self.timer.active:
            self.timer.abort()
        self._abort_capture()
        if self.twin is not None:
            self.twin.end()
        if self.started and self.device is not None:  # once: the board is shared, each user closes it once
            if self.sampler is not None:
                self.device.release_sampler()  # its readings stay available (self.sampler) once the board stops it
            self.device.close()
        self.started = False

    def abort_step(self) -> None:
        """Drop the step in progress (an exception in the training step): hooks removed."""
        self.timer.abort()
        self._abort_capture()
        self._current = None

    def _abort_capture(self) -> None:
        if self._capturing is not None and self.captures is not None:
            self._first_step(self._capturing).abort()
        self._capturing = None

    def _first_step(self, stage: str) -> FirstStep:
        training = stage == "train"
        if training not in self._first:
            self._first[training] = FirstStep(self.model, training)
        return self._first[training]

    # ------------------------------------------------------------------ per step
    def _stage(self, stage: str) -> Any:
        if stage not in self.schedule.stages:
            self.profiled.setdefault(stage, [])
            self.totals.setdefault(stage, [])
        return self.schedule.stage(stage)

    def _mode_now(self) -> str | None:
        """The board's mode as the step starts (after a tuner's switch); the scheduler tracks it."""
        if self.device is None or self.device.controller is None:
            return self.schedule.mode
        return self.device.mode()

    def _since_change_s(self, mode: str | None, t0_ns: int) -> float:
        """Seconds since the board's mode changed (to ``mode``, seen at the start of a step): on the twin, simulated
        seconds (the steps' simulated times since the change); else this machine's, since the session saw it (the
        mode found at the start counts as settled)."""
        if self.meter is not None:
            return self._change[1] if self._change[0] == mode else 0.0
        last, at = self._seen
        if mode != last:
            self._seen = (mode, t0_ns)
            return 0.0
        return math.inf if at is None else (t0_ns - at) / 1e9

    def step_begin(self, stage: str, batch: Any = None) -> bool:
        """A step of ``stage`` starts; returns True when it is profiled per layer."""
        with self.budget.spend("steps"):
            if not self.started:
                self.start()
            if self.timer.active:  # the previous step never ended (an exception Lightning swallowed)
                self.timer.abort()
            st = self._stage(stage)
            if self.twin is not None:
                self.twin.follow(stage == "train", self._batch_sizes.get(stage))
                self._cpu_gap(stage)
            mode = self._mode_now()
            since_s = self._since_change_s(mode, self.clock_ns())
            capture = not st.captured and self._capture_now(stage)
            if capture:  # never profiled, but its mode is tracked like every step's (a change in it holds the next back)
                self.schedule.mode_ok(mode, since_s, self.notes)
            profile = not capture and self.schedule.should_profile(
                stage, mode, since_s, self.notes, self._module_calls, self._owed_s(stage))
            if profile:
                self.timer.backward = True
                region = "(forward)" if stage == "train" else f"({stage})"
                t0 = self.clock_ns()
                # the step's label in a running torch.profiler's trace: merge_into aligns on it
                self.timer.start_step(region, "fwd" if stage == "train" else "other",
                                      step_label=f"{stage} step {st.batches}")
            else:
                t0 = self.clock_ns()
            if self.meter is not None:
                self.meter.start()
            if st.epoch_t0 is None:
                st.epoch_t0 = t0
                self._epoch_first[stage] = st.batches
            self._current = (stage, profile, t0, batch, mode, since_s >= (self.schedule.settle_s or 0.0))
            return profile

    def _cpu_gap(self, stage: str) -> None:
        """This thread's CPU time since the stage's previous step ended: the CPU work outside the layers (fetching
        and collating the batch, the loop's Python) as the twin runs it on the board's CPU. CPU time, not wall time:
        other processes taking this machine's cores do not move it."""
        now = time.thread_time_ns()
        last = self._cpu_end
        if last is not None and last[0] == stage and self.twin is not None:
            self.twin.add_gap("train" if stage == "train" else "infer", (now - last[1]) / 1e9)

    def _capture_now(self, stage: str) -> bool:
        """Whether this step is the stage's capture step: the model's calls are taken from its shared capture,
        which captures this step unless a step of its kind is already kept (by this session in an earlier run, or
        by another callback of the Trainer: then nothing is hooked for it)."""
        if self.captures is None or (stage == "train") in self.costs:
            return False
        known = self._first_step(stage).begin()
        if known is not None:  # captured already: decided at this step's end, like a capture of our own
            self._deferred[stage] = (known, None)
            self.schedule.stages[stage].captured = True
            return False
        self._capturing = stage
        return True

    def _owed_s(self, stage: str) -> float:
        """Work owed before a first profiled step of ``stage``: its cost analysis when it is not decided yet."""
        got = self._deferred.get(stage)
        if got is None or got[0].analysed or got[0].training in self.costs:
            return 0.0
        return self.budget.need_s("analysis", got[0].module_calls, got[0].training)

    def mark(self, region: str, phase: str = "other") -> None:
        """Time outside every module now belongs to ``region`` (``"(backward)"``, ``"(optimizer)"``)."""
        if self.timer.active:
            self.timer.mark(region, phase)

    def step_end(self, stage: str, global_step: int | None = None) -> Measurement | None:
        """The step ends: it is queued, and published with every step before it whose numbers are known (all of them
        with :attr:`sync`). Returns its Measurement when it was resolved now (None: later, or no step was open)."""
        cur = self._current
        if cur is None or cur[0] != stage:
            return None
        # the timer stops first: its window lies inside the step's (a profiled step's energy, over the timer's
        # window, never exceeds the step's time x the power); its stop is in its own hook time
        timing = self.timer.stop_step() if self.timer.active else None
        t1 = self.clock_ns()
        with self.budget.spend("steps"):
            p = self._step_end(stage, global_step, cur, timing, t1)
            self.flush(wait=self.sync)
        if self.twin is not None:
            self._cpu_end = (stage, time.thread_time_ns())
        lst = self.totals.get(stage) or []
        return lst[p.index] if p.index < len(lst) else None

    def _step_end(self, stage: str, global_step: int | None, cur: tuple, timing: StepTiming | None,
                  t1: int) -> _Open:
        _, profiled, t0, batch, mode, settled = cur
        self._current = None
        sch = self.schedule
        st = self._stage(stage)
        sch.steps += 1
        samples = batch_size(batch)
        index = st.batches
        st.batches += 1
        gstep = index if global_step is None else int(global_step)
        dur = t1 - t0
        sch.run_ns += dur
        st.epoch_t1 = t1
        p = _Open(stage, index, gstep, t0, t1, samples, mode, settled)
        capture = self._capturing == stage
        if capture:  # the capture step: a warm-up step, never reported nor timed for the budget
            self._capturing = None
            step = self._first_step(stage).end()
            st.captured = True
            st.since_profiled += 1
            if step is not None:
                self.budget.charge("capture", DISPATCH_FACTOR * step.captured.hook_ns / 1e9)
            self._captured(stage, step, samples)
        elif timing is None:
            sch.plain_step(stage, dur)
        else:
            extra_s = sch.profiled_step(stage, timing.hook_ns, self._module_calls)
            self.budget.step(stage, max(dur / 1e9 - extra_s, 0.0))  # what the step would have taken
            p.timing = timing
        if not capture and stage in self._deferred:  # decided now that a step's time is known
            self._decide_analysis(stage, samples)
        p.reading = self._simulated_reading(stage, mode, samples)
        self._open.append(p)
        return p

    def _simulated_reading(self, stage: str, mode: str | None, samples: int | None) -> Measurement | None:
        """The twin's step from the board's one meter (its simulated time and power, noise and settling
        included), when the twin models this stage's workload; it also moves the simulated seconds in the mode."""
        if self.meter is None or self.twin is None:
            return None
        kind = "train" if stage == "train" else "infer"
        if self.meter.workloads.get(kind) is None and not self.twin.bind_meter(self.meter, kind, samples):
            return None
        try:
            m = self.meter.stop(mode, kind, samples)
        except Exception as exc:  # noqa: BLE001 - the twin cannot model this step: the sensor's readings instead
            self._note(f"the twin could not simulate a {stage} step ({type(exc).__name__}: {exc}): its power is the "
                       "simulated sensor's over this machine's time")
            return None
        last, secs = self._change
        self._change = (mode, (secs if last == mode else 0.0) + m.time_s)
        return m

    # ------------------------------------------------------------------ cost model
    @property
    def _module_calls(self) -> int:
        """The model's module calls per step, estimated by the modules the timer hooks (counted once)."""
        if self._n_modules is None:
            self._n_modules = len(self.timer.selected())
        return self._n_modules

    def _captured(self, stage: str, step: CapturedStep | None, samples: int | None) -> None:
        """The capture step ended: analyse now, or (``analyze="auto"`` on a run of known length, not the twin)
        at the next step, once a step's time says what the run's budget is."""
        if step is None:
            self.costs.setdefault(stage == "train", {})
            self.cost_notes.append(f"cost model: no call of {type(self.model).__name__}'s modules was captured in the "
                                   f"first {stage} step: layers are apportioned by time only")
            return
        if self.analyze == "auto" and self.twin is None and self.expected_batches.get(stage) is not None \
                and not step.analysed:
            self._deferred[stage] = (step, samples)
            self._batch_sizes[stage] = samples
            return
        self._timed_analyze(stage, step, samples)

    def _decide_analysis(self, stage: str, samples: int | None) -> None:
        """Run the deferred analysis when it fits the run's budget with a first profiled step and the reports kept,
        else skip it, saying so (an analysis already made by another caller of the shared capture costs nothing)."""
        step, cap_samples = self._deferred.pop(stage)
        samples = cap_samples if cap_samples is not None else samples
        if step.analysed or step.training in self.costs or self.analyze is True or self.twin is not None \
                or self.expected_batches.get(stage) is None:
            self._timed_analyze(stage, step, samples)
            return
        b = self.budget
        need_s = b.need_s("analysis", step.module_calls, step.training)
        st = self.schedule.stages[stage]
        keep_s = b.need_s("reports") + (0.0 if st.n_profiled else b.need_s("profiled", self._module_calls))
        if b.afford(need_s, keep_s):
            self._timed_analyze(stage, step, samples)
            return
        self.costs[step.training] = {}
        self.cost_notes.append(
            f"cost model skipped for {stage}: the analysis takes about {need_s * 1e3:.0f} ms, over this run's overhead "
            f"budget ({b.allowance_s():.2g} s: the larger of {100 * b.fraction:.3g} % of {b.run_s():.3g} s and "
            f"{b.floor_s:g} s, with room for a profiled step and the reports): layers are apportioned by time only "
            "(EnergyProfiler(analyze=True) always runs it)")

    def _timed_analyze(self, stage: str, step: CapturedStep, samples: int | None) -> None:
        ran = not step.analysed and step.training not in self.costs
        warm = "torch._dynamo" in sys.modules  # else this analysis pays its import, which says nothing of the next
        with self.budget.spend("analysis"):
            self._analyze(stage, step, samples)
        if ran and warm and step.analysis_s is not None and self.costs.get(step.training):
            self.budget.learn("analysis", step.analysis_s, step.module_calls, step.training)

    def _analyze(self, stage: str, step: CapturedStep, samples: int | None) -> None:
        training = step.training
        self._batch_sizes[stage] = samples
        if training in self.costs:
            if self.twin is not None:
                self.twin.begin(training, samples)
            return
        # the shared capture (lightning_edge.cost.capture): every outermost call of the step, positional and keyword,
        # analysed once (whoever asks first) and merged into one ModelCost named as in the model
        costs: dict[str, Any] = {}
        try:
            cost = step.cost()
        except Exception as exc:  # noqa: BLE001 - a model the counter cannot run: time-based weights
            msg = str(exc).splitlines()[0] if str(exc) else ""
            self.cost_notes.append(f"cost model failed ({type(exc).__name__}: {msg}): layers are apportioned by time "
                                   "only")
            self.costs[training] = costs
            return
        self.cost_notes.extend(n for n in cost.notes if n not in self.cost_notes)
        for layer in cost.layers:
            costs[layer.name or self.timer.root_name] = layer
        self.costs[training] = costs
        if self.twin is not None:
            self.twin.add_cost(cost, training)
            self.twin.begin(training, samples)

    def twin_model(self, stage: str, mode: str | None = None) -> tuple[Any, dict[str, str]] | None:
        """The twin's per-layer model of the stage's captured workload in ``mode`` (default: the board's mode now):
        ``(LayerTimes, {twin row name: profiler layer name})``, or None when there is no twin, no cost or no mode."""
        if self.twin is None:
            return None
        mode = mode if mode is not None else (self.device.mode() if self.device is not None else None)
        if mode is None:
            return None
        return self.twin.layer_model(stage == "train", mode, self._batch_sizes.get(stage))

    @property
    def twin_times(self) -> bool:
        """True when the layers' and steps' times and energies are the twin's model of the workload."""
        return self.twin is not None and self.twin.times

    def costs_for(self, training: bool) -> dict[str, Any]:
        if self.config.cost is not None:
            return {layer.name or self.timer.root_name: layer for layer in getattr(self.config.cost, "layers", [])}
        return self.costs.get(training) or self.costs.get(not training) or {}

    def roofline(self, mode: str | None) -> tuple[Any, str]:
        if self.config.roofline is not None:
            r = self.config.roofline
            return r, getattr(r, "label", "") or "user roofline"
        hit = self._roof_cache.get(mode)
        if hit is None:
            hit = self.device.roofline(mode) if self.device is not None else (None, "no roofline")
            self._roof_cache[mode] = hit
        return hit

    # ------------------------------------------------------------------ resolution and attribution
    def _ready(self, t1_ns: int, wait: bool) -> bool:
        if self.sampler is None or not self.sampler.energy_available:
            return True
        if wait:
            period = max(self.device.update_period_s if self.device else 0.0, 1.0 / self.sampler.rate_hz)
            return self.sampler.wait_for(t1_ns, timeout_s=max(4 * period, 0.05))
        return self.sampler.wait_for(t1_ns, timeout_s=0.0)

    def tag_window(self, stage: str, index: int, window: str | None) -> None:
        """Step ``index`` of ``stage`` belongs to a tuner's profiling window (``window``: its name; None: none):
        the reports show each window apart from the modes trained in."""
        if window is not None:
            self.windows.setdefault(stage, {})[int(index)] = str(window)

    def flush(self, wait: bool = False) -> list[ProfiledStep]:
        """Resolve the steps whose numbers are known (all of them with ``wait=True``; a step without any becomes an
        untrusted estimate without power), in order, and publish them; returns the profiled steps attributed (their
        attribution and what the subscribers do with them are charged to the budget's ``attribution``)."""
        done: list[ProfiledStep] = []
        if not self._open:
            return done
        ready = self._open
        if self.sampler is not None:
            need = [p for p in ready if p.reading is None]
            if wait and need:  # waited for once (a sensor that stopped: what there is is resolved)
                self._ready(need[-1].t1_ns, True)
            elif need:  # a step is ready once it has the twin's reading or the sampler has a reading after it
                n = 0
                for p in ready:
                    if p.reading is None and not self._ready(p.t1_ns, False):
                        break
                    n += 1
                ready = ready[:n]
        if not ready:
            return done
        profiled = any(p.timing is not None for p in ready)
        with self.budget.spend("attribution") if profiled else contextlib.nullcontext():
            steps = self._measure(ready, wait)
            for p, m in steps:
                prof = None
                if p.timing is not None:
                    prof = self._attribute(p, m)
                    done.append(prof)
                self.totals[p.stage].append(m)
                self._publish("step", p.stage, p.index, p.global_step, m, prof)
            self._open = self._open[len(steps):]
            if done:
                self._publish("profiled", done)
                self.budget.attributed()
        return done

    def _measure(self, ready: list[_Open], wait: bool) -> list[tuple[_Open, Measurement]]:
        """The numbers of the steps ready, in order; stops at the first that has none yet (unless ``wait``)."""
        import numpy as np

        src = self.device.source if self.device is not None else "model"
        need = [p for p in ready if p.reading is None]
        energies: dict[int, float] = {}
        if need and self.sampler is not None and self.sampler.energy_available:
            e = self.sampler.energy_j_intervals(np.array([p.t0_ns for p in need]), np.array([p.t1_ns for p in need]))
            energies = {id(p): float(v) for p, v in zip(need, e.tolist())}
        if any(p.timing is not None for p in ready):  # attributed first: a plain step's estimate may need them
            for p in ready:
                if p.timing is not None and p.energy is None:
                    p.energy = self._split(p)
        out: list[tuple[_Open, Measurement]] = []
        for p in ready:
            host_s = max((p.t1_ns - p.t0_ns) / 1e9, 1e-9)
            common = dict(mode=p.mode, t0_ns=p.t0_ns, t1_ns=p.t1_ns, host_time_s=host_s, samples=p.samples)
            v = energies.get(id(p), math.nan)
            if p.reading is not None:  # the twin's step (its meter says whether its power had settled)
                m = p.reading.scaled(**common)
            elif math.isfinite(v):  # the sensor's energy over the step (no valid reading: never "measured")
                q = self.sampler.quality(p.t0_ns, p.t1_ns)
                m = Measurement(host_s, v / host_s, label_of("measured", src, q.is_partial), q.trusted, **common,
                                readings=q, settled=p.settled)
            else:
                # no sensor (or no valid reading): the mean estimated power of the stage's profiled steps (those
                # attributed, else those ready now)
                p_w = p.energy.power_w if p.energy is not None and p.energy.label == ESTIMATED else \
                    self._estimated_power_w(p.stage)
                if p_w is None:
                    got = [q.energy.power_w for q in ready if q.energy is not None and q.stage == p.stage
                           and math.isfinite(q.energy.power_w)]
                    p_w = statistics.fmean(got[-10:]) if got else None
                if p_w is None or not math.isfinite(p_w):
                    if not wait:
                        break
                    m = Measurement(host_s, math.nan, ESTIMATED, False, **common, settled=p.settled)
                else:
                    m = Measurement(host_s, p_w, ESTIMATED, **common, settled=p.settled)
            out.append((p, m))
        return out

    def _split(self, p: _Open) -> StepEnergy:
        """A profiled step's layers: the twin's model of the mode (each row scaled to the step's simulated
        reading, so they sum to it), else the sampler's energy over the timer's window apportioned by the model."""
        timing = p.timing
        selfs = timing.exclusive()
        roof, desc = self.roofline(p.mode)
        self.roofline_desc = desc
        sim = self.twin_model(p.stage, p.mode) if p.reading is not None else None
        if sim is not None:
            return simulated_step(selfs, timing.t0_ns, timing.t1_ns, sim[0], sim[1], samples=p.samples,
                                  training=p.stage == "train", reading=p.reading)
        model = model_energies(selfs, self.costs_for(timing.has_backward), roof)
        source = self.device.source if self.device is not None else "model"
        return attribute_step(selfs, timing.t0_ns, timing.t1_ns, trace=self.sampler,
                              update_period_s=self.device.update_period_s if self.device else None,
                              model_energy_j=model, k=self.k, source=source, samples=p.samples)

    def _attribute(self, p: _Open, m: Measurement) -> ProfiledStep:
        energy = p.energy if p.energy is not None else self._split(p)
        step = ProfiledStep(p.stage, p.index, p.global_step, p.timing, energy, m)
        lst = self.profiled[p.stage]
        lst.append(step)
        if self.keep_timings >= 0 and len(lst) > self.keep_timings:
            old = lst[-self.keep_timings - 1]
            old.timing = _strip(old.timing)
        return step

    def _estimated_power_w(self, stage: str) -> float | None:
        """The mean power of the stage's last 10 profiled steps (None: none yet), recomputed only when one was
        added (every plain step asks)."""
        prof = self.profiled.get(stage) or []
        hit = self._power_cache.get(stage)
        if hit is None or hit[0] is not (prof[-1] if prof else None):
            powers = [s.energy.power_w for s in prof[-10:] if math.isfinite(s.energy.power_w)]
            hit = self._power_cache[stage] = (prof[-1] if prof else None,
                                              statistics.fmean(powers) if powers else None)
        return hit[1]

    # ------------------------------------------------------------------ epochs and results
    def epoch_end(self, stage: str) -> Epoch | None:
        """Close the stage's epoch: its energy (the sampler over the epoch's wall window, or the sum of its steps);
        every step still waiting is resolved first. Published to the subscribers' ``on_epoch``."""
        st = self.schedule.stages.get(stage)
        if st is None or st.epoch_t0 is None:
            return None
        self.flush(wait=True)
        first = self._epoch_first.get(stage, 0)
        steps = self.totals.get(stage, [])[first:]
        if not steps:
            return None
        t0, t1 = st.epoch_t0, st.epoch_t1 or steps[-1].t1_ns
        host_s = max((t1 - t0) / 1e9, 1e-9)
        total = merge(steps)
        if all(s.simulated for s in steps):
            # the twin's steps: the epoch on the board lasts as long as its steps
            total = total.scaled(host_time_s=host_s, t0_ns=t0, t1_ns=t1)
        elif self.sampler is not None:
            e = float(self.sampler.energy_j(t0, t1))
            q = self.sampler.quality(t0, t1)
            if math.isfinite(e):
                src = self.device.source if self.device else "measured"
                total = Measurement(host_s, e / host_s, label_of("measured", src, q.is_partial), q.trusted,
                                    total.mode, t0, t1, host_s, total.steps, total.samples, q)
                if not q.trusted:
                    self.notes.append(f"{stage} epoch {st.epoch}: {q.describe()}; energies over those readings "
                                      "are labelled partial")
            else:  # the trace does not cover the epoch (the sensor stopped): its steps, extrapolated, are an estimate
                total = total.scaled(label=ESTIMATED, trusted=False)
        else:
            total = total.scaled(label=ESTIMATED if not all(s.label == steps[0].label for s in steps)
                                 else steps[0].label)
        ep = Epoch(stage, st.epoch, total, mode_runs(steps, self.windows.get(stage), first))
        self.epochs.append(ep)
        st.epoch += 1
        st.epoch_t0 = st.epoch_t1 = None
        self._publish("epoch", ep)
        return ep

    @property
    def source(self) -> str:
        return self.device.source if self.device is not None else "model"

    def sampler_overhead(self) -> Any:
        return self.sampler.overhead() if self.sampler is not None else None

    def _note(self, msg: str) -> None:
        if msg not in self.notes:
            self.notes.append(msg)


def _strip(t: StepTiming) -> StepTiming:
    """Drop a timing's raw intervals (keep its exclusive times) once it is too old to be traced."""
    t.exclusive()
    t.modules, t.nodes, t.chains, t.inputs, t.captured = [], [], [], {}, None
    return t
