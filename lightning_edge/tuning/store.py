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
    ``Trial.set_constraint`` (``power_w``, ``latency_s``, ``keep_up_s``: feasible when <= 0).

Storage
    ``ProfileStore()`` / ``"default"``: SQLite in ``platformdirs.user_cache_dir("lightning_edge")``
    (embedded, nothing to start; ``$LIGHTNING_EDGE_PROFILE_STORE`` overrides). Any Optuna storage URL
    works (``postgresql://user@host/db`` so a fleet of boards shares one store), ``journal:///path`` for
    Optuna's journal file storage, or a ``BaseStorage`` instance.

Claims (several processes profiling one workload together)
    A point is wanted by *enqueueing* a trial for it (``Study.enqueue_trial``: its parameters are
    written in the same transaction that creates it). The owner of a point is the *lowest-numbered*
    trial with those parameters that did not fail; trial creation is serialised per study (the RDB
    storage locks the study row, the journal orders its log), so every process agrees on it. A process
    measures a point only after claiming its owner trial with the storage's atomic
    ``WAITING -> RUNNING`` transition (the compare-and-set ``Study.ask`` uses to pop enqueued trials);
    losers wait for the result and profile other points meanwhile. (On SQLite that transition is not
    atomic, so claims also take an exclusive lock on ``<db file>.claims.lock``.) Duplicate enqueued trials are closed
    as ``FAIL`` with user attribute ``duplicate_of``. So no point is measured twice and none is lost.
    A process that dies while measuring would leave its trial ``RUNNING`` for ever. With a heartbeat
    (``ProfileStore(url, heartbeat_interval_s=10)``, RDB storages: SQLite, PostgreSQL, MySQL) the
    measuring process records Optuna heartbeats on its claimed trial (``RDBStorage`` with
    ``heartbeat_interval`` / ``grace_period``); a process waiting for that point calls
    ``optuna.storages.fail_stale_trials`` and, once the heartbeat is older than the grace period
    (default twice the interval), the stale trial is failed and the point is enqueued, claimed and
    profiled again by the waiting process.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from lightning_edge.devices.modes import KNOBS, PowerMode
from lightning_edge.tuning.problems import Measurement
from lightning_edge.tuning.search import ProfileKey
from lightning_edge.tuning.table import ProfileTable

_log = logging.getLogger(__name__)

ENV_STORE = "LIGHTNING_EDGE_PROFILE_STORE"
STUDY_PREFIX = "lightning_edge"
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


def params_key(kind: str, params: dict[str, Any]) -> ProfileKey | None:
    """The store entry of a trial's parameters (``None`` if they are not a profile of ``kind``)."""
    try:
        mode = PowerMode(int(params["cores"]), params["cpu_mhz"], params["gpu_mhz"], params["mem_mhz"])
        bs = int(params["batch_size"]) if kind == "infer" else None
    except (KeyError, TypeError, ValueError):
        return None
    return ProfileKey(kind, mode, bs)


def trial_key(kind: str, t: FrozenTrial) -> ProfileKey | None:
    params = t.params if t.params else t.system_attrs.get("fixed_params", {})
    return params_key(kind, params)


def _slug(text: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_.:+" else "-" for c in str(text))
    return keep.strip("-") or "unnamed"


def workload_fingerprint(workload: Any, workload_id: str | None = None) -> str:
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
    raise ValueError(
        f"cannot key the profiles of a {type(workload).__name__} in a persistent profile store: give it a "
        "`fingerprint` string attribute (model, training batch size, precision...), or pass workload_id='...', "
        "or use store=None for a throw-away in-memory store"
    )


def device_key(workload: Any, device_model: str | None = None) -> str:
    """The device model the profiles belong to: ``device_model``, else ``workload.device_model``."""
    dm = device_model or getattr(workload, "device_model", None)
    if callable(dm):
        dm = dm()
    return _slug(dm or "unknown-device")


def default_storage_url() -> str:
    """``$LIGHTNING_EDGE_PROFILE_STORE`` or SQLite in the user cache directory (created if needed)."""
    env = os.environ.get(ENV_STORE)
    if env:
        return env
    import platformdirs

    path = Path(platformdirs.user_cache_dir("lightning_edge")) / "profiles.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def make_storage(spec: str | BaseStorage | None, *, heartbeat_interval_s: int | None = None,
                 grace_period_s: int | None = None) -> BaseStorage:
    """An Optuna storage from ``"default"``, an RDB URL, ``journal:///path`` or a storage instance.

    ``heartbeat_interval_s`` / ``grace_period_s`` turn on Optuna's trial heartbeat for an RDB URL (the
    ``heartbeat_interval`` / ``grace_period`` of :class:`optuna.storages.RDBStorage`); a journal URL
    cannot carry one (ValueError); a storage instance keeps its own settings.
    """
    if isinstance(spec, BaseStorage):
        return spec
    url = default_storage_url() if spec in (None, "default") else str(spec)
    hb: dict[str, Any] = {}
    if heartbeat_interval_s is not None:
        hb = {"heartbeat_interval": int(heartbeat_interval_s), "grace_period": grace_period_s}
    if url.startswith("journal://"):
        if hb:
            raise ValueError("a heartbeat needs an RDB storage (sqlite:///..., postgresql://...), not a journal file")
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = url[len("journal://"):]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(path))
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        # several processes may write: wait for SQLite's lock instead of failing after 5 s; and create the
        # schema of a new file one process at a time (Optuna's first-time set-up is not concurrent-safe)
        with _file_lock(path + ".claims.lock"):
            with warnings.catch_warnings():  # the heartbeat arguments are "experimental" in Optuna
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                rdb = optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 120}}, **hb)
            _sqlite_wal(rdb)
            return optuna.storages.get_storage(rdb)
    url = _postgres_driver(url)
    for attempt in range(5):  # a server store: several boards may create the schema at once; retry
        try:
            if not hb:
                return optuna.storages.get_storage(url)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.get_storage(optuna.storages.RDBStorage(url, **hb))
        except Exception:
            if attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


