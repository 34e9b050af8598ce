"""Putting the board back: state file, advisory lock, exit and signal handlers.

- **State file** (JSON, one per board, ``<state_dir>/<device_id>.json``): written *before* the first
  write to the board, it records who is changing the board (pid), what the board looked like at
  start (a controller-specific snapshot, plus the mode in words) and the mode being applied. It is
  deleted when the board is restored. A state file whose owner is gone (SIGKILL, power loss) is a
  *leftover*: the next controller to start on that board restores the snapshot, or tells the user
  exactly what to run.
- **Advisory lock** (``fcntl.flock`` on ``<state_dir>/<device_id>.lock``): held from the first change
  until the restore, so two processes never fight over one board. The kernel drops it when the
  holder dies, which is also how a leftover is told apart from a live owner (no pid guessing).
- **Exit handlers**: ``atexit`` plus SIGTERM/SIGINT/SIGHUP/SIGQUIT handlers restore every controller that still
  has a changed board, then chain to the previous handler (or re-raise the signal with its default action). A
  restore that fails says the mode the board is in now and the exact command that finishes the restore; the state
  file stays for that command (and for the next controller to start on the board).
  A signal the process ignores (``SIG_IGN``: e.g. SIGINT of a job started with ``&`` or ``nohup`` from a
  script) gets no handler: it cannot end the process, so restoring on it would only put the board back
  under a run that goes on.

The state directory is ``$LIGHTNING_EDGE_STATE_DIR`` if set, else platformdirs' user state dir for
``lightning_edge`` (``~/.local/state/lightning_edge`` on Linux; ``/root/.local/state/...`` under sudo). It must be a
real directory owned by the user (or root, or the user who ran sudo) and not writable by others; it is created
0700. Lock, state and temporary files are opened without following symbolic links (``O_NOFOLLOW``; temporary files
``O_EXCL`` with random names, then renamed), are plain files of their own and private (0600); the recorded command
line has URL passwords and secret-named options redacted.
"""

from __future__ import annotations

import atexit
import errno
import json
import os
import re
import secrets
import signal
import stat
import sys
import threading
import time
from pathlib import Path
from typing import Any

from lightning_edge.devices.controllers.errors import BoardBusyError

try:  # pragma: no cover - fcntl exists on every POSIX system; Windows gets no locking
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

STATE_VERSION = 1
ENV_STATE_DIR = "LIGHTNING_EDGE_STATE_DIR"


def default_state_dir() -> Path:
    """``$LIGHTNING_EDGE_STATE_DIR``, else the user state dir of ``lightning_edge`` (platformdirs)."""
    env = os.environ.get(ENV_STATE_DIR)
    if env:
        return Path(env).expanduser()
    try:
        from platformdirs import user_state_dir

        return Path(user_state_dir("lightning_edge", appauthor=False))
    except ImportError:  # pragma: no cover - platformdirs is a dependency
        return Path.home() / ".local" / "state" / "lightning_edge"


def pid_alive(pid: int | None) -> bool:
    """True if a process with this pid exists (it may belong to another user)."""
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:  # pragma: no cover
        return False
    return True


