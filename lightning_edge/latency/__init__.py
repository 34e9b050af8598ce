"""Latency models of Jantsch's slides (after ANNETTE and Blackthorn), fitted on the device you have.

    from lightning_edge.latency import LatencyModel
    lm = LatencyModel.fit(kind="stepwise", device="cpu", budget_s=600)   # measures this machine
    lm.save("cpu-latency.json"); lm = LatencyModel.load("cpu-latency.json")
    pred = lm.predict(model, *example_inputs)    # ModelLatency: .total_s, .layers (name, kind, time_s, how)

Kinds: ``roofline``, ``refined``, ``statistical``, ``mixed``, ``stepwise``, one subclass of the abstract
``LatencyModel`` each (``model_class(kind)``; see ``lightning_edge.latency.model`` and docs/latency.md). Names
load on first use; scikit-learn is needed only to fit the statistical and mixed kinds (a saved one loads and
predicts without it).
"""

from __future__ import annotations

from lightning_edge._lazy import lazy_getattr

_LAZY = {
    "LatencyModel": "lightning_edge.latency.model",
    "LatencyModelError": "lightning_edge.latency.model",
    "ModelLatency": "lightning_edge.latency.model",
    "LayerLatency": "lightning_edge.latency.model",
    "KINDS": "lightning_edge.latency.model",
    "model_class": "lightning_edge.latency.model",
    "RooflineLatencyModel": "lightning_edge.latency.model",
    "RefinedRooflineLatencyModel": "lightning_edge.latency.model",
    "StatisticalLatencyModel": "lightning_edge.latency.model",
    "MixedLatencyModel": "lightning_edge.latency.model",
    "StepwiseLatencyModel": "lightning_edge.latency.model",
    "LayerDesc": "lightning_edge.latency.features",
    "describe": "lightning_edge.latency.features",
    "units_of": "lightning_edge.latency.features",
    "Sample": "lightning_edge.latency.measure",
    "SPECS": "lightning_edge.latency.measure",
    "time_unit": "lightning_edge.latency.measure",
    "sample_units": "lightning_edge.latency.measure",
    "network_page_faults": "lightning_edge.latency.measure",
    "time_layers": "lightning_edge.latency.measure",
    "time_network": "lightning_edge.latency.measure",
    "training_from_layers_json": "lightning_edge.latency.measure",
    "Dim": "lightning_edge.latency.stepwise",
    "StepFn": "lightning_edge.latency.stepwise",
    "Generation": "lightning_edge.latency.stepwise",
    "generate": "lightning_edge.latency.stepwise",
    "generate_1d": "lightning_edge.latency.stepwise",
    "plot_generation": "lightning_edge.latency.plot",
}

__all__ = list(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY, globals())
