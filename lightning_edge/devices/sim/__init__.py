"""The simulated board: a mode controller, the live board (:class:`~lightning_edge.devices.sim.live.LiveTwin`: the
twin's model in the controller's mode, what runs, its power settling and noise) and a power sensor reading it, over
the twin (:mod:`lightning_edge.twin`, the pure model); a device like any other, backed by a model instead of sysfs."""

from __future__ import annotations

from lightning_edge._lazy import lazy_getattr

# public name -> module (lazy, so the twin's heavier parts load only when used)
_LAZY = {
    "SimModeController": "lightning_edge.devices.sim.controller",
    "SIM_BOARDS": "lightning_edge.devices.sim.controller",
    "SimPowerSensor": "lightning_edge.devices.sim.sensor",
    "ORIN_AGX_RAILS": "lightning_edge.devices.sim.sensor",
    "LiveTwin": "lightning_edge.devices.sim.live",
    "Activity": "lightning_edge.devices.sim.live",
    "SimulatedOrin": "lightning_edge.devices.sim.device",
}

__all__ = list(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
