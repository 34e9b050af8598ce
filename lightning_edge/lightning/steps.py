"""One model's steps as every callback of a Trainer sees them: begun once, ended once, measured once.

The profiler and the tuner of one Trainer both see each training step. Each callback calls :meth:`StepLoop.begin`
at its ``on_*_batch_start`` and :meth:`StepLoop.end` at its ``on_*_batch_end``; the first call of a step runs every
attached driver, in an order that does not depend on the callbacks' order in the Trainer:

* at the step's start, the tuner first (it may switch the power mode: only between steps), then the profiling
  session (it reads the step's mode and starts its clock);
* at the step's end, the session first (it stops its clock and measures the step once: one
  :class:`~lightning_edge.records.Measurement`, published to its subscribers), then the tuner, which is handed that
  measurement (:attr:`StepLoop.measured`; :attr:`StepLoop.measured_by`: the session that measured it) instead of
  measuring the step again.

A simulated board has one step meter for the loop (:meth:`StepLoop.twin_meter`: the twin's
:class:`~lightning_edge.devices.meter.TwinMeter`, its simulated clock, noise and power settling): the session reads
every simulated step from it and the tuner's engine is given the same object, so a step has one number.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from lightning.pytorch import Trainer
    from torch import nn

    from lightning_edge.devices.board import Board
    from lightning_edge.devices.meter import TwinMeter
    from lightning_edge.lightning.session import EnergySession
    from lightning_edge.records import Measurement

__all__ = ["StepLoop", "StepDriver", "shared_loop", "TUNER", "SESSION"]

#: drivers' places in a step: the tuner acts before the session at a step's start and after it at its end
TUNER, SESSION = 0, 10

_LOOPS: weakref.WeakKeyDictionary[nn.Module, StepLoop] = weakref.WeakKeyDictionary()


class StepDriver(Protocol):
    """A callback's place in the loop: what it does at a step's start and at its end (``trainer``: None when the
    step was begun without one)."""

    def begin(self, stage: str, trainer: Trainer | None, batch: Any) -> None: ...

    def end(self, stage: str, trainer: Trainer | None) -> None: ...


class StepLoop:
    """See the module docstring. A driver (:class:`StepDriver`) is any object with ``begin(stage, trainer, batch)``
    and ``end(stage, trainer)``; :meth:`attach` it with its place (:data:`TUNER`, :data:`SESSION`)."""

    def __init__(self) -> None:
        self._drivers: list[tuple[int, int, StepDriver]] = []
        self._open: str | None = None
        self.measured: Measurement | None = None  # the Measurement the session published for the step that ends
        self.measured_index: int | None = None  # its index in the stage
        self.measured_by: EnergySession | None = None  # the session that measured it
        self._meter: TwinMeter | None = None
        self._meter_board: Board | None = None

    # ------------------------------------------------------------------ drivers
    def attach(self, driver: StepDriver, place: int) -> None:
        if any(d is driver for _, _, d in self._drivers):
            return
        self._drivers.append((int(place), len(self._drivers), driver))
        self._drivers.sort(key=lambda x: (x[0], x[1]))

    def detach(self, driver: StepDriver) -> None:
        self._drivers = [x for x in self._drivers if x[2] is not driver]
        if not self._drivers:
            self._open = None

    def attached(self, place: int) -> list[StepDriver]:
        return [d for p, _, d in self._drivers if p == place]

    @property
    def session(self) -> StepDriver | None:
        """The profiling session's driver attached (None: the tuner measures its steps with its meter)."""
        got = self.attached(SESSION)
        return got[0] if got else None

    # ------------------------------------------------------------------ a step
    def begin(self, stage: str, trainer: Trainer | None = None, batch: Any = None) -> None:
        """A step of ``stage`` starts (the first caller of this step runs every driver; later ones do nothing)."""
        if self._open == stage:
            return
        self._open = stage
        self.measured = self.measured_index = self.measured_by = None
        for _, _, d in list(self._drivers):
            d.begin(stage, trainer, batch)

    def end(self, stage: str, trainer: Trainer | None = None) -> None:
        """The step of ``stage`` ends (once): the session measures it, then the tuner is handed the measurement."""
        if self._open != stage:
            return
        self._open = None
        for _, _, d in reversed(self._drivers):
            d.end(stage, trainer)

    def abort(self) -> None:
        """The step in progress is dropped (an exception)."""
        self._open = None
        self.measured = self.measured_index = self.measured_by = None

    # ------------------------------------------------------------------ the twin's one meter
    def twin_meter(self, board: Board, *, seed: int | None = 0, precision: str = "fp32") -> TwinMeter | None:
        """The simulated board's step meter for this model's steps (made once per board: every caller gets the
        same one); None when the board is not simulated."""
        if board.twin is None:
            return None
        if self._meter is None or self._meter_board is not board:
            self._meter = board.meter(seed=seed, precision=precision)
            self._meter_board = board
        return self._meter


def shared_loop(model: nn.Module) -> StepLoop:
    """The model's :class:`StepLoop` (the same object for the same module in this process)."""
    try:
        loop = _LOOPS.get(model)
    except TypeError:  # not weakly referenceable: a loop of its own
        return StepLoop()
    if loop is None:
        loop = _LOOPS[model] = StepLoop()
    return loop
