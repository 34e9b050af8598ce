"""Tuning the power mode *while training*: profiling windows on the real minibatches (Fulcrum section 5, 6).

:class:`OnlineTuner` is the engine of :class:`lightning_edge.PowerModeTuner` and works in any training loop::

    tuner = OnlineTuner(TrainingProblem(25.0), controller=board.controller, meter=board.meter())
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
       a window whose mean power is still within :data:`EDGE_Z` standard errors of the budget goes on, up to
       ``edge_steps``, until it is clearly on one side (a profile at the budget's edge decides the answer);
    3. the mean time per minibatch and the time-weighted mean power, with the power's standard error, go back to
       the strategy as the profile.

    Profiles already in the store are never measured again: a second run with the same device and workload
    gets its answer without profiling (Fulcrum section 5.1: "once a power mode has been profiled it can be
    reused"). Training goes on in the chosen mode.

The budget is a promise
    MAXN is never run for the summary's comparison; the prior's picks leave room for its own error
    (:mod:`lightning_edge.tuning.prior`); :meth:`summary` reports what ran over the budget while tuning.

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
    Any :class:`~lightning_edge.devices.meter.StepMeter`; ``board.meter()`` gives the right one. A
    ``SensorMeter``: wall-clock step times (CUDA-synchronised when the model is on a GPU) and power from a real
    sensor (label ``measured``). A ``TwinMeter``: the training really runs on this machine, but the minibatch time
    and power the tuner sees are the twin's for that module and batch on the board's current mode, on a simulated
    clock, with the twin's measurement noise and its power settling after a mode change (label ``simulated``).
"""

from __future__ import annotations

import math
import numbers
import queue
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_edge import catalog
from lightning_edge.devices.board import store_key_for
from lightning_edge.devices.controllers.errors import BoardReleasedError
from lightning_edge.devices.meter import JETSON_SETTLE_S, StepMeter, TwinMeter
from lightning_edge.modes import KNOBS, ModeLike, PowerMode, PowerModeSpace
from lightning_edge.records import OverBudget, as_rel_sem, over_budget, settled
from lightning_edge.tuning.gmd import GMD
from lightning_edge.tuning.prior import SEM_FLOOR, is_within, widened_sem
from lightning_edge.tuning.problems import Measurement, Problem, Solution, TrainingProblem
from lightning_edge.tuning.search import (
    MemoryStore,
    Point,
    ProfileKey,
    ProfilingStopped,
    Result,
    SearchResult,
    Strategy,
    open_backend,
    strategy_named,
)
from lightning_edge.tuning.table import ProfileTable

if TYPE_CHECKING:
    from torch import nn

    from lightning_edge.cost.model_cost import ModelCost
    from lightning_edge.devices.board import Board
    from lightning_edge.devices.controllers.base import AppliedMode, ModeController
    from lightning_edge.tuning.prior import Prior
    from lightning_edge.tuning.store import StoreSpec
    from lightning_edge.twin.board_files import BoardFile
    from lightning_edge.twin.sim_workload import SimWorkload

__all__ = [
    "OnlineTuner", "WindowSpec", "ProfileWindow", "StepRecord",
    "TuningCancelled", "TuningInterrupted", "batch_signature", "batch_tensors", "module_fingerprint", "PHASES", "Phase", "Event",
    "simulate_tuning", "TuningProgress", "TuningSummary",
]

THOROUGH_AFTER_STEPS = 2000
"""A run planned for at least this many minibatches gets ``thorough`` tuning from ``PowerModeTuner``: GMD's full
search after the prior's profiles (about 14 windows, a few hundred minibatches, against a mode chosen on 4)."""

class Phase(str, Enum):
    """``waiting``: the strategy is busy (store look-ups) or has not started; ``profiling``: a window is being
    measured; ``tuned``: training in the chosen mode; ``infeasible``: no profiled mode meets the budget (training
    runs in the lowest-power mode profiled); ``closed``: the board was restored; ``failed``: the strategy failed
    (the board was restored, ``OnlineTuner.error`` says why). Members compare equal to their strings."""

    WAITING = "waiting"
    PROFILING = "profiling"
    TUNED = "tuned"
    INFEASIBLE = "infeasible"
    CLOSED = "closed"
    FAILED = "failed"
    __str__ = str.__str__
    __format__ = str.__format__


PHASES = tuple(Phase)


class Event(str, Enum):
    """What ``OnlineTuner(on_event=...)`` is told, with its info dict: ``wait`` (for another process's profiles),
    ``profile`` (a window measured), ``infeasible`` / ``solution`` (a mode chosen), ``retune`` (the budget changed),
    ``drift`` (the chosen mode's power drifted), ``restore`` (the original mode put back). Members compare equal to
    their strings."""

    WAIT = "wait"
    PROFILE = "profile"
    INFEASIBLE = "infeasible"
    SOLUTION = "solution"
    RETUNE = "retune"
    DRIFT = "drift"
    RESTORE = "restore"
    __str__ = str.__str__
    __format__ = str.__format__


@dataclass(frozen=True)
class TuningProgress:
    """Where tuning stands (:meth:`OnlineTuner.progress`): profiles done and planned, the minibatches one profile
    takes (settling, warm-up, measured window: the mean of this run's windows, else estimated from the step times),
    how many more minibatches tuning needs (0 once tuned), and the prior the search started from."""

    profiles_done: int
    profiles_planned: int
    baseline: bool
    settle_steps: float
    warmup_steps: float
    window_steps: float
    minibatches_per_profile: float
    per_profile_estimated: bool
    more_steps_needed: int
    tuning_steps: int | None  # minibatches before training ran in the chosen mode (None: not tuned yet)
    prior: str | None
    prior_note: str | None
    prior_time_s: float | None
    stopped: str | None = None  # why profiling stopped before the strategy finished (the run ends first), if it did


@dataclass(frozen=True)
class TuningSummary:
    """What a tuning run did and chose (:meth:`OnlineTuner.summary`); every time, power and energy is labelled by
    ``label`` (``simulated`` on the twin, ``measured`` on a board). The chosen mode's fields are None until a mode is
    chosen; ``measured_tuned_*`` before training ran in it (they are over its settled steps when it has any:
    ``measured_tuned_settled``). The MAXN comparison's (``maxn_*``) are None without a figure for MAXN: MAXN is never
    run for it (it would break the budget); its figure is a profile in the store or the prior's prediction
    (``maxn_source`` says which). ``over_budget``: the steps over the budget while tuning (before training ran in the
    chosen mode), with their time, the worst power and the profiling windows over it; ``maxn_steps``: steps run at
    MAXN after tuning began."""

    label: str
    budget_w: float
    phase: str
    strategy: str
    original_mode: str | None
    profiles_used: int
    new_profiles: int
    profiling_steps: int
    profiling_time_s: float
    profiling_energy_j: float
    retunes: int
    drift_scale: float
    fingerprint: str | None
    device_model: str | None
    progress: TuningProgress
    mode: str | None = None
    time_s: float | None = None
    power_w: float | None = None
    energy_per_step_j: float | None = None
    throughput_steps_s: float | None = None
    measured_tuned_time_s: float | None = None
    measured_tuned_steps: int | None = None
    measured_tuned_power_w: float | None = None
    maxn_time_s: float | None = None
    maxn_power_w: float | None = None
    maxn_energy_per_step_j: float | None = None
    throughput_vs_maxn: float | None = None
    energy_vs_maxn: float | None = None
    mode_label: str | None = None  # how the chosen mode's profile was obtained (measured, simulated...)
    maxn_label: str | None = None  # how MAXN's was ("... (partial)": no comparison is made)
    capture_steps: int = 0  # PowerModeTuner: minibatches before tuning started (the cost model's capture step)
    restored: str | None = None  # the mode the board was put back to at the end
    measured_tuned_settled: bool = True
    maxn_source: str | None = None
    over_budget: OverBudget | None = None
    maxn_steps: int = 0

    @property
    def tuning_steps(self) -> int | None:
        return self.progress.tuning_steps

    def to_dict(self) -> dict[str, Any]:
        """Plain values (the progress nested under ``progress``), for JSON and logs."""
        return asdict(self)


