"""Always putting the board back: the state file, crash recovery, the advisory lock, exit handlers.

The crash tests run a real child process on a fake Orin AGX tree and kill it: SIGKILL in the
middle of a mode change (nothing in the child can react), SIGTERM / SIGINT (its handlers
restore), or a normal exit without restore (atexit).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lightning_edge.cli.mode import main as mode_main
from lightning_edge.devices import (
    ORIN_AGX_MAXN,
    BoardBusyError,
    JetsonSysfsController,
    PowerMode,
    RecoveryError,
    SimModeController,
    safety,
)
from tests.fakes.jetson_sysfs import FakeBoardWriter

LOW = "4c/422/115/665"

# Child: applies a mode through a writer that stops (forever) before its N-th write, after writing
# a marker. The state file is on disk by then: the parent SIGKILLs the child mid-change.
CHILD_DIES_MID_CHANGE = r"""
import os, sys, time
from pathlib import Path
from tests.fakes.jetson_sysfs import FakeJetson, FakeBoardWriter
from lightning_edge.devices import JetsonSysfsController

root, state_dir, marker, mode, pause_at = sys.argv[1:6]

class SlowWriter(FakeBoardWriter):
    n = 0
    def write(self, path, value):
        SlowWriter.n += 1
        if SlowWriter.n == int(pause_at):
            Path(marker).write_text(str(os.getpid()))
            time.sleep(120)
        super().write(path, value)

ctl = JetsonSysfsController(root, writer=SlowWriter(FakeJetson.open(root)), state_dir=state_dir)
ctl.apply(mode)
print("not reached")
"""

# Child: applies a mode, says so, then waits (holding the board) until it is signalled.
CHILD_HOLDS_BOARD = r"""
import os, sys, time
from pathlib import Path
from tests.fakes.jetson_sysfs import FakeJetson
from lightning_edge.devices import JetsonSysfsController

root, state_dir, marker, mode, then = sys.argv[1:6]
ctl = JetsonSysfsController(root, writer=FakeJetson.open(root).writer(), state_dir=state_dir)
ctl.apply(mode)
Path(marker).write_text(str(os.getpid()))
if then == "wait":
    time.sleep(120)
