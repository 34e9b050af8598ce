"""``lightning-edge mode show | list | set | restore`` on the twin and on a fake Jetson tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_edge.cli.mode import main

REPO = Path(__file__).resolve().parents[2]


def run(capsys, *argv: str, root=None) -> tuple[int, str, str]:
    rc = main(list(map(str, argv))) if root is None else main(list(map(str, argv)), root=root)
    out, err = capsys.readouterr()
    return rc, out, err


_run = run


def test_top_level_cli_dispatches_mode(capsys, state_dir):
    from lightning_edge.cli import main as top_main

    assert top_main(["mode", "show", "--device", "sim:orin-agx", "--state-dir", str(state_dir)]) == 0
    assert "12c/2201.6/1300.5/3199" in capsys.readouterr().out
    assert (
        top_main(
            ["mode", "set", "8c/1350/727/2133", "--device", "sim:orin-agx", "--state-dir", str(state_dir)]
        )
        == 1
    )
    assert "lightning-edge mode: error: power mode 8c/1350/727/2133 is not valid" in capsys.readouterr().err


def test_auto_without_a_jetson_suggests_the_twin(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    rc, out, err = run(capsys, "show", root=tmp_path / "empty")
    assert rc == 1
    assert "no power-mode controller available" in err and "jetson:" in err
    assert "--device sim:orin-agx" in err and "nvml: opt-in only" in err


def test_show_and_list_on_the_twin(capsys, state_dir):
    rc, out, _ = run(capsys, "show", "--device", "sim:orin-agx", "--state-dir", state_dir)
    assert rc == 0
    assert "12c/2201.6/1300.5/3199" in out and "simulated" in out and "MAXN" in out
    rc, out, _ = run(capsys, "list", "--device", "sim:orin-agx", "--state-dir", state_dir)
    assert rc == 0 and "12 x 29 x 13 x 4 = 18,096 power modes" in out and "simulated" in out
    assert "2201.6" in out and "1300.5" in out
    rc, out, _ = run(
        capsys, "list", "--device", "sim:orin-agx", "--subset", "fulcrum", "--all", "--state-dir", state_dir
    )
    assert rc == 0 and "3 x 7 x 7 x 3 = 441 power modes" in out
    assert "8c/1344/726.75/2133" in out
    assert sum(1 for ln in out.splitlines() if ln.strip()[:1].isdigit() and "c/" in ln) == 441


KEYS = ("orin-agx", "orin-agx-32gb", "orin-agx-64gb", "orin-nx-16gb", "orin-nx-8gb", "orin-nano-8gb", "orin-nano-4gb",
        "xavier-nx", "xavier-agx", "thor")


@pytest.mark.parametrize("key", KEYS)
def test_list_shows_the_named_modes_of_every_catalogued_board(capsys, state_dir, key):
    """Issue 29: ``mode list --device sim:<key>`` shows the board's grid and its nvpmodel named modes, each with its
    caps, the grid's mode under them, its firmware and whether its source is confirmed."""
    import json

    from lightning_edge import catalog

    info = catalog.board_info(key)
    rc, out, _ = run(capsys, "list", "--device", f"sim:{key}", "--state-dir", state_dir)
    assert rc == 0 and f"{info.space().size:,} power modes" in out and "[simulated board]" in out
    assert f"highest (MAXN): {info.space().max_mode()}" in out
    assert "nvpmodel named modes" in out
    for m in info.named_modes:
        line = next(ln for ln in out.splitlines() if ln.split()[:1] == [m.name] and f"[{m.firmware}" in ln)
        assert m.caps() in line and ("unconfirmed" in line) != m.source.confirmed
        if m.known:
            assert str(m.mode(info.space())) in line
    rc, out, _ = run(capsys, "list", "--device", f"sim:{key}", "--state-dir", state_dir, "--json", "-")
    data = json.loads(out)
    assert [d["name"] for d in data["named_modes"]] == [m.name for m in info.named_modes]
    assert all(d["source"] and isinstance(d["confirmed"], bool) for d in data["named_modes"])


def test_list_shows_a_named_mode_at_its_grid_point(capsys, state_dir):
    rc, out, _ = run(capsys, "list", "--device", "sim:orin-agx", "--state-dir", state_dir)
    line = next(ln for ln in out.splitlines() if ln.startswith("  MODE_15W"))
    # nvpmodel_p3701_0000.conf: 4 cores, CPU 1113.6, GPU 408 (a cap: the grid's highest GPU under it is 318.75), EMC 2133
    assert "4c/1113.6/318.75/2133" in line and "ID 1" in line and "jetpack5" in line
    assert "MODE_30W" in out and "(default)" in next(ln for ln in out.splitlines() if "MODE_30W" in ln)