class TuningCancelled(RuntimeError):
    """Raised inside the strategy's thread when the tuner is closed before the profile it waits for."""


class TuningInterrupted(RuntimeError):
    """Raised in the training thread when :attr:`OnlineTuner.interrupted` says to stop waiting (SIGTERM)."""


# ============================================================================================ fingerprints
def batch_tensors(batch: Any) -> list:
    """Every tensor in a (nested) batch of tuples, lists and dicts, dict entries in key order: stable keys for
    fingerprints (:func:`~lightning_edge.cost.capture.tensors_of` keeps the order the user wrote them)."""
    out: list = []

    def walk(obj: Any) -> None:
        if hasattr(obj, "shape") and hasattr(obj, "dtype"):
            out.append(obj)
        elif isinstance(obj, dict):
            for k in sorted(obj, key=str):
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


def module_fingerprint(module: nn.Module, batch: Any, precision: str = "fp32", extra: str = "") -> str:
    """The key of a training workload's profiles: module class, parameter count, batch signature, precision.

    Two runs of the same model on the same data shapes get the same key (and share profiles); a different
    architecture, width, input size, batch size or precision gets another one."""
    from torch.nn.parameter import is_lazy

    # a Lazy module's uninitialized parameters count as 0 (the tuner fingerprints after the first step)
    n_params = (sum(int(p.numel()) for p in module.parameters() if not is_lazy(p))
                if hasattr(module, "parameters") else 0)
    bs, sig = batch_signature(batch)
    from lightning_edge.tuning.store import model_name

    name = model_name(module)  # the model, not the LightningModule wrapping it: profiles are keyed by what runs
    return "-".join(x for x in (name, f"p{n_params}", f"bs{bs}", sig, precision, extra) if x)


# ============================================================================================ steps
@dataclass(frozen=True)
class StepRecord:
    """One training step as the tuner saw it: its :class:`~lightning_edge.records.Measurement` (``m``: the one record
    of the step; its time, power, mode, label and whether its power had settled) and where it stood in tuning:
    ``phase``, ``window`` (the profiling window it belongs to, None outside windows), ``discarded`` (a settling or
    warm-up step of a window)."""

    step: int
    m: Measurement
    phase: str
    window: int | None = None  # index of the profile window it belongs to, None outside windows
    discarded: bool = False  # a settling or warm-up step of a window

    @property
    def mode(self) -> Any:
        return self.m.mode

    @property
    def time_s(self) -> float:
        return self.m.time_s

    @property
    def power_w(self) -> float:
        return self.m.power_w

    @property
    def trusted(self) -> bool:
        """False: the step's power rests on partial or rejected readings (a rail missing), or there is none."""
        return self.m.trusted and math.isfinite(self.m.power_w)

    @property
    def energy_j(self) -> float:
        return self.m.energy_j

    @property
    def label(self) -> str:
        return self.m.label


# ============================================================================================ windows
#: how many times a profiling window switches the board back to its mode after something else moved it
MAX_RESWITCHES = 3

EDGE_Z = 3.0
"""A profiling window whose mean power is within this many of its standard errors of the power budget is measured
on (``WindowSpec.edge_steps``): which side of the budget the mode is on is not known yet. The guard a prior-guided
search holds a profile to (:data:`~lightning_edge.tuning.prior.GUARD_Z`, 3): a window that stops before its longest
is either within the guard or as far over the budget."""

EDGE_FACTOR = 16
"""A window at the budget's edge measures up to this many times ``WindowSpec.max_steps`` (``edge_steps=None``): 640
minibatches for Fulcrum's 40, a profile's power to about 0.1 % (readings that scatter by 2 %)."""


@dataclass(frozen=True)
class WindowSpec:
    """How one mode is profiled on training minibatches.

    ``settle_s``: ``None`` (the default): the minibatches after the switch are discarded until the measured
    power has *settled*, detected on the readings: the time-weighted mean power of the last ``settle_block_s``
    seconds (at least 3 minibatches) differs from the block before it by at most ``settle_rel`` of it plus twice
    the standard error of that difference (the readings' own noise); at most the device's settling time (2.5 s
    on a Jetson: Pagoda, Fulcrum section 6; 3 time constants on the twin). A number: a fixed settling time in
    seconds instead (0: none). ``warmup_steps``: at least that many minibatches are discarded, settling ones
    included (the first one after a switch is slow: Fulcrum section 6); then between ``min_steps`` and
    ``max_steps`` minibatches are measured, stopping once the relative standard error of the mean time and of
    the mean power are both <= ``rel_sem``; ``max_settle_steps`` bounds the discarded steps once the device's
    settling time has passed (never before it: with minibatches of a few ms, 200 steps are one time constant).
    ``edge_steps``: a window whose mean power is within :data:`EDGE_Z` of its standard errors of the power budget
    when it would stop is measured on, up to this many minibatches in all, until it is clearly on one side of the
    budget, looked at only at doublings of ``max_steps`` (``None``: :data:`EDGE_FACTOR` x ``max_steps``;
    ``max_steps``: never). At the budget's edge the profile's noise decides whether a mode is an answer: 16 times
    the minibatches divide it by 4.
    """

    settle_s: float | None = None
    warmup_steps: int = 1
    min_steps: int = 10
    max_steps: int = 40
    rel_sem: float = 0.01
    max_settle_steps: int = 200
    settle_block_s: float = 0.5
    settle_rel: float = 0.01
    edge_steps: int | None = None

    @property
    def edge_max_steps(self) -> int:
        """The most minibatches a window at the budget's edge measures (``edge_steps``; None: :data:`EDGE_FACTOR` x
        ``max_steps``)."""
        return EDGE_FACTOR * self.max_steps if self.edge_steps is None else int(self.edge_steps)

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
        if self.edge_steps is not None and not (isinstance(self.edge_steps, numbers.Integral)
                                                and not isinstance(self.edge_steps, bool)
                                                and self.edge_steps >= self.max_steps):
            raise ValueError(f"edge_steps is a number of minibatches >= max_steps ({self.max_steps}; equal: a window "
                             f"at the budget's edge is not measured longer), or None for {EDGE_FACTOR} x max_steps; got "
                             f"{self.edge_steps!r}")
        if not (self.settle_block_s > 0 and math.isfinite(self.settle_block_s)) or not (self.settle_rel > 0):
            raise ValueError(f"settle_block_s and settle_rel must be > 0, got {self.settle_block_s!r}, "
                             f"{self.settle_rel!r}")


