"""Every JSON file the tool reads goes through one reader (size, depth and top-level limits, one-line errors), and
every file the tool writes: in the same folder, a temporary file opened exclusively (O_EXCL,
O_NOFOLLOW), fsynced, renamed; the target absent, a file of ours, or ``force``; a device, a FIFO, a folder or a
symbolic link refused with one line; a full or read-only disk leaves the target as it was."""

from __future__ import annotations

import gzip
import json
import os
import stat
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from lightning_edge._jsonfile import (
    is_json_file,
    json_schema_is,
    parse_json,
    read_json,
    write_file,
    write_json,
)
from lightning_edge.devices import RecoveryError
from lightning_edge.devices.safety import StateDirError


class Refused(Exception):
    pass


def test_a_new_file_is_written_and_no_temporary_file_stays(tmp_path):
    p = write_json(tmp_path / "out.json", {"a": 1}, Refused)
    assert json.loads(p.read_text()) == {"a": 1}
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out.json"]


def test_a_character_device_is_refused_even_with_force(tmp_path):
    dev = tmp_path / "null"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers, in a test folder
    for force in (False, True):
        with pytest.raises(Refused, match="is a device, not a regular file"):
            write_json(dev, {"a": 1}, Refused, force=force)
    assert stat.S_ISCHR(os.lstat(dev).st_mode)  # still the device


def test_a_symbolic_link_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    link = tmp_path / "out.json"
    link.symlink_to(victim)
    for force in (False, True):
        with pytest.raises(Refused, match="is a symbolic link"):
            write_json(link, {"a": 1}, Refused, force=force)
    assert victim.read_text() == "precious" and link.is_symlink()


