"""One step meter: the time, power and energy of a step (a training minibatch, an inference minibatch) on a clock,
for the power-mode tuner (:mod:`lightning_edge.tuning.online`), serving and interleaving
(:mod:`lightning_edge.serving`).

``board.meter()`` (:meth:`~lightning_edge.devices.board.Board.meter`) gives the right one:

==============  ===================================================  ================================================
                :class:`TwinMeter` (the Orin twin, ``simulated``)    :class:`SensorMeter` (a real board, ``measured``)
==============  ===================================================  ================================================
clock           simulated seconds: a step advances it by its time,   wall seconds (``time.perf_counter_ns``);
                ``wait_until`` jumps over idle time                  ``wait_until`` sleeps
step time       the twin's prediction for the workload and mode,     ``stop() - start()``, after waiting for the
                times seeded noise (the workload's relative sd)      accelerator (CUDA sync when there is one)
step power      the twin's, times seeded noise; after a mode         the sensor's mean over the step (through a
                change it follows the twin's settling curve          ``PowerSampler``), ``nan`` without a sensor
==============  ===================================================  ================================================

A step is ``meter.start()`` ... ``meter.stop(mode, kind, batch_size)`` and gives a :class:`~lightning_edge.records.Measurement` (the one record of a step). The settling
curve lives in the twin (:meth:`~lightning_edge.twin.model.OrinTwin.settling_w`); the meter only asks it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from lightning_edge.devices.protocols import BoardLike
from lightning_edge.records import Measurement

if TYPE_CHECKING:
    import torch
    from torch import nn

    from lightning_edge.cost.model_cost import ModelCost
    from lightning_edge.devices.board import Board
    from lightning_edge.devices.protocols import SensorLike, WorkloadLike
    from lightning_edge.devices.sampler import PowerSampler
    from lightning_edge.modes import PowerMode
    from lightning_edge.twin.model import OrinTwin

__all__ = ["StepMeter", "TwinMeter", "SensorMeter", "JETSON_SETTLE_S"]

#: seconds a Jetson's power takes to settle after a mode change (Pagoda: 2-3 s; the twin: 3 tau = 2.4 s)
JETSON_SETTLE_S = 2.5


@runtime_checkable
class StepMeter(Protocol):
    """What the tuner, serving and interleaving ask of a device's meter (see the module docstring)."""

    label: str
    simulated: bool
    settle_s: float  # how long the power takes to settle after a mode change (s)

    def open(self) -> None: ...
    def now_s(self) -> float: ...
    def wait_until(self, t_s: float) -> float: ...
    def start(self) -> float: ...
    def stop(self, mode: PowerMode | str | None, kind: str = "train",
             batch_size: int | None = None) -> Measurement: ...
    def mode_changed(self, mode: PowerMode | str | None) -> None: ...
    def idle_power_w(self, mode: PowerMode | str | None) -> float: ...
    def energy_j(self, t0_s: float, t1_s: float) -> float | None: ...
    def close(self) -> None: ...


