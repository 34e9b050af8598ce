"""Tuning the power mode *while training*: profiling windows on the real minibatches (Fulcrum section 5, 6).

:class:`OnlineTuner` is the engine of :class:`lightning_edge.PowerModeTuner` and works in any training loop::

    tuner = OnlineTuner(TrainingProblem(25.0), controller=board.controller, meter=SimStepMeter(board))
    for batch in loader:
        tuner.before_step(batch)        # may switch the mode: only here, between steps
        loss = step(batch)
        tuner.after_step()              # times the step, feeds the profiling window
    tuner.close()                       # restores the original mode

How it works
    The strategy (GMD, ALS, any :class:`~lightning_edge.tuning.search.Strategy`) runs unchanged in a worker
    thread against the profile store. When it needs a mode profiled, its ``workload.train(mode)`` call blocks
    and hands the mode to the training thread; at the next step boundary the training thread switches the
    board to that mode and measures a *profiling window* of real training minibatches:

    1. the minibatches that start in the settling period after the switch (power takes 2-3 s to stabilise on a
       Jetson: Fulcrum section 6, Pagoda), and at least ``warmup_steps`` minibatches, are run but discarded;
    2. then minibatches are measured until the mean step time and power are stable (relative standard error
       of both <= ``rel_sem``, at least ``min_steps``) or ``max_steps`` were measured (Fulcrum profiles ~40);
    3. the mean time per minibatch and the time-weighted mean power go back to the strategy as the profile.

    Profiles already in the store are never measured again: a second run with the same device and workload
    gets its answer without profiling (Fulcrum section 5.1: "once a power mode has been profiled it can be
    reused"). Training goes on in the chosen mode.

Re-tuning
    ``set_power_budget(w)`` solves again for the new budget (stored profiles are free). Power drift (thermal,
    a workload change): when the mean power of ``drift_window`` steps in the chosen mode exceeds the budget by
    more than ``drift_tolerance`` the tuner re-solves with the stored profiles scaled by the observed ratio
    ``measured / profiled`` (every mode is assumed to draw that much more now), i.e. with the budget divided
    by it, and checks the new mode the same way.

Safety
    The original mode is restored by :meth:`close` (the Lightning callback calls it at the end of fit, on an
    exception and on an interrupt); a process killed outright is recovered by the controller's state file the
    next time a controller of that board starts (:mod:`lightning_edge.devices.safety`).

Meters
    :class:`SensorStepMeter`: wall-clock step times (CUDA-synchronised when the model is on a GPU) and power
    from a real sensor through a :class:`~lightning_edge.profiling.sampler.PowerSampler` (label ``measured``).
    :class:`SimStepMeter`: the Orin twin. The training really runs on this machine, but the minibatch time and
    power the tuner sees are the twin's for that module and batch on the board's current mode, on a simulated
    clock, with the twin's measurement noise and its exponential power settling after a mode change (label
    ``simulated``).
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightning_edge.devices.modes import PowerMode, PowerModeSpace
from lightning_edge.tuning.problems import Measurement, Solution, TrainingProblem

__all__ = [
    "OnlineTuner", "WindowSpec", "ProfileWindow", "StepRecord", "SimStepMeter", "SensorStepMeter",
    "TuningCancelled", "batch_signature", "batch_tensors", "module_fingerprint", "PHASES",
]

PHASES = ("waiting", "profiling", "tuned", "infeasible", "closed")
"""``waiting``: the strategy is busy (store look-ups) or has not started; ``profiling``: a window is being
measured; ``tuned``: training in the chosen mode; ``infeasible``: no profiled mode meets the budget (training
runs in the lowest-power mode profiled); ``closed``: the board was restored."""


class TuningCancelled(RuntimeError):
    """Raised inside the strategy's thread when the tuner is closed before the profile it waits for."""


# ============================================================================================ fingerprints
def batch_tensors(batch: Any, *, sort_keys: bool = True) -> list:
    """Every tensor in a (nested) batch of tuples, lists and dicts: dict entries in key order (stable keys for
    fingerprints), or in insertion order with ``sort_keys=False`` (the order the user wrote them)."""
    out: list = []

    def walk(obj: Any) -> None:
        if hasattr(obj, "shape") and hasattr(obj, "dtype"):
            out.append(obj)
        elif isinstance(obj, dict):
            for k in (sorted(obj, key=str) if sort_keys else obj):
                walk(obj[k])
        elif isinstance(obj, (list, tuple)):
            for x in obj:
                walk(x)

    walk(batch)
    return out


