"""The cost model: per-layer FLOP, MAC, bytes moved and arithmetic intensity from shapes.

Names load on first use, so ``lightning-edge`` sub-commands that do not count start without torch.
"""

from __future__ import annotations

from lightning_edge._lazy import lazy_getattr

_LAZY = {
    "analyze": "lightning_edge.cost.counter",
    "ModelCost": "lightning_edge.cost.model_cost",
    "LayerCost": "lightning_edge.cost.types",
    "Cost": "lightning_edge.cost.types",
    "OpCost": "lightning_edge.cost.formulas",
    "register_formula": "lightning_edge.cost.formulas",
    "REGISTRY": "lightning_edge.cost.formulas",
    "CallCapture": "lightning_edge.cost.capture",
    "Captured": "lightning_edge.cost.capture",
    "step_cost": "lightning_edge.cost.counter",
    "shared_capture": "lightning_edge.cost.shared",
    "StepCaptures": "lightning_edge.cost.shared",
    "CapturedStep": "lightning_edge.cost.shared",
}

__all__ = list(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
