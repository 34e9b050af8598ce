"""``EnergyProfiler`` for ``pytorch_lightning`` Trainers.

For ``lightning.pytorch`` Trainers use ``lightning_edge.EnergyProfiler`` (:mod:`lightning_edge.lightning.pytorch`).
The behaviour is in :class:`~lightning_edge.lightning.energy_profiler.EnergyProfilerMixin`.
"""

from __future__ import annotations

from pytorch_lightning.callbacks import Callback

from lightning_edge.lightning.energy_profiler import EnergyProfilerMixin

__all__ = ["EnergyProfiler"]


class EnergyProfiler(EnergyProfilerMixin, Callback):
    __doc__ = EnergyProfilerMixin.__doc__
