"""A session belongs to the process that opened it: a forked child never restores, unlocks or writes the board.

A child inherits the controllers, the exit and signal handlers and the lock's open file description. Before issue 36
a child that ended normally (any helper a library forks) ran the atexit restore: it put the board back under the live
owner and released the owner's ``flock`` (one open file description, shared), so the next ``mode show`` "recovered"
the board from a live owner. DataLoader workers inherited the SIGINT/SIGHUP/SIGQUIT handlers: one Ctrl-C to the
process group gave one restore per process. These tests fork for real, on the fake Orin tree (whose write log
records every writer's pid, across processes), and send real signals.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from lightning_edge.devices import BoardBusyError, JetsonSysfsController
from lightning_edge.devices.safety import BoardSafety

LOW = "4c/422/115/665"

# The owner: applies a mode, forks a child that does `then` (exit normally / ctrl-c itself / use the controller), waits
# for it, then reports and holds the board until killed.
OWNER_FORKS_A_CHILD = r"""
import json, os, signal, sys, time
from pathlib import Path
from tests.fakes.jetson_sysfs import FakeJetson
from lightning_edge.devices import JetsonSysfsController

root, state_dir, marker, mode, then = sys.argv[1:6]
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
ctl = JetsonSysfsController(root, writer=FakeJetson.open(root).writer(), state_dir=state_dir)
ctl.apply(mode)
pid = os.fork()
if pid == 0:  # the child: what a library's helper or a worker does
    if then == "exit":
        sys.exit(0)  # a normal end: atexit handlers, finalizers
    if then == "sigint":
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            sys.exit(3)  # the signal did in the child what it does without lightning_edge
        sys.exit(4)
    if then == "use":
        out = []
        for call in (ctl.restore, ctl.close, lambda: ctl.apply("8c/1344/727/2133"), ctl.keep):
            try:
                out.append(repr(call()))
            except Exception as exc:
                out.append(type(exc).__name__)
        Path(marker + ".child").write_text(json.dumps(out))
        sys.exit(0)
_, status = os.waitpid(pid, 0)
code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
Path(marker).write_text(json.dumps({"child_status": code,
                                    "active": ctl.active, "mode": str(ctl.current())}))