class TwinMeter:
    """Steps on the Orin twin, on a simulated clock (``simulated``).

    ``TwinMeter(twin, *, train=None, infer=None, seed=0, noise=True, settling=True, precision="fp32")``: ``twin``
    is an :class:`~lightning_edge.twin.model.OrinTwin` or a simulated device holding one (a
    :class:`~lightning_edge.devices.protocols.BoardLike`: a ``SimulatedOrin``, a simulated ``Board``);
    ``train``/``infer`` the twin workloads (``SimWorkload``, any
    :class:`~lightning_edge.devices.protocols.WorkloadLike`: ``draw(kind, mode, batch_size, rng, noise)``) timed by
    ``stop(mode, "train")`` and ``stop(mode, "infer", bs)``; the training one can be given later with :meth:`bind`
    or :meth:`bind_cost`. Each step draws the workload's seeded gaussian noise
    (``time_noise``, ``power_noise``: 2.5 % and 2 %) from the meter's one generator. With ``settling`` the power
    follows the twin's settling curve after :meth:`mode_changed` and, at the first step, from the idle board's static
    power.
    """

    label = "simulated"
    simulated = True

    def __init__(self, twin: OrinTwin | BoardLike, *, train: WorkloadLike | None = None,
                 infer: WorkloadLike | None = None, seed: int | None = 0, noise: bool = True, settling: bool = True,
                 precision: str = "fp32") -> None:
        from lightning_edge.twin.model import OrinTwin

        inner = twin if isinstance(twin, OrinTwin) else twin.twin if isinstance(twin, BoardLike) else None
        if not isinstance(inner, OrinTwin):
            raise TypeError(f"TwinMeter needs the Orin twin (OrinTwin or SimulatedOrin), got {type(twin).__name__}")
        self.twin: OrinTwin = inner
        self.label = str(self.twin.label)  # "extrapolated" on an extrapolated board
        self.workloads: dict[str, WorkloadLike | None] = {"train": train, "infer": infer}
        self.seed = seed
        self.noise = bool(noise)
        self.settling = bool(settling)
        self.precision = precision
        self.rng = np.random.default_rng(seed)
        self.clock_s = 0.0
        self._t0 = 0.0
        self._change_s = 0.0
        self._from_w: float | None = None  # None before the first step: it starts from the idle board
        self._target_w: float | None = None
        self._kind: str | None = None  # the workload of the last step

    # ------------------------------------------------------------------ workloads
    @property
    def workload(self) -> WorkloadLike | None:
        """The training workload (what the tuner's prior models)."""
        return self.workloads["train"]

    @property
    def bound(self) -> bool:
        return self.workload is not None

    def bind(self, module: nn.Module,
             example_inputs: torch.Tensor | Sequence[torch.Tensor] | Mapping[str, torch.Tensor]) -> None:
        """Time training steps of ``module`` on one minibatch of its forward inputs (shapes only)."""
        from lightning_edge.twin.sim_workload import SimWorkload

        self.workloads["train"] = SimWorkload(module, self.twin, example_inputs=example_inputs, seed=self.seed,
                                              precision=self.precision)

    def bind_cost(self, cost: ModelCost, batch_size: int, *, param_tensors: int | None = None) -> None:
        """Time training steps of a captured :class:`~lightning_edge.cost.ModelCost` (``training=True``): the twin's
        one model of that cost (``OrinTwin.workload``; the profiler's per-layer table of the same cost is the same
        model). ``param_tensors``: the optimizer's parameter tensors (``count_param_tensors(module)``; default: a
        guess from the layers). The precision is the cost's own (a 16-bit autocast or 16-bit tensors: fp16)."""
        from lightning_edge.twin.sim_workload import SimWorkload

        self.workloads["train"] = SimWorkload(cost, self.twin, train_batch_size=int(batch_size), seed=self.seed,
                                              param_tensors=param_tensors)

    @property
    def settle_s(self) -> float:
        """3 time constants of the twin's settling curve (within 5 %; 0 without settling)."""
        on = self.settling and self.twin.settling
        return 3.0 * float(self.twin.settle_tau_s) if on else 0.0

    # ------------------------------------------------------------------ the clock
    def open(self) -> None:
        pass

    def now_s(self) -> float:
        return self.clock_s

    def wait_until(self, t_s: float) -> float:
        """Jump to ``t_s`` (if later); returns the idle time."""
        idle = max(float(t_s) - self.clock_s, 0.0)
        self.clock_s += idle
        return idle

    # ------------------------------------------------------------------ steps
    def draw(self, kind: str, mode: PowerMode | str | None,
             batch_size: int | None = None) -> tuple[float, float, float]:
        """One noisy step of the ``kind`` workload at ``mode``, without moving the clock: ``(time_s, power_w,
        noise-free power_w)``."""
        wl = self.workloads.get(kind)
        if wl is None:
            raise RuntimeError(f"TwinMeter has no {kind} workload: pass {kind}= (or call bind(module, inputs))")
        return wl.draw(kind, mode, batch_size, self.rng, self.noise)

    def start(self) -> float:
        self._t0 = self.clock_s
        return self._t0

    def stop(self, mode: PowerMode | str | None, kind: str = "train",
             batch_size: int | None = None) -> Measurement:
        """The step: the twin's time and power at ``mode``; the clock advances by its time. ``settled``: the step
        started at least :attr:`settle_s` after the last mode change, workload change or start."""
        dt, power, clean = self.draw(kind, mode, batch_size)
        settled = True
        if self.settling:
            if kind != self._kind and self._kind is not None:
                self.mode_changed(mode)  # another workload (training <-> validation): the power moves to its level
            self._kind = kind
            if self._target_w is None:
                self._target_w = clean
                if self._from_w is None:  # the board was idle before the first step
                    self._from_w = self.idle_power_w(mode)
                    self._change_s = self.clock_s
            a, b = self.clock_s - self._change_s, self.clock_s + dt - self._change_s
            # the mean of the twin's settling curve over the step, times this step's noise
            power = self.twin.settling_w(self._from_w, self._target_w, a, b) * (power / clean)
            settled = a >= self.settle_s
        self.clock_s += dt
        return Measurement(dt, float(power), self.label, mode=mode, settled=settled)

    def mode_changed(self, mode: PowerMode | str | None) -> None:
        """The mode changed now: the power moves from its level now to the new mode's along the twin's curve."""
        if self._target_w is None:
            return
        self._from_w = self.twin.settling_w(self._from_w, self._target_w, self.clock_s - self._change_s)
        self._change_s = self.clock_s
        self._target_w = None  # set at the next step, from the new mode

    def idle_power_w(self, mode: PowerMode | str | None) -> float:
        return float(np.asarray(self.twin.static_power(mode)).reshape(-1)[0])

    def energy_j(self, t0_s: float, t1_s: float) -> float | None:
        return None  # the sum of the steps' (and idle time's) energies

    def close(self) -> None:
        pass


