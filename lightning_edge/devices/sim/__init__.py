"""The Orin AGX twin: a device like any other, backed by a model instead of sysfs."""

from __future__ import annotations

import importlib

# public name -> module (lazy, so the twin's heavier parts load only when used)
_LAZY = {
    "SimModeController": "lightning_edge.devices.sim.controller",
    "SIM_BOARDS": "lightning_edge.devices.sim.controller",
}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'lightning_edge.devices.sim' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value
