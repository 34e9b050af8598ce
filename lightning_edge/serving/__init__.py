"""Inference serving with latency budgets, and concurrent training + inference by managed interleaving (Fulcrum
sections 3, 4, 5.4, 7.4, 7.5). See docs/serving.md.

- Arrival processes: :class:`ConstantArrivals`, :class:`PoissonArrivals`, :class:`TraceArrivals`,
  :func:`load_trace`, :func:`synthetic_trace` (bundled, **synthetic**), :class:`RateEstimator`.
- :class:`InferenceRunner`: a serving loop that batches requests, tunes mode + batch size for an
  ``InferenceProblem`` and re-tunes when the arrival rate changes.
- :class:`InterleavingEngine`: managed interleaving as a plain loop; ``Interleaver``: the Lightning callback
  (``lightning.pytorch``; ``lightning_edge.serving.pl.Interleaver`` for ``pytorch_lightning``).
- :mod:`lightning_edge.serving.native`: the native-interleaving baselines (real threads; a model on the twin).

Lightning is imported only when ``Interleaver`` is used.
"""

from __future__ import annotations

import importlib

from lightning_edge._lazy import lazy_getattr
from lightning_edge.serving.arrivals import (
    ConstantArrivals,
    PoissonArrivals,
    RateEstimator,
    TraceArrivals,
    TraceFormatError,
    load_trace,
    synthetic_trace,
)
from lightning_edge.serving.stats import LatencySummary, summarize_latencies

_LAZY = {
    "InferenceRunner": "lightning_edge.serving.runner",
    "ServingReport": "lightning_edge.serving.runner",
    "InterleavingEngine": "lightning_edge.serving.interleaving_engine",
    "InterleavingReport": "lightning_edge.serving.interleaving_engine",
    "InterleaverMixin": "lightning_edge.serving.interleaver",
    "Plan": "lightning_edge.serving.engine",
    "ConcurrentWorkload": "lightning_edge.serving.engine",
    "NonUrgentInference": "lightning_edge.serving.engine",
    "RequestInputs": "lightning_edge.serving.engine",
    "plan_from_times": "lightning_edge.serving.engine",
    "run_native_threads": "lightning_edge.serving.native",
    "simulate_native_twin": "lightning_edge.serving.native",
}

__all__ = [
    "ConstantArrivals", "PoissonArrivals", "TraceArrivals", "TraceFormatError", "load_trace", "synthetic_trace",
    "RateEstimator", "LatencySummary", "summarize_latencies", "Interleaver", *_LAZY,
]

_lazy_getattr = lazy_getattr(__name__, _LAZY, globals())


def __getattr__(name: str):
    if name == "Interleaver":
        try:
            value = importlib.import_module("lightning_edge.serving.pytorch").Interleaver
        except ImportError:  # no `lightning` package: the pytorch_lightning flavour
            value = importlib.import_module("lightning_edge.serving.pl").Interleaver
        globals()[name] = value
        return value
    return _lazy_getattr(name)


def __dir__():
    return sorted(__all__)
