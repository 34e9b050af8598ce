"""``Interleaver`` for ``lightning.pytorch`` Trainers. For ``pytorch_lightning`` use :mod:`lightning_edge.serving.pl`.
The behaviour is in :class:`~lightning_edge.serving.interleaver.InterleaverMixin`."""

from __future__ import annotations

from lightning.pytorch.callbacks import Callback

from lightning_edge.serving.interleaver import InterleaverMixin

__all__ = ["Interleaver"]


class Interleaver(InterleaverMixin, Callback):
    __doc__ = InterleaverMixin.__doc__
