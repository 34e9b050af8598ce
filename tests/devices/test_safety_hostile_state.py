"""State and lock files that are not what lightning_edge wrote: every one is a one-line error saying what is wrong
and what to do, never a traceback, never taken as "no state" (which would overwrite the only record of the
original mode). And a restore that fails half-way says where the board is."""

from __future__ import annotations

import json
import os

import pytest

from lightning_edge.cli.mode import main as mode_main
from lightning_edge.devices import JetsonSysfsController, RecoveryError, safety
from lightning_edge.devices.safety import StateDirError

LOW = "4c/422/115/665"


def _controller(board, state_dir, **kw):
    kw.setdefault("handle_exit", False)
    return JetsonSysfsController(board.root, writer=board.writer(), state_dir=state_dir, **kw)


def _left_over(board, state_dir) -> dict:
    """A real leftover (a process switched the board and vanished): its state file, as written."""
    ctl = _controller(board, state_dir)
    ctl.apply(LOW)
    rec = json.loads(open(ctl.state_path).read())
    ctl._end_session()  # as if the process had died: the lock goes, the state file stays
    return rec


def _hostile(rec: dict) -> list[tuple[str, object]]:
    snap = rec["snapshot"]
    return [
        ("pid as text", {**rec, "pid": "abc"}),
        ("pid 1e300", {**rec, "pid": 1e300}),
        ("pid true", {**rec, "pid": True}),
        ("updated_at 1e300", {**rec, "updated_at": 1e300}),
        ("snapshot a list", {**rec, "snapshot": [1, 2]}),
        ("snapshot online text", {**rec, "snapshot": {**snap, "online": "all"}}),
        ("snapshot frequency 1e300", {**rec, "snapshot": {**snap, "gpu": {"min_hz": 1e300, "max_hz": 1e300}}}),
        ("snapshot frequency NaN", {**rec, "snapshot": {**snap, "gpu": {"min_hz": float("nan"), "max_hz": 1}}}),
        ("original_mode 1e300 cores", {**rec, "original_mode": {"cores": 1e300, "cpu_mhz": 1, "gpu_mhz": 1,
                                                                "mem_mhz": 1}}),
        ("applied a string", {**rec, "applied": "4c"}),
        ("kept_state a list", {**rec, "kept_state": [1]}),
        ("a list", [rec]),
        ("JSON []", []),
        ("JSON null", None),
        ("a number", 42),
    ]


def test_every_hostile_state_file_is_a_clear_recovery_error_and_is_kept(orin5, state_dir, capsys):
    before = orin5.knob_files()
    rec = _left_over(orin5, state_dir)
    path = state_dir / os.path.basename(rec_path(orin5, state_dir))
    for what, payload in _hostile(rec):
        text = json.dumps(payload, allow_nan=True)
        path.write_text(text)
        orin5.clear_writes()
        with pytest.raises(RecoveryError) as exc:
            _controller(orin5, state_dir)  # the next start of a controller on the board
        msg = str(exc.value)
        assert "state file" in msg and str(path) in msg, (what, msg)
        assert orin5.writes() == [], f"{what}: wrote to the board from a hostile state file"
        assert path.read_text() == text, f"{what}: the state file was overwritten"
        # and the command line: one line on stderr, exit code 1, no traceback
        rc = mode_main(["restore", "--device", "jetson", "--state-dir", str(state_dir)], root=orin5.root)
        err = capsys.readouterr().err
        assert rc == 1 and "Traceback" not in err and str(path) in err, (what, err)
        assert path.read_text() == text
    path.unlink()
    # the real leftover restores
    path.write_text(json.dumps(rec))
    ctl = _controller(orin5, state_dir)
    assert ctl.recovered is not None and orin5.knob_files() == before


def rec_path(board, state_dir) -> str:
    return _controller(board, state_dir, recover=False).state_path


def test_a_directory_planted_as_the_lock_file_is_a_clear_error(tmp_path):
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    (d / "b.lock").mkdir()
    with pytest.raises(StateDirError, match="not a plain file") as exc:
        safety.BoardLock(d / "b.lock", "b").acquire()
    assert "rmdir" in str(exc.value) or "rm -r" in str(exc.value)


def test_a_directory_planted_as_the_state_file_is_a_clear_error(tmp_path):
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    (d / "b.json").mkdir()
    sf = safety.StateFile(d / "b.json")
    with pytest.raises(StateDirError, match="not a plain file"):
        sf.read()
    with pytest.raises(StateDirError, match="not a plain file"):
        sf.write({"a": 1})


def test_mode_restore_failing_half_way_says_where_the_board_is(orin5, state_dir, capsys):
    """EACCES on one knob in the middle of ``mode restore``: the message says the mode the board is in now, the
    original, and the command that finishes the restore (the state file stays for it)."""
    from tests.fakes.jetson_sysfs import FakeBoardWriter

    ctl = _controller(orin5, state_dir)
    ctl.apply(LOW)
    ctl.keep()  # what `mode set` does
    before_restore = orin5.knob_files()

    class DeniesGPU(FakeBoardWriter):
        def write(self, path, value):
            if "max_freq" in str(path) and "cpufreq" not in str(path):
                raise PermissionError(13, "Permission denied", str(path))
            super().write(path, value)

    c = JetsonSysfsController(orin5.root, writer=DeniesGPU(orin5), state_dir=state_dir, handle_exit=False)
    with pytest.raises(PermissionError):
        c.restore()
    err = capsys.readouterr().err
    assert orin5.knob_files() != before_restore  # half-way: some knobs were written
    assert "is now in" in err and "original 12c/2201.6/1300.5/3199" in err, err
    assert "lightning-edge mode restore" in err
    assert os.path.exists(ctl.state_path)
