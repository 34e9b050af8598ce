"""The profile store: Optuna studies whose trials are profiled points.

"Once a power mode has been profiled it can be reused" (Fulcrum section 5.1): every profile a tuner
takes is a completed trial, found again by any later solve, in this process or another one, on this
board or on any identical board sharing the storage.

Layout
    One study per (device model, workload fingerprint, kind): ``lightning_edge/<device>/<workload>/train``
    holds training profiles (params ``cores``, ``cpu_mhz``, ``gpu_mhz``, ``mem_mhz``), ``.../infer``
    holds inference profiles (the same plus ``batch_size``). Objective values ``[time_s, power_w]``
    (both minimised); user attributes ``time_s``, ``power_w``, ``label`` (measured / simulated) and
    ``provenance`` (host, strategy, problem); constraints of the problem that asked for the profile via
    ``Trial.set_constraint`` (through ``tuning._optuna`` on Optuna < 5; its own ``problem.constraints``: ``power_w``, ``latency_s``, ``keep_up_s``;
    feasible when <= 0). The store implements :class:`~lightning_edge.tuning.backend.ProfileBackend`.

Storage
    ``ProfileStore()`` / ``"default"``: SQLite in ``platformdirs.user_cache_dir("lightning_edge")``
    (embedded, nothing to start; ``$LIGHTNING_EDGE_PROFILE_STORE`` overrides). A plain path is an SQLite
    file. Any Optuna storage URL works (``postgresql://user@host/db`` so a fleet of boards shares one
    store), ``journal:///path`` for Optuna's journal file storage, ``"memory"`` for Optuna's in-memory
    storage, or a ``BaseStorage`` instance. ``lightning-edge store`` lists, shows, exports and tidies it.

Claims (several processes profiling one workload together)
    A point is wanted by *enqueueing* a trial for it (``Study.enqueue_trial``: its parameters are
    written in the same transaction that creates it). The owner of a point is the *lowest-numbered*
    trial with those parameters that did not fail; trial creation is serialised per study (the RDB
    storage locks the study row, the journal orders its log), so every process agrees on it. A process
    measures a point only after claiming its owner trial with the storage's atomic
    ``WAITING -> RUNNING`` transition (the compare-and-set ``Study.ask`` uses to pop enqueued trials);
    losers wait for the result and profile other points meanwhile. (On SQLite that transition is not
    atomic, so claims also take an exclusive lock on ``<db file>.claims.lock``, waited for as long as
    ``wait_timeout_s`` at most, with progress naming the holder's pid.) Duplicate enqueued trials are closed
    as ``FAIL`` with user attribute ``duplicate_of``. So no point is measured twice and none is lost.
    Leases: every claim records its owner (host, boot id, PID namespace, pid and process start time:
    system attribute ``lightning_edge:claim``) and is renewed while its point is measured: by Optuna's
    trial heartbeat on RDB storages (SQLite, PostgreSQL, MySQL; on by default, every 5 s, see
    ``heartbeat_interval_s``; :class:`optuna.storages.RDBStorage` ``heartbeat_interval`` /
    ``grace_period``), else by a renewal time in the claim. A process waiting for a point that another
    one claimed takes the claim over at once when its owner is provably dead (same host, and the pid has
    exited, is a zombie or now belongs to another process), and otherwise once the claim has not been
    renewed for the grace period (``optuna.storages.fail_stale_trials`` on RDB storages). Waiting is
    bounded (``wait_timeout_s``), reports progress every ``progress_every_s`` and ends as soon as the
    caller cancels it. ``lightning-edge store clear-claims`` fails stale claims by hand.

Errors
    A store that cannot be used is reported when it is opened (before any training), in one line that
    says what (the file, or host:port), why, and how to fix it (:class:`StoreError`). A plain path is an
    SQLite store. A store the process may not write (a read-only file or directory) is opened read-only:
    its profiles answer, new profiles are kept in memory only, with a one-time note. A path that is not a
    regular file (a FIFO, a device) is refused; a server URL is checked before any network access; no
    message shows a password. A storage fault during a run (a full disk, an I/O error, the claims lock held past
    ``wait_timeout_s``) makes the store read-only for the process, with one :class:`StoreFaultWarning` naming the
    root cause: the run goes on, its new profiles kept in memory.

Outages (a server restarted, a lost network, an SQLite file locked by another process: :data:`TRANSIENT_FAULTS`)
    are waited out: the operation is retried with backoff for at most ``outage_retry_s`` (default 10 s), and a
    profile measured meanwhile is never measured again (its own claimed trial is finished when the store answers: no
    trial is left ``FAIL`` by an outage, and claim heartbeats go on trying). An outage longer than that degrades the
    store as above, but not for good: every later request probes it again (at most every ``probe_every_s``), and
    once it answers the profiles kept in memory are written (once each: a point another process saved meanwhile is
    not written again, and its row is used), the store is writable again and other processes' new rows are read.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import socket
import stat
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Union

import optuna
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.samplers import RandomSampler
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from lightning_edge.catalog.storekey import StoreKey
from lightning_edge.devices.safety import redact_url
from lightning_edge.modes import KNOBS, PowerMode
from lightning_edge.records import as_rel_sem
from lightning_edge.tuning._optuna import create_trial, set_constraints
from lightning_edge.tuning.backend import MemoryStore, ProfileBackend, ProfileKey
from lightning_edge.tuning.problems import Measurement, Problem, Workload
from lightning_edge.tuning.table import ProfileTable

if TYPE_CHECKING:
    import sqlite3

    from sqlalchemy.pool import ConnectionPoolEntry
    from torch import nn

_log = logging.getLogger(__name__)

ENV_STORE = "LIGHTNING_EDGE_PROFILE_STORE"
STUDY_PREFIX = "lightning_edge"


class StudyName(NamedTuple):
    """Which profiles a study holds: ``lightning_edge/<device model>/<workload>/<kind>`` (:attr:`text`), made and read
    back here only."""

    device_model: StoreKey
    workload_id: str
    kind: str

    @property
    def text(self) -> str:
        return f"{STUDY_PREFIX}/{_slug(self.device_model)}/{_slug(self.workload_id)}/{self.kind}"

    @classmethod
    def parse(cls, name: str) -> StudyName | None:
        """The parts of study ``name``; ``None`` for a study that is no profile study of ours."""
        parts = str(name).split("/")
        if len(parts) != 4 or parts[0] != STUDY_PREFIX or parts[3] not in ("train", "infer"):
            return None
        return cls(StoreKey.parse(parts[1]), parts[2], parts[3])
DIRECTIONS = ("minimize", "minimize")  # time_s, power_w

PARAM_DISTRIBUTIONS = {
    "cores": IntDistribution(1, 4096),
    "cpu_mhz": FloatDistribution(0.0, 1e6),
    "gpu_mhz": FloatDistribution(0.0, 1e6),
    "mem_mhz": FloatDistribution(0.0, 1e6),
    "batch_size": IntDistribution(1, 1 << 20),
}
"""Fixed, wide distributions so that studies stay compatible across power-mode spaces."""


def distributions(kind: str) -> dict[str, Any]:
    names = list(KNOBS) + (["batch_size"] if kind == "infer" else [])
    return {n: PARAM_DISTRIBUTIONS[n] for n in names}


def key_params(key: ProfileKey) -> dict[str, Any]:
    """Trial parameters of a store entry."""
    m = key.mode
    params: dict[str, Any] = {"cores": int(m.cores), "cpu_mhz": float(m.cpu_mhz), "gpu_mhz": float(m.gpu_mhz),
                              "mem_mhz": float(m.mem_mhz)}
    if key.kind == "infer":
        params["batch_size"] = int(key.batch_size)  # type: ignore[arg-type]
    return params


def suggest(trial: optuna.Trial, kind: str) -> dict[str, Any]:
    """Suggest the parameters of a ``kind`` profile on ``trial`` (a queued trial's fixed parameters, else the
    sampler's) with the public ``suggest_int`` / ``suggest_float``; returns them."""
    return {name: (trial.suggest_int if isinstance(d, IntDistribution) else trial.suggest_float)(name, d.low, d.high)
            for name, d in distributions(kind).items()}


def params_key(kind: str, params: dict[str, Any]) -> ProfileKey | None:
    """The store entry of a trial's parameters (``None`` if they are not a profile of ``kind``)."""
    try:
        mode = PowerMode(int(params["cores"]), params["cpu_mhz"], params["gpu_mhz"], params["mem_mhz"])
        bs = int(params["batch_size"]) if kind == "infer" else None
    except (KeyError, TypeError, ValueError):
        return None
    return ProfileKey(kind, mode, bs)


def _trial_params(t: FrozenTrial) -> dict[str, Any]:
    return t.params if t.params else t.system_attrs.get("fixed_params", {})


def trial_key(kind: str, t: FrozenTrial) -> ProfileKey | None:
    return params_key(kind, _trial_params(t))


def trial_measurement(t: FrozenTrial, prefix: str = "") -> Measurement:
    """The profile of a completed trial: user attributes ``{prefix}time_s``, ``{prefix}power_w`` and ``label``, and
    ``{prefix}power_rel_sem`` where the window said it (a value that is not a standard error is left out: unknown)."""
    ua = t.user_attrs
    return Measurement(ua.get(f"{prefix}time_s", t.values[0]), ua.get(f"{prefix}power_w", t.values[1]),
                       ua.get("label", "measured"), power_rel_sem=as_rel_sem(ua.get(f"{prefix}power_rel_sem")))


def trial_kind(t: FrozenTrial) -> str:
    """``"infer"`` for a trial of an inference profile (it has a batch size), else ``"train"``."""
    return "infer" if "batch_size" in _trial_params(t) else "train"


def _slug(text: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_.:+" else "-" for c in str(text))
    return keep.strip("-") or "unnamed"


def workload_fingerprint(workload: Workload, workload_id: str | None = None) -> str:
    """The key of a workload's profiles: ``workload_id``, else ``workload.fingerprint``, else a hash of
    an informative ``repr``. Raises when the workload cannot be told apart from another one."""
    if workload_id:
        return _slug(workload_id)
    fp = getattr(workload, "fingerprint", None)
    if callable(fp):
        fp = fp()
    if fp:
        return _slug(str(fp))
    if type(workload).__repr__ is not object.__repr__:
        text = repr(workload)
        return f"{_slug(type(workload).__name__)}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"
    raise UnkeyableWorkload(
        f"the profile store cannot tell a {type(workload).__name__} apart from other workloads: to keep its "
        "profiles, give it a `fingerprint` string attribute (model, batch size, precision...) or pass "
        "workload_id='...'; store=None keeps them in memory without this warning"
    )


class UnkeyableWorkload(ValueError):
    """A workload that has no key in a persistent store (no fingerprint, workload_id or informative repr)."""


class UnkeyedWorkloadWarning(UserWarning):
    """A workload without a key was profiled into an in-memory store: its profiles are not kept."""


_WARNED_UNKEYED: set[str] = set()
_MEMORY_STORES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


_CONTAINERS = ("Sequential", "ModuleList", "ModuleDict")


def model_name(module: nn.Module) -> str:
    """The name of the model a module trains, for store keys: a LightningModule that wraps one model (a child
    holding at least 90 % of the parameters, e.g. ``self.model = zoo.mobilenet_v3_large()`` or a Hugging Face
    model) is named after that model's class, not the wrapper's (``MobileNetV3``, not ``FineTune``)."""
    name = type(module).__name__
    if not hasattr(module, "training_step") or not hasattr(module, "named_children"):
        return name

    def count(m: nn.Module) -> int:
        try:
            return sum(int(p.numel()) for p in m.parameters())
        except (RuntimeError, ValueError):  # uninitialised (Lazy) parameters have no size yet
            return 0

    total = count(module)
    children = [c for _, c in module.named_children()]
    if total <= 0 or not children:
        return name
    best = max(children, key=count)
    inner = type(best).__name__
    if count(best) >= 0.9 * total and inner not in _CONTAINERS:
        return inner
    return name


def device_key(workload: Workload, device_model: str | None = None) -> str:
    """The device model the profiles belong to: ``device_model``, else ``workload.device_model``."""
    dm = device_model or getattr(workload, "device_model", None)
    if callable(dm):
        dm = dm()
    return _slug(dm or "unknown-device")


class StoreError(RuntimeError):
    """A profile store that cannot be used: one line saying what (file or host:port), why, and how to fix it."""


class StoreLockTimeout(StoreError):
    """The store's claims lock stayed held past the wait bound: ``why`` (by whom) and ``advice`` (what to do)."""

    def __init__(self, message: str, why: str, advice: str) -> None:
        super().__init__(message)
        self.why, self.advice = why, advice


class StoreReadOnlyWarning(UserWarning):
    """The profile store can be read but not written: new profiles are not saved."""


#: faults that pass (a server restarted or unreachable for a while, an SQLite file locked by another process): retried
TRANSIENT_FAULTS = ("server error", "locked")


class StoreFaultWarning(UserWarning):
    """The profile store failed during a run (disk full, I/O error, server gone, lock held): its profiles still
    answer while it can be read, new profiles of the run are kept in memory and not saved."""


DEFAULT_HEARTBEAT_S = 5
"""Default lease renewal interval of a claim (s); a claim not renewed for twice that is stale."""


def default_storage_url() -> str:
    """``$LIGHTNING_EDGE_PROFILE_STORE`` or SQLite in the user cache directory."""
    env = os.environ.get(ENV_STORE)
    if env:
        return storage_url(env)
    import platformdirs

    path = Path(platformdirs.user_cache_dir("lightning_edge")) / "profiles.sqlite3"
    return f"sqlite:///{path}"


def storage_url(spec: str | os.PathLike[str] | None) -> str:
    """The storage URL of a store given as ``"default"``/``None``, a URL, or a plain path (an SQLite file)."""
    if spec is None or (isinstance(spec, str) and spec == "default"):
        return default_storage_url()
    text = os.fspath(spec)
    if "://" in text or text == "memory":
        return text
    if not text.strip():
        raise StoreError("profile store: an empty path; give a file such as ~/profiles.sqlite3, an Optuna storage "
                         "URL (sqlite:///..., postgresql://...), or 'default'")
    return f"sqlite:///{Path(text).expanduser().resolve()}"


def describe_url(url: str) -> str:
    """A store's URL for messages: the file of an SQLite/journal store, else the URL without its password."""
    if url == "memory":
        return "memory (not kept)"
    path = _sqlite_path(url)
    if path is not None:
        return path
    if url.startswith("journal://"):
        return url[len("journal://"):]
    return redact_url(url)


def _sqlite_path(url: str) -> str | None:
    if not url.startswith("sqlite:///"):
        return None
    rest = url[len("sqlite:///"):]
    if rest.startswith("file:"):
        rest = rest[len("file:"):].split("?", 1)[0]
    return rest


SQLITE_MAGIC = b"SQLite format 3\x00"


_FILE_KINDS = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
               (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))


def _check_regular(path: str, mode: int) -> None:
    """Refuse a store file that is not a regular file: a FIFO would hang every open and read, a device such as
    ``/dev/zero`` holds no store, and neither is to be moved aside."""
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _FILE_KINDS if test(mode)), "special file")
        raise StoreError(f"profile store {path}: is a {kind}, not a regular file; give the path of a regular file "
                         "(a new one is created), e.g. store='~/profiles.sqlite3'")


