"""Structural types of the board layer: what its readers ask of objects that need not derive from its base classes.

The base classes give every backend the attributes their readers use, with defaults
(:class:`~lightning_edge.devices.sensors.base.PowerSensor`: ``label``, ``update_period_s``, ``rails``, ``reason``,
``available``...; :class:`~lightning_edge.devices.controllers.base.ModeController`: ``board``, ``layout``,
``named_modes``, ``seconds_since_change()``...), so code that holds one of them uses them directly. These protocols
say what a reader needs of an object that may be something else:

- :class:`SensorLike`: what the power sampler and the step meters read of a power sensor (every ``PowerSensor``; a
  recorded trace, :func:`lightning_edge.profiling.attribution.PowerTrace`);
- :class:`ControllerLike`: what a reader of a board's mode asks of its controller (every ``ModeController``);
- :class:`BoardLike`: a device, its sensor, its controller and, when simulated, its twin (a
  :class:`~lightning_edge.devices.board.Board`, a :class:`~lightning_edge.devices.sim.device.SimulatedOrin`);
- :class:`WorkloadLike`: what the twin's step meter draws its steps from (a
  :class:`~lightning_edge.twin.live.SimWorkload`; serving's non-urgent inference, which draws as another).

A step meter's protocol is :class:`lightning_edge.devices.meter.StepMeter`. This module imports nothing at run time
but ``typing`` (the types it names are imported for type checkers only), so any module of the board layer may use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from lightning_edge.devices.controllers.base import AppliedMode
    from lightning_edge.devices.sensors.base import PowerReading
    from lightning_edge.modes import ModeLike, PowerMode, PowerModeSpace
    from lightning_edge.twin.model import OrinTwin

__all__ = ["BoardLike", "ControllerLike", "SensorLike", "WorkloadLike"]


class SensorLike(Protocol):
    """What the power sampler (:class:`~lightning_edge.devices.sampler.PowerSampler`) and the sensor's step meter
    (:class:`~lightning_edge.devices.meter.SensorMeter`) read of a power sensor; see
    :class:`~lightning_edge.devices.sensors.base.PowerSensor` for each member's meaning."""

    @property
    def name(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def update_period_s(self) -> float: ...
    @property
    def rails(self) -> tuple[str, ...]: ...
    @property
    def is_energy_counter(self) -> bool: ...
    @property
    def is_sysfs(self) -> bool: ...
    @property
    def dated_readings(self) -> bool: ...
    @property
    def reason(self) -> str: ...
    @property
    def available(self) -> bool: ...
    def read(self) -> PowerReading: ...
    def why_unavailable(self) -> str | None: ...


class ControllerLike(Protocol):
    """What a reader of a board's mode asks of its controller; see
    :class:`~lightning_edge.devices.controllers.base.ModeController` for each member's meaning."""

    @property
    def name(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def device_id(self) -> str: ...
    @property
    def space(self) -> PowerModeSpace: ...
    def current(self) -> PowerMode: ...
    def apply(self, mode: ModeLike) -> AppliedMode: ...
    def seconds_since_change(self) -> float | None: ...


@runtime_checkable
class BoardLike(Protocol):
    """A device: its name, its power ``sensor``, its mode ``controller`` (None: it has none) and, when it is
    simulated, its ``twin`` (None on a real board)."""

    @property
    def name(self) -> str: ...
    @property
    def sensor(self) -> SensorLike: ...
    @property
    def controller(self) -> ControllerLike | None: ...
    @property
    def twin(self) -> OrinTwin | None: ...


class WorkloadLike(Protocol):
    """What the twin's step meter (:class:`~lightning_edge.devices.meter.TwinMeter`) draws a step from: one noisy
    minibatch of the ``kind`` workload at ``mode``, ``(time_s, power_w, noise-free power_w)``, its noise from ``rng``
    (the workload's own generator when None) when ``noise`` (the workload's setting when None); see
    :meth:`lightning_edge.twin.live.SimWorkload.draw`."""

    def draw(self, kind: str, mode: PowerMode | str | None, batch_size: int | None = None,
             rng: np.random.Generator | None = None, noise: bool | None = None) -> tuple[float, float, float]: ...