@dataclass
class ProfileWindow:
    """A window in progress: the mode, when it was switched to, the discarded and the measured steps.

    ``settle_s``: the fixed settling time or, when settling is detected (``spec.settle_s`` None), the most it
    may take."""

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
    remeasured: int = 0  # steps whose readings were partial or rejected: dropped, the next step measures again
    partial: int = 0  # such steps kept anyway (after max_steps of them): the profile is labelled partial
    settled_after_s: float | None = None  # when the power was found settled (seconds after the switch)
    settling_steps: int = 0  # discarded because the power was still settling (the rest: warm-up)
    foreign: int = 0  # steps measured in another mode (the board moved: a cap, another tool): not the window's
    reswitched: int = 0  # times the tuner switched back to the window's mode after such a move
    _trace: list = field(default_factory=list)  # (start after the switch, time, power) of the discarded steps
    edge_w: float | None = None  # the power budget the profile is checked against: near it, the window goes on
    _edge_seen: bool = field(default=False, repr=False)

    def feed(self, t_end_s: float, time_s: float, power_w: float, trusted: bool = True) -> bool:
        """Add a step; True when the step was measured (not discarded). A step whose power rests on partial or
        rejected readings (``trusted=False``) is re-measured by the next step, up to ``max_steps`` times; after
        that it is kept, and the profile (:meth:`result`) is untrusted: labelled ``(partial)``, with no power, so
        it never decides (the strategy leaves the mode out)."""
        if not math.isfinite(power_w):
            trusted = False
        self.cost_s += time_s
        self.cost_j += time_s * power_w if math.isfinite(power_w) else 0.0
        since = (t_end_s - time_s) - self.switched_s
        if self.settled_after_s is None:
            if self.spec.settle_s is None:  # detected on the readings
                if math.isfinite(power_w):  # an unreadable step says nothing about settling
                    self._trace.append((since, time_s, power_w))
                settling = since < self.settle_s and not self._settled()
            else:
                settling = since < self.settle_s
            if not settling:
                self.settled_after_s = max(since, 0.0)
        settling = self.settled_after_s is None
        # the step cap never cuts the device's settling time short: minibatches of a few ms would otherwise end it
        # within one time constant and the window would read the power still rising (or falling) to the mode's
        if (settling or self.discarded < self.spec.warmup_steps) and (self.discarded < self.spec.max_settle_steps
                                                                      or since < self.settle_s):
            self.discarded += 1
            self.settling_steps += int(settling)
            return False
        if not trusted:
            if self.remeasured < self.spec.max_steps:
                self.remeasured += 1
                return False
            self.partial += 1
        self.times.append(time_s)
        self.powers.append(power_w)
        return True

    def _settled(self) -> bool:
        """The power trace since the switch has stopped moving: the last two blocks of ``settle_block_s``
        (>= 3 minibatches each) agree within ``settle_rel`` plus twice the standard error of their difference."""
        blocks = []
        end = len(self._trace)
        for _ in range(2):
            dur, start = 0.0, end
            while start > 0 and (dur < self.spec.settle_block_s or end - start < 3):
                start -= 1
                dur += self._trace[start][1]
            if dur < self.spec.settle_block_s or end - start < 3:
                return False
            blocks.append(np.asarray(self._trace[start:end], dtype=float))
            end = start
        means, var = [], 0.0
        for b in blocks:
            t, p = b[:, 1], b[:, 2]
            means.append(float((t * p).sum() / t.sum()))
            var += float(p.var(ddof=1) / len(p)) if len(p) > 1 else math.inf
        return abs(means[0] - means[1]) <= self.spec.settle_rel * means[0] + 2.0 * math.sqrt(var)

    @property
    def n(self) -> int:
        return len(self.times)

    def _rel_sem(self, x: np.ndarray) -> float:
        if len(x) < 2 or x.mean() <= 0:
            return math.inf
        return float(x.std(ddof=1) / math.sqrt(len(x)) / x.mean())

    def _power_mean(self) -> float:
        t, p = np.asarray(self.times), np.asarray(self.powers)
        return float((t * p).sum() / t.sum())

    def at_edge(self) -> bool:
        """The mean power so far is within :data:`EDGE_Z` standard errors of ``edge_w`` (the power budget): which
        side of it the mode is on is not known yet."""
        if self.edge_w is None or self.partial or not all(map(math.isfinite, self.powers)):
            return False
        se = self._power_sem()
        mean = self._power_mean()
        return not math.isfinite(se) or abs(mean - self.edge_w) < EDGE_Z * max(se, SEM_FLOOR) * mean

    def _power_sem(self) -> float:
        """The mean power's relative standard error from the steps' scatter, widened for few steps
        (:func:`~lightning_edge.tuning.prior.widened_sem`): what the budget's edge and the guard are judged on."""
        return widened_sem(self._rel_sem(np.asarray(self.powers)), self.n)

    @property
    def complete(self) -> bool:
        if self.n >= self.spec.edge_max_steps:
            return True
        if self.n >= self.spec.max_steps:
            # past max_steps only at doublings of it (80, 160, 320, ... for 40): a window that looked at every step
            # would stop the first time its mean wandered EDGE_Z standard errors off the budget, by chance as often as
            # not (optional stopping: transfer seed 7 took a mode 0.05 % over the budget on such a stop)
            k = self.n / self.spec.max_steps
            return k == 2 ** int(math.log2(k)) and not self.at_edge()
        if self.n < self.spec.min_steps:
            return False
        t, p = np.asarray(self.times), np.asarray(self.powers)
        if not (self._rel_sem(t) <= self.spec.rel_sem and self._rel_sem(p) <= self.spec.rel_sem):
            return False
        # once at the edge, a window goes on to max_steps: no stop on a chance excursion before it either
        self._edge_seen = self._edge_seen or self.at_edge()
        return not self._edge_seen

    def result(self, label: str) -> Measurement:
        t = np.asarray(self.times)
        if self.partial:
            # built on readings that missed a rail or had one rejected (a rail unplugged, labels swapped): the power
            # is not the board's. Never a number a budget is checked against: no power, untrusted, labelled so (the
            # strategy leaves the mode out; the store keeps the row's label and measures it again next time)
            return Measurement(float(t.mean()), math.nan, f"{label} (partial)", trusted=False)
        se = self._power_sem()
        return Measurement(float(t.mean()), self._power_mean(), label, power_rel_sem=se if math.isfinite(se) else None)


# ============================================================================================ the engine
class _OnlineWorkload:
    """What the strategy's thread profiles: ``train(mode)`` hands the mode to the training thread and waits."""

    def __init__(self, tuner: OnlineTuner, fingerprint: str, device_model: str) -> None:
        self.tuner = tuner
        self.fingerprint = fingerprint
        self.device_model = device_model
        self.cancel = threading.Event()

    def train(self, mode: PowerMode) -> Measurement:
        return self.tuner._request(mode)

    def infer(self, mode: PowerMode, batch_size: int) -> Measurement:
        raise TypeError("the power-mode tuner profiles training minibatches only: use a TrainingProblem "
                        "(inference batch size and latency: lightning_edge.serving)")

    # --- the store: waiting for other processes' profiles is cancellable and reported
    def check_cancelled(self) -> None:
        if self.cancel.is_set():
            raise TuningCancelled("the tuner was closed while waiting for another process's profile")

    def on_store_wait(self, message: str) -> None:
        print(f"lightning_edge PowerModeTuner: {message}", file=sys.stderr, flush=True)  # a person is waiting
        self.tuner.emit(Event.WAIT, {"message": message})


_DONE = object()
_CANCEL = object()
_STOP = object()