time.sleep(120)
"""


def _owner_survives(orin5, state_dir, tmp_path, spawn, wait, then: str) -> tuple[dict, subprocess.Popen]:
    marker = tmp_path / "owner"
    owner = spawn(OWNER_FORKS_A_CHILD, orin5.root, state_dir, marker, LOW, then)
    wait(marker, owner)
    report = json.loads(marker.read_text())
    # what `lightning-edge mode show` does in another process: a recovery check that must find a live owner
    other = JetsonSysfsController(orin5.root, writer=orin5.writer(), state_dir=state_dir, handle_exit=False)
    assert other.recovered is None
    # the owner still holds the board: its lock is held, its state file names it, the board is in its mode
    with pytest.raises(BoardBusyError) as busy:
        _safety(other, state_dir).lock.acquire()
    assert busy.value.pid == owner.pid
    state = _safety(other, state_dir).read()
    assert state is not None and state["pid"] == owner.pid
    assert str(other.current()) == str(other.space.coerce(LOW))
    return report, owner


def _safety(ctl, state_dir) -> BoardSafety:
    return BoardSafety(ctl.device_id, state_dir)


def _board_id(orin5, state_dir) -> str:
    return JetsonSysfsController(orin5.root, writer=orin5.writer(), state_dir=state_dir, recover=False,
                                 handle_exit=False).device_id


def _writers(orin5) -> set[int]:
    from tests.fakes.jetson_sysfs import WRITE_LOG

    return {json.loads(line)["pid"] for line in (orin5.root / WRITE_LOG).read_text().splitlines()}


def test_a_child_that_ends_normally_leaves_the_parents_board_alone(orin5, state_dir, tmp_path, spawn, wait):
    orin5.clear_writes()
    report, owner = _owner_survives(orin5, state_dir, tmp_path, spawn, wait, "exit")
    assert report["child_status"] == 0 and report["active"] is True
    assert _writers(orin5) == {owner.pid}  # the child wrote nothing to the board
    owner.send_signal(signal.SIGTERM)  # the owner restores its own board, once
    _, err = owner.communicate(timeout=30)
    assert err.count(f"restoring {_board_id(orin5, state_dir)} on signal SIGTERM") == 1, err
    assert BoardSafety(_board_id(orin5, state_dir), state_dir).read() is None


def test_a_signal_to_a_child_does_in_the_child_what_it_does_without_us(orin5, state_dir, tmp_path, spawn, wait):
    orin5.clear_writes()
    report, owner = _owner_survives(orin5, state_dir, tmp_path, spawn, wait, "sigint")
    assert report["child_status"] == 3  # KeyboardInterrupt in the child (its own previous handler), no restore
    assert report["active"] is True
    assert _writers(orin5) == {owner.pid}


def test_a_child_cannot_restore_switch_or_keep_the_parents_board(orin5, state_dir, tmp_path, spawn, wait):
    orin5.clear_writes()
    report, owner = _owner_survives(orin5, state_dir, tmp_path, spawn, wait, "use")
    assert report["child_status"] == 0 and report["active"] is True
    restore, close, apply, keep = json.loads((tmp_path / "owner.child").read_text())
    assert (restore, close, apply, keep) == ("None", "None", "BoardReleasedError", "None")
    assert _writers(orin5) == {owner.pid}
    state = BoardSafety(_board_id(orin5, state_dir), state_dir).read()
    assert state["pid"] == owner.pid and not state.get("kept")  # keep() in the child changed nothing


# A trainer with DataLoader workers (forked), the whole process group gets one Ctrl-C, as from a terminal.
TRAINER_WITH_WORKERS = r"""
import os, signal, sys, time
from pathlib import Path
import torch
from torch.utils.data import DataLoader, Dataset
from tests.fakes.jetson_sysfs import FakeJetson
from lightning_edge.devices import JetsonSysfsController

root, state_dir, marker, mode = sys.argv[1:5]
os.setpgrp()  # a process group of its own, as a job in a terminal
signal.signal(signal.SIGINT, signal.default_int_handler)

class Slow(Dataset):
    def __len__(self):
        return 10_000
    def __getitem__(self, i):
        Path(marker + f".{os.getpid()}").write_text("up")
        time.sleep(0.05)
        return torch.zeros(2)

ctl = JetsonSysfsController(root, writer=FakeJetson.open(root).writer(), state_dir=state_dir)
ctl.apply(mode)
loader = DataLoader(Slow(), batch_size=2, num_workers=2, multiprocessing_context="fork")
try:
    for i, _ in enumerate(loader):
        if i == 2:
            Path(marker).write_text(str(os.getpid()))
except KeyboardInterrupt:
    print("trainer: KeyboardInterrupt", file=sys.stderr)
"""


def test_one_ctrl_c_to_a_trainer_and_its_dataloader_workers_restores_once(orin5, state_dir, tmp_path, spawn, wait):
    pytest.importorskip("torch")
    orin5.clear_writes()
    marker = tmp_path / "trainer"
    trainer = spawn(TRAINER_WITH_WORKERS, orin5.root, state_dir, marker, LOW)
    wait(marker, trainer, timeout_s=60)
    workers = [p for p in tmp_path.glob("trainer.*")]
    assert len(workers) >= 2  # the workers are up (forked after the mode was applied)
    t0 = time.monotonic()
    os.killpg(trainer.pid, signal.SIGINT)  # Ctrl-C: the trainer and every worker
    try:
        _, err = trainer.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(trainer.pid, signal.SIGKILL)
        pytest.fail("the trainer did not end within 60 s of one Ctrl-C")
    assert time.monotonic() - t0 < 30, "a worker's exit hung"
    assert err.count(f"restoring {_board_id(orin5, state_dir)} on signal SIGINT") == 1, err
    assert "trainer: KeyboardInterrupt" in err
    assert _writers(orin5) == {trainer.pid}  # only the trainer ever wrote the board (the switch, then one restore)
    assert BoardSafety(_board_id(orin5, state_dir), state_dir).read() is None