def _cuda_sync() -> Callable[[], None]:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.synchronize
    except Exception:  # noqa: BLE001 - no torch, no CUDA: nothing to wait for
        pass
    return lambda: None


class SensorMeter:
    """Steps on the wall clock, power from a real sensor (``measured``).

    ``SensorMeter(sensor, *, rate_hz=None, sync=None, wait=True, clock_ns=time.perf_counter_ns, sleep=time.sleep)``:
    ``sensor`` is any :class:`~lightning_edge.devices.sensors.base.PowerSensor` (Jetson INA3221, jtop, NVML, RAPL);
    without one (``None`` or unavailable) every power is ``nan``. ``sync`` waits for the accelerator before a step's
    clock is read (default: ``torch.cuda.synchronize`` when CUDA is available). A step's power is the sampler's mean
    over the step, or over the sensor's last update period when the step is shorter (it cannot resolve less); with
    ``wait`` the meter first waits (at most two update periods) for a sample after the step. When the sampler has
    nothing the sensor is read once. Negative, non-finite or rejected readings are never believed: the reading is
    ``nan`` or ``trusted=False``."""

    label = "measured"
    simulated = False
    settle_s = JETSON_SETTLE_S

    def __init__(self, sensor: SensorLike | None = None, *, rate_hz: float | None = None,
                 sync: Callable[[], None] | None = None,
                 wait: bool = True, clock_ns: Callable[[], int] = time.perf_counter_ns,
                 sleep: Callable[[float], None] = time.sleep, board: Board | None = None) -> None:
        self.sensor = sensor
        self.has_power = sensor is not None and bool(sensor.available)
        self.why_no_power = None if self.has_power else ((sensor.reason if sensor is not None else "")
                                                         or "no power sensor")
        self.sampler: PowerSampler | None = None
        self._board = board  # with a board: its one sampler, shared with every other reader of the board
        self._released = False
        if sensor is not None and self.has_power and board is None:
            from lightning_edge.devices.sampler import PowerSampler

            self.sampler = PowerSampler(sensor, rate_hz=rate_hz, clock_ns=clock_ns)
        self.wait = bool(wait)
        self._sync = sync if sync is not None else _cuda_sync()
        self._ns = clock_ns
        self._sleep = sleep
        self.t0_ns = int(clock_ns())
        self._t0: int | None = None
        period_s = float(sensor.update_period_s or 0.0) if sensor is not None else 0.0
        self.period_ns = int(max(period_s, 0.0) * 1e9)

    # ------------------------------------------------------------------ the clock
    def open(self) -> None:
        if self._board is not None:
            if self.has_power and self.sampler is None:
                self.sampler = self._board.sampler()
            return
        if self.sampler is not None and not self.sampler.running:
            self.sampler.start()

    def now_s(self) -> float:
        return (self._ns() - self.t0_ns) / 1e9

    def to_ns(self, t_s: float) -> int:
        return self.t0_ns + int(round(t_s * 1e9))

    def wait_until(self, t_s: float) -> float:
        """Sleep until ``t_s``; returns the idle time."""
        start = self.now_s()
        if float(t_s) > start:
            self._sleep(float(t_s) - start)
        return max(self.now_s() - start, 0.0)

    # ------------------------------------------------------------------ steps
    def start(self) -> float:
        self._sync()
        self._t0 = int(self._ns())
        return (self._t0 - self.t0_ns) / 1e9

    def stop(self, mode: PowerMode | str | None = None, kind: str = "train",
             batch_size: int | None = None) -> Measurement:
        """The step since :meth:`start`: its wall time and the sensor's mean power over it."""
        self._sync()
        t1 = int(self._ns())
        t0 = self._t0 if self._t0 is not None else t1 - 1
        self._t0 = None
        power, trusted = self._power(t0, t1)
        return Measurement(max((t1 - t0) / 1e9, 1e-9), power, self.label, trusted and power == power, mode=mode)

    def _power(self, t0: int, t1: int) -> tuple[float, bool]:
        if self.sampler is None:
            return math.nan, False
        lo = min(t0, t1 - self.period_ns)
        try:
            if self.wait:
                self.sampler.wait_for(t1, timeout_s=max(2 * self.period_ns / 1e9, 0.05))
            power = float(self.sampler.mean_power_w(lo, t1))
            trusted = self.sampler.quality(lo, t1).trusted
        except Exception:  # noqa: BLE001 - a sensor hiccup must never stop training or serving
            power, trusted = math.nan, False
        if not (math.isfinite(power) and power >= 0):
            reading = None
            if self.sensor is not None:
                try:
                    reading = self.sensor.read()
                except Exception:  # noqa: BLE001 - SensorError: nothing read
                    pass
            power = float(reading.power_w) if reading is not None else math.nan
            trusted = reading is not None and bool(reading.ok) and not reading.rejected
        if not (math.isfinite(power) and power >= 0):
            return math.nan, False
        return power, trusted

    def mode_changed(self, mode: PowerMode | str | None) -> None:
        pass  # the real board settles on its own; a profile window discards the settling time

    def idle_power_w(self, mode: PowerMode | str | None) -> float:
        return math.nan  # not modelled: the sampler's energy covers idle time (energy_j)

    def energy_j(self, t0_s: float, t1_s: float) -> float | None:
        """The sensor's energy between two clock times (``nan`` without a sensor)."""
        if self.sampler is None:
            return math.nan
        return float(self.sampler.energy_j(self.to_ns(t0_s), self.to_ns(t1_s)))

    def close(self) -> None:
        if self._board is not None:
            if self.sampler is not None and not self._released:
                self._released = True
                self._board.release_sampler()  # the readings stay available (self.sampler)
            return
        if self.sampler is not None:
            self.sampler.stop()
