"""The Optuna profile store: reuse across solves and runs, samplers, several processes on one store."""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid

import optuna
import pytest
from optuna.trial import TrialState

from lightning_edge.tuning import (
    ALS,
    GMD,
    ConcurrentProblem,
    Exhaustive,
    InferenceProblem,
    ProfileStore,
    RandomSampling,
    TrainingProblem,
)
from lightning_edge.tuning._optuna import constraints_of
from lightning_edge.tuning.backend import MemoryStore, ProfileBackend
from lightning_edge.tuning.samplers import ALSSampler, GMDSampler
from lightning_edge.tuning.search import open_backend
from lightning_edge.tuning.store import (
    default_storage_url,
    trial_key,
    trial_measurement,
    workload_fingerprint,
)

from .workloads import HAND_SPACE, SMALL_SPACE, LinearWorkload, SaturatingWorkload

optuna.logging.set_verbosity(optuna.logging.WARNING)


class SlowWorkload(SaturatingWorkload):
    """Takes ``delay_s`` per profile, like a board running ~40 minibatches (so processes overlap)."""

    def __init__(self, delay_s: float = 0.02, fingerprint: str = "slow-v1") -> None:
        super().__init__()
        self.delay_s = delay_s
        self.fingerprint = fingerprint

    def train(self, mode):
        time.sleep(self.delay_s)
        return super().train(mode)

    def infer(self, mode, batch_size):
        time.sleep(self.delay_s)
        return super().infer(mode, batch_size)


def test_store_arguments_become_backends_in_one_place(tmp_path):
    mem = MemoryStore()
    assert open_backend(mem) is mem and isinstance(open_backend(None), MemoryStore) and open_backend(None) is not mem
    ps = open_backend(str(tmp_path / "p.sqlite3"))  # a path, a URL or "default": the Optuna store parses it
    assert isinstance(ps, ProfileStore) and open_backend(ps) is ps and ps.describe() == str(tmp_path / "p.sqlite3")

    class Logged(MemoryStore):  # any object with profiles() and describe() is a backend
        def __init__(self):
            super().__init__()
            self.asked = []

        def profiles(self, workload, **kw):
            self.asked.append(kw)
            return self

    back = Logged()
    assert isinstance(back, ProfileBackend) and open_backend(back) is back
    r = GMD().run(TrainingProblem(29.5), HAND_SPACE, LinearWorkload(), store=back, workload_id="w")
    assert len(back) == r.new_profiles == r.profiles_used
    assert back.asked == [{"workload_id": "w", "device_model": None, "problem": TrainingProblem(29.5), "strategy": "GMD"}]


def test_second_solve_profiles_nothing_new(tmp_path):
    url = f"sqlite:///{tmp_path / 'p.sqlite3'}"
    w = LinearWorkload()
    first = GMD().run(TrainingProblem(29.5), HAND_SPACE, w, store=ProfileStore(url))
    assert first.new_profiles == first.profiles_used == 8
    # a new store object (a new run of the program) on the same file
    w2 = LinearWorkload()
    again = GMD().run(TrainingProblem(29.5), HAND_SPACE, w2, store=ProfileStore(url))
    assert again.new_profiles == 0 and not w2.calls
    assert again.visited == first.visited and again.solution.mode == first.solution.mode
    # another problem reuses the midpoint and the extremes
    other = GMD().run(TrainingProblem(25.0), HAND_SPACE, w2, store=ProfileStore(url))
    assert other.new_profiles < other.profiles_used
    # and ALS reuses whatever GMD profiled
    table = ALS(init_profiles=10, per_round=5, rounds=1, epochs=30, hidden=(16, 8)).explore(
        HAND_SPACE, w2, kind="train", store=ProfileStore(url))
    assert table.new_profiles <= table.profiles_used


