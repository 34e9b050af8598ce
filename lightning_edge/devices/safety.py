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
- **A session belongs to the process that opened it.** A forked child (a DataLoader worker, any helper a library
  forks) inherits the controllers, the handlers and the lock's open file description; after the fork
  (``os.register_at_fork``) the child drops every session without restoring, unlocking or writing anything (the lock
  file's descriptor is closed, which leaves the parent's ``flock`` held), its signal handlers are the ones it had
  before ours, and every handler checks the pid as well: one Ctrl-C sent to the trainer and its workers restores
  once, in the trainer.

The state directory is ``$LIGHTNING_EDGE_STATE_DIR`` if set, else platformdirs' user state dir for
``lightning_edge`` (``~/.local/state/lightning_edge`` on Linux; ``/root/.local/state/...`` under sudo). It must be a
real directory owned by the user (or root, or the user who ran sudo) and not writable by others; it is created
0700. Its path is walked from ``/`` without following a link anyone but root could have planted, and the directory
is held open while its files are used (:func:`open_state_dir`): everything below is relative to that descriptor.
Lock, state and temporary files are opened without following symbolic links (``O_NOFOLLOW``; temporary files
``O_EXCL`` with random names, then renamed), are plain files of their own and private (0600); the recorded command
line has URL passwords and secret-named options redacted.
"""

from __future__ import annotations

import atexit
import errno
import json
import os
import re
import signal
import stat
import sys
import threading
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from lightning_edge._jsonfile import parse_json, replace_in_folder
from lightning_edge.devices.controllers.errors import BoardBusyError

if TYPE_CHECKING:
    from lightning_edge.devices.controllers.base import ModeController

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


_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_MAX_LINKS = 40


def _root_controlled(st: os.stat_result) -> bool:
    """A directory only root can change: owned by root, not writable by group or others."""
    return st.st_uid == 0 and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _link_is_trusted(parent: os.stat_result, link: os.stat_result) -> bool:
    """Whether a symbolic link may be followed: only root could have put it there (a root-only directory), or it
    is root's own link in a sticky root directory (``/tmp``: others cannot replace it)."""
    if _root_controlled(parent):
        return True
    return parent.st_uid == 0 and bool(parent.st_mode & stat.S_ISVTX) and link.st_uid == 0


