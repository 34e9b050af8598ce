"""The serving machinery shared by :class:`~lightning_edge.serving.runner.InferenceRunner` and the interleaver.

The *seam* between simulated and real serving is the device's step meter (:mod:`lightning_edge.devices.meter`,
``board.meter()``); the batching, deadline and statistics logic above it is the same code. On the twin a
``TwinMeter`` gives each minibatch the twin's time and power at the current mode (its noise) on a simulated clock
that jumps over idle time (``simulated``; the real model may also run on the CPU, its wall time not counted); on real
hardware a ``SensorMeter`` times the real model on the wall clock, sleeps over idle time, and reads power from the
sensor (``nan`` without one; ``measured``).

Requests are FIFO: request ``i`` arrives at ``arrival_s[i]`` (open loop: arrivals never wait for the server) and
is served in the ``i``-th place. A minibatch takes the oldest ``bs`` pending requests; each request's latency is
its minibatch's completion time minus its arrival time.

Deadline guard (ours; the paper's formulas assume exact times): a minibatch is also started, with fewer than
``bs`` requests if need be, when waiting longer would make the oldest pending request miss its budget:
``now >= oldest_arrival + latency_budget - t_in * (1 + safety)``. With a constant rate and exact times the guard
never fires before the ``bs``-th arrival for a feasible plan; it protects against noise, Poisson bursts and a
falling arrival rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_edge.serving.arrivals import ArrivalProcess, ArrivalStream
from lightning_edge.serving.stats import MinibatchLog

if TYPE_CHECKING:
    import torch
    from torch import nn

    from lightning_edge.devices.meter import StepMeter
    from lightning_edge.modes import PowerMode
    from lightning_edge.tuning.problems import ConcurrentProblem, InferenceProblem, Solution, Workload
    from lightning_edge.twin.sim_workload import SimWorkload

__all__ = [
    "RequestQueue", "RequestInputs", "ModelRunner", "BatchServer", "Plan", "ConcurrentWorkload", "NonUrgentInference",
    "RunningMean", "plan_from_times",
]


# ------------------------------------------------------------------------------------------------ requests
class RequestQueue:
    """Open-loop FIFO of requests drawn from an arrival process, up to ``stop_s``.

    ``admit(now)`` makes every request that has arrived by ``now`` pending; ``take(n)`` removes the ``n`` oldest
    pending ones (returns their indices); ``complete(indices, t)`` records when they finished.
    """

    def __init__(self, arrivals: ArrivalProcess | ArrivalStream, *, stop_s: float = math.inf, chunk_s: float = 10.0
                 ) -> None:
        if isinstance(arrivals, ArrivalProcess):
            self.process: ArrivalProcess = arrivals
            self.stream = arrivals.stream()
        elif isinstance(arrivals, ArrivalStream):
            self.process, self.stream = arrivals.process, arrivals
        else:
            raise TypeError(f"arrivals: expected an ArrivalProcess (ConstantArrivals, PoissonArrivals, TraceArrivals) "
                            f"or its stream, got {type(arrivals).__name__}")
        self.stop_s = min(float(stop_s), float(self.process.end_s()))
        self.chunk_s = float(chunk_s)
        self._arr = np.empty(1024)
        self._done = np.full(1024, np.nan)
        self.n = 0  # generated
        self.admitted = 0
        self.head = 0  # oldest pending
        self._gen_s = 0.0

    def _grow(self, need: int) -> None:
        cap = self._arr.size
        if need <= cap:
            return
        new = max(need, 2 * cap)
        self._arr = np.concatenate([self._arr, np.empty(new - cap)])
        self._done = np.concatenate([self._done, np.full(new - cap, np.nan)])

    def _generate_to(self, t_s: float) -> None:
        t_s = min(t_s, self.stop_s)
        while self._gen_s < t_s:
            end = min(max(self._gen_s + self.chunk_s, t_s), self.stop_s)
            new = self.stream.until(end)
            self._gen_s = end
            if new.size:
                self._grow(self.n + new.size)
                self._arr[self.n:self.n + new.size] = new
                self.n += new.size

    def admit(self, now_s: float) -> np.ndarray:
        """Admit the arrivals up to ``now_s``; returns their arrival times."""
        self._generate_to(now_s + 1e-12)
        k = int(np.searchsorted(self._arr[:self.n], now_s, side="right"))
        new = self._arr[self.admitted:k]
        self.admitted = max(self.admitted, k)
        return new

    @property
    def pending(self) -> int:
        return self.admitted - self.head

    def oldest_s(self) -> float:
        return float(self._arr[self.head]) if self.pending else math.inf

    def next_arrival_s(self) -> float:
        """When the next not-yet-admitted request arrives (``inf`` when the process has ended)."""
        while self.admitted >= self.n and self._gen_s < self.stop_s:
            self._generate_to(self._gen_s + self.chunk_s)
        return float(self._arr[self.admitted]) if self.admitted < self.n else math.inf

    def take(self, n: int) -> np.ndarray:
        n = min(int(n), self.pending)
        idx = np.arange(self.head, self.head + n)
        self.head += n
        return idx

    def complete(self, indices: np.ndarray, t_s: float) -> None:
        self._done[indices] = t_s

    def arrival_s(self, indices: np.ndarray | slice) -> np.ndarray:
        return self._arr[indices]

    def latencies_s(self) -> np.ndarray:
        """Latency of every completed request, in arrival order."""
        done = self._done[:self.head]
        ok = ~np.isnan(done)
        return done[ok] - self._arr[:self.head][ok]

    def served_arrivals_s(self) -> np.ndarray:
        """Arrival time of every completed request, in the order of :meth:`latencies_s`."""
        return self._arr[:self.head][~np.isnan(self._done[:self.head])]


class RequestInputs:
    """The input of every request: sample ``i % len(pool)`` of ``pool`` for request ``i`` (real tensors).

    ``RequestInputs(pool)``: a tensor whose first dimension indexes samples (e.g. a validation batch), or a dict of
    such tensors for a model called with keyword arguments (``model(**batch)``: ``input_ids``,
    ``attention_mask``...); ``RequestInputs.random(shape, n=64, seed=0)``: seeded standard-normal samples of one
    request's ``shape``.
    """

    def __init__(self, pool: torch.Tensor | Mapping[str, torch.Tensor]) -> None:
        import torch

        from lightning_edge.cost.capture import tensors_of

        if isinstance(pool, Mapping):  # keyword inputs
            pool = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in pool.items()}
            lead = {int(t.shape[0]) for t in tensors_of(pool) if t.dim() >= 1}
            if len(lead) != 1 or not all(isinstance(v, torch.Tensor) and v.dim() >= 1 for v in pool.values()):
                shapes = {k: tuple(getattr(v, "shape", ())) for k, v in pool.items()}
                raise ValueError("RequestInputs: a dict of request samples needs tensors with the same first "
                                 f"dimension (samples), got {shapes}")
            self.pool = pool
            self.n = lead.pop()
            return
        if not isinstance(pool, torch.Tensor) or pool.dim() < 1 or pool.shape[0] < 1:
            raise ValueError("RequestInputs: expected a tensor of request samples (or a dict of them), first dimension "
                             f"= samples, got {type(pool).__name__} {tuple(getattr(pool, 'shape', ()))}")
        self.pool = pool.detach()
        self.n = int(pool.shape[0])

    @classmethod
    def random(cls, shape: tuple[int, ...], n: int = 64, seed: int = 0,
               dtype: torch.dtype | None = None) -> RequestInputs:
        import torch

        g = torch.Generator().manual_seed(int(seed))
        return cls(torch.randn((int(n), *shape), generator=g, dtype=dtype or torch.float32))

    @property
    def keyword(self) -> bool:
        return isinstance(self.pool, Mapping)

    def head(self, n: int = 1) -> Any:
        """The first ``n`` samples: a tensor, or a dict of tensors."""
        if self.keyword:
            return {k: v[:n] for k, v in self.pool.items()}
        return self.pool[:n]

    def batch(self, indices: np.ndarray) -> Any:
        import torch

        idx = torch.as_tensor(np.asarray(indices) % self.n, dtype=torch.long)
        if self.keyword:
            return {k: v.index_select(0, idx) for k, v in self.pool.items()}
        return self.pool.index_select(0, idx)


class ModelRunner:
    """Runs one real inference minibatch: ``model`` in eval mode under ``torch.no_grad()``, its previous
    train/eval mode restored afterwards. ``outputs`` keeps the last ``keep`` outputs (0: none)."""

    def __init__(self, model: nn.Module | Callable[..., Any], inputs: RequestInputs, *, keep: int = 0) -> None:
        from lightning_edge.cost.capture import has_forward

        if not callable(model):
            raise TypeError(f"model must be a callable nn.Module, got {type(model).__name__}")
        if not has_forward(model):
            raise TypeError(f"{type(model).__name__} has no forward, so it cannot serve requests: pass the module "
                            "that does (e.g. infer_model=model.net, or InferenceRunner(model.net, ...))")
        self.model = model
        self.inputs = inputs
        self.keep = int(keep)
        self.outputs: list[Any] = []
        self.minibatches = 0

    def __call__(self, indices: np.ndarray) -> Any:
        import torch

        x = self.inputs.batch(indices)
        was_training = bool(getattr(self.model, "training", False))
        if hasattr(self.model, "eval"):
            self.model.eval()
        try:
            with torch.no_grad():
                out = self.model(**x) if isinstance(x, Mapping) else self.model(x)
        finally:
            if was_training:
                self.model.train(True)
        self.minibatches += 1
        if self.keep:
            self.outputs.append(out)
            del self.outputs[:-self.keep]
        return out


class RunningMean:
    """Expected minibatch time: the mean of observed values once ``min_n`` were seen, but never below ``prior``
    (the profiled time) when there is one: partial minibatches are faster, and a deadline check must not learn
    from them that full ones are."""

    def __init__(self, prior: float | None, min_n: int = 3) -> None:
        self.prior = prior
        self.min_n = int(min_n)
        self.n = 0
        self.total = 0.0

    def add(self, x: float) -> None:
        if math.isfinite(x):
            self.n += 1
            self.total += float(x)

    @property
    def value(self) -> float | None:
        if self.prior is None:
            return self.total / self.n if self.n else None
        if self.n >= self.min_n:
            return max(self.total / self.n, self.prior)
        return self.prior


# ------------------------------------------------------------------------------------------------ plans
@dataclass(frozen=True)
class Plan:
    """What the server runs: a power mode (``None``: leave it alone), the inference minibatch size, and for managed
    interleaving ``tau`` background minibatches per inference minibatch (0 for standalone inference).

    ``infer_time_s``/``train_time_s`` are the profiled (expected) minibatch times the schedule starts from;
    ``latency_s``/``throughput``/``power_w`` the tuner's predictions (``nan`` when unknown).
    """

    mode: PowerMode | None
    batch_size: int
    train_minibatches: int = 0
    infer_time_s: float = math.nan
    train_time_s: float | None = None
    latency_s: float = math.nan
    throughput: float = math.nan
    power_w: float = math.nan
    label: str = "measured"
    solution: Solution | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if int(self.batch_size) < 1:
            raise ValueError(f"Plan.batch_size must be >= 1, got {self.batch_size!r}")
        if int(self.train_minibatches) < 0:
            raise ValueError(f"Plan.train_minibatches must be >= 0, got {self.train_minibatches!r}")

    @classmethod
    def from_solution(cls, sol: Solution | None) -> Plan:
        """From a tuner's :class:`~lightning_edge.tuning.problems.Solution` (inference or concurrent)."""
        if sol is None:
            raise ValueError("no solution: the tuner found no mode and batch size meeting the problem's budgets")
        kind = sol.problem.kind
        if kind == "concurrent":
            return cls(sol.mode, int(sol.batch_size), int(sol.train_minibatches or 0), float(sol.infer_time_s),
                       float(sol.time_s), float(sol.latency_s), float(sol.throughput), float(sol.power_w), sol.label,
                       sol)
        if kind == "infer":
            return cls(sol.mode, int(sol.batch_size), 0, float(sol.time_s), None, float(sol.latency_s),
                       float(sol.throughput), float(sol.power_w), sol.label, sol)
        raise ValueError(f"a serving plan needs an inference or concurrent solution, got a {kind or '?'} one")

    def describe(self) -> str:
        bits = [str(self.mode) if self.mode is not None else "current mode", f"bs {self.batch_size}"]
        if self.train_minibatches:
            bits.append(f"tau {self.train_minibatches}")
        if math.isfinite(self.latency_s):
            bits.append(f"predicted latency {self.latency_s * 1e3:.1f} ms")
        if math.isfinite(self.power_w):
            bits.append(f"{self.power_w:.1f} W")
        return ", ".join(bits) + f" ({self.label})"