class ProfileStore:
    """Profiles of every workload on every device model, in one Optuna storage."""

    def __init__(self, storage: str | BaseStorage | None = "default", *, poll_interval_s: float = 0.05,
                 wait_timeout_s: float = 24 * 3600.0, heartbeat_interval_s: int | None = None,
                 grace_period_s: int | None = None) -> None:
        """``heartbeat_interval_s``: record an Optuna heartbeat on a claimed trial every that many seconds
        while its point is measured, and fail other processes' claims whose heartbeat is older than
        ``grace_period_s`` (default ``2 * heartbeat_interval_s``) so that their points are profiled again
        (RDB storages only; a :class:`BaseStorage` instance brings its own heartbeat settings)."""
        if heartbeat_interval_s is not None and int(heartbeat_interval_s) < 1:
            raise ValueError(f"heartbeat_interval_s must be a whole number of seconds >= 1, got {heartbeat_interval_s!r}")
        if grace_period_s is not None and heartbeat_interval_s is None:
            raise ValueError("grace_period_s needs heartbeat_interval_s")
        self.spec = storage
        self.storage = make_storage(storage, heartbeat_interval_s=heartbeat_interval_s, grace_period_s=grace_period_s)
        from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled

        self.heartbeat = isinstance(self.storage, BaseHeartbeat) and is_heartbeat_enabled(self.storage)
        self.heartbeat_interval_s = float(self.storage.get_heartbeat_interval()) if self.heartbeat else None  # type: ignore[attr-defined]
        url = default_storage_url() if storage in (None, "default") else (storage if isinstance(storage, str) else "")
        # SQLite ignores SELECT ... FOR UPDATE and pysqlite reads outside the write transaction, so
        # Optuna's WAITING -> RUNNING transition is not atomic there: serialise claims with a file lock
        # (an SQLite file is shared by processes of one host only, which all see the lock file).
        self._claim_lock = url[len("sqlite:///"):] + ".claims.lock" if url.startswith("sqlite:///") else None
        self.poll_interval_s = float(poll_interval_s)
        self.wait_timeout_s = float(wait_timeout_s)
        self._studies: dict[str, optuna.Study] = {}

    @classmethod
    def default(cls) -> ProfileStore:
        return cls("default")

    @classmethod
    def open(cls, spec: Any) -> ProfileStore:
        return spec if isinstance(spec, ProfileStore) else cls(spec)

    def __repr__(self) -> str:
        return f"ProfileStore({self.spec!r})"

    @staticmethod
    def study_name(device_model: str, workload_id: str, kind: str) -> str:
        return f"{STUDY_PREFIX}/{_slug(device_model)}/{_slug(workload_id)}/{kind}"

    def study(self, device_model: str, workload_id: str, kind: str, sampler: Any = None) -> optuna.Study:
        """The study of one (device model, workload, kind); created on first use."""
        if kind not in ("train", "infer"):
            raise ValueError(f"profile studies are 'train' or 'infer', got {kind!r}")
        name = self.study_name(device_model, workload_id, kind)
        from lightning_edge.tuning.samplers import PassiveSampler

        sampler = sampler if sampler is not None else PassiveSampler()
        st = self._studies.get(name)
        if st is None:
            st = optuna.create_study(storage=self.storage, study_name=name, directions=list(DIRECTIONS),
                                     sampler=sampler, load_if_exists=True)
            if st.user_attrs.get("kind") != kind:
                st.set_user_attr("kind", kind)
                st.set_user_attr("device_model", device_model)
                st.set_user_attr("workload", workload_id)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    st.set_metric_names(["time_s", "power_w"])
            self._studies[name] = st
        st.sampler = sampler
        return st

    def bind(self, device_model: str, workload_id: str, sampler: Any = None, problem: Any = None,
             strategy: str = "") -> WorkloadProfiles:
        return WorkloadProfiles(self, device_model, workload_id, sampler=sampler, problem=problem, strategy=strategy)

    def profiler(self, workload: Any, *, workload_id: str | None = None, device_model: str | None = None,
                 sampler: Any = None, problem: Any = None) -> Any:
        """A profiler (see :class:`~lightning_edge.tuning.search.Profiler`) backed by this store."""
        from lightning_edge.tuning.search import Profiler

        bound = self.bind(device_key(workload, device_model), workload_fingerprint(workload, workload_id),
                          sampler=sampler, problem=problem,
                          strategy=getattr(sampler, "strategy_name", "") if sampler is not None else "")
        return Profiler(workload, bound)

    def workloads(self) -> list[tuple[str, str, str]]:
        """``(device model, workload, kind)`` of every profile study in the storage."""
        out = []
        for s in optuna.get_all_study_summaries(self.storage, include_best_trial=False):
            parts = s.study_name.split("/")
            if len(parts) == 4 and parts[0] == STUDY_PREFIX:
                out.append((parts[1], parts[2], parts[3]))
        return out


