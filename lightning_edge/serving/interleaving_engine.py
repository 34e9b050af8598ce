"""Managed interleaving (Fulcrum sections 3 and 4, Fig. 4) as a plain loop: :class:`InterleavingEngine`.

One device, one minibatch at a time. Each *cycle* runs one inference minibatch of ``bs`` requests and ``tau``
background minibatches (training, or a non-urgent inference, section 5.4) in the idle time while the next ``bs``
requests arrive: ``tau = floor((bs / alpha - t_in) / t_tr)``, so the first request of a minibatch waits
``(bs - 1) / alpha`` and its latency is ``(bs - 1) / alpha + t_in`` (section 4), and the background throughput is
``tau * alpha / bs`` minibatches/s.

Before each background minibatch the engine (``before_background()``):

1. serves the oldest ``bs`` pending requests while at least ``bs`` are pending (this resets the cycle);
2. serves what is pending (fewer than ``bs``) when the oldest request would otherwise miss its budget
   (the deadline guard of :mod:`lightning_edge.serving.engine`);
3. lets a background minibatch start if fewer than ``tau`` ran this cycle *and*, when requests are pending, it is
   expected to end before the oldest one's guard: ``now + t_tr (1 + safety) <= guard`` (only requests that have
   arrived count: the engine does not look into the future);
4. otherwise idles until the next arrival or the guard, and repeats.

``t_tr`` and ``t_in`` start from the plan's profiled times and follow the observed means once 3 minibatches ran.
Steps 2 and the check in 3 are ours (the paper assumes exact times); with exact times and a constant rate they
change nothing for a feasible plan.

Use it directly (``engine.run(train_step, steps=100)``), or through the Lightning callback
(:mod:`lightning_edge.serving.interleaver`), which calls ``before_background``/``after_background`` around every
training step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from lightning_edge.serving.arrivals import ArrivalProcess
from lightning_edge.serving.engine import BatchServer, ModelRunner, Plan, RequestQueue, RunningMean
from lightning_edge.serving.stats import LatencySummary, summarize_latencies

if TYPE_CHECKING:
    from lightning_edge.devices.controllers.base import ModeController
    from lightning_edge.devices.meter import StepMeter
    from lightning_edge.tuning.problems import Solution

__all__ = ["InterleavingEngine", "InterleavingReport"]


@dataclass
class InterleavingReport:
    """What a managed (or native) interleaving run achieved. ``label``: ``simulated`` (twin) or ``measured``.

    ``background_throughput`` is background minibatches per second over ``elapsed_s`` (from the start to the end of
    the last background minibatch); ``predicted_throughput`` the tuner's ``tau * alpha / bs``.
    """

    scheduler: str
    label: str
    plan: str
    latency: LatencySummary
    background_minibatches: int
    infer_minibatches: int
    elapsed_s: float
    background_throughput: float
    predicted_throughput: float
    background_busy_s: float
    infer_busy_s: float
    idle_s: float
    energy_j: float
    mean_power_w: float
    partial_minibatches: int = 0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["latency"] = self.latency.as_dict()
        return d

    def describe(self) -> str:
        return (f"{self.scheduler} ({self.label}): {self.plan}; {self.latency.describe()}; "
                f"{self.background_minibatches} background minibatches in {self.elapsed_s:.2f} s = "
                f"{self.background_throughput:.2f}/s (predicted {self.predicted_throughput:.2f}/s); "
                f"{self.mean_power_w:.1f} W mean, {self.energy_j:.1f} J")


class InterleavingEngine:
    """Managed interleaving of a latency-bound inference with background minibatches (see the module docstring).

    Args:
        plan: a :class:`~lightning_edge.serving.engine.Plan` (or a concurrent ``Solution``) with ``tau >= 1``.
        arrivals: the inference requests' :class:`~lightning_edge.serving.arrivals.ArrivalProcess`.
        latency_budget_s: every request's budget (arrival to completion).
        meter: the device's step meter (``board.meter()``: ``TwinMeter``, simulated time; ``SensorMeter``, wall
            clock), which times both the inference and the background minibatches.
        runner: a :class:`~lightning_edge.serving.engine.ModelRunner`: runs the real inference model on the requests
            (on the twin optional: its wall time is not counted).
        controller: applies ``plan.mode`` at ``start()`` (``None``: leave the mode alone); restored by ``finish()``
            when ``restore=True``.
        safety: relative margin on the expected minibatch times in the deadline checks (default 5 %).
    """

    def __init__(self, plan: Plan | Solution, arrivals: ArrivalProcess, latency_budget_s: float, *, meter: StepMeter,
                 runner: ModelRunner | None = None, controller: ModeController | None = None, restore: bool = False,
                 safety: float = 0.05,
                 scheduler: str = "managed interleaving") -> None:
        if not isinstance(plan, Plan):
            plan = Plan.from_solution(plan)
        if plan.train_minibatches < 1:
            raise ValueError(f"managed interleaving needs tau >= 1 background minibatch per inference cycle; the plan "
                             f"({plan.describe()}) has tau = {plan.train_minibatches}")
        self.plan = plan
        self.meter = meter
        self.controller = controller
        self.restore = bool(restore)
        self.safety = float(safety)
        self.scheduler = scheduler
        self.queue = RequestQueue(arrivals)
        self.server = BatchServer(self.queue, meter, latency_budget_s=latency_budget_s, mode=plan.mode,
                                  batch_size=plan.batch_size, infer_time_s=plan.infer_time_s, runner=runner,
                                  safety=safety)
        self.log = self.server.log
        self.t_tr = RunningMean(plan.train_time_s)
        self.in_cycle = 0
        self.started = False
        self.finished: InterleavingReport | None = None
        self._bg_start: float | None = None
        self._last_bg_end = 0.0
        self._t0 = 0.0

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> InterleavingEngine:
        if self.started:
            return self
        if self.controller is not None and self.plan.mode is not None:
            self.controller.apply(self.plan.mode)
        self._t0 = self.meter.now_s()
        self._last_bg_end = self._t0
        self.started = True
        return self

    def before_background(self) -> None:
        """Serve inference as the schedule says, until one background minibatch may start (see module docstring)."""
        if not self.started:
            self.start()
        srv = self.server
        while True:
            if srv.step_due():
                self.in_cycle = 0
                continue
            now = self.meter.now_s()
            pending = self.queue.pending
            guard = srv.guard_s(self.queue.oldest_s()) if pending else math.inf
            t_tr = self.t_tr.value or 0.0
            # causal: only requests that have arrived constrain the start (an empty queue leaves it to tau)
            if self.in_cycle < self.plan.train_minibatches and now + t_tr * (1.0 + self.safety) <= guard:
                break
            nxt = srv.next_event_s()
            if not math.isfinite(nxt):
                break  # no more requests will come: the background runs freely
            srv.idle_until(nxt)
        self._bg_start = self.meter.start()

    def after_background(self) -> float:
        """Record the background minibatch that just ran (on the twin: advance the clock by its simulated time)."""
        if self._bg_start is None:
            raise RuntimeError("after_background() without before_background()")
        r = self.meter.stop(self.plan.mode, "train")
        dur = r.time_s
        self.log.add("background", self._bg_start, dur, r.power_w, 1)
        self.t_tr.add(dur)
        self.in_cycle += 1
        self._bg_start = None
        self._last_bg_end = self.meter.now_s()
        return dur

    def run(self, background_step: Callable[[], Any] | None = None, *, steps: int | None = None,
            duration_s: float | None = None) -> InterleavingReport:
        """The plain loop: ``steps`` background minibatches or until ``duration_s`` (clock seconds), whichever first.

        ``background_step()`` runs one real training (or non-urgent inference) minibatch; on the twin it may be
        ``None`` (nothing real runs, only simulated time passes)."""
        if steps is None and duration_s is None:
            raise ValueError("run() needs steps= or duration_s=")
        if background_step is None and not self.meter.simulated:
            raise ValueError("on the wall clock run() needs a background_step to execute")
        self.start()
        done = 0
        while (steps is None or done < steps) and (duration_s is None or self.meter.now_s() - self._t0 < duration_s):
            self.before_background()
            if background_step is not None:
                background_step()
            self.after_background()
            done += 1
        return self.finish()

    def finish(self) -> InterleavingReport:
        """Serve what is pending now, restore the mode if asked, and return the report (idempotent)."""
        if self.finished is not None:
            return self.finished
        if not self.started:
            self.start()
        self.queue.admit(self.meter.now_s())
        partial = self.server.partial  # the final drain is not the deadline guard
        while self.queue.pending:
            self.server.serve(min(self.queue.pending, self.plan.batch_size))
        self.server.partial = partial
        if self.restore and self.controller is not None:
            try:
                self.controller.restore()
            except Exception:  # noqa: BLE001 - restoring must not hide the report
                pass
        self.finished = self.report()
        return self.finished

    # ------------------------------------------------------------------------------------------ results
    def report(self) -> InterleavingReport:
        label = self.meter.label
        lat = summarize_latencies(self.queue.latencies_s(), self.server.budget_s, label)
        end = self.meter.now_s()
        elapsed = max(self._last_bg_end - self._t0, 0.0)
        n_bg = self.log.count("background")
        e = self.meter.energy_j(self._t0, end)
        energy = self.log.energy_j() if e is None else e
        span = end - self._t0
        notes = []
        if self.server.partial:
            notes.append(f"{self.server.partial} inference minibatches ran with fewer than bs requests (deadline guard)")
        return InterleavingReport(
            scheduler=self.scheduler, label=label, plan=self.plan.describe(), latency=lat,
            background_minibatches=n_bg, infer_minibatches=self.log.count("infer"), elapsed_s=elapsed,
            background_throughput=n_bg / elapsed if elapsed > 0 else 0.0,
            predicted_throughput=float(self.plan.throughput), background_busy_s=self.log.busy_s("background"),
            infer_busy_s=self.log.busy_s("infer"), idle_s=self.log.idle_s, energy_j=float(energy),
            mean_power_w=float(energy / span) if span > 0 else math.nan, partial_minibatches=self.server.partial, notes=notes)
