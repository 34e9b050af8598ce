"""The live simulated board: :class:`LiveTwin`, the twin's model (:class:`~lightning_edge.twin.model.OrinTwin`) played
as a running board.

    >>> live = LiveTwin(OrinTwin(), controller, seed=0)    # SimulatedOrin builds it: dev.live
    >>> controller.apply("8c/1344/727/2133")               # the board follows its controller's mode
    >>> with live.running("resnet18", "train", 16):        # a workload runs: its power is the model's step
    ...     live.power_now()                               # settles to it within ~2.5 s, with seeded noise

What the model does not keep lives here: the mode (the controller's: the one place the simulated mode is), a clock,
the workload running now (:class:`Activity`), the power's settling state after a change (the curve itself is the
model's, :meth:`OrinTwin.settling_w <lightning_edge.twin.model.OrinTwin.settling_w>`) and the seeded noise on its
readings. The simulated power sensor (:class:`~lightning_edge.devices.sim.sensor.SimPowerSensor`) reads it. Every
number is the model's, labelled as the model labels it (``simulated``; ``extrapolated`` on an extrapolated board).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

import numpy as np

from lightning_edge import catalog
from lightning_edge.devices.sim.controller import SimModeController
from lightning_edge.modes import PowerMode, PowerModeSpace
from lightning_edge.twin.model import OrinTwin
from lightning_edge.twin.workload import WorkloadProfile
from lightning_edge.twin.workload_model import TwinWorkload

if TYPE_CHECKING:  # pragma: no cover
    from lightning_edge.cost import ModelCost

__all__ = ["LiveTwin", "Activity"]

#: what a live board can run: a workload's model, its compiled rows, a captured cost, or a zoo model's name
Runnable = Union[TwinWorkload, WorkloadProfile, "ModelCost", str]


@dataclass
class Activity:
    """What the live board is running: a workload's model (its power) or a power function, and the layer running
    now when a profiler says (:meth:`LiveTwin.set_layer`)."""

    name: str
    kind: str
    batch_size: int
    workload: TwinWorkload | None = None
    power_fn: Callable[[PowerMode], float] | None = None
    layer: str | None = None

    @property
    def profile(self) -> WorkloadProfile | None:
        """The running workload's compiled rows."""
        return None if self.workload is None else self.workload.profile


