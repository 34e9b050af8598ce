"""``InferenceRunner``: serve inference requests arriving at a rate, with a tuned power mode and batch size
(Fulcrum section 4 "Standalone Inference", sections 5.4 and 7.4 for changing rates).

::

    from lightning_edge.serving import InferenceRunner, PoissonArrivals, synthetic_trace
    from lightning_edge.tuning import InferenceProblem

    problem = InferenceProblem(power_budget_w=40, latency_budget_s=0.1, arrival_rps=60)
    runner = InferenceRunner("resnet18", problem, device="sim:orin-agx", arrivals=synthetic_trace())
    report = runner.run()                       # the whole 2-hour synthetic trace, in simulated time (seconds)
    print(report.describe())                    # p50/p95/p99/max latency, misses, power, energy, re-tunes

The loop (shared with managed interleaving, :class:`~lightning_edge.serving.engine.BatchServer`): requests queue
FIFO; a minibatch of the tuned ``bs`` starts when ``bs`` requests are pending, or earlier, with what is pending,
when the oldest request would otherwise miss its budget (the deadline guard). The arrival rate is estimated over a
sliding window (:class:`~lightning_edge.serving.arrivals.RateEstimator`); when it moves by more than
``rate_tolerance`` from the rate the plan was tuned for, the problem is solved again for the estimated rate:
``tuner="dynamic"`` (default) reuses every profile and runs GMD again, backtracking to a larger batch size, only
when nothing profiled meets the new rate (section 5.4); ``"gmd"`` re-runs GMD on the shared profile store;
``"als"`` explores once and looks every rate up; a ``ProfileTable`` is looked up; a fixed ``Solution``/``Plan``
never changes. Profiling is not charged to the serving timeline (the profiles' count is reported).

On the twin everything is ``simulated``: time is simulated seconds, minibatch time and power come from the twin at
the current mode (with its measurement noise), and with ``run_model=True`` the real model also runs on the CPU on
real tensors so predictions are real (``report.outputs``). On real hardware (``device="cpu"``, ``"jetson"`` or a
device object) the same loop runs on the wall clock with the real model, the mode controller and the power sensor.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_edge.devices.board import get_board
from lightning_edge.serving.arrivals import ArrivalProcess, ConstantArrivals, RateEstimator
from lightning_edge.serving.engine import (
    BatchServer,
    ModelRunner,
    Plan,
    RequestInputs,
    RequestQueue,
)
from lightning_edge.serving.stats import LatencySummary, summarize_latencies
from lightning_edge.serving.tune import Retuner
from lightning_edge.tuning.problems import InferenceProblem

if TYPE_CHECKING:
    import torch
    from lightning.pytorch.loggers import TensorBoardLogger
    from torch import nn
    from torch.utils.tensorboard import SummaryWriter

    from lightning_edge.devices.meter import StepMeter
    from lightning_edge.modes import PowerModeSpace
    from lightning_edge.serving.stats import MinibatchLog
    from lightning_edge.tuning.problems import Solution, Workload
    from lightning_edge.tuning.search import Strategy
    from lightning_edge.tuning.store import StoreSpec
    from lightning_edge.tuning.table import ProfileTable
    from lightning_edge.twin.model import OrinTwin
    from lightning_edge.twin.sim_workload import SimWorkload

__all__ = ["InferenceRunner", "ServingReport", "RetuneEvent", "twin_workload"]


def twin_workload(model: nn.Module | str | SimWorkload, twin: OrinTwin,
                  example: torch.Tensor | Mapping[str, torch.Tensor] | None = None, *, seed: int | None = 0,
                  train_batch_size: int | None = None) -> SimWorkload:
    """A :class:`~lightning_edge.twin.sim_workload.SimWorkload` for ``model`` on ``twin``: a zoo name, an existing
    twin workload (returned as is), or an ``nn.Module`` with ``example`` = one minibatch (batch dimension first)."""
    from lightning_edge.twin.sim_workload import SimWorkload

    if hasattr(model, "sweep") and hasattr(model, "infer"):
        return model
    if isinstance(model, str):
        return SimWorkload(model, twin, seed=seed, **({"train_batch_size": train_batch_size} if train_batch_size else {}))
    if example is None:
        raise ValueError(f"the twin needs an example input for {type(model).__name__}: pass example_input= (one "
                         "request's tensor) or request_inputs=, or use a zoo model name such as 'resnet18'")
    from collections.abc import Mapping

    # a dict example is one keyword call, model(**example)
    example_inputs = example if isinstance(example, Mapping) else (example,)
    return SimWorkload(model, twin, example_inputs=example_inputs, seed=seed, train_batch_size=train_batch_size)


@dataclass(frozen=True)
class RetuneEvent:
    """A (re-)tune: when, for which estimated rate, what it chose (``None``: nothing feasible, plan kept)."""

    t_s: float
    arrival_rps: float
    plan: str | None
    batch_size: int
    new_profiles: int
    reason: str


@dataclass
class ServingReport:
    """Result of :meth:`InferenceRunner.run` (``label``: ``simulated`` on the twin, else ``measured``)."""

    label: str
    duration_s: float
    latency: LatencySummary
    minibatches: int
    partial_minibatches: int
    energy_j: float
    mean_power_w: float
    busy_s: float
    idle_s: float
    retunes: list[RetuneEvent]
    profiles: int
    windows: list[dict] = field(default_factory=list)
    outputs: Any = None

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["latency"] = self.latency.as_dict()
        d.pop("outputs", None)
        return d

    def __str__(self) -> str:
        """A readable table (``print(report)``); :meth:`describe` is the one-line form, :meth:`as_dict` the data."""
        lat, ms = self.latency, 1e3
        rows = [("served", f"{lat.n_requests} requests in {self.duration_s:.1f} s ({self.label})"),
                ("latency", f"p50 {lat.p50_s * ms:.1f} ms, p95 {lat.p95_s * ms:.1f} ms, p99 {lat.p99_s * ms:.1f} ms, "
                            f"max {lat.max_s * ms:.1f} ms" if lat.n_requests else "-"),
                ("within budget", f"{lat.within_budget * 100:.2f} % of requests within {lat.budget_s * ms:g} ms "
                                  f"({lat.deadline_misses} misses)"),
                ("minibatches", f"{self.minibatches} ({self.partial_minibatches} partial); busy {self.busy_s:.1f} s, "
                                f"idle {self.idle_s:.1f} s"),
                ("power, energy", f"{self.mean_power_w:.1f} W mean, {self.energy_j:.1f} J ({self.label})"),
                ("tuning", f"{self.profiles} profiles, {sum(1 for e in self.retunes if e.reason != 'initial')} "
                           "re-tunes")]
        rows += [(f"  at {e.t_s:.1f} s", f"{e.reason}: {e.arrival_rps:.1f} requests/s -> "
                                         f"{e.plan or 'nothing feasible, plan kept'} (bs {e.batch_size}, "
                                         f"{e.new_profiles} new profiles)") for e in self.retunes]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)

    def describe(self) -> str:
        n_re = sum(1 for e in self.retunes if e.reason != "initial")
        return (f"inference serving ({self.label}) for {self.duration_s:.1f} s: {self.latency.describe()}; "
                f"{self.minibatches} minibatches ({self.partial_minibatches} partial), {self.mean_power_w:.1f} W mean, "
                f"{self.energy_j:.1f} J; {n_re} re-tunes, {self.profiles} profiles")


class InferenceRunner:
    """Serve an inference model under an :class:`~lightning_edge.tuning.InferenceProblem` (see module docstring).

    Args:
        model: an ``nn.Module`` (a ``LightningModule`` too: it is called as ``model(x)``), a zoo name (twin only), or
            a twin workload (``SimWorkload``).
        problem: power budget, latency budget, the initial arrival rate and the candidate batch sizes.
        device: ``"sim:orin-agx"`` (default), a ``SimulatedOrin``, ``"cpu"``, ``"jetson"`` or a device object.
        arrivals: an :class:`~lightning_edge.serving.arrivals.ArrivalProcess` (default: constant at the problem's rate).
        tuner: ``"dynamic"`` (default), ``"gmd"``, ``"als"``, ``"exhaustive"`` or any other registered strategy's
            name (:func:`~lightning_edge.serving.tune.tuner_names`), a ``ProfileTable``, a ``Strategy``, or a fixed
            ``Solution``/``Plan`` (required on a device without a mode controller, e.g. ``"cpu"``).
        workload: what the tuner profiles (default on the twin: a ``SimWorkload`` of ``model``; on real boards give
            one that measures the real model at a mode).
        example_input: one request's input tensor (no batch dimension), or a dict of them for a model called with
            keyword arguments; ``request_inputs``: a tensor of request samples (first dimension = samples), a dict of
            such tensors (``model(**requests)``) or :class:`~lightning_edge.serving.engine.RequestInputs`.
        run_model: on the twin, also run the real model on CPU (default: when ``model`` is an ``nn.Module``).
        space: the modes to tune over (default: Fulcrum's 441-mode space on the twin, else the controller's).
        store: profile store for the tuner (default: in memory; ``"default"`` persists them, see docs/tuning.md).
        retune, rate_window_s, rate_tolerance, retune_interval_s: re-tune when the arrival rate estimated over the
            last ``rate_window_s`` differs by more than ``rate_tolerance`` (relative) from the tuned rate, at most
            every ``retune_interval_s`` (default: ``rate_window_s``).
        safety: relative margin on the expected minibatch time in the deadline guard.
        report_window_s: the report's per-window table (default 300 s, the trace's segments).
        logger: a TensorBoard ``SummaryWriter`` or a Lightning ``TensorBoardLogger``: per-window scalars
            ``serving/latency_p50_ms``, ``.../latency_p99_ms``, ``serving/deadline_misses``, ``serving/batch_size``,
            ``serving/arrival_rps``, ``serving/power_w``.
    """

    def __init__(self, model: nn.Module | str | SimWorkload, problem: InferenceProblem, *, device: Any = "sim:orin-agx",
                 arrivals: ArrivalProcess | None = None,
                 tuner: str | Plan | Solution | ProfileTable | Strategy | None = "dynamic", workload: Workload | None = None,
                 example_input: torch.Tensor | Mapping[str, torch.Tensor] | None = None,
                 request_inputs: RequestInputs | torch.Tensor | Mapping[str, torch.Tensor] | None = None,
                 run_model: bool | None = None, space: PowerModeSpace | None = None, store: StoreSpec = None,
                 retune: bool = True,
                 rate_window_s: float = 30.0, rate_tolerance: float = 0.1, retune_interval_s: float | None = None,
                 safety: float = 0.05, report_window_s: float = 300.0,
                 logger: SummaryWriter | TensorBoardLogger | None = None, seed: int | None = 0,
                 als_latency_range_s: tuple[float, float] | None = None,
                 als_rate_range_rps: tuple[float, float] | None = None, keep_outputs: int = 0) -> None:
        if not isinstance(problem, InferenceProblem):
            raise TypeError(f"InferenceRunner needs an InferenceProblem, got {type(problem).__name__}")
        self.model = model
        self.problem = problem
        self.device = get_board("cpu" if device is None else device, control="write", seed=seed)
        self.arrivals = arrivals if arrivals is not None else ConstantArrivals(problem.arrival_rps)
        if not isinstance(self.arrivals, ArrivalProcess):
            raise TypeError(f"arrivals: expected an ArrivalProcess, got {type(self.arrivals).__name__}")
        self.seed = seed
        self.safety = float(safety)
        self.retune_enabled = bool(retune)
        self.rate_window_s = float(rate_window_s)
        self.rate_tolerance = float(rate_tolerance)
        if not self.rate_tolerance > 0:
            raise ValueError(f"rate_tolerance must be > 0 (relative), got {rate_tolerance!r}")
        self.retune_interval_s = float(retune_interval_s if retune_interval_s is not None else rate_window_s)
        self.report_window_s = float(report_window_s)
        self.logger = logger
        self.keep_outputs = int(keep_outputs)
        self.inputs = self._inputs(request_inputs, example_input, model)
        is_module = callable(model) and not isinstance(model, str) and not hasattr(model, "sweep")
        from lightning_edge.cost.capture import has_forward

        if is_module and not has_forward(model):  # said before anything runs
            raise TypeError(f"InferenceRunner: {type(model).__name__} has no forward, so it cannot serve requests; "
                            "pass the module that does (e.g. InferenceRunner(model.net, ...))")
        if run_model is None:
            run_model = is_module and self.inputs is not None
        if run_model and not (is_module and self.inputs is not None):
            raise ValueError("run_model=True needs an nn.Module model and example_input= or request_inputs=")
        if not self.device.simulated and not is_module:
            raise ValueError(f"on real hardware ({self.device.name}) the model must be an nn.Module to run")
        if not self.device.simulated and self.inputs is None:
            raise ValueError("on real hardware the requests need tensors: pass example_input= or request_inputs=")
        self.run_model = bool(run_model)
        self.fixed_plan: Plan | None = None
        if isinstance(tuner, Plan):
            self.fixed_plan = tuner
        elif tuner is not None and hasattr(tuner, "problem") and hasattr(tuner, "mode"):
            self.fixed_plan = Plan.from_solution(tuner)
        self.retuner: Retuner | None = None
        if self.fixed_plan is None:
            if self.device.simulated and workload is None:
                example = None if self.inputs is None else self.inputs.head(1)
                workload = twin_workload(model, self.device.twin, example, seed=seed)
            if workload is None:
                raise ValueError(f"tuner={tuner!r} on {self.device.name} needs workload= (something that measures "
                                 "the real model at a mode); or pass a fixed Solution/Plan as tuner")
            if space is None:
                space = self.device.tuning_space
            self.retuner = Retuner(tuner, space, workload, store=store, seed=seed,
                                   als_latency_range_s=als_latency_range_s, als_rate_range_rps=als_rate_range_rps)
        self.workload = workload
        self.space = space
        self.report: ServingReport | None = None

    @staticmethod
    def _inputs(request_inputs: RequestInputs | torch.Tensor | Mapping[str, torch.Tensor] | None,
                example_input: torch.Tensor | Mapping[str, torch.Tensor] | None,
                model: nn.Module | str | SimWorkload) -> RequestInputs | None:
        if isinstance(request_inputs, RequestInputs):
            return request_inputs
        if request_inputs is not None:
            return RequestInputs(request_inputs)
        if isinstance(example_input, dict):  # one request's keyword inputs (no batch dimension)
            return RequestInputs({k: v.unsqueeze(0) for k, v in example_input.items()})
        if example_input is not None:
            shape = tuple(example_input.shape)
            return RequestInputs.random(shape, seed=0, dtype=example_input.dtype)
        return None

    # ------------------------------------------------------------------------------------------ tuning
    def _solve(self, rate: float) -> tuple[Plan | None, int]:
        if self.fixed_plan is not None:
            return self.fixed_plan, 0
        assert self.retuner is not None
        sol, new = self.retuner.solve(dataclasses.replace(self.problem, arrival_rps=float(rate)))
        return (Plan.from_solution(sol) if sol is not None else None), new

    # ------------------------------------------------------------------------------------------ run
    def run(self, duration_s: float | None = None) -> ServingReport:
        """Serve the arrivals for ``duration_s`` clock seconds (default: until a finite trace ends)."""
        end = self.arrivals.end_s() if duration_s is None else float(duration_s)
        if not (math.isfinite(end) and end > 0):
            raise ValueError("run() needs duration_s= (seconds) for an unbounded arrival process")
        dev = self.device
        if dev.simulated:
            runner = ModelRunner(self.model, self.inputs, keep=self.keep_outputs) if self.run_model else None
            infer = self.workload if self.workload is not None else twin_workload(
                self.model, dev.twin, None if self.inputs is None else self.inputs.head(1), seed=self.seed)
            # serving does not model the power's settling after a mode change (the tuner's windows do)
            meter = dev.meter(seed=None if self.seed is None else self.seed + 101, settling=False, infer=infer)
        else:
            runner = ModelRunner(self.model, self.inputs, keep=self.keep_outputs)
            meter = dev.meter(wait=False)
        meter.open()
        try:
            return self._loop(end, meter, runner)
        finally:
            meter.close()
            if dev.controller is not None and self.fixed_plan is None:
                try:
                    dev.controller.restore()
                except Exception:  # noqa: BLE001
                    pass

    def _loop(self, end_s: float, meter: StepMeter, runner: ModelRunner | None) -> ServingReport:
        dev = self.device
        rate = self.problem.arrival_rps
        plan, new = self._solve(rate)
        if plan is None:
            raise RuntimeError(f"no feasible plan for {self.problem.describe()}: the tuner found no mode and batch "
                               "size meeting the budgets")
        if plan.mode is None and dev.simulated and dev.controller is not None:
            plan = dataclasses.replace(plan, mode=dev.controller.current())  # "the current mode" is a mode on the twin
        events = [RetuneEvent(0.0, rate, plan.describe(), plan.batch_size, new, "initial")]
        profiles = new
        if dev.controller is not None and plan.mode is not None:
            dev.controller.apply(plan.mode)
        queue = RequestQueue(self.arrivals, stop_s=end_s)
        server = BatchServer(queue, meter, latency_budget_s=self.problem.latency_budget_s, mode=plan.mode,
                             batch_size=plan.batch_size, infer_time_s=plan.infer_time_s, runner=runner,
                             safety=self.safety)
        est = RateEstimator(self.rate_window_s)
        fed = 0
        last_tune = 0.0
        t0 = meter.now_s()
        while True:
            served = server.step_due()
            if queue.admitted > fed:
                est.observe(queue.arrival_s(slice(fed, queue.admitted)))
                fed = queue.admitted
            now = meter.now_s()
            if self.retune_enabled and self.fixed_plan is None and now - last_tune >= self.retune_interval_s:
                r = est.rate_rps(now)
                if r is not None and abs(r - rate) > self.rate_tolerance * rate:
                    last_tune = now
                    new_plan, new = self._solve(r)
                    profiles += new
                    if new_plan is None:
                        events.append(RetuneEvent(now, r, None, plan.batch_size, new, "rate change: nothing feasible"))
                    else:
                        rate = r
                        if dev.controller is not None and new_plan.mode is not None and new_plan.mode != plan.mode:
                            dev.controller.apply(new_plan.mode)
                        plan = new_plan
                        server.set_plan(plan.mode, plan.batch_size, plan.infer_time_s)
                        events.append(RetuneEvent(now, r, plan.describe(), plan.batch_size, new, "rate change"))
            if served:
                continue
            nxt = server.next_event_s()
            if not math.isfinite(nxt):
                break
            server.idle_until(nxt)
        span = meter.now_s() - t0
        label = meter.label
        lat = queue.latencies_s()
        e = meter.energy_j(t0, meter.now_s())
        energy = server.log.energy_j() if e is None else e
        windows = self._windows(queue.served_arrivals_s(), lat, events, end_s, server.log)
        self._log_windows(windows)
        self.report = ServingReport(
            label=label, duration_s=span, latency=summarize_latencies(lat, self.problem.latency_budget_s, label),
            minibatches=server.log.count("infer"), partial_minibatches=server.partial, energy_j=float(energy),
            mean_power_w=float(energy / span) if span > 0 else math.nan, busy_s=server.log.busy_s(),
            idle_s=server.log.idle_s, retunes=events, profiles=profiles, windows=windows,
            outputs=server.outputs if self.keep_outputs or self.run_model else None)
        return self.report

    def _windows(self, arrivals: np.ndarray, lat: np.ndarray, events: list[RetuneEvent], end_s: float,
                 log: MinibatchLog) -> list[dict]:
        out = []
        w = self.report_window_s
        starts = np.asarray(log.start_s)
        dur = np.asarray(log.duration_s)
        powr = np.asarray(log.power_w)
        t = 0.0
        while t < end_s - 1e-9:
            a, b = t, min(t + w, end_s)
            sel = (arrivals >= a) & (arrivals < b)
            s = summarize_latencies(lat[sel], self.problem.latency_budget_s)
            mb = (starts >= a) & (starts < b)
            bs = [e.batch_size for e in events if e.t_s < b and e.plan is not None]
            out.append({"start_s": a, "end_s": b, "requests": int(sel.sum()),
                        "arrival_rps": float(sel.sum() / (b - a)), "batch_size": bs[-1] if bs else None,
                        "p50_s": s.p50_s, "p99_s": s.p99_s, "max_s": s.max_s, "deadline_misses": s.deadline_misses,
                        "busy_power_w": float(np.dot(dur[mb], powr[mb]) / dur[mb].sum()) if mb.any() else math.nan})
            t = b
        return out

    def _log_windows(self, windows: list[dict]) -> None:
        if self.logger is None:
            return
        w = getattr(self.logger, "experiment", self.logger)
        for row in windows:
            step = int(row["start_s"])
            for tag, v in (("serving/latency_p50_ms", row["p50_s"] * 1e3), ("serving/latency_p99_ms", row["p99_s"] * 1e3),
                           ("serving/deadline_misses", row["deadline_misses"]), ("serving/arrival_rps", row["arrival_rps"]),
                           ("serving/batch_size", row["batch_size"] or 0), ("serving/power_w", row["busy_power_w"])):
                if v is not None and math.isfinite(float(v)):
                    w.add_scalar(tag, float(v), step)
        flush = getattr(w, "flush", None)
        if flush is not None:
            flush()