def plan_from_times(problem: InferenceProblem | ConcurrentProblem, infer_time_s: dict[int, float], train_time_s: float | None = None, *,
                    power_w: float = 0.0, label: str = "measured") -> Plan | None:
    """A plan for a machine with one (uncontrolled) mode from measured minibatch times: the problem's own formulas
    (``problem.assess``) over the batch sizes measured. Power is not measured here: ``power_w`` is used for every
    point (0 means the power budget is not checked). ``None`` when no batch size is feasible."""
    bss = sorted(int(b) for b in infer_time_s)
    if not bss:
        raise ValueError("infer_time_s is empty: expected {batch_size: seconds per minibatch}")
    t_in = np.array([float(infer_time_s[b]) for b in bss])
    p = np.full(len(bss), float(power_w))
    if problem.kind == "concurrent":
        if train_time_s is None:
            raise ValueError("a concurrent problem needs train_time_s")
        a = problem.assess(np.full(len(bss), float(train_time_s)), p, t_in, p, np.array(bss))
    elif problem.kind == "infer":
        a = problem.assess(t_in, p, np.array(bss))
    else:
        raise ValueError(f"plan_from_times: expected an inference or concurrent problem, got {problem!r}")
    ok = np.flatnonzero(a.feasible)
    if ok.size == 0:
        return None
    keys = [np.asarray(k)[ok] for k in a.rank]
    best = int(ok[np.lexsort(tuple(reversed(keys)))[0]])
    tau = int(a.train_minibatches[best]) if a.train_minibatches is not None else 0
    return Plan(None, bss[best], tau, float(t_in[best]), train_time_s, float(a.latency_s[best]),
                float(a.throughput[best]), float(power_w) if power_w > 0 else math.nan, label)