def test_set_show_restore_across_processes(state_dir):
    env = dict(os.environ, PYTHONPATH=str(REPO))

    def cli(*argv):
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "lightning_edge.cli.mode",
                *argv,
                "--device",
                "sim:orin-agx",
                "--state-dir",
                str(state_dir),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        return res.stdout

    out = cli("set", "8c/1344/727/2133")
    assert "8c/1344/726.75/2133" in out and "simulated" in out
    assert "undo with: lightning-edge mode restore --device sim:orin-agx" in out
    out = cli("show")  # a new process sees the mode the previous one set
    assert "mode:   8c/1344/726.75/2133" in out and "original mode 12c/2201.6/1300.5/3199" in out
    out = cli("restore")
    assert "restored 12c/2201.6/1300.5/3199" in out
    assert "mode:   12c/2201.6/1300.5/3199" in cli("show")


def test_set_dry_run_and_invalid_mode(capsys, state_dir):
    rc, out, _ = run(capsys, "set", "mid", "--dry-run", "--device", "sim:orin-agx", "--state-dir", state_dir)
    assert rc == 0 and "dry run" in out and "cores 12 -> 7 (simulated)" in out
    rc, out, _ = run(capsys, "show", "--device", "sim:orin-agx", "--state-dir", state_dir)
    assert "12c/2201.6/1300.5/3199" in out
    rc, _, err = run(capsys, "set", "8c/1350/727/2133", "--device", "sim:orin-agx", "--state-dir", state_dir)
    assert rc == 1 and "cpu_mhz=1350" in err and "1344" in err


def test_restore_with_nothing_to_restore(capsys, state_dir):
    rc, out, _ = run(capsys, "restore", "--device", "sim:orin-agx", "--state-dir", state_dir)
    assert rc == 0 and "nothing to restore" in out


def test_jetson_set_show_restore_on_a_fake_tree(capsys, orin, state_dir):
    before = orin.knob_files()
    common = ["--device", "jetson", "--state-dir", str(state_dir)]

    def run(capsys, *argv):  # the fake tree through the API: the command line has no --root
        return _run(capsys, *argv, root=orin.root)

    rc, out, _ = run(capsys, "show", *common)
    assert rc == 0 and "NVIDIA Jetson AGX Orin Developer Kit 32GB (p3701-0000)" in out and f"JetPack {orin.jetpack}" in out
    assert "12c/2201.6/1300.5/3199" in out and "[measured, MAXN]" in out
    rc, out, _ = run(capsys, "set", "8c/1344/727/2133", "--dry-run", *common)
    assert (
        rc == 0
        and f"echo 1344000 > {orin.root}/sys/devices/system/cpu/cpufreq/policy0/scaling_min_freq" in out
    )
    assert orin.knob_files() == before
    rc, out, _ = run(capsys, "set", "8c/1344/727/2133", *common)
    assert rc == 0 and "8c/1344/726.75/2133" in out
    assert orin.read("sys/devices/system/cpu/cpufreq/policy0/scaling_max_freq") == "1344000"
    rc, out, _ = run(capsys, "show", *common)
    assert "mode:   8c/1344/726.75/2133" in out and "left set by `lightning-edge mode set`" in out
    rc, out, _ = run(capsys, "restore", "--dry-run", *common)
    assert rc == 0 and "echo 1 > " in out and orin.read("sys/devices/system/cpu/cpu11/online") == "0"
    rc, out, _ = run(capsys, "restore", *common)
    assert rc == 0 and "restored 12c/2201.6/1300.5/3199" in out
    assert orin.knob_files() == before


def test_there_is_no_root_option(capsys, orin5, state_dir):
    """A hidden ``--root`` let a sudoers user point root at a tree of symbolic links (issue 15)."""
    import argparse

    from lightning_edge.cli.mode import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    show = next(a for a in parser._actions if a.dest == "mode_command").choices["show"]
    help_text = show.format_help()
    assert "--device" in help_text and "--state-dir" in help_text
    assert "--root" not in help_text
    assert "--dry-run" not in help_text  # issue 16: show changes nothing, so a dry run of it meant nothing
    sub = next(a for a in parser._actions if a.dest == "mode_command").choices
    assert "--dry-run" in sub["set"].format_help() and "--dry-run" in sub["restore"].format_help()
    for action in ("show", "set", "restore", "list"):
        extra = ["8c/1344/727/2133"] if action == "set" else []
        with pytest.raises(SystemExit) as exc:
            main([action, *extra, "--device", "jetson", "--root", str(orin5.root), "--state-dir", str(state_dir)])
        assert exc.value.code == 2
        assert "unrecognized arguments: --root" in capsys.readouterr().err


def _hostile_tree(orin, tmp_path):
    """A tree whose knob files are links to a root-only file (what a user could build and point root at)."""
    secret = tmp_path / "secret"
    secret.write_text("123456\nroot-only line that must never be printed\n")
    secret.chmod(0o600)
    for rel in (orin.online_rel(11), orin.policy_rel("policy0", "scaling_max_freq")):
        p = orin.path(rel)
        p.unlink()
        p.symlink_to(secret)
    return secret


