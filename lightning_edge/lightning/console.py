"""Printing at the end of a fit without a progress bar drawn after it.

Lightning's rich progress bar keeps a live display until the Trainer's teardown, which comes after every callback's
``on_fit_end``: a summary printed there was followed by the bar's last frame (a stale "Epoch 0/999 ... 65/256" line
under the summaries). :func:`end_progress_bar` stops the bar's display first (the bar re-creates it for a later
stage); the tqdm bar is closed by ``on_train_end`` already.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lightning.pytorch import Trainer

__all__ = ["end_progress_bar"]


def end_progress_bar(trainer: Trainer) -> None:
    """Stop the Trainer's live progress display, if it has one, before printing below it."""
    bar = trainer.progress_bar_callback
    if bar is None:
        return
    stop = getattr(bar, "_stop_progress", None)  # RichProgressBar: stops the display and marks it for re-creation
    with contextlib.suppress(Exception):  # printing must never fail a fit
        if callable(stop):
            stop()
        elif getattr(getattr(bar, "progress", None), "stop", None) is not None:
            bar.progress.stop()
