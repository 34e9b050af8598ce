"""Which steps the profiling session profiles per layer, and what profiling costs: one job of
:class:`~lightning_edge.lightning.session.EnergySession` (the others: attribution, in the session, and driving the
twin, :mod:`lightning_edge.lightning.twin_driver`).

* never the first ``warmup_steps`` steps of a stage (the first one is used, hooked, to capture the model's inputs
  for the cost model), nor the ``warmup_steps`` steps after a power-mode change, nor steps within ``settle_s`` of a
  change the controller reports (the board's power settles in 2-3 s);
* ``every_n_steps="auto"`` starts at ``AUTO_START`` and then adapts so that the measured overhead (the profiled
  step's extra time, ``DISPATCH_FACTOR`` x the time measured inside the timer's hooks, plus the time spent
  attributing and logging) stays below ``overhead_target`` of the median plain step time; and, when the run's
  length is known (``expected``: the Trainer's batches), so that the whole run's overhead does too: the profiled
  steps still to come share what is left of ``overhead_target`` x the expected run once the fixed costs (the cost
  analysis, and ``END_OF_RUN_S`` for the end-of-run reports) are paid. A short run is profiled at its first
  profiled step only, and a run whose budget cannot pay even for that step (``PROFILED_S_PER_CALL`` x the model's
  module calls) and the reports is not profiled per layer at all: a note says how many batches it would need.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

__all__ = ["StepScheduler", "StageState", "AUTO_START", "AUTO_MAX", "DISPATCH_FACTOR", "PROFILED_S_PER_CALL"]

#: the first every_n_steps of "auto", until the overhead has been measured
AUTO_START = 10
#: the most steps "auto" may skip between two profiled ones
AUTO_MAX = 500
#: a profiled step costs about this many times the time spent inside the timer's own hooks: the rest is PyTorch's
#: dispatch to them (the module call slow path, C++ -> Python node hooks), which no hook can see. Calibrated on
#: ResNet-18 on the CPU by interleaving plain and profiled steps (paired medians: 15.6 ms extra for 7.3 ms in hooks).
DISPATCH_FACTOR = 2.0
#: what the end-of-run work (report, files, trace, tables) is reserved in a run's overhead budget until a run in this
#: process has measured it (then the last measured value; tiny GPT-2 and a small CNN: about 10 ms on 2 CPU cores)
END_OF_RUN_S = [0.010]
#: what one profiled step costs per module call (its extra time and its attribution and logging), until a profiled
#: step in this process has measured it (tiny GPT-2 and ResNet-18 on 2 CPU cores: 0.2-0.4 ms)
PROFILED_S_PER_CALL = [0.0003]


@dataclass
class StageState:
    """A stage's step counters and its open epoch."""

    batches: int = 0  # steps begun in this stage (over the whole run)
    since_profiled: int = 0  # plain steps since the last profiled one
    n_profiled: int = 0
    captured: bool = False
    min_batches: int = 0  # batches this run would need to afford one profiled step (0: it can, or not known)
    epoch: int = 0
    epoch_t0: int | None = None
    epoch_t1: int | None = None
    epoch_steps: list = field(default_factory=list)  # the open epoch's StepTotals


