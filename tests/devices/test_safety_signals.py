"""A signal at the worst instant: inside a mode switch, under a previous handler that returns.

Lightning's Trainer installs a SIGTERM handler that notes the signal and returns (the fit stops at the next step).
Our handler restores the board and chains to it; before, it then returned into ``apply()``, which went on writing
the rest of the new mode: the board ended in a mixed mode with no state file. These tests send the signal before
every single write of a switch (deterministic: the fake kernel's writer raises it), and at random moments of a
switching loop (a thread sends it), under a returning Python handler and under Lightning's own.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest

from lightning_edge.devices import JetsonSysfsController, SimModeController, safety
from lightning_edge.devices.controllers.errors import BoardReleasedError
from tests.fakes.jetson_sysfs import FakeBoardWriter

LOW = "4c/422/115/665"
MID = "8c/1344/727/2133"
SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]


class _SignalAt(FakeBoardWriter):
    """The fake kernel's writer, raising ``sig`` in this process just before its ``at``-th write."""

    def __init__(self, board, sig: int, at: int) -> None:
        super().__init__(board)
        self.sig, self.at, self.count = sig, at, 0

    def write(self, path, value):
        self.count += 1
        if self.count == self.at:
            signal.raise_signal(self.sig)  # the handler runs here, in the middle of the switch
        super().write(path, value)


class _Returning:
    """A previous handler that notes the signal and returns (what Lightning's SIGTERM handler does)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, signum, frame) -> None:
        self.calls.append(signum)


@pytest.fixture
def returning_handlers():
    """Install a returning Python handler for every handled signal; put the old ones back afterwards."""
    old = {s: signal.getsignal(s) for s in SIGNALS}
    prev = _Returning()
    for s in SIGNALS:
        signal.signal(s, prev)
    try:
        yield prev
    finally:
        for c in list(safety.active_controllers()):
            safety.unregister(c)
        for s, h in old.items():
            signal.signal(s, h)


def _writes_of_a_switch(board, state_dir) -> int:
    ctl = JetsonSysfsController(board.root, writer=board.writer(), state_dir=state_dir, handle_exit=False)
    board.clear_writes()
    ctl.apply(LOW)
    n = len(board.writes())
    ctl.restore()
    board.clear_writes()
    return n


@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_before_any_write_of_a_switch_leaves_the_board_original(sig, orin5, state_dir, returning_handlers):
    before = orin5.knob_files()
    n = _writes_of_a_switch(orin5, state_dir)
    assert n >= 8
    for at in range(1, n + 1):
        ctl = JetsonSysfsController(orin5.root, writer=_SignalAt(orin5, sig, at), state_dir=state_dir)
        with pytest.raises(BoardReleasedError, match=sig.name):
            ctl.apply(LOW)
        assert orin5.knob_files() == before, f"board lost with {sig.name} before write {at} of {n}"
        assert not ctl.active and not list(state_dir.glob("*.json"))
        assert returning_handlers.calls[-1] == sig  # the previous handler still ran, once per signal
        # after a signal's restore the controller makes no further change, whatever the previous handler did
        orin5.clear_writes()
        with pytest.raises(BoardReleasedError):
            ctl.apply(MID)
        assert orin5.writes() == [] and orin5.knob_files() == before
    assert len(returning_handlers.calls) == n


def test_a_signal_inside_a_restore_finishes_the_restore_first(orin5, state_dir, returning_handlers):
    before = orin5.knob_files()
    n = _writes_of_a_switch(orin5, state_dir)
    for at in range(n + 1, 2 * n + 1):  # the writes after the switch's are the restore's
        ctl = JetsonSysfsController(orin5.root, writer=_SignalAt(orin5, signal.SIGTERM, at), state_dir=state_dir)
        ctl.apply(LOW)
        ctl.restore()
        assert orin5.knob_files() == before and not list(state_dir.glob("*.json")), at
        assert not ctl.active


def test_close_after_a_signal_never_opens_a_session_over_a_switched_board(tmp_path, returning_handlers):
    """OnlineTuner.close() used to "rescue" a board found out of its original mode by ``apply(original)``: a new
    session whose snapshot is the switched mode, which the exit handler then "restored"."""
    from lightning_edge.devices.meter import TwinMeter
    from lightning_edge.devices.sim.device import SimulatedOrin
    from lightning_edge.tuning.online import OnlineTuner
    from tests.tuning.test_online import FAST, X, tiny

    state = tmp_path / "state"
    fired = []

    def on_step(knob, old, new):  # SIGTERM in the middle of the tuner's first switch
        if not fired and ctl.active and new != ctl.original.__dict__.get(knob, None):
            fired.append(knob)
            signal.raise_signal(signal.SIGTERM)

    ctl = SimModeController(board_file=tmp_path / "board.json", state_dir=state, on_step=on_step)
    board = SimulatedOrin(controller=ctl, settling=False, seed=0)
    original = ctl.current()
    meter = TwinMeter(board, seed=0)
    meter.bind(tiny(), (X,))
    t = OnlineTuner(15.0, ctl, meter, window=FAST, fingerprint="tiny")
    t.start()
    for _ in range(12):  # the previous handler returned: the loop goes on, as Lightning's does to the next step
        t.before_step()
        t.after_step()
    assert fired and returning_handlers.calls == [signal.SIGTERM]
    assert ctl.current() == original
    t.close()
    assert not ctl.active and ctl.current() == original
    safety._restore_all("interpreter exit")  # what atexit would do now
    assert ctl.current() == original and not list(state.glob("*.json"))


# ------------------------------------------------------------------ randomised: a switching loop, a signal at any time
LOOP_CHILD = r"""
import json, os, random, signal, sys, threading, time
from pathlib import Path
from tests.fakes.jetson_sysfs import FakeJetson
from lightning_edge.devices import JetsonSysfsController
from lightning_edge.devices.controllers.errors import BoardReleasedError

