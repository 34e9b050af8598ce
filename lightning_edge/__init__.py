"""lightning_edge: where time and energy go, layer by layer, for DNNs on NVIDIA Jetson edge devices.

Heavy sub-packages (torch, Lightning, Optuna) are imported lazily, on first use of a name.
"""

from __future__ import annotations

from lightning_edge._lazy import lazy_getattr

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "analyze": "lightning_edge.cost",
    "register_formula": "lightning_edge.cost",
    "ModelCost": "lightning_edge.cost",
    "LayerCost": "lightning_edge.cost",
    "Cost": "lightning_edge.cost",
    "Roofline": "lightning_edge.roofline",
    "PowerMode": "lightning_edge.modes",
    "PowerModeSpace": "lightning_edge.modes",
    "EnergyProfiler": "lightning_edge.lightning",
    "EnergySession": "lightning_edge.lightning",
    "PowerModeTuner": "lightning_edge.lightning",
    "SimulatedOrin": "lightning_edge.devices.sim",
    "InferenceRunner": "lightning_edge.serving",
    "Interleaver": "lightning_edge.serving",
}

__all__ = ["__version__", *_LAZY]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


def __dir__():
    return sorted(__all__)
