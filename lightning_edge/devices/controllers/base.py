"""The one interface every power-mode controller implements, and the safety logic they share.

A controller switches one board between the modes of its :class:`PowerModeSpace`::

    with get_controller("sim:orin-agx") as ctl:      # the mode found here is restored at exit
        applied = ctl.apply("8c/1344/727/2133")      # validated, written, read back
        print(applied.settled, applied.source)       # what the board actually settled at

Subclasses implement five small hooks (read the mode, snapshot the board, write a mode, write a
snapshot back, say why they are unavailable); this class does the rest the same way for all of
them: the state file written before the first write, the advisory lock, exit/signal handlers,
recovery of a leftover from a dead process, dry runs and read-back verification.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TextIO

from lightning_edge.devices import safety as _safety
from lightning_edge.devices.controllers.errors import (
    BoardBusyError,
    BoardReleasedError,
    ModePermissionError,
    ModeVerificationError,
    RecoveryError,
)
from lightning_edge.devices.registry import Backend
from lightning_edge.modes import ModeLike, PowerMode, PowerModeSpace

if TYPE_CHECKING:
    from lightning_edge.catalog import NamedMode
    from lightning_edge.devices.controllers.sysfs import JetsonLayout


@dataclass(frozen=True)
class AppliedMode:
    """The outcome of :meth:`ModeController.apply` (or of a restore).

    ``settled`` is what the board reads back after the change (``None`` for a dry run);
    ``actions`` are the exact writes or commands, in order; ``mismatches`` lists every read-back
    that differs from what was written. ``source`` says how ``settled`` was obtained:
    ``measured`` (read back from hardware), ``simulated`` (the twin) or ``planned`` (dry run).
    """

    requested: PowerMode
    settled: PowerMode | None
    actions: tuple[str, ...] = ()
    dry_run: bool = False
    source: str = "measured"
    mismatches: tuple[str, ...] = ()
    settled_at_s: float | None = None
    details: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def verified(self) -> bool:
        """True when the board reads back exactly the requested mode."""
        return not self.dry_run and not self.mismatches and self.settled == self.requested

    def __str__(self) -> str:
        if self.dry_run:
            return f"{self.requested} (dry run: {len(self.actions)} action(s) planned, nothing written)"
        tail = "" if self.verified else f", settled at {self.settled} ({len(self.mismatches)} mismatch(es))"
        return f"{self.requested} [{self.source}]{tail}"


class ModeController(Backend, ABC):
    """Base class of power-mode controllers: ``current()``, ``apply(mode)``, ``restore()``.

    Common keyword arguments (every subclass accepts them):

    - ``dry_run``: print the exact writes / commands instead of doing them (reads still happen).
    - ``strict``: raise :class:`ModeVerificationError` when the read-back differs (default True).
    - ``state_dir``: where the state and lock files live (default :func:`safety.default_state_dir`).
    - ``safety``: use the state file and lock (default True). Off only for throw-away boards.
    - ``recover``: on start, restore a leftover state file of a dead process (default True).
    - ``handle_exit``: restore at interpreter exit and on SIGTERM/SIGINT (default True).
    - ``out``: stream for dry-run output and notices (default ``sys.stdout`` / ``sys.stderr``).
    """

    #: backend name used by :func:`~lightning_edge.devices.get_controller` and in state files
    name: ClassVar[str] = "abstract"
    #: how values read from this controller were obtained: "measured" or "simulated"
    source: ClassVar[str] = "measured"
    #: whether restoring the board needs root (so the printed recovery command starts with sudo)
    needs_root: ClassVar[bool] = True
    #: the catalogue key of the module this controller drives (``"orin-agx"``; ``""``: not a catalogued module)
    board: str = ""
    #: the sysfs layout of a Jetson driven through its files (None for a board driven otherwise: NVML, the twin)
    layout: JetsonLayout | None = None
    #: the board's nvpmodel named modes (none known: empty)
    named_modes: tuple[NamedMode, ...] = ()
    #: True while this controller restores its own snapshot (taken by this process, not read from a file)
    _restoring_own: bool = False

    def __init__(
        self,
        *,
        space: PowerModeSpace,
        device_id: str,
        dry_run: bool = False,
        strict: bool = True,
        state_dir: str | os.PathLike | None = None,
        safety: bool = True,
        recover: bool = True,
        handle_exit: bool = True,
        out: TextIO | None = None,
    ) -> None:
        self._space = space
        self.device_id = device_id
        self.dry_run = bool(dry_run)
        self.strict = bool(strict)
        self.handle_exit = bool(handle_exit)
        self._out = out
        self._safety = _safety.BoardSafety(device_id, state_dir) if safety else None
        self._session: dict[str, Any] | None = None  # set while the board is changed by us
        self._last: AppliedMode | None = None
        self.recovered: AppliedMode | None = None
        #: why this controller makes no further change (the board was put back on a termination signal), or None
        self.released: str | None = None
        self._inherited = False  # a session inherited through a fork was dropped: this copy never writes the board
        if self._safety is not None and recover:
            self.recovered = self.recover()

    # ------------------------------------------------------------------ to implement
    @abstractmethod
    def _read_mode(self) -> PowerMode:
        """The board's mode now."""

    @abstractmethod
    def _snapshot(self) -> dict[str, Any]:
        """Everything needed to put the board back exactly as it is now (JSON-able)."""

    def _mode_of_snapshot(self, snapshot: dict[str, Any]) -> PowerMode | None:
        """The mode a snapshot corresponds to, for messages and verification (``None``: unreadable); by default the
        snapshot's ``mode`` dict."""
        try:
            return PowerMode.from_dict(snapshot["mode"])
        except (KeyError, TypeError, ValueError):
            return None

    @abstractmethod
    def _apply_mode(self, mode: PowerMode) -> tuple[list[str], list[str]]:
        """Write ``mode`` (or, when ``self.dry_run``, print what would be written).

        Returns ``(actions, mismatches)``: the writes/commands in order, and read-back mismatches.
        Raise ``PermissionError`` as is: the base class turns it into an actionable message.
        """

    @abstractmethod
    def _apply_snapshot(self, snapshot: dict[str, Any]) -> tuple[list[str], list[str]]:
        """Put the board back to ``snapshot``; same contract as :meth:`_apply_mode`."""

    def seconds_since_change(self) -> float | None:
        """Seconds since this controller last changed the mode (``None``: not known; the twin's controller knows)."""
        return None

    def cli_args(self) -> list[str]:
        """Arguments of ``lightning-edge mode ...`` that select this board (for printed commands). Never a --root:
        a root process must not be pointed at another tree; a fake root is reached through the API only
        (``lightning_edge.cli.mode.main(argv, root=...)``)."""
        return ["--device", self.name]

    # ------------------------------------------------------------------ public API
    @property
    def space(self) -> PowerModeSpace:
        """The valid modes of this board."""
        return self._space

    @property
    def active(self) -> bool:
        """True while this controller holds the board and will restore it (in this process)."""
        self._drop_if_inherited()
        return self._session is not None

    @property
    def session_pid(self) -> int | None:
        """The process that opened this controller's session (None: no session)."""
        return self._session.get("pid") if self._session is not None else None

    def forget_session(self, reason: str) -> None:
        """Drop a session this process did not open (inherited through a fork): nothing is restored, unlocked or
        written (the parent owns the board, its lock and its state file), and this copy of the controller makes no
        further change (:class:`BoardReleasedError` names ``reason``)."""
        if self._session is None:
            return
        self._session = None
        self._inherited = True
        self.released = self.released or reason
        if self._safety is not None:
            self._safety.lock.forget()

    def _drop_if_inherited(self) -> None:
        """A session opened by another process (this one is a forked child) is never acted on: dropped here."""
        if self._session is not None and self._session.get("pid") != os.getpid():
            self.forget_session(f"a fork (this process, {os.getpid()}, is a child of pid {self._session.get('pid')}, "
                                "which owns the board)")

    @property
    def original(self) -> PowerMode | None:
        """The mode found when this controller first took the board (the restore target)."""
        return self._session["original_mode"] if self._session else None

    @property
    def state_path(self) -> str | None:
        return str(self._safety.state.path) if self._safety else None

    def current(self) -> PowerMode:
        """The board's mode now (read from the board, or the twin's simulated mode)."""
        return self._read_mode()

    def apply(self, mode: ModeLike) -> AppliedMode:
        """Switch the board to ``mode`` (a PowerMode or a label like ``"8c/1344/727/2133"``).

        The first call takes the board's lock, snapshots the board and writes the state file;
        the snapshot is restored by :meth:`restore`, by the context manager, at exit, or by the
        next controller to start if this process dies. Returns the requested and settled mode.
        """
        target = self._space.coerce(mode)
        self._drop_if_inherited()
        if self.dry_run:
            self._say(
                f"# dry run: {self.name} would switch {self.device_id} to {target} ({target.describe()})"
            )
            actions, _ = self._apply_mode(target)
            self._last = AppliedMode(target, None, tuple(actions), dry_run=True, source="planned")
            return self._last
        # a signal inside the switch is acted on once it is complete (safety.critical): the board is then restored
        # and this controller released, so nothing below writes again
        with _safety.critical():
            self._refuse_if_released()
            self.begin()
            self._write_state(phase="applying", applied=target)
            try:
                actions, mismatches = self._apply_mode(target)
            except PermissionError as exc:
                if isinstance(exc, ModePermissionError):
                    raise
                raise ModePermissionError.for_path(exc.filename or str(exc)) from exc
            settled = self._read_mode()
            self._write_state(phase="applied", applied=target, settled=settled)
        self._refuse_if_released(undone=target)
        if settled != target and not mismatches:
            mismatches = [f"mode reads back as {settled} ({settled.describe()}), not {target}"]
        applied = self._last = self._settled(target, settled, actions, mismatches)
        if mismatches and self.strict:
            raise ModeVerificationError(
                f"{self.device_id} did not take mode {target}: it settled at {settled} ({settled.describe()}).\n"
                + "\n".join(f"  {m}" for m in mismatches)
                + "\nThe board may cap this value (thermal or power limits, a different image). The original "
                "mode is restored when this controller restores or exits; pass strict=False to accept "
                "the settled mode.",
                applied,
            )
        return applied

    def begin(self) -> None:
        """Take the board: lock it, snapshot it, write the state file, install exit handlers.

        Called by :meth:`apply` and ``__enter__``; a no-op when already taken or in a dry run.
        """
        self._drop_if_inherited()
        if self._session is not None or self.dry_run:
            return
        with _safety.critical():
            self._refuse_if_released()
            self._begin()

    def _begin(self) -> None:
        prior = None
        if self._safety is not None:
            self._safety.lock.acquire()
            try:
                prior = self._safety.read()
                if prior is not None and prior.get("pid") is not None:
                    # a leftover that appeared after we started (or recover=False): handle it now
                    self._recover_locked(prior)
                    prior = self._safety.read()
                if prior is not None and not prior.get("kept"):
                    prior = None
            except BaseException:
                self._safety.lock.release()
                raise
        snap = self._snapshot()
        self._session = {
            "snapshot": snap,
            "original_mode": self._mode_of_snapshot(snap),
            "kept_state": prior,
            "pid": os.getpid(),
        }
        _safety.track_session(self)
        self._write_state(phase="started", applied=None)
        if self.handle_exit:
            _safety.register(self)

    def restore(self) -> AppliedMode | None:
        """Put the board back to the mode found at start; returns what was done, ``None`` if nothing to do.

        Without an active session (another process changed the board, e.g. ``mode set``), restores
        the original recorded in the board's state file, if there is one. A signal that arrives meanwhile is acted
        on once the restore is complete.
        """
        self._drop_if_inherited()
        if self._inherited:
            return None  # a forked child's copy: the board, its state file and its lock are the parent's
        with _safety.critical():
            return self._restore()

    def _restore(self) -> AppliedMode | None:
        if self.dry_run:
            state = self._safety.read() if self._safety else None
            if not state or "snapshot" not in state:
                self._say(f"# dry run: nothing to restore on {self.device_id} (no state file)")
                return None
            target = self._mode_from_state(state)
            self._say(f"# dry run: {self.name} would restore {self.device_id} to {target}")
            actions, _ = self._apply_snapshot(state["snapshot"])
            return AppliedMode(target or self.current(), None, tuple(actions), dry_run=True, source="planned")
        if self._session is not None:
            snap = self._session["snapshot"]
            kept = self._session["kept_state"]
            self._restoring_own = True  # this process's own snapshot: not taken from a file
            try:
                result = self._finish_restore(snap, kept, reason="restore")
            except BaseException as exc:
                self._notice(self.restore_failure_message(exc, self._session["original_mode"]))
                raise
            finally:
                self._restoring_own = False
            self._end_session()
            return result
        if self._safety is None:
            return None
        state = self._safety.read()
        if not state or "snapshot" not in state:
            return None
        self._safety.lock.acquire()
        try:
            state = self._safety.read()
            if not state or "snapshot" not in state:
                return None
            kept = state.get("kept_state") if not state.get("kept") else None
            try:
                return self._finish_restore(state["snapshot"], kept, reason="restore", from_file=True)
            except RecoveryError:
                raise
            except BaseException as exc:
                self._notice(self.restore_failure_message(exc, self._mode_from_state(state)))
                raise
        finally:
            self._safety.lock.release()

    def keep(self) -> None:
        """Leave the board in the applied mode after this process ends (what ``mode set`` does).

        The state file stays, owned by nobody, so ``lightning-edge mode restore`` can still put
        back the mode found before the first lightning_edge change.
        """
        self._drop_if_inherited()
        with _safety.critical():
            self._keep()

    def _keep(self) -> None:
        if self._session is None:
            return
        if self._safety is not None:
            kept = self._session["kept_state"]
            snap = kept["snapshot"] if kept else self._session["snapshot"]
            rec = self._new_record(snap, self._mode_of_snapshot(snap), pid=None, kept=True, phase="kept",
                                   applied=self._last.settled.to_dict() if self._last and self._last.settled else None)
            if kept:
                rec["started_at"] = kept.get("started_at", rec["started_at"])
            self._safety.state.write(rec)
        self._end_session()

    def close(self) -> None:
        """Restore the board if this controller changed it (in this process)."""
        self._drop_if_inherited()
        if self._session is not None:
            self.restore()

    def __enter__(self) -> ModeController:
        self.begin()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._drop_if_inherited()
        if self._session is None:
            return
        try:
            self.restore()
        except Exception as rexc:
            if exc is None:
                raise
            print(f"lightning_edge: restoring {self.device_id} failed: {rexc}", file=sys.stderr)

    # ------------------------------------------------------------------ recovery
    def recover(self) -> AppliedMode | None:
        """Restore the board if a process died leaving it changed (a leftover state file).

        Does nothing when there is no state file, when its owner is alive (it holds the lock), or
        when the board was deliberately left in a mode (``mode set``). Raises :class:`RecoveryError`
        with the exact command to run when the board cannot be written from here.
        """
        if self._safety is None:
            return None
        self._drop_if_inherited()
        if self._inherited:
            return None  # a forked child never recovers its parent's board
        state = self._safety.read()
        if not state or state.get("pid") is None:
            return None
        if self.dry_run:
            target = self._mode_from_state(state)
            self._say(
                f"# dry run: leftover state file {self._safety.state.path} from pid {state.get('pid')}; "
                f"would restore {self.device_id} to {target}"
            )
            if "snapshot" in state:
                self._apply_snapshot(state["snapshot"])
            return None
        with _safety.critical():
            try:
                self._safety.lock.acquire()
            except BoardBusyError:
                return None  # its owner is alive and will restore it
            try:
                state = self._safety.read()
                if not state or state.get("pid") is None:
                    return None
                return self._recover_locked(state)
            finally:
                if self._session is None:
                    self._safety.lock.release()

    def _recover_locked(self, state: dict[str, Any]) -> AppliedMode | None:
        """Restore a leftover; the caller holds the lock (so its owner is gone)."""
        assert self._safety is not None
        path = self._safety.state.path
        if state.get("corrupt") or "snapshot" not in state:
            raise self._unbelievable_state(state.get("reason") or "it records no snapshot of the board")
        pid = state.get("pid")
        target = self._mode_from_state(state)
        applied = (state.get("applied") or {}) if isinstance(state.get("applied"), dict) else {}
        applied_txt = str(PowerMode.from_dict(applied)) if applied else "an unknown mode"
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state.get("updated_at", 0)))
        rebooted = state.get("boot_id") and _safety.boot_id() and state["boot_id"] != _safety.boot_id()
        self._notice(
            f"lightning_edge: process {pid} ended at {when} or later without restoring {self.device_id} "
            f"(phase {state.get('phase')!r}, switching to {applied_txt}); restoring the original mode "
            f"{target} from {path}"
            + (" (the machine has rebooted since: the recorded original is re-applied)" if rebooted else "")
        )
        try:
            result = self._finish_restore(state["snapshot"], state.get("kept_state"), reason="recovery",
                                          from_file=True)
        except PermissionError as exc:
            cmd = self.restore_command()
            raise RecoveryError(
                f"process {pid} died leaving {self.device_id} in {applied_txt}; the original mode {target} "
                f"is recorded in {path} but restoring it needs more permission than this process has "
                f"({exc}). {self._where_now()}.\nRun exactly:\n    {cmd}",
                command=cmd,
                path=str(path),
            ) from exc
        return result

    def _unbelievable_state(self, reason: str) -> RecoveryError:
        """The state file cannot be believed (``reason``): nothing is written from it, and it is kept."""
        assert self._safety is not None
        path = self._safety.state.path
        return RecoveryError(
            f"the state file {path} cannot be believed ({reason}), so the original power mode of "
            f"{self.device_id} is unknown and nothing was written to the board. {self._where_now()}. Put the "
            f"board back by hand (on a Jetson: `sudo nvpmodel -m <your mode>` and `sudo jetson_clocks --restore` "
            f"if you use it), then delete {path}.",
            command=f"rm {shlex.quote(str(path))}",
            path=str(path),
        )

    def _where_now(self) -> str:
        try:
            now = self._read_mode()
            return f"The board is now in {now} ({now.describe()})"
        except Exception as rexc:  # noqa: BLE001 - the board may not answer at all
            return f"The board's mode is unknown (reading it failed too: {rexc})"

    # ------------------------------------------------------------------ internals
    def _refuse_if_released(self, undone: PowerMode | None = None) -> None:
        """Raise :class:`BoardReleasedError` once the board was put back on a termination signal."""
        if self.released is None:
            return
        if self._inherited:
            raise BoardReleasedError(
                f"{self.device_id}: this controller's session was opened by another process and this one is its "
                f"forked child ({self.released}): a child never switches, restores or unlocks its parent's board. "
                "Open a new controller in the child if it must change modes (it then waits for the parent's lock).")
        what = f"the switch to {undone} was undone: " if undone is not None else ""
        raise BoardReleasedError(
            f"{self.device_id}: {what}the board was put back to its original mode on {self.released}, and this "
            "controller makes no further change in this process (the process is ending). A new run (a new "
            "controller) may switch modes again.")

    def _finish_restore(self, snapshot: dict[str, Any], kept: dict | None, reason: str,
                        from_file: bool = False) -> AppliedMode:
        target = self._mode_of_snapshot(snapshot)
        try:
            actions, mismatches = self._apply_snapshot(snapshot)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            if not from_file:
                raise
            # a snapshot this controller cannot read (a hand-edited or forged state file): every controller plans
            # its writes from the snapshot before writing any, so the board is untouched
            raise self._unbelievable_state(f"its snapshot is not one of a {self.name} board: "
                                           f"{type(exc).__name__}: {str(exc)[:80]}") from None
        except PermissionError as exc:
            if isinstance(exc, ModePermissionError):
                raise
            raise ModePermissionError.for_path(exc.filename or str(exc), "restore") from exc
        settled = self._read_mode()
        if self._safety is not None:
            if kept:
                self._safety.state.write(kept)
            else:
                self._safety.state.remove()
        result = self._settled(target or settled, settled, actions, mismatches, details={"reason": reason})
        if reason == "recovery":
            self.recovered = result
        if mismatches:
            self._notice(
                f"lightning_edge: {self.device_id} restored to {settled}, but read-back differs:\n"
                + "\n".join(f"  {m}" for m in mismatches)
            )
        return result

    def _settled(self, target: PowerMode, settled: PowerMode, actions: list[str], mismatches: list[str],
                 **fields: Any) -> AppliedMode:
        """What a change written to the board did: ``settled`` read back now, from this controller's ``source``."""
        return AppliedMode(target, settled, tuple(actions), source=self.source, mismatches=tuple(mismatches),
                           settled_at_s=time.time(), **fields)

    def restore_failure_message(self, exc: BaseException, original: PowerMode | None = None) -> str:
        """What to tell a person when putting the board back failed: the mode it is in now (read from the board),
        the original, where that is recorded, and the exact command that finishes the restore."""
        orig = f"original {original}" if original is not None else "original mode"
        rec = f"; the {orig} is recorded in {self.state_path}" if self.state_path else f", not the {orig}"
        return (f"lightning_edge: restoring {self.device_id} failed ({type(exc).__name__}: {exc}). "
                f"{self._where_now()}{rec}. Finish the restore with:\n    {self.restore_command()}")

    def _end_session(self) -> None:
        self._session = None
        _safety.untrack_session(self)
        _safety.unregister(self)
        if self._safety is not None:
            self._safety.lock.release()

    def _restore_on_exit(self, reason: str) -> None:
        self._drop_if_inherited()
        if self._session is not None:
            self._notice(f"lightning_edge: restoring {self.device_id} on {reason}")
            self.restore()

    def _write_state(
        self, *, phase: str, applied: PowerMode | None, settled: PowerMode | None = None
    ) -> None:
        if self._safety is None or self._session is None or self._session.get("pid") != os.getpid():
            return
        old = self._safety.read() or {}
        rec = self._new_record(self._session["snapshot"], self._session["original_mode"], phase=phase, kept=False,
                               applied=applied.to_dict() if applied else None,
                               settled=settled.to_dict() if settled else None, kept_state=self._session["kept_state"])
        if old.get("pid") == os.getpid() and "started_at" in old:
            rec["started_at"] = old["started_at"]
        self._safety.state.write(rec)

    def _new_record(self, snapshot: dict[str, Any], original: PowerMode | None, **fields: Any) -> dict[str, Any]:
        """A state-file record of this board: the snapshot, its mode in words and as a dict, the restore command."""
        assert self._safety is not None
        return self._safety.new_record(controller=self.name, snapshot=snapshot,
                                       original=str(original) if original else None,
                                       original_mode=original.to_dict() if original else None,
                                       restore_command=self.restore_command(), **fields)

    def _mode_from_state(self, state: dict[str, Any]) -> PowerMode | None:
        if isinstance(state.get("original_mode"), dict):
            try:
                return PowerMode.from_dict(state["original_mode"])
            except ValueError:
                pass
        if "snapshot" in state:
            return self._mode_of_snapshot(state["snapshot"])
        return None

    @property
    def _snapshot_trusted(self) -> bool:
        """Whether the snapshot being restored may tell root what to write (an nvpmodel.conf text): this process's
        own, or read from a state dir only root could have chosen or changed."""
        return self._safety is None or self._restoring_own or self._safety.trusted_by_root

    def restore_command(self) -> str:
        """The exact command that puts this board back from its state file."""
        args = ["lightning-edge", "mode", "restore", *self.cli_args()]
        if self._safety is not None and not self._safety.is_default_dir:
            args += ["--state-dir", str(self._safety.state_dir)]
        # root started through sudo (SUDO_UID): the person reading this is not root, so the command needs sudo too
        under_sudo = os.geteuid() == 0 and bool(os.environ.get("SUDO_UID"))
        prefix = ["sudo"] if self.needs_root and (os.geteuid() != 0 or under_sudo) else []
        if prefix and not under_sudo and self._safety is not None and self._safety.is_default_dir:
            # root has its own state dir: point sudo at ours
            args += ["--state-dir", str(self._safety.state_dir)]
        return " ".join(shlex.quote(a) for a in prefix + args)

    def _say(self, text: str) -> None:
        print(text, file=self._out or sys.stdout)

    def _notice(self, text: str) -> None:
        print(text, file=self._out or sys.stderr)

    def __repr__(self) -> str:
        flags = " dry-run" if self.dry_run else ""
        return f"<{type(self).__name__} {self.device_id}{flags} space={self._space!r}>"
