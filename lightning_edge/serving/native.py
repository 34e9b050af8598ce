"""Native interleaving baselines (Fulcrum section 3.1, Fig. 1 top, Fig. 2 "N"): training and inference run at the
same time and the scheduler, not the application, decides who runs.

- :func:`run_native_threads` (**measured**): on this machine, a training thread runs minibatches back to back and
  an inference thread batches requests (same batch size and deadline guard as the managed schedule, the same
  :class:`~lightning_edge.serving.engine.BatchServer`) and runs them as soon as they are due; the OS and PyTorch's
  thread pools share the CPU cores between the two. Wall clock, real models, real tensors.
- :func:`simulate_native_twin` (**simulated, a model**): the twin has no notion of two kernels streams sharing its
  GPU, so native interleaving on the twin is a *model*, stated here and labelled as one. Jetsons have no MPS or MIG
  (section 1): two processes *time-share* the GPU, the scheduler switching contexts every time slice. We model
  round-robin time slicing with slices of ``timeslice_s`` and a context-switch cost ``switch_s``: when an
  inference minibatch (work ``t_in``, the twin's standalone time at the mode) becomes ready, training finishes its
  current slice (a uniformly random remainder in ``[0, timeslice_s)``: the phase is unknown, which is where the
  variability comes from), then the two alternate slices until the inference work is done. The inference minibatch
  therefore takes ``r0 + s + t_in + (k - 1)(q + 2s)`` with ``k = ceil(t_in / q)`` slices, about ``2 t_in`` for
  long minibatches, and training progresses in every slice inference does not use (there is no whole-minibatch
  floor, so its throughput can exceed managed interleaving's, as in Fig. 2). Not modelled: cache / memory
  interference between the two (it would only slow both further), priority, and space sharing (streams).
  Defaults ``timeslice_s=1 ms`` and ``switch_s=25 us`` are assumptions, not measurements (the paper only says the
  slices are "at us granularity").
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lightning_edge.devices.meter import SensorMeter, TwinMeter
from lightning_edge.records import Measurement
from lightning_edge.serving.arrivals import ArrivalProcess
from lightning_edge.serving.engine import BatchServer, ModelRunner, NonUrgentInference, Plan, RequestQueue
from lightning_edge.serving.interleaving_engine import InterleavingReport
from lightning_edge.serving.stats import summarize_latencies

if TYPE_CHECKING:
    from lightning_edge.devices.sensors.base import PowerSensor
    from lightning_edge.devices.sim.device import SimulatedOrin
    from lightning_edge.modes import PowerMode
    from lightning_edge.tuning.problems import Solution
    from lightning_edge.twin.model import OrinTwin
    from lightning_edge.twin.sim_workload import SimWorkload

__all__ = ["run_native_threads", "simulate_native_twin", "NativeTwinMeter"]


def _as_plan(plan: Plan | Solution) -> Plan:
    return plan if isinstance(plan, Plan) else Plan.from_solution(plan)


def _report(scheduler: str, label: str, plan: Plan, server: BatchServer, n_bg: int, elapsed_s: float,
            busy_s: float, energy_j: float, end_s: float, notes: tuple[str, ...] = ()) -> InterleavingReport:
    """A native run's report: both run freely (no tau), so there is no predicted background throughput."""
    return InterleavingReport(
        scheduler=scheduler, label=label, plan=plan.describe() + " (no tau: both run freely)",
        latency=summarize_latencies(server.queue.latencies_s(), server.budget_s, label), background_minibatches=n_bg,
        infer_minibatches=server.log.count("infer"), elapsed_s=elapsed_s,
        background_throughput=n_bg / elapsed_s if elapsed_s > 0 else 0.0, predicted_throughput=math.nan,
        background_busy_s=busy_s, infer_busy_s=server.log.busy_s("infer"), idle_s=0.0, energy_j=energy_j,
        mean_power_w=energy_j / end_s if end_s > 0 else math.nan, partial_minibatches=server.partial,
        notes=list(notes))


# ------------------------------------------------------------------------------------------------ real threads
def run_native_threads(train_step: Callable[[], Any], model_runner: ModelRunner, arrivals: ArrivalProcess,
                       plan: Plan | Solution, latency_budget_s: float, duration_s: float, *, safety: float = 0.05,
                       sensor: PowerSensor | None = None) -> InterleavingReport:
    """Native interleaving on this machine (**measured**): ``train_step()`` in one thread, back to back, for
    ``duration_s`` wall seconds; inference minibatches of ``plan.batch_size`` (``model_runner``) in another, as soon
    as they are due (``bs`` pending, or the oldest request at its deadline guard). Requests arriving before
    ``duration_s`` are all served; ``sensor`` (a power sensor, optional) gives the power. Returns the same report as
    managed interleaving (``scheduler`` says native)."""
    plan = _as_plan(plan)
    if not (duration_s > 0):
        raise ValueError(f"duration_s must be > 0 s, got {duration_s!r}")
    meter = SensorMeter(sensor, wait=False)
    meter.open()
    queue = RequestQueue(arrivals, stop_s=float(duration_s))
    server = BatchServer(queue, meter, latency_budget_s=latency_budget_s, mode=plan.mode, batch_size=plan.batch_size,
                         infer_time_s=plan.infer_time_s, runner=model_runner, safety=safety)
    stop = threading.Event()
    train_log: list[tuple[float, float]] = []
    errors: list[BaseException] = []

    def trainer() -> None:
        try:
            while not stop.is_set() and meter.now_s() < duration_s:
                t0 = meter.now_s()
                train_step()
                train_log.append((t0, meter.now_s() - t0))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            errors.append(exc)

    def server_loop() -> None:
        try:
            server.serve_until_done()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=trainer, name="native-train"),
               threading.Thread(target=server_loop, name="native-infer")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = meter.now_s()
    energy = meter.energy_j(0.0, end)
    meter.close()
    if errors:
        raise errors[0]
    elapsed = (train_log[-1][0] + train_log[-1][1]) if train_log else 0.0
    return _report("native interleaving (2 threads, OS scheduler)", "measured", plan, server, len(train_log),
                   elapsed, float(sum(d for _, d in train_log)), energy, end)