def batch_signature(batch: Any) -> tuple[int | None, str]:
    """``(batch size, "3x64x64:float32+:int64")``: the shapes (without the batch dimension) and dtypes of every
    tensor in a (nested) batch; the batch size is the first dimension of the first tensor."""
    tensors = batch_tensors(batch)
    if not tensors:
        return None, "nobatch"
    bs = int(tensors[0].shape[0]) if len(tensors[0].shape) else None
    parts = []
    for t in tensors:
        dims = "x".join(str(int(d)) for d in tuple(t.shape)[1:])
        parts.append(f"{dims}:{str(t.dtype).replace('torch.', '')}")
    return bs, "+".join(parts)


def module_fingerprint(module: Any, batch: Any, precision: str = "fp32", extra: str = "") -> str:
    """The key of a training workload's profiles: module class, parameter count, batch signature, precision.

    Two runs of the same model on the same data shapes get the same key (and share profiles); a different
    architecture, width, input size, batch size or precision gets another one."""
    from torch.nn.parameter import is_lazy

    # a Lazy module's uninitialized parameters count as 0 (the tuner fingerprints after the first step)
    n_params = (sum(int(p.numel()) for p in module.parameters() if not is_lazy(p))
                if hasattr(module, "parameters") else 0)
    bs, sig = batch_signature(batch)
    name = type(module).__name__
    return "-".join(x for x in (name, f"p{n_params}", f"bs{bs}", sig, precision, extra) if x)


# ============================================================================================ meters
@dataclass
class StepRecord:
    """One training step as the meter saw it (``label``: measured / simulated)."""

    step: int
    mode: PowerMode
    time_s: float
    power_w: float
    phase: str
    label: str
    window: int | None = None  # index of the profile window it belongs to, None outside windows
    discarded: bool = False  # a settling or warm-up step of a window

    @property
    def energy_j(self) -> float:
        return self.time_s * self.power_w


class SensorStepMeter:
    """Step time on the wall clock, power from a real sensor (``measured``).

    ``sensor``: any :class:`~lightning_edge.devices.sensors.base.PowerSensor` (Jetson INA3221, jtop, NVML, RAPL);
    ``sync``: a callable that waits for the accelerator (default: ``torch.cuda.synchronize`` when CUDA is
    available, else nothing). A step whose window is shorter than the sensor's update period gets the mean
    power of the last ``update period`` instead (the sensor cannot resolve it)."""

    label = "measured"

    def __init__(self, sensor: Any, *, rate_hz: float | None = None, sync: Callable[[], None] | None = None) -> None:
        from lightning_edge.profiling.sampler import PowerSampler

        if not getattr(sensor, "available", True):
            raise ValueError(
                f"the power-mode tuner needs a power sensor, and {getattr(sensor, 'name', sensor)!r} is not one "
                f"({getattr(sensor, 'reason', 'unavailable')}); on a Jetson run as a user who can read the INA3221 "
                "hwmon files, or use device='sim:orin-agx' for the twin")
        self.sensor = sensor
        self.sampler = PowerSampler(sensor, rate_hz=rate_hz)
        self._sync = sync if sync is not None else _default_sync()
        self._t0: int | None = None
        self.period_ns = int(max(float(getattr(sensor, "update_period_s", 0.0) or 0.0), 0.0) * 1e9)

    def start(self) -> None:
        if not self.sampler.running:
            self.sampler.start()

    def now_s(self) -> float:
        return time.perf_counter_ns() / 1e9

    def mode_changed(self, mode: PowerMode) -> None:
        pass  # the real board settles on its own; the window discards the settling time

    def step_begin(self) -> None:
        self._sync()
        self._t0 = time.perf_counter_ns()

    def step_end(self, mode: PowerMode) -> tuple[float, float]:
        self._sync()
        t1 = time.perf_counter_ns()
        t0 = self._t0 if self._t0 is not None else t1 - 1
        self._t0 = None
        self.sampler.wait_for(t1, timeout_s=max(2 * self.period_ns / 1e9, 0.05))
        lo = min(t0, t1 - self.period_ns)
        power = self.sampler.mean_power_w(lo, t1)
        if not math.isfinite(power):
            power = float(getattr(self.sensor.read(), "power_w", float("nan")))
        return max((t1 - t0) / 1e9, 1e-9), float(power)

    def close(self) -> None:
        self.sampler.stop()


def _default_sync() -> Callable[[], None]:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.synchronize
    except Exception:  # noqa: BLE001 - no torch, no CUDA: nothing to wait for
        pass
    return lambda: None