def test_a_tree_of_symlinks_is_neither_read_nor_written(capsys, orin5, state_dir, tmp_path):
    secret = _hostile_tree(orin5, tmp_path)
    before = secret.read_text()
    common = ["--device", "jetson", "--state-dir", str(state_dir)]
    rc, out, err = _run(capsys, "show", *common, root=orin5.root)
    assert rc == 1 and "symbolic link" in err and "must never be printed" not in out + err
    rc, out, err = _run(capsys, "set", "4c/422/115/665", *common, root=orin5.root)
    assert rc == 1 and "symbolic link" in err
    assert secret.read_text() == before


def test_a_long_unexpected_value_is_not_echoed_whole(capsys, orin5, state_dir):
    orin5.set_file(orin5.online_rel(11), "1" * 5 + "x" * 200)
    rc, _, err = _run(capsys, "show", "--device", "jetson", "--state-dir", str(state_dir), root=orin5.root)
    assert rc == 1 and "expected an integer" in err and "x" * 30 not in err


def test_mode_without_action_prints_help(capsys):
    rc, out, _ = run(capsys)
    assert rc == 2 and "show" in out and "restore" in out


@pytest.mark.parametrize("device", ["nvml", "bogus"])
def test_unavailable_devices(capsys, device, state_dir):
    rc, _, err = run(capsys, "show", "--device", device, "--state-dir", state_dir)
    assert rc == 1 and "error:" in err


def _documented_sudoers_commands():
    """The commands the sudoers line of docs/power-modes.md lets the group run: (exact args | regex) after the path."""
    import re
    from pathlib import Path

    text = Path(__file__).resolve().parents[2].joinpath("docs", "power-modes.md").read_text()
    block = text[text.index("Cmnd_Alias LE_MODE"):]
    block = block[:block.index("%lightning-edge")].replace("\\\n", " ")
    cmds = [c.strip() for c in block.split("=", 1)[1].split(",")]
    out = []
    for c in cmds:
        path, _, args = c.partition(" ")
        out.append(re.compile(args[:-1] if args.endswith("$") else re.escape(args) + "$"))
    return out


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_the_restore_command_root_prints_under_sudo_is_one_the_sudoers_line_allows(orin5, tmp_path, monkeypatch):
    """Run through the documented sudoers line (root's default state dir), a failed restore told the user to run
    ``lightning-edge mode restore --device jetson``: no ``sudo``, and arguments that line does not allow."""
    import shlex

    from lightning_edge.devices import JetsonSysfsController

    monkeypatch.setenv("LIGHTNING_EDGE_STATE_DIR", str(tmp_path / "root-state"))
    monkeypatch.setenv("SUDO_UID", "65534")
    ctl = JetsonSysfsController(orin5.root, writer=orin5.writer(), handle_exit=False)
    argv = shlex.split(ctl.restore_command())
    assert argv[:2] == ["sudo", "lightning-edge"]
    args = " ".join(argv[2:])
    assert any(rx.match(args) for rx in _documented_sudoers_commands()), args


def test_list_on_a_jetson_shows_the_named_modes_of_its_own_conf(capsys, jetson_conf, state_dir):
    from tests.fakes.jetson_sysfs import conf_models

    rc, out, _ = _run(capsys, "list", "--device", "jetson", "--state-dir", str(state_dir), root=jetson_conf.root)
    assert rc == 0 and "nvpmodel named modes" in out and "[this board]" in out
    assert f"this board's {jetson_conf.path('etc/nvpmodel.conf')}" in out
    for m in conf_models(jetson_conf.path("etc/nvpmodel.conf").read_text()).values():
        assert any(ln.split()[:1] == [m["name"]] for ln in out.splitlines())
    assert "grid: the catalogue's tables" not in out  # a board's grid is read from it, not from the catalogue


def test_the_mode_command_switches_the_processs_one_board(capsys, state_dir):
    """``mode set`` goes through ``get_board``: the board a profiler or a tuner of the same process opens with the same
    options is the one the command switched (was: the command built a controller of its own beside the Board)."""
    from lightning_edge.devices.board import ControlOptions, get_board

    rc, out, _ = run(capsys, "set", "4c/422.4/114.75/665.6", "--device", "sim:orin-agx", "--state-dir", state_dir)
    assert rc == 0, out
    board = get_board("sim:orin-agx", control="write", options=ControlOptions(state_dir=str(state_dir)))
    try:
        assert str(board.controller.current()) == "4c/422.4/114.75/665.6"
    finally:
        board.close()
    rc, out, _ = run(capsys, "restore", "--device", "sim:orin-agx", "--state-dir", state_dir)
    assert rc == 0 and "restored 12c/2201.6/1300.5/3199" in out, out