class OnlineTuner:
    """Profiles modes on the training loop's own minibatches, drives a strategy, trains on in the chosen mode.

    Args:
        problem: a :class:`TrainingProblem` (or a power budget in W).
        controller: the board's mode controller (``apply``/``current``/``restore``; writable).
        meter: a :class:`~lightning_edge.devices.meter.StepMeter` (``board.meter()``: ``SensorMeter`` with a sensor,
            ``TwinMeter`` on the twin).
        strategy: a name registered in :data:`~lightning_edge.tuning.search.STRATEGIES` (``"gmd"``, the default;
            ``"als"``; the baselines) or a :class:`~lightning_edge.tuning.search.Strategy`.
        space: the modes to search (default: :func:`lightning_edge.catalog.tuning_space` of the controller's: Fulcrum's
            441 modes on an Orin AGX, else the board's whole space).
        store: the profile store (``"default"``: SQLite in the user cache directory; a URL such as
            ``postgresql://...`` for a fleet; ``None``: in memory, nothing kept).
        fingerprint: the workload key in the store (set by :meth:`bind` from the module and batch if not given).
        device_model: the board key in the store (default: ``sim:orin-agx`` for the twin, else the controller's
            space name, e.g. ``orin-agx``).
        window: a :class:`WindowSpec`.
        switch_at: ``"window"`` (switch between profiling windows, the default) or ``"epoch"`` (one profile per
            epoch: a new mode is applied only at an epoch boundary).
        baseline: compare the chosen mode with MAXN in the summary, from MAXN's profile in the store or, without
            one, the prior's prediction corrected by this run's profiles (labelled so); MAXN is never run for it.
        drift_window, drift_tolerance, drift_patience: power-drift detection in the chosen mode (see module doc);
            ``drift_window=0`` turns it off.
        on_event: ``f(kind, info: dict)`` for ``"profile"``, ``"solution"``, ``"infeasible"``, ``"retune"``,
            ``"drift"``, ``"restore"`` (the callback logs them).
        prior: ``"auto"`` (default): on the twin, GMD and ALS start from the predicted time and power of every mode
            (:mod:`lightning_edge.tuning.prior`: the uncalibrated twin model of the module's ``analyze`` cost,
            not the simulated truth), built after the first minibatch (which shows the module's input shapes) and
            so applied from the second; on a real Orin AGX the calibrated twin's model of the module given to
            :meth:`bind_model`; elsewhere none (the summary says why). A
            :class:`~lightning_edge.tuning.prior.Prior`: that one. ``None``/``False``: no prior.
        thorough: with a prior, GMD goes on with Algorithm 1 after its prior profiles (at most 4 + 10 profiles;
            the answer is the best of everything profiled): worth it in a long run, where a mode a few percent
            slower costs more than the profiles. ``PowerModeTuner`` sets it when the Trainer plans at least
            ``THOROUGH_AFTER_STEPS`` minibatches.
        short_run: the run is planned shorter than ``THOROUGH_AFTER_STEPS`` minibatches: a prior-guided GMD stops at
            its prior profiles (``GMD(extra_profiles=0)``: a window there can cost hundreds of its minibatches in
            settling alone) and a window at the budget's edge is not measured longer (``WindowSpec.edge_steps``,
            unless given). ``PowerModeTuner`` sets it when the Trainer says so.
        planned_steps: the minibatches the run plans (``None``: not known). A profile that would not finish before
            them (this run's windows took more minibatches on average than are left) is not started: the strategy
            answers with the best mode profiled (``progress().stopped`` says so). ``PowerModeTuner`` passes the
            Trainer's.
    """

    def __init__(self, problem: TrainingProblem | float, controller: ModeController, meter: StepMeter, *,
                 strategy: str | Strategy = "gmd", space: PowerModeSpace | None = None, store: StoreSpec = "default",
                 fingerprint: str | None = None,
                 device_model: str | None = None, window: WindowSpec | None = None, switch_at: str = "window",
                 baseline: bool = True, drift_window: int = 20, drift_tolerance: float = 0.03,
                 drift_patience: int = 2, on_event: Callable[[str, dict], None] | None = None,
                 wait_timeout_s: float = 600.0, prior: Prior | str | bool | None = "auto",
                 thorough: bool = False, short_run: bool = False, planned_steps: int | None = None) -> None:
        if not isinstance(problem, TrainingProblem):
            problem = TrainingProblem(float(problem))
        if switch_at not in ("window", "epoch"):
            raise ValueError(f"switch_at must be 'window' (between profiling windows) or 'epoch', got {switch_at!r}")
        if drift_window < 0 or drift_patience < 1 or not drift_tolerance >= 0:
            raise ValueError("need drift_window >= 0 (0: off), drift_patience >= 1 and drift_tolerance >= 0")
        if getattr(meter, "has_power", True) is False:
            raise ValueError(
                f"the power-mode tuner needs a power sensor, and {getattr(meter.sensor, 'name', meter.sensor)!r} is "
                f"not one ({meter.why_no_power}); on a Jetson run as a user who can read the INA3221 hwmon files, "
                "or use device='sim:orin-agx' for the twin")
        self.problem = problem
        self.controller = controller
        self.meter = meter
        self.strategy = strategy_named(strategy)
        if space is None:
            space = catalog.tuning_space(controller.space)
        self.space = space
        # opened now: a store that cannot be used fails before training; None: in memory, but shared by every solve
        # of this tuner (re-tunes reuse it)
        self.store = open_backend(store)
        self.interrupted: Callable[[], bool] | None = None  # e.g. "the Trainer got SIGTERM": stop waiting
        self.fingerprint = fingerprint
        self.device_model = device_model or store_key_for(controller, meter.twin if isinstance(meter, TwinMeter)
                                                          else None, simulated=_on_twin(meter))
        self.window_spec = window or WindowSpec()
        self.switch_at = switch_at
        self.baseline = bool(baseline)
        self.drift_window = int(drift_window)
        self.drift_tolerance = float(drift_tolerance)
        self.drift_patience = int(drift_patience)
        self.on_event = on_event
        self.wait_timeout_s = float(wait_timeout_s)
        if prior is True:
            prior = "auto"
        if not (prior in (None, False, "auto") or hasattr(prior, "corrected")):
            raise ValueError(f"prior: expected 'auto', None or a lightning_edge.tuning.prior.Prior, got {prior!r}")
        self.prior_setting = prior or None
        self.thorough = bool(thorough)
        self.short_run = bool(short_run)
        if planned_steps is not None and not (isinstance(planned_steps, numbers.Integral)
                                              and not isinstance(planned_steps, bool) and planned_steps >= 0):
            raise ValueError(f"planned_steps is the run's number of minibatches (an int >= 0) or None, got "
                             f"{planned_steps!r}")
        self.planned_steps = None if planned_steps is None else int(planned_steps)
        self.stopped_note: str | None = None
        self.prior: Prior | None = None
        self.prior_note: str | None = None  # why there is no prior, when there is none
        self.prior_time_s = 0.0
        self.planned_profiles = 0  # the strategy's profiles of the current solve (+ MAXN), an upper bound
        self.tuned_at_step: int | None = None  # the first step trained in the chosen mode (end of tuning)
        self._launch_pending = False
        self._model: tuple | None = None

        self.phase = Phase.WAITING
        self.original_mode: PowerMode | None = None
        self.solution: Solution | None = None
        self.result: SearchResult | None = None
        self.baseline_profile: Measurement | None = None  # MAXN's figure (never run): stored, or the prior's
        self.baseline_source: str | None = None
        self.profiles: list[dict] = []  # every window measured in this run
        self._run_strategy: Any = None  # the strategy of the search running or last run (with its prior)
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
        self._epoch_boundary = True
        self._drift_hits = 0
        self._closed = False
        self.started = False
        self._restored: AppliedMode | None = None
        self._switched_s = -math.inf
        self._drift_buf: list[StepRecord] = []
        self._quality_retuned = False  # re-tuned on partial readings in the chosen mode (once per episode)
        self._known: dict[Point, Result] = {}  # every point any solve of this tuner profiled or found in the store

    # ------------------------------------------------------------------ lifecycle
    @property
    def label(self) -> str:
        return self.meter.label

    def bind(self, fingerprint: str) -> None:
        if not self.fingerprint:
            self.fingerprint = fingerprint

    def start(self) -> None:
        """Record the original mode and start the strategy (needs :attr:`fingerprint` for a persistent store)."""
        if self.started:
            return
        if not isinstance(self.store, MemoryStore) and not self.fingerprint:
            raise ValueError("OnlineTuner.start(): the workload has no fingerprint yet; call bind(fingerprint) "
                             "(the callback derives it from the module and the first batch)")
        self.started = True
        self.original_mode = self.controller.current()
        self.meter.open()
        if not self._make_prior():
            self._launch_pending = True  # the prior needs the module's inputs: launched after the first step
            return
        self._launch(self.problem, reason="start")

    def _make_prior(self) -> bool:
        """Build the prior if one is wanted; False while it cannot be built yet (the twin's model of the module
        exists after the first step)."""
        setting = self.prior_setting
        if setting is None:
            self.prior_note = "no prior (turned off)"
            return True
        if not hasattr(self.strategy, "with_prior"):
            self.prior_note = f"no prior ({self.strategy.name} takes none)"
            return True
        if setting != "auto":
            self.prior = setting
            return True
        if not _on_twin(self.meter):
            return self._make_board_prior()
        if not self.meter.bound:
            return False
        return self._build_prior(lambda: self.meter.workload, simulated=True)

    def bind_model(self, module: nn.Module | ModelCost, example_inputs: Any = None, *,
                   batch_size: int | None = None) -> None:
        """The module and one minibatch of its forward inputs, or the training step's captured
        :class:`~lightning_edge.cost.ModelCost` and its batch size (what ``PowerModeTuner`` passes), for the prior
        on a real Orin AGX (the twin's calibrated model of that cost). Call before :meth:`start`; the twin's meter
        needs none."""
        self._model = (module, example_inputs, batch_size)

    @property
    def wants_board_prior(self) -> bool:
        """A real catalogued board (the AGX Orin: the papers' twin; another module: its calibrated board file, else its
        extrapolated one) with the prior on: the prior needs the module's cost (:meth:`bind_model`) before
        :meth:`start`."""
        return self.prior_setting == "auto" and not _on_twin(self.meter) and _has_model(self.controller)

    def _make_board_prior(self) -> bool:
        if not _has_model(self.controller):
            name = self.space.name
            self.prior_note = (f"no prior: no device model for {name} (give one: prior=prior_from_rooflines(cost, "
                               "space, a device profile's rooflines))")
            return True
        if self._model is None:
            self.prior_note = "no prior: the module's inputs were not given (OnlineTuner.bind_model)"
            return True
        from lightning_edge.twin.board_files import board_model
        from lightning_edge.twin.model import OrinTwin
        from lightning_edge.twin.sim_workload import SimWorkload

        # the board's calibrated file when one is installed (lightning-edge calibrate), else its catalogue board
        model = board_model(self.controller.space.name)
        module, inputs, batch_size = self._model
        return self._build_prior(lambda: SimWorkload(
            module, OrinTwin(board=model, space=self.space, settling=False), example_inputs=inputs,
            noise=False, train_batch_size=batch_size), simulated=False, board=model)

    def _build_prior(self, workload: Callable[[], SimWorkload], simulated: bool, board: BoardFile | None = None) -> bool:
        """The twin model's prior of ``workload()`` (timed); a failure goes to ``prior_note``."""
        from lightning_edge.tuning.prior import prior_for_twin

        t0 = time.perf_counter()
        try:
            self.prior = prior_for_twin(workload(), self.space, simulated=simulated, board=board)
        except Exception as exc:  # noqa: BLE001 - a prior is an aid: tune without it, and say why
            self.prior_note = f"no prior: the model of this workload failed ({type(exc).__name__}: {exc})"
        self.prior_time_s = time.perf_counter() - t0
        return True

    def _try_launch(self) -> None:
        if self._launch_pending and self._make_prior():
            self._launch_pending = False
            self._launch(self.problem, reason="start")

    def _launch(self, problem: TrainingProblem, reason: str) -> None:
        self._requests = queue.Queue()
        self._replies = queue.Queue()
        self._workload = workload = _OnlineWorkload(self, self.fingerprint or "online", self.device_model)
        scaled = TrainingProblem(self._solve_budget_w(problem.power_budget_w))
        self.stopped_note = None  # this search's own, if it stops
        self.phase = Phase.WAITING
        strategy = self.strategy
        if self.prior is not None and hasattr(strategy, "with_prior"):
            prior = self.prior
            if self._known:  # a re-tune: everything profiled so far corrects the prediction too
                seen = {}
                for point, m in self._known.items():
                    if point.kind == "train" and _in_space(self.space, point.mode) and \
                            m.trusted and math.isfinite(m.power_w):
                        seen[self.space.index(self.space.coerce(point.mode))] = (m.time_s, m.power_w)
                prior = prior.with_measured(seen)
            strategy = strategy.with_prior(prior, self.thorough)
            if self.short_run and isinstance(strategy, GMD):
                strategy.extra_profiles = 0  # a copy (with_prior)
        self.planned_profiles = _planned(strategy, scaled, self.space, self.prior)
        self._run_strategy = strategy  # its guard holds the history too (_finish)

        def work() -> None:
            try:
                res = strategy.run(scaled, self.space, workload, store=self.store,
                                   workload_id=self.fingerprint, device_model=self.device_model)
                self._requests.put((_DONE, (res, reason)))
            except TuningCancelled:
                self._requests.put((_CANCEL, None))
            except BaseException as exc:  # noqa: BLE001 - handed to the training thread
                self._requests.put((_CANCEL, exc))

        self._thread = threading.Thread(target=work, name="lightning-edge-tuner", daemon=True)
        self._thread.start()

    def _solve_budget_w(self, budget_w: float) -> float:
        """The budget the strategy solves for: the user's, divided by the drift factor (no margin for a profile's
        noise: 1 or 2 % of margin made the chosen modes 3-5 % slower at the median, BENCHMARKS.md; a chosen mode may
        so draw up to a profile's error over the budget, within the measurement tolerance of the drift check)."""
        return budget_w / self.drift_scale

    def _baseline(self) -> tuple[Measurement | None, str | None]:
        """MAXN's figure for the summary's comparison, never run (MAXN is over most budgets): its profile in the
        store (one another run measured), else the prior's prediction corrected by this run's profiles."""
        maxn = PowerMode(*(self.space.values(k)[-1] for k in KNOBS))  # every knob at its top: MAXN
        try:
            src = self.store.profiles(self._workload, workload_id=self.fingerprint, device_model=self.device_model)
            hit = src.lookup(ProfileKey("train", maxn, None))
        except Exception:  # noqa: BLE001 - a store that cannot say: the prior's figure, or none
            hit = None
        if hit is not None:
            return hit, "a stored profile"
        if self.prior is None or not _in_space(self.space, maxn):
            return None, None
        seen = {self.space.index(self.space.coerce(p.mode)): (m.time_s, m.power_w) for p, m in self._known.items()
                if p.kind == "train" and _in_space(self.space, p.mode)}
        t, pw = self.prior.corrected(seen)
        i = self.space.index(maxn)
        how = "the prior's prediction" + (", corrected by this run's profiles" if seen else "")
        return Measurement(float(t[i]), float(pw[i]), "estimated", mode=maxn), f"{how} ({self.prior.source})"

    # the strategy thread ----------------------------------------------------------
    def _request(self, mode: PowerMode) -> Measurement:
        self._requests.put(("profile", mode))
        reply = self._replies.get()
        if reply is _CANCEL:
            raise TuningCancelled(f"the tuner was closed while waiting for the profile of {mode}")
        if reply is _STOP:
            raise ProfilingStopped(f"the run ends before a window of {mode} would")
        return reply

    # the training thread ----------------------------------------------------------
    def epoch_boundary(self) -> None:
        """Tell the tuner an epoch ended (with ``switch_at="epoch"`` modes change only here)."""
        self._epoch_boundary = True

    def before_step(self) -> None:
        """Call before each training step: takes the strategy's next request or answer, switches modes."""
        if self._closed or not self.started:
            return
        if self._launch_pending:  # the first step, before the strategy can start: trained in the current mode
            self.meter.start()
            return
        if self._window is None and self._pending_mode is None and self.phase in ("waiting",):
            self._poll(block=True)
        if self._pending_mode is not None and (self.switch_at == "window" or self._epoch_boundary):
            win = self._window
            if win is not None and win.foreign:
                win.reswitched += 1
                if win.reswitched > MAX_RESWITCHES:
                    raise RuntimeError(
                        f"the board does not stay in {win.mode}: it moved to {self.controller.current()} "
                        f"{win.reswitched} times during that mode's profiling window (a thermal or power cap, "
                        "nvpmodel, or another tool switching modes). Stop what else changes the power mode, or tune "
                        "a space without that mode.")
            self._switch(self._pending_mode)
            self._pending_mode = None
            if self._window is not None:
                self._window.switched_s = self.meter.now_s()
        self._epoch_boundary = False
        self.meter.start()

    def _poll(self, block: bool) -> None:
        # the store bounds (and reports) its own waits for other processes; this bounds a stuck strategy
        deadline = time.monotonic() + self.wait_timeout_s + float(getattr(self.store, "wait_timeout_s", 0.0))
        while True:  # in short slices: Ctrl-C and a SIGTERM seen by the caller end the wait at once
            try:
                what, payload = self._requests.get(timeout=0.2 if block else 0)
                break
            except queue.Empty:
                if not block:
                    return
                if self.interrupted is not None and self.interrupted():
                    raise TuningInterrupted("stopped while waiting for the tuning strategy (a termination signal); "
                                            "the board is restored and the profiles kept in the store") from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the tuning strategy gave no request for {self.wait_timeout_s:.0f} s "
                                       "(waiting for another process's profiles?)") from None
        if what == "profile":
            if self._no_time_for_a_window():
                self._replies.put(_STOP)  # the strategy answers with what it profiled
                self._poll(block=True)
                return
            self._open_window(payload, "strategy")
        elif what is _DONE:
            self._finish(*payload)
        elif what is _CANCEL:
            self.phase = Phase.CLOSED if payload is None else Phase.FAILED
            if payload is not None:
                self.error = payload
                raise RuntimeError(f"power-mode tuning failed: {payload}") from payload

    def _no_time_for_a_window(self) -> bool:
        """The run ends (``planned_steps``) before one more window would: this run's windows took more minibatches
        on average (settling, warm-up, measured) than are left. Never before this run's first window."""
        if self.planned_steps is None or not self.profiles:
            return False
        left = self.planned_steps - self.step
        per = self.progress().minibatches_per_profile
        if left >= per:
            return False
        self.stopped_note = (f"profiling stopped at minibatch {self.step}: {max(left, 0)} left in the run, one profile "
                             f"takes about {per:.0f}; the answer comes from the profiles done")
        return True

    def _window_spec(self) -> WindowSpec:
        """The windows' spec; in a short run (``short_run``) a window at the budget's edge is not measured longer
        unless ``edge_steps`` was given: there every window's minibatches are a share of the run; and never past the
        run's planned end (``planned_steps``, less this run's settling and warm-up per window)."""
        spec = self.window_spec
        if self.short_run and spec.edge_steps is None:
            return replace(spec, edge_steps=spec.max_steps)
        if self.planned_steps is not None and self.profiles:  # never measured past the run's end
            p = self.progress()
            left = int(self.planned_steps - self.step - p.settle_steps - p.warmup_steps)
            if left < spec.edge_max_steps:
                return replace(spec, edge_steps=max(spec.max_steps, left))
        return spec

    def _open_window(self, mode: PowerMode, reason: str) -> None:
        idx = len(self.profiles)
        self._window = ProfileWindow(idx, self.space.coerce(mode) if _in_space(self.space, mode) else mode,
                                     self.meter.now_s(), self._settle_s(), self._window_spec(), reason,
                                     edge_w=self._solve_budget_w(self.problem.power_budget_w))
        self.phase = Phase.PROFILING
        self._pending_mode = self._window.mode

    def _switch(self, mode: PowerMode) -> None:
        if self.controller.current() != mode:
            try:
                self.controller.apply(mode)
            except BoardReleasedError as exc:  # a termination signal put the board back: tuning ends here
                self._window = None
                self._pending_mode = None
                self.error = exc
                self.close(reason=f"released: {self.controller.released}")
                return
            self.meter.mode_changed(mode)
            self._switched_s = self.meter.now_s()

    def _settle_s(self) -> float:
        settle = self.window_spec.settle_s
        return float(getattr(self.meter, "settle_s", JETSON_SETTLE_S)) if settle is None else settle

    def after_step(self, reading: Measurement | None = None) -> StepRecord | None:
        """Call after each training step: measures it (or takes ``reading``, the step as another component measured
        it: the profiler of the same Trainer, from the same meter), feeds the window, hands finished profiles back."""
        if self._closed or not self.started:
            return None
        mode = self.controller.current()
        given = reading is not None
        if reading is None:
            reading = self.meter.stop(mode)
        dt, power = reading.time_s, reading.power_w
        end_s = self.meter.now_s()
        after_switch = end_s - dt - self._switched_s >= self._settle_s()
        # the step's one record: a given one as it is (whoever measured it said whether its power had settled); the
        # meter's own, settled only when not within the settling time of the tuner's last switch either
        m = reading if given or reading.settled == (reading.settled and after_switch) else \
            reading.scaled(settled=False)
        step = self.step
        self.step += 1
        win = self._window
        window, discarded = None, False
        if win is not None and self._pending_mode is None:
            window = win.index
            if mode != win.mode:
                # measured in another mode than the window's (something else moved the board): never fed to the
                # window, whose profile would hold another mode's numbers; switched back at the next step
                discarded = True
                win.foreign += 1
                self._pending_mode = win.mode
            else:
                discarded = not win.feed(end_s, dt, power, trusted=reading.trusted)
        rec = StepRecord(step, m, str(self.phase), window, discarded)
        if win is not None and window is not None and not discarded and win.complete:
            self._close_window(win)
        elif window is None and self.phase in ("tuned", "infeasible") and after_switch:
            self._check_drift(rec)  # only settled steps: the power after a switch is still moving
        if self.tuned_at_step is None and self.phase in ("tuned", "infeasible") and self._pending_mode is None:
            self.tuned_at_step = rec.step
        self.records.append(rec)
        if self._launch_pending:
            self._try_launch()
        return rec

    def _close_window(self, win: ProfileWindow) -> None:
        m = win.result(self.label)
        info = {"index": win.index, "mode": win.mode, "time_s": m.time_s, "power_w": m.power_w, "label": m.label,
                "steps": win.n, "discarded": win.discarded, "settling_steps": win.settling_steps,
                "settled_after_s": win.settled_after_s, "cost_s": win.cost_s, "cost_j": win.cost_j,
                "remeasured": win.remeasured, "partial_steps": win.partial, "foreign_steps": win.foreign,
                "reason": win.reason, "within_budget": m.power_w <= self.problem.power_budget_w,
                "trusted": m.trusted, "power_rel_sem": m.power_rel_sem}
        self.profiles.append(info)
        self._window = None
        self.emit(Event.PROFILE, info)
        self.phase = Phase.WAITING
        self._replies.put(m)

    def _finish(self, res: SearchResult, reason: str) -> None:
        self.result = res
        self._known.update(res.results)
        if self.baseline:
            self.baseline_profile, self.baseline_source = self._baseline()
        sol = res.solution
        if reason != "start" and self._known:
            # a re-tune: every mode profiled so far is a candidate too (Fulcrum 5.4 reuses its history)
            budget = self._solve_budget_w(self.problem.power_budget_w)
            known = self._known
            run = self._run_strategy
            if getattr(run, "prior", None) is not None and hasattr(run, "power_guard"):
                # held to the guard the search's own answer is held to (GMD.answer): a stored reading just under
                # the new budget is as likely as not to be under it by chance
                known = {p: m for p, m in known.items() if is_within(m, budget, run.power_guard)}
            table = ProfileTable.from_results("train", known, strategy=f"{res.solution.strategy if sol else ''}"
                                              "+history", profiles_used=res.profiles_used)
            hist = table.solve(TrainingProblem(budget)) if len(table) else None
            if hist is not None and (sol is None or hist.time_s < sol.time_s):
                sol = hist
        if sol is None:
            self.solution = None
            fallback = self._lowest_power_mode(res)
            self.phase = Phase.INFEASIBLE
            self.emit(Event.INFEASIBLE, {"reason": reason, "mode": fallback, "budget_w": self.problem.power_budget_w})
            if fallback is not None:
                self._pending_mode = fallback
        else:
            self.solution = sol
            self.phase = Phase.TUNED
            self._pending_mode = sol.mode
            self.emit(Event.SOLUTION, {"reason": reason, "solution": sol, "budget_w": self.problem.power_budget_w,
                                    "drift_scale": self.drift_scale})
        self._drift_hits = 0
        self._drift_buf = []

    @staticmethod
    def _lowest_power_mode(res: SearchResult) -> PowerMode | None:
        results = [(k, m) for k, m in res.results.items() if m.trusted and math.isfinite(m.power_w)]
        best = min(results, key=lambda item: item[1].power_w, default=None)
        return None if best is None else best[0].mode

    # ------------------------------------------------------------------ re-tuning
    def set_power_budget(self, power_budget_w: float) -> None:
        """Change the budget: solves again at the next step boundary (stored profiles cost nothing)."""
        new = TrainingProblem(float(power_budget_w))
        old = self.problem.power_budget_w
        self.problem = new
        if self.started and not self._closed:
            self._retune(Event.RETUNE, {"reason": "budget", "from_w": old, "to_w": new.power_budget_w})

    def _retune(self, event: Event, info: dict) -> None:
        """Stop the strategy and solve again for :attr:`problem` (``info["reason"]``: budget, drift)."""
        self._cancel_thread()
        self._window = None
        self._pending_mode = None
        self.retunes.append({"step": self.step, **info})
        self.emit(event, info)
        self._launch(self.problem, reason=info["reason"])

    def _check_drift(self, rec: StepRecord) -> None:
        n = self.drift_window
        if n <= 0 or self._pending_mode is not None:
            return
        self._drift_buf.append(rec)
        if len(self._drift_buf) < n:
            return
        recent, self._drift_buf = self._drift_buf, []
        budget = self.problem.power_budget_w
        good = [r for r in recent if r.trusted]
        if len(good) * 2 < len(recent):
            # the readings in the chosen mode turned partial (a rail unplugged, relabelled): its power can no longer be
            # checked against the budget, and a partial reading would always look within it. Re-tuned once per such
            # episode: what is measured from now on is checked again (an untrusted profile never decides)
            self._drift_hits = 0
            if not self._quality_retuned:
                self._quality_retuned = True
                info = {"reason": "drift", "quality": "partial", "mode": rec.mode, "budget_w": budget,
                        "untrusted_steps": len(recent) - len(good), "steps": len(recent),
                        "scale": self.drift_scale}
                self._retune(Event.DRIFT, info)
            return
        self._quality_retuned = False
        recent = good
        t = np.array([r.time_s for r in recent])
        p = np.array([r.power_w for r in recent])
        mean_p = float((t * p).sum() / t.sum())
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
        self._retune(Event.DRIFT, info)

    # ------------------------------------------------------------------ ending
    def _cancel_thread(self) -> None:
        th = self._thread
        if th is None:
            return
        self._replies.put(_CANCEL)
        self._workload.cancel.set()  # set with the thread, by _launch
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
                if self.started:
                    # never a new session here: a board found out of its original mode with nothing to restore was
                    # put back on a signal (the controller is released) or changed by someone else; a "rescue" by
                    # apply(original) would snapshot that mode and "restore" it at exit
                    restored = self.controller.restore()
                    self._say_where_the_board_is(restored)
                self._restored = restored
                self.phase = Phase.CLOSED
                self.emit(Event.RESTORE, {"reason": reason, "mode": self.original_mode})
        return self._restored

    def _say_where_the_board_is(self, restored: AppliedMode | None) -> None:
        if restored is not None or self.original_mode is None:
            return
        try:
            now = self.controller.current()
        except Exception:  # noqa: BLE001 - the board may not answer; the controller said so already
            return
        if now == self.original_mode:
            return
        why = self.controller.released
        cmd = self.controller.restore_command()
        warnings.warn(f"the board is in {now}, not in the mode found at start ({self.original_mode}), and this tuner "
                      f"has nothing to restore" + (f" (it was put back on {why})" if why else
                                                   " (another process changed it?)")
                      + f"; its state file, if any, is restored by: {cmd}", RuntimeWarning, stacklevel=3)

    def emit(self, kind: Event, info: dict) -> None:
        """Tell ``on_event`` (when given)."""
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

    def summary(self) -> TuningSummary:
        sol = self.solution
        tot = self.phase_totals()
        prof = tot.get("profiling", {})
        kw: dict[str, Any] = {}
        if sol is not None:
            kw.update(mode=str(sol.mode), time_s=sol.time_s, power_w=sol.power_w,
                      energy_per_step_j=sol.time_s * sol.power_w, throughput_steps_s=1.0 / sol.time_s)
        tuned = [r.m for r in self.records if r.window is None and r.phase in ("tuned", "infeasible")
                 and (sol is None or str(r.mode) == str(sol.mode))]
        if tuned:
            m, ok = settled(tuned)  # the mode's own figure: its settled steps (the settling after the switch apart)
            kw.update(measured_tuned_time_s=m.time_per_step_s, measured_tuned_steps=m.steps,
                      measured_tuned_power_w=m.power_w, measured_tuned_settled=ok)
        b = self.baseline_profile
        if sol is not None:
            kw.update(mode_label=str(sol.label or self.label))
        if b is not None and not (b.trusted and b.has_power):
            # MAXN's readings were partial: a full reading is never compared with a partial one
            kw.update(maxn_label=str(b.label))
            b = None
        if b is not None:
            kw.update(maxn_time_s=b.time_s, maxn_power_w=b.power_w, maxn_energy_per_step_j=b.time_s * b.power_w,
                      maxn_label=str(b.label), maxn_source=self.baseline_source)
            if sol is not None:
                kw.update(throughput_vs_maxn=b.time_s / sol.time_s,
                          energy_vs_maxn=(sol.time_s * sol.power_w) / (b.time_s * b.power_w))
        budget = self.problem.power_budget_w
        upto = self.tuned_at_step if self.tuned_at_step is not None else self.step
        tuning = [r.m for r in self.records if r.step < upto]
        if tuning:
            kw["over_budget"] = over_budget(tuning, budget, windows=sum(
                1 for p in self.profiles if not p.get("resumed") and p["power_w"] > budget))
        began = next((r.step for r in self.records if r.window is not None), None)
        if began is not None:
            maxn = PowerMode(*(self.space.values(k)[-1] for k in KNOBS))
            kw["maxn_steps"] = sum(1 for r in self.records if r.step >= began and str(r.mode) == str(maxn))
        return TuningSummary(
            label=self.label, budget_w=budget, phase=str(self.phase),
            strategy=self.strategy.name,
            original_mode=str(self.original_mode) if self.original_mode is not None else None,
            profiles_used=self.result.profiles_used if self.result is not None else 0,
            new_profiles=len([p for p in self.profiles if p["reason"] == "strategy" and not p.get("resumed")]),
            profiling_steps=int(prof.get("steps", 0)), profiling_time_s=float(prof.get("time_s", 0.0)),
            profiling_energy_j=float(prof.get("energy_j", 0.0)), retunes=len(self.retunes),
            drift_scale=self.drift_scale, fingerprint=self.fingerprint,
            device_model=None if self.device_model is None else str(self.device_model),
            progress=self.progress(), **kw)

    def progress(self) -> TuningProgress:
        """Where tuning stands (:class:`TuningProgress`); before any window, the minibatches per profile are
        estimated from the step times and the window settings."""
        done = len(self.profiles)
        finished = self.phase in ("tuned", "infeasible") or self.tuned_at_step is not None
        planned = done if finished else max(self.planned_profiles, done + (self._window is not None))
        spec = self.window_spec
        if self.profiles:
            settle = float(np.mean([p.get("settling_steps", 0) for p in self.profiles]))
            warm = float(np.mean([p["discarded"] - p.get("settling_steps", 0) for p in self.profiles]))
            meas = float(np.mean([p["steps"] for p in self.profiles]))
            estimated = False
        else:
            dts = [r.time_s for r in self.records[-50:]]
            mean_dt = float(np.mean(dts)) if dts else math.nan
            cap = self._settle_s()
            settle = float(math.ceil(cap / mean_dt)) if dts and cap > 0 else 0.0
            warm = float(max(spec.warmup_steps - settle, 0))
            meas = float(spec.min_steps)
            estimated = True
        per = settle + warm + meas
        more = 0
        if not finished:
            cur = self._window
            in_window = (cur.discarded + cur.n) if cur is not None else 0
            left = max(planned - done, 0)
            more = int(math.ceil(max(left * per - in_window, per - in_window if cur is not None else 0.0)))
            more += int(self._launch_pending)
        prior = self.prior.source if self.prior is not None else None
        return TuningProgress(done, int(planned), self.baseline, settle, warm, meas, per, estimated, int(more),
                              self.tuned_at_step, prior, None if prior else self.prior_note, self.prior_time_s,
                              self.stopped_note)

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        sol = self.solution
        return {"budget_w": self.problem.power_budget_w, "phase": str(self.phase), "fingerprint": self.fingerprint,
                "device_model": None if self.device_model is None else str(self.device_model),  # plain data
                "drift_scale": self.drift_scale,
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
        self.profiles = [{**p, "resumed": True} for p in state.get("profiles", [])]  # not measured by this run
        self.retunes = list(state.get("retunes", []))
        if isinstance(self.store, MemoryStore):  # an in-memory store starts empty: put the saved profiles back
            for p in self.profiles:
                if p.get("reason") == "strategy":
                    mode = self.space.coerce(p["mode"])
                    self.store.put(ProfileKey("train", mode, None),
                                   Measurement(float(p["time_s"]), float(p["power_w"]), str(p.get("label", "measured")),
                                               power_rel_sem=as_rel_sem(p.get("power_rel_sem"))))


# ============================================================================================ dry runs
def simulate_tuning(workload: SimWorkload, power_budget_w: float, *, strategy: str | Strategy = "gmd",
                    prior: Prior | str | bool | None = "auto",
                    window: WindowSpec | None = None, seed: int | None = 0, max_steps: int = 5000,
                    board: Board | None = None, short_run: bool = False) -> OnlineTuner:
    """Tune ``workload`` (a :class:`~lightning_edge.twin.sim_workload.SimWorkload`: a zoo name or a module with
    its inputs) on the simulated Orin (``board``, default the process's ``sim:orin-agx``) with nothing else running: the engine's steps until it trains in the chosen mode
    (or ``max_steps``), every step the twin's (simulated: noise, power settling), no real computation. Returns the
    closed tuner (``summary()``, ``tuned_at_step``, ``profiles``). For benchmarks and for comparing settings;
    ``short_run``: as ``OnlineTuner``'s (a run planned shorter than ``THOROUGH_AFTER_STEPS``)."""
    from lightning_edge.devices.board import get_board
    from lightning_edge.twin.sim_workload import SimWorkload

    opened = board is None
    board = get_board("sim:orin-agx", control="write", seed=seed) if opened else board
    train = SimWorkload(workload.model, board.twin, train_batch_size=workload.train_batch_size, seed=seed,
                        seq_len=workload.seq_len, precision=workload.precision, example_inputs=workload.example_inputs,
                        param_tensors=workload.param_tensors)
    meter = TwinMeter(board.twin, seed=seed, train=train)
    tuner = OnlineTuner(power_budget_w, board.controller, meter, strategy=strategy, store=None,
                        fingerprint=workload.fingerprint, window=window, prior=prior, short_run=short_run)
    try:
        tuner.start()
        while tuner.tuned_at_step is None and tuner.step < max_steps:
            tuner.before_step()
            tuner.after_step()
    finally:
        tuner.close()
        if opened:
            board.close()
    return tuner


# ============================================================================================ helpers
def _planned(strategy: Strategy, problem: Problem, space: PowerModeSpace, prior: Prior | None) -> int:
    """The most profiles the strategy takes for ``problem`` (with a prior: GMD's ``prior_profiles`` and
    ``extra_profiles``, plus Algorithm 1's when it goes on with it)."""
    if prior is not None and getattr(strategy, "prior", None) is not None and hasattr(strategy, "prior_profiles") \
            and not getattr(strategy, "prior_then_search", False):
        return int(strategy.prior_profiles) + int(getattr(strategy, "extra_profiles", 0))
    try:
        budget = strategy.budget(problem, space)
    except Exception:  # noqa: BLE001 - a strategy without a budget: nothing to plan with
        return 0
    return int(budget) if budget else 0


def _has_model(controller: ModeController) -> bool:
    """A real board the twin has a model of: a catalogued module (its calibrated file when one is installed, else
    the catalogue's board file: the papers' twin for the AGX Orin, an extrapolated one for the others)."""
    from lightning_edge import catalog

    return controller.space.name in catalog.BOARDS


def _in_space(space: PowerModeSpace, mode: ModeLike) -> bool:
    try:
        space.coerce(mode)
        return True
    except Exception:  # noqa: BLE001
        return False


def _on_twin(meter: StepMeter) -> bool:
    return bool(meter.simulated)