class SimStepMeter:
    """The twin's view of a training step (``simulated``): time and power of this module and batch on the Orin
    AGX in the board's current mode, on a simulated clock.

    ``SimStepMeter(board, module=None, example_inputs=None, precision="fp32", seed=0)``: ``board`` is a
    :class:`~lightning_edge.devices.sim.device.SimulatedOrin` (its controller says the mode). The module and one
    minibatch of its forward inputs can be given later with :meth:`bind` (the callback captures them on the
    first step). Each step draws the twin's measurement noise (2.5 % on time, 2 % on power) and follows its
    exponential power settling (time constant ``board.twin.settle_tau_s``) after a mode change or a start from
    idle. The simulated clock advances by each step's simulated time.
    """

    label = "simulated"

    def __init__(self, board: Any, module: Any = None, example_inputs: Any = None, *, precision: str = "fp32",
                 seed: int | None = 0, noise: bool = True) -> None:
        self.board = board
        self.twin = board.twin
        self.precision = precision
        self.seed = seed
        self.noise = noise
        self.workload: Any = None
        self.clock_s = 0.0
        self._change_s = 0.0
        self._from_w: float | None = None  # start from idle: the static power of the first mode
        self._target_w: float | None = None
        if module is not None:
            self.bind(module, example_inputs)

    @property
    def settle_tau_s(self) -> float:
        return float(getattr(self.twin, "settle_tau_s", 0.8)) if getattr(self.twin, "settling", True) else 0.0

    @property
    def bound(self) -> bool:
        return self.workload is not None

    def bind(self, module: Any, example_inputs: Any) -> None:
        from lightning_edge.devices.sim.workload import SimWorkload

        self.workload = SimWorkload(module, self.twin, example_inputs=example_inputs, noise=self.noise,
                                    seed=self.seed, precision=self.precision)

    def bind_cost(self, cost: Any, batch_size: int) -> None:
        """Bind to a training step's :class:`~lightning_edge.cost.ModelCost` (``training=True``), e.g. the shared
        capture's ``step_cost``: every call form a module can have is already in it."""
        from lightning_edge.devices.sim.workload import SimWorkload

        self.workload = SimWorkload(cost, self.twin, train_batch_size=int(batch_size), noise=self.noise,
                                    seed=self.seed, precision=self.precision)

    def start(self) -> None:
        pass

    def now_s(self) -> float:
        return self.clock_s

    def _level_at(self, t: float) -> float:
        assert self._target_w is not None
        if self._from_w is None or self.settle_tau_s <= 0:
            return self._target_w
        return self._target_w + (self._from_w - self._target_w) * math.exp(-(t - self._change_s) / self.settle_tau_s)

    def mode_changed(self, mode: PowerMode) -> None:
        if self._target_w is None:
            return
        self._from_w = self._level_at(self.clock_s)
        self._change_s = self.clock_s
        self._target_w = None  # set at the next step, from the new mode

    def step_begin(self) -> None:
        pass

    def step_end(self, mode: PowerMode) -> tuple[float, float]:
        if self.workload is None:
            raise RuntimeError("SimStepMeter has no module yet: call bind(module, example_inputs) first")
        _, clean_power_w = self.workload.expected("train", mode)
        if self._target_w is None:
            self._target_w = clean_power_w
            if self._from_w is None:  # the board was idle before the first step
                self._from_w = float(np.asarray(self.twin.static_power(mode)).reshape(-1)[0])
                self._change_s = self.clock_s
        noisy = self.workload.train(mode)
        dt = float(noisy.time_s)
        a, b = self.clock_s, self.clock_s + dt
        tau = self.settle_tau_s
        if self._from_w is None or tau <= 0:
            level = self._target_w
        else:  # exact mean of the exponential settling curve over the step
            ea = math.exp(-(a - self._change_s) / tau)
            eb = math.exp(-(b - self._change_s) / tau)
            level = self._target_w + (self._from_w - self._target_w) * tau * (ea - eb) / dt
        power = level * (noisy.power_w / clean_power_w)
        self.clock_s = b
        return dt, float(power)

    def close(self) -> None:
        pass


