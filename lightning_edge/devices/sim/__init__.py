"""The Orin AGX twin: a device like any other, backed by a model instead of sysfs."""

from __future__ import annotations

from lightning_edge._lazy import lazy_getattr

# public name -> module (lazy, so the twin's heavier parts load only when used)
_LAZY = {
    "SimModeController": "lightning_edge.devices.sim.controller",
    "SIM_BOARDS": "lightning_edge.devices.sim.controller",
    "OrinTwin": "lightning_edge.devices.sim.twin",
    "Prediction": "lightning_edge.devices.sim.twin",
    "LayerTimes": "lightning_edge.devices.sim.twin",
    "Activity": "lightning_edge.devices.sim.twin",
    "load_twin_params": "lightning_edge.devices.sim.twin",
    "SimWorkload": "lightning_edge.devices.sim.live",
    "WorkloadProfile": "lightning_edge.devices.sim.workload",
    "compile_workload": "lightning_edge.devices.sim.workload",
    "SimPowerSensor": "lightning_edge.devices.sim.sensor",
    "ORIN_AGX_RAILS": "lightning_edge.devices.sim.sensor",
    "SimulatedOrin": "lightning_edge.devices.sim.device",
    "Physics": "lightning_edge.devices.sim.physics",
    "validate": "lightning_edge.devices.sim.validation",
}

__all__ = list(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