# ------------------------------------------------------------------------------------------------ the twin model
class NativeTwinMeter(TwinMeter):
    """The native time-slicing model on the twin (see the module docstring), as a step meter: training always runs
    (its minibatches drawn from the twin at ``mode``); an inference minibatch (``stop(mode, "infer", bs)``) shares
    the GPU with it in round-robin slices, and idle time (``wait_until``) is training time. One seeded generator
    draws the noise and the slices' phase. ``simulated``."""

    def __init__(self, twin: OrinTwin | SimulatedOrin, *, train: SimWorkload | NonUrgentInference, infer: SimWorkload,
                 mode: PowerMode | None, timeslice_s: float = 1e-3,
                 switch_s: float = 25e-6, seed: int | None = 0, noise: bool = True) -> None:
        if not (timeslice_s > 0 and switch_s >= 0):
            raise ValueError(f"timeslice_s must be > 0 and switch_s >= 0, got {timeslice_s!r}, {switch_s!r}")
        super().__init__(twin, train=train, infer=infer, seed=seed, noise=noise, settling=False)
        self.mode = mode
        self.q = float(timeslice_s)
        self.s = float(switch_s)
        self.energy = 0.0
        self.train_done = 0
        self.train_busy_s = 0.0
        self._work = 0.0
        self._need = self._draw_train()

    def _draw_train(self) -> float:
        t, self._p_tr, _ = self.draw("train", self.mode)
        return t

    def train_for(self, t_start_s: float, dt_s: float) -> None:
        """Training alone (or in its slices) for ``dt_s`` of GPU time, ending at ``t_start_s + dt_s``."""
        if dt_s <= 0:
            return
        self._work += dt_s
        self.train_busy_s += dt_s
        self.energy += dt_s * self._p_tr
        while self._work >= self._need:
            self._work -= self._need
            self.train_done += 1
            self._need = self._draw_train()

    def wait_until(self, t_s: float) -> float:
        t0 = self.clock_s
        idle = super().wait_until(t_s)
        self.train_for(t0, idle)  # the GPU is never idle: training runs
        return idle

    def stop(self, mode: Any, kind: str = "infer", batch_size: int | None = None) -> Measurement:
        if kind != "infer":
            raise ValueError("NativeTwinMeter times inference minibatches; training runs on its own (train_for)")
        w, p_in, _ = self.draw("infer", mode, batch_size)
        k = max(math.ceil(w / self.q - 1e-12), 1)
        r0 = float(self.rng.uniform(0.0, self.q))
        t0 = self.clock_s
        # the running training slice ends, then inference and training alternate slices
        self.train_for(t0, r0)
        train_slices = (k - 1) * self.q
        switches = (2 * k) * self.s  # into and out of every inference slice
        dur = r0 + w + train_slices + switches
        self.train_for(t0 + r0, train_slices)  # progress in the interleaved slices (timing inside the job)
        self.energy += w * p_in + switches * max(p_in, self._p_tr)
        self.clock_s += dur
        t_train = r0 + train_slices
        return Measurement(dur, (t_train * self._p_tr + w * p_in + switches * max(p_in, self._p_tr)) / dur, self.label, mode=mode)

    def idle_power_w(self, mode: Any) -> float:
        return self._p_tr  # the GPU is never idle: training runs

    def energy_j(self, t0_s: float, t1_s: float) -> float:
        return self.energy


def simulate_native_twin(plan: Plan | Solution, arrivals: ArrivalProcess, latency_budget_s: float, duration_s: float,
                         *, infer: SimWorkload, train: SimWorkload | NonUrgentInference, timeslice_s: float = 1e-3, switch_s: float = 25e-6,
                         safety: float = 0.05, seed: int | None = 0, noise: bool = True) -> InterleavingReport:
    """Native interleaving on the twin, as the time-slicing **model** of the module docstring (``simulated``).

    ``infer``/``train``: the twin workloads (``SimWorkload``; a ``NonUrgentInference`` in the place of training).
    Same mode and inference batch size as ``plan`` (the paper runs native, streams and managed with GMD's
    settings, section 3.2); training runs continuously for ``duration_s`` simulated seconds."""
    plan = _as_plan(plan)
    queue = RequestQueue(arrivals, stop_s=float(duration_s))
    meter = NativeTwinMeter(infer.twin, train=train, infer=infer, mode=plan.mode, timeslice_s=timeslice_s,
                            switch_s=switch_s, seed=seed, noise=noise)
    server = BatchServer(queue, meter, latency_budget_s=latency_budget_s, mode=plan.mode,
                         batch_size=plan.batch_size, infer_time_s=plan.infer_time_s, safety=safety)
    server.serve_until_done()
    meter.wait_until(duration_s)  # training alone until the end
    end = meter.now_s()
    return _report(f"native interleaving (time-slicing model: {timeslice_s * 1e3:g} ms slices, {switch_s * 1e6:g} us "
                   "switches)", "simulated", plan, server, meter.train_done, end, meter.train_busy_s, meter.energy, end,
                   ("native interleaving on the twin is a model (docs/serving.md), not a simulation of the GPU "
                    "scheduler",))