def test_trials_carry_values_attrs_and_constraints(tmp_path):
    store = ProfileStore(f"sqlite:///{tmp_path / 'p.sqlite3'}")
    prob = InferenceProblem(25.0, 0.1, 100.0, batch_sizes=(1, 4, 16))
    GMD().run(prob, HAND_SPACE, LinearWorkload(), store=store, device_model="hand-board")
    study = store.study("hand-board", "linear-v1", "infer")
    trials = study.get_trials(states=(TrialState.COMPLETE,))
    assert trials
    t = trials[0]
    assert set(t.params) == {"cores", "cpu_mhz", "gpu_mhz", "mem_mhz", "batch_size"}
    assert t.values == [t.user_attrs["time_s"], t.user_attrs["power_w"]]
    assert t.user_attrs["label"] == "simulated" and t.user_attrs["provenance"]["strategy"] == "GMD"
    assert set(constraints_of(t)) == {"power_w", "latency_s", "keep_up_s"}
    assert constraints_of(t)["power_w"] == pytest.approx(t.user_attrs["power_w"] - 25.0)
    bs = t.params["batch_size"]
    assert constraints_of(t)["latency_s"] == pytest.approx((bs - 1) / 100.0 + t.values[0] - 0.1)
    assert study.user_attrs["kind"] == "infer"
    assert ("hand-board", "linear-v1", "infer") in store.workloads()
    tab = store.bind("hand-board", "linear-v1").table("infer")
    assert len(tab) == len(trials)


def test_concurrent_points_use_both_studies(tmp_path):
    store = ProfileStore(f"sqlite:///{tmp_path / 'p.sqlite3'}")
    w = LinearWorkload(train_scale=0.1)
    prob = ConcurrentProblem(30.0, 0.33, 100.0)
    r = GMD().run(prob, HAND_SPACE, w, store=store, workload_id="linear-fast-train")
    modes = {p.mode for p in r.visited}
    train = store.study("unknown-device", "linear-fast-train", "train").get_trials(states=(TrialState.COMPLETE,))
    infer = store.study("unknown-device", "linear-fast-train", "infer").get_trials(states=(TrialState.COMPLETE,))
    assert len(train) == len(modes) and len(infer) == len(r.visited)
    again = GMD().run(prob, HAND_SPACE, w, store=store, workload_id="linear-fast-train")
    assert again.new_profiles == 0 and again.solution == r.solution.__class__(**{**r.solution.__dict__, "new_profiles": 0})


def test_a_store_written_by_plain_optuna_in_the_layout_is_read(tmp_path):
    # the layout (study names, params, values, user attributes) is the format: a store written by an older
    # version, here by plain Optuna without lightning_edge, answers without any new profile
    url = f"sqlite:///{tmp_path / 'old.sqlite3'}"
    study = optuna.create_study(storage=url, study_name="lightning_edge/hand-board/linear-v1/train",
                                directions=["minimize", "minimize"])
    study.set_user_attr("kind", "train")
    dists = {"cores": optuna.distributions.IntDistribution(1, 4096),
             **{k: optuna.distributions.FloatDistribution(0.0, 1e6) for k in ("cpu_mhz", "gpu_mhz", "mem_mhz")}}
    for m in SMALL_SPACE:
        t, p = LinearWorkload.time_s(m), LinearWorkload.power_w(m)
        params = {"cores": m.cores, "cpu_mhz": float(m.cpu_mhz), "gpu_mhz": float(m.gpu_mhz), "mem_mhz": float(m.mem_mhz)}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, values=[t, p],
                                                  user_attrs={"time_s": t, "power_w": p, "label": "simulated"},
                                                  system_attrs={"fixed_params": params}))
    w = LinearWorkload()
    r = GMD().run(TrainingProblem(25.0), SMALL_SPACE, w, store=ProfileStore(url), device_model="hand-board")
    assert r.new_profiles == 0 and not w.calls
    fresh = GMD().run(TrainingProblem(25.0), SMALL_SPACE, LinearWorkload(), store=None)
    assert r.visited == fresh.visited and r.solution.mode == fresh.solution.mode


