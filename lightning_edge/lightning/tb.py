"""Where a callback writes: the Trainer's loggers, and TensorBoard on top.

:class:`TrainerWriter` is shared by :class:`~lightning_edge.lightning.energy_profiler.EnergyProfilerMixin` and the
power-mode tuner:

* ``get(trainer)``: the TensorBoard writer for charts, tables and images: the Trainer's ``TensorBoardLogger`` run
  (both callbacks land in it), else an own ``SummaryWriter``;
* ``log_metrics(trainer, metrics, step)``: plain numbers (step and epoch energy, power, time) through every other
  logger of the Trainer (``trainer.loggers``: ``CSVLogger``'s ``metrics.csv``, W&B, MLflow, any ``Logger``), with
  the logger's own ``log_metrics``; TensorBoard gets them from the writer, with its descriptions, so they are not
  written twice.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np
    from lightning.pytorch import Trainer
    from lightning.pytorch.loggers import Logger
    from matplotlib.figure import Figure
    from torch import Tensor

__all__ = ["TrainerWriter", "TensorBoardWriter", "next_version", "is_tensorboard"]


class TensorBoardWriter(Protocol):
    """What the callbacks use of a TensorBoard ``SummaryWriter``: torch's, or tensorboardX's (a ``TensorBoardLogger``'s
    experiment when tensorboardX is installed)."""

    def add_scalar(self, tag: str, scalar_value: float, global_step: int | None = None) -> None: ...

    def add_text(self, tag: str, text_string: str, global_step: int | None = None) -> None: ...

    def add_image(self, tag: str, img_tensor: Tensor | np.ndarray, global_step: int | None = None, *,
                  dataformats: str = "CHW") -> None: ...

    def add_figure(self, tag: str, figure: Figure, global_step: int | None = None, *, close: bool = True) -> None: ...

    def add_custom_scalars(self, layout: dict[str, dict[str, list]]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


def next_version(root: str) -> str:
    """``root/version_N`` for the first N not taken."""
    n = 0
    while os.path.exists(os.path.join(root, f"version_{n}")):
        n += 1
    return os.path.join(root, f"version_{n}")


def is_tensorboard(logger: Logger) -> bool:
    """A TensorBoard logger of either Lightning package (its experiment is a ``SummaryWriter``)."""
    return any(c.__name__ == "TensorBoardLogger" for c in type(logger).__mro__)


class TrainerWriter:
    """``get(trainer)``: the Trainer's TensorBoardLogger experiment, else an own ``SummaryWriter`` under
    ``log_dir`` or ``<default_root_dir>/lightning_logs/<name>/version_N`` (the same directory for every later
    call, so fit then test is one run); ``None`` on ranks other than 0. ``log_metrics``: the Trainer's other
    loggers (see the module docstring)."""

    def __init__(self, name: str, log_dir: str | os.PathLike[str] | None = None) -> None:
        self.name = name
        self.log_dir_arg = None if log_dir is None else str(log_dir)
        self.writer: TensorBoardWriter | None = None
        self.log_dir: str | None = None
        self.own = False
        self._own_dir: str | None = None
        #: ``(folder, OSError)`` when an own writer could not be opened there (read-only or full disk): not retried
        self.error: tuple[str, OSError] | None = None

    def get(self, trainer: Trainer | None) -> TensorBoardWriter | None:
        if self.writer is not None or (trainer is not None and not trainer.is_global_zero):
            return self.writer
        for lg in trainer.loggers if trainer is not None else []:
            if is_tensorboard(lg):
                exp = lg.experiment
                if hasattr(exp, "add_scalar"):
                    self.writer, self.log_dir, self.own = exp, str(lg.log_dir), False
                    return exp
        from torch.utils.tensorboard import SummaryWriter

        root = self.log_dir_arg or self._own_dir or next_version(
            os.path.join(str((trainer.default_root_dir if trainer is not None else None) or "."), "lightning_logs",
                         self.name))
        self._own_dir = root
        if self.error is not None:
            return None
        try:
            os.makedirs(root, exist_ok=True)
            self.writer, self.log_dir, self.own = SummaryWriter(root), root, True
        except OSError as exc:  # a read-only or full disk: no TensorBoard, the run goes on (the caller warns)
            self.error, self.log_dir = (root, exc), root
            return None
        return self.writer

    @staticmethod
    def loggers(trainer: Trainer | None) -> list[Logger]:
        """The Trainer's loggers other than TensorBoard's, on rank 0 (none elsewhere)."""
        if trainer is None or not trainer.is_global_zero:
            return []
        return [lg for lg in trainer.loggers if not is_tensorboard(lg)]

    def log_metrics(self, trainer: Trainer | None, metrics: dict[str, float], step: int) -> None:
        """``metrics`` (finite values only) through each of the Trainer's other loggers, at ``step``."""
        out = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
        if not out:
            return
        for lg in self.loggers(trainer):
            lg.log_metrics(out, step=int(step))

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        """Close an own writer (the logger's belongs to the logger); the next ``get`` opens the same directory."""
        if self.own and self.writer is not None:
            self.writer.close()
        self.writer = None
        self.own = False
