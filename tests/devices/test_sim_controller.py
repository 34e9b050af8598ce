"""The twin's controller: same interface as the real ones, everything labelled simulated."""

from __future__ import annotations

import io
import json
import signal

import pytest

from lightning_edge.devices import (
    FULCRUM_MIDPOINT,
    ORIN_AGX_MAXN,
    ModeController,
    PowerMode,
    SimModeController,
    fulcrum_space,
    get_controller,
    orin_agx_space,
)


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_defaults_and_labels():
    ctl = SimModeController()
    assert isinstance(ctl, ModeController)
    assert ctl.current() == ORIN_AGX_MAXN
    assert ctl.space == orin_agx_space() and ctl.space.size == 18_096
    assert ctl.source == "simulated" and "simulated" in ctl.label
    applied = ctl.apply("8c/1344/727/2133")
    assert applied.source == "simulated" and applied.verified
    assert all("(simulated)" in a for a in applied.actions)
    assert "[simulated]" in str(applied)
    assert SimModeController.why_unavailable() is None


def test_factory_names():
    assert isinstance(get_controller("sim:orin-agx"), SimModeController)
    assert isinstance(get_controller("sim"), SimModeController)
    with pytest.raises(ValueError, match="the twin plays orin-agx"):
        get_controller("sim:tx2")


def test_last_change_uses_the_injected_clock():
    clock = FakeClock(100.0)
    ctl = SimModeController(clock=clock)
    assert ctl.last_change_s is None and ctl.seconds_since_change() is None
    ctl.apply(FULCRUM_MIDPOINT)
    assert ctl.last_change_s == 100.0
    clock.t = 102.5
    assert ctl.seconds_since_change() == 2.5
    ctl.apply(FULCRUM_MIDPOINT)  # no change: the settling clock does not restart
    assert ctl.last_change_s == 100.0
    ctl.apply(FULCRUM_MIDPOINT.replace(gpu_mhz=114.75))
    assert ctl.last_change_s == 102.5


def test_knob_order_mirrors_the_real_board():
    steps = []
    ctl = SimModeController(on_step=lambda k, old, new: steps.append(k))
    ctl.apply("4c/422/115/665")  # lowering cores: cores last
    assert steps == ["cpu_mhz", "gpu_mhz", "mem_mhz", "cores"]
    steps.clear()
    ctl.apply("12c/2201.6/1300.5/3199")  # raising cores: cores first
    assert steps == ["cores", "cpu_mhz", "gpu_mhz", "mem_mhz"]


def test_context_manager_restores_and_in_memory_writes_no_files(tmp_path, _isolated_state_dir):
    with SimModeController(initial="4c/422/115/665") as ctl:
        assert ctl.current() == PowerMode(4, 422.4, 114.75, 665.6)
        ctl.apply("maxn")
        assert ctl.original == PowerMode(4, 422.4, 114.75, 665.6)
    assert str(ctl.current()) == "4c/422.4/114.75/665.6"
    assert not _isolated_state_dir.exists()  # nothing outlives an in-memory twin


def test_dry_run_changes_nothing():
    out = io.StringIO()
    ctl = SimModeController(dry_run=True, out=out)
    applied = ctl.apply("mid")
    assert applied.dry_run and applied.settled is None
    assert ctl.current() == ORIN_AGX_MAXN
    text = out.getvalue()
    assert "dry run" in text and "cores 12 -> 7 (simulated)" in text


def test_board_file_persists_across_controllers(tmp_path):
    bf = tmp_path / "twin" / "board.json"
    a = SimModeController(board_file=bf, handle_exit=False)
    a.apply("8c/1344/727/2133")
    a.keep()
    data = json.loads(bf.read_text())
    assert data["simulated"] is True and data["label"] == "8c/1344/726.75/2133"
    b = SimModeController(board_file=bf, handle_exit=False)
    assert b.current() == FULCRUM_MIDPOINT
    assert b.restore().settled == ORIN_AGX_MAXN
    assert SimModeController(board_file=bf).current() == ORIN_AGX_MAXN


def test_other_spaces():
    ctl = SimModeController(space=fulcrum_space())
    assert ctl.current() == ORIN_AGX_MAXN and ctl.space.size == 441
    with pytest.raises(ValueError, match="is not valid for fulcrum"):
        ctl.apply("7c/1344/727/2133")


def test_sim_crash_mid_change_is_recovered(tmp_path, spawn, wait):
    bf = tmp_path / "twin" / "board.json"
    marker = tmp_path / "paused"
    script = r"""
import sys, time
from pathlib import Path
from lightning_edge.devices import SimModeController
bf, marker = sys.argv[1:3]
def step(knob, old, new):
    if knob == "mem_mhz":  # cpu and gpu already changed
        Path(marker).write_text("x"); time.sleep(120)
SimModeController(board_file=bf, on_step=step).apply("4c/422/115/665")
"""
    child = spawn(script, bf, marker)
    wait(marker, child)
    half = SimModeController(board_file=bf, recover=False, handle_exit=False).current()
    assert half == PowerMode(12, 422.4, 114.75, 3199)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    ctl = SimModeController(board_file=bf, handle_exit=False)
    assert ctl.recovered.settled == ORIN_AGX_MAXN and ctl.current() == ORIN_AGX_MAXN


# ---------------------------------------------------------------- every catalogued board (issue 29)
@pytest.mark.parametrize("key", ["orin-agx", "orin-agx-32gb", "orin-agx-64gb", "orin-nx-16gb", "orin-nx-8gb",
                                 "orin-nano-8gb", "orin-nano-4gb", "xavier-nx", "xavier-agx", "thor"])
def test_the_twin_plays_the_mode_space_of_every_catalogued_board(key):
    from lightning_edge import catalog

    info = catalog.board_info(key)
    ctl = get_controller(f"sim:{key}", handle_exit=False)
    assert isinstance(ctl, SimModeController) and ctl.board == key
    assert ctl.space == info.space() and ctl.current() == info.space().max_mode()  # a fresh board is in MAXN
    assert ctl.named_modes == info.named_modes
    for named in info.named_modes:  # each named mode is a point of the board's grid
        mode = named.mode(ctl.space)
        if mode is not None:
            assert ctl.apply(mode).settled == mode
    assert ctl.cli_args() == ["--device", f"sim:{key}"]


def test_an_unknown_board_names_the_catalogue():
    with pytest.raises(ValueError, match=r"no simulated board 'orin-nano': the twin plays orin-agx, .*thor"):
        get_controller("sim:orin-nano")
