"""Profiling: the background power sampler, per-layer timing hooks, energy attribution, reports and traces.

The sampler is numpy-only and loads eagerly; the hooks (torch) and the rest load on first use.
"""

from __future__ import annotations

from lightning_edge._lazy import lazy_getattr
from lightning_edge.devices.sampler import PowerSampler, SamplerOverhead, Samples, default_rate_hz

_LAZY = {
    **dict.fromkeys(("LayerTimer", "StepTiming", "Interval", "LayerSelf"), "lightning_edge.profiling.hooks"),
    **dict.fromkeys(("attribute_step", "model_energies", "aggregate", "aggregate_steps", "PowerTrace", "StepEnergy",
                     "LayerEnergy", "LayerStats"), "lightning_edge.profiling.attribution"),
    "ProfileReport": "lightning_edge.profiling.report",
    **dict.fromkeys(("chrome_trace", "write_trace", "trace_path"), "lightning_edge.profiling.trace"),
}

__all__ = ["PowerSampler", "SamplerOverhead", "Samples", "default_rate_hz", *_LAZY]

__getattr__ = lazy_getattr(__name__, _LAZY, globals())