def boot_id() -> str | None:
    """This boot's id (``/proc/sys/kernel/random/boot_id``): tells a crash from a power loss / reboot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _safe_name(device_id: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in device_id)


# --------------------------------------------------------------------------- files a root process can safely write
class StateDirError(PermissionError):
    """The state directory, or a file in it, is not safe to use (a symbolic link, owned by someone else, writable
    by others): refused, with the command that makes it safe."""


_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
FILE_MODE = 0o600
DIR_MODE = 0o700


def _owner_name(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _trusted_owners() -> set[int]:
    """Who may own the state directory: this user and root; under sudo also the user who ran sudo (its state dir
    is what the printed ``sudo lightning-edge mode restore --state-dir ...`` points at; every file in it is opened
    without following links, so that user cannot redirect root's writes)."""
    if not hasattr(os, "geteuid"):  # pragma: no cover - Windows
        return set()
    owners = {os.geteuid(), 0}
    if os.geteuid() == 0:
        try:
            owners.add(int(os.environ.get("SUDO_UID", "")))
        except ValueError:
            pass
    return owners


def ensure_state_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` (mode 0700) if needed and check it is safe for a root process to write into: a real
    directory (not a symbolic link), owned by this user (or root, or the user who ran sudo), not writable by group
    or others. Raises :class:`StateDirError` saying how to fix it."""
    d = Path(path)
    try:
        d.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if stat.S_ISLNK(st.st_mode):
        raise StateDirError(f"the state directory {d} is a symbolic link (to {os.readlink(d)}): lightning_edge "
                            "writes the board's lock and state there, possibly as root, and follows no links. "
                            f"Use the real directory (--state-dir {os.path.realpath(d)}) or remove the link.")
    if not stat.S_ISDIR(st.st_mode):
        raise StateDirError(f"the state directory {d} is not a directory")
    owners = _trusted_owners()
    if owners and st.st_uid not in owners:
        raise StateDirError(f"the state directory {d} is owned by {_owner_name(st.st_uid)}, not by you "
                            f"({_owner_name(os.geteuid())}): another user could replace the board's lock and state "
                            f"files. Use your own directory (--state-dir, or ${ENV_STATE_DIR}).")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise StateDirError(f"the state directory {d} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): "
                            f"anyone could plant files where root writes. Fix: chmod go-w {d}")
    return d


def _open_nofollow(path: Path, flags: int, mode: int = FILE_MODE) -> int:
    """``os.open`` without following a symbolic link at ``path``; a link is a :class:`StateDirError`."""
    try:
        return os.open(path, flags | _O_NOFOLLOW | _O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EMLINK and path.is_symlink()):
            raise StateDirError(f"{path} is a symbolic link: refused (lightning_edge never follows links in its "
                                f"state directory; something planted it). Remove it: rm {path}") from None
        raise


def _check_own_file(fd: int, path: Path) -> None:
    """A regular file with one link (a hard link to someone else's file is refused), made private (0600)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        raise StateDirError(f"{path} is not a plain file of its own (a device, a fifo or a hard link to another "
                            f"file): refused. Remove it: rm {path}")
    if stat.S_IMODE(st.st_mode) != FILE_MODE and st.st_uid == os.geteuid():
        os.fchmod(fd, FILE_MODE)  # left 0644 by an older version


def _read_nofollow(path: Path, limit: int = 1 << 20) -> str:
    fd = _open_nofollow(path, os.O_RDONLY)
    try:
        _check_own_file(fd, path)
        chunks = []
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            chunks.append(b)
            if sum(map(len, chunks)) > limit:
                raise StateDirError(f"{path} is larger than {limit} bytes: not a lightning_edge state file")
        return b"".join(chunks).decode("utf-8", "replace")
    finally:
        os.close(fd)


_URL_PASSWORD = re.compile(r"(?P<pre>[A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:)(?P<pw>[^@\s]*)(?P<at>@)")
_SECRET_OPT = re.compile(r"^(?P<opt>--?[A-Za-z0-9_-]*(?:pass(?:word|wd)?|secret|token|api[_-]?key|credentials?)"
                         r"[A-Za-z0-9_-]*)(?:=(?P<val>.*))?$", re.IGNORECASE)


def redact_argv(argv: list[str]) -> str:
    """``argv`` as one line, with URL passwords (``scheme://user:PASSWORD@host``) and the values of options named
    like a secret (``--password``, ``--token=...``, ``--api-key``) replaced by ``***``."""
    out: list[str] = []
    hide_next = False
    for a in map(str, argv):
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        m = _SECRET_OPT.match(a)
        if m:
            if m.group("val") is None:
                hide_next = True
                out.append(a)
            else:
                out.append(f"{m.group('opt')}=***")
            continue
        out.append(_URL_PASSWORD.sub(lambda m: f"{m.group('pre')}***{m.group('at')}", a))
    return " ".join(out)


class StateFile:
    """A small JSON file written atomically: a new temporary file (random name, ``O_EXCL|O_NOFOLLOW``, 0600) in the
    same checked directory, fsync, rename over the state file. Never follows a symbolic link."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def read(self) -> dict[str, Any] | None:
        try:
            text = _read_nofollow(self.path)
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            # a torn write cannot happen (rename is atomic); this is a file someone edited by hand
            # pid -1: treated as a leftover, so recovery stops and says what to do
            return {"corrupt": True, "pid": -1, "path": str(self.path), "text": text[:200]}
        return data if isinstance(data, dict) else None

    def write(self, data: dict[str, Any]) -> None:
        ensure_state_dir(self.path.parent)
        payload = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
        for _ in range(100):
            tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(8)}.tmp")
            try:
                fd = _open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover - 100 collisions of 64 random bits
            raise StateDirError(f"cannot create a temporary file next to {self.path}")
        try:
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)  # replaces a planted link itself, never its target
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        try:  # make the rename itself durable (power loss right after a write)
            dfd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:  # pragma: no cover
            pass

    def remove(self) -> None:
        try:
            self.path.unlink()  # unlink removes a link itself
        except FileNotFoundError:
            pass

    def exists(self) -> bool:
        return os.path.lexists(self.path)


class BoardLock:
    """Exclusive, non-blocking advisory lock on one board (``fcntl.flock``), naming its holder's pid.

    The lock file is opened without following links (``O_NOFOLLOW``), must be a plain file of its own, and is
    private (0600); the directory is checked by :func:`ensure_state_dir`."""

    def __init__(self, path: str | os.PathLike, device_id: str = "") -> None:
        self.path = Path(path)
        self.device_id = device_id
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder_pid(self) -> int | None:
        try:
            text = _read_nofollow(self.path, limit=4096).strip()
        except OSError:
            return None
        try:
            return int(text.split()[0])
        except (ValueError, IndexError):
            return None

    def acquire(self) -> None:
        """Take the lock or raise :class:`BoardBusyError` naming the pid that holds it."""
        if self._fd is not None:
            return
        ensure_state_dir(self.path.parent)
        fd = _open_nofollow(self.path, os.O_RDWR | os.O_CREAT)
        try:
            _check_own_file(fd, self.path)
        except BaseException:
            os.close(fd)
            raise
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                pid = self.holder_pid()
                who = f"process {pid}" if pid else "another process"
                if pid == os.getpid():
                    who = f"another controller in this process (pid {pid})"
                raise BoardBusyError(
                    f"board {self.device_id or self.path.stem} is busy: {who} holds its power-mode lock "
                    f"({self.path}). Two processes must not switch modes on one board at once: wait for it "
                    f"to finish (it restores the board when it ends) or stop it"
                    + (f" (kill {pid})" if pid and pid != os.getpid() else "")
                    + ".",
                    pid=pid,
                    lock_path=str(self.path),
                ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError:  # pragma: no cover
            pass
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.release()
        except Exception:
            pass


class BoardSafety:
    """The state file and lock of one board, in ``state_dir``."""

    def __init__(self, device_id: str, state_dir: str | os.PathLike | None = None) -> None:
        self.device_id = device_id
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        name = _safe_name(device_id)
        self.state = StateFile(self.state_dir / f"{name}.json")
        self.lock = BoardLock(self.state_dir / f"{name}.lock", device_id)

    @property
    def is_default_dir(self) -> bool:
        return self.state_dir == default_state_dir()

    @property
    def trusted_by_root(self) -> bool:
        """Whether a root process may take file names or file contents from this state dir's state file: only when
        the dir is root's own. (Under sudo, a user's state dir is used for its snapshot of knob values, which go
        to the board's fixed knob files; never for a path or a configuration root would write.)"""
        if not hasattr(os, "geteuid") or os.geteuid() != 0:
            return True
        try:
            return os.lstat(self.state_dir).st_uid == 0
        except OSError:
            return True  # not there yet: it will be created by (and owned by) root

    def new_record(self, **fields: Any) -> dict[str, Any]:
        now = time.time()
        rec = {
            "version": STATE_VERSION,
            "device_id": self.device_id,
            "pid": os.getpid(),
            "argv": redact_argv(sys.argv)[:300],
            "boot_id": boot_id(),
            "started_at": now,
            "updated_at": now,
        }
        rec.update(fields)
        return rec


# --------------------------------------------------------------------------- exit and signal handlers
_ACTIVE: list = []  # controllers with a changed board, in the order they started
_REG_LOCK = threading.RLock()
_ATEXIT_DONE = False
_PREVIOUS: dict[int, Any] = {}
#: the signals that end a run and restore the board first: SIGTERM (kill, systemd, a scheduler), SIGINT (Ctrl-C),
#: SIGHUP (the terminal or ssh session went away), SIGQUIT (Ctrl-\\); SIGKILL cannot be caught (the next start of
#: a controller, or ``lightning-edge mode restore``, puts the board back)
HANDLED_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT") if hasattr(signal, n))


def register(controller) -> None:
    """Restore ``controller`` at interpreter exit or on SIGTERM/SIGINT, until :func:`unregister`."""
    global _ATEXIT_DONE
    with _REG_LOCK:
        if controller not in _ACTIVE:
            _ACTIVE.append(controller)
        if not _ATEXIT_DONE:
            atexit.register(_restore_all, "interpreter exit")
            _ATEXIT_DONE = True
        _install_signal_handlers()


def unregister(controller) -> None:
    with _REG_LOCK:
        if controller in _ACTIVE:
            _ACTIVE.remove(controller)
        if not _ACTIVE:
            _uninstall_signal_handlers()


def active_controllers() -> list:
    return list(_ACTIVE)


def _restore_all(reason: str) -> None:
    """Restore every registered controller, newest first; never raises."""
    with _REG_LOCK:
        todo = list(reversed(_ACTIVE))
    for ctl in todo:
        try:
            ctl._restore_on_exit(reason)
        except BaseException as exc:  # noqa: BLE001 - an exit path must not raise
            # the controller has already said where the board is and what finishes the restore
            print(
                f"lightning_edge: could not restore the power mode of {getattr(ctl, 'device_id', ctl)} "
                f"on {reason}: {exc}",
                file=sys.stderr,
            )
        finally:
            unregister(ctl)


def _on_signal(signum: int, frame) -> None:
    name = signal.Signals(signum).name
    prev = _PREVIOUS.get(signum, signal.SIG_DFL)
    _restore_all(f"signal {name}")
    _uninstall_signal_handlers()
    if callable(prev):
        prev(signum, frame)  # e.g. default_int_handler raises KeyboardInterrupt
    else:  # SIG_DFL (or None: installed from C): die of the same signal, as without us
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # signal.signal only works in the main thread; atexit still covers normal exits
    for sig in HANDLED_SIGNALS:
        if sig in _PREVIOUS:
            continue
        try:
            prev = signal.getsignal(sig)
            if prev == signal.SIG_IGN:
                continue  # the signal cannot end this process: nothing to restore on
            signal.signal(sig, _on_signal)
        except (ValueError, OSError):  # pragma: no cover
            continue
        _PREVIOUS[sig] = prev


def _uninstall_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, prev in list(_PREVIOUS.items()):
        try:
            if signal.getsignal(sig) is _on_signal:
                signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        except (ValueError, OSError):  # pragma: no cover
            pass
        _PREVIOUS.pop(sig, None)
