"""The cost model: per-layer FLOP, MAC, bytes moved and arithmetic intensity from shapes.

Names load on first use, so ``lightning-edge`` sub-commands that do not count start without torch.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "analyze": "lightning_edge.cost.counter",
    "ModelCost": "lightning_edge.cost.model_cost",
    "LayerCost": "lightning_edge.cost.types",
    "Cost": "lightning_edge.cost.types",
    "OpCost": "lightning_edge.cost.formulas",
    "register": "lightning_edge.cost.formulas",
    "REGISTRY": "lightning_edge.cost.formulas",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'lightning_edge.cost' has no attribute {name!r}")
    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value
