"""Files a root process writes for the board (lock, state, temporary files) cannot be turned against it.

Each test is an attack or a careless setup seen on the fake trees (issue 15): a symlink planted where the lock or
the state file's temporary file goes (root truncated / overwrote its target), files readable by everyone, a store
password recorded in the state file, a state directory someone else can write.
"""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from lightning_edge.devices import safety
from lightning_edge.devices.safety import StateDirError

SECRET = "root-only secret\n"


def _secret(tmp_path):
    target = tmp_path / "shadow"
    target.write_text(SECRET)
    target.chmod(0o600)
    return target


def _state_dir(tmp_path):
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    return d


def test_a_symlink_planted_as_the_lock_file_is_refused_and_its_target_untouched(tmp_path):
    target = _secret(tmp_path)
    d = _state_dir(tmp_path)
    (d / "jetson-orin-agx.lock").symlink_to(target)
    lock = safety.BoardLock(d / "jetson-orin-agx.lock", "jetson-orin-agx")
    with pytest.raises(StateDirError, match="symbolic link"):
        lock.acquire()
    assert target.read_text() == SECRET and not lock.held


def test_a_symlink_planted_as_the_state_file_is_not_followed(tmp_path):
    target = _secret(tmp_path)
    d = _state_dir(tmp_path)
    (d / "b.json").symlink_to(target)
    sf = safety.StateFile(d / "b.json")
    with pytest.raises(StateDirError, match="symbolic link"):
        sf.read()  # never shows the target's content (the old code echoed 200 characters of it)
    sf.write({"a": 1})  # the rename replaces the link itself, never its target
    assert target.read_text() == SECRET
    assert not (d / "b.json").is_symlink() and sf.read() == {"a": 1}


def test_the_temporary_file_name_is_not_predictable(tmp_path):
    """The old name was ``.<name>.<pid>.tmp``, opened with ``open(tmp, "w")``: a planted link was followed."""
    target = _secret(tmp_path)
    d = _state_dir(tmp_path)
    (d / f".b.json.{os.getpid()}.tmp").symlink_to(target)
    safety.StateFile(d / "b.json").write({"a": 1})
    assert target.read_text() == SECRET
    assert json.loads((d / "b.json").read_text()) == {"a": 1}


def test_lock_and_state_files_are_private(tmp_path):
    d = _state_dir(tmp_path)
    lock = safety.BoardLock(d / "x.lock", "x")
    lock.acquire()
    safety.StateFile(d / "x.json").write({"a": 1})
    assert stat.S_IMODE(os.stat(d / "x.lock").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(d / "x.json").st_mode) == 0o600
    lock.release()


def test_a_lock_file_left_world_readable_by_an_older_version_is_made_private(tmp_path):
    d = _state_dir(tmp_path)
    (d / "x.lock").write_text("")
    (d / "x.lock").chmod(0o644)
    lock = safety.BoardLock(d / "x.lock", "x")
    lock.acquire()
    assert stat.S_IMODE(os.stat(d / "x.lock").st_mode) == 0o600
    lock.release()


def test_a_new_state_dir_is_created_private(tmp_path):
    d = tmp_path / "new" / "state"
    safety.StateFile(d / "x.json").write({"a": 1})
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


def test_no_password_in_the_state_file(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py", "--storage", "postgresql://alice:hunter2@db.example/optuna",
                                      "--token=abc", "--password", "s3cret", "--lr", "0.1"])
    rec = safety.BoardSafety("x", _state_dir(tmp_path)).new_record()
    assert "hunter2" not in rec["argv"] and "s3cret" not in rec["argv"]
    assert "postgresql://alice:***@db.example/optuna" in rec["argv"] and "--lr 0.1" in rec["argv"]


def test_a_state_dir_others_can_write_is_refused(tmp_path):
    d = _state_dir(tmp_path)
    d.chmod(0o777)
    with pytest.raises(StateDirError, match="writable by others") as exc:
        safety.BoardLock(d / "x.lock", "x").acquire()
    assert f"chmod go-w {d}" in str(exc.value)
    with pytest.raises(StateDirError):
        safety.StateFile(d / "x.json").write({"a": 1})
    assert not (d / "x.lock").exists() and not (d / "x.json").exists()