def test_a_fifo_and_a_folder_are_refused(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(Refused, match="is a FIFO"):
        write_file(tmp_path / "fifo", b"x", Refused, force=True)
    (tmp_path / "dir").mkdir()
    with pytest.raises(Refused, match="is a folder"):
        write_file(tmp_path / "dir", b"x", Refused, force=True)


def test_an_unrelated_file_is_kept_unless_forced(tmp_path):
    mine = tmp_path / "notes.json"
    mine.write_text("my notes, not JSON")
    with pytest.raises(Refused, match="exists and is not a board file lightning_edge wrote.*--force"):
        write_json(mine, {"schema": "x"}, Refused, ours=json_schema_is("x"), what="board file")
    assert mine.read_text() == "my notes, not JSON"
    write_json(mine, {"schema": "x"}, Refused, ours=json_schema_is("x"), force=True)
    # now it is ours: replaced without --force
    write_json(mine, {"schema": "x", "v": 2}, Refused, ours=json_schema_is("x"))
    assert read_json(mine, Refused) == {"schema": "x", "v": 2}
    assert is_json_file(mine)


def test_a_planted_link_at_the_old_fixed_temporary_name_is_never_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    for name in ("out.json.tmp", "out.json.partial.tmp", ".out.json.tmp"):
        (tmp_path / name).symlink_to(victim)
    write_json(tmp_path / "out.json", {"a": 1}, Refused)
    assert victim.read_text() == "precious"


def test_two_writers_of_one_file_never_share_a_temporary_file(tmp_path):
    target = tmp_path / "out.json"
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for i in range(40):
                write_json(target, {"writer": k, "i": i, "pad": "x" * 5000}, Refused, ours=is_json_file)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert json.loads(target.read_text())["i"] == 39  # always a whole file
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out.json"]


def test_a_full_disk_leaves_the_old_file_whole(small_disk):
    target = small_disk.path / "out.json"
    write_json(target, {"old": True}, Refused)
    small_disk.fill()
    with pytest.raises(Refused, match="cannot be written .*No space left.*nothing was changed"):
        write_json(target, {"new": "x" * 20000}, Refused, ours=is_json_file)
    assert json.loads(target.read_text()) == {"old": True}
    assert not [p for p in small_disk.path.iterdir() if p.name.endswith(".tmp")]


def test_a_read_only_disk_says_so_in_one_line(small_disk):
    small_disk.readonly()
    with pytest.raises(Refused, match="Read-only file system") as exc:
        write_json(small_disk.path / "out.json", {"a": 1}, Refused)
    assert "\n" not in str(exc.value)


# ============================================================================================ reading
"""Every JSON document the package reads goes through ``read_json`` / ``parse_json``: each entry point that reads a
user's file (or its own state file) answers a hostile file with one line naming the file, in its own error type, and
no traceback from the parser behind it."""

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # so `tests.fakes` imports under plain `pytest` too
    sys.path.insert(0, str(REPO))


def _board_file(tmp_path: Path) -> tuple[Path, Callable[[Path], object]]:
    from lightning_edge.twin.board_files import load_board_file

    return tmp_path / "board.json", load_board_file


def _partial_calibration(tmp_path: Path) -> tuple[Path, Callable[[Path], object]]:
    from lightning_edge.calibrate import kit

    return tmp_path / "n4.json.partial", lambda p: kit._read_partial(p, {})


def _trace(tmp_path: Path) -> tuple[Path, Callable[[Path], object]]:
    from lightning_edge.profiling.trace import merge_into

    return tmp_path / "host_1.123.pt.trace.json", lambda p: merge_into(p, [], epoch_offset_ns=0)


def _device_profile(tmp_path: Path) -> tuple[Path, Callable[[Path], object]]:
    from lightning_edge.roofline.profile import load_profile

    return tmp_path / "profile.json", load_profile


def _twin_profile(tmp_path: Path) -> tuple[Path, Callable[[Path], object]]:
    from lightning_edge.twin.model import load_twin_params

    return tmp_path / "twin.json", load_twin_params


def _state_file(tmp_path: Path) -> tuple[Path, Callable[[Path], object]]:
    """The safety state file of a (fake) Jetson: the next controller on the board reads it on start."""
    from lightning_edge.devices import JetsonSysfsController
    from tests.fakes.jetson_sysfs import build_orin_agx

    board = build_orin_agx(tmp_path / "root", jetpack=5)
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)

    def controller(**kw: bool) -> JetsonSysfsController:
        return JetsonSysfsController(board.root, writer=board.writer(), state_dir=state_dir, handle_exit=False, **kw)

    path = Path(str(controller(recover=False).state_path))
    return path, lambda _p: controller()


# (entry point, its error type, whether it refuses a symbolic link: the files it replaces afterwards)
ENTRY_POINTS = {
    "board file": (_board_file, ValueError, False),
    "partial calibration": (_partial_calibration, ValueError, True),
    "trace to merge into": (_trace, ValueError, True),
    "device profile": (_device_profile, ValueError, False),
    "twin profile": (_twin_profile, ValueError, False),
    "safety state file": (_state_file, (RecoveryError, StateDirError), True),
}


def _huge(p: Path) -> None:
    with open(p, "wb") as fh:
        fh.truncate((2 << 30) + 1)  # sparse: above every entry point's limit, no disk used


def _link(p: Path) -> None:
    target = p.with_name("target.json")
    target.write_text("{}")
    p.symlink_to(target)


HOSTILE = {
    "huge": _huge,
    "nested past the parser's limit": lambda p: p.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    "nested 40 levels": lambda p: p.write_text('{"a": ' + "[" * 40 + "]" * 40 + "}"),
    "a list at the top": lambda p: p.write_text("[1, 2]"),
    "not UTF-8": lambda p: p.write_bytes(b'{"a": "\xff\xfe"}'),
    "a number of 5000 digits": lambda p: p.write_text('{"a": 1' + "0" * 5000 + "}"),
    "not JSON": lambda p: p.write_text("{not json"),
    "a symbolic link": _link,
}


