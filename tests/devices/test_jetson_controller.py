"""The Jetson sysfs controller on fake Orin AGX trees (JetPack 5 and 6 layouts).

Every write goes through the fake board's writer, which logs it and plays the kernel: it refuses
writes to an offline cluster (EBUSY) or that would put min above max (EINVAL), and can clamp or
ignore values. The tests assert on the files and on the logged sequence of writes.
"""

from __future__ import annotations

import io

import pytest

from lightning_edge.devices import (
    FULCRUM_MIDPOINT,
    ORIN_AGX_MAXN,
    ControllerUnavailableError,
    InvalidModeError,
    JetsonSysfsController,
    ModePermissionError,
    ModeVerificationError,
    PowerMode,
    fulcrum_space,
    get_controller,
    orin_agx_space,
)
from lightning_edge.devices.controllers.sysfs import discover_space
from tests.fakes.jetson_sysfs import CLUSTERS, EMC

POLICY = "sys/devices/system/cpu/cpufreq/{}/scaling_{}_freq"


def make(board, state_dir, **kw) -> JetsonSysfsController:
    kw.setdefault("handle_exit", False)
    return JetsonSysfsController(board.root, writer=board.writer(), state_dir=state_dir, **kw)


def pairs(board) -> list[tuple[str, str]]:
    out = [(POLICY.format(p, "min"), POLICY.format(p, "max")) for p in CLUSTERS]
    out.append((board.gpu_rel_file("min_freq"), board.gpu_rel_file("max_freq")))
    return out


def check_sequence(board, before: dict[str, str], writes: list[tuple[str, str]]) -> None:
    """Replay ``writes`` from ``before``: min <= max after every write, no write to an offline cluster,
    cores brought online before their cluster is written and taken offline after every frequency write."""
    files = dict(before)
    online = {c: files[board.online_rel(c)] == "1" for c in range(1, 12)}
    online[0] = True
    seen_offline = False
    for i, (f, v) in enumerate(writes):
        files[f] = v
        if f.endswith("/online"):
            cpu = int(f.split("/cpu")[-1].split("/")[0])
            online[cpu] = v == "1"
            if v == "0":
                seen_offline = True
            else:
                assert not seen_offline, f"write {i}: a core came online after cores went offline"
            continue
        assert not seen_offline, f"write {i}: {f} written after cores went offline"
        for pol, cpus in CLUSTERS.items():
            if f.startswith(f"sys/devices/system/cpu/cpufreq/{pol}/"):
                assert any(online[c] for c in cpus), f"write {i}: {f} while its cluster is offline"
        for lo, hi in pairs(board):
            assert int(files[lo]) <= int(files[hi]), f"write {i} ({f}={v}) leaves {lo} > {hi}"


# ---------------------------------------------------------------- availability
def test_available_on_fake_orin(orin):
    assert JetsonSysfsController.why_unavailable(root=orin.root) is None
    ctl = make(orin, None, safety=False)
    assert ctl.layout.gpu_variant == f"jetpack{orin.jetpack}"
    assert ctl.layout.board.key == "orin-agx"
    assert [p for p, _ in ctl.layout.policies] == ["policy0", "policy4", "policy8"]
    assert ctl.current() == ORIN_AGX_MAXN  # MAXN with DVFS: the ceilings


def test_unavailable_reasons(tmp_path, orin5):
    (tmp_path / "empty").mkdir()
    assert "not a Linux sysfs tree" in JetsonSysfsController.why_unavailable(root=tmp_path / "empty")
    (tmp_path / "pc/sys/devices/system/cpu/cpu0").mkdir(parents=True)
    assert "no NVIDIA Jetson found" in JetsonSysfsController.why_unavailable(root=tmp_path / "pc")
    gpu = orin5.path(orin5.gpu_rel)
    (gpu / "max_freq").rename(gpu / "max_freq.gone")
    reason = JetsonSysfsController.why_unavailable(root=orin5.root)
    assert "no GPU devfreq" in reason and "17000000.ga10b" in reason and "17000000.gpu" in reason
    with pytest.raises(ControllerUnavailableError, match="no GPU devfreq"):
        get_controller("jetson", root=orin5.root)


def test_auto_picks_the_jetson(orin5, state_dir):
    ctl = get_controller("auto", root=orin5.root, state_dir=state_dir, handle_exit=False)
    assert isinstance(ctl, JetsonSysfsController)


