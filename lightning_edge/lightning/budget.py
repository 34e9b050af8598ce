"""The profiler's overhead budget: one object that says what a run can afford and records what it spent.

The rule: the wall time profiling adds to a run is at most ``fraction`` (5 %) of the run or ``floor_s``
(1 s), whichever is larger. Within it, in this order: the step totals (always: two clock reads a step), the cost
analysis, one profiled step per stage with its per-layer table and the reports; then, as what is left allows, more
profiled steps, the layer bar chart, the Chrome trace and the roofline figure. A budget is met by doing the work
cheaper, never by skipping what the user came for: with the floor, any fit of a few seconds gets its profiled step.

:class:`OverheadBudget` is handed to every part that spends it (the session's cost analysis and attribution, the
scheduler's choice of steps, the reporter's figures, trace and reports) and holds, per instance (nothing here is
process-wide state):

* the run's one length estimate (:meth:`OverheadBudget.run_s`): the larger of the run so far (its wall time less
  what was spent on profiling) and the announced batches of each stage times the stage's median plain step;
* what was spent, by kind (:meth:`charge`, or ``with budget.spend(kind):`` which measures the block and leaves
  out what blocks inside it charged themselves, so nothing is counted twice);
* what work costs (:class:`UnitCosts`): defaults measured on a 2-core VM, replaced by this budget's own
  measurements as its runs make them;
* the advice given to a run (:meth:`advise`), computed once per run and stage: it does not move with later steps.

A loop without Lightning drives it through :class:`~lightning_edge.lightning.reporter.EnergyReporter` or
:class:`~lightning_edge.lightning.session.EnergySession`; tests inject a clock.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["OverheadBudget", "UnitCosts", "DISPATCH_FACTOR", "IMPORT_S", "FRACTION", "FLOOR_S"]

#: the default rule: at most this fraction of the run...
FRACTION = 0.05
#: ...or this many seconds, whichever is larger
FLOOR_S = 1.0
#: a profiled step costs about this many times the time spent inside the layer timer's own hooks: the rest is
#: PyTorch's dispatch to them (the module call slow path, C++ -> Python node hooks), which no hook can see.
#: Calibrated on ResNet-18 on the CPU by interleaving plain and profiled steps (paired medians: 15.6 ms extra for
#: 7.3 ms in hooks).
DISPATCH_FACTOR = 2.0
#: what importing a module costs the first piece of work that needs it, when the process has not imported it yet
#: (seconds, 2-core VM): the cost analysis's dispatch mode imports ``torch._dynamo`` on its first call (torch wraps
#: every ``__torch_dispatch__`` and its refs in ``_disable_dynamo``, which imports it lazily; ``import lightning``
#: has always imported it already, so a Lightning fit never pays it); the roofline figure imports
#: ``matplotlib.pyplot``. These are facts about this process read from ``sys.modules``, not learnt state.
IMPORT_S = {"torch._dynamo": 1.3, "matplotlib.pyplot": 1.0}


@dataclass
class UnitCosts:
    """What each piece of work costs (seconds), until this budget has measured it (then its last measurement).
    Defaults from a 2-core VM (tiny GPT-2, a small CNN, ResNet-18)."""

    #: a profiled step per module call: its extra time (``DISPATCH_FACTOR`` x the time in the timer's hooks), its
    #: attribution and its logging (0.2-0.4 ms)
    profiled_s_per_call: float = 3e-4
    #: the cost analysis per module call of the captured step, training and inference, once ``torch._dynamo`` is
    #: imported (ResNet-18 training step: 60 ms for the first analysis in a process, 25 ms after)
    analysis_s_per_call: dict = field(default_factory=lambda: {True: 1.2e-3, False: 0.5e-3})
    #: the end-of-run reports: layers.csv, layers.json, the markdown table, the summary
    reports_s: float = 0.010
    #: one layer bar chart (Pillow, 1200 px wide; ``need_s("reports")`` includes one: every run with a profiled
    #: step gets its chart)
    bars_s: float = 0.03
    #: one roofline figure (matplotlib), once matplotlib.pyplot is imported: 0.5-0.9 s on a 2-core VM, so the
    #: largest measured is kept (one figure can take the whole 1 s floor of a short run)
    figure_s: float = 1.0
    #: the Chrome trace, per layer span
    trace_s_per_span: float = 20e-6


class _Frame:
    __slots__ = ("kind", "t0", "inner")

    def __init__(self, kind: str, t0: int) -> None:
        self.kind, self.t0, self.inner = kind, t0, 0


class _Spend:
    """``with budget.spend(kind):`` (a class, not a generator: it runs on every step)."""

    __slots__ = ("budget", "kind")

    def __init__(self, budget: OverheadBudget, kind: str) -> None:
        self.budget, self.kind = budget, kind

    def __enter__(self) -> None:
        b = self.budget
        b._frames.append(_Frame(self.kind, b.clock_ns()))

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        b = self.budget
        fr = b._frames.pop()
        took = b.clock_ns() - fr.t0
        b._add(fr.kind, (took - fr.inner) / 1e9)
        if b._frames:
            b._frames[-1].inner += took
        if fr.kind == "attribution" and b._attributed and not any(f.kind == "attribution" for f in b._frames):
            b._attributed = False
            b._learn_profiled(took / 1e9)


class OverheadBudget:
    """The overhead budget of a run (see the module docstring).

    ``OverheadBudget(fraction=0.05, floor_s=1.0, clock_ns=time.perf_counter_ns, costs=None)``.

    Kinds of spending (``spent``): ``capture`` (the capture step's hooks), ``analysis`` (the cost model),
    ``profiled`` (the profiled steps' extra time), ``attribution`` (attributing and logging them), ``steps``
    (the per-step glue of every step), ``reports``, ``bars``, ``figure``, ``trace``.
    """

    def __init__(self, fraction: float = FRACTION, floor_s: float = FLOOR_S, *,
                 clock_ns: Callable[[], int] = time.perf_counter_ns, costs: UnitCosts | None = None) -> None:
        if not (isinstance(fraction, (int, float)) and 0 < fraction < 1):
            raise ValueError(f"the overhead budget is a fraction of the run time (0.05 = 5 %), got {fraction!r}")
        if not (isinstance(floor_s, (int, float)) and math.isfinite(floor_s) and floor_s >= 0):
            raise ValueError(f"floor_s: the seconds every run may spend whatever its length (>= 0), got {floor_s!r}")
        self.fraction = float(fraction)
        self.floor_s = float(floor_s)
        self.clock_ns = clock_ns
        self.costs = costs if costs is not None else UnitCosts()
        self.expected: dict[str, int | None] = {}  # per stage: the batches this run is announced to have
        self.spent: dict[str, float] = {}  # seconds by kind, this run
        self.advice: dict[str, Any] = {}  # what was advised to this run, by key (computed once)
        self.learnt = 0  # counts the unit costs measured (the scheduler adapts when it moves)
        self._steps: dict[str, deque] = {}  # per stage: recent plain step times (s)
        self._medians: dict[str, float | None] = {}
        self._frames: list[_Frame] = []
        self._pending_profiled: tuple[float, int] | None = None  # a profiled step's extra time and module calls
        self._attributed = False  # a profiled step was attributed in the open spend("attribution") block
        self.t0_ns = clock_ns()

    # ------------------------------------------------------------------ the run
    def start(self) -> None:
        """A run (a Trainer call) starts: its length, its spending and its advice start afresh (what work costs is
        kept: it is a property of the model and the machine)."""
        self.expected.clear()
        self.spent.clear()
        self.advice.clear()
        self._steps.clear()
        self._medians.clear()
        self._pending_profiled = None
        self._attributed = False
        self.t0_ns = self.clock_ns()

    def expect(self, stage: str, batches: int | None) -> None:
        """How many batches of ``stage`` the run is announced to have (None: unknown)."""
        self.expected[stage] = None if batches is None or batches <= 0 else int(batches)

    def step(self, stage: str, seconds: float) -> None:
        """A plain step's wall time (the run's length estimate)."""
        q = self._steps.get(stage)
        if q is None:
            q = self._steps[stage] = deque(maxlen=50)
        q.append(float(seconds))
        self._medians[stage] = None

    def step_s(self, stage: str) -> float | None:
        """The median plain step of ``stage`` (None before one)."""
        m = self._medians.get(stage)
        if m is None:
            q = self._steps.get(stage)
            if not q:
                return None
            m = self._medians[stage] = statistics.median(q)
        return m

    def steps_seen(self, stage: str) -> int:
        return len(self._steps.get(stage) or ())

    def elapsed_s(self) -> float:
        """Wall time since the run started."""
        return (self.clock_ns() - self.t0_ns) / 1e9

    def run_s(self) -> float:
        """The run's length without profiling: the larger of its wall time so far (less what was spent on
        profiling) and the announced batches of each stage times its median plain step."""
        est = 0.0
        for stage, n in self.expected.items():
            base = self.step_s(stage) if n else None
            if base is not None:
                est += n * base
        return max(est, self.elapsed_s() - self.spent_s())

    def allowance_s(self) -> float:
        """What this run may spend: ``max(fraction x run_s, floor_s)``."""
        return max(self.fraction * self.run_s(), self.floor_s)

    def spent_s(self, *kinds: str) -> float:
        """Seconds spent in this run (of ``kinds``; all of them by default, the open ``spend`` blocks' time so far
        included: a decision taken inside one counts what that block has spent already)."""
        if not kinds:
            return sum(self.spent.values()) + self._open_s()
        return sum(self.spent.get(k, 0.0) for k in kinds)

    def _open_s(self) -> float:
        """Time in the open ``spend`` blocks not charged yet (their closed inner blocks are)."""
        if not self._frames:
            return 0.0
        return max(self.clock_ns() - self._frames[0].t0 - sum(f.inner for f in self._frames), 0) / 1e9

    def left_s(self) -> float:
        return self.allowance_s() - self.spent_s()

    # ------------------------------------------------------------------ what work costs
    def need_s(self, kind: str, n: int = 0, training: bool = True) -> float:
        """The expected cost of a piece of work: ``profiled`` (a step of ``n`` module calls), ``analysis`` (of a
        step of ``n`` module calls; ``training`` with its backward), ``reports`` (one bar chart included),
        ``bars`` (``n`` charts),
        ``figure`` (``n`` figures), ``trace`` (``n`` layer spans)."""
        c = self.costs
        if kind == "profiled":
            return c.profiled_s_per_call * max(n, 1)
        if kind == "analysis":
            return c.analysis_s_per_call[bool(training)] * max(n, 1) + self.import_s("torch._dynamo")
        if kind == "reports":  # with one layer bar chart: what every run with a profiled step gets
            return c.reports_s + c.bars_s
        if kind == "bars":
            return c.bars_s * max(n, 1)
        if kind == "figure":
            return c.figure_s * max(n, 1) + self.import_s("matplotlib.pyplot")
        if kind == "trace":
            return c.trace_s_per_span * max(n, 1)
        raise ValueError(f"unknown kind of work {kind!r}")

    @staticmethod
    def import_s(module: str) -> float:
        """What importing ``module`` will cost the work that needs it (0 once this process has it)."""
        return 0.0 if module in sys.modules else IMPORT_S.get(module, 0.0)

    def afford(self, need_s: float, keep_s: float = 0.0) -> bool:
        """Whether ``need_s`` more seconds fit what is left of this run's allowance after keeping ``keep_s`` for
        work still owed (the reports, a first profiled step)."""
        return need_s + keep_s <= self.left_s()

    def needs_batches(self, need_s: float, stage: str, at_least: int = 1) -> int | None:
        """How many batches of ``stage`` a run needs so that its allowance pays ``need_s`` (None when its step time
        is not known)."""
        base = self.step_s(stage)
        if not base:
            return None
        return max(at_least, math.ceil(need_s / (self.fraction * base)))

    def advise(self, key: str, compute: Callable[[], Any]) -> Any:
        """The advice for ``key`` in this run, computed once (later calls return the first answer)."""
        if key not in self.advice:
            self.advice[key] = compute()
        return self.advice[key]

    # ------------------------------------------------------------------ what was spent
    def _add(self, kind: str, seconds: float) -> None:
        self.spent[kind] = self.spent.get(kind, 0.0) + seconds

    def charge(self, kind: str, seconds: float) -> None:
        """Record ``seconds`` of overhead of ``kind`` that no ``spend`` block measured (a profiled step's extra time
        inside the training step)."""
        self._add(kind, float(seconds))

    def spend(self, kind: str) -> _Spend:
        """``with budget.spend(kind):`` charges the block's wall time to ``kind``, less what blocks inside it
        charged (an analysis inside a step's glue is the analysis's, not the glue's)."""
        return _Spend(self, kind)

    def profiled_step(self, extra_s: float, calls: int) -> None:
        """A profiled step's extra time (``DISPATCH_FACTOR`` x its hooks' time, ``calls`` module calls); its cost
        per module call is learnt once its attribution and logging are known (:meth:`attributed`)."""
        self.charge("profiled", extra_s)
        if calls > 0:
            self._pending_profiled = (float(extra_s), int(calls))

    def attributed(self) -> None:
        """Profiled steps were attributed in the open ``spend("attribution")`` block: when its outermost block
        closes (their logging included), a profiled step's cost per module call is learnt."""
        self._attributed = True

    def _learn_profiled(self, attribution_s: float) -> None:
        """The attribution and logging of a profiled step (an outermost ``spend("attribution")`` block) closed:
        the step's whole cost per module call is known."""
        if self._pending_profiled is None:
            return
        extra, calls = self._pending_profiled
        self._pending_profiled = None
        self.costs.profiled_s_per_call = (extra + attribution_s) / calls
        self.learnt += 1

    def learn(self, kind: str, seconds: float, n: int = 1, training: bool = True) -> None:
        """What a piece of work of ``kind`` cost (``n``: its module calls, charts, spans), for the next estimate."""
        c = self.costs
        if kind == "analysis" and n > 0:
            c.analysis_s_per_call[bool(training)] = seconds / n
        elif kind == "reports":
            c.reports_s = seconds
        elif kind == "bars" and n > 0:
            c.bars_s = seconds / n
        elif kind == "figure" and n > 0:
            c.figure_s = max(c.figure_s, seconds / n)
        elif kind == "trace" and n > 0:
            c.trace_s_per_span = seconds / n
        else:
            return
        self.learnt += 1

    def __repr__(self) -> str:
        return (f"OverheadBudget(max({100 * self.fraction:.3g} % of {self.run_s():.3g} s, {self.floor_s:g} s): "
                f"spent {self.spent_s():.3g} s)")
