"""The twin: a simulated Jetson's physics. Rooflines, step time and power of any workload in any power mode, per
layer and per step, from a ``ModelCost`` and the board's coefficients: one model of a workload,
``TwinWorkload(cost, twin).step(modes)`` / ``.layers(mode)`` (:mod:`lightning_edge.twin.workload_model`), that every
caller asks. Pure model: no current mode, no clock, no running workload; it imports cost and roofline (and the board
facts of :mod:`lightning_edge.catalog`), never devices or tuning. The simulated *board* (a mode controller, the live
board following it and a power sensor reading that) lives in :mod:`lightning_edge.devices.sim`."""

from __future__ import annotations

from lightning_edge._lazy import lazy_getattr

_LAZY = {
    "OrinTwin": "lightning_edge.twin.model",
    "TwinWorkload": "lightning_edge.twin.workload_model",
    "Prediction": "lightning_edge.twin.workload_model",
    "LayerTimes": "lightning_edge.twin.workload_model",
    "IDLE_ROW": "lightning_edge.twin.workload_model",
    "load_twin_params": "lightning_edge.twin.model",
    "TWIN_PROFILE": "lightning_edge.twin.model",
    "SimWorkload": "lightning_edge.twin.sim_workload",
    "WorkloadProfile": "lightning_edge.twin.workload",
    "compile_workload": "lightning_edge.twin.workload",
    "count_param_tensors": "lightning_edge.twin.workload",
    "precision_of": "lightning_edge.twin.workload",
    "Physics": "lightning_edge.twin.physics",
    "validate": "lightning_edge.twin.validation",
}

__all__ = list(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY, globals())