class StepScheduler:
    """The every-N policy (see the module docstring), the power mode it last saw, and the overhead accounting."""

    def __init__(self, every_n_steps: int | str = "auto", warmup_steps: int = 2, overhead_target: float = 0.03,
                 settle_s: float | None = None) -> None:
        if every_n_steps != "auto" and (not isinstance(every_n_steps, int) or every_n_steps < 1):
            raise ValueError(f"every_n_steps must be 'auto' or an integer >= 1, got {every_n_steps!r}")
        if warmup_steps < 1:
            raise ValueError(f"warmup_steps must be >= 1 (the first step captures the inputs), got {warmup_steps}")
        if not 0 < overhead_target < 1:
            raise ValueError(f"overhead_target is a fraction of the run time (0.03 = 3 %), got {overhead_target}")
        self.auto = every_n_steps == "auto"
        self.every_n_steps = AUTO_START if self.auto else int(every_n_steps)
        self.warmup_steps = int(warmup_steps)
        self.overhead_target = float(overhead_target)
        self.settle_s = settle_s
        self.stages: dict[str, StageState] = {}
        self.expected: dict[str, int | None] = {}  # per stage, the batches this run is expected to have
        self.mode: str | None = None  # the power mode last seen
        self.steps = 0  # steps ended, every stage
        self._mode_change_at: int | None = None  # ``steps`` when a change was seen
        self._plain_ns: dict[str, deque] = {}  # recent plain step times
        self._prof_ns: dict[str, deque] = {}  # recent profiled steps' extra time (estimated from the hooks' time)
        self._work_ns: deque = deque(maxlen=10)
        self.excess_ns = 0  # profiled steps' extra time (DISPATCH_FACTOR x the time inside the timer's hooks)
        self.work_ns = 0  # attribution and logging of the profiled steps
        self.epoch_work_ns = 0  # per-epoch work: figure, table, reports
        self.run_ns = 0  # total step time (profiled steps included)
        self.setup_ns = 0  # one-time: cost analysis
        self._learn_calls = 0  # the module calls of the profiled step whose cost is being measured
        self._learn_ns = 0

    def stage(self, stage: str) -> StageState:
        st = self.stages.get(stage)
        if st is None:
            st = self.stages[stage] = StageState()
            self._plain_ns[stage] = deque(maxlen=50)
            self._prof_ns[stage] = deque(maxlen=5)
        return st

    def mode_ok(self, device: Any, notes: list[str]) -> bool:
        """False when the board's mode changed recently (in steps or in seconds); tracks the mode."""
        if device is None or device.controller is None:
            return True
        mode = device.mode()
        if mode != self.mode:
            self.mode = mode
            self._mode_change_at = self.steps
            notes.append(f"power mode changed to {mode} at step {self.steps}: "
                         f"the next {self.warmup_steps} steps are not profiled")
            return False
        if self._mode_change_at is not None and self.steps - self._mode_change_at <= self.warmup_steps:
            return False
        since = device.seconds_since_mode_change()
        return not (since is not None and self.settle_s and since < self.settle_s)

    def should_profile(self, stage: str, device: Any = None, notes: list[str] | None = None,
                       calls: int | None = None) -> bool:
        """Whether the next step of ``stage`` is profiled per layer (``calls``: the model's module calls per step,
        to weigh a first profiled step against the run's budget)."""
        st = self.stage(stage)
        if st.batches < self.warmup_steps or st.min_batches:
            return False
        if st.n_profiled and st.since_profiled < self.every_n_steps - 1:
            return False
        if not st.n_profiled and calls and not self._first_affordable(stage, calls, notes):
            return False
        return self.mode_ok(device, [] if notes is None else notes)

    def _first_affordable(self, stage: str, calls: int, notes: list[str] | None) -> bool:
        """``auto`` on a run of known length: whether the run's budget (the longest expected stage of the run, so a
        validation inside a fit counts on the fit's) pays for a first profiled step and the fixed costs; else the
        stage is not profiled per layer in this run and a note says how many batches it would need."""
        if not self.auto:
            return True
        runs = [(self.expected[k] or 0) * statistics.median(v) for k, v in self._plain_ns.items()
                if v and self.expected.get(k)]
        if stage not in self.expected or not self.expected[stage] or not runs:
            return True
        base = statistics.median(self._plain_ns[stage]) if self._plain_ns.get(stage) else 0.0
        budget_ns = self.overhead_target * max(runs)
        need_ns = self.first_step_reserve_ns(calls) + self.setup_ns + self.overhead_ns
        if need_ns <= budget_ns or base <= 0:
            return True
        st = self.stages[stage]
        st.min_batches = max(self.warmup_steps + 1, math.ceil(need_ns / (self.overhead_target * base)))
        if notes is not None:
            notes.append(f"{stage} not profiled per layer: one profiled step and the reports cost about "
                         f"{need_ns / 1e6:.0f} ms, over the {100 * self.overhead_target:.3g} % overhead budget of this "
                         f"run ({budget_ns / 1e6:.0f} ms; {self.expected[stage]} batches of {base / 1e6:.3g} ms); it "
                         f"needs about {st.min_batches} batches, or EnergyProfiler(overhead_target="
                         f"{min(0.5, need_ns / max(runs)):.2g}) or an integer every_n_steps")
        return False

    @staticmethod
    def first_step_reserve_ns(calls: int) -> float:
        """What a run keeps for one profiled step of ``calls`` module calls and the end-of-run reports (the first
        profiled step and the cost analysis are both weighed against it)."""
        return (PROFILED_S_PER_CALL[0] * calls + END_OF_RUN_S[0]) * 1e9

    def new_run(self) -> None:
        """A new run (a Trainer call): its expected lengths and the stages' verdicts start afresh."""
        self.expected.clear()
        for st in self.stages.values():
            st.min_batches = 0

    def plain_step(self, stage: str, dur_ns: int) -> None:
        self.stages[stage].since_profiled += 1
        self._plain_ns[stage].append(dur_ns)

    def profiled_step(self, stage: str, hook_ns: int, hook_calls: int = 0) -> None:
        """A profiled step: its extra time, from what the timer measured of itself (step-to-step jitter on a busy
        machine is larger than the effect: comparing step times would be noise)."""
        st = self.stages[stage]
        st.since_profiled = 0
        st.n_profiled += 1
        cost = int(DISPATCH_FACTOR * hook_ns)
        self._prof_ns[stage].append(cost)
        self.excess_ns += cost
        self._learn_calls = hook_calls
        self._learn_ns = cost

    def add_work_ns(self, ns: int, per_step: bool = True) -> None:
        """Time spent on profiling outside the steps: per profiled step (attribution, logging: feeds auto every-N)
        or per epoch (``per_step=False``: the figure, the table; counted in the overhead only)."""
        if per_step:
            if self._learn_calls:  # the profiled step's whole cost is known: learn its cost per module call
                PROFILED_S_PER_CALL[0] = (self._learn_ns + int(ns)) / self._learn_calls / 1e9
                self._learn_calls = 0
            self.work_ns += int(ns)
            self._work_ns.append(int(ns))
            self._adapt()
        else:
            self.epoch_work_ns += int(ns)

    def _adapt(self) -> None:
        if not self.auto:
            return
        stage = "train" if self._plain_ns.get("train") else next((k for k, v in self._plain_ns.items() if v), None)
        plain, prof = self._plain_ns.get(stage), self._prof_ns.get(stage) or next(
            (v for v in self._prof_ns.values() if v), None)
        if not plain or not prof:
            return
        base = statistics.median(plain)
        if base <= 0:
            return
        extra = statistics.median(prof) + (statistics.median(self._work_ns) if self._work_ns else 0.0)
        n = self.every_n_steps
        if len(plain) >= 3:  # the per-step policy, on a steady median
            n = math.ceil(extra / (self.overhead_target * base)) if extra > 0 else 1
            # grow at most 2x per update (one noisy step must not switch profiling off), shrink at once
            n = min(n, 2 * self.every_n_steps)
        total, st = self.expected.get(stage), self.stages.get(stage)
        if total and st is not None and extra > 0:  # the whole run's budget, fixed costs first
            budget_ns = self.overhead_target * total * base
            left_ns = budget_ns - self.setup_ns - END_OF_RUN_S[0] * 1e9 - self.overhead_ns
            if left_ns < 0.5 * budget_ns:  # a short run (or one that spent half its budget): the rest is rationed
                remaining = max(total - st.batches, 0)
                affordable = math.floor(left_ns / extra) if left_ns > 0 else 0
                n = max(n, remaining + 2 if affordable < 1 else math.ceil(remaining / affordable))
        self.every_n_steps = int(min(max(n, 1), AUTO_MAX))

    @property
    def overhead_ns(self) -> int:
        return self.excess_ns + self.work_ns

    def overhead_fraction(self) -> float:
        """Overhead of per-layer profiling over the run: the profiled steps' extra time (``DISPATCH_FACTOR`` x the
        time measured inside the timer's hooks) plus their attribution and logging time, over the run's step time
        without it. The per-epoch work (``epoch_work_ns``: figure, table, reports), the one-time cost analysis
        (``setup_ns``) and the sampler thread are reported apart; ``benchmarks/overhead.py`` measures the whole
        against runs without the callback."""
        base = self.run_ns - self.excess_ns
        return self.overhead_ns / base if base > 0 else math.nan