# ------------------------------------------------------------------------------------------------ tuner workloads
class ConcurrentWorkload:
    """The tuner's view of a concurrent pair (``Workload`` protocol): ``train(mode)`` profiles the background
    workload, ``infer(mode, bs)`` the latency-bound inference. Its ``fingerprint`` keys the pair's profiles."""

    def __init__(self, train: Workload, infer: Workload) -> None:
        for name, w in (("train", train), ("infer", infer)):
            if not hasattr(w, "train" if name == "train" else "infer"):
                raise TypeError(f"ConcurrentWorkload: the {name} workload needs a .{name}() method")
        self.train_workload = train
        self.infer_workload = infer

    @property
    def fingerprint(self) -> str:
        f = [str(getattr(w, "fingerprint", None) or repr(w)) for w in (self.train_workload, self.infer_workload)]
        return f"pair[{f[0]}|{f[1]}]"

    @property
    def device_model(self) -> str | None:
        return getattr(self.infer_workload, "device_model", None)

    @property
    def label(self) -> str:
        return getattr(self.infer_workload, "label", "measured")

    def train(self, mode: PowerMode) -> Any:
        return self.train_workload.train(mode)

    def infer(self, mode: PowerMode, batch_size: int) -> Any:
        return self.infer_workload.infer(mode, batch_size)

    def __repr__(self) -> str:
        return f"ConcurrentWorkload({self.fingerprint})"


