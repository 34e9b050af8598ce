"""The profiling session behind the Lightning callbacks: which steps to profile, timing, power, attribution.

No Lightning import: the callbacks (``lightning_edge.lightning.pytorch`` / ``.pl``) are thin glue that call
``step_begin`` / ``mark`` / ``step_end`` / ``flush`` / ``epoch_end`` from their hooks, and a plain training loop
can do the same::

    session = EnergySession(model, device="sim:orin-agx")
    session.start()
    for batch in loader:
        session.step_begin("train", batch)
        loss = model(batch).sum(); session.mark("(backward)", "bwd"); loss.backward(); opt.step()
        session.step_end("train")
        for done in session.flush(): print(done.energy.energy_j)
    session.close()

The session has three parts, one job each: ``schedule`` (:class:`~lightning_edge.lightning.schedule.StepScheduler`:
every step is timed as a whole, every ``every_n_steps``-th one is profiled per layer, warm-up and settling skipped,
"auto" N within ``overhead_target``; the overhead accounting), ``twin`` (a
:class:`~lightning_edge.lightning.twin_driver.TwinDriver` when the device is the Orin twin: its board runs the
captured workload and its per-layer model gives the Orin's numbers), and attribution, the session's own: a profiled
step is attributed once the power sampler has a sample after it (so the end of the step is interpolated, not held):
``flush()`` returns the steps that are ready; ``flush(wait=True)`` waits for them.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lightning_edge.cost.capture import batch_size
from lightning_edge.devices.board import JETSON_SETTLE_S, Board, get_board
from lightning_edge.lightning.schedule import AUTO_START, DISPATCH_FACTOR, StepScheduler
from lightning_edge.lightning.twin_driver import TwinDriver
from lightning_edge.profiling.attribution import (
    DEFAULT_K,
    ESTIMATED,
    SIMULATED,
    StepEnergy,
    attribute_step,
    label_of,
    model_energies,
    simulated_step,
)
from lightning_edge.profiling.hooks import LayerTimer, StepTiming

__all__ = ["EnergySession", "ProfiledStep", "StepTotal", "EpochTotals", "AUTO_START"]

STAGES = ("train", "validate", "test", "predict")


@dataclass
class ProfiledStep:
    """One profiled step, attributed: its timing (intervals), its energies, the mode it ran in."""

    stage: str
    index: int
    global_step: int
    samples: int | None
    timing: StepTiming
    energy: StepEnergy
    mode: str | None = None


@dataclass
class StepTotal:
    """One step's total (every step, profiled or not): time and energy (``label`` says how it was obtained)."""

    stage: str
    index: int
    global_step: int
    t0_ns: int
    t1_ns: int
    samples: int | None
    energy_j: float = math.nan
    label: str = ESTIMATED
    profiled: bool = False
    mode: str | None = None
    sim_time_s: float | None = None  # the step's time on the twin (its model of the workload), when simulated

    @property
    def host_time_s(self) -> float:
        """The step's wall time on this machine."""
        return (self.t1_ns - self.t0_ns) / 1e9

    @property
    def time_s(self) -> float:
        return self.host_time_s if self.sim_time_s is None else self.sim_time_s


@dataclass
class EpochTotals:
    """An epoch's totals for one stage: energy over its wall window (measured) or the sum of its steps
    (estimated), its samples and J/sample."""

    stage: str
    epoch: int
    energy_j: float
    time_s: float
    steps: int
    samples: int
    label: str
    ranks: int = 1  # DDP ranks and energy domains the totals cover (see EnergyProfiler)
    domains: int = 1
    readings: Any = None  # the sampler's ReadingQuality over the epoch (None without a sensor)
    host_time_s: float = math.nan  # the epoch's wall time on this machine (the same as time_s unless simulated)
    modes: list = field(default_factory=list)  # per power mode the epoch ran in (in order): its steps' totals

    @property
    def j_per_sample(self) -> float:
        return self.energy_j / self.samples if self.samples else math.nan


