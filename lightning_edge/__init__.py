"""lightning_edge: where time and energy go, layer by layer, for DNNs on NVIDIA Jetson edge devices.

Heavy sub-packages (torch, Lightning, Optuna) are imported lazily, on first use of a name.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "analyze": "lightning_edge.cost",
    "ModelCost": "lightning_edge.cost",
    "LayerCost": "lightning_edge.cost",
    "Cost": "lightning_edge.cost",
    "Roofline": "lightning_edge.roofline",
    "PowerMode": "lightning_edge.devices.modes",
    "PowerModeSpace": "lightning_edge.devices.modes",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'lightning_edge' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
