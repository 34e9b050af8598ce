"""Every file the tool writes (issue 36 item 3): in the same folder, a temporary file opened exclusively (O_EXCL,
O_NOFOLLOW), fsynced, renamed; the target absent, a file of ours, or ``force``; a device, a FIFO, a folder or a
symbolic link refused with one line; a full or read-only disk leaves the target as it was."""

from __future__ import annotations

import json
import os
import stat
import threading

import pytest

from lightning_edge._jsonfile import is_json_file, json_schema_is, read_json, write_file, write_json


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