root, state_dir, runs, seed, flavour, out = sys.argv[1:7]
board = FakeJetson.open(root)
rng = random.Random(int(seed))
sigs = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]
if flavour == "lightning":
    # Lightning's own: a Trainer's signal connector installs its SIGTERM notifier (it returns); SIGINT and SIGHUP
    # get a returning handler too, so the process survives every run
    import pytorch_lightning as pl
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer._signal_connector.register_signal_handlers()
    noted = []
    for s in (signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda n, f: noted.append(n))
else:
    noted = []
    for s in sigs:
        signal.signal(s, lambda n, f: noted.append(n))
modes = ["4c/422/115/665", "8c/1344/727/2133", "2c/729.6/318.75/2133", "12c/1958.4/930.75/3199", "6c/1113.6/624.75/665.6"]
before = json.dumps(sorted(board.knob_files().items()))
results = []
for run in range(int(runs)):
    ctl = JetsonSysfsController(root, writer=board.writer(), state_dir=state_dir)
    sig = sigs[run % 3]
    delay = rng.uniform(0.0, 0.03)
    threading.Thread(target=lambda: (time.sleep(delay), os.kill(os.getpid(), sig)), daemon=True).start()
    t_end = time.monotonic() + 0.2
    refused = False
    while time.monotonic() < t_end:
        try:
            ctl.apply(rng.choice(modes))
        except BoardReleasedError:
            refused = True
            break
    time.sleep(0.05)  # the signal has surely arrived
    if ctl.active:  # not reached before the loop ended: restore as the run's end would
        ctl.restore()
    now = json.dumps(sorted(board.knob_files().items()))
    results.append({"run": run, "sig": int(sig), "delay": delay, "original": now == before,
                    "state_files": len(list(Path(state_dir).glob("*.json"))), "refused": refused})
Path(out).write_text(json.dumps(results))
"""


def _spawn_env():
    repo = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(repo), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@pytest.mark.parametrize("flavour", ["python", "lightning"])
def test_fifty_signals_at_random_moments_of_a_switching_loop_lose_no_board(flavour, orin5, state_dir, tmp_path):
    import subprocess

    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-c", LOOP_CHILD, str(orin5.root), str(state_dir), "50",
                           str(random.randrange(1 << 30)), flavour, str(out)],
                          env=_spawn_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    lost = [r for r in results if not r["original"] and not r["state_files"]]
    assert len(results) == 50 and lost == [], lost
    assert all(r["original"] and r["state_files"] == 0 for r in results), results


SIGKILL_CHILD = r"""
import os, random, sys, time
from pathlib import Path
from tests.fakes.jetson_sysfs import FakeJetson
from lightning_edge.devices import JetsonSysfsController

