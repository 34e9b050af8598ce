"""Where a callback writes TensorBoard: the Trainer's ``TensorBoardLogger`` run, else its own ``SummaryWriter``.

Shared by :class:`~lightning_edge.lightning.energy_profiler.EnergyProfilerMixin` and the power-mode tuner, so
both land in the same TensorBoard run when the Trainer has a TensorBoard logger.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["TrainerWriter", "next_version"]


def next_version(root: str) -> str:
    """``root/version_N`` for the first N not taken."""
    n = 0
    while os.path.exists(os.path.join(root, f"version_{n}")):
        n += 1
    return os.path.join(root, f"version_{n}")


class TrainerWriter:
    """``get(trainer)``: the Trainer's TensorBoardLogger experiment, else an own ``SummaryWriter`` under
    ``log_dir`` or ``<default_root_dir>/lightning_logs/<name>/version_N`` (the same directory for every later
    call, so fit then test is one run); ``None`` on ranks other than 0."""

    def __init__(self, name: str, log_dir: str | os.PathLike[str] | None = None) -> None:
        self.name = name
        self.log_dir_arg = None if log_dir is None else str(log_dir)
        self.writer: Any = None
        self.log_dir: str | None = None
        self.own = False
        self._own_dir: str | None = None
        #: ``(folder, OSError)`` when an own writer could not be opened there (read-only or full disk): not retried
        self.error: tuple[str, OSError] | None = None

    def get(self, trainer: Any) -> Any:
        if self.writer is not None or not bool(getattr(trainer, "is_global_zero", True)):
            return self.writer
        for lg in getattr(trainer, "loggers", None) or []:
            if type(lg).__name__ == "TensorBoardLogger":
                exp = lg.experiment
                if hasattr(exp, "add_scalar"):
                    self.writer, self.log_dir, self.own = exp, str(lg.log_dir), False
                    return exp
        from torch.utils.tensorboard import SummaryWriter

        root = self.log_dir_arg or self._own_dir or next_version(
            os.path.join(str(getattr(trainer, "default_root_dir", ".") or "."), "lightning_logs", self.name))
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

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        """Close an own writer (the logger's belongs to the logger); the next ``get`` opens the same directory."""
        if self.own and self.writer is not None:
            self.writer.close()
        self.writer = None
        self.own = False