"""


def _controller(board, state_dir, **kw) -> JetsonSysfsController:
    kw.setdefault("handle_exit", False)
    return JetsonSysfsController(board.root, writer=board.writer(), state_dir=state_dir, **kw)


def _state_file(state_dir: Path) -> Path | None:
    files = sorted(state_dir.glob("jetson-orin-agx*.json"))
    return files[0] if files else None


# ---------------------------------------------------------------- SIGKILL in the middle of a mode change
def test_sigkill_mid_change_is_restored_by_next_start(orin, state_dir, tmp_path, spawn, wait, capsys):
    before = orin.knob_files()
    marker = tmp_path / "paused"
    child = spawn(CHILD_DIES_MID_CHANGE, orin.root, state_dir, marker, LOW, 3)
    wait(marker, child)

    # the state file was written before the first write, and names the child and both modes
    state = json.loads(_state_file(state_dir).read_text())
    assert state["pid"] == child.pid and state["phase"] == "applying"
    assert state["original"] == "12c/2201.6/1300.5/3199"
    assert PowerMode.from_dict(state["applied"]) == PowerMode.parse("4c/422.4/114.75/665.6")
    # the board is half switched: two writes landed, the third never will
    assert len(orin.writes()) == 2 and orin.knob_files() != before

    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL

    ctl = _controller(orin, state_dir)  # the next start of any controller on this board
    assert ctl.recovered is not None and ctl.recovered.settled == ORIN_AGX_MAXN
    assert orin.knob_files() == before
    assert _state_file(state_dir) is None
    err = capsys.readouterr().err
    assert f"process {child.pid} ended" in err and "restoring the original mode 12c/2201.6/1300.5/3199" in err
    # and the board is free again
    ctl.apply(LOW)
    ctl.restore()


def test_sigkill_recovery_without_permission_says_what_to_run(orin5, state_dir, tmp_path, spawn, wait):
    before = orin5.knob_files()
    marker = tmp_path / "paused"
    child = spawn(CHILD_DIES_MID_CHANGE, orin5.root, state_dir, marker, LOW, 5)
    wait(marker, child)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)

    orin5.deny_writes()  # the next start is a user without the udev rule
    with pytest.raises(RecoveryError) as exc:
        _controller(orin5, state_dir)
    cmd = exc.value.command
    assert "lightning-edge mode restore --device jetson" in cmd
    assert "--root" not in cmd and f"--state-dir {state_dir}" in cmd  # the fake root is an API argument only
    assert cmd in str(exc.value) and f"process {child.pid} died" in str(exc.value)
    assert isinstance(exc.value, PermissionError)
    assert _state_file(state_dir) is not None  # kept until someone restores

    orin5.deny_writes(False)  # ... who then runs exactly that command
    argv = cmd.split()
    assert argv[:3] == ["lightning-edge", "mode", "restore"] or argv[1:4] == [
        "lightning-edge",
        "mode",
        "restore",
    ]
    args = argv[argv.index("restore") + 1 :]
    assert mode_main(["restore", *args], root=orin5.root) == 0
    assert orin5.knob_files() == before
    assert _state_file(state_dir) is None


# ---------------------------------------------------------------- two processes, one board
def test_second_process_gets_board_busy_naming_the_holder(orin5, state_dir, tmp_path, spawn, wait, capsys):
    before = orin5.knob_files()
    marker = tmp_path / "holding"
    child = spawn(CHILD_HOLDS_BOARD, orin5.root, state_dir, marker, LOW, "wait")
    wait(marker, child)

    other = _controller(orin5, state_dir)  # starting is fine, and must not "recover" a live owner's change
    assert other.recovered is None and other.current() == PowerMode.parse("4c/422.4/114.75/665.6")
    with pytest.raises(BoardBusyError) as exc:
        other.apply("12c/2201.6/1300.5/3199")
    assert exc.value.pid == child.pid
    assert f"process {child.pid} holds its power-mode lock" in str(exc.value)
    with pytest.raises(BoardBusyError):
        other.restore()  # not its change to undo either

    # SIGTERM: the holder's handler restores the board, then dies of SIGTERM as it would have
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=20)
    assert child.returncode == -signal.SIGTERM
    assert "restoring jetson-orin-agx" in err and "signal SIGTERM" in err
    assert orin5.knob_files() == before and _state_file(state_dir) is None
    other.apply(LOW)  # now it is free
    other.restore()


def test_two_controllers_in_one_process(orin5, state_dir):
    a = _controller(orin5, state_dir)
    b = _controller(orin5, state_dir)
    a.apply(LOW)
    with pytest.raises(BoardBusyError, match="another controller in this process"):
        b.apply("12c/2201.6/1300.5/3199")
    a.restore()
    b.apply("8c/1344/727/2133")
    b.restore()
    assert a.current() == ORIN_AGX_MAXN


def test_normal_exit_without_restore_restores_at_exit(orin5, state_dir, tmp_path, spawn, wait):
    before = orin5.knob_files()
    marker = tmp_path / "applied"
    child = spawn(CHILD_HOLDS_BOARD, orin5.root, state_dir, marker, LOW, "exit")
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert marker.exists() and "interpreter exit" in err
    assert orin5.knob_files() == before and _state_file(state_dir) is None


def test_sigint_restores_then_raises_keyboard_interrupt(tmp_path, spawn, wait):
    board_file = tmp_path / "sim" / "board.json"
    marker, seen = tmp_path / "applied", tmp_path / "seen"
    script = r"""
import faulthandler, signal, sys, time
from pathlib import Path
from lightning_edge.devices import SimModeController
faulthandler.register(signal.SIGUSR1)  # the test asks for the child's stack if it does not exit
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even if pytest runs under nohup or &
board_file, marker, seen = sys.argv[1:4]
ctl = SimModeController(board_file=board_file)
ctl.apply("4c/422/115/665")
Path(marker).write_text("x")
try:
    time.sleep(120)
except KeyboardInterrupt:
    Path(seen).write_text(str(ctl.current()))
