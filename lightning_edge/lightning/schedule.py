"""Which steps the profiling session profiles per layer: one job of
:class:`~lightning_edge.lightning.session.EnergySession` (the others: attribution, in the session, and driving the
twin, :mod:`lightning_edge.lightning.twin_driver`). What a run may spend is not decided here: the scheduler asks the
run's :class:`~lightning_edge.lightning.budget.OverheadBudget`, which it is handed.

* never the first ``warmup_steps`` steps of a stage (the first one is used to capture the model's calls for the
  cost model), nor the ``warmup_steps`` steps after a power-mode change, nor steps within ``settle_s`` of a change
  the controller reports (the board's power settles in 2-3 s);
* ``every_n_steps="auto"``: a stage's first profiled step comes as soon as the warm-up allows, when the budget pays
  for it and for the reports (with its floor, any run of a few seconds does); a run whose budget cannot is told,
  once, how many batches it would need. After it, N keeps what a profiled step costs (the budget's measured cost per
  module call x the model's module calls) within the budget's fraction of the median plain step, and, when the
  run's length is known, the profiled steps still to come within what is left of the run's budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lightning_edge.lightning.budget import DISPATCH_FACTOR, OverheadBudget

__all__ = ["StepScheduler", "StageState", "AUTO_START", "AUTO_MAX", "DISPATCH_FACTOR"]

#: the first every_n_steps of "auto", until a profiled step's cost has been measured
AUTO_START = 10
#: the most steps "auto" may skip between two profiled ones
AUTO_MAX = 500


@dataclass
class StageState:
    """A stage's step counters and its open epoch."""

    batches: int = 0  # steps begun in this stage (over the whole run)
    since_profiled: int = 0  # plain steps since the last profiled one
    n_profiled: int = 0
    captured: bool = False
    min_batches: int = 0  # batches this run would need to afford one profiled step (0: it can, or not known)
    mode_blocked: int = 0  # steps due for profiling that a recent power-mode change held back (this run)
    first: bool | None = None  # this run's verdict on a first profiled step (None: not decided yet)
    epoch: int = 0
    epoch_t0: int | None = None
    epoch_t1: int | None = None
    epoch_steps: list = field(default_factory=list)  # the open epoch's StepTotals


