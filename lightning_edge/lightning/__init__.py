"""The Lightning callbacks: thin glue over :mod:`lightning_edge.profiling`.

* ``EnergyProfiler``: for ``lightning.pytorch`` Trainers (:mod:`lightning_edge.lightning.pytorch`); when the
  ``lightning`` package is not installed, the ``pytorch_lightning`` one (:mod:`lightning_edge.lightning.pl`).
* ``lightning_edge.lightning.pl.EnergyProfiler``: for ``pytorch_lightning`` Trainers.
* ``PowerModeTuner``: picks the power mode during fit under a power budget (:mod:`lightning_edge.lightning.tuner`);
  ``lightning_edge.lightning.pl.PowerModeTuner`` for ``pytorch_lightning``.
* ``EnergyReporter``: everything ``EnergyProfiler`` does, without Lightning (a plain loop drives it; the callback
  is thin glue over it); ``EnergySession``: the profiling alone (steps, attribution); ``OverheadBudget``: what
  profiling may add to a run (5 % of it or 1 s, whichever is larger), one object every part spends.

Neither Lightning package is imported until one of these names is used.
"""

from __future__ import annotations

import importlib

from lightning_edge._lazy import lazy_getattr

_LAZY = {
    "EnergySession": "lightning_edge.lightning.session",
    "EnergyReporter": "lightning_edge.lightning.reporter",
    "OverheadBudget": "lightning_edge.lightning.budget",
    "EnergyProfilerMixin": "lightning_edge.lightning.energy_profiler",
    "PowerModeTunerMixin": "lightning_edge.lightning.tuner",
}

_CALLBACKS = ("EnergyProfiler", "PowerModeTuner")

__all__ = [*_CALLBACKS, *_LAZY]


_lazy_getattr = lazy_getattr(__name__, _LAZY, globals())


def __getattr__(name: str):
    if name in _CALLBACKS:
        try:
            value = getattr(importlib.import_module("lightning_edge.lightning.pytorch"), name)
        except ImportError:  # no `lightning` package: the pytorch_lightning flavour
            value = getattr(importlib.import_module("lightning_edge.lightning.pl"), name)
        globals()[name] = value
        return value
    return _lazy_getattr(name)


def __dir__():
    return sorted(__all__)
