"""Profiling: the background power sampler (and, from other modules, hooks, timers and energy attribution)."""

from __future__ import annotations

from lightning_edge.profiling.sampler import PowerSampler, SamplerOverhead, Samples, default_rate_hz

__all__ = ["PowerSampler", "SamplerOverhead", "Samples", "default_rate_hz"]