def test_workload_identity():
    assert workload_fingerprint(LinearWorkload()) == "linear-v1"
    assert workload_fingerprint(object(), workload_id="my model/bs 16") == "my-model-bs-16"

    class Anonymous:
        def train(self, m): ...
        def infer(self, m, bs): ...

    with pytest.raises(ValueError, match="workload_id"):
        workload_fingerprint(Anonymous())
    # (a workload the default store cannot key is profiled in memory with a warning: test_store_field.py)

    class Described(Anonymous):
        def __repr__(self):
            return "Described(resnet18, bs=16)"

    assert workload_fingerprint(Described()).startswith("Described-")


def test_default_store_is_sqlite_in_the_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("LIGHTNING_EDGE_PROFILE_STORE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    url = default_storage_url()
    assert url.startswith("sqlite:///") and "lightning_edge" in url and str(tmp_path) in url


def test_default_store_used_by_solve():
    # conftest points the default store at a temp file: solve() persists there by default
    w = LinearWorkload()
    GMD().solve(TrainingProblem(29.5), HAND_SPACE, w)
    w2 = LinearWorkload()
    assert GMD().run(TrainingProblem(29.5), HAND_SPACE, w2).new_profiles == 0 and not w2.calls


def test_gmd_sampler_with_study_optimize_reproduces_the_walk():
    pure = GMD().run(TrainingProblem(29.5), HAND_SPACE, LinearWorkload(), store=None)
    sampler = GMDSampler(TrainingProblem(29.5), HAND_SPACE)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    study.optimize(sampler.objective(LinearWorkload()), n_trials=100, callbacks=[sampler.stop_callback])
    res = sampler.result()
    assert res.visited == pure.visited
    assert len(study.trials) == len(pure.visited)
    assert res.solution.mode == pure.solution.mode
    assert all("power_w" in constraints_of(t) for t in study.trials)


def test_als_sampler_with_study_optimize():
    sampler = ALSSampler("train", SMALL_SPACE, init_profiles=6, per_round=3, rounds=2, epochs=30, hidden=(16, 8))
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    study.optimize(sampler.objective(SaturatingWorkload()), n_trials=100, callbacks=[sampler.stop_callback])
    table = sampler.result()
    assert len(table) == len(study.trials) <= 12
    assert table.solve(TrainingProblem(30.0)) is not None


# ------------------------------------------------------------------------------------- several processes
def _explore_worker(url: str, kind: str, seed: int, delay_s: float, fingerprint: str, q) -> None:
    try:
        w = SlowWorkload(delay_s, fingerprint)
        table = Exhaustive().explore(SMALL_SPACE, w, kind=kind, batch_sizes=(1, 4), store=ProfileStore(url), seed=seed)
        q.put(("ok", sorted((k[0], str(k[1]), k[2] or 0) for k in w.calls), len(table), w.calls.most_common(1)))
    except BaseException as exc:  # pragma: no cover - reported to the parent
        q.put(("error", repr(exc), 0, []))


def _run_two(url: str, kind: str, fingerprint: str, delay_s: float = 0.02) -> list:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_explore_worker, args=(url, kind, i, delay_s, fingerprint, q)) for i in range(2)]
    for p in procs:
        p.start()
    results = [q.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    for r in results:
        assert r[0] == "ok", r[1]
    return results


def _check_store(url: str, fingerprint: str, kind: str, results: list) -> None:
    n = SMALL_SPACE.size * (1 if kind == "train" else 2)
    measured = results[0][1] + results[1][1]
    assert len(measured) == len(set(measured)) == n  # none measured twice, none lost
    assert results[0][1] and results[1][1]  # both processes did part of the work
    assert results[0][2] == results[1][2] == n  # each got the full table
    assert all(r[3][0][1] == 1 for r in results)  # no process measured a point twice either
    study = ProfileStore(url).study("unknown-device", fingerprint, "train" if kind == "train" else "infer")
    trials = study.get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    keys = [tuple(sorted(t.params.items())) for t in complete]
    assert len(complete) == n and len(set(keys)) == n
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials)  # nothing left queued or running
    assert all("duplicate_of" in t.user_attrs for t in trials if t.state == TrialState.FAIL)


