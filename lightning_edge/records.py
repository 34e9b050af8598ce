"""One record of a window, at the ground floor: what every meter, tuner, twin, profiler and report means by "this
ran this long at this power". A window is a step (a minibatch), a profiling window of a tuner, a run of one power
mode, an epoch.

``Measurement(time_s, power_w, label="measured", trusted=True, mode=None, *, t0_ns=None, t1_ns=None,
host_time_s=None, steps=1, samples=None, readings=None, settled=True, power_rel_sem=None)``, immutable:

- ``time_s``: the window's time (s) on the device (the twin's when simulated); ``power_w``: its mean power (W);
  ``energy_j`` is their product;
- ``label``: how the numbers were obtained (:data:`LABELS`): ``measured`` (a real sensor or timer), ``apportioned``
  (a measured total split by a model), ``estimated`` (a model), ``simulated`` (the twin), ``extrapolated`` (the twin
  of a board extrapolated from another);
- ``trusted``: False when the power rests on partial or rejected readings (``partial`` is its inverse, one flag);
  only an untrusted measurement may have no power at all (``nan``); ``readings``: the sampler's reading quality
  over the window, when a sensor was read; ``settled``: False when the power was still moving from the level before
  a mode change (or from the idle board at the start) toward this mode's: such a window's power lies between two
  modes', and a figure of one mode leaves it out (:func:`settled`);
- ``mode``: the power mode it ran in (a :class:`~lightning_edge.modes.PowerMode`; a string in the mode notation is
  parsed), when known;
- ``t0_ns``, ``t1_ns``: the window on this machine's clock (``time.perf_counter_ns``), when it has one;
  ``host_time_s``: this machine's wall time of it (equal to ``time_s`` unless the numbers are simulated);
- ``steps``: the steps it covers (1 for a step), ``samples``: the samples they held;
- ``power_rel_sem``: the relative standard error of ``power_w`` from the scatter of the window's steps (a tuner's
  profile says it, widened for few steps: :func:`~lightning_edge.tuning.prior.widened_sem`; ``None``: not known,
  and :func:`merge` does not make one up).

:func:`merge` makes one window of several (sums: an epoch of its steps, a run of one mode); :func:`settled` is one
mode's figure (its settled windows merged); :func:`over_budget` says what ran over a power budget.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning_edge.devices.sampler import ReadingQuality
    from lightning_edge.modes import PowerMode

__all__ = ["Measurement", "LABELS", "merge", "settled", "over_budget", "OverBudget", "OVER_BLOCK", "OVER_TOLERANCE",
           "as_rel_sem"]

#: how a number was obtained
LABELS = ("measured", "apportioned", "estimated", "simulated", "extrapolated")


#: mode text -> its PowerMode (immutable): a run has a handful of modes, every step one
_PARSED: dict[str, PowerMode | str] = {}


def _mode(mode: PowerMode | str | None) -> PowerMode | str | None:
    """A mode as a :class:`~lightning_edge.modes.PowerMode` (a string in the notation parsed; anything else, such as
    a controller's own mode name, kept as it is)."""
    if mode is None or not isinstance(mode, str):
        return mode
    hit = _PARSED.get(mode)
    if hit is not None:
        return hit
    from lightning_edge.modes import PowerMode

    try:
        out: PowerMode | str = PowerMode.parse(mode)
    except Exception:  # noqa: BLE001 - a mode name outside the notation (NVML's, a fake's): kept as given
        out = mode
    if len(_PARSED) < 4096:
        _PARSED[mode] = out
    return out


@dataclass(frozen=True)
class Measurement:
    """One window (see the module docstring)."""

    time_s: float
    power_w: float
    label: str = "measured"
    trusted: bool = True
    mode: PowerMode | str | None = None
    t0_ns: int | None = None
    t1_ns: int | None = None
    host_time_s: float | None = None
    steps: int = 1
    samples: int | None = None
    readings: ReadingQuality | None = None
    settled: bool = True
    power_rel_sem: float | None = None

    def __post_init__(self) -> None:
        t, p = float(self.time_s), float(self.power_w)
        if not (math.isfinite(t) and t > 0):
            raise ValueError(f"Measurement.time_s must be a finite time > 0 s, got {self.time_s!r}")
        if not (math.isfinite(p) and p >= 0) and not (math.isnan(p) and not self.trusted):
            raise ValueError(f"Measurement.power_w must be a finite power >= 0 W, got {self.power_w!r} (a window "
                             "without a power reading is Measurement(..., nan, trusted=False))")
        if int(self.steps) < 1:
            raise ValueError(f"Measurement.steps must be >= 1, got {self.steps!r}")
        object.__setattr__(self, "time_s", t)
        object.__setattr__(self, "power_w", p)
        object.__setattr__(self, "label", str(self.label))
        object.__setattr__(self, "trusted", bool(self.trusted))
        object.__setattr__(self, "mode", _mode(self.mode))
        object.__setattr__(self, "steps", int(self.steps))
        object.__setattr__(self, "settled", bool(self.settled))
        if self.power_rel_sem is not None:
            se = float(self.power_rel_sem)
            if not (math.isfinite(se) and se >= 0):
                raise ValueError(f"Measurement.power_rel_sem is a relative standard error >= 0 (or None: not known), "
                                 f"got {self.power_rel_sem!r}")
            object.__setattr__(self, "power_rel_sem", se)
        if self.host_time_s is None and self.t0_ns is not None and self.t1_ns is not None:
            object.__setattr__(self, "host_time_s", (int(self.t1_ns) - int(self.t0_ns)) / 1e9)

    @property
    def energy_j(self) -> float:
        return self.time_s * self.power_w

    @property
    def has_power(self) -> bool:
        return math.isfinite(self.power_w)

    @property
    def partial(self) -> bool:
        """The power rests on partial or rejected readings (``not trusted``)."""
        return not self.trusted

    @property
    def simulated(self) -> bool:
        """The numbers are the twin's (``simulated`` or ``extrapolated``), not this machine's."""
        return self.label.split(" ")[0] in ("simulated", "extrapolated")

    @property
    def time_per_step_s(self) -> float:
        return self.time_s / self.steps

    @property
    def energy_per_step_j(self) -> float:
        return self.energy_j / self.steps

    @property
    def shown_label(self) -> str:
        """The label as reports print it: `` (partial)`` added to a measured (or apportioned) number whose readings
        were partial (an estimate without readings stays ``estimated``)."""
        base = self.label.split(" ")[0]
        if self.trusted or self.label.endswith("(partial)") or not base.endswith(("measured", "apportioned")):
            return self.label
        return f"{self.label} (partial)"

    def with_energy(self, energy_j: float, **changes: Any) -> Measurement:
        """The same window with ``energy_j`` (its power becomes ``energy_j / time_s``) and other fields changed."""
        return replace(self, power_w=float(energy_j) / self.time_s, **changes)

    def scaled(self, **changes: Any) -> Measurement:
        """A copy with fields changed (``dataclasses.replace``)."""
        return replace(self, **changes)


def as_rel_sem(value: object) -> float | None:
    """A ``power_rel_sem`` read back from a file (a profile store's attribute, a checkpoint): the number when it is a
    relative standard error (a finite int or float >= 0, not a bool), else ``None`` (not known)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        se = float(value)
    except OverflowError:  # an integer too large for a float
        return None
    return se if math.isfinite(se) and se >= 0 else None


def merge(ms: Iterable[Measurement], *, label: str | None = None,
          mode: PowerMode | str | None = "same") -> Measurement:
    """One window of several (in order): times, energies, steps and samples add up; the power is the total energy
    over the total time. A window without power (``nan``) counts in time only and its share of the energy is
    extrapolated from the others (the result is then untrusted); ``label``: the one label they share, else the most
    common one (or the ``label`` given); ``mode``: theirs when they share one ("same", the default; else None), or
    the one given."""
    ms = list(ms)
    if not ms:
        raise ValueError("merge: no measurement to merge")
    t = math.fsum(m.time_s for m in ms)
    with_p = [m for m in ms if m.has_power]
    if with_p:
        tp = math.fsum(m.time_s for m in with_p)
        power = math.fsum(m.energy_j for m in with_p) / tp
    else:
        power = math.nan
    labels = Counter(m.label for m in ms)
    lab = label if label is not None else labels.most_common(1)[0][0]
    modes = {str(m.mode) for m in ms}
    if mode == "same":
        mode = ms[0].mode if len(modes) == 1 else None
    hosts = [m.host_time_s for m in ms if m.host_time_s is not None]
    samples = [m.samples for m in ms if m.samples is not None]
    readings = [m.readings for m in ms if m.readings is not None]
    q = None
    if readings:
        q = readings[0]
        for r in readings[1:]:
            try:
                q = q + r
            except TypeError:  # qualities that do not add: the first one stands
                break
    return Measurement(t, power, lab, all(m.trusted for m in ms) and len(with_p) == len(ms), mode,
                       t0_ns=ms[0].t0_ns, t1_ns=ms[-1].t1_ns,
                       host_time_s=math.fsum(hosts) if len(hosts) == len(ms) else None,
                       steps=sum(m.steps for m in ms), samples=sum(samples) if samples else None, readings=q,
                       settled=all(m.settled for m in ms))


def settled(ms: Iterable[Measurement]) -> tuple[Measurement, bool]:
    """One mode's figure from its windows: the settled ones merged (``(merged, True)``), or, when none has settled
    (a run shorter than the power's settling), all of them (``(merged, False)``: say so)."""
    ms = list(ms)
    done = [m for m in ms if m.settled]
    return (merge(done), True) if done else (merge(ms), False)


@dataclass(frozen=True)
class OverBudget:
    """What ran over a power budget (:func:`over_budget`): ``steps`` (of ``of_steps``), their ``time_s``, the
    ``worst_w`` power of a block of them (``nan``: none), and ``windows`` (a tuner's profiling windows whose profile
    was over it)."""

    budget_w: float
    steps: int
    of_steps: int
    time_s: float
    worst_w: float
    windows: int = 0

    @property
    def fraction(self) -> float:
        return self.steps / self.of_steps if self.of_steps else 0.0

    def describe(self, what: str = "minibatches") -> str:
        tol = f" (beyond its {100 * OVER_TOLERANCE:g} % measurement tolerance)"
        if not self.steps:
            return f"no {what} over the {self.budget_w:g} W budget{tol} (of {self.of_steps})"
        win = f", {self.windows} profiling window(s)" if self.windows else ""
        return (f"{self.steps} of {self.of_steps} {what} ({100 * self.fraction:.1f} %) over the {self.budget_w:g} W "
                f"budget{tol}, {self.time_s:.3g} s, worst {self.worst_w:.1f} W{win}")


#: steps averaged before a power is compared with a budget (a reading's noise averages out, a settling does not)
OVER_BLOCK = 20
#: how far over a budget a block's mean power may read and still count within it: a power measurement's tolerance (the
#: tuning benchmarks judge a mode's mean power within its budget with the same 2 %)
OVER_TOLERANCE = 0.02


def over_budget(ms: Iterable[Measurement], budget_w: float, windows: int = 0, block: int = OVER_BLOCK,
                tolerance: float = OVER_TOLERANCE) -> OverBudget:
    """What of ``ms`` (steps, in order) ran over ``budget_w``: the steps of every block of up to ``block`` consecutive
    steps in one mode (and one settling state) whose time-weighted mean power was over it by more than ``tolerance``,
    so that a reading's noise (2 % per step on the twin) averages out while the power's settling after a change,
    seconds long, does not; ``worst_w`` is the highest such block's power. A step without power is not counted over."""
    ms = list(ms)
    over: list[Measurement] = []
    worst = math.nan
    run: list[Measurement] = []

    def close(run: list[Measurement]) -> None:
        nonlocal worst
        with_p = [m for m in run if m.has_power]
        if not with_p:
            return
        p = merge(with_p).power_w
        if p > budget_w * (1.0 + tolerance):
            over.extend(with_p)
            worst = p if math.isnan(worst) else max(worst, p)

    for m in ms:
        if run and (len(run) >= block or str(m.mode) != str(run[-1].mode) or m.settled != run[-1].settled):
            close(run)
            run = []
        run.append(m)
    if run:
        close(run)
    return OverBudget(float(budget_w), sum(m.steps for m in over), sum(m.steps for m in ms),
                      math.fsum(m.time_s for m in over), worst, windows)