class StepScheduler:
    """The every-N policy (see the module docstring) and the power mode it last saw.

    ``StepScheduler(every_n_steps="auto", warmup_steps=2, budget=None, settle_s=None)``; ``budget``: the run's
    :class:`~lightning_edge.lightning.budget.OverheadBudget` (default: a new one with the default rule)."""

    def __init__(self, every_n_steps: int | str = "auto", warmup_steps: int = 2, budget: OverheadBudget | None = None,
                 settle_s: float | None = None) -> None:
        if every_n_steps != "auto" and (not isinstance(every_n_steps, int) or every_n_steps < 1):
            raise ValueError(f"every_n_steps must be 'auto' or an integer >= 1, got {every_n_steps!r}")
        if warmup_steps < 1:
            raise ValueError(f"warmup_steps must be >= 1 (the first step captures the inputs), got {warmup_steps}")
        self.auto = every_n_steps == "auto"
        self.every_n_steps = AUTO_START if self.auto else int(every_n_steps)
        self.budget = budget if budget is not None else OverheadBudget()
        self.warmup_steps = int(warmup_steps)
        self.settle_s = settle_s
        self.stages: dict[str, StageState] = {}
        self.mode: str | None = None  # the power mode last seen
        self.steps = 0  # steps ended, every stage
        self.run_ns = 0  # total step time (profiled steps included)
        self._mode_change_at: int | None = None  # ``steps`` when a change was seen
        self._learnt = 0  # the budget's ``learnt`` when N was last adapted

    @property
    def overhead_target(self) -> float:
        """The budget's fraction of the run."""
        return self.budget.fraction

    def stage(self, stage: str) -> StageState:
        st = self.stages.get(stage)
        if st is None:
            st = self.stages[stage] = StageState()
        return st

    def mode_ok(self, mode: str | None, since_change_s: float | None, notes: list[str]) -> bool:
        """False when the board's mode changed recently (in steps, or within ``settle_s`` seconds of the change:
        ``since_change_s``, simulated seconds on the twin; None when the board cannot say); tracks the mode."""
        if mode is None:
            return True
        if mode != self.mode:
            self.mode = mode
            self._mode_change_at = self.steps
            notes.append(f"power mode changed to {mode} at step {self.steps}: "
                         f"the next {self.warmup_steps} steps are not profiled")
            return False
        if self._mode_change_at is not None and self.steps - self._mode_change_at <= self.warmup_steps:
            return False
        return not (since_change_s is not None and self.settle_s and since_change_s < self.settle_s)

    def should_profile(self, stage: str, mode: str | None = None, since_change_s: float | None = None,
                       notes: list[str] | None = None, calls: int = 0, owed_s: float = 0.0) -> bool:
        """Whether the next step of ``stage`` is profiled per layer (``mode``: the board's mode as it starts;
        ``since_change_s``: seconds since that mode was set; ``calls``: the model's module calls per step;
        ``owed_s``: work still owed before the first profiled step, e.g. a cost analysis not yet run). The mode is
        tracked at every step, profiled or not."""
        st = self.stage(stage)
        notes = [] if notes is None else notes
        ok = self.mode_ok(mode, since_change_s, notes)
        if st.batches < self.warmup_steps or st.first is False:
            return False
        if self.auto and self._learnt != self.budget.learnt:
            self._adapt(stage, calls)
        if st.n_profiled and st.since_profiled < self.every_n_steps - 1:
            return False
        if not st.n_profiled and self.auto and not self._first_affordable(stage, calls, owed_s, notes):
            return False
        if not ok:
            st.mode_blocked += 1  # the mode, not the run's length, held this step back (the summary says so)
        return ok

    def _first_affordable(self, stage: str, calls: int, owed_s: float, notes: list[str] | None) -> bool:
        """Whether the run's budget pays for a first profiled step of ``stage`` and the reports. Decided once per
        run and stage when the run's length is known (and its advice, how many batches it would need, with it);
        while it is not, asked again at each step (the run grows)."""
        st = self.stages[stage]
        if st.first is not None:
            return st.first
        b = self.budget
        need_s = b.need_s("profiled", calls)
        keep_s = b.need_s("reports") + owed_s
        ok = b.afford(need_s, keep_s)
        if ok or b.expected.get(stage) is None or b.step_s(stage) is None:
            if ok:
                st.first = True
            return ok
        st.first = False
        total_s = need_s + keep_s + b.spent_s()

        def advice() -> str:
            n = b.needs_batches(total_s, stage, self.warmup_steps + 1) or self.warmup_steps + 1
            st.min_batches = n
            run_s = b.run_s()
            return (f"{stage} not profiled per layer: one profiled step and the reports cost about "
                    f"{1e3 * (need_s + keep_s):.0f} ms, over this run's overhead budget ({b.allowance_s():.2g} s: "
                    f"the larger of {100 * b.fraction:.3g} % of {run_s:.3g} s and {b.floor_s:g} s, "
                    f"{1e3 * b.spent_s():.0f} ms of it spent; {b.expected[stage]} batches of "
                    f"{1e3 * b.step_s(stage):.3g} ms); it needs about {n} batches, or EnergyProfiler(overhead_target="
                    f"{min(0.5, total_s / max(run_s, 1e-9)):.2g}) or an integer every_n_steps")

        text = b.advise(f"first profiled step: {stage}", advice)
        if notes is not None and text not in notes:
            notes.append(text)
        return False

    def new_run(self) -> None:
        """A new run (a Trainer call): the stages' verdicts start afresh (the budget starts its own run)."""
        for st in self.stages.values():
            st.min_batches = 0
            st.first = None
            st.mode_blocked = 0

    def plain_step(self, stage: str, dur_ns: int) -> None:
        self.stages[stage].since_profiled += 1
        self.budget.step(stage, dur_ns / 1e9)

    def profiled_step(self, stage: str, hook_ns: int, calls: int = 0) -> float:
        """A profiled step: its extra time is estimated from what the timer measured of itself (step-to-step jitter
        on a busy machine is larger than the effect: comparing step times would be noise); charged to the budget,
        which learns its cost per module call once its attribution is known. Returns the extra time (s)."""
        st = self.stages[stage]
        st.since_profiled = 0
        st.n_profiled += 1
        extra_s = DISPATCH_FACTOR * hook_ns / 1e9
        self.budget.profiled_step(extra_s, calls)
        return extra_s

    def _adapt(self, stage: str, calls: int) -> None:
        """N from the budget's measured cost of a profiled step: within the budget's fraction of the median plain
        step, and, on a run of known length, the profiled steps still to come within what is left of its budget."""
        b = self.budget
        self._learnt = b.learnt
        base = b.step_s(stage)
        if not base or not calls:
            return
        extra = b.need_s("profiled", calls)
        n = self.every_n_steps
        if b.steps_seen(stage) >= 3:  # the per-step rate, on a steady median
            n = max(1, math.ceil(extra / (b.fraction * base)))
            n = min(n, 2 * self.every_n_steps)  # grow at most 2x per update (one noisy step must not stop profiling)
        total, st = b.expected.get(stage), self.stages.get(stage)
        if total and st is not None:  # the whole run: when N's plan would overspend what is left after the reports,
            left_s = b.left_s() - b.need_s("reports")  # the steps to come share what is left
            remaining = max(total - st.batches, 0)
            if remaining / n * extra > left_s:
                affordable = math.floor(left_s / extra) if left_s > 0 else 0
                n = max(n, remaining + 2 if affordable < 1 else math.ceil(remaining / affordable))
        self.every_n_steps = int(min(max(n, 1), AUTO_MAX))

    def overhead_fraction(self) -> float:
        """Per-layer profiling over the run: the profiled steps' extra time (``DISPATCH_FACTOR`` x the time measured
        inside the timer's hooks) plus their attribution and logging, over the run's step time without it. The rest
        (the cost analysis, reports, figures) is in the budget's ``spent``; ``benchmarks/overhead.py`` measures the
        whole against runs without the callback."""
        b = self.budget
        excess_ns = b.spent_s("profiled", "capture") * 1e9
        base = self.run_ns - excess_ns
        return b.spent_s("profiled", "capture", "attribution") * 1e9 / base if base > 0 else math.nan