def _store_file_exists(path: str) -> bool:
    """Whether a store file exists, refusing one that is not a regular file (:func:`_check_regular`)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreError(f"profile store {path}: cannot be read ({exc.strerror}); give this user access to it and "
                         "its directory, or pass another store") from None
    _check_regular(path, st.st_mode)
    return True


def _check_sqlite_file(path: str) -> bool:
    """Raise :class:`StoreError` for a path that cannot hold the store; True when it must be opened read-only."""
    p = Path(path)
    if p.is_dir():
        raise StoreError(f"profile store {path}: is a directory, not an SQLite file; give a file path such as "
                         f"{p / 'profiles.sqlite3'}")
    if _store_file_exists(path):
        try:  # without blocking, and checked again on the open file (it may have been replaced by a FIFO meanwhile)
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                _check_regular(path, os.fstat(fd).st_mode)
                head = os.read(fd, len(SQLITE_MAGIC))  # the only bytes the store reads itself
            finally:
                os.close(fd)
        except OSError as exc:
            raise StoreError(f"profile store {path}: cannot be read ({exc.strerror}); give this user read access "
                             "or pass another store") from None
        if head and head != SQLITE_MAGIC:
            raise StoreError(f"profile store {path}: not an SQLite database (corrupt, or another kind of file); "
                             f"move it aside (mv '{path}' '{path}.corrupt') and a new store is created, or pass "
                             "another store")
        return not (os.access(p, os.W_OK) and os.access(p.parent, os.W_OK))
    parent = p.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"profile store {path}: cannot create its directory {parent} ({exc.strerror}); pass a "
                         f"writable place (store='/path/profiles.sqlite3' or ${ENV_STORE})") from None
    if not os.access(parent, os.W_OK):
        raise StoreError(f"profile store {path}: the directory {parent} is not writable, so the store cannot be "
                         f"created; pass a writable place (store='/path/profiles.sqlite3' or ${ENV_STORE})")
    return False


def _one_line(exc: BaseException) -> str:
    """The first line of an exception's message, without SQLAlchemy's SQL and background links."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__).strip()


class _Fault(NamedTuple):
    """A storage fault: ``kind`` (``disk full``, ``read-only``, ``no access``, ``I/O error``, ``damaged``, ``locked``,
    ``server error``, ``claims lock``, ``storage error``), ``text`` (the kind and the root cause, for messages) and
    ``advice`` (how to fix it)."""

    kind: str
    text: str
    advice: str