"""
    child = spawn(script, board_file, marker, seen)
    wait(marker, child)
    child.send_signal(signal.SIGINT)
    try:
        _, err = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        # fail with where the child is stuck (how the SIG_IGN case below was found)
        child.send_signal(signal.SIGUSR1)
        time.sleep(2)
        child.kill()
        _, err = child.communicate()
        pytest.fail(f"the child did not exit within 60 s of SIGINT; its stderr and stack:\n{err}")
    assert child.returncode == 0, err
    assert seen.read_text() == "12c/2201.6/1300.5/3199"  # restored before KeyboardInterrupt reached the program


@pytest.mark.parametrize("sig", ["SIGINT", "SIGHUP"])
def test_an_ignored_signal_leaves_the_run_and_its_mode_alone(tmp_path, spawn, wait, sig):
    """A job started with ``&`` or ``nohup`` from a script ignores SIGINT (and ``nohup`` SIGHUP): the signal cannot
    end it, so the board must not be put back under a run that goes on; the exit restores it as usual."""
    board_file = tmp_path / "sim" / "board.json"
    marker, go, seen = tmp_path / "applied", tmp_path / "go", tmp_path / "seen"
    script = r"""
import signal, sys, time
from pathlib import Path
from lightning_edge.devices import SimModeController
signal.signal(getattr(signal, sys.argv[5]), signal.SIG_IGN)
board_file, marker, go, seen = sys.argv[1:5]
ctl = SimModeController(board_file=board_file)
ctl.apply("4c/422/115/665")
Path(marker).write_text("x")
while not Path(go).exists():
    time.sleep(0.01)
