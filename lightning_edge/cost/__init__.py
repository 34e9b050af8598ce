"""The cost model: per-layer FLOP, MAC, bytes moved and arithmetic intensity from shapes."""

from lightning_edge.cost.counter import analyze
from lightning_edge.cost.formulas import REGISTRY, OpCost, register
from lightning_edge.cost.model_cost import ModelCost
from lightning_edge.cost.types import Cost, LayerCost

__all__ = ["analyze", "ModelCost", "LayerCost", "Cost", "OpCost", "register", "REGISTRY"]