@pytest.mark.parametrize("backend", ["sqlite", "journal"])
def test_two_processes_explore_one_workload(tmp_path, backend):
    url = f"sqlite:///{tmp_path / 'shared.sqlite3'}" if backend == "sqlite" else f"journal://{tmp_path / 'shared.log'}"
    results = _run_two(url, "train", "slow-train")
    _check_store(url, "slow-train", "train", results)


@pytest.mark.slow
def test_two_processes_explore_inference_on_sqlite(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.sqlite3'}"
    results = _run_two(url, "infer", "slow-infer", delay_s=0.01)
    _check_store(url, "slow-infer", "infer", results)


def test_postgresql_store(postgres_url):
    fp = f"pg-{uuid.uuid4().hex[:8]}"
    w = LinearWorkload()
    first = GMD().run(TrainingProblem(29.5), HAND_SPACE, w, store=postgres_url, workload_id=fp)
    again = GMD().run(TrainingProblem(29.5), HAND_SPACE, LinearWorkload(), store=postgres_url, workload_id=fp)
    assert first.new_profiles == 8 and again.new_profiles == 0
    assert again.solution.mode == first.solution.mode
    table = RandomSampling(10).explore(HAND_SPACE, w, kind="train", store=ProfileStore(postgres_url), workload_id=fp)
    assert len(table) == 10


def test_two_processes_explore_on_postgresql(postgres_url):
    fp = f"slow-pg-{uuid.uuid4().hex[:8]}"
    results = _run_two(postgres_url, "train", fp)
    _check_store(postgres_url, fp, "train", results)


# ------------------------------------------------------------------------------ heartbeat: a killed process
class _HangingWorkload(SaturatingWorkload):
    """Signals through ``marker`` that it started measuring, then hangs (until the process is killed)."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker
        self.fingerprint = "hang-v1"

    def train(self, mode):
        with open(self.marker, "w") as fh:
            fh.write(str(mode))
        time.sleep(600)
        return super().train(mode)


def _hanging_worker(url: str, marker: str, heartbeat: bool) -> None:
    store = ProfileStore(url, heartbeat_interval_s=1 if heartbeat else None)
    RandomSampling(1).explore(HAND_SPACE, _HangingWorkload(marker), kind="train", store=store, seed=3)


def _kill_while_measuring(url: str, marker, heartbeat: bool) -> None:
    """Start a process that claims one point and measures it, and SIGKILL it mid-measurement."""
    proc = mp.get_context("spawn").Process(target=_hanging_worker, args=(url, str(marker), heartbeat))
    proc.start()
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.is_alive(), "the worker died before measuring"
        assert time.monotonic() < deadline, "the worker never started measuring"
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no finally, no tell(FAIL), the trial stays RUNNING
    proc.join(timeout=30)
    assert proc.exitcode == -9


def test_heartbeat_fails_a_killed_process_claim_and_reprofiles(tmp_path):
    url = f"sqlite:///{tmp_path / 'hb.sqlite3'}"
    marker = tmp_path / "measuring"
    _kill_while_measuring(url, marker, heartbeat=True)
    store = ProfileStore(url, heartbeat_interval_s=1, grace_period_s=2, wait_timeout_s=60)
    study = store.study("unknown-device", "hang-v1", "train")
    running = study.get_trials(states=(TrialState.RUNNING,))
    assert len(running) == 1  # the dead process's claim
    # the same point, wanted by a new process: it waits for the stale claim, fails it, measures the point
    w = SaturatingWorkload()
    w.fingerprint = "hang-v1"
    t0 = time.monotonic()
    table = RandomSampling(1).explore(HAND_SPACE, w, kind="train", store=store, seed=3)
    assert time.monotonic() - t0 < 30
    assert len(table) == 1 and table.new_profiles == 1 and sum(w.calls.values()) == 1
    assert str(table.modes[0]) == marker.read_text()  # the point the dead process had claimed
    trials = {t.number: t for t in study.get_trials()}
    assert trials[running[0].number].state == TrialState.FAIL
    assert [t.state for t in trials.values()].count(TrialState.COMPLETE) == 1
    assert not [t for t in trials.values() if t.state in (TrialState.RUNNING, TrialState.WAITING)]


def test_without_heartbeat_a_killed_process_claim_is_taken_over_at_once(tmp_path):
    # the claim names its owner (host, boot, pid namespace, pid, start time): a dead owner on this host is
    # known at once, no heartbeat or lease needed (this used to block for the whole wait_timeout_s)
    url = f"sqlite:///{tmp_path / 'nohb.sqlite3'}"
    marker = tmp_path / "measuring"
    _kill_while_measuring(url, marker, heartbeat=False)
    w = SaturatingWorkload()
    w.fingerprint = "hang-v1"
    store = ProfileStore(url, heartbeat_interval_s=None, wait_timeout_s=60)
    t0 = time.monotonic()
    table = RandomSampling(1).explore(HAND_SPACE, w, kind="train", store=store, seed=3)
    assert time.monotonic() - t0 < 5
    assert table.new_profiles == 1 and str(table.modes[0]) == marker.read_text()
    study = store.study("unknown-device", "hang-v1", "train")
    failed = study.get_trials(states=(TrialState.FAIL,))
    assert len(failed) == 1 and "has exited" in failed[0].system_attrs["lightning_edge:taken_over"]


def test_heartbeat_needs_an_rdb_storage(tmp_path):
    with pytest.raises(ValueError, match="RDB"):
        ProfileStore(f"journal://{tmp_path / 'j.log'}", heartbeat_interval_s=1)
    with pytest.raises(ValueError):
        ProfileStore(f"sqlite:///{tmp_path / 'x.sqlite3'}", heartbeat_interval_s=None, grace_period_s=3)
    # on by default on an RDB store, off (leases renewed in the claim instead) on a journal file
    assert ProfileStore(f"sqlite:///{tmp_path / 'y.sqlite3'}").heartbeat
    assert not ProfileStore(f"journal://{tmp_path / 'j2.log'}").heartbeat


class NoisyWorkload(LinearWorkload):
    """Profiles that say their power's standard error, as a tuner's windows do (``power_rel_sem``)."""

    def train(self, mode):
        return super().train(mode).scaled(power_rel_sem=0.0012)


def test_a_profiles_standard_error_is_kept_and_a_hostile_one_is_left_out(tmp_path):
    """A window's standard error decides whether a profile at the budget's edge counts as within it
    (prior.profile_guard): the store keeps it, and reads back a value that is not a standard error as unknown."""
    url = f"sqlite:///{tmp_path / 'p.sqlite3'}"
    GMD().run(TrainingProblem(25.0), SMALL_SPACE, NoisyWorkload(), store=ProfileStore(url), device_model="hand-board")
    study = ProfileStore(url).study("hand-board", "linear-v1", "train")
    trials = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(trials) >= 4 and all(trial_measurement(t).power_rel_sem == pytest.approx(0.0012) for t in trials)
    looked = ProfileStore(url).bind("hand-board", "linear-v1").lookup(trial_key("train", trials[0]))
    assert looked is not None and looked.power_rel_sem == pytest.approx(0.0012)
    for bad in ("0.001", -0.5, float("inf"), True, None, 10 ** 400):  # written by another tool, or by hand
        hostile = optuna.trial.create_trial(params={}, distributions={}, values=[0.5, 20.0], user_attrs={
            "time_s": 0.5, "power_w": 20.0, "label": "measured", "power_rel_sem": bad})
        m = trial_measurement(hostile)
        assert m.power_rel_sem is None and m.power_w == 20.0