# ============================================================================================ windows
@dataclass(frozen=True)
class WindowSpec:
    """How one mode is profiled on training minibatches.

    ``settle_s``: seconds after the switch whose steps are discarded (a Jetson's power needs 2-3 s; ``None``:
    the meter's default, 2.5 s on a board, 3 time constants of the twin's settling); ``warmup_steps``: at least
    that many minibatches are discarded, settling ones included (the first one after a switch is slow: Fulcrum
    section 6); then between
    ``min_steps`` and ``max_steps`` minibatches are measured, stopping once the relative standard error of the
    mean time and of the mean power are both <= ``rel_sem``; ``max_settle_steps`` bounds the discarded steps.
    """

    settle_s: float | None = None
    warmup_steps: int = 1
    min_steps: int = 10
    max_steps: int = 40
    rel_sem: float = 0.01
    max_settle_steps: int = 200

    def __post_init__(self) -> None:
        if self.settle_s is not None and not (self.settle_s >= 0 and math.isfinite(self.settle_s)):
            raise ValueError(f"settle_s must be a time >= 0 s (or None for the device's default), got {self.settle_s!r}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if not (1 <= self.min_steps <= self.max_steps):
            raise ValueError(f"need 1 <= min_steps <= max_steps, got min_steps={self.min_steps}, "
                             f"max_steps={self.max_steps}")
        if not (self.rel_sem > 0):
            raise ValueError(f"rel_sem must be > 0 (e.g. 0.01 for 1 %), got {self.rel_sem!r}")


@dataclass
class ProfileWindow:
    """A window in progress: the mode, when it was switched to, the discarded and the measured steps."""

    index: int
    mode: PowerMode
    switched_s: float
    settle_s: float
    spec: WindowSpec
    reason: str = "strategy"
    discarded: int = 0
    times: list = field(default_factory=list)
    powers: list = field(default_factory=list)
    cost_s: float = 0.0  # simulated or wall time of every step of the window (its profiling cost)
    cost_j: float = 0.0

    def feed(self, t_end_s: float, time_s: float, power_w: float) -> bool:
        """Add a step; True when the step was measured (not discarded)."""
        self.cost_s += time_s
        self.cost_j += time_s * power_w
        settling = (t_end_s - time_s) - self.switched_s < self.settle_s
        if (settling or self.discarded < self.spec.warmup_steps) and self.discarded < self.spec.max_settle_steps:
            self.discarded += 1
            return False
        self.times.append(time_s)
        self.powers.append(power_w)
        return True

    @property
    def n(self) -> int:
        return len(self.times)

    def _rel_sem(self, x: np.ndarray) -> float:
        if len(x) < 2 or x.mean() <= 0:
            return math.inf
        return float(x.std(ddof=1) / math.sqrt(len(x)) / x.mean())

    @property
    def complete(self) -> bool:
        if self.n >= self.spec.max_steps:
            return True
        if self.n < self.spec.min_steps:
            return False
        t, p = np.asarray(self.times), np.asarray(self.powers)
        return self._rel_sem(t) <= self.spec.rel_sem and self._rel_sem(p) <= self.spec.rel_sem

    def result(self, label: str) -> Measurement:
        t, p = np.asarray(self.times), np.asarray(self.powers)
        return Measurement(float(t.mean()), float((t * p).sum() / t.sum()), label)


# ============================================================================================ the engine
class _OnlineWorkload:
    """What the strategy's thread profiles: ``train(mode)`` hands the mode to the training thread and waits."""

    def __init__(self, tuner: OnlineTuner, fingerprint: str, device_model: str) -> None:
        self.tuner = tuner
        self.fingerprint = fingerprint
        self.device_model = device_model

    def train(self, mode: PowerMode) -> Measurement:
        return self.tuner._request(mode)

    def infer(self, mode: PowerMode, batch_size: int) -> Measurement:
        raise TypeError("the power-mode tuner profiles training minibatches only: use a TrainingProblem "
                        "(inference batch size and latency: lightning_edge.serving)")


_DONE = object()
_CANCEL = object()


class OnlineTuner:
    """Profiles modes on the training loop's own minibatches, drives a strategy, trains on in the chosen mode.

    Args:
        problem: a :class:`TrainingProblem` (or a power budget in W).
        controller: the board's mode controller (``apply``/``current``/``restore``; writable).
        meter: :class:`SensorStepMeter` or :class:`SimStepMeter`.
        strategy: ``"gmd"`` (default), ``"als"`` or a :class:`~lightning_edge.tuning.search.Strategy`.
        space: the modes to search (default: ``fulcrum_space()``, Fulcrum's 441 modes).
        store: the profile store (``"default"``: SQLite in the user cache directory; a URL such as
            ``postgresql://...`` for a fleet; ``None``: in memory, nothing kept).
        fingerprint: the workload key in the store (set by :meth:`bind` from the module and batch if not given).
        device_model: the board key in the store (default: ``sim-orin-agx`` for the twin, else the controller's
            space name, e.g. ``orin-agx``).
        window: a :class:`WindowSpec`.
        switch_at: ``"window"`` (switch between profiling windows, the default) or ``"epoch"`` (one profile per
            epoch: a new mode is applied only at an epoch boundary).
        baseline: also profile MAXN (once per store) so the summary can compare against it.
        drift_window, drift_tolerance, drift_patience: power-drift detection in the chosen mode (see module doc);
            ``drift_window=0`` turns it off.
        on_event: ``f(kind, info: dict)`` for ``"profile"``, ``"solution"``, ``"infeasible"``, ``"retune"``,
            ``"drift"``, ``"restore"`` (the callback logs them).
    """

    def __init__(self, problem: TrainingProblem | float, controller: Any, meter: Any, *, strategy: Any = "gmd",
                 space: PowerModeSpace | None = None, store: Any = "default", fingerprint: str | None = None,
                 device_model: str | None = None, window: WindowSpec | None = None, switch_at: str = "window",
                 baseline: bool = True, drift_window: int = 20, drift_tolerance: float = 0.03,
                 drift_patience: int = 2, on_event: Callable[[str, dict], None] | None = None,
                 wait_timeout_s: float = 600.0) -> None:
        if not isinstance(problem, TrainingProblem):
            problem = TrainingProblem(float(problem))
        if switch_at not in ("window", "epoch"):
            raise ValueError(f"switch_at must be 'window' (between profiling windows) or 'epoch', got {switch_at!r}")
        if drift_window < 0 or drift_patience < 1 or not drift_tolerance >= 0:
            raise ValueError("need drift_window >= 0 (0: off), drift_patience >= 1 and drift_tolerance >= 0")
        self.problem = problem
        self.controller = controller
        self.meter = meter
        self.strategy = _strategy(strategy)
        if space is None:
            from lightning_edge.devices import catalog

            space = catalog.fulcrum_space() if _is_orin(controller) else controller.space
        self.space = space
        if store is None:  # in memory, but shared by every solve of this tuner (re-tunes reuse it)
            from lightning_edge.tuning.search import MemoryStore

            store = MemoryStore()
        self.store = store
        self.fingerprint = fingerprint
        self.device_model = device_model or _device_model(controller, meter)
        self.window_spec = window or WindowSpec()
        self.switch_at = switch_at
        self.baseline = bool(baseline)
        self.drift_window = int(drift_window)
        self.drift_tolerance = float(drift_tolerance)
        self.drift_patience = int(drift_patience)
        self.on_event = on_event
        self.wait_timeout_s = float(wait_timeout_s)

        self.phase = "waiting"
        self.original_mode: PowerMode | None = None
        self.solution: Solution | None = None
        self.result: Any = None
        self.baseline_profile: Measurement | None = None
        self.profiles: list[dict] = []  # every window measured in this run
        self.records: list[StepRecord] = []
        self.retunes: list[dict] = []
        self.drift_scale = 1.0
        self.step = 0
        self.error: BaseException | None = None
        self._window: ProfileWindow | None = None
        self._pending_mode: PowerMode | None = None
        self._requests: queue.Queue = queue.Queue()
        self._replies: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._waiting_request = False
        self._epoch_boundary = True
        self._drift_hits = 0
        self._closed = False
        self._started = False
        self._restored: Any = None
        self._switched_s = -math.inf
        self._drift_buf: list[StepRecord] = []
        self._known: dict = {}  # every point any solve of this tuner profiled or found in the store

    # ------------------------------------------------------------------ lifecycle
    @property
    def label(self) -> str:
        return getattr(self.meter, "label", "measured")

    def bind(self, fingerprint: str) -> None:
        if not self.fingerprint:
            self.fingerprint = fingerprint

    def start(self) -> None:
        """Record the original mode and start the strategy (needs :attr:`fingerprint` for a persistent store)."""
        if self._started:
            return
        from lightning_edge.tuning.search import MemoryStore

        if not isinstance(self.store, MemoryStore) and not self.fingerprint:
            raise ValueError("OnlineTuner.start(): the workload has no fingerprint yet; call bind(fingerprint) "
                             "(the callback derives it from the module and the first batch)")
        self._started = True
        self.original_mode = self.controller.current()
        self.meter.start()
        self._launch(self.problem, reason="start")

    def _launch(self, problem: TrainingProblem, reason: str) -> None:
        self._requests = queue.Queue()
        self._replies = queue.Queue()
        workload = _OnlineWorkload(self, self.fingerprint or "online", self.device_model)
        scaled = problem if self.drift_scale == 1.0 else TrainingProblem(problem.power_budget_w / self.drift_scale)
        self.phase = "waiting"

        def work() -> None:
            try:
                res = self.strategy.run(scaled, self.space, workload, store=self.store,
                                        workload_id=self.fingerprint, device_model=self.device_model)
                base = None
                if self.baseline:
                    base = self._profile_baseline(workload)
                self._requests.put((_DONE, (res, base, reason)))
            except TuningCancelled:
                self._requests.put((_CANCEL, None))
            except BaseException as exc:  # noqa: BLE001 - handed to the training thread
                self._requests.put((_CANCEL, exc))

        self._thread = threading.Thread(target=work, name="lightning-edge-tuner", daemon=True)
        self._thread.start()

    def _profile_baseline(self, workload: _OnlineWorkload) -> Measurement | None:
        from lightning_edge.devices.modes import KNOBS
        from lightning_edge.tuning.search import Point, _store_and_profiler

        maxn = PowerMode(*(self.space.values(k)[-1] for k in KNOBS))  # every knob at its top: MAXN
        prof = _store_and_profiler(self.store, workload, workload_id=self.fingerprint,
                                   device_model=self.device_model, sampler=None, problem=None)
        return prof.resolve_many([Point("train", maxn)])[0]

    # the strategy thread ----------------------------------------------------------
    def _request(self, mode: PowerMode) -> Measurement:
        self._requests.put(("profile", mode))
        reply = self._replies.get()
        if reply is _CANCEL:
            raise TuningCancelled(f"the tuner was closed while waiting for the profile of {mode}")
        return reply

    # the training thread ----------------------------------------------------------
    def epoch_boundary(self) -> None:
        """Tell the tuner an epoch ended (with ``switch_at="epoch"`` modes change only here)."""
        self._epoch_boundary = True

    def before_step(self) -> None:
        """Call before each training step: takes the strategy's next request or answer, switches modes."""
        if self._closed or not self._started:
            return
        if self._window is None and self._pending_mode is None and self.phase in ("waiting",):
            self._poll(block=True)
        if self._pending_mode is not None and (self.switch_at == "window" or self._epoch_boundary):
            self._switch(self._pending_mode)
            self._pending_mode = None
            if self._window is not None:
                self._window.switched_s = self.meter.now_s()
        self._epoch_boundary = False
        self.meter.step_begin()

    def _poll(self, block: bool) -> None:
        try:
            what, payload = self._requests.get(timeout=self.wait_timeout_s if block else 0)
        except queue.Empty:
            if block:
                raise TimeoutError(f"the tuning strategy gave no request for {self.wait_timeout_s:.0f} s "
                                   "(waiting for another process's profiles?)") from None
            return
        if what == "profile":
            self._open_window(payload, "strategy")
        elif what is _DONE:
            self._finish(*payload)
        elif what is _CANCEL:
            self.phase = "closed" if payload is None else "failed"
            if payload is not None:
                self.error = payload
                raise RuntimeError(f"power-mode tuning failed: {payload}") from payload

    def _open_window(self, mode: PowerMode, reason: str) -> None:
        idx = len(self.profiles)
        self._window = ProfileWindow(idx, self.space.coerce(mode) if _in_space(self.space, mode) else mode,
                                     self.meter.now_s(), self._settle_s(), self.window_spec, reason)
        self.phase = "profiling"
        self._pending_mode = self._window.mode

    def _switch(self, mode: PowerMode) -> None:
        if self.controller.current() != mode:
            self.controller.apply(mode)
            self.meter.mode_changed(mode)
            self._switched_s = self.meter.now_s()

    def _settle_s(self) -> float:
        settle = self.window_spec.settle_s
        return _default_settle_s(self.meter) if settle is None else settle

    def after_step(self) -> StepRecord | None:
        """Call after each training step: measures it, feeds the window, hands finished profiles back."""
        if self._closed or not self._started:
            return None
        mode = self.controller.current()
        dt, power = self.meter.step_end(mode)
        end_s = self.meter.now_s()
        rec = StepRecord(self.step, mode, dt, power, self.phase, self.label)
        self.step += 1
        win = self._window
        if win is not None and self._pending_mode is None:
            rec.window = win.index
            rec.discarded = not win.feed(end_s, dt, power)
            if win.complete:
                self._close_window(win)
        elif self.phase in ("tuned", "infeasible") and end_s - dt - self._switched_s >= self._settle_s():
            self._check_drift(rec)  # only settled steps: the power after a switch is still moving
        self.records.append(rec)
        return rec

    def _close_window(self, win: ProfileWindow) -> None:
        m = win.result(self.label)
        info = {"index": win.index, "mode": win.mode, "time_s": m.time_s, "power_w": m.power_w, "label": m.label,
                "steps": win.n, "discarded": win.discarded, "cost_s": win.cost_s, "cost_j": win.cost_j,
                "reason": win.reason, "within_budget": m.power_w <= self.problem.power_budget_w}
        self.profiles.append(info)
        self._window = None
        self._emit("profile", info)
        self.phase = "waiting"
        self._replies.put(m)

    def _finish(self, res: Any, base: Any, reason: str) -> None:
        self.result = res
        if base is not None:
            self.baseline_profile = base
        self._known.update(getattr(res, "results", None) or {})
        sol = res.solution
        if reason != "start" and self._known:
            # a re-tune: every mode profiled so far is a candidate too (Fulcrum 5.4 reuses its history)
            from lightning_edge.tuning.table import ProfileTable

            budget = self.problem.power_budget_w / self.drift_scale
            table = ProfileTable.from_results("train", self._known, strategy=f"{res.solution.strategy if sol else ''}"
                                              "+history", profiles_used=getattr(res, "profiles_used", 0))
            hist = table.solve(TrainingProblem(budget)) if len(table) else None
            if hist is not None and (sol is None or hist.time_s < sol.time_s):
                sol = hist
        if sol is None:
            self.solution = None
            fallback = self._lowest_power_mode(res)
            self.phase = "infeasible"
            self._emit("infeasible", {"reason": reason, "mode": fallback, "budget_w": self.problem.power_budget_w})
            if fallback is not None:
                self._pending_mode = fallback
        else:
            self.solution = sol
            self.phase = "tuned"
            self._pending_mode = sol.mode
            self._emit("solution", {"reason": reason, "solution": sol, "budget_w": self.problem.power_budget_w,
                                    "drift_scale": self.drift_scale})
        self._drift_hits = 0
        self._drift_buf = []

    @staticmethod
    def _lowest_power_mode(res: Any) -> PowerMode | None:
        best = None
        for point, m in (getattr(res, "results", None) or {}).items():
            p = getattr(m, "power_w", math.inf)
            if best is None or p < best[0]:
                best = (p, point.mode)
        return None if best is None else best[1]

    # ------------------------------------------------------------------ re-tuning
    def set_power_budget(self, power_budget_w: float) -> None:
        """Change the budget: solves again at the next step boundary (stored profiles cost nothing)."""
        new = TrainingProblem(float(power_budget_w))
        old = self.problem.power_budget_w
        self.problem = new
        if not self._started or self._closed:
            return
        self._cancel_thread()
        self._window = None
        self._pending_mode = None
        self.retunes.append({"step": self.step, "reason": "budget", "from_w": old, "to_w": new.power_budget_w})
        self._emit("retune", {"reason": "budget", "from_w": old, "to_w": new.power_budget_w})
        self._launch(new, reason="budget")

    def _check_drift(self, rec: StepRecord) -> None:
        n = self.drift_window
        if n <= 0 or self._pending_mode is not None:
            return
        self._drift_buf.append(rec)
        if len(self._drift_buf) < n:
            return
        recent, self._drift_buf = self._drift_buf, []
        t = np.array([r.time_s for r in recent])
        p = np.array([r.power_w for r in recent])
        mean_p = float((t * p).sum() / t.sum())
        budget = self.problem.power_budget_w
        if mean_p <= budget * (1.0 + self.drift_tolerance):
            self._drift_hits = 0
            return
        self._drift_hits += 1
        if self._drift_hits < self.drift_patience:
            return
        self._drift_hits = 0
        profiled = self.solution.power_w if self.solution is not None else None
        if profiled is None or profiled <= 0:
            return
        ratio = mean_p / (profiled * self.drift_scale)
        self.drift_scale *= max(ratio, 1.0)
        info = {"reason": "drift", "mode": rec.mode, "measured_power_w": mean_p, "profiled_power_w": profiled,
                "budget_w": budget, "scale": self.drift_scale}
        self.retunes.append({"step": self.step, **info})
        self._emit("drift", info)
        self._cancel_thread()
        self._launch(self.problem, reason="drift")

    # ------------------------------------------------------------------ ending
    def _cancel_thread(self) -> None:
        th = self._thread
        if th is None:
            return
        self._replies.put(_CANCEL)
        th.join(timeout=30.0)
        self._thread = None

    def close(self, reason: str = "end") -> Any:
        """Stop the strategy, restore the original mode (idempotent). Returns what the controller did."""
        if self._closed:
            return self._restored
        self._closed = True
        try:
            self._cancel_thread()
        finally:
            try:
                self.meter.close()
            finally:
                restored = None
                if self._started:
                    restored = self.controller.restore()
                    if restored is None and self.original_mode is not None and \
                            self.controller.current() != self.original_mode:
                        restored = self.controller.apply(self.original_mode)
                self._restored = restored
                self.phase = "closed"
                self._emit("restore", {"reason": reason, "mode": self.original_mode})
        return self._restored

    def _emit(self, kind: str, info: dict) -> None:
        if self.on_event is not None:
            self.on_event(kind, info)

    # ------------------------------------------------------------------ reporting
    def phase_totals(self) -> dict[str, dict[str, float]]:
        """Steps, time (s) and energy (J) per phase: ``profiling`` (windows, incl. discarded steps), ``tuned``."""
        out: dict[str, dict[str, float]] = {}
        for r in self.records:
            key = "profiling" if r.window is not None else ("tuned" if r.phase in ("tuned", "infeasible") else "other")
            d = out.setdefault(key, {"steps": 0, "time_s": 0.0, "energy_j": 0.0})
            d["steps"] += 1
            d["time_s"] += r.time_s
            d["energy_j"] += r.energy_j
        return out

    def summary(self) -> dict[str, Any]:
        sol = self.solution
        tot = self.phase_totals()
        out: dict[str, Any] = {
            "label": self.label, "budget_w": self.problem.power_budget_w, "phase": self.phase,
            "strategy": getattr(self.strategy, "name", type(self.strategy).__name__),
            "original_mode": str(self.original_mode) if self.original_mode is not None else None,
            "profiles_used": getattr(self.result, "profiles_used", 0) if self.result is not None else 0,
            "new_profiles": len([p for p in self.profiles if p["reason"] == "strategy"]),
            "profiling_steps": int(tot.get("profiling", {}).get("steps", 0)),
            "profiling_time_s": float(tot.get("profiling", {}).get("time_s", 0.0)),
            "profiling_energy_j": float(tot.get("profiling", {}).get("energy_j", 0.0)),
            "retunes": len(self.retunes), "drift_scale": self.drift_scale,
            "fingerprint": self.fingerprint, "device_model": self.device_model,
        }
        if sol is not None:
            out.update(mode=str(sol.mode), time_s=sol.time_s, power_w=sol.power_w,
                       energy_per_step_j=sol.time_s * sol.power_w, throughput_steps_s=1.0 / sol.time_s)
        tuned = tot.get("tuned")
        if tuned and tuned["steps"]:
            out.update(measured_tuned_time_s=tuned["time_s"] / tuned["steps"],
                       measured_tuned_power_w=tuned["energy_j"] / tuned["time_s"])
        b = self.baseline_profile
        if b is not None:
            out.update(maxn_time_s=b.time_s, maxn_power_w=b.power_w, maxn_energy_per_step_j=b.time_s * b.power_w)
            if sol is not None:
                out.update(throughput_vs_maxn=b.time_s / sol.time_s,
                           energy_vs_maxn=(sol.time_s * sol.power_w) / (b.time_s * b.power_w))
        return out

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        sol = self.solution
        return {"budget_w": self.problem.power_budget_w, "phase": self.phase, "fingerprint": self.fingerprint,
                "device_model": self.device_model, "drift_scale": self.drift_scale,
                "original_mode": str(self.original_mode) if self.original_mode is not None else None,
                "mode": str(sol.mode) if sol is not None else None,
                "profiles": [{k: (str(v) if isinstance(v, PowerMode) else v) for k, v in p.items()}
                             for p in self.profiles],
                "retunes": list(self.retunes)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume: the same budget, fingerprint and drift scale; the profiles are in the store, so the strategy
        answers again without new profiling (with ``store=None`` the saved ones are not re-used)."""
        if not state:
            return
        self.problem = TrainingProblem(float(state.get("budget_w", self.problem.power_budget_w)))
        self.fingerprint = self.fingerprint or state.get("fingerprint")
        self.drift_scale = float(state.get("drift_scale", 1.0))
        self.profiles = list(state.get("profiles", []))
        self.retunes = list(state.get("retunes", []))
        from lightning_edge.tuning.search import MemoryStore, ProfileKey

        if isinstance(self.store, MemoryStore):  # an in-memory store starts empty: put the saved profiles back
            for p in self.profiles:
                if p.get("reason") == "strategy":
                    mode = self.space.coerce(p["mode"])
                    self.store.put(ProfileKey("train", mode, None),
                                   Measurement(float(p["time_s"]), float(p["power_w"]), str(p.get("label", "measured"))))


# ============================================================================================ helpers
def _strategy(strategy: Any) -> Any:
    if not isinstance(strategy, str):
        if not hasattr(strategy, "run"):
            raise TypeError(f"strategy: expected 'gmd', 'als' or a tuning Strategy, got {type(strategy).__name__}")
        return strategy
    s = strategy.lower()
    if s == "gmd":
        from lightning_edge.tuning.gmd import GMD

        return GMD()
    if s == "als":
        from lightning_edge.tuning.als import ALS

        return ALS()
    raise ValueError(f"strategy {strategy!r}: expected 'gmd' or 'als' (or a Strategy instance)")


def _is_orin(controller: Any) -> bool:
    return getattr(getattr(controller, "space", None), "name", "") == "orin-agx"


def _in_space(space: PowerModeSpace, mode: Any) -> bool:
    try:
        space.coerce(mode)
        return True
    except Exception:  # noqa: BLE001
        return False


def _device_model(controller: Any, meter: Any) -> str:
    name = getattr(getattr(controller, "space", None), "name", None) or getattr(controller, "device_id", "device")
    return f"sim-{name}" if getattr(meter, "label", "") == "simulated" else str(name)


def _default_settle_s(meter: Any) -> float:
    if isinstance(meter, SimStepMeter):
        return 3.0 * meter.settle_tau_s
    from lightning_edge.lightning.device import JETSON_SETTLE_S

    return JETSON_SETTLE_S
