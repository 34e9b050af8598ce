"""``Interleaver`` for ``pytorch_lightning`` Trainers. For ``lightning.pytorch`` use :mod:`lightning_edge.serving.pytorch`.
The behaviour is in :class:`~lightning_edge.serving.interleaver.InterleaverMixin`."""

from __future__ import annotations

from pytorch_lightning.callbacks import Callback

from lightning_edge.serving.interleaver import InterleaverMixin

__all__ = ["Interleaver"]


class Interleaver(InterleaverMixin, Callback):
    __doc__ = InterleaverMixin.__doc__
