"""The Orin AGX twin: a device like any other, backed by a model instead of sysfs."""

from __future__ import annotations

from lightning_edge._lazy import lazy_getattr

# public name -> module (lazy, so the twin's heavier parts load only when used)
_LAZY = {
    "SimModeController": "lightning_edge.devices.sim.controller",
    "SIM_BOARDS": "lightning_edge.devices.sim.controller",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