Path(seen).write_text(str(ctl.current()))
"""
    child = spawn(script, board_file, marker, go, seen, sig)
    wait(marker, child)
    child.send_signal(getattr(signal, sig))
    time.sleep(0.5)  # a handler, had one been installed, would have run by now
    go.write_text("x")
    _, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert seen.read_text() == "4c/422.4/114.75/665.6"  # still in the applied mode (GPU snapped to 114 MHz)
    assert f"on signal {sig}" not in err and "on interpreter exit" in err
    from lightning_edge.devices import SimModeController

    assert str(SimModeController(board_file=board_file).current()) == "12c/2201.6/1300.5/3199"  # restored at exit


# ---------------------------------------------------------------- the state file and lock, in process
class _Spy(FakeBoardWriter):
    """Checks, at the first write, that the state file already records the change."""

    def __init__(self, board, state_dir):
        super().__init__(board)
        self.state_dir = state_dir
        self.seen = None

    def write(self, path, value):
        if self.seen is None:
            self.seen = json.loads(_state_file(self.state_dir).read_text())
        super().write(path, value)


def test_state_file_is_written_before_the_first_write(orin5, state_dir):
    spy = _Spy(orin5, state_dir)
    ctl = JetsonSysfsController(orin5.root, writer=spy, state_dir=state_dir, handle_exit=False)
    ctl.apply(LOW)
    s = spy.seen
    assert s["pid"] == os.getpid() and s["phase"] == "applying" and s["controller"] == "jetson"
    assert s["original"] == "12c/2201.6/1300.5/3199"
    assert s["snapshot"]["cpufreq"]["policy0"] == {"min_khz": 115200, "max_khz": 2201600}
    assert s["snapshot"]["emc"]["locked"] == 0
    assert "lightning-edge mode restore --device jetson" in s["restore_command"]
    after = json.loads(_state_file(state_dir).read_text())
    assert after["phase"] == "applied" and after["settled"] == after["applied"]
    ctl.restore()
    assert _state_file(state_dir) is None


def test_kept_mode_is_not_auto_restored_but_restorable(orin5, state_dir):
    before = orin5.knob_files()
    a = _controller(orin5, state_dir)
    a.apply(LOW)
    a.keep()  # what `mode set` does
    state = json.loads(_state_file(state_dir).read_text())
    assert state["pid"] is None and state["kept"] and state["original"] == "12c/2201.6/1300.5/3199"

    b = _controller(orin5, state_dir)  # a later start does not undo a deliberate choice
    assert b.recovered is None and str(b.current()) == "4c/422.4/114.75/665.6"
    with b:  # a session on top of it restores the mode *it* found ...
        b.apply("8c/1344/727/2133")
    assert str(b.current()) == "4c/422.4/114.75/665.6"
    assert json.loads(_state_file(state_dir).read_text())["kept"]  # ... and keeps the original on record

    c = _controller(orin5, state_dir)
    res = c.restore()  # `mode restore`
    assert res.settled == ORIN_AGX_MAXN and orin5.knob_files() == before
    assert _state_file(state_dir) is None


def test_crash_on_top_of_a_kept_mode_restores_the_kept_mode(orin5, state_dir, tmp_path, spawn, wait):
    a = _controller(orin5, state_dir)
    a.apply("8c/1344/727/2133")
    a.keep()
    marker = tmp_path / "paused"
    child = spawn(CHILD_DIES_MID_CHANGE, orin5.root, state_dir, marker, LOW, 2)
    wait(marker, child)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    b = _controller(orin5, state_dir)
    assert str(b.recovered.settled) == "8c/1344/726.75/2133"
    assert json.loads(_state_file(state_dir).read_text())["original"] == "12c/2201.6/1300.5/3199"
    b.restore()
    assert b.current() == ORIN_AGX_MAXN


def test_corrupt_state_file_stops_and_explains(orin5, state_dir):
    ctl = _controller(orin5, state_dir)
    Path(ctl.state_path).parent.mkdir(parents=True, exist_ok=True)
    Path(ctl.state_path).write_text("{not json")
    with pytest.raises(RecoveryError, match="cannot be believed .it is not JSON") as exc:
        _controller(orin5, state_dir)
    assert exc.value.command.startswith("rm ")


def test_exit_handlers_are_installed_only_while_needed(tmp_path):
    prev = signal.getsignal(signal.SIGTERM)
    ctl = SimModeController(board_file=tmp_path / "b.json")
    assert ctl.handle_exit
    ctl.apply(LOW)
    assert ctl in safety.active_controllers()
    assert signal.getsignal(signal.SIGTERM) is safety._on_signal
    ctl.restore()
    assert ctl not in safety.active_controllers()
    assert signal.getsignal(signal.SIGTERM) == prev


def test_lock_file_names_its_holder(tmp_path):
    lock = safety.BoardLock(tmp_path / "x.lock", "x")
    lock.acquire()
    assert lock.held and lock.holder_pid() == os.getpid()
    other = safety.BoardLock(tmp_path / "x.lock", "x")
    with pytest.raises(BoardBusyError) as exc:
        other.acquire()
    assert exc.value.pid == os.getpid() and exc.value.lock_path == str(tmp_path / "x.lock")
    lock.release()
    other.acquire()
    other.release()


def test_default_state_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("LIGHTNING_EDGE_STATE_DIR", str(tmp_path / "s"))
    assert safety.default_state_dir() == tmp_path / "s"
    monkeypatch.delenv("LIGHTNING_EDGE_STATE_DIR")
    assert "lightning_edge" in str(safety.default_state_dir())


def test_state_file_roundtrip(tmp_path):
    sf = safety.StateFile(tmp_path / "d" / "s.json")
    assert sf.read() is None
    sf.write({"a": 1})
    assert sf.read() == {"a": 1} and not list((tmp_path / "d").glob(".*tmp"))
    sf.remove()
    sf.remove()
    assert not sf.exists()


# ---------------------------------------------------------------- SIGHUP / SIGQUIT, and a restore that fails
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT], ids=["SIGHUP", "SIGQUIT"])
def test_sighup_and_sigquit_restore_then_end_the_process(sig, orin5, state_dir, tmp_path, spawn, wait):
    """An ssh session that drops (SIGHUP) or Ctrl-\\ (SIGQUIT) ends the run like SIGTERM: the board is put back first,
    then the process dies of the same signal."""
    import resource

    before = orin5.knob_files()
    marker = tmp_path / "holding"
    script = f"import signal\nsignal.signal(signal.{sig.name}, signal.SIG_DFL)\n" + CHILD_HOLDS_BOARD
    child = spawn(script, orin5.root, state_dir, marker, LOW, "wait",
                  preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
    wait(marker, child)
    assert orin5.knob_files() != before
    child.send_signal(sig)
    _, err = child.communicate(timeout=30)
    assert child.returncode == -sig, err
    assert f"signal {sig.name}" in err and "restoring jetson-orin-agx" in err
    assert orin5.knob_files() == before and _state_file(state_dir) is None


def test_a_failed_restore_on_a_signal_says_where_the_board_is_and_what_finishes_it(orin5, state_dir, tmp_path,
                                                                                   spawn, wait):
    before = orin5.knob_files()
    marker = tmp_path / "holding"
    child = spawn(CHILD_HOLDS_BOARD, orin5.root, state_dir, marker, LOW, "wait")
    wait(marker, child)
    orin5.deny_writes()  # e.g. the udev rule was removed, or debugfs unmounted, while the run went on
    child.send_signal(signal.SIGHUP)
    _, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGHUP
    assert "will be restored" not in err
    assert "is now in 4c/422.4/114.75/665.6" in err and "original 12c/2201.6/1300.5/3199" in err
    cmd = next(ln.strip() for ln in err.splitlines() if "lightning-edge mode restore" in ln and "--device" in ln)
    assert cmd.split()[:3] == ["lightning-edge", "mode", "restore"] or cmd.split()[:4] == [
        "sudo", "lightning-edge", "mode", "restore"]
    assert _state_file(state_dir) is not None  # kept: the command needs it
    orin5.deny_writes(False)
    args = cmd.split()[cmd.split().index("restore") + 1:]
    assert mode_main(["restore", *args], root=orin5.root) == 0
    assert orin5.knob_files() == before and _state_file(state_dir) is None


class _FailsAt(FakeBoardWriter):
    """The kernel refuses the N-th write (EIO), and every write after it (permission)."""

    def __init__(self, board, n):
        super().__init__(board)
        self.n, self.count = n, 0

    def write(self, path, value):
        self.count += 1
        if self.count == self.n:
            raise OSError(5, "Input/output error", str(path))
        if self.count > self.n:
            raise PermissionError(13, "Permission denied", str(path))
        super().write(path, value)


def test_a_write_error_then_a_failed_restore_never_claims_the_board_will_be_restored(orin5, state_dir, capsys):
    from lightning_edge.devices import ModeWriteError

    ctl = JetsonSysfsController(orin5.root, writer=_FailsAt(orin5, 3), state_dir=state_dir, handle_exit=False)
    with pytest.raises(ModeWriteError) as exc:
        ctl.apply(LOW)
    assert "will be restored" not in str(exc.value) and "2 write(s) done" in str(exc.value)
    with pytest.raises(PermissionError):
        ctl.restore()
    err = capsys.readouterr().err
    assert "restoring jetson-orin-agx" in err and "failed" in err and "is now in" in err
    assert "lightning-edge mode restore --device jetson" in err


def test_a_second_signal_during_the_restore_waits_for_it(tmp_path, capsys):
    """Ctrl-C pressed twice: the second SIGINT arrived while the first one's handler was restoring, ran a nested
    restore and raised KeyboardInterrupt inside the first, which then printed that restoring had failed (it had
    not). A signal that arrives during a restore is held until the restore is done, then acted on once."""
    from lightning_edge.devices import safety

    old = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        ctl = SimModeController(board_file=tmp_path / "b.json", state_dir=tmp_path / "state")
        ctl.apply("4c/422.4/114.75/665.6")  # installs the handlers
        real, calls = ctl._apply_snapshot, []

        def snapshot_with_a_second_ctrl_c(snap):
            calls.append(1)
            if len(calls) == 1:
                signal.raise_signal(signal.SIGINT)
            return real(snap)

        ctl._apply_snapshot = snapshot_with_a_second_ctrl_c
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    finally:
        safety.unregister(ctl)
        signal.signal(signal.SIGINT, old)
    err = capsys.readouterr().err
    assert "failed" not in err and "could not restore" not in err, err
    assert calls == [1]  # one restore, not a nested second one
    assert str(SimModeController(board_file=tmp_path / "b.json", state_dir=tmp_path / "state").current()) == \
        "12c/2201.6/1300.5/3199"
