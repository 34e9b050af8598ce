"""``EnergyProfiler`` for ``lightning.pytorch`` Trainers (``pip install lightning``); also ``lightning_edge.EnergyProfiler``.

For ``pytorch_lightning`` Trainers use :mod:`lightning_edge.lightning.pl`. The behaviour is in
:class:`~lightning_edge.lightning.energy_profiler.EnergyProfilerMixin`.
"""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback

from lightning_edge.lightning.energy_profiler import EnergyProfilerMixin
from lightning_edge.lightning.tuner import PowerModeTunerMixin

__all__ = ["EnergyProfiler", "PowerModeTuner"]


class EnergyProfiler(EnergyProfilerMixin, Callback):
    __doc__ = EnergyProfilerMixin.__doc__


class PowerModeTuner(PowerModeTunerMixin, Callback):
    __doc__ = PowerModeTunerMixin.__doc__