class LiveTwin:
    """The simulated board live (module docstring): ``model``, an :class:`~lightning_edge.twin.model.OrinTwin`;
    ``controller``, the :class:`~lightning_edge.devices.sim.controller.SimModeController` whose mode the board is in
    (default: a new in-memory one over the model's space, powered on in ``initial``, else MAXN);
    ``clock``: seconds (a fake one in tests; the controller's, for its ``last_change_s``, should be the same);
    ``noise``/``power_noise``/``seed``: seeded gaussian noise (relative sd) on :meth:`power_now`. The settling
    (whether, and its time constant) is the model's (``OrinTwin(settling=, settle_tau_s=)``).
    """

    def __init__(
        self,
        model: OrinTwin,
        controller: SimModeController | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        noise: bool = True,
        seed: int | None = 0,
        power_noise: float = 0.02,
        initial: PowerMode | str | None = None,
    ) -> None:
        self.model = model
        if controller is None:
            space = model.space
            power_on = initial if initial is not None else (
                catalog.ORIN_AGX_MAXN if space.name == "orin-agx" else space.max_mode())
            key = model.board.key if model.board is not None else (space.name or "orin-agx")
            controller = SimModeController(key, space=space, initial=power_on, clock=clock, safety=False,
                                           handle_exit=False)
        elif initial is not None:
            raise ValueError("initial= is the mode of a new board: a controller given keeps its own mode")
        self.controller = controller
        self.clock = clock
        self.noise = bool(noise)
        self.power_noise = float(power_noise)
        self._rng = np.random.default_rng(seed)
        self._lock = threading.RLock()
        self._activity: Activity | None = None
        self._power_w: dict[tuple, float] = {}  # (workload, layer, mode) -> settled W (target_power)
        self._parts_w: dict[tuple, dict[str, float]] = {}  # (workload, mode) -> {part: W} (power_parts_now)
        # the settling state: the level being approached, where the last transition started, and when
        self._target_key: tuple | None = None
        self._last_target: float | None = None
        self._from_w: float | None = None
        self._change_s: float | None = None
        self._ctl_change_s: float | None = None

    @property
    def space(self) -> PowerModeSpace:
        return self.model.space

    @property
    def label(self) -> str:
        """The model's label: ``simulated`` (``extrapolated`` on an extrapolated board)."""
        return self.model.label

    # ------------------------------------------------------------------ the mode (the controller's)
    def current_mode(self) -> PowerMode:
        """The mode the simulated board is in: its controller's."""
        return self.controller.current()

    def set_mode(self, mode: PowerMode | str) -> PowerMode:
        """Switch the board's mode through its controller; the power settles from the level it showed."""
        self.controller.apply(mode)
        return self.controller.current()

    # ------------------------------------------------------------------ what runs
    def begin(self, activity: Activity | Runnable, kind: str = "infer", batch_size: int | None = None) -> Activity:
        """A workload starts running (an :class:`Activity`, a :class:`~lightning_edge.twin.workload_model.
        TwinWorkload`, a ModelCost / WorkloadProfile, or a zoo name): the power follows that workload's model."""
        if not isinstance(activity, Activity):
            activity = self._make_activity(activity, kind, batch_size)
        with self._lock:
            now = self.clock()
            self._begin_transition(now)
            self._power_w.clear()
            self._parts_w.clear()
            self._activity = activity
            self._target_key = None
        return activity

    def end(self) -> None:
        """The workload stopped: power settles back to the mode's static power."""
        with self._lock:
            now = self.clock()
            self._begin_transition(now)
            self._activity = None
            self._target_key = None

    @contextlib.contextmanager
    def running(self, cost: Activity | Runnable, kind: str = "infer",
                batch_size: int | None = None) -> Iterator[Activity]:
        """``with live.running(cost, "train", 16): ...``: the power follows that workload meanwhile."""
        act = self.begin(cost, kind, batch_size)
        try:
            yield act
        finally:
            self.end()

    def set_layer(self, name: str | None) -> None:
        """Which step is running now (a profiler may tell): the power then follows that step."""
        with self._lock:
            if self._activity is not None:
                self._activity.layer = name

    @property
    def activity(self) -> Activity | None:
        return self._activity

    def _make_activity(self, what: Runnable, kind: str, batch_size: int | None) -> Activity:
        if isinstance(what, TwinWorkload):
            return Activity(what.name, what.kind, what.batch_size, what)
        if isinstance(what, str):
            bs = batch_size or (16 if kind == "train" else 1)
            return Activity(what, kind, bs, self.model.workload(what, bs, kind))
        wl = self.model.workload(what, batch_size, None if isinstance(what, WorkloadProfile) else kind)
        return Activity(wl.name, wl.kind, wl.batch_size, wl)

    # ------------------------------------------------------------------ power
    def _static_w(self, mode: PowerMode) -> float:
        return float(self.model.physics.static_power(*np.array(mode.as_tuple(), dtype=float)))

    def target_power(self, mode: PowerMode | None = None) -> float:
        """The settled (noise-free) power of the board in ``mode`` (default: now): static when idle, else the running
        workload's step (:meth:`TwinWorkload.step`), or the rows of the layer running now (:meth:`set_layer`)."""
        mode = self.current_mode() if mode is None else mode
        act = self._activity
        if act is None:
            return self._static_w(mode)
        if act.power_fn is not None:
            return float(act.power_fn(mode))
        key = (id(act.workload), act.layer, mode)
        cached = self._power_w.get(key)
        if cached is not None:
            return cached
        wl = act.workload
        if act.layer is not None and wl is not None and act.layer in wl.profile.names:
            lt = wl.layers(mode)
            rows = [i for i, n in enumerate(lt.names) if n == act.layer]
            g = float(sum(lt.gpu_s[i] for i in rows))
            e = float(sum(lt.energy_j[i] for i in rows))
            value = e / g if g > 0 else lt.power_w
        elif wl is not None:
            value = float(wl.step(mode).power_w)
        else:
            value = self._static_w(mode)
        self._power_w[key] = value
        return value

    def _settled_level(self, now: float) -> float:
        """Power now without noise, following the exponential settling."""
        mode = self.current_mode()
        act = self._activity
        key = (mode, id(act), None if act is None else act.layer)
        target = self.target_power(mode)
        ctl_change = self.controller.last_change_s
        if ctl_change is not None and ctl_change != self._ctl_change_s:
            # the controller switched modes: settle from the level we were showing
            self._ctl_change_s = ctl_change
            if self._target_key is not None and self._last_target is not None:
                self._from_w = self._level_at(ctl_change, self._last_target)
                self._change_s = ctl_change
        self._target_key = key
        self._last_target = target
        return self._level_at(now, target)

    def _level_at(self, t: float, target: float) -> float:
        if not self.model.settling or self._from_w is None or self._change_s is None:
            return target
        return self.model.settling_w(self._from_w, target, t - self._change_s)

    def _begin_transition(self, now: float) -> None:
        if self._target_key is None and self._from_w is None:
            self._from_w = self.target_power()
        else:
            last = self._last_target if self._last_target is not None else self.target_power()
            self._from_w = self._level_at(now, last)
        self._change_s = now

    def power_now(self, *, noise: bool | None = None) -> float:
        """The board's instantaneous power (W, simulated): settling after changes, plus seeded noise."""
        with self._lock:
            now = self.clock()
            level = self._settled_level(now)
            if (self.noise if noise is None else noise) and self.power_noise > 0:
                level *= 1.0 + self.power_noise * float(self._rng.standard_normal())
            return max(level, 0.0)

    def power_parts_now(self) -> dict[str, float]:
        """Settled split of the current power, W: ``static``, ``gpu`` (dynamic), ``cpu`` (dynamic), ``mem``: the
        running workload's step energy parts over its time (:data:`~lightning_edge.twin.workload_model.ENERGY_PARTS`),
        so they sum to its power; idle, the mode's static power alone."""
        mode = self.current_mode()
        act = self._activity
        if act is None or act.workload is None:
            return {"static": self._static_w(mode), "gpu": 0.0, "cpu": 0.0, "mem": 0.0}
        key = (id(act.workload), mode)
        cached = self._parts_w.get(key)
        if cached is not None:
            return dict(cached)
        step = act.workload.step(mode)
        t = float(step.time_s)
        parts = {name: float(step.parts[f"{name}_j"]) / t for name in ("static", "gpu", "cpu", "mem")}
        self._parts_w[key] = parts
        return dict(parts)

    def __repr__(self) -> str:
        return f"LiveTwin({self.model.name}, mode {self.current_mode()}, {self.label})"