class NonUrgentInference:
    """A throughput inference (section 5.4, "Concurrent Inference") in the place of training: ``train(mode)`` is one
    minibatch of ``batch_size`` of ``workload`` (the non-urgent model), so a :class:`ConcurrentProblem` maximises
    its minibatches/s within the urgent inference's deadline and the power budget."""

    def __init__(self, workload: SimWorkload, batch_size: int) -> None:
        if int(batch_size) < 1:
            raise ValueError(f"NonUrgentInference batch_size must be >= 1, got {batch_size!r}")
        self.workload = workload
        self.batch_size = int(batch_size)

    @property
    def fingerprint(self) -> str:
        return f"{self.workload.fingerprint}-nonurgent-infer-bs{self.batch_size}"

    @property
    def device_model(self) -> str | None:
        return self.workload.device_model

    def train(self, mode: PowerMode) -> Any:
        return self.workload.infer(mode, self.batch_size)

    def infer(self, mode: PowerMode, batch_size: int) -> Any:
        return self.workload.infer(mode, batch_size)

    def draw(self, kind: str, mode: PowerMode, batch_size: int | None = None, rng: np.random.Generator | None = None,
             noise: bool | None = None) -> tuple[float, float, float]:
        """One noisy minibatch (the step meter's): a ``train`` step is one non-urgent minibatch of ``batch_size``."""
        return self.workload.draw("infer", mode, self.batch_size if kind == "train" else batch_size, rng, noise)

    def __repr__(self) -> str:
        return f"NonUrgentInference({self.fingerprint})"