def _free_space(path: str) -> str:
    where = os.path.dirname(path) or "."
    try:
        st = os.statvfs(where)
    except OSError:
        return ""
    free = st.f_bavail * st.f_frsize
    size = next((f"{free / 2 ** e:.1f} {u}" for e, u in ((30, "GiB"), (20, "MiB"), (10, "KiB")) if free >= 2 ** e),
                f"{free} bytes")
    return f"; {size} free in {where}"


def _fault(exc: BaseException, path: str | None = None) -> _Fault | None:
    """What a failed store operation says about the storage, from the root cause of the exception chain (a full disk
    is ``sqlite3.OperationalError`` "database or disk is full" under SQLAlchemy's error under Optuna's
    ``StorageInternalError`` "... e.g. exceeding max length"); ``None`` when ``exc`` is no storage fault (a bug, a bad
    value, a cancel), to be raised as it is. ``path``: the store's file, for the free space of a full disk."""
    import sqlite3

    from sqlalchemy import exc as sa

    if isinstance(exc, StoreLockTimeout):
        return _Fault("claims lock", exc.why, exc.advice)
    top = exc.__cause__ if isinstance(exc, optuna.exceptions.StorageInternalError) else exc
    # PendingRollbackError: a session whose connection the server dropped (a restart) mid-transaction
    if not (isinstance(top, (sa.OperationalError, sa.InterfaceError, sa.PendingRollbackError,
                             sqlite3.OperationalError))
            or type(top) in (sa.DatabaseError, sqlite3.DatabaseError)
            or (isinstance(top, OSError) and not isinstance(top, TimeoutError))):
        return None
    root: BaseException = top
    for _ in range(10):
        nxt = getattr(root, "orig", None) or root.__cause__
        if nxt is None or nxt is root:
            break
        root = nxt
    code = root.errno if isinstance(root, OSError) else None
    name = str(getattr(root, "sqlite_errorname", "") or "")
    pgcode = str(getattr(root, "pgcode", None) or getattr(root, "sqlstate", None) or "")
    detail = _one_line(root)
    if code in errno.errorcode:
        detail = f"OSError {errno.errorcode[code]}: {os.strerror(code)}"  # type: ignore[index]
    low = detail.lower()
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or name == "SQLITE_FULL" or pgcode == "53100" or \
            "disk is full" in low or "no space left" in low:
        return _Fault("disk full", f"disk full ({detail}{_free_space(path) if path else ''})",
                      "free space on its disk, or pass a store on another disk")
    if code == errno.EROFS or name.startswith("SQLITE_READONLY") or "readonly" in low or "read-only" in low:
        return _Fault("read-only", f"read-only ({detail})",
                      "give this user write access to it and its directory, or pass another store")
    if code in (errno.EACCES, errno.EPERM) or name.startswith("SQLITE_CANTOPEN"):
        return _Fault("no access", f"no access ({detail})",
                      "give this user read and write access to it and its directory, or pass another store")
    if code == errno.EIO or name.startswith("SQLITE_IOERR"):
        return _Fault("I/O error", f"I/O error ({detail})", "check the disk (dmesg), or pass a store on another disk")
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "not a database" in low or "malformed" in low:
        return _Fault("damaged", f"damaged ({detail})", "move it aside (mv) and a new store is created, or pass "
                      "another store")
    if name.startswith("SQLITE_BUSY") or "database is locked" in low:
        return _Fault("locked", f"locked by another process ({detail})",
                      "find the process that holds it (fuser -v), or pass another store")
    if not isinstance(root, (OSError, sqlite3.Error)):
        return _Fault("server error", f"server error ({detail})", "check the server and the network")
    return _Fault("storage error", f"storage error ({detail})", "check the store, or pass another one")


def _open_sqlite(url: str, hb: dict[str, Any], wait_s: float = 600.0,
                 progress_every_s: float = 10.0) -> tuple[BaseStorage, bool]:
    """An SQLite RDB storage (WAL), checked; read-only when this process may not write the file or its folder."""
    path = _sqlite_path(url)
    assert path is not None
    readonly = _check_sqlite_file(path)
    existed = os.path.exists(path) and os.path.getsize(path) > 0
    try:
        with warnings.catch_warnings():  # the heartbeat arguments are "experimental" in Optuna
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if readonly:
                return _open_sqlite_readonly(path), True
            # several processes may write: wait for SQLite's lock instead of failing after 5 s; and create the
            # schema of a new file one process at a time (Optuna's first-time set-up is not concurrent-safe)
            with _file_lock(path + ".claims.lock", store=path, wait_s=wait_s, progress_every_s=progress_every_s):
                rdb = optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 120}}, **hb)
                _sqlite_wal(rdb)
                storage = optuna.storages.get_storage(rdb)
                storage.get_all_studies()  # reads the schema: a damaged file fails here, not during training
                return storage, False
    except StoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - sqlalchemy/sqlite/optuna errors, told apart by their root cause
        fault = _fault(exc, path)
        if fault is not None and fault.kind == "damaged":  # an existing file that is not a (whole) SQLite database
            raise StoreError(f"profile store {path}: not a readable SQLite database ({_one_line(exc)}); move it aside "
                             f"(mv '{path}' '{path}.corrupt') and a new store is created, or pass another store"
                             ) from None
        if fault is not None and fault.kind != "storage error":  # the place: disk full, read-only, no access, I/O
            raise StoreError(f"profile store {path}: cannot be {'written' if existed else 'created'}: {fault.text}; "
                             f"{fault.advice}") from None
        aside = f"move it aside (mv '{path}' '{path}.corrupt') or " if existed else ""
        raise StoreError(f"profile store {path}: cannot be opened ({_one_line(exc)}); {aside}pass another store"
                         ) from None


def _open_sqlite_readonly(path: str) -> BaseStorage:
    """Read an existing store without writing anything (no lock file, no schema, no WAL files)."""
    if not Path(path).exists() or Path(path).stat().st_size == 0:
        raise StoreError(f"profile store {path}: read-only and empty, so it holds no profiles and none can be "
                         "saved; give this user write access to it and its directory, or pass another store")
    last: Exception | None = None
    for query in ("mode=ro", "mode=ro&immutable=1"):  # WAL files may be impossible to create in a read-only folder
        try:
            # (no schema check: it reads Optuna's migration scripts, and a read-only store cannot be upgraded anyway)
            rdb = optuna.storages.RDBStorage(f"sqlite:///file:{path}?{query}&uri=true", skip_table_creation=True,
                                             skip_compatibility_check=True)
            storage = optuna.storages.get_storage(rdb)
            storage.get_all_studies()
            return storage
        except Exception as exc:  # noqa: BLE001
            last = exc
    why = _one_line(last) if last is not None else "unknown error"
    if "not a database" in why or "malformed" in why:
        raise StoreError(f"profile store {path}: not a readable SQLite database ({why}); move it aside "
                         f"(mv '{path}' '{path}.corrupt') or pass another store")
    raise StoreError(f"profile store {path}: read-only here and cannot be read either ({why}); pass another store")


def _server_url(url: str) -> Any:
    """The parsed URL of a server store, checked before any network access. The message of a bad one shows the URL
    without its password (nor any part of it: a password holding an unescaped ``@`` or ``/`` shifts every field
    SQLAlchemy parses after it, and its tail would be taken for the host and looked up)."""
    from sqlalchemy.engine import make_url

    bad = f"profile store {describe_url(url)}: not a valid storage URL"
    hint = ("a user name or password holding '@', '/', ':', '[' or '%' must be percent-encoded "
            "(urllib.parse.quote(password, safe='')); the form is postgresql://user:password@host:port/db")
    try:
        u = make_url(url)
        port = u.port
    except Exception:  # noqa: BLE001 - its message may quote the password
        raise StoreError(f"{bad} (it cannot be parsed: is the port a number?); {hint}") from None
    if "@" in (u.host or "") or "@" in (u.database or ""):
        raise StoreError(f"{bad} (more than one '@'); {hint}")
    if port is not None and not 0 < port < 65536:
        raise StoreError(f"{bad} (port {port} is not 1-65535); {hint}")
    return u


def _check_server(url: str, given: str | None = None) -> None:
    """Fail at once, in one line, when a server store's URL is not valid (before any network access) or nothing
    listens at its host:port (no driver retries)."""
    u = _server_url(url)
    host = u.host
    if not host or host.startswith("/"):
        return  # a Unix socket: the driver reports it
    port = u.port or {"postgresql": 5432, "mysql": 3306}.get(u.get_backend_name(), 0)
    if not port:
        return
    try:
        socket.create_connection((host, port), timeout=3.0).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        if isinstance(exc, socket.timeout):
            why = "no answer within 3 s"
        raise StoreError(f"profile store {describe_url(given or url)}: nothing answers at {host}:{port} ({why}); start the "
                         "server or fix the URL, or use a local store (store='/path/profiles.sqlite3')") from None