root, state_dir, seed, marker = sys.argv[1:5]
board = FakeJetson.open(root)
rng = random.Random(int(seed))
modes = ["4c/422/115/665", "8c/1344/727/2133", "2c/729.6/318.75/2133", "12c/1958.4/930.75/3199", "6c/1113.6/624.75/665.6"]
ctl = JetsonSysfsController(root, writer=board.writer(), state_dir=state_dir)
Path(marker).write_text("go")
while True:
    ctl.apply(rng.choice(modes))
"""


@pytest.mark.slow
def test_fifty_sigkills_at_random_moments_are_all_restored_by_the_next_start(orin5, state_dir, tmp_path, spawn, wait):
    before = orin5.knob_files()
    rng = random.Random()
    for run in range(50):
        marker = tmp_path / f"go{run}"
        child = spawn(SIGKILL_CHILD, orin5.root, state_dir, rng.randrange(1 << 30), marker)
        wait(marker, child)
        time.sleep(rng.uniform(0.0, 0.05))
        child.kill()
        child.wait(timeout=10)
        ctl = JetsonSysfsController(orin5.root, writer=orin5.writer(), state_dir=state_dir, handle_exit=False)
        assert orin5.knob_files() == before, f"run {run}: not restored by the next start"
        assert not list(state_dir.glob("*.json")) and not ctl.active


TRAINER_CHILD = r"""
import os, signal, sys, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import lightning.pytorch as L
from lightning_edge.devices.sim.controller import SimModeController
from lightning_edge.devices.sim.device import SimulatedOrin
from lightning_edge.lightning.pytorch import PowerModeTuner

switches = []

def on_step(knob, old, new):  # SIGTERM before the first knob of the tuner's second switch (a profiling window)
    switches.append(knob)
    if len(switches) == 4:
        print("SIGNALLED", flush=True)
        signal.raise_signal(signal.SIGTERM)

class Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(8, 10))
    def forward(self, x):
        return self.net(x)
    def training_step(self, batch, i):
        return nn.functional.cross_entropy(self(batch[0]), batch[1])
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

ctl = SimModeController(board_file=sys.argv[1], on_step=on_step)
board = SimulatedOrin(controller=ctl, settling=False)
# prior=False: GMD's own search switches modes for window after window (with the prior it may need a single one)
tuner = PowerModeTuner(16.0, device=board, store=None, window=dict(settle_s=0, min_steps=3, max_steps=5), prior=False)
ds = TensorDataset(torch.randn(64, 3, 16, 16), torch.randint(0, 10, (64,)))
L.Trainer(max_steps=400, logger=False, enable_checkpointing=False, enable_progress_bar=False,
          callbacks=[tuner]).fit(Lit(), DataLoader(ds, batch_size=8))
print("FIT ENDED", flush=True)
"""


def test_sigterm_inside_a_switch_under_trainer_and_power_mode_tuner(tmp_path):
    """The Trainer's own SIGTERM handler (it notes the signal and returns) and PowerModeTuner on the twin: SIGTERM
    half-way through a profiling switch. The board is back in its original mode, nothing is left on record, and
    the fit stops as Lightning stops it on SIGTERM."""
    import subprocess

    pytest.importorskip("lightning.pytorch")
    board_file = tmp_path / "board.json"
    proc = subprocess.run([sys.executable, "-c", TRAINER_CHILD, str(board_file)], env=_spawn_env(),
                          capture_output=True, text=True, timeout=300)
    assert "SIGNALLED" in proc.stdout, proc.stderr[-3000:]
    assert "restoring sim" in proc.stderr and "on signal SIGTERM" in proc.stderr, proc.stderr[-3000:]
    # Lightning ends a fit on SIGTERM (SIGTERMException at the next step); the board is not switched again
    assert "FIT ENDED" not in proc.stdout
    after = SimModeController(board_file=board_file, handle_exit=False)
    assert after.recovered is None, "the board was left switched with a state file"
    assert str(after.current()) == "12c/2201.6/1300.5/3199"
    assert not [p for p in tmp_path.glob("*.json") if p.name != "board.json"]