#: what the cost analysis costs per module call of the step (seconds), training and inference: measured on this
#: machine's first analyses (tiny GPT-2 to MobileNetV2: 0.8-1.5 ms training, 0.3-0.6 ms inference, 2 CPU cores)
#: and replaced by the last measured value in the process
_ANALYSIS_S_PER_CALL: dict[bool, float] = {True: 1.2e-3, False: 0.5e-3}
#: what the first analysis in a process costs on top (torch warms up its meta kernels: ResNet-18 1.4 s, then 0.035 s
#: per analysis, 2 CPU cores); 0 once an analysis has run in the process
_ANALYSIS_WARMUP_S = [1.5]


@dataclass
class _Pending:
    stage: str
    index: int
    global_step: int
    samples: int | None
    timing: StepTiming
    mode: str | None


class EnergySession:
    """See the module docstring. Arguments are those of :class:`~lightning_edge.lightning.EnergyProfiler`."""

    def __init__(self, model: Any, device: Any = "auto", *, every_n_steps: int | str = "auto", warmup_steps: int = 2,
                 depth: int | None = None, include: Any = None, k: float = DEFAULT_K, roofline: Any = None,
                 cost: Any = None, analyze: bool | str = "auto", overhead_target: float = 0.03,
                 settle_s: float | None = None, clock_ns: Callable[[], int] = time.perf_counter_ns,
                 sampler_rate_hz: float | None = None, keep_timings: int = 50,
                 cuda: bool | None = None) -> None:
        self.schedule = StepScheduler(every_n_steps, warmup_steps, overhead_target, settle_s)
        self.model = model
        self.device_arg = device
        self.k = float(k)
        self.roofline_arg = roofline
        self.cost_arg = cost
        if analyze not in (True, False, "auto"):
            raise ValueError(f"analyze must be True (always run the cost model), False (never) or 'auto' (when it "
                             f"fits the overhead budget of the run), got {analyze!r}")
        self.analyze = analyze
        self._deferred: dict[str, tuple[StepTiming, int | None]] = {}  # captured, analysis not yet decided
        self._run_estimate_s: dict[str, float] = {}  # per stage: expected run time (plain step time x batches)
        self._approved: set[str] = set()  # stages whose capture step was decided affordable before it ran
        self._n_modules: int | None = None  # the modules the timer hooks (see _module_calls)
        self.clock_ns = clock_ns
        self.sampler_rate_hz = sampler_rate_hz
        self.keep_timings = int(keep_timings)
        self.timer = LayerTimer(model, depth=depth, include=include, clock_ns=clock_ns, cuda=cuda)
        self.device: Board | None = None
        self.sampler: Any = None
        self.twin: TwinDriver | None = None  # when the device is the Orin twin (and no cost= is given)
        self.started = False
        self.costs: dict[bool, dict[str, Any]] = {}  # training? -> {layer name: LayerCost}
        self.cost_notes: list[str] = []
        self.profiled: dict[str, list[ProfiledStep]] = {}
        self.totals: dict[str, list[StepTotal]] = {}
        self.epochs: list[EpochTotals] = []
        self.notes: list[str] = []
        self.roofline_desc = ""
        self._pending: list[_Pending] = []
        self._unconsumed: list[ProfiledStep] = []
        self._pending_totals: list[StepTotal] = []
        self._current: tuple[str, bool, int, Any] | None = None  # stage, profiling?, t0, batch
        self._batch_sizes: dict[str, int | None] = {}
        self._roof_cache: dict[str | None, tuple[Any, str]] = {}
        self._power_cache: dict[str, tuple[Any, float | None]] = {}  # stage -> (last profiled step, mean power)

    @property
    def mode(self) -> str | None:
        """The power mode the session last saw."""
        return self.schedule.mode

    @property
    def expected_batches(self) -> dict[str, int | None]:
        """Per stage, the batches this run (a Trainer call) is expected to have, as announced by :meth:`expect`."""
        return self.schedule.expected

    def new_run(self) -> None:
        """A new run (a Trainer call) starts: its expected lengths and its overhead budget start afresh."""
        self.schedule.new_run()
        self._run_estimate_s.clear()
        self._approved.clear()

    def expect(self, stage: str, batches: int | None) -> None:
        """How many batches of ``stage`` this run (a Trainer call) is expected to have (None: unknown). With
        ``analyze="auto"`` it sets the overhead budget the cost analysis must fit in."""
        self.schedule.expected[stage] = None if batches is None or batches <= 0 else int(batches)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> EnergySession:
        if self.started:
            return self
        self.device = get_board(self.device_arg)
        # the board's one sampler: the tuner's meter on the same board integrates the same readings
        self.sampler = self.device.sampler(rate_hz=self.sampler_rate_hz, clock_ns=self.clock_ns)
        if self.schedule.settle_s is None:
            self.schedule.settle_s = JETSON_SETTLE_S if self.device.controller is not None else 0.0
        if self.device.twin is not None and self.cost_arg is None:
            self.twin = TwinDriver(self.device.twin, self.model, self.timer.root_name, self.notes)
        self.schedule.mode = self.device.mode()
        self.started = True
        return self

    def close(self) -> None:
        """Stop the sampler and release the device (idempotent). Results stay available."""
        if self.timer.active:
            self.timer.abort()
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
        self._current = None

    # ------------------------------------------------------------------ per step
    def _stage(self, stage: str) -> Any:
        if stage not in self.schedule.stages:
            self.profiled.setdefault(stage, [])
            self.totals.setdefault(stage, [])
        return self.schedule.stage(stage)

    def step_begin(self, stage: str, batch: Any = None) -> bool:
        """A step of ``stage`` starts; returns True when it is profiled per layer."""
        if not self.started:
            self.start()
        if self.timer.active:  # the previous step never ended (an exception Lightning swallowed)
            self.timer.abort()
        st = self._stage(stage)
        if self.twin is not None:
            self.twin.follow(stage == "train", self._batch_sizes.get(stage))
        capture = not st.captured and self.analyze and self.cost_arg is None and self._capture_now(stage, st)
        profile = capture or self.schedule.should_profile(stage, self.device, self.notes, self._module_calls)
        if profile:
            self.timer.capture_inputs = capture
            # a capture-only step needs the calls, not the backward's timing: no hooks on its autograd nodes (which
            # cost about as much as the rest of the timer); has_backward still sees the step's backward region
            self.timer.backward = not capture
            region = "(forward)" if stage == "train" else f"({stage})"
            t0 = self.clock_ns()
            self.timer.start_step(region, "fwd" if stage == "train" else "other")
        else:
            t0 = self.clock_ns()
        if st.epoch_t0 is None:
            st.epoch_t0 = t0
        self._current = (stage, profile, t0, batch)
        return profile and not capture

    def mark(self, region: str, phase: str = "other") -> None:
        """Time outside every module now belongs to ``region`` (``"(backward)"``, ``"(optimizer)"``)."""
        if self.timer.active:
            self.timer.mark(region, phase)

    def step_end(self, stage: str, global_step: int | None = None) -> StepTotal | None:
        """The step ends; records its total and, when it was profiled, queues it for attribution."""
        cur = self._current
        if cur is None or cur[0] != stage:
            return None
        _, profiled, t0, batch = cur
        self._current = None
        sch = self.schedule
        st = self._stage(stage)
        timing = self.timer.stop_step() if self.timer.active else None
        t1 = self.clock_ns()
        sch.steps += 1
        samples = batch_size(batch)
        index = st.batches
        st.batches += 1
        gstep = index if global_step is None else int(global_step)
        total = StepTotal(stage, index, gstep, t0, t1, samples, profiled=timing is not None, mode=sch.mode)
        dur = t1 - t0
        sch.run_ns += dur
        st.epoch_t1 = t1
        st.epoch_steps.append(total)
        self.totals[stage].append(total)
        self._pending_totals.append(total)
        if stage in self._deferred:
            self._decide_analysis(stage, dur - (DISPATCH_FACTOR * timing.hook_ns if timing is not None else 0))
        if timing is None:
            sch.plain_step(stage, dur)
            return total
        if not st.captured and self.timer.capture_inputs:
            st.captured = True
            self.timer.capture_inputs = False
            sch.excess_ns += int(DISPATCH_FACTOR * timing.hook_ns)  # the capture step's hooks are overhead too
            if self._defer_analysis(stage):  # decided at the next step, when a step's time is known
                self._deferred[stage] = (timing, samples)
                self._batch_sizes[stage] = samples
            else:
                self._timed_analyze(stage, timing, samples)
            total.profiled = False
            st.since_profiled += 1
            return total  # the capture step is a warm-up step: never reported
        sch.profiled_step(stage, timing.hook_ns, timing.hook_calls)
        self._pending.append(_Pending(stage, index, gstep, samples, timing, sch.mode))
        return total

    # ------------------------------------------------------------------ cost model
    def _defer_analysis(self, stage: str) -> bool:
        """``analyze="auto"``: the analysis waits for a step time to be weighed against the run's overhead budget;
        never on the twin (its numbers are its model of the analysed workload) nor when the run's length is
        unknown (nor when it was weighed before its capture step)."""
        return (self.analyze == "auto" and self.twin is None and self.expected_batches.get(stage) is not None
                and stage not in self._approved)

    @property
    def _module_calls(self) -> int:
        """The model's module calls per step, estimated by the modules the timer hooks (counted once)."""
        if self._n_modules is None:
            self._n_modules = len(self.timer.selected())
        return self._n_modules

    def _capture_now(self, stage: str, st: Any) -> bool:
        """Whether this step captures the cost model's inputs. With ``analyze="auto"`` on a run of known length and
        at least two warm-up steps, the first step runs plain and the second is weighed before it is hooked: when
        the analysis cannot fit the run's budget (expected cost from the model's module count), no step is
        hooked for it at all (the summary says so). Otherwise: now (and the analysis decided after it)."""
        if not self._defer_analysis(stage) or self.schedule.warmup_steps < 2 or (stage == "train") in self.costs:
            return True
        if st.batches == 0 or not st.epoch_steps:
            return False  # the first step: its time is the estimate
        prev = st.epoch_steps[-1]
        if self._analysis_fits(stage, stage == "train", self._module_calls, prev.t1_ns - prev.t0_ns):
            self._approved.add(stage)
            return True
        st.captured = True
        return False

    def _timed_analyze(self, stage: str, timing: StepTiming, samples: int | None) -> None:
        ran = timing.has_backward not in self.costs  # else _analyze only reuses the known cost
        w0 = time.perf_counter_ns()
        self._analyze(stage, timing, samples)
        spent_s = (time.perf_counter_ns() - w0) / 1e9
        self.schedule.setup_ns += int(spent_s * 1e9)
        if ran and timing.hook_calls and self.costs.get(timing.has_backward):  # learn only from a real analysis
            if _ANALYSIS_WARMUP_S[0]:  # the first one paid the warm-up: its rate says nothing of the next ones
                _ANALYSIS_WARMUP_S[0] = 0.0
            else:
                _ANALYSIS_S_PER_CALL[timing.has_backward] = spent_s / timing.hook_calls

    def _decide_analysis(self, stage: str, step_ns: float) -> None:
        """Run the deferred analysis when its expected cost fits ``overhead_target`` of the run (the longest expected
        stage of this call: a validation inside a fit counts on the fit's budget), else skip it, saying so."""
        timing, samples = self._deferred.pop(stage)
        if self._analysis_fits(stage, timing.has_backward, timing.hook_calls, step_ns):
            self._timed_analyze(stage, timing, samples)

    def _analysis_fits(self, stage: str, training: bool, calls: int, step_ns: float) -> bool:
        """Whether an analysis of ``calls`` module calls fits ``overhead_target`` of the run (the longest expected
        stage of this call: a validation inside a fit counts on the fit's budget); else it is skipped, saying so."""
        n = self.expected_batches.get(stage)
        if n is not None and step_ns > 0:
            self._run_estimate_s[stage] = step_ns / 1e9 * n
        run_s = max(self._run_estimate_s.values(), default=math.inf)
        sch = self.schedule
        budget_s = sch.overhead_target * run_s - (sch.setup_ns + sch.overhead_ns) / 1e9
        need_s = _ANALYSIS_S_PER_CALL[training] * max(calls, 1) + _ANALYSIS_WARMUP_S[0]
        # room is kept for one profiled step and the reports: a cost model without a layer profile is no use
        reserve_s = sch.first_step_reserve_ns(self._module_calls) / 1e9
        if need_s + reserve_s <= budget_s or training in self.costs:
            return True
        self.costs[training] = {}
        self.cost_notes.append(
            f"cost model skipped for {stage}: the analysis takes about {need_s * 1e3:.0f} ms, over the "
            f"{100 * sch.overhead_target:.3g} % overhead budget of this run (about {run_s:.2g} s, {n} batches, with "
            f"room for a profiled step and the reports): "
            "layers are apportioned by time only (EnergyProfiler(analyze=True) always runs it)")
        return False

    def _analyze(self, stage: str, timing: StepTiming, samples: int | None) -> None:
        training = timing.has_backward
        self._batch_sizes[stage] = samples
        if training in self.costs:
            if self.twin is not None:
                self.twin.begin(training, samples)
            return
        # the shared capture (lightning_edge.cost.capture): every outermost call of the step, positional and keyword,
        # analysed and merged into one ModelCost named as in the model
        costs: dict[str, Any] = {}
        try:
            from lightning_edge.cost.capture import Captured
            from lightning_edge.cost.counter import step_cost

            captured = timing.captured
            if captured is None:  # a timing captured the old way (positional inputs by name)
                from lightning_edge.cost.capture import Call

                captured = Captured([Call(timing.qualified.get(n, n), a, {}, training) for n, a in timing.inputs.items()])
            cost = step_cost(self.model, captured, training=training)
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
            # one merged cost, its layers named from the model's root; the stage's steps (this list, as it grows): their
            # gaps are the CPU work outside the layers the twin runs on the Orin's CPU
            self.twin.add_cost(cost, training, steps=self.totals.setdefault(stage, []))
            self.twin.begin(training, samples)

    def twin_model(self, stage: str, mode: str | None = None,
                   step: int | None = None) -> tuple[Any, dict[str, str]] | None:
        """The twin's per-layer model of the stage's captured workload in ``mode`` (default: the current one) for its
        step ``step`` (the twin models the steps before it measured the CPU work outside the layers without it):
        ``(LayerTimes, {twin row name: profiler layer name})``, or None when there is no twin or no cost."""
        if self.twin is None:
            return None
        return self.twin.layer_model(stage == "train", mode, self._batch_sizes.get(stage), step)

    @property
    def twin_times(self) -> bool:
        """True when the layers' and steps' times and energies are the twin's model of the workload."""
        return self.twin is not None and self.twin.times

    def costs_for(self, training: bool) -> dict[str, Any]:
        if self.cost_arg is not None:
            return {layer.name or self.timer.root_name: layer for layer in getattr(self.cost_arg, "layers", [])}
        return self.costs.get(training) or self.costs.get(not training) or {}

    def roofline(self, mode: str | None) -> tuple[Any, str]:
        if self.roofline_arg is not None:
            return self.roofline_arg, getattr(self.roofline_arg, "label", "") or "user roofline"
        hit = self._roof_cache.get(mode)
        if hit is None:
            hit = self.device.roofline(mode) if self.device is not None else (None, "no roofline")
            self._roof_cache[mode] = hit
        return hit

    # ------------------------------------------------------------------ attribution
    def _ready(self, t1_ns: int, wait: bool) -> bool:
        if self.sampler is None:
            return True
        if wait:
            period = max(self.device.update_period_s if self.device else 0.0, 1.0 / self.sampler.rate_hz)
            return self.sampler.wait_for(t1_ns, timeout_s=max(4 * period, 0.05))
        return self.sampler.wait_for(t1_ns, timeout_s=0.0)

    def consume(self) -> list[ProfiledStep]:
        """The steps attributed since the last call (by any ``flush``, including the one in ``epoch_end``)."""
        out, self._unconsumed = self._unconsumed, []
        return out

    def flush(self, wait: bool = False, record_work: bool = True) -> list[ProfiledStep]:
        """Attribute the profiled steps whose power is available (all of them with ``wait=True``); returns them
        (they are also queued for :meth:`consume`). ``record_work=False``: the caller measures and reports the
        time itself (``schedule.add_work_ns``), e.g. together with its logging."""
        done: list[ProfiledStep] = []
        if not self._pending and not self._pending_totals:
            return done
        w0 = time.perf_counter_ns()
        while self._pending:
            p = self._pending[0]
            if not self._ready(p.timing.t1_ns, wait) and not wait:
                break
            self._pending.pop(0)
            done.append(self._attribute(p))
        self._unconsumed.extend(done)
        self._resolve_totals(wait)
        work = time.perf_counter_ns() - w0
        if done and record_work:
            self.schedule.add_work_ns(work)
        return done

    def _attribute(self, p: _Pending) -> ProfiledStep:
        timing = p.timing
        selfs = timing.exclusive()
        roof, desc = self.roofline(p.mode)
        self.roofline_desc = desc
        sim = self.twin_model(p.stage, p.mode, p.index)
        if sim is not None:  # the twin: the Orin's time and energy of every layer, from its model of the workload
            energy = simulated_step(selfs, timing.t0_ns, timing.t1_ns, sim[0], sim[1], samples=p.samples,
                                    training=p.stage == "train")
        else:
            model = model_energies(selfs, self.costs_for(timing.has_backward), roof)
            trace = self.sampler if self.sampler is not None else None
            source = self.device.source if self.device is not None else "model"
            energy = attribute_step(selfs, timing.t0_ns, timing.t1_ns, trace=trace,
                                    update_period_s=self.device.update_period_s if self.device else None,
                                    model_energy_j=model, k=self.k, source=source, samples=p.samples)
        step = ProfiledStep(p.stage, p.index, p.global_step, p.samples, timing, energy, p.mode)
        lst = self.profiled[p.stage]
        lst.append(step)
        if self.keep_timings >= 0 and len(lst) > self.keep_timings:
            old = lst[-self.keep_timings - 1]
            old.timing = _strip(old.timing)
        for tot in reversed(self.totals[p.stage]):
            if tot.index == p.index:
                tot.energy_j, tot.label, tot.profiled = energy.energy_j, energy.label, True
                tot.sim_time_s = energy.sim_time_s
                break
        return step

    def _resolve_totals(self, wait: bool) -> None:
        todo = [t for t in self._pending_totals if not math.isfinite(t.energy_j)]
        if not todo:
            self._pending_totals.clear()
            return
        if self.twin is not None:
            # the twin: every step is the twin's prediction for the workload in the step's mode
            for t in todo:
                sim = self.twin_model(t.stage, t.mode, t.index)
                if sim is not None:
                    t.sim_time_s = float(sim[0].time_s)
                    t.energy_j, t.label = t.sim_time_s * float(sim[0].power_w), SIMULATED
            todo = [t for t in todo if not math.isfinite(t.energy_j)]
            if not todo:
                self._pending_totals = []
                return
        if self.sampler is not None:
            if not self._ready(todo[-1].t1_ns, wait) and not wait:
                return  # (waiting found no newer reading: the sensor stopped; resolve with what there is)
            import numpy as np

            e = self.sampler.energy_j_intervals(np.array([t.t0_ns for t in todo]), np.array([t.t1_ns for t in todo]))
            src = self.device.source if self.device else "measured"
            for t, v in zip(todo, e.tolist()):
                if math.isfinite(v):  # no valid reading over the step: never "measured" (estimated below)
                    partial = self.sampler.quality(t.t0_ns, t.t1_ns).is_partial
                    t.energy_j, t.label = float(v), label_of("measured", src, partial)
            todo = [t for t in todo if not math.isfinite(t.energy_j)]
        # no sensor (or no valid reading): the mean estimated power of the stage's profiled steps times the step's time
        for t in todo:
            p_w = self._estimated_power_w(t.stage)
            if p_w is not None:
                t.energy_j, t.label = p_w * t.time_s, ESTIMATED
        # (waiting, e.g. at an epoch's end, resolves what can be: the rest stays nan, labelled estimated, not pending)
        self._pending_totals = [] if wait else [t for t in self._pending_totals if not math.isfinite(t.energy_j)]

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
    def epoch_end(self, stage: str) -> EpochTotals | None:
        """Close the stage's epoch: its energy (the trace over the epoch's wall window, or the sum of its steps)."""
        st = self.schedule.stages.get(stage)
        if st is None or not st.epoch_steps:
            return None
        self.flush(wait=True)
        steps = st.epoch_steps
        t0, t1 = st.epoch_t0 or steps[0].t0_ns, st.epoch_t1 or steps[-1].t1_ns
        samples = sum(s.samples or 0 for s in steps)
        energy, label, readings = math.nan, ESTIMATED, None
        host_s = (t1 - t0) / 1e9
        time_s = host_s
        if all(s.sim_time_s is not None and math.isfinite(s.energy_j) for s in steps):
            # the twin's prediction for each step: the epoch on the Orin lasts as long as its steps
            energy = float(sum(s.energy_j for s in steps))
            time_s = float(sum(s.sim_time_s for s in steps))
            label = SIMULATED
        elif self.sampler is not None:
            energy = float(self.sampler.energy_j(t0, t1))
            readings = self.sampler.quality(t0, t1)
            label = label_of("measured", self.device.source if self.device else "measured", readings.is_partial)
            if not readings.trusted:
                self.notes.append(f"{stage} epoch {st.epoch}: {readings.describe()}; energies over those readings "
                                  "are labelled partial")
        if not math.isfinite(energy):
            # the trace does not cover the epoch (the sensor stopped): its steps, extrapolated, are an estimate
            vals = [s.energy_j for s in steps if math.isfinite(s.energy_j)]
            energy = float(sum(vals)) * (len(steps) / len(vals)) if vals else math.nan
            label = ESTIMATED
        tot = EpochTotals(stage, st.epoch, energy, time_s, len(steps), samples, label, readings=readings,
                          host_time_s=host_s, modes=_by_mode(steps))
        self.epochs.append(tot)
        st.epoch += 1
        st.epoch_t0 = st.epoch_t1 = None
        st.epoch_steps = []
        return tot

    @property
    def source(self) -> str:
        return self.device.source if self.device is not None else "model"

    def sampler_overhead(self) -> Any:
        return self.sampler.overhead() if self.sampler is not None else None


