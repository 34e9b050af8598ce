"""The profile store as users meet it (issue 18): a run killed mid-profile never blocks the next one, a SIGTERM
ends a wait at once, store errors are one line before training, a read-only store still answers, workloads
without a key work, and the store agrees with itself."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

from lightning_edge.tuning import GMD, TrainingProblem
from lightning_edge.tuning.store import ProfileStore

ROOT = Path(__file__).resolve().parents[2]
FAST = dict(settle_s=0.0, warmup_steps=1, min_steps=3, max_steps=5)

def _child_main(url: str, wid: str, step_sleep: float, log: str) -> None:
    """A user's training script: a short fit with PowerModeTuner on the twin and an SQLite store (forked, so
    that it starts in a fraction of a second: torch and Lightning are already imported)."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = sys.stderr = open(fd, "w", buffering=1)  # not pytest's capture of the parent
    import torch

    torch.set_num_threads(1)
    from lightning_edge.devices.sim.device import SimulatedOrin
    from lightning_edge.lightning.pytorch import PowerModeTuner

    L, module = _lit(step_sleep)
    board = SimulatedOrin(settling=False, seed=0)
    original = board.controller.current()
    cb = PowerModeTuner(25.0, device=board, store=ProfileStore(url, progress_every_s=0.5), workload_id=wid,
                        window=FAST, baseline=False, print_summary=False)
    try:
        _trainer(L, [cb], max_steps=100000).fit(module, _loader())
    except BaseException as exc:  # noqa: BLE001 - the test reads what happened
        print(f"FIT ENDED {type(exc).__name__}: {exc}", flush=True)
    finally:
        print("BOARD", "restored" if board.controller.current() == original else "NOT restored", flush=True)
        os._exit(3)


def _child(tmp_path, url, wid, step_sleep):
    import multiprocessing as mp

    pytest.importorskip("lightning.pytorch")
    import lightning_edge.devices.sim.device  # noqa: F401 - imported once, here: the forked child starts at once
    import lightning_edge.lightning.pytorch  # noqa: F401

    log = tmp_path / f"child-{wid}.log"
    proc = mp.get_context("fork").Process(target=_child_main, args=(url, wid, step_sleep, str(log)), daemon=True)
    proc.start()
    return proc, log


def _lit(step_sleep: float = 0.0):
    L = pytest.importorskip("lightning.pytorch")
    import torch
    from torch import nn

    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(48, 16), nn.ReLU(), nn.Linear(16, 10))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, i):
            if step_sleep:
                time.sleep(step_sleep)
            x, y = batch
            return nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return L, Lit()


def _loader():
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(64, 3, 4, 4, generator=g), torch.randint(0, 10, (64,), generator=g)),
                      batch_size=8)


def _trainer(L, callbacks, **kw):
    args = dict(max_steps=40, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                enable_model_summary=False, accelerator="cpu", devices=1, callbacks=callbacks)
    args.update(kw)
    return L.Trainer(**args)


def _running(url, wid):
    store = ProfileStore(url)
    st = store.study("sim-orin-agx", wid, "train")
    return st, st.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


# ------------------------------------------------------------------------------ item 3: killed runs never block
def test_a_fit_killed_mid_profile_does_not_block_the_next_fit(tmp_path):
    """SIGKILL a real fit while it measures a mode; the next fit on the same store profiles within 10 s (it sat
    at step 0 for 600 s, then raised TimeoutError, and so did every later run)."""
    from lightning_edge.lightning.pytorch import PowerModeTuner

    url = f"sqlite:///{tmp_path / 'profiles.sqlite3'}"
    proc, log = _child(tmp_path, url, "kill-me", 0.2)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.is_alive(), f"the child ended early:\n{log.read_text()}"
            assert time.monotonic() < deadline, "the child never claimed a mode"
            if Path(url[len("sqlite:///"):]).exists():
                st, running = _running(url, "kill-me")
                if running and running[0].system_attrs.get("lightning_edge:claim", {}).get("pid") == proc.pid:
                    break
            time.sleep(0.1)
        killed = running[0]
        os.kill(proc.pid, signal.SIGKILL)  # mid-profile: no finally, no tell(FAIL): the claim stays RUNNING
        proc.join(timeout=30)
        assert proc.exitcode == -signal.SIGKILL
    finally:
        if proc.is_alive():
            proc.kill()
    L, module = _lit()
    first_profile: list[float] = []

    class Clock(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, i):
            if cb.tuner.profiles and not first_profile:
                first_profile.append(time.monotonic())

    cb = PowerModeTuner(25.0, device="sim:orin-agx", store=url, workload_id="kill-me", window=FAST, baseline=False,
                        print_summary=False)
    t0 = time.monotonic()
    _trainer(L, [cb, Clock()]).fit(module, _loader())
    assert first_profile and first_profile[0] - t0 < 10.0
    st = ProfileStore(url).study("sim-orin-agx", "kill-me", "train")
    trials = {t.number: t for t in st.get_trials()}
    assert trials[killed.number].state == TrialState.FAIL
    assert "has exited" in trials[killed.number].system_attrs["lightning_edge:taken_over"]
    again = [t for t in trials.values() if t.params == killed.params and t.state == TrialState.COMPLETE]
    assert len(again) == 1  # the killed run's mode was profiled by the next run
    assert not [t for t in trials.values() if t.state in (TrialState.RUNNING, TrialState.WAITING)]


def test_sigterm_ends_a_wait_for_another_process_at_once_and_restores_the_board(tmp_path):
    """A fit waiting for a profile that a live process is measuring shows progress and ends promptly on SIGTERM
    with the board restored (it ignored SIGTERM and sat for 600 s)."""
    from lightning_edge.devices import catalog
    from lightning_edge.tuning.search import Point, ProfileKey
    from lightning_edge.tuning.store import _Heartbeat

    class First:  # the first mode GMD asks for on an empty store
        def train(self, mode):
            raise LookupError(mode)

    with pytest.raises(LookupError) as first:
        GMD().solve(TrainingProblem(25.0), catalog.fulcrum_space(), First(), store=None)
    mode = first.value.args[0]
    url = f"sqlite:///{tmp_path / 'profiles.sqlite3'}"
    store = ProfileStore(url)
    bound = store.bind("sim-orin-agx", "busy")
    key = ProfileKey("train", mode, None)
    bound._enqueue(key)
    owner = bound._groups("train")[key][0]
    assert bound._claim(owner, heartbeat=True)  # this (live) process measures it ...
    assert Point("train", mode).keys() == (key,)
    proc, log = _child(tmp_path, url, "busy", 0.0)  # forked before any thread of ours runs
    beat = _Heartbeat(store, owner._trial_id)  # ... and keeps its lease
    try:
        deadline = time.monotonic() + 120
        while "waiting" not in (text := log.read_text() if log.exists() else ""):
            assert proc.is_alive(), text
            assert time.monotonic() < deadline, text
            time.sleep(0.1)
        line = [x for x in text.splitlines() if "waiting" in x][0]
        assert str(mode) in line and f"pid {os.getpid()}" in line, line
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        proc.join(timeout=30)
        took = time.monotonic() - t0
    finally:
        beat.stop()
        if proc.is_alive():
            proc.kill()
    out = log.read_text()
    assert took < 5.0, out
    assert "BOARD restored" in out, out
    assert "FIT ENDED TuningInterrupted" in out and "termination signal" in out, out