def open_storage(spec: str | os.PathLike[str] | BaseStorage | None, *, heartbeat_interval_s: int | None = None,
                 grace_period_s: int | None = None, wait_timeout_s: float = 600.0,
                 progress_every_s: float = 10.0) -> tuple[BaseStorage, bool]:
    """``(storage, read_only)``. Raises :class:`StoreError` (one line: what, why, how to fix) when the store
    cannot be used.

    ``heartbeat_interval_s`` / ``grace_period_s`` turn on Optuna's trial heartbeat for an RDB URL (the
    ``heartbeat_interval`` / ``grace_period`` of :class:`optuna.storages.RDBStorage`); a journal URL
    cannot carry one (ValueError); a storage instance keeps its own settings. ``wait_timeout_s`` bounds the wait
    for an SQLite store's claims lock (progress every ``progress_every_s``).
    """
    if isinstance(spec, BaseStorage):
        return spec, False
    url = storage_url(spec)
    if url == "memory":  # Optuna's in-memory storage: this process only, nothing kept
        return optuna.storages.InMemoryStorage(), False
    hb: dict[str, Any] = {}
    if heartbeat_interval_s is not None:
        hb = {"heartbeat_interval": int(heartbeat_interval_s), "grace_period": grace_period_s}
    if url.startswith("journal://"):
        if hb:
            raise ValueError("a heartbeat needs an RDB storage (sqlite:///..., postgresql://...), not a journal file")
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = url[len("journal://"):]
        _store_file_exists(path)
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(path)), False
        except OSError as exc:
            fault = _fault(exc, path)
            raise StoreError(f"profile store {path}: cannot be opened: {fault.text if fault else exc.strerror}; "
                             f"{fault.advice if fault else 'pass a writable path'}") from None
    if url.startswith("sqlite:///"):
        return _open_sqlite(url, hb, wait_timeout_s, progress_every_s)
    given = url
    _server_url(url)  # a bad URL is reported as such, before the driver is looked for
    url = _postgres_driver(url)
    _check_server(url, given)
    kwargs: dict[str, Any] = {}
    if url.startswith("postgresql"):
        # pool_pre_ping: a pooled connection the server dropped (a restart) is replaced before use, not failed on
        kwargs["engine_kwargs"] = {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
    for attempt in range(5):  # a server store: several boards may create the schema at once; retry that only
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.get_storage(optuna.storages.RDBStorage(url, **kwargs, **hb)), False
        except ImportError:
            raise
        except Exception as exc:  # noqa: BLE001
            why = _one_line(exc)
            schema_race = any(w in why.lower() for w in ("already exists", "duplicate", "unique"))
            if attempt == 4 or not schema_race:
                raise StoreError(f"profile store {describe_url(given)}: cannot be opened ({why}); check the URL, the "
                                 "user's rights and the server, or use a local store (store='/path/profiles.sqlite3')"
                                 ) from None
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


_DEFAULT = object()

StoreSpec = Union[str, "os.PathLike[str]", BaseStorage, ProfileBackend, None]  # runtime alias: Python 3.8's typing
"""What a ``store=`` argument takes (:func:`~lightning_edge.tuning.search.open_backend` makes it a backend):
``"default"``, a path (an SQLite file) or an Optuna storage URL, a :class:`BaseStorage`, a profile backend (a
:class:`ProfileStore`, a shared :class:`~lightning_edge.tuning.backend.MemoryStore`), or ``None`` (a fresh in-memory
store)."""


class ProfileStore:
    """Profiles of every workload on every device model, in one Optuna storage."""

    def __init__(self, storage: str | os.PathLike[str] | BaseStorage | None = "default", *,
                 poll_interval_s: float = 0.05, wait_timeout_s: float = 600.0,
                 heartbeat_interval_s: int | None | object = _DEFAULT, grace_period_s: int | None = None,
                 progress_every_s: float = 10.0, outage_retry_s: float = 10.0, probe_every_s: float = 2.0) -> None:
        """``storage``: ``"default"``, a plain path (an SQLite file), an Optuna storage URL or a
        :class:`BaseStorage`. Raises :class:`StoreError` (one line) when it cannot be used.

        ``heartbeat_interval_s``: renew a claim every that many seconds while its point is measured (default
        5 s on an RDB URL; ``None``: no Optuna heartbeat), and take over other processes' claims not renewed for
        ``grace_period_s`` (default twice the interval), so that their points are profiled again. A claim whose
        owner is dead on this host is taken over at once, heartbeat or not. ``wait_timeout_s`` bounds the wait
        for points other live processes are measuring (TimeoutError after it). ``outage_retry_s``: how long a
        transient fault (:data:`TRANSIENT_FAULTS`) is retried before the store degrades to memory; ``probe_every_s``:
        how often a degraded store is probed again (module docstring, "Outages")."""
        explicit = heartbeat_interval_s is not _DEFAULT
        if explicit and heartbeat_interval_s is not None and int(heartbeat_interval_s) < 1:  # type: ignore[call-overload]
            raise ValueError(f"heartbeat_interval_s must be a whole number of seconds >= 1, got {heartbeat_interval_s!r}")
        if grace_period_s is not None and explicit and heartbeat_interval_s is None:
            raise ValueError("grace_period_s needs heartbeat_interval_s")
        self.spec = storage
        self.url = url = "" if isinstance(storage, BaseStorage) else storage_url(storage)
        hb_s = heartbeat_interval_s if explicit else (  # by default on where Optuna keeps heartbeats (RDB)
            None if (not url or url == "memory" or url.startswith("journal://")) else DEFAULT_HEARTBEAT_S)
        self.storage, self.read_only = open_storage(storage, heartbeat_interval_s=hb_s, grace_period_s=grace_period_s,
                                                    wait_timeout_s=wait_timeout_s, progress_every_s=progress_every_s)
        get_interval = getattr(self.storage, "get_heartbeat_interval", None)
        interval = get_interval() if callable(get_interval) else None
        self.heartbeat = interval is not None
        self.heartbeat_interval_s = float(interval) if interval is not None else None
        grace = grace_period_s
        if self.heartbeat and grace is None:
            grace = getattr(self.storage, "grace_period", None) or 2 * int(interval)  # type: ignore[arg-type]
        self.lease_renew_s = float(self.heartbeat_interval_s or DEFAULT_HEARTBEAT_S)
        self.grace_period_s = float(grace if grace is not None else 2 * self.lease_renew_s)
        # SQLite ignores SELECT ... FOR UPDATE and pysqlite reads outside the write transaction, so
        # Optuna's WAITING -> RUNNING transition is not atomic there: serialise claims with a file lock
        # (an SQLite file is shared by processes of one host only, which all see the lock file).
        path = _sqlite_path(url) if url else None
        self._claim_lock = path + ".claims.lock" if path is not None and not self.read_only else None
        self.poll_interval_s = float(poll_interval_s)
        self.wait_timeout_s = float(wait_timeout_s)
        self.progress_every_s = float(progress_every_s)
        self._studies: dict[str, optuna.Study | None] = {}
        # this process's profiles (measured or read): a read-only or failed store keeps its new ones only here
        self._kept: dict[tuple[str, str, ProfileKey], Measurement] = {}
        self._warned_read_only = False
        self.fault: str | None = None  # why this store stopped being written in this process (a storage fault)
        self._readable = True  # False once a read failed after a fault: then this process's profiles only
        self.outage_retry_s = float(outage_retry_s)
        self.probe_every_s = float(probe_every_s)
        self._was_read_only = self.read_only
        self._transient = False  # the fault is an outage: probed again, and what was kept is written once it ends
        self._unsaved: dict[tuple[str, str, ProfileKey], tuple[Measurement, dict[str, Any]]] = {}
        self._last_probe = 0.0
        self._warned_outage = False
        self.outages = 0  # outages waited out or recovered from (for reports and tests)
        # (pid, trial id) of claims whose state change may have committed while their owner was not recorded (an
        # outage between the two writes): this process's own, finished by it once the store answers
        self._unrecorded_claims: set[tuple[int, int]] = set()
        self.written_after_outage = 0  # profiles kept in memory during an outage and written once it ended

    def describe(self) -> str:
        """The store for messages: its file, or its URL without a password."""
        return describe_url(self.url) if self.url else type(self.storage).__name__

    def _degrade(self, exc: BaseException) -> bool:
        """A storage fault during a run (a full disk, an I/O error, a lost server, a claims lock held too long):
        from now on the store is read-only for this process (its profiles answer while it can be read; new ones are
        kept in memory), with one warning naming the root cause. False when ``exc`` is no storage fault."""
        fault = _fault(exc, self.describe() if self.url.startswith(("sqlite:///", "journal://")) else None)
        if fault is None:
            return False
        if self.fault is None:
            self.fault, self.read_only = fault.text, True
            self._transient = fault.kind in TRANSIENT_FAULTS
            self._last_probe = time.monotonic()
            if self._transient:
                warnings.warn(f"profile store {self.describe()}: {fault.text} for more than {self.outage_retry_s:g} s; "
                              "profiles of this run are kept in memory and written to the store once it answers "
                              f"again (checked every {self.probe_every_s:g} s); {fault.advice}", StoreFaultWarning,
                              stacklevel=4)
            else:
                warnings.warn(f"profile store {self.describe()}: {fault.text}; profiles of this run are kept in "
                              f"memory and not saved; to save them next time: {fault.advice}", StoreFaultWarning,
                              stacklevel=4)
        return True

    def transient_fault(self, exc: BaseException) -> _Fault | None:
        """The fault ``exc`` is when it is an outage worth waiting out (:data:`TRANSIENT_FAULTS`), else None."""
        fault = _fault(exc)
        return fault if fault is not None and fault.kind in TRANSIENT_FAULTS else None

    def note_outage(self, fault: _Fault) -> None:
        """Say once (a log line, not a warning: nothing is lost yet) that the store is being waited for."""
        if not self._warned_outage:
            self._warned_outage = True
            self.outages += 1
            _log.warning("profile store %s: %s; retrying for up to %g s (what is measured meanwhile is kept)",
                         self.describe(), fault.text, self.outage_retry_s)

    def recover(self, force: bool = False) -> bool:
        """After an outage (a transient fault): whether the store answers again; if so the profiles kept in memory
        are written (each once: a point saved meanwhile by another process is not written again) and the store is
        used as before (writable, read again). Probes at most every ``probe_every_s`` unless ``force``."""
        if self.fault is None:
            return True
        if not self._transient:
            return False
        now = time.monotonic()
        if not force and now - self._last_probe < self.probe_every_s:
            return False
        self._last_probe = now
        try:
            self.storage.get_all_studies()
            for (dm, wid, key), (m, ctx) in list(self._unsaved.items()):
                wrote = WorkloadProfiles(self, dm, wid, problem=ctx.get("problem"), strategy=ctx.get("strategy", "")
                                         ).save_kept(key, m)
                self._unsaved.pop((dm, wid, key), None)
                self.written_after_outage += int(wrote)  # not the ones another process saved meanwhile
        except Exception as exc:  # noqa: BLE001
            if _fault(exc) is None:
                raise
            return False
        _log.warning("profile store %s is back: %d profile(s) kept in memory during the outage written",
                     self.describe(), self.written_after_outage)
        self.fault, self._transient, self._readable = None, False, True
        self.read_only = self._was_read_only
        self._warned_outage = False
        return True

    def _note_read_only(self) -> None:
        if not self._warned_read_only and self.fault is None:
            self._warned_read_only = True
            msg = (f"profile store {self.describe()} is read-only for this user: its profiles are used, but new "
                   "profiles are kept in memory only and will be measured again by the next run; give this user "
                   "write access to the file and its directory, or pass a writable store, to keep them")
            warnings.warn(msg, StoreReadOnlyWarning, stacklevel=3)

    def __repr__(self) -> str:
        spec = redact_url(os.fspath(self.spec)) if isinstance(self.spec, (str, os.PathLike)) else self.spec
        return f"ProfileStore({spec!r})"

    @staticmethod
    def study_name(device_model: str, workload_id: str, kind: str) -> str:
        return StudyName(StoreKey.parse(device_model), workload_id, kind).text

    def study(self, device_model: str, workload_id: str, kind: str, label: str | None = None) -> optuna.Study | None:
        """The study of one (device model, workload, kind); created on first use (``None``: a read-only store
        that has no such study). ``label``: ``simulated`` or ``measured``, kept in the study's attributes."""
        if kind not in ("train", "infer"):
            raise ValueError(f"profile studies are 'train' or 'infer', got {kind!r}")
        name = self.study_name(device_model, workload_id, kind)
        sampler = RandomSampler(seed=0)  # the points are queued with fixed parameters: the sampler never decides one
        if name in self._studies:
            st = self._studies[name]
        elif self.read_only:
            try:
                st = optuna.load_study(storage=self.storage, study_name=name, sampler=sampler)
            except KeyError:
                st = None
            self._studies[name] = st
        else:
            st = optuna.create_study(storage=self.storage, study_name=name, directions=list(DIRECTIONS),
                                     sampler=sampler, load_if_exists=True)
            if st.user_attrs.get("kind") != kind:
                for key, value in (("kind", kind), ("device_model", device_model), ("workload", workload_id)):
                    st.set_user_attr(key, value)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    st.set_metric_names(["time_s", "power_w"])
            self._studies[name] = st
        if st is not None:
            if label and not self.read_only and st.user_attrs.get("label") not in (label, "mixed"):
                st.set_user_attr("label", label if "label" not in st.user_attrs else "mixed")
        return st

    def bind(self, device_model: str, workload_id: str, problem: Problem | None = None,
             strategy: str = "") -> WorkloadProfiles:
        return WorkloadProfiles(self, device_model, workload_id, problem=problem, strategy=strategy)

    def profiles(self, workload: Workload, *, workload_id: str | None = None, device_model: str | None = None,
                 problem: Problem | None = None, strategy: str = "") -> WorkloadProfiles | MemoryStore:
        """The profiles of ``workload`` (the :class:`~lightning_edge.tuning.backend.ProfileBackend` protocol).

        A workload the store cannot key (no ``fingerprint``, no ``workload_id``, no informative ``repr``) is
        profiled into an in-memory store instead (kept for this workload object while it lives), with a
        one-time warning that says how to persist its profiles."""
        try:
            wid = workload_fingerprint(workload, workload_id)
        except UnkeyableWorkload as exc:
            name = type(workload).__name__
            if name not in _WARNED_UNKEYED:
                _WARNED_UNKEYED.add(name)
                warnings.warn(f"{exc}; its profiles are kept in memory for this run only", UnkeyedWorkloadWarning,
                              stacklevel=5)
            try:
                mem = _MEMORY_STORES.get(workload)
                if mem is None:
                    mem = _MEMORY_STORES[workload] = MemoryStore()
            except TypeError:  # neither hashable nor weak-referenceable: a fresh store for this solve
                mem = MemoryStore()
            return mem
        return self.bind(device_key(workload, device_model), wid, problem=problem, strategy=strategy)

    def workloads(self) -> list[StudyName]:
        """``(device model, workload, kind)`` of every profile study in the storage."""
        names = (StudyName.parse(s.study_name)
                 for s in optuna.get_all_study_summaries(self.storage, include_best_trial=False))
        return [n for n in names if n is not None]


CLAIM_ATTR = "lightning_edge:claim"
"""System attribute of a claimed trial: its owner (host, boot, pidns, pid, start) and when it was claimed."""
RENEWED_ATTR = "lightning_edge:renewed"
"""System attribute: when the owner last renewed its claim (storages without Optuna's heartbeat)."""


class WorkloadProfiles:
    """The profiles of one workload on one device model: lookup, claim, measure, record."""

    def __init__(self, store: ProfileStore, device_model: str, workload_id: str, *, problem: Problem | None = None,
                 strategy: str = "") -> None:
        self.store = store
        self.device_model = device_model
        self.workload_id = workload_id
        self.problem = problem
        self.strategy = strategy
        self.host = socket.gethostname()
        self._study_ids: dict[str, int] = {}

    def study(self, kind: str, label: str | None = None) -> optuna.Study | None:
        return self.store.study(self.device_model, self.workload_id, kind, label=label)

    def _tid(self, t: FrozenTrial) -> int:
        """The storage's id of trial ``t`` of this workload (public storage API: ``FrozenTrial._trial_id`` is
        private)."""
        kind = trial_kind(t)
        if kind not in self._study_ids:
            self._study_ids[kind] = self.store.storage.get_study_id_from_name(self.study(kind).study_name)  # type: ignore[union-attr]
        return self.store.storage.get_trial_id_from_study_id_trial_number(self._study_ids[kind], t.number)

    # ------------------------------------------------------------------------------ reading
    def _groups(self, kind: str) -> dict[ProfileKey, list[FrozenTrial]]:
        """Non-failed trials per key, lowest number first."""
        groups: dict[ProfileKey, list[FrozenTrial]] = {}
        st = self.study(kind)
        for t in (st.get_trials(deepcopy=False) if st is not None else []):
            if t.state == TrialState.FAIL:
                continue
            k = trial_key(kind, t)
            if k is not None:
                groups.setdefault(k, []).append(t)
        for g in groups.values():
            g.sort(key=lambda t: t.number)
        return groups

    def _kept_key(self, key: ProfileKey) -> tuple[str, str, ProfileKey]:
        return (self.device_model, self.workload_id, key)

    def lookup(self, key: ProfileKey) -> Measurement | None:
        m = self.store._kept.get(self._kept_key(key))
        if m is not None or not self.store._readable:
            return m
        try:
            g = self._groups(key.kind).get(key)
        except Exception as exc:
            if self.store.fault is None or _fault(exc) is None:
                raise
            self.store._readable = False  # failed, and now unreadable too (a lost server): this run's profiles only
            return None
        return trial_measurement(g[0]) if g and g[0].state == TrialState.COMPLETE else None

    def table(self, kind: str) -> ProfileTable:
        """Every completed profile of ``kind`` as a :class:`ProfileTable`."""
        found = {k: trial_measurement(g[0]) for k, g in self._groups(kind).items() if g[0].state == TrialState.COMPLETE}
        for (dm, wid, k), m in self.store._kept.items():
            if dm == self.device_model and wid == self.workload_id and k.kind == kind:
                found.setdefault(k, m)
        rows = sorted(found.items(), key=lambda r: (r[0].mode, r[0].batch_size or 0))
        return ProfileTable.from_results(kind, rows, strategy="store")  # a ProfileKey has a Point's fields

    # ------------------------------------------------------------------------------ claiming
    def _enqueue(self, key: ProfileKey) -> None:
        # Study.enqueue_trial, with the parameters themselves set at creation (one transaction, no later writes)
        params = key_params(key)
        dists = distributions(key.kind)
        self.study(key.kind).add_trial(optuna.trial.create_trial(  # type: ignore[union-attr]
            state=TrialState.WAITING, params=params, distributions=dists,
            system_attrs={"fixed_params": params}, user_attrs={"requested_by": self.host}))

    def _close_duplicate(self, kind: str, t: FrozenTrial, owner: FrozenTrial) -> None:
        storage = self.store.storage
        tid = self._tid(t)
        if t.state == TrialState.WAITING:
            # marked first: a duplicate an outage leaves claimed (RUNNING) is still known as one, and closed later
            with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                storage.set_trial_user_attr(tid, "duplicate_of", owner.number)
            if not self._claim(t):
                return
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            storage.set_trial_user_attr(tid, "duplicate_of", owner.number)
            storage.set_trial_state_values(tid, TrialState.FAIL)

    def _claim(self, t: FrozenTrial, heartbeat: bool = False, context: dict | None = None) -> bool:
        storage = self.store.storage
        tid = self._tid(t)
        context = context or {}
        with _file_lock(self.store._claim_lock, store=self.store.describe(), wait_s=self.store.wait_timeout_s,
                        progress_every_s=self.store.progress_every_s, on_wait=context.get("on_wait"),
                        check=context.get("check")):
            pending = (os.getpid(), tid)
            self.store._unrecorded_claims.add(pending)  # a fault from here on may leave the trial ours, unrecorded
            try:
                ok = bool(storage.set_trial_state_values(tid, TrialState.RUNNING))
            except optuna.exceptions.UpdateFinishedTrialError:
                self.store._unrecorded_claims.discard(pending)
                return False
            if ok:
                self._record_owner(tid)
                if heartbeat and self.store.heartbeat:
                    storage.record_heartbeat(tid)  # type: ignore[attr-defined]
            self.store._unrecorded_claims.discard(pending)
            return ok

    def _record_owner(self, tid: int) -> None:
        """Write this process as the owner of claimed trial ``tid``."""
        self.store.storage.set_trial_system_attr(tid, CLAIM_ATTR, {**process_identity(), "since": time.time()})
        self.store._unrecorded_claims.discard((os.getpid(), tid))

    def _take_over_dead_claims(self, owners: Sequence[FrozenTrial]) -> list[str]:
        """Fail the RUNNING claims among ``owners`` whose owner is provably dead on this host, or (without
        Optuna's heartbeat) whose lease was not renewed for the grace period; returns what was done."""
        done = []
        now = time.time()
        for t in owners:
            if t.state != TrialState.RUNNING:
                continue
            claim = t.system_attrs.get(CLAIM_ATTR)
            why = owner_dead(claim) if isinstance(claim, dict) else None
            if why is None and not self._ours(t):
                why = unrecorded_claim(t, self.store.grace_period_s, now)
            if why is None and not self.store.heartbeat:
                renewed = t.system_attrs.get(RENEWED_ATTR) or (claim or {}).get("since")
                if renewed is None and t.datetime_start is not None:
                    renewed = t.datetime_start.timestamp()
                if renewed is not None and now - float(renewed) > self.store.grace_period_s:
                    why = f"its lease was not renewed for {now - float(renewed):.0f} s"
            if why is None:
                continue
            kind = trial_kind(t)
            if fail_claim(self.store.storage, self.store.study_name(self.device_model, self.workload_id, kind), t, why):
                done.append(f"trial {t.number}: {why}")
                k = trial_key(kind, t)
                _log.warning("profile store %s: took over the claim on %s (%s)", self.store.describe(),
                             k.mode if k is not None else f"trial {t.number}", why)
        return done

    def _fail_stale(self, kind: str) -> None:
        """Fail the claims of dead processes (heartbeat older than the grace period) in ``kind``'s study."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(self.study(kind))

    def _measure_claimed(self, study: optuna.Study, t: FrozenTrial, key: ProfileKey,
                         measure: Callable[[ProfileKey], Measurement]) -> Measurement:
        tid = self._tid(t)
        trial = optuna.trial.Trial(study, tid)
        beat = _Heartbeat(self.store, tid)
        try:
            suggest(trial, key.kind)  # the fixed params of the queued trial
            m = measure(key)
        except BaseException as exc:
            if not (isinstance(exc, Exception) and _fault(exc) is not None):  # an outage fails no trial: ours to finish
                with contextlib.suppress(Exception):  # a failing store must not hide the measurement's own error
                    study.tell(trial, state=TrialState.FAIL)
            raise
        finally:
            beat.stop()
        return self._record(study, trial, tid, key, m)

    def _attrs(self, key: ProfileKey, m: Measurement) -> tuple[dict[str, Any], dict[str, float]]:
        attrs = {"time_s": m.time_s, "power_w": m.power_w, "label": m.label,
                 "provenance": {"host": self.host, "strategy": self.strategy,
                                "problem": self.problem.describe() if self.problem is not None else ""}}
        if m.power_rel_sem is not None:
            attrs["power_rel_sem"] = m.power_rel_sem
        return attrs, constraint_values(self.problem, m.time_s, m.power_w, key.batch_size)

    def _record(self, study: optuna.Study, trial: optuna.trial.Trial, tid: int, key: ProfileKey,
                m: Measurement) -> Measurement:
        """Complete our claimed trial ``tid`` with profile ``m`` (or, when the claim was taken over meanwhile, add it
        as a completed trial of its own). An untrusted profile (partial readings: no power a budget can be checked
        against) is closed as ``FAIL`` with its label and ``untrusted`` set: never a profile a later solve reuses,
        measured again by the next one."""
        attrs, constraints = self._attrs(key, m)
        if not (m.trusted and m.has_power):
            with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError, ValueError, RuntimeError):
                for name, value in {**attrs, "power_w": None,
                                    "untrusted": "partial or rejected power readings"}.items():
                    trial.set_user_attr(name, value)
                study.tell(trial, state=TrialState.FAIL)
            return m
        try:
            for name, value in attrs.items():
                trial.set_user_attr(name, value)
            set_constraints(trial, constraints)
            study.tell(trial, [m.time_s, m.power_w])
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError, RuntimeError):
            if not self.store.storage.get_trial(tid).state.is_finished():
                raise
            # our claim was taken over while we measured (this process was paused past the lease): the profile
            # is still good; keep it as a completed trial of its own
            _log.warning("profile store %s: the claim on %s was taken over while it was measured; keeping the "
                         "profile as a new trial", self.store.describe(), key.mode)
            params = key_params(key)
            study.add_trial(create_trial(
                params=params, distributions=distributions(key.kind), values=[m.time_s, m.power_w],
                user_attrs=attrs, system_attrs={"fixed_params": params}, constraints=constraints))
        self.study(key.kind, label=m.label)
        return m

    def _ours(self, t: FrozenTrial) -> bool:
        """Whether running trial ``t`` is claimed by this very process (an outage interrupted its measurement or its
        write: this process finishes it, nobody else may)."""
        claim = t.system_attrs.get(CLAIM_ATTR)
        if claim is None:  # our claim's state change committed, its owner record did not (an outage between them)
            return (os.getpid(), self._tid(t)) in self.store._unrecorded_claims
        if not isinstance(claim, dict):
            return False
        me = process_identity()
        return all(claim.get(k) == me.get(k) for k in ("host", "boot", "pidns", "pid", "start"))

    def save_kept(self, key: ProfileKey, m: Measurement) -> bool:
        """Write a profile kept in memory during an outage, once: nothing when the point has a completed trial
        already (another process saved it meanwhile), our claimed trial completed when it is still running, else a
        new completed trial. True when a row was written."""
        if not (m.trusted and m.has_power):
            return False  # partial readings: never saved as a profile (measured again next time)
        groups = self._groups(key.kind)
        g = groups.get(key) or []
        if any(t.state == TrialState.COMPLETE for t in g):
            return False
        study = self.study(key.kind, label=m.label)
        mine = [t for t in g if t.state == TrialState.RUNNING and self._ours(t)]
        if mine:
            tid = self._tid(mine[0])
            trial = optuna.trial.Trial(study, tid)  # type: ignore[arg-type]
            suggest(trial, key.kind)
            self._record(study, trial, tid, key, m)  # type: ignore[arg-type]
        else:
            attrs, constraints = self._attrs(key, m)
            params = key_params(key)
            study.add_trial(create_trial(  # type: ignore[union-attr]
                params=params, distributions=distributions(key.kind), values=[m.time_s, m.power_w],
                user_attrs=attrs, system_attrs={"fixed_params": params}, constraints=constraints))
        for t in g:  # our queued trials of the point: closed as duplicates of the row just written
            if t.state == TrialState.WAITING:
                owner = self._groups(key.kind).get(key, [t])[0]
                if owner.number != t.number:
                    self._close_duplicate(key.kind, t, owner)
        return True

    def _wait_message(self, waiting: dict[ProfileKey, FrozenTrial], waited_s: float) -> str:
        now = time.time()
        parts = []
        for key, t in list(waiting.items())[:3]:
            claim = t.system_attrs.get(CLAIM_ATTR) or {}
            who = f"{claim.get('host', '?')} pid {claim.get('pid', '?')}" if claim else "another process"
            since = claim.get("since") or (t.datetime_start.timestamp() if t.datetime_start else None)
            age = f", claimed {now - float(since):.0f} s ago" if since else ""
            parts.append(f"{key.mode}{'' if key.batch_size is None else f' bs {key.batch_size}'} ({who}{age})")
        more = f" and {len(waiting) - 3} more" if len(waiting) > 3 else ""
        return (f"profile store {self.store.describe()}: waiting {waited_s:.0f} s (at most "
                f"{self.store.wait_timeout_s:.0f} s) for {len(waiting)} profile(s) that other processes are "
                f"measuring: {', '.join(parts)}{more}; a claim not renewed for {self.store.grace_period_s:.0f} s, "
                "or whose process has exited on this host, is taken over")

    def fetch_or_measure_many(self, keys: Sequence[ProfileKey], measure: Callable[[ProfileKey], Measurement],
                              context: dict | None = None) -> list[tuple[Measurement, bool]]:
        """Each key's profile: from the store when present, else measured once (claimed first), in order.

        ``context``: ``"check"`` (called while waiting; raises to stop waiting, e.g. on a cancel) and
        ``"on_wait"`` (called with a progress line every ``progress_every_s`` while waiting).

        A storage fault (a full disk, an I/O error, a lost server, a claims lock held past ``wait_timeout_s``)
        degrades the store for the rest of the process (:meth:`ProfileStore._degrade`: one warning naming the
        cause): what was measured is kept, in memory, and the run goes on without saving."""
        measured: dict[ProfileKey, Measurement] = {}
        failed: list[BaseException] = []
        context = context or {}

        def keep(key: ProfileKey) -> Measurement:
            if key in measured:  # measured before an outage interrupted its write: never measured again
                return measured[key]
            try:
                m = measured[key] = measure(key)
            except BaseException as exc:
                failed.append(exc)
                raise
            return m

        if self.store.fault is not None:
            self.store.recover()  # an outage that has ended: what was kept is written, the store read again
        if not self.store.read_only:
            deadline = time.monotonic() + self.store.outage_retry_s
            delay = 0.1
            while True:
                try:
                    got = self._fetch_or_claim_many(keys, keep, context)
                except Exception as exc:
                    if failed:  # the measurement's own error (a cancel) is no fault
                        raise
                    fault = self.store.transient_fault(exc)
                    if fault is not None and time.monotonic() + delay < deadline:
                        self.store.note_outage(fault)  # a server restarting: wait it out, measured profiles kept
                        time.sleep(delay)
                        delay = min(2.0 * delay, 1.0)
                        if context.get("check") is not None:
                            context["check"]()
                        continue
                    if not self.store._degrade(exc):
                        raise
                    for key, m in measured.items():  # measured before the fault: kept, not measured again
                        self.store._kept[self._kept_key(key)] = m
                        self._keep_unsaved(key, m)
                    break
                else:
                    for key, (m, _) in zip(keys, got):  # kept in memory too: a store that fails later still has them
                        self.store._kept[self._kept_key(key)] = m
                    self.store._warned_outage = False
                    return got
        got = self._fetch_or_measure_read_only(keys, keep)
        for k, (m, new) in zip(keys, got):
            if new or k in measured:
                self._keep_unsaved(k, m)
        return [(m, new or k in measured) for k, (m, new) in zip(keys, got)]

    def _keep_unsaved(self, key: ProfileKey, m: Measurement) -> None:
        """A profile measured while the store was out: written once it is back (:meth:`ProfileStore.recover`)."""
        if self.store._transient:
            self.store._unsaved.setdefault(self._kept_key(key), (m, {"problem": self.problem,
                                                                     "strategy": self.strategy}))

    def _fetch_or_claim_many(self, keys: Sequence[ProfileKey], measure: Callable[[ProfileKey], Measurement],
                             context: dict) -> list[tuple[Measurement, bool]]:
        check = context.get("check")
        on_wait = context.get("on_wait")
        out: dict[ProfileKey, tuple[Measurement, bool]] = {}
        wanted = list(dict.fromkeys(keys))
        enqueued: set[ProfileKey] = set()
        t0 = time.monotonic()
        deadline = t0 + self.store.wait_timeout_s
        next_stale_check = 0.0
        next_progress = t0 + self.store.progress_every_s
        while len(out) < len(wanted):
            progressed = False
            waiting: dict[ProfileKey, FrozenTrial] = {}
            for kind in sorted({k.kind for k in wanted if k not in out}):
                groups = self._groups(kind)
                for key in [k for k in wanted if k.kind == kind and k not in out]:
                    g = groups.get(key)
                    if not g:
                        if key in enqueued:
                            continue  # our queued trial is not visible yet
                        self._enqueue(key)
                        enqueued.add(key)
                        progressed = True
                        continue
                    owner = g[0]
                    for dup in g[1:]:
                        if dup.state == TrialState.WAITING or (dup.state == TrialState.RUNNING
                                                               and "duplicate_of" in dup.user_attrs):
                            self._close_duplicate(kind, dup, owner)
                    if owner.state == TrialState.COMPLETE:
                        out[key] = (trial_measurement(owner), False)
                        progressed = True
                    elif owner.state == TrialState.RUNNING and self._ours(owner):
                        # claimed by this process before an outage broke off its measurement or its write: finished
                        # here (a profile already measured is not measured again: ``measure`` keeps it)
                        if owner.system_attrs.get(CLAIM_ATTR) is None:
                            self._record_owner(self._tid(owner))  # the write the outage interrupted
                        out[key] = (self._measure_claimed(self.study(kind), owner, key, measure), True)  # type: ignore[arg-type]
                        progressed = True
                        groups = self._groups(kind)
                    elif owner.state == TrialState.WAITING and self._claim(owner, heartbeat=True, context=context):
                        out[key] = (self._measure_claimed(self.study(kind), owner, key, measure), True)  # type: ignore[arg-type]
                        progressed = True
                        groups = self._groups(kind)  # others may have finished meanwhile
                    elif owner.state == TrialState.RUNNING:
                        waiting[key] = owner
            if waiting and self._take_over_dead_claims(list(waiting.values())):
                enqueued.difference_update(waiting)  # their points are free again: queue them anew
                continue
            if not progressed:
                now = time.monotonic()
                if self.store.heartbeat and now >= next_stale_check:
                    for kind in sorted({k.kind for k in wanted if k not in out}):
                        self._fail_stale(kind)  # a dead process's point becomes free to claim again
                    next_stale_check = now + min(1.0, self.store.heartbeat_interval_s or 1.0)
                if check is not None:
                    check()
                if waiting and now >= next_progress:
                    msg = self._wait_message(waiting, now - t0)
                    (on_wait or _log.warning)(msg)
                    next_progress = now + self.store.progress_every_s
                if now > deadline:
                    missing = [str(k.mode) for k in wanted if k not in out]
                    raise TimeoutError(
                        f"profile store {self.store.describe()}: waited {self.store.wait_timeout_s:.0f} s for other "
                        f"processes to profile {missing[:5]}{'...' if len(missing) > 5 else ''}; they still renew "
                        "their claims (alive, on another host, or stuck); see lightning-edge store claims, and clear "
                        "them with lightning-edge store clear-claims --force if those processes are gone"
                    )
                time.sleep(self.store.poll_interval_s)
        return [out[k] for k in keys]

    def _fetch_or_measure_read_only(self, keys: Sequence[ProfileKey],
                                    measure: Callable[[ProfileKey], Measurement]) -> list[tuple[Measurement, bool]]:
        """A read-only store: stored profiles answer; the others are measured and kept in memory only."""
        out = []
        for key in keys:
            m = self.lookup(key)
            if m is not None:
                out.append((m, False))
                continue
            self.store._note_read_only()
            m = measure(key)
            self.store._kept[self._kept_key(key)] = m
            out.append((m, True))
        return out


def unrecorded_claim(t: FrozenTrial, grace_period_s: float, now: float | None = None) -> str | None:
    """Why RUNNING trial ``t`` is a claim to take over when its owner was never recorded (its process was lost
    between the claim's state change and its owner record: nothing renews it, and Optuna counts no trial without a
    heartbeat as stale) and it is older than ``grace_period_s``; else ``None``."""
    if t.system_attrs.get(CLAIM_ATTR) is not None or t.datetime_start is None:
        return None
    age = (time.time() if now is None else now) - t.datetime_start.timestamp()
    return f"claimed {age:.0f} s ago and its owner never recorded" if age > grace_period_s else None


def fail_claim(storage: BaseStorage, study_name: str, t: FrozenTrial, why: str) -> bool:
    """Fail a RUNNING claim of study ``study_name`` (its point becomes free to claim again); False if it finished
    meanwhile."""
    tid = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study_name), t.number)
    try:
        by = f"{socket.gethostname()} pid {os.getpid()}"
        storage.set_trial_system_attr(tid, "lightning_edge:taken_over", f"{why} (by {by})")
        return bool(storage.set_trial_state_values(tid, TrialState.FAIL))
    except optuna.exceptions.UpdateFinishedTrialError:
        return False


class _Heartbeat:
    """Renews one claim from a daemon thread until :meth:`stop`: Optuna's trial heartbeat on RDB storages with
    one, else the claim's ``lightning_edge:renewed`` time."""

    def __init__(self, store: ProfileStore, trial_id: int) -> None:
        self.storage, self.trial_id = store.storage, trial_id
        self.optuna_heartbeat = store.heartbeat
        self.interval = float(store.lease_renew_s)
        self._stop = threading.Event()
        self._beat()
        self._thread = threading.Thread(target=self._run, name=f"profile-heartbeat-{trial_id}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        if self.optuna_heartbeat:
            self.storage.record_heartbeat(self.trial_id)  # type: ignore[attr-defined]
        else:
            self.storage.set_trial_system_attr(self.trial_id, RENEWED_ATTR, time.time())

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._beat()
            except optuna.exceptions.UpdateFinishedTrialError:
                return  # taken over (we were presumed dead) or finished
            except Exception as exc:  # a lost beat only risks a re-profile
                fault = _fault(exc)
                if fault is not None and fault.kind in TRANSIENT_FAULTS:
                    continue  # an outage: beat again at the next interval (the claim must outlive a server restart)
                if fault is not None:
                    return  # the store failed (a full disk...): the measurement's own write reports it, once
                _log.warning("could not renew the claim of trial %s", self.trial_id, exc_info=True)  # pragma: no cover

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()


# ------------------------------------------------------------------------------ process identity
def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, start time in clock ticks since boot)`` of a process from ``/proc`` (None if it is gone)."""
    text = _read(f"/proc/{int(pid)}/stat")
    if not text:
        return None
    rest = text[text.rfind(")") + 2:].split()  # the command name may hold spaces and parentheses
    try:
        return rest[0], int(rest[19])
    except (IndexError, ValueError):
        return None


def _host_identity() -> dict[str, Any]:
    out: dict[str, Any] = {"host": socket.gethostname(), "boot": _read("/proc/sys/kernel/random/boot_id") or ""}
    try:
        out["pidns"] = os.readlink("/proc/self/ns/pid")
    except OSError:
        out["pidns"] = ""
    return out


def process_identity(pid: int | None = None) -> dict[str, Any]:
    """Who owns a claim: host, boot id, PID namespace, pid and process start time."""
    pid = os.getpid() if pid is None else int(pid)
    st = _proc_stat(pid)
    return {**_host_identity(), "pid": pid, "start": st[1] if st else None}


def owner_dead(claim: dict[str, Any] | None) -> str | None:
    """Why the owner of a claim is provably dead (same host, boot and PID namespace), or ``None`` when it may be
    alive (another host or container, or the process still runs)."""
    if not claim or "pid" not in claim:
        return None
    me = _host_identity()
    if claim.get("host") != me["host"] or not me["boot"] or claim.get("boot") != me["boot"] or \
            claim.get("pidns") != me["pidns"]:
        return None
    pid = int(claim["pid"])
    st = _proc_stat(pid)
    if st is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return f"process {pid} on {me['host']} has exited"
        except PermissionError:
            return None
        return None if not os.path.isdir("/proc/self") else f"process {pid} on {me['host']} has exited"
    state, start = st
    if state in ("Z", "X"):
        return f"process {pid} on {me['host']} has exited"
    if claim.get("start") is not None and int(claim["start"]) != start:
        return f"process {pid} on {me['host']} has exited (the pid now belongs to another process)"
    return None


def _postgres_driver(url: str) -> str:
    """``postgresql://`` means psycopg 3 to SQLAlchemy 2.1; use psycopg2 instead when only it is installed."""
    if not url.startswith("postgresql://"):
        return url
    import importlib.util

    if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
        return "postgresql+psycopg2://" + url[len("postgresql://"):]
    if importlib.util.find_spec("psycopg") is None:
        raise ImportError(f"the profile store {url.split('@')[-1]!r} is PostgreSQL: pip install psycopg2-binary "
                          "(or psycopg[binary])")
    return url


def _sqlite_wal(rdb: optuna.storages.RDBStorage) -> None:
    """Write-ahead logging and ``synchronous=NORMAL``: an fsync per checkpoint instead of per
    transaction (profiling writes ~10 small transactions per point, and a Jetson's eMMC or SD card is
    slow to sync), and readers that do not block the writer. Safe against corruption; a power cut may
    lose the last profiles, which are then simply measured again."""
    from sqlalchemy import event

    def _pragmas(dbapi_conn: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    event.listen(rdb.engine, "connect", _pragmas)
    rdb.engine.dispose()  # reconnect with the pragmas


def _lock_holder(path: str) -> int | None:
    """The pid holding an ``flock`` on ``path``, from ``/proc/locks`` (``None`` when it cannot be told)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in (_read("/proc/locks") or "").splitlines():
        parts = line.split()  # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5309130 0 EOF"; waiters carry "->"
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == inode:
            with contextlib.suppress(ValueError):
                return int(parts[4]) or None
    return None


def _lock_wait(path: str) -> tuple[str, str]:
    """``(who holds the lock at path, what to do)`` for messages."""
    pid = _lock_holder(path)
    if pid is None:
        return "another process", f"find it with fuser -v '{path}'; end it if it hangs"
    if pid == os.getpid():
        return f"this process (pid {pid}, another thread)", "it lets go when that thread's store call ends"
    st = _proc_stat(pid)
    if st is not None and st[0] in ("T", "t"):
        return (f"pid {pid}, stopped (Ctrl-Z or SIGSTOP)",
                f"resume it (fg in its terminal, or kill -CONT {pid}) or end it (kill {pid})")
    return f"pid {pid}, running", f"it lets go within seconds unless it hangs: then end it (kill {pid})"


def _open_lock_file(path: str) -> int:
    """Open (create) a lock file without blocking; it must be a regular file (a planted FIFO or directory is not)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except IsADirectoryError:
        raise StoreError(f"profile store lock {path}: is a directory, not a regular file; remove it (rmdir "
                         f"'{path}') and it is created again") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StoreError(f"profile store lock {path}: not a regular file; remove it (rm '{path}') and it is "
                             "created again")
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def _file_lock(path: str | None, *, store: str = "", wait_s: float = 600.0, progress_every_s: float = 10.0,
               on_wait: Callable[[str], None] | None = None, check: Callable[[], None] | None = None) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (no-op for ``None`` or where ``fcntl`` is missing).

    The wait is bounded: every ``progress_every_s`` a line names the holder (its pid, and whether it is stopped) and
    what to do (``on_wait``, else a logged warning); ``check()`` may raise to stop waiting; after ``wait_s``
    :class:`StoreLockTimeout`. (A process stopped with Ctrl-Z while holding the lock blocked every other one for
    ever.)"""
    if path is None:
        yield
        return
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: SQLite claims are then best effort
        yield
        return
    fd = _open_lock_file(path)
    try:
        t0 = time.monotonic()
        next_progress, pause = t0 + progress_every_s, 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            now = time.monotonic()
            if check is not None:
                check()
            if now - t0 >= wait_s or now >= next_progress:
                who, advice = _lock_wait(path)
                if now - t0 >= wait_s:
                    why = f"its claims lock {path} is held by {who}"
                    raise StoreLockTimeout(f"profile store {store}: its claims lock {path} has been held for "
                                           f"{now - t0:.0f} s by {who}; {advice}", why, advice)
                (on_wait or _log.warning)(f"profile store {store}: waiting {now - t0:.0f} s (at most {wait_s:.0f} s) "
                                          f"for its claims lock {path}, held by {who}; {advice}")
                next_progress = now + progress_every_s
            time.sleep(pause)
            pause = min(2 * pause, 0.05)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def constraint_values(problem: Problem | None, time_s: float, power_w: float, batch_size: int | None = None) -> dict[str, float]:
    """Optuna constraint values of one profile (feasible when all <= 0) for the problem that asked for it: its own
    :meth:`constraints` (those its assessment checks, with its tolerance); none without a problem."""
    return {} if problem is None else {k: float(v) for k, v in problem.constraints(time_s, power_w, batch_size).items()}
