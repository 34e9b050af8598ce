"""``EnergyProfiler`` for ``pytorch_lightning`` Trainers.

For ``lightning.pytorch`` Trainers use ``lightning_edge.EnergyProfiler`` (:mod:`lightning_edge.lightning.pytorch`).
The behaviour is in :class:`~lightning_edge.lightning.energy_profiler.EnergyProfilerMixin`.
"""

from __future__ import annotations

from pytorch_lightning.callbacks import Callback

from lightning_edge.lightning.energy_profiler import EnergyProfilerMixin
from lightning_edge.lightning.tuner import PowerModeTunerMixin

__all__ = ["EnergyProfiler", "PowerModeTuner"]


class EnergyProfiler(EnergyProfilerMixin, Callback):
    __doc__ = EnergyProfilerMixin.__doc__


class PowerModeTuner(PowerModeTunerMixin, Callback):
    __doc__ = PowerModeTunerMixin.__doc__