# ---------------------------------------------------------------- writes land in the right files
def test_apply_writes_right_files_and_units(orin, state_dir):
    ctl = make(orin, state_dir)
    applied = ctl.apply("8c/1344/727/2133")
    assert applied.verified and applied.requested == applied.settled == FULCRUM_MIDPOINT
    assert applied.source == "measured"
    f = orin.knob_files()
    for pol in ("policy0", "policy4"):  # kHz, pinned min = max
        assert f[POLICY.format(pol, "min")] == f[POLICY.format(pol, "max")] == "1344000"
    # cluster 2 (cpu8-11) goes offline: its policy is inactive and left alone
    assert f[POLICY.format("policy8", "max")] == "2201600"
    gpu = f"sys/devices/{'17000000.ga10b/devfreq/17000000.ga10b' if orin.jetpack == 5 else 'platform/bus@0/17000000.gpu/devfreq/17000000.gpu'}"
    assert f[f"{gpu}/min_freq"] == f[f"{gpu}/max_freq"] == "726750000"  # Hz
    assert f[f"{EMC}/rate"] == "2133000000" and f[f"{EMC}/mrq_rate_locked"] == "1"  # Hz, locked
    assert [f[orin.online_rel(c)] for c in range(1, 12)] == ["1"] * 7 + ["0"] * 4
    assert orin.read("sys/devices/system/cpu/online") == "0-7"
    assert all(a.startswith("echo ") for a in applied.actions)
    assert len(applied.actions) == len(orin.writes())


def test_exact_write_sequence_from_maxn_to_midpoint(orin5, state_dir):
    ctl = make(orin5, state_dir)
    ctl.apply(FULCRUM_MIDPOINT)
    g = orin5.gpu_rel
    assert orin5.writes() == [
        (POLICY.format("policy0", "min"), "1344000"),  # lowering max: min first
        (POLICY.format("policy0", "max"), "1344000"),
        (POLICY.format("policy4", "min"), "1344000"),
        (POLICY.format("policy4", "max"), "1344000"),
        (f"{g}/min_freq", "726750000"),
        (f"{g}/max_freq", "726750000"),
        (f"{EMC}/mrq_rate_locked", "1"),
        (f"{EMC}/rate", "2133000000"),
        ("sys/devices/system/cpu/cpu11/online", "0"),  # cores offline last, highest first
        ("sys/devices/system/cpu/cpu10/online", "0"),
        ("sys/devices/system/cpu/cpu9/online", "0"),
        ("sys/devices/system/cpu/cpu8/online", "0"),
    ]


def test_raising_writes_max_before_min_and_cores_first(orin5, state_dir):
    ctl = make(orin5, state_dir)
    ctl.apply("4c/422/115/665")
    orin5.clear_writes()
    ctl.apply("12c/2201.6/1300.5/3199")
    w = orin5.writes()
    g = orin5.gpu_rel
    # cores 4..11 come online first, ascending, so the policies of clusters 1 and 2 are active again
    assert w[:8] == [(f"sys/devices/system/cpu/cpu{c}/online", "1") for c in range(4, 12)]
    assert w.index((POLICY.format("policy0", "max"), "2201600")) < w.index(
        (POLICY.format("policy0", "min"), "2201600")
    )
    assert w.index((f"{g}/max_freq", "1300500000")) < w.index((f"{g}/min_freq", "1300500000"))
    assert ctl.current() == ORIN_AGX_MAXN


def test_min_max_order_never_violated_over_a_tour(orin, state_dir):
    ctl = make(orin, state_dir)
    start = orin.knob_files()
    tour = [
        "4c/422/115/665",
        "12c/2201.6/1300.5/3199",
        "8c/1344/727/2133",
        "1c/115/115/204",
        "5c/1958/931/3199",
        "9c/729/319/665",
        "12c/1651/727/2133",
        None,
    ]
    total = 0
    for label in tour:
        before = orin.knob_files()
        orin.clear_writes()
        if label is None:
            ctl.restore()
        else:
            applied = ctl.apply(label)
            assert applied.verified, applied.mismatches
        check_sequence(orin, before, orin.writes())
        total += len(orin.writes())
    assert total > 50
    assert orin.knob_files() == start  # DVFS ranges and the unlocked EMC are back exactly


def test_fulcrum_space_on_the_board(orin5, state_dir):
    ctl = make(orin5, state_dir, space=fulcrum_space())
    assert ctl.space.size == 441
    assert ctl.apply("mid").settled == FULCRUM_MIDPOINT
    with pytest.raises(InvalidModeError, match="is not valid for fulcrum"):
        ctl.apply("8c/1190/727/2133")


def test_only_changed_files_are_written(orin5, state_dir):
    ctl = make(orin5, state_dir)
    ctl.apply(FULCRUM_MIDPOINT)
    orin5.clear_writes()
    ctl.apply(FULCRUM_MIDPOINT.replace(gpu_mhz=930.75))
    g = orin5.gpu_rel
    assert orin5.writes() == [(f"{g}/max_freq", "930750000"), (f"{g}/min_freq", "930750000")]
    assert ctl.plan(ctl.current()) == []