class _StateDir:
    """The state directory, opened once: every file in it is opened, renamed and removed relative to this
    descriptor, so what was checked is what is used (a directory swapped for a link afterwards changes nothing).

    ``root_only``: no one but root could have chosen or changed this directory (every directory on the way to it,
    and it, root's own); a root process takes file contents that tell it what to write only from such a one."""

    def __init__(self, path: Path, fd: int, root_only: bool) -> None:
        self.path, self.fd, self.root_only = path, fd, root_only

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> _StateDir:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def open_state_dir(path: str | os.PathLike, create: bool = True) -> _StateDir:
    """Open the state directory, walking its path from ``/`` one component at a time without letting the kernel
    follow a symbolic link: a link on the way is followed only when nobody but root could have put it there (see
    :func:`_link_is_trusted`), the directory itself must not be a link, and it is checked (owner, mode) on the
    opened descriptor. Missing directories are created (the last one 0700) when ``create``; else
    ``FileNotFoundError``. Raises :class:`StateDirError` saying how to fix it."""
    d = Path(os.path.abspath(os.fspath(path)))
    todo = [c for c in d.parts[1:] if c not in ("", ".")]
    fd = os.open("/", os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    root_only = True
    links = 0
    try:
        while todo:
            name = todo.pop(0)
            last = not todo
            if name == "..":
                nfd = os.open("..", os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC, dir_fd=fd)
                os.close(fd)
                fd = nfd
                continue
            try:
                nfd = os.open(name, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, DIR_MODE if last else 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                todo.insert(0, name)
                continue
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise
                lst = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISLNK(lst.st_mode):
                    raise StateDirError(f"{d}: {name} is not a directory") from None
                target = os.readlink(name, dir_fd=fd)
                if last:
                    raise StateDirError(
                        f"the state directory {d} is a symbolic link (to {target}): lightning_edge writes the "
                        "board's lock and state there, possibly as root, and follows no links. Use the real "
                        f"directory (--state-dir {os.path.realpath(d)}) or remove the link.") from None
                parent = os.fstat(fd)
                links += 1
                if links > _MAX_LINKS or not _link_is_trusted(parent, lst):
                    raise StateDirError(
                        f"the state directory {d} is reached through {name}, a symbolic link (to {target}) in a "
                        f"directory {_owner_name(parent.st_uid)} can change: refused (root would follow it "
                        "anywhere). Use a directory reached without links (--state-dir "
                        f"{os.path.realpath(d)}), or root's own state dir.") from None
                parts = [c for c in Path(target).parts if c not in ("", ".")]
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
                    parts = parts[1:]
                todo[0:0] = parts
                continue
            st, parent = os.fstat(nfd), os.fstat(fd)
            # root's, and not replaceable by others: its directory is root's alone, or root's sticky one (/tmp)
            if st.st_uid != 0 or not (_root_controlled(parent)
                                      or (parent.st_uid == 0 and parent.st_mode & stat.S_ISVTX)):
                root_only = False
            os.close(fd)
            fd = nfd
        st = os.fstat(fd)
        owners = _trusted_owners()
        if owners and st.st_uid not in owners:
            raise StateDirError(f"the state directory {d} is owned by {_owner_name(st.st_uid)}, not by you "
                                f"({_owner_name(os.geteuid())}): another user could replace the board's lock and "
                                f"state files. Use your own directory (--state-dir, or ${ENV_STATE_DIR}).")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise StateDirError(f"the state directory {d} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): "
                                f"anyone could plant files where root writes. Fix: chmod go-w {d}")
        return _StateDir(d, fd, root_only)
    except BaseException:
        os.close(fd)
        raise


def _open_nofollow(sd: _StateDir, name: str, flags: int, mode: int = FILE_MODE) -> int:
    """``os.open`` of ``name`` in the opened state dir, without following a symbolic link and without blocking (a
    fifo); a link is a :class:`StateDirError`."""
    try:
        return os.open(name, flags | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK, mode, dir_fd=sd.fd)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise _not_a_plain_file(sd.path / name, "a directory") from None
        if exc.errno == errno.ELOOP or (
                exc.errno == errno.EMLINK and stat.S_ISLNK(os.stat(name, dir_fd=sd.fd, follow_symlinks=False).st_mode)):
            path = sd.path / name
            raise StateDirError(f"{path} is a symbolic link: refused (lightning_edge never follows links in its "
                                f"state directory; something planted it). Remove it: rm {path}") from None
        raise


def _not_a_plain_file(path: Path, what: str) -> StateDirError:
    fix = f"rmdir {path} (or rm -r {path} after checking what is in it)" if what == "a directory" else f"rm {path}"
    return StateDirError(f"{path} is not a plain file of its own ({what}): refused; lightning_edge keeps the "
                         f"board's lock and state there. Remove it: {fix}")


def _check_own_file(fd: int, path: Path) -> None:
    """A regular file with one link (a hard link to someone else's file is refused), made private (0600)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        what = ("a directory" if stat.S_ISDIR(st.st_mode) else "a fifo" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a hard link to another file" if stat.S_ISREG(st.st_mode) else "not a regular file")
        raise _not_a_plain_file(path, what)
    if stat.S_IMODE(st.st_mode) != FILE_MODE and st.st_uid == os.geteuid():
        os.fchmod(fd, FILE_MODE)  # left 0644 by an older version
    fl = fcntl.fcntl(fd, fcntl.F_GETFL) if fcntl is not None else 0
    if fl & _O_NONBLOCK:
        fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~_O_NONBLOCK)


def _read_nofollow(sd: _StateDir, name: str, limit: int = 1 << 20) -> bytes:
    """The bytes of ``name`` in the opened state dir (never through a link; a plain file of its own), at most
    ``limit`` of them (:class:`StateDirError` for a larger file)."""
    path = sd.path / name
    fd = _open_nofollow(sd, name, os.O_RDONLY)
    try:
        _check_own_file(fd, path)
        chunks = []
        n = 0
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            chunks.append(b)
            n += len(b)
            if n > limit:
                raise StateDirError(f"{path} is larger than {limit} bytes: not a lightning_edge state file")
        return b"".join(chunks)
    finally:
        os.close(fd)


_URL_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:@/\s]*):.*@(?P<rest>[^@]*)$", re.S)
_URL_PASSWORD_PARAM = re.compile(r"(?i)(?<=[?&])(password=)[^&]*")
_URL_START = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_SECRET_OPT = re.compile(r"^(?P<opt>--?[A-Za-z0-9_-]*(?:pass(?:word|wd)?|secret|token|api[_-]?key|credentials?)"
                         r"[A-Za-z0-9_-]*)(?:=(?P<val>.*))?$", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, parsable or not: everything from the ``:`` after the user name
    to the *last* ``@`` (a password may hold unescaped ``@`` and ``/``), and a ``password=`` query parameter."""
    m = _URL_USERINFO.match(url)
    if m:
        url = f"{m['scheme']}{m['user']}:***@{m['rest']}"
    return _URL_PASSWORD_PARAM.sub(r"\1***", url)


def redact_argv(argv: list[str]) -> str:
    """``argv`` as one line, with URL passwords (:func:`redact_url`) and the values of options named like a secret
    (``--password``, ``--token=...``, ``--api-key``) replaced by ``***``."""
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
        m = _URL_START.search(a)  # also inside an option: --store=postgresql://user:pw@host/db
        out.append(a[:m.start()] + redact_url(a[m.start():]) if m else a)
    return " ".join(out)


class _Unbelievable(ValueError):
    """Why a state file's bytes are not a JSON object (:func:`~lightning_edge._jsonfile.parse_json`'s reason)."""


def corrupt_record(path: Path, reason: str) -> dict[str, Any]:
    """What a state file that cannot be believed reads as: a leftover of nobody (pid -1), so recovery stops and says
    what to do, and nothing overwrites the file (it may be the only record of the board's original mode)."""
    return {"corrupt": True, "pid": -1, "path": str(path), "reason": reason}


#: the largest pid Linux hands out (``/proc/sys/kernel/pid_max`` is at most 2**22)
PID_MAX = 1 << 22
_MAX_ITEMS = 20000
_MAX_NUMBER = 1e15  # Hz, kHz, MHz, ids, seconds: every number a snapshot holds is far below this
_MAX_TEXT = 256 * 1024  # an nvpmodel.conf is tens of KiB


def _json_problem(value: Any, where: str, depth: int = 0, budget: list[int] | None = None) -> str | None:
    """Why a JSON value is not something a snapshot can hold (too deep, too big, a number out of range)."""
    budget = budget if budget is not None else [_MAX_ITEMS]
    budget[0] -= 1
    if budget[0] < 0:
        return f"{where}: more than {_MAX_ITEMS} values"
    if depth > 8:
        return f"{where}: nested deeper than 8 levels"
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        if not (isinstance(value, int) or value == value and abs(value) != float("inf")):
            return f"{where}: {value} is not a finite number"
        return None if abs(value) <= _MAX_NUMBER else f"{where}: {value:.3g} is out of range"
    if isinstance(value, str):
        return None if len(value) <= _MAX_TEXT else f"{where}: a text of {len(value)} characters"
    if isinstance(value, list):
        for i, v in enumerate(value):
            why = _json_problem(v, f"{where}[{i}]", depth + 1, budget)
            if why:
                return why
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            why = _json_problem(v, f"{where}.{k}", depth + 1, budget)
            if why:
                return why
        return None
    return f"{where}: unexpected {type(value).__name__}"


def record_problem(rec: Any, where: str = "state") -> str | None:
    """Why a state record cannot be believed (``None``: it can). Checks every field a controller reads: types,
    finite numbers in range, a pid Linux could have handed out, modes that parse, the nested kept record."""
    from lightning_edge.modes import PowerMode

    if not isinstance(rec, dict):
        return f"{where} is a JSON {type(rec).__name__}, not an object"
    why = _json_problem(rec, where)
    if why:
        return why
    pid = rec.get("pid")
    if pid is not None and (type(pid) is not int or not 0 < pid <= PID_MAX):
        return f"{where}.pid: {pid!r} is not a process id"
    for key in ("started_at", "updated_at"):
        t = rec.get(key)
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < 1e11):
            return f"{where}.{key}: {t!r} is not a time"
    for key, kind in (("phase", str), ("controller", str), ("device_id", str), ("original", str),
                      ("boot_id", str), ("argv", str), ("restore_command", str), ("kept", bool)):
        v = rec.get(key)
        if v is not None and not isinstance(v, kind):
            return f"{where}.{key}: expected {'a text' if kind is str else 'true or false'}, got {v!r:.40}"
    if "snapshot" in rec and not isinstance(rec["snapshot"], dict):
        return f"{where}.snapshot: expected an object, got a JSON {type(rec['snapshot']).__name__}"
    for key in ("original_mode", "applied", "settled"):
        m = rec.get(key)
        if m is None:
            continue
        if not isinstance(m, dict):
            return f"{where}.{key}: expected a mode (an object), got {m!r:.40}"
        try:
            mode = PowerMode.from_dict(m)
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            return f"{where}.{key}: not a power mode ({exc})"
        if not (1 <= mode.cores <= 1024 and all(0 < f < 1e5 for f in (mode.cpu_mhz, mode.gpu_mhz, mode.mem_mhz))):
            return f"{where}.{key}: {m} is out of range for a power mode"
    kept = rec.get("kept_state")
    if kept is not None:
        return record_problem(kept, f"{where}.kept_state")
    return None


class StateFile:
    """A small JSON file written atomically: a new temporary file (random name, ``O_EXCL|O_NOFOLLOW``, 0600) in the
    same checked directory, fsync, rename over the state file; every step relative to the directory opened and
    checked by :func:`open_state_dir`. Never follows a symbolic link.

    ``last_read_root_only``: whether the last :meth:`read` came from a directory only root could have chosen or
    changed (see :class:`_StateDir`); ``None`` before a read or when there was no file."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.last_read_root_only: bool | None = None

    def read(self) -> dict[str, Any] | None:
        self.last_read_root_only = None
        try:
            with open_state_dir(self.path.parent, create=False) as sd:
                data = _read_nofollow(sd, self.path.name)
                self.last_read_root_only = sd.root_only
        except FileNotFoundError:
            return None
        try:
            # [] or null is not "no state" (it would be overwritten): the top level must be an object
            rec: dict[str, Any] = parse_json(data, _Unbelievable, expect=dict)
        except _Unbelievable as exc:
            # a torn write cannot happen (rename is atomic); this is a file someone edited by hand
            return corrupt_record(self.path, f"it is not JSON that lightning_edge wrote: the file {exc}")
        return rec

    def write(self, data: dict[str, Any]) -> None:
        payload = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
        with open_state_dir(self.path.parent) as sd:
            try:
                # a new private file (random name, O_EXCL|O_NOFOLLOW), fsynced, renamed over the state file (which
                # replaces a planted link itself, never its target), the directory fsynced: the one atomic writer
                replace_in_folder(sd.fd, self.path.name, payload, mode=FILE_MODE)
            except IsADirectoryError:
                raise _not_a_plain_file(self.path, "a directory") from None

    def remove(self) -> None:
        try:
            with open_state_dir(self.path.parent, create=False) as sd:
                os.unlink(self.path.name, dir_fd=sd.fd)  # unlink removes a link itself
        except FileNotFoundError:
            pass

    def exists(self) -> bool:
        try:
            with open_state_dir(self.path.parent, create=False) as sd:
                os.stat(self.path.name, dir_fd=sd.fd, follow_symlinks=False)
                return True
        except FileNotFoundError:
            return False


class BoardLock:
    """Exclusive, non-blocking advisory lock on one board (``fcntl.flock``), naming its holder's pid.

    The lock file is opened relative to the checked state dir (:func:`open_state_dir`) without following links
    (``O_NOFOLLOW``), must be a plain file of its own, and is private (0600)."""

    def __init__(self, path: str | os.PathLike, device_id: str = "") -> None:
        self.path = Path(path)
        self.device_id = device_id
        self._fd: int | None = None
        self._pid: int | None = None  # the process that took the lock: only it may release it

    @property
    def held(self) -> bool:
        return self._fd is not None and self._pid == os.getpid()

    def holder_pid(self) -> int | None:
        try:
            with open_state_dir(self.path.parent, create=False) as sd:
                text = _read_nofollow(sd, self.path.name, limit=4096).decode("ascii", "replace").strip()
        except OSError:
            return None
        try:
            return int(text.split()[0])
        except (ValueError, IndexError):
            return None

    def acquire(self) -> None:
        """Take the lock or raise :class:`BoardBusyError` naming the pid that holds it."""
        if self._fd is not None and self._pid != os.getpid():
            self.forget()  # inherited through a fork: the parent's lock, never ours to use
        if self._fd is not None:
            return
        with open_state_dir(self.path.parent) as sd:
            fd = _open_nofollow(sd, self.path.name, os.O_RDWR | os.O_CREAT)
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
        self._fd, self._pid = fd, os.getpid()

    def forget(self) -> None:
        """In a forked child: close the inherited descriptor without touching the lock. ``flock`` belongs to the
        open file description the parent shares, so unlocking (or truncating the pid) here would free the parent's
        board; closing this descriptor leaves the parent's lock held."""
        fd, self._fd, self._pid = self._fd, None, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:  # pragma: no cover
                pass

    def release(self) -> None:
        if self._fd is not None and self._pid != os.getpid():
            self.forget()  # a forked child: the lock is its parent's
            return
        fd, self._fd, self._pid = self._fd, None, None
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
        # the answer for the directory the state file was read from (by descriptor), never a second look-up by
        # path: the directory at that path may have been swapped since
        return bool(self.state.last_read_root_only)

    def read(self) -> dict[str, Any] | None:
        """The board's state record, ``None`` when there is none; one that cannot be believed (not JSON, wrong
        types, numbers out of range: :func:`record_problem`) reads as :func:`corrupt_record`, so it is neither
        acted on nor overwritten."""
        rec = self.state.read()
        if rec is None or rec.get("corrupt"):
            return rec
        why = record_problem(rec)
        return corrupt_record(self.state.path, why) if why else rec

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
_ACTIVE: list[ModeController] = []  # controllers with a changed board, in the order they started
_REG_LOCK = threading.RLock()
#: every controller holding a session (with or without exit handlers): a forked child drops them all
_SESSIONS: weakref.WeakSet[ModeController] = weakref.WeakSet()
_HANDLER_PID: int | None = None  # the process that installed our signal handlers
_ATEXIT_DONE = False
_PREVIOUS: dict[int, Any] = {}
#: the signals that end a run and restore the board first: SIGTERM (kill, systemd, a scheduler), SIGINT (Ctrl-C),
#: SIGHUP (the terminal or ssh session went away), SIGQUIT (Ctrl-\\); SIGKILL cannot be caught (the next start of
#: a controller, or ``lightning-edge mode restore``, puts the board back)
HANDLED_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT") if hasattr(signal, n))


def track_session(controller: ModeController) -> None:
    """``controller`` holds a session of this process (a forked child drops it: :func:`_after_fork_in_child`)."""
    _SESSIONS.add(controller)


def untrack_session(controller: ModeController) -> None:
    _SESSIONS.discard(controller)


def register(controller: ModeController) -> None:
    """Restore ``controller`` at interpreter exit or on SIGTERM/SIGINT, until :func:`unregister`."""
    global _ATEXIT_DONE
    track_session(controller)
    with _REG_LOCK:
        if controller not in _ACTIVE:
            _ACTIVE.append(controller)
        if not _ATEXIT_DONE:
            atexit.register(_restore_all, "interpreter exit")
            _ATEXIT_DONE = True
        _install_signal_handlers()


def unregister(controller: ModeController) -> None:
    with _REG_LOCK:
        if controller in _ACTIVE:
            _ACTIVE.remove(controller)
        if not _ACTIVE:
            _uninstall_signal_handlers()


def active_controllers() -> list[ModeController]:
    return list(_ACTIVE)


def _restore_all(reason: str, release: bool = False) -> None:
    """Restore every registered controller, newest first; never raises. ``release``: the process is ending (a
    signal): each controller also refuses every later change (:class:`BoardReleasedError`), so a call the signal
    interrupted cannot switch the board again after its restore, whatever the signal's previous handler does."""
    with _REG_LOCK:
        todo = list(reversed(_ACTIVE))
    for ctl in todo:
        if not ctl_is_ours(ctl):  # a forked child's copy: the parent restores its own board
            unregister(ctl)
            continue
        if release:
            ctl.released = reason
        try:
            ctl._restore_on_exit(reason)
        except BaseException as exc:  # noqa: BLE001 - an exit path must not raise
            # the controller has already said where the board is and what finishes the restore
            print(
                f"lightning_edge: could not restore the power mode of {ctl.device_id} "
                f"on {reason}: {exc}",
                file=sys.stderr,
            )
        finally:
            unregister(ctl)


_IN_SIGNAL_RESTORE: list[int] = []  # the signal whose handler is restoring now
_PENDING: list[int] = []  # signals that arrived meanwhile

# ------------------------------------------------------------------ changes in progress
# A change to a board (a switch, a restore, taking or leaving the board) is a critical section. A handled signal
# that arrives in the middle of one in the main thread (where Python runs signal handlers) is held and acted on when
# the outermost section ends: the board is then in a known mode (with a state file that restores it), so the restore
# is complete and nothing written afterwards by the interrupted call can undo it (a previous handler that returns,
# as Lightning's does, used to send the interrupted switch on writing a mixed mode). A section running in another
# thread is waited for (at most CRITICAL_WAIT_S) before the handler restores.
_CRITICAL_LOCK = threading.RLock()


class _Depth(threading.local):
    """How deep this thread is in nested changes to a board (0: in none)."""

    depth = 0


_CRITICAL = _Depth()
_DEFERRED: list[tuple[int, Any, Any]] = []  # (signal, frame, its previous handler) held until the section ends
#: the longest a signal handler waits for another thread's change to finish before restoring anyway
CRITICAL_WAIT_S = 30.0


class critical:
    """``with critical(): ...``: a change to a board in progress (re-entrant; see above)."""

    def __enter__(self) -> critical:
        _CRITICAL_LOCK.acquire()
        _CRITICAL.depth += 1
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        _CRITICAL.depth -= 1
        outermost = _CRITICAL.depth == 0
        _CRITICAL_LOCK.release()
        if outermost and _DEFERRED and threading.current_thread() is threading.main_thread():
            _deliver_deferred()


def in_critical_section() -> bool:
    """Whether this thread is in the middle of a change to a board."""
    return _CRITICAL.depth > 0


def _deliver_deferred() -> None:
    held = list(_DEFERRED)
    _DEFERRED.clear()
    (signum, frame, prev), rest = held[0], held[1:]
    for s, _, p in rest:
        if s != signum and s not in _PENDING:
            _PENDING.append(s)
            _PREVIOUS.setdefault(s, p)  # the handler it had when it arrived, in case ours were removed since
    _on_signal(signum, frame, prev)


_NO_HANDLER = object()


def ctl_is_ours(ctl: ModeController) -> bool:
    """Whether ``ctl``'s session (if any) was opened by this process (not inherited through a fork)."""
    owner = ctl.session_pid
    return owner is None or owner == os.getpid()


def _on_signal(signum: int, frame, prev: Any = _NO_HANDLER) -> None:
    if _HANDLER_PID is not None and _HANDLER_PID != os.getpid():
        # a forked child that still runs our handler (forked where the at-fork hook could not reset it): the signal
        # is the child's own business; the board is its parent's
        _chain_in_child(signum, frame, _PREVIOUS.get(signum, signal.SIG_DFL) if prev is _NO_HANDLER else prev)
        return
    if _IN_SIGNAL_RESTORE:
        # a second signal (Ctrl-C pressed twice) while the board is being put back: a nested restore would run
        # inside the first and break it off; it is held and acted on once the restore is done
        if signum not in _PENDING and signum != _IN_SIGNAL_RESTORE[0]:
            _PENDING.append(signum)
        return
    if prev is _NO_HANDLER:
        # the handler the signal had before ours; _NO_HANDLER when ours were removed since and someone else's
        # handler calls ours (Lightning composes the handlers it finds): nothing of ours to chain to
        prev = _PREVIOUS.get(signum, _NO_HANDLER)
    if in_critical_section():
        # in the middle of a change: acted on as soon as the change is complete (critical.__exit__), with the
        # handler it has now (the change may end the session, and ours are removed with the last one)
        if all(s != signum for s, _, _ in _DEFERRED):
            _DEFERRED.append((signum, frame, prev))
        return
    name = signal.Signals(signum).name
    _IN_SIGNAL_RESTORE.append(signum)
    # another thread may be in the middle of a change: let it finish (bounded), then restore
    waited = _CRITICAL_LOCK.acquire(timeout=CRITICAL_WAIT_S)
    try:
        _restore_all(f"signal {name}", release=True)
    finally:
        if waited:
            _CRITICAL_LOCK.release()
        _IN_SIGNAL_RESTORE.clear()
    pending = [s for s in _PENDING if s != signum]
    _PENDING.clear()
    _uninstall_signal_handlers()
    for other in pending:  # now with the handlers they had before us
        signal.raise_signal(other)
    if prev is _NO_HANDLER:
        return  # called by another handler that wraps ours after ours were removed: it decides what happens
    if callable(prev):
        prev(signum, frame)  # e.g. default_int_handler raises KeyboardInterrupt; Lightning's returns
    else:  # SIG_DFL (or None: installed from C): die of the same signal, as without us
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _chain_in_child(signum: int, frame, prev: Any) -> None:
    """What the signal would have done in a forked child without us."""
    if callable(prev):
        prev(signum, frame)
    elif prev != signal.SIG_IGN:
        try:
            signal.signal(signum, signal.SIG_DFL)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            os._exit(128 + signum)
        os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    global _HANDLER_PID
    if threading.current_thread() is not threading.main_thread():
        return  # signal.signal only works in the main thread; atexit still covers normal exits
    _HANDLER_PID = os.getpid()
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


def _after_fork_in_child() -> None:
    """Run in every child forked by this process (``os.register_at_fork``): the boards are the parent's. Each
    inherited session is dropped without a restore, an unlock or a write (:meth:`ModeController.forget_session`),
    our signal handlers give way to the ones the process had before them, and the module's locks are new (a lock
    another thread of the parent held at the fork would otherwise never be released here: a worker's exit hung)."""
    global _REG_LOCK, _CRITICAL_LOCK, _CRITICAL, _SESSIONS
    _REG_LOCK = threading.RLock()
    _CRITICAL_LOCK = threading.RLock()
    _CRITICAL = _Depth()
    _DEFERRED.clear()
    _IN_SIGNAL_RESTORE.clear()
    _PENDING.clear()
    for ctl in list(_SESSIONS) + list(_ACTIVE):
        try:
            ctl.forget_session(f"a fork (this process is a child of pid {os.getppid()}, which owns the board)")
        except Exception:  # noqa: BLE001 - a child must start whatever a controller does here  # pragma: no cover
            pass
    _ACTIVE.clear()
    _SESSIONS = weakref.WeakSet()
    for sig, prev in list(_PREVIOUS.items()):
        try:
            if signal.getsignal(sig) is _on_signal:
                signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
                _PREVIOUS.pop(sig, None)
        except (ValueError, OSError):  # pragma: no cover - forked from another thread: _on_signal checks the pid
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