class WorkloadProfiles:
    """The profiles of one workload on one device model: lookup, claim, measure, record."""

    def __init__(self, store: ProfileStore, device_model: str, workload_id: str, *, sampler: Any = None,
                 problem: Any = None, strategy: str = "") -> None:
        self.store = store
        self.device_model = device_model
        self.workload_id = workload_id
        self.sampler = sampler
        self.problem = problem
        self.strategy = strategy
        self.host = socket.gethostname()

    def study(self, kind: str) -> optuna.Study:
        return self.store.study(self.device_model, self.workload_id, kind, self.sampler)

    # ------------------------------------------------------------------------------ reading
    def _groups(self, kind: str) -> dict[ProfileKey, list[FrozenTrial]]:
        """Non-failed trials per key, lowest number first."""
        groups: dict[ProfileKey, list[FrozenTrial]] = {}
        for t in self.study(kind).get_trials(deepcopy=False):
            if t.state == TrialState.FAIL:
                continue
            k = trial_key(kind, t)
            if k is not None:
                groups.setdefault(k, []).append(t)
        for g in groups.values():
            g.sort(key=lambda t: t.number)
        return groups

    @staticmethod
    def _measurement(t: FrozenTrial) -> Measurement:
        ua = t.user_attrs
        return Measurement(ua.get("time_s", t.values[0]), ua.get("power_w", t.values[1]), ua.get("label", "measured"))

    def lookup(self, key: ProfileKey) -> Measurement | None:
        g = self._groups(key.kind).get(key)
        if g and g[0].state == TrialState.COMPLETE:
            return self._measurement(g[0])
        return None

    def table(self, kind: str) -> ProfileTable:
        """Every completed profile of ``kind`` as a :class:`ProfileTable`."""
        rows = [(k, self._measurement(g[0])) for k, g in self._groups(kind).items() if g[0].state == TrialState.COMPLETE]
        rows.sort(key=lambda r: (r[0].mode, r[0].batch_size or 0))
        modes = [k.mode for k, _ in rows]
        t = [m.time_s for _, m in rows]
        p = [m.power_w for _, m in rows]
        labels = [m.label for _, m in rows]
        if kind == "train":
            return ProfileTable("train", modes, train_time_s=t, train_power_w=p, labels=labels, strategy="store")
        return ProfileTable("infer", modes, batch_size=[k.batch_size for k, _ in rows], infer_time_s=t,
                            infer_power_w=p, labels=labels, strategy="store")

    # ------------------------------------------------------------------------------ claiming
    def _enqueue(self, key: ProfileKey) -> None:
        # Study.enqueue_trial, with the parameters themselves set at creation (one transaction, no later writes)
        params = key_params(key)
        dists = distributions(key.kind)
        self.study(key.kind).add_trial(optuna.trial.create_trial(
            state=TrialState.WAITING, params=params, distributions=dists,
            system_attrs={"fixed_params": params}, user_attrs={"requested_by": self.host}))

    def _close_duplicate(self, kind: str, t: FrozenTrial, owner: FrozenTrial) -> None:
        storage = self.store.storage
        if not self._claim(t):
            return
        try:
            storage.set_trial_user_attr(t._trial_id, "duplicate_of", owner.number)
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass

    def _claim(self, t: FrozenTrial, heartbeat: bool = False) -> bool:
        with _file_lock(self.store._claim_lock):
            try:
                ok = bool(self.store.storage.set_trial_state_values(t._trial_id, TrialState.RUNNING))
            except optuna.exceptions.UpdateFinishedTrialError:
                return False
            if ok and heartbeat and self.store.heartbeat:
                self.store.storage.record_heartbeat(t._trial_id)  # type: ignore[attr-defined]
            return ok

    def _fail_stale(self, kind: str) -> None:
        """Fail the claims of dead processes (heartbeat older than the grace period) in ``kind``'s study."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(self.study(kind))

    def _measure_claimed(self, study: optuna.Study, t: FrozenTrial, key: ProfileKey,
                         measure: Callable[[ProfileKey], Measurement]) -> Measurement:
        if self.sampler is not None:
            self.sampler.pending = key
        trial = optuna.trial.Trial(study, t._trial_id)
        beat = _Heartbeat(self.store, t._trial_id) if self.store.heartbeat else None
        try:
            for name, dist in distributions(key.kind).items():  # the fixed params of the queued trial
                trial._suggest(name, dist)
            m = measure(key)
        except BaseException:
            study.tell(trial, state=TrialState.FAIL)
            raise
        finally:
            if beat is not None:
                beat.stop()
            if self.sampler is not None:
                self.sampler.pending = None
        trial.set_user_attr("time_s", m.time_s)
        trial.set_user_attr("power_w", m.power_w)
        trial.set_user_attr("label", m.label)
        trial.set_user_attr("provenance", {"host": self.host, "strategy": self.strategy,
                                           "problem": self.problem.describe() if self.problem is not None else ""})
        if self.problem is not None:
            for name, value in constraint_values(self.problem, key, m).items():
                trial.set_constraint(name, value)
        study.tell(trial, [m.time_s, m.power_w])
        return m

    def fetch_or_measure_many(self, keys: Sequence[ProfileKey], measure: Callable[[ProfileKey], Measurement],
                              context: dict | None = None) -> list[tuple[Measurement, bool]]:
        """Each key's profile: from the store when present, else measured once (claimed first), in order."""
        out: dict[ProfileKey, tuple[Measurement, bool]] = {}
        wanted = list(dict.fromkeys(keys))
        enqueued: set[ProfileKey] = set()
        deadline = time.monotonic() + self.store.wait_timeout_s
        next_stale_check = 0.0
        while len(out) < len(wanted):
            progressed = False
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
                        if dup.state == TrialState.WAITING:
                            self._close_duplicate(kind, dup, owner)
                    if owner.state == TrialState.COMPLETE:
                        out[key] = (self._measurement(owner), False)
                        progressed = True
                    elif owner.state == TrialState.WAITING and self._claim(owner, heartbeat=True):
                        out[key] = (self._measure_claimed(self.study(kind), owner, key, measure), True)
                        progressed = True
                        groups = self._groups(kind)  # others may have finished meanwhile
            if not progressed:
                if self.store.heartbeat and time.monotonic() >= next_stale_check:
                    for kind in sorted({k.kind for k in wanted if k not in out}):
                        self._fail_stale(kind)  # a dead process's point becomes free to claim again
                    next_stale_check = time.monotonic() + min(1.0, self.store.heartbeat_interval_s or 1.0)
                if time.monotonic() > deadline:
                    missing = [str(k.mode) for k in wanted if k not in out]
                    raise TimeoutError(
                        f"waited {self.store.wait_timeout_s:.0f} s for other processes to profile {missing[:5]}...: "
                        "a process may have died while profiling; open the store with a heartbeat "
                        "(ProfileStore(url, heartbeat_interval_s=...)) so that stale claims are failed and re-profiled"
                    )
                time.sleep(self.store.poll_interval_s)
        return [out[k] for k in keys]