# ---------------------------------------------------------------- read-back
def test_read_back_detects_a_clamped_value(orin, state_dir):
    orin.clamp(orin.gpu_rel_file("max_freq"), 1236750000)  # a cap the board imposes
    ctl = make(orin, state_dir)
    ctl.apply("12c/2201.6/1134.75/3199")  # pin the GPU below the cap first: min = max = 1134.75
    with pytest.raises(ModeVerificationError) as exc:
        ctl.apply("12c/2201.6/1300.5/3199")
    msg = str(exc.value)
    assert "1300500000" in msg and "1236750000" in msg and "GPU max" in msg
    assert "GPU min: 1300500000 not written" in msg  # min never goes above the capped max
    applied = exc.value.applied
    assert applied.settled == PowerMode(12, 2201.6, 1236.75, 3199) and not applied.verified
    ctl.restore()
    assert ctl.current() == PowerMode(12, 2201.6, 1236.75, 3199)  # the cap still applies to the ceiling


def test_read_back_non_strict_reports_settled_values(orin5, state_dir):
    orin5.stick(orin5.online_rel(11))  # the board will not take cpu11 offline
    ctl = make(orin5, state_dir, strict=False)
    applied = ctl.apply("8c/1344/727/2133")
    assert not applied.verified
    assert applied.settled == PowerMode(9, 1344, 726.75, 2133)
    assert any("cpu11 offline" in m and "reads back '1'" in m for m in applied.mismatches)


def test_mode_not_offered_by_this_board(orin5, state_dir):
    from lightning_edge.devices import orin_agx_space

    orin5.set_file(orin5.gpu_rel_file("available_frequencies"), "114750000 1300500000")
    ctl = make(orin5, state_dir, space=orin_agx_space())  # the catalogue grid, not this image's
    with pytest.raises(InvalidModeError, match="GPU 726750000 Hz is not available on this board"):
        ctl.apply(FULCRUM_MIDPOINT)


# ---------------------------------------------------------------- permissions and dry runs
def test_permission_error_is_actionable(orin5, state_dir):
    ctl = make(orin5, state_dir)
    orin5.deny_writes()
    with pytest.raises(ModePermissionError) as exc:
        ctl.apply(FULCRUM_MIDPOINT)
    msg = str(exc.value)
    assert "permission denied" in msg and "root (sudo)" in msg and "udev rule" in msg
    assert "docs/power-modes.md" in msg and "scaling_min_freq" in msg
    assert isinstance(exc.value, PermissionError)
    orin5.deny_writes(False)
    ctl.restore()
    assert ctl.current() == ORIN_AGX_MAXN


def test_dry_run_prints_exact_writes_and_changes_nothing(orin, state_dir):
    out = io.StringIO()
    before = orin.knob_files()
    ctl = JetsonSysfsController(orin.root, writer=orin.writer(), state_dir=state_dir, dry_run=True, out=out)
    applied = ctl.apply("8c/1344/727/2133")
    assert applied.dry_run and applied.settled is None and not applied.verified
    printed = [ln for ln in out.getvalue().splitlines() if ln.startswith("echo ")]
    policy0 = orin.root / POLICY.format("policy0", "min")
    assert printed[0] == f"echo 1344000 > {policy0}"
    assert printed == list(applied.actions)
    assert f"echo 0 > {orin.root / orin.online_rel(8)}" in printed
    assert orin.knob_files() == before and orin.writes() == []
    assert not (state_dir / f"{ctl.device_id}.json").exists()
    assert ctl.restore() is None


# ---------------------------------------------------------------- restore
def test_context_manager_restores_even_on_error(orin, state_dir):
    before = orin.knob_files()
    with pytest.raises(RuntimeError, match="training blew up"):
        with make(orin, state_dir) as ctl:
            ctl.apply("4c/422/115/665")
            assert ctl.original == ORIN_AGX_MAXN and ctl.active
            raise RuntimeError("training blew up")
    assert orin.knob_files() == before
    assert not ctl.active and not (state_dir / f"{ctl.device_id}.json").exists()


def test_restore_reports_what_it_did(orin5, state_dir):
    ctl = make(orin5, state_dir)
    assert ctl.restore() is None  # nothing changed yet
    ctl.apply("4c/422/115/665")
    res = ctl.restore()
    assert res.settled == ORIN_AGX_MAXN and res.verified
    assert res.actions[0].endswith("cpu4/online")  # cores back first
    assert ctl.restore() is None


# ---------------------------------------------------------------- discovery (controllers/sysfs.py)
def test_discover_space_from_fake_board(orin):
    found = discover_space(orin.root)
    assert found == orin_agx_space()
    assert found.name == "orin-agx"


def test_discover_respects_board_lists(orin5):
    # an image whose GPU table is shorter: the board's list wins over the catalogue
    orin5.set_file(orin5.gpu_rel_file("available_frequencies"), "114750000 624750000 1300500000")
    orin5.set_file("sys/kernel/debug/bpmp/debug/clk/emc/possible_rates", "204000 665600 2133000 (kHz)")
    found = discover_space(orin5.root)
    assert found.gpu_mhz == (114.75, 624.75, 1300.5)
    assert found.mem_mhz == (204.0, 665.6, 2133.0)