def test_a_symlinked_state_dir_is_refused(tmp_path):
    real = _state_dir(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(StateDirError, match="symbolic link"):
        safety.BoardLock(link / "x.lock", "x").acquire()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")
def test_a_state_dir_owned_by_another_user_is_refused(tmp_path):
    import pwd

    nobody = pwd.getpwnam("nobody")
    d = _state_dir(tmp_path)
    os.chown(d, nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(StateDirError, match="owned by") as exc:
        safety.BoardLock(d / "x.lock", "x").acquire()
    assert "nobody" in str(exc.value) or str(nobody.pw_uid) in str(exc.value)


# ---------------------------------------------------------------- a state file is data, never a list of files to write
def _forge(orin, state_dir, **snap):
    from lightning_edge.devices import JetsonSysfsController

    ctl = JetsonSysfsController(orin.root, writer=orin.writer(), state_dir=state_dir, handle_exit=False,
                                recover=False)
    raw = ctl.read_raw()
    rec = {"version": 1, "device_id": ctl.device_id, "pid": None, "kept": True, "phase": "kept",
           "controller": "nvpmodel", "original": "12c/2201.6/1300.5/3199",
           "snapshot": {"kind": "nvpmodel", "nvpmodel_id": 0, "raw": raw, **snap}}
    safety.StateFile(ctl.state_path).write(rec)
    return ctl


def test_a_forged_state_file_cannot_name_a_file_for_root_to_write(orin5, tmp_path, capsys):
    """``sudo lightning-edge mode restore --state-dir <a user's dir>`` reads a state file the user could write: its
    nvpmodel snapshot named the file to put back (``conf_path``) and its content, and root wrote it."""
    from lightning_edge.cli.mode import main as mode_main

    target = _secret(tmp_path)
    d = _state_dir(tmp_path)
    _forge(orin5, d, conf_path=str(target), conf_text="root::0:0::/:/bin/sh\n")
    rc = mode_main(["restore", "--device", "jetson", "--state-dir", str(d)], root=orin5.root)
    assert rc == 1 and "never chooses a file" in capsys.readouterr().err
    assert target.read_text() == SECRET


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_root_takes_no_nvpmodel_configuration_from_a_users_state_dir(orin5, tmp_path, capsys, monkeypatch):
    """The board's own nvpmodel.conf, but the text comes from a user's state dir (``sudo ... --state-dir``):
    nvpmodel.conf says which files nvpmodel writes, so root does not take it from there."""
    from lightning_edge.cli.mode import main as mode_main

    d = _state_dir(tmp_path)
    conf = orin5.root / "etc" / "nvpmodel.conf"
    before = conf.read_text()
    _forge(orin5, d, conf_path=str(conf), conf_text="< PARAM TYPE=FILE NAME=X >\nX /etc/shadow\n")
    for p in (d, *d.iterdir()):
        os.chown(p, 65534, 65534)
    monkeypatch.setenv("SUDO_UID", "65534")  # root under sudo, pointed at the calling user's dir
    rc = mode_main(["restore", "--device", "jetson", "--state-dir", str(d)], root=orin5.root)
    assert rc == 1 and "root does not own" in capsys.readouterr().err
    assert conf.read_text() == before


# ---------------------------------------------------------------- races and paths: the checked directory is the one used
needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root to chown")


def _victim(tmp_path, name):
    """A root-only directory holding a root-only file named like a state dir's file."""
    v = tmp_path / "root-only"
    v.mkdir(mode=0o700, exist_ok=True)
    f = v / name
    f.write_text(SECRET)
    f.chmod(0o600)
    return f


def _swap_dir_for_link_just_before(monkeypatch, d, victim_dir, calls=("open", "unlink")):
    """The attacker wins the race: right before root opens (or unlinks) a file in the state dir, after the dir was
    checked, the dir is moved away and a symbolic link to ``victim_dir`` put in its place."""
    done = []
    real = {name: getattr(os, name) for name in calls}

    def swap(path):
        base = os.path.basename(os.fsdecode(path))
        if not done and base.lstrip(".").startswith("b."):
            done.append(True)
            os.rename(d, d.with_name(d.name + ".moved"))
            os.symlink(victim_dir, d)

    def wrap(name):
        def f(path, *a, **kw):
            if name != "open" or not (a and a[0] & getattr(os, "O_DIRECTORY", 0)):
                swap(path)
            return real[name](path, *a, **kw)
        return f

    for name in calls:
        monkeypatch.setattr(os, name, wrap(name))
    return done


def test_a_state_dir_swapped_for_a_link_after_its_check_does_not_redirect_the_lock(tmp_path, monkeypatch):
    """The dir was checked by path, then the lock opened by path again: a dir swapped for a link in between made
    root create and truncate ``<target>/<board>.lock``. Files are opened relative to the checked directory."""
    victim = _victim(tmp_path, "b.lock")
    d = _state_dir(tmp_path)
    done = _swap_dir_for_link_just_before(monkeypatch, d, victim.parent)
    lock = safety.BoardLock(d / "b.lock", "b")
    try:
        lock.acquire()
    except OSError:
        pass
    finally:
        lock.release()
    monkeypatch.undo()
    assert done and victim.read_text() == SECRET


def test_a_state_dir_swapped_for_a_link_after_its_check_does_not_redirect_the_state_file(tmp_path, monkeypatch):
    victim = _victim(tmp_path, "b.json")
    d = _state_dir(tmp_path)
    done = _swap_dir_for_link_just_before(monkeypatch, d, victim.parent)
    try:
        safety.StateFile(d / "b.json").write({"forged": True})
    except OSError:
        pass
    monkeypatch.undo()
    assert done and victim.read_text() == SECRET


def test_a_state_dir_swapped_for_a_link_does_not_make_root_delete_another_file(tmp_path, monkeypatch):
    victim = _victim(tmp_path, "b.json")
    d = _state_dir(tmp_path)
    sf = safety.StateFile(d / "b.json")
    sf.write({"a": 1})
    done = _swap_dir_for_link_just_before(monkeypatch, d, victim.parent, calls=("unlink",))
    try:
        sf.remove()
    except OSError:
        pass
    monkeypatch.undo()
    assert done and victim.read_text() == SECRET


@needs_root
def test_a_link_in_a_directory_a_user_controls_is_not_followed_to_a_root_directory(tmp_path, monkeypatch):
    """Only the last component was checked: with a user's dir above it (``sudo`` keeping ``HOME``, or
    ``--state-dir ~/x``), the user pointed root at any root-owned directory through a link higher up, and root
    truncated the ``<board>.lock`` there."""
    victim = _victim(tmp_path, "b.lock")
    home = tmp_path / "home"
    home.mkdir()
    (home / "link").symlink_to(victim.parent.parent)  # .../home/link/root-only is the root-only directory
    os.chown(home, 65534, 65534)
    os.lchown(home / "link", 65534, 65534)
    monkeypatch.setenv("SUDO_UID", "65534")
    lock = safety.BoardLock(home / "link" / "root-only" / "b.lock", "b")
    with pytest.raises(StateDirError, match="symbolic link"):
        lock.acquire()
    lock.release()
    assert victim.read_text() == SECRET


def test_links_that_only_root_can_change_are_followed(tmp_path):
    """A link in a root-owned directory nobody else can write (``/home -> /data/home``) is fine."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "alias").symlink_to(real)
    sf = safety.StateFile(tmp_path / "alias" / "state" / "b.json")
    sf.write({"a": 1})
    assert sf.read() == {"a": 1} and (real / "state" / "b.json").exists()


def test_a_fifo_planted_as_the_state_file_does_not_hang_root(tmp_path):
    """``open(O_RDONLY)`` of a fifo blocks until a writer comes: ``sudo ... mode show`` / ``restore`` hung."""
    import threading

    d = _state_dir(tmp_path)
    os.mkfifo(d / "b.json", 0o600)
    out: list = []

    def read():
        try:
            out.append(safety.StateFile(d / "b.json").read())
        except BaseException as exc:  # noqa: BLE001
            out.append(exc)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(5)
    if t.is_alive():  # unblock the reader before failing
        fd = os.open(d / "b.json", os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(5)
        pytest.fail("reading a fifo planted as the state file blocked")
    assert isinstance(out[0], StateDirError)


@needs_root
def test_root_trusts_a_state_file_only_from_the_directory_it_read_it_from(tmp_path, monkeypatch):
    """``trusted_by_root`` looked the dir up by path again after the state file was read from it: a user who swaps
    a root-owned dir in between made root take a forged nvpmodel.conf text as its own."""
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, 65534, 65534)
    users = home / "state"
    users.mkdir(mode=0o700)
    os.chown(users, 65534, 65534)
    roots = home / "root-made"  # made by an earlier root run (sudo keeping HOME)
    roots.mkdir(mode=0o700)
    monkeypatch.setenv("SUDO_UID", "65534")
    s = safety.BoardSafety("b", users)
    s.state.write({"pid": None, "snapshot": {"conf_text": "forged"}})
    assert s.state.read()["snapshot"]["conf_text"] == "forged"
    os.rename(users, home / "state.moved")
    os.rename(roots, users)  # now a root-owned dir sits at the path
    assert not s.trusted_by_root


def test_a_password_with_at_and_slash_is_hidden_whole_in_the_recorded_command_line():
    """``redact_argv`` stopped at the first ``@``: ``user:p@ss/w0rd@host`` was recorded as ``user:***@ss/w0rd@host``."""
    line = safety.redact_argv(["train.py", "postgresql://user:p@ss/w0rd@host/db",
                               "--store=postgresql://u:s3cr3t@h:5432/db?password=zz"])
    assert "ss/w0rd" not in line and "s3cr3t" not in line and "zz" not in line
    assert "postgresql://user:***@host/db" in line and "--store=postgresql://u:***@h:5432/db" in line