def _by_mode(steps: list[StepTotal]) -> list[dict]:
    """An epoch's steps per power mode, in the order the modes came: steps, time (the twin's when simulated),
    energy and mean power, and how they were obtained. Where a tuner switched modes, the last row is the mode it
    trained in; a step without an energy counts in time only (its group's energy is scaled up to all its steps,
    as the epoch's is)."""
    groups: dict[str, list[StepTotal]] = {}
    for s in steps:
        groups.setdefault(s.mode or "unknown", []).append(s)
    out = []
    for mode, ss in groups.items():
        t = sum(s.sim_time_s if s.sim_time_s is not None else (s.t1_ns - s.t0_ns) / 1e9 for s in ss)
        es = [s.energy_j for s in ss if math.isfinite(s.energy_j)]
        e = float(sum(es)) * len(ss) / len(es) if es else math.nan
        labels = Counter(s.label for s in ss)
        out.append({"mode": mode, "steps": len(ss), "time_s": t, "energy_j": e,
                    "power_w": e / t if t > 0 and math.isfinite(e) else math.nan,
                    "method": labels.most_common(1)[0][0] if len(es) == len(ss) else ESTIMATED})
    return out


def _strip(t: StepTiming) -> StepTiming:
    """Drop a timing's raw intervals (keep its exclusive times) once it is too old to be traced."""
    t.exclusive()
    t.modules, t.nodes, t.chains, t.inputs, t.captured = [], [], [], {}, None
    return t