class _Heartbeat:
    """Records Optuna heartbeats on one claimed trial from a daemon thread until :meth:`stop`."""

    def __init__(self, store: ProfileStore, trial_id: int) -> None:
        self.storage, self.trial_id = store.storage, trial_id
        self.interval = float(store.heartbeat_interval_s or 1.0)
        self._stop = threading.Event()
        self.storage.record_heartbeat(trial_id)  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._run, name=f"profile-heartbeat-{trial_id}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.storage.record_heartbeat(self.trial_id)  # type: ignore[attr-defined]
            except Exception:  # pragma: no cover - a lost beat only risks a re-profile
                _log.warning("could not record the heartbeat of trial %s", self.trial_id, exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()


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


def _sqlite_wal(rdb: Any) -> None:
    """Write-ahead logging and ``synchronous=NORMAL``: an fsync per checkpoint instead of per
    transaction (profiling writes ~10 small transactions per point, and a Jetson's eMMC or SD card is
    slow to sync), and readers that do not block the writer. Safe against corruption; a power cut may
    lose the last profiles, which are then simply measured again."""
    from sqlalchemy import event

    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    event.listen(rdb.engine, "connect", _pragmas)
    rdb.engine.dispose()  # reconnect with the pragmas


@contextlib.contextmanager
def _file_lock(path: str | None) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (no-op for ``None`` or where ``fcntl`` is missing)."""
    if path is None:
        yield
        return
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: SQLite claims are then best effort
        yield
        return
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def constraint_values(problem: Any, key: ProfileKey, m: Measurement) -> dict[str, float]:
    """Constraint values of one profile for the problem that asked for it (feasible when all <= 0)."""
    out = {"power_w": float(m.power_w - problem.power_budget_w)}
    if key.kind == "infer" and hasattr(problem, "latency_budget_s"):
        bs = int(key.batch_size)  # type: ignore[arg-type]
        out["latency_s"] = float((bs - 1) / problem.arrival_rps + m.time_s - problem.latency_budget_s)
        out["keep_up_s"] = float(m.time_s - bs / problem.arrival_rps)
    return out

