"""The profiling session behind the Lightning callbacks: which steps to profile, timing, power, attribution.

No Lightning import: :class:`~lightning_edge.lightning.reporter.EnergyReporter` (TensorBoard, reports) drives it,
and the callbacks (``lightning_edge.lightning.pytorch`` / ``.pl``) are thin glue over that reporter. A plain training
loop can drive the session itself::

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
"auto" N within the budget), ``twin`` (a :class:`~lightning_edge.lightning.twin_driver.TwinDriver` when the device is
the Orin twin: its board runs the captured workload and its per-layer model gives the Orin's numbers), and
attribution, the session's own: a profiled step is attributed once the power sampler has a sample after it (so the
end of the step is interpolated, not held): ``flush()`` returns the steps that are ready; ``flush(wait=True)`` waits
for them. What it may spend is one :class:`~lightning_edge.lightning.budget.OverheadBudget` (``budget``, injected or
made from ``overhead_target``), charged by every part; the model's calls come from the model's shared capture
(:func:`~lightning_edge.cost.capture.shared_capture`), which the tuner and the interleaver of the same Trainer ask
too, so a step is captured and analysed once.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lightning_edge.cost.capture import batch_size
from lightning_edge.cost.shared import CapturedStep, shared_capture
from lightning_edge.devices.board import JETSON_SETTLE_S, Board, get_board
from lightning_edge.lightning.budget import DISPATCH_FACTOR, FRACTION, OverheadBudget
from lightning_edge.lightning.schedule import AUTO_START, StepScheduler
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
    modes: list = field(default_factory=list)  # runs of one power mode, in order: their steps' totals

    @property
    def j_per_sample(self) -> float:
        return self.energy_j / self.samples if self.samples else math.nan


@dataclass
class _Pending:
    stage: str
    index: int
    global_step: int
    samples: int | None
    timing: StepTiming
    mode: str | None


class EnergySession:
    """See the module docstring. Arguments are those of :class:`~lightning_edge.lightning.EnergyProfiler`;
    ``budget``: an :class:`~lightning_edge.lightning.budget.OverheadBudget` to spend (default: one with
    ``overhead_target`` as its fraction, on ``clock_ns``)."""

    def __init__(self, model: Any, device: Any = "auto", *, every_n_steps: int | str = "auto", warmup_steps: int = 2,
                 depth: int | None = None, include: Any = None, k: float = DEFAULT_K, roofline: Any = None,
                 cost: Any = None, analyze: bool | str = "auto", overhead_target: float = FRACTION,
                 settle_s: float | None = None, clock_ns: Callable[[], int] = time.perf_counter_ns,
                 sampler_rate_hz: float | None = None, keep_timings: int = 50,
                 cuda: bool | None = None, budget: OverheadBudget | None = None) -> None:
        self.budget = budget if budget is not None else OverheadBudget(overhead_target, clock_ns=clock_ns)
        self.schedule = StepScheduler(every_n_steps, warmup_steps, self.budget, settle_s)
        self.model = model
        self.device_arg = device
        self.k = float(k)
        self.roofline_arg = roofline
        self.cost_arg = cost
        if analyze not in (True, False, "auto"):
            raise ValueError(f"analyze must be True (always run the cost model), False (never) or 'auto' (when it "
                             f"fits the overhead budget of the run), got {analyze!r}")
        self.analyze = analyze
        # the model's shared capture (the tuner and the interleaver of the same Trainer ask it too)
        self.captures = shared_capture(model) if analyze and cost is None and hasattr(model, "named_modules") \
            else None
        self._capturing: str | None = None  # the stage whose step this session is capturing
        self._deferred: dict[str, tuple[CapturedStep, int | None]] = {}  # captured, analysis not yet decided
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
        return self.budget.expected

    def new_run(self) -> None:
        """A new run (a Trainer call) starts: its expected lengths and its overhead budget start afresh."""
        self.schedule.new_run()
        self.budget.start()

    def expect(self, stage: str, batches: int | None) -> None:
        """How many batches of ``stage`` this run (a Trainer call) is expected to have (None: unknown): the budget's
        estimate of the run."""
        self.budget.expect(stage, batches)

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
            self.captures.abort()
        self._capturing = None

    # ------------------------------------------------------------------ per step
    def _stage(self, stage: str) -> Any:
        if stage not in self.schedule.stages:
            self.profiled.setdefault(stage, [])
            self.totals.setdefault(stage, [])
        return self.schedule.stage(stage)

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
            capture = not st.captured and self._capture_now(stage)
            profile = not capture and self.schedule.should_profile(stage, self.device, self.notes,
                                                                   self._module_calls, self._owed_s(stage))
            if profile:
                self.timer.backward = True
                region = "(forward)" if stage == "train" else f"({stage})"
                t0 = self.clock_ns()
                self.timer.start_step(region, "fwd" if stage == "train" else "other")
            else:
                t0 = self.clock_ns()
            if st.epoch_t0 is None:
                st.epoch_t0 = t0
            self._current = (stage, profile, t0, batch)
            return profile

    def _capture_now(self, stage: str) -> bool:
        """Whether this step is the stage's capture step: the model's calls are taken from its shared capture,
        which captures this step unless a step of its kind is already kept (by this session in an earlier run, or
        by another callback of the Trainer: then nothing is hooked for it)."""
        if self.captures is None or (stage == "train") in self.costs:
            return False
        known = self.captures.known(stage == "train")
        if known is not None:  # captured already: decided at this step's end, like a capture of our own
            self._deferred[stage] = (known, None)
            self.schedule.stages[stage].captured = True
            return False
        self.captures.begin()
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

    def step_end(self, stage: str, global_step: int | None = None) -> StepTotal | None:
        """The step ends; records its total and, when it was profiled, queues it for attribution."""
        cur = self._current
        if cur is None or cur[0] != stage:
            return None
        # the timer stops first: its window lies inside the step's (a profiled step's energy, over the timer's
        # window, never exceeds the step's time x the power); its stop is in its own hook time
        timing = self.timer.stop_step() if self.timer.active else None
        t1 = self.clock_ns()
        with self.budget.spend("steps"):
            return self._step_end(stage, global_step, cur, timing, t1)

    def _step_end(self, stage: str, global_step: int | None, cur: tuple, timing: StepTiming | None,
                  t1: int) -> StepTotal:
        _, profiled, t0, batch = cur
        self._current = None
        sch = self.schedule
        st = self._stage(stage)
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
        if self._capturing == stage:  # the capture step: a warm-up step, never reported nor timed for the budget
            self._capturing = None
            step = self.captures.end()
            st.captured = True
            st.since_profiled += 1
            if step is not None:
                self.budget.charge("capture", DISPATCH_FACTOR * step.captured.hook_ns / 1e9)
            self._captured(stage, step, samples)
            return total
        if timing is None:
            sch.plain_step(stage, dur)
        else:
            extra_s = sch.profiled_step(stage, timing.hook_ns, self._module_calls)
            self.budget.step(stage, max(dur / 1e9 - extra_s, 0.0))  # what the step would have taken
            self._pending.append(_Pending(stage, index, gstep, samples, timing, sch.mode))
        if stage in self._deferred:  # decided now that a step's time is known
            self._decide_analysis(stage, samples)
        return total

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
        """The steps attributed since the last call by a ``flush`` that was given no ``log`` (the one in
        :meth:`epoch_end` included)."""
        out, self._unconsumed = self._unconsumed, []
        return out

    def flush(self, wait: bool = False, log: Callable[[list[ProfiledStep]], Any] | None = None) -> list[ProfiledStep]:
        """Attribute the profiled steps whose power is available (all of them with ``wait=True``) and resolve the
        step totals that can be; returns the attributed steps. ``log``: called with them inside the budget's
        ``attribution`` block, so a profiled step's cost includes its logging (steps flushed without ``log`` are
        queued for :meth:`consume`)."""
        done: list[ProfiledStep] = []
        if self._pending:
            with self.budget.spend("attribution"):
                while self._pending:
                    p = self._pending[0]
                    if not self._ready(p.timing.t1_ns, wait) and not wait:
                        break
                    self._pending.pop(0)
                    done.append(self._attribute(p))
                if done:
                    if log is not None:
                        log(done)
                    else:
                        self._unconsumed.extend(done)
                    self.budget.attributed()
        if self._pending_totals:
            self._resolve_totals(wait)
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
    def epoch_end(self, stage: str, log: Callable[[list[ProfiledStep]], Any] | None = None) -> EpochTotals | None:
        """Close the stage's epoch: its energy (the trace over the epoch's wall window, or the sum of its steps);
        ``log`` as for :meth:`flush` (the profiled steps still waiting are attributed first)."""
        st = self.schedule.stages.get(stage)
        if st is None or not st.epoch_steps:
            return None
        self.flush(wait=True, log=log)
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
    """An epoch's steps as runs of one power mode, in order (a tuner's profiling windows, then the mode it chose):
    each run's first step (its index in the stage), steps, time (the twin's when simulated), energy, mean power, and
    how they were obtained. The last row is the mode the epoch ended in. A step without an energy counts in time only
    (its run's energy is scaled up to all its steps, as the epoch's is)."""
    runs: list[list[StepTotal]] = []
    for s in steps:
        if runs and (runs[-1][0].mode or "unknown") == (s.mode or "unknown"):
            runs[-1].append(s)
        else:
            runs.append([s])
    out = []
    for ss in runs:
        t = sum(s.sim_time_s if s.sim_time_s is not None else (s.t1_ns - s.t0_ns) / 1e9 for s in ss)
        es = [s.energy_j for s in ss if math.isfinite(s.energy_j)]
        e = float(sum(es)) * len(ss) / len(es) if es else math.nan
        labels = Counter(s.label for s in ss)
        out.append({"mode": ss[0].mode or "unknown", "first_step": ss[0].index, "steps": len(ss), "time_s": t,
                    "energy_j": e, "power_w": e / t if t > 0 and math.isfinite(e) else math.nan,
                    "method": labels.most_common(1)[0][0] if len(es) == len(ss) else ESTIMATED})
    return out


def _strip(t: StepTiming) -> StepTiming:
    """Drop a timing's raw intervals (keep its exclusive times) once it is too old to be traced."""
    t.exclusive()
    t.modules, t.nodes, t.chains, t.inputs, t.captured = [], [], [], {}, None
    return t