@pytest.mark.parametrize("entry, hostile", [
    (entry, hostile) for entry, (_, _, refuses_links) in ENTRY_POINTS.items() for hostile in HOSTILE
    if refuses_links or hostile != "a symbolic link"  # a file only read: a link to one is followed
])
def test_every_json_file_entry_point_refuses_a_hostile_file_in_one_line(tmp_path, monkeypatch, entry, hostile):
    setup, error, _ = ENTRY_POINTS[entry]
    monkeypatch.setenv("LIGHTNING_EDGE_STATE_DIR", str(tmp_path / "default-state"))
    path, read = setup(tmp_path)
    HOSTILE[hostile](path)
    with pytest.raises(error) as exc:
        read(path)
    msg = str(exc.value)
    assert str(path) in msg and "\n" not in msg, msg
    shown = "".join(traceback.format_exception(type(exc.value), exc.value, exc.value.__traceback__))
    json_dir = os.path.dirname(json.__file__)
    assert json_dir not in shown and not any(
        e in shown for e in ("JSONDecodeError", "RecursionError", "UnicodeDecodeError", "AttributeError")), shown
    if hostile == "a symbolic link":
        assert "symbolic link" in msg
        assert path.with_name("target.json").read_text() == "{}"


def test_the_reader_checks_the_top_level_kind_and_names_it():
    assert parse_json(b'{"a": 1}', Refused, expect=dict) == {"a": 1}
    assert parse_json("[1]", Refused, expect=(dict, list)) == [1]
    with pytest.raises(Refused, match="holds a list where an object is expected"):
        parse_json("[]", Refused, expect=dict)
    with pytest.raises(Refused, match="holds true or false where a number is expected"):
        parse_json("true", Refused, expect=(int, float))
    with pytest.raises(Refused, match="holds null where an object or a list is expected"):
        parse_json("null", Refused, expect=(dict, list))
    with pytest.raises(Refused, match=r"byte 1 is not UTF-8"):
        parse_json(b'"\xff"', Refused)


def test_a_link_is_followed_unless_the_caller_refuses_it(tmp_path):
    (tmp_path / "real.json").write_text('{"a": 1}')
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    assert read_json(tmp_path / "link.json", Refused) == {"a": 1}
    with pytest.raises(Refused, match="is a symbolic link: refused"):
        read_json(tmp_path / "link.json", Refused, follow_symlinks=False)
    assert read_json(tmp_path / "real.json", Refused, follow_symlinks=False) == {"a": 1}


def test_a_gzipped_file_is_inflated_within_the_limit(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(b'{"traceEvents": []}') + gzip.compress(b""))  # two members, as gzip allows
    assert read_json(p, Refused, gzipped=True) == {"traceEvents": []}
    p.write_bytes(gzip.compress(b"[" + b"0," * 50_000 + b"0]"))  # 100 KB from a few hundred bytes
    assert p.stat().st_size < 4096
    with pytest.raises(Refused, match="inflates to more than 4096 bytes"):
        read_json(p, Refused, limit=4096, gzipped=True)
    p.write_bytes(gzip.compress(b'{"a": 1}')[:-12])
    with pytest.raises(Refused, match="gzip file cut short"):
        read_json(p, Refused, gzipped=True)
    p.write_bytes(b'{"a": 1}')
    with pytest.raises(Refused, match="is not a gzip file"):
        read_json(p, Refused, gzipped=True)


def test_a_gzipped_trace_is_merged_into_and_a_huge_one_refused(tmp_path, monkeypatch):
    from lightning_edge.profiling import trace

    p = tmp_path / "host_1.123.pt.trace.json.gz"
    doc = {"traceEvents": [{"ph": "X", "ts": 1.0, "dur": 2, "pid": 1, "args": {"pad": "x" * 5000}}]}
    p.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert trace.merge_into(p, [], epoch_offset_ns=0) == 0  # read (nothing of ours in its window)
    monkeypatch.setattr(trace, "MAX_TRACE_BYTES", 1000)
    assert p.stat().st_size < 1000
    with pytest.raises(ValueError, match=f"{p} inflates to more than 1000 bytes"):
        trace.merge_into(p, [], epoch_offset_ns=0)
