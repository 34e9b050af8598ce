"""``EnergyProfiler`` for ``lightning.pytorch`` Trainers (``pip install lightning``); also ``lightning_edge.EnergyProfiler``.

For ``pytorch_lightning`` Trainers use :mod:`lightning_edge.lightning.pl`. The behaviour is in
:class:`~lightning_edge.lightning.energy_profiler.EnergyProfilerMixin`.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback

from lightning_edge.lightning.energy_profiler import EnergyProfilerMixin

__all__ = ["EnergyProfiler"]


class EnergyProfiler(EnergyProfilerMixin, Callback):
    __doc__ = EnergyProfilerMixin.__doc__