# ------------------------------------------------------------------------------------------------ the batcher
class BatchServer:
    """Batching, the deadline guard and the statistics, shared by the inference runner, managed interleaving and
    the native baselines. ``serve(n)`` runs one minibatch of the ``n`` oldest pending requests at ``mode`` (``runner``,
    a :class:`ModelRunner`, runs the real model when given) and ``meter`` (a
    :class:`~lightning_edge.devices.meter.StepMeter`) times it; ``idle_until(t)`` waits (idle power on the twin);
    ``guard_s(t_arrival)`` is the latest start for a request that arrived at ``t_arrival``."""

    def __init__(self, queue: RequestQueue, meter: StepMeter, *, latency_budget_s: float, mode: PowerMode | None,
                 batch_size: int,
                 infer_time_s: float | None, runner: ModelRunner | None = None, safety: float = 0.05) -> None:
        self.budget_s = float(latency_budget_s)
        if not (math.isfinite(self.budget_s) and self.budget_s > 0):
            raise ValueError(f"latency_budget_s must be a time > 0 s, got {latency_budget_s!r}")
        if not hasattr(meter, "stop"):
            raise TypeError(f"meter: expected a step meter (board.meter(), TwinMeter, SensorMeter), got "
                            f"{type(meter).__name__}")
        self.queue = queue
        self.meter = meter
        self.runner = runner
        self.outputs: Any = None
        self.mode = mode
        self.safety = float(safety)
        self.log = MinibatchLog()
        self.partial = 0
        self.batch_size = 1
        self.t_in = RunningMean(None)
        self.set_plan(mode, batch_size, infer_time_s)

    def set_plan(self, mode: PowerMode | None, batch_size: int, infer_time_s: float | None) -> None:
        self.mode = mode
        known = infer_time_s is not None and math.isfinite(infer_time_s)
        if known or int(batch_size) != self.batch_size or self.t_in.prior is None:
            self.t_in = RunningMean(infer_time_s if known else None)  # a new batch size (or mode) takes a new time
        self.batch_size = int(batch_size)

    def guard_s(self, t_arrival_s: float) -> float:
        return t_arrival_s + self.budget_s - (self.t_in.value or 0.0) * (1.0 + self.safety)

    def serve(self, n: int) -> np.ndarray:
        idx = self.queue.take(n)
        start = self.meter.start()
        if self.runner is not None:
            self.outputs = self.runner(idx)
        r = self.meter.stop(self.mode, "infer", int(len(idx)))
        self.queue.complete(idx, self.meter.now_s())
        self.log.add("infer", start, r.time_s, r.power_w, len(idx))
        self.t_in.add(r.time_s)  # partial minibatches too: never faster than expected in a way that hurts the guard
        if len(idx) != self.batch_size:
            self.partial += 1
        return idx

    def idle_until(self, t_s: float) -> float:
        idle = self.meter.wait_until(t_s)
        if idle > 0:
            self.log.add_idle(idle, self.meter.idle_power_w(self.mode))
        return idle

    def step_due(self) -> bool:
        """Serve one minibatch if one is due now (``bs`` pending, or the oldest at its guard); True if it did."""
        self.queue.admit(self.meter.now_s())
        pending = self.queue.pending
        if pending >= self.batch_size:
            self.serve(self.batch_size)
            return True
        if pending and self.meter.now_s() >= self.guard_s(self.queue.oldest_s()):
            self.serve(pending)
            return True
        return False

    def next_event_s(self) -> float:
        """When something can next happen: the next arrival or the oldest pending request's guard."""
        g = self.guard_s(self.queue.oldest_s()) if self.queue.pending else math.inf
        return min(self.queue.next_arrival_s(), g)

    def serve_until_done(self) -> None:
        """Serve every request as it falls due, waiting on the meter's clock in between (``wait_until``: no idle
        power logged), until no more requests will come."""
        while True:
            if self.step_due():
                continue
            nxt = self.next_event_s()
            if not math.isfinite(nxt):
                return
            self.meter.wait_until(nxt)
