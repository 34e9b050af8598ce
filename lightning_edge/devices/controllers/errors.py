"""Errors raised by power-mode controllers. Each message says what happened and how to fix it.

They subclass ``RuntimeError`` (and ``PermissionError`` where it applies) so the ``lightning-edge``
command line prints them without a traceback.
"""

from __future__ import annotations

DOC = "docs/power-modes.md"


class ModeControllerError(RuntimeError):
    """Base class of every power-mode controller error."""


class ControllerUnavailableError(ModeControllerError):
    """No controller of the requested kind can run here; ``reasons`` maps backend -> why not."""

    def __init__(self, message: str, reasons: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.reasons = dict(reasons or {})


class ModePermissionError(ModeControllerError, PermissionError):
    """A write to the board was refused by the operating system (not root, no udev rule / sudoers line)."""

    def __init__(self, message: str, path: str | None = None) -> None:
        ModeControllerError.__init__(self, message)
        self.path = path
        self.filename = path

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    @classmethod
    def for_path(cls, path: str, action: str = "write") -> ModePermissionError:
        return cls(
            f"permission denied: cannot {action} {path}. Switching power modes writes to sysfs and debugfs: "
            f"run as root (sudo), or install the udev rule and sudoers line from {DOC} "
            f"(section 'Permissions') and log in again.",
            path,
        )


class ModeWriteError(ModeControllerError):
    """The board rejected a write (EBUSY, EINVAL...); the mode is partly applied until restored."""


class ModeVerificationError(ModeControllerError):
    """Read-back after a mode change does not match what was written: the board refused or clamped a value.

    ``applied`` is the :class:`~lightning_edge.devices.controllers.base.AppliedMode` with the settled values.
    """

    def __init__(self, message: str, applied=None) -> None:
        super().__init__(message)
        self.applied = applied


class BoardBusyError(ModeControllerError):
    """Another process holds the board's advisory lock; ``pid`` is that process (``None`` if unknown)."""

    def __init__(self, message: str, pid: int | None = None, lock_path: str | None = None) -> None:
        super().__init__(message)
        self.pid = pid
        self.lock_path = lock_path


class RecoveryError(ModePermissionError):
    """A leftover state file says the board was left in a changed mode, and it could not be restored here.

    ``command`` is exactly what to run to put the board back.
    """

    def __init__(self, message: str, command: str, path: str | None = None) -> None:
        super().__init__(message, path)
        self.command = command


class RebootRequiredError(ModeControllerError):
    """nvpmodel wants a reboot to enter the requested mode; lightning_edge never reboots a board."""


class BoardReleasedError(ModeControllerError):
    """The board was put back on a termination signal (SIGTERM, SIGINT, ...): this controller makes no further
    change in this process, whatever the signal's previous handler did (Lightning's notes the signal and returns)."""
