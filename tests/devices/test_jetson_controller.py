"""The Jetson sysfs controller on fake trees built from the catalogue: every family and layout (``jetson``: AGX Orin on
JetPack 5 and 6, AGX Orin 32GB, Orin NX, Orin Nano Super, Xavier NX on JetPack 4, AGX Xavier, Thor unconfirmed) and
the AGX Orin developer kit's exact figures (``orin``, ``orin5``).

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
from tests.fakes.jetson_sysfs import EMC, TREES

POLICY = "sys/devices/system/cpu/cpufreq/{}/scaling_{}_freq"


def make(board, state_dir, **kw) -> JetsonSysfsController:
    kw.setdefault("handle_exit", False)
    return JetsonSysfsController(board.root, writer=board.writer(), state_dir=state_dir, **kw)


def pairs(board) -> list[tuple[str, str]]:
    out = [(POLICY.format(p, "min"), POLICY.format(p, "max")) for p in board.clusters]
    out.append((board.gpu_rel_file("min_freq"), board.gpu_rel_file("max_freq")))
    if board.emc_kind == "devfreq":
        out.append((board.emc_rel_file("min_freq"), board.emc_rel_file("max_freq")))
    return out


def check_sequence(board, before: dict[str, str], writes: list[tuple[str, str]]) -> None:
    """Replay ``writes`` from ``before``: min <= max after every write, no write to an offline cluster,
    cores brought online before their cluster is written and taken offline after every frequency write."""
    files = dict(before)
    online = {c: files[board.online_rel(c)] == "1" for c in range(1, board.cpu_count)}
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
        for pol, cpus in board.clusters.items():
            if f.startswith(f"sys/devices/system/cpu/cpufreq/{pol}/"):
                assert any(online[c] for c in cpus), f"write {i}: {f} while its cluster is offline"
        for lo, hi in pairs(board):
            assert int(files[lo]) <= int(files[hi]), f"write {i} ({f}={v}) leaves {lo} > {hi}"


def boot_mode(board):
    """The mode the fake boots in (its uncapped mode with every core, else its default), in the board's grid."""
    from tests.fakes.jetson_sysfs import _boot_mode, firmware_of

    info = board.info
    named = _boot_mode(info.modes_of(firmware_of(info, board.jetpack)), info.cpu_count)
    return info.space().max_mode() if named is None or not named.known else named.mode(info.space())


def tour(space):
    """Modes that move every knob up and down, across cluster boundaries: lowest, highest, midpoint and mixes."""
    lo, hi, mid = space.min_mode(), space.max_mode(), space.midpoint()
    return [lo, hi, mid, hi.replace(cores=1), lo.replace(cores=hi.cores), mid.replace(gpu_mhz=hi.gpu_mhz),
            mid.replace(mem_mhz=lo.mem_mhz, cpu_mhz=hi.cpu_mhz), hi]


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


# ---------------------------------------------------------------- every family (issue 29): the trees of the catalogue
GPU_VARIANT = {"orin-agx-jp5": "jetpack5", "orin-agx-jp6": "jetpack6", "orin-agx-32gb-jp5": "jetpack5",
               "orin-nx-16gb-jp6": "jetpack6", "orin-nano-8gb-jp6": "jetpack6", "xavier-nx-jp4": "xavier",
               "xavier-agx-jp5": "xavier", "thor-jp7": "thor"}


def test_every_family_is_found_with_its_layout(jetson, state_dir):
    tree = next(t for t, kj in TREES.items() if kj == (jetson.key, jetson.jetpack))
    assert JetsonSysfsController.why_unavailable(root=jetson.root) is None
    ctl = make(jetson, state_dir, safety=False)
    L = ctl.layout
    assert L.board.key == jetson.key and L.jetpack == jetson.jetpack and L.gpu_variant == GPU_VARIANT[tree]
    assert dict(L.policies) == jetson.clusters and L.cpu_count == jetson.info.cpu_count
    assert L.emc_kind == ("devfreq" if jetson.key == "thor" else "bpmp")
    assert ctl.space == jetson.info.space() == discover_space(jetson.root)  # the tree's tables are the catalogue's
    assert ctl.current() == boot_mode(jetson)
    assert ctl.device_id.startswith(f"jetson-{jetson.key}-")


def test_every_family_apply_writes_the_right_files_in_the_kernels_units(jetson, state_dir):
    ctl = make(jetson, state_dir)
    before = jetson.knob_files()
    space = ctl.space
    first = next(iter(jetson.clusters.values()))
    khz, gpu, emc = space.cpu_mhz[len(space.cpu_mhz) // 2], space.gpu_mhz[0], space.mem_mhz[0]
    target = PowerMode(len(first), khz, gpu, emc)  # the first cluster only: every other one goes offline
    applied = ctl.apply(target)
    assert applied.verified and applied.settled == target and applied.source == "measured"
    f = jetson.knob_files()
    for pol, cpus in jetson.clusters.items():
        if cpus == first:  # kHz, pinned min = max
            assert f[POLICY.format(pol, "min")] == f[POLICY.format(pol, "max")] == str(round(khz * 1000))
        else:  # offline: its policy is inactive and left alone
            assert f[POLICY.format(pol, "max")] == before[POLICY.format(pol, "max")]
    assert f[jetson.gpu_rel_file("min_freq")] == f[jetson.gpu_rel_file("max_freq")] == str(round(gpu * 1e6))  # Hz
    if jetson.emc_kind == "devfreq":  # Thor's bwmgr: a min/max pair
        assert f[jetson.emc_rel_file("min_freq")] == f[jetson.emc_rel_file("max_freq")] == str(round(emc * 1e6))
    else:  # bpmp: locked at the rate
        assert f[jetson.emc_rel_file("rate")] == str(round(emc * 1e6)) and f[jetson.emc_rel_file("mrq_rate_locked")] == "1"
    assert [f[jetson.online_rel(c)] for c in range(1, jetson.cpu_count)] == [
        "1" if c < len(first) else "0" for c in range(1, jetson.cpu_count)]
    assert jetson.read("sys/devices/system/cpu/online") == (f"0-{len(first) - 1}" if len(first) > 1 else "0")
    assert len(applied.actions) == len(jetson.writes())


def test_every_family_min_max_order_is_never_violated_over_a_tour(jetson, state_dir):
    ctl = make(jetson, state_dir)
    start = jetson.knob_files()
    for mode in [*tour(ctl.space), None]:
        before = jetson.knob_files()
        jetson.clear_writes()
        if mode is None:
            ctl.restore()
        else:
            applied = ctl.apply(mode)
            assert applied.verified and applied.settled == mode, applied.mismatches
        check_sequence(jetson, before, jetson.writes())
    assert jetson.knob_files() == start  # every DVFS range, the cores and the memory clock are back exactly


def test_every_family_raises_max_before_min_and_brings_cores_up_first(jetson, state_dir):
    ctl = make(jetson, state_dir)
    lo, hi = ctl.space.min_mode(), ctl.space.max_mode()
    ctl.apply(lo)
    jetson.clear_writes()
    assert ctl.apply(hi).verified
    w = jetson.writes()
    ups = [(jetson.online_rel(c), "1") for c in range(1, jetson.cpu_count)]
    assert w[: len(ups)] == ups  # ascending, before anything else
    for lo_f, hi_f in pairs(jetson):
        if (hi_f, jetson.read(hi_f)) in w and (lo_f, jetson.read(lo_f)) in w and lo_f.endswith("min_freq"):
            assert w.index((hi_f, jetson.read(hi_f))) < w.index((lo_f, jetson.read(lo_f)))
    assert ctl.current() == hi


def test_every_family_writes_only_what_changes(jetson, state_dir):
    ctl = make(jetson, state_dir)
    mid = ctl.space.midpoint()
    ctl.apply(mid)
    jetson.clear_writes()
    assert ctl.plan(ctl.current()) == []
    other = next((g for g in ctl.space.gpu_mhz if g != mid.gpu_mhz), None)
    if other is None:  # a one-value GPU table (Thor's, unconfirmed): nothing to change
        return
    ctl.apply(mid.replace(gpu_mhz=other))
    assert sorted(jetson.writes()) == sorted([(jetson.gpu_rel_file("min_freq"), str(round(other * 1e6))),
                                             (jetson.gpu_rel_file("max_freq"), str(round(other * 1e6)))])


def test_every_family_reads_back_a_clamped_value(jetson, state_dir):
    gpus = jetson.info.gpu.values
    if len(gpus) < 3:
        pytest.skip("a GPU table of fewer than three values (Thor's, unconfirmed): nothing to clamp between")
    jetson.clamp(jetson.gpu_rel_file("max_freq"), gpus[-2])  # a cap the board imposes
    ctl = make(jetson, state_dir)
    hi = ctl.space.max_mode()
    ctl.apply(hi.replace(gpu_mhz=gpus[-3] / 1e6))
    with pytest.raises(ModeVerificationError) as exc:
        ctl.apply(hi)
    assert str(gpus[-1]) in str(exc.value) and str(gpus[-2]) in str(exc.value) and "GPU max" in str(exc.value)
    assert exc.value.applied.settled == hi.replace(gpu_mhz=gpus[-2] / 1e6)
    ctl.restore()


def test_every_family_permission_error_is_actionable_and_nothing_is_lost(jetson, state_dir):
    ctl = make(jetson, state_dir)
    before = jetson.knob_files()
    jetson.deny_writes()
    with pytest.raises(ModePermissionError, match="permission denied.*root \\(sudo\\)"):
        ctl.apply(ctl.space.midpoint())
    jetson.deny_writes(False)
    ctl.restore()
    assert jetson.knob_files() == before


def test_every_family_dry_run_prints_the_writes_and_changes_nothing(jetson, state_dir):
    out = io.StringIO()
    before = jetson.knob_files()
    ctl = JetsonSysfsController(jetson.root, writer=jetson.writer(), state_dir=state_dir, dry_run=True, out=out)
    applied = ctl.apply(ctl.space.min_mode())
    printed = [ln for ln in out.getvalue().splitlines() if ln.startswith("echo ")]
    assert printed and printed == list(applied.actions)
    assert all(str(jetson.root / "sys") in ln for ln in printed)
    assert jetson.knob_files() == before and jetson.writes() == []


def test_every_family_restores_after_an_error(jetson, state_dir):
    before = jetson.knob_files()
    with pytest.raises(RuntimeError, match="training blew up"):
        with make(jetson, state_dir) as ctl:
            ctl.apply(ctl.space.min_mode())
            raise RuntimeError("training blew up")
    assert jetson.knob_files() == before


def test_a_devfreq_directory_that_leads_out_of_sysfs_is_refused(orin5, tmp_path):
    """The GPU devfreq directory replaced by a link out of the tree's sys (what a user could build): not followed."""
    import shutil

    gpu = orin5.path(orin5.gpu_rel)
    outside = tmp_path / "elsewhere"
    shutil.copytree(gpu, outside)
    shutil.rmtree(gpu)
    gpu.symlink_to(outside)
    reason = JetsonSysfsController.why_unavailable(root=orin5.root)
    assert "outside" in reason and "refused" in reason


def test_thor_is_driven_through_its_devfreq_memory_clock(tmp_path, state_dir):
    """Thor (unconfirmed layout, jtop's paths): the GPC devfreq domain and bwmgr, a min/max pair, written like the
    GPU's; JetPack 7 from L4T R38."""
    from tests.fakes.jetson_sysfs import build_tree

    thor = build_tree(tmp_path / "thor", "thor-jp7")
    ctl = make(thor, state_dir)
    assert ctl.layout.jetpack == 7 and ctl.layout.gpu_dir == thor.root / "sys/class/devfreq/gpu-gpc-0"
    assert ctl.layout.emc_dir == thor.root / "sys/class/devfreq/bwmgr" and ctl.layout.emc_cap is None
    raw = ctl.read_raw()
    assert raw["emc"] == {"min_hz": 4266000000, "max_hz": 4266000000}
    assert ctl.apply("4c/2600/1575/4266").verified
    assert ctl.restore().verified


def test_jetpack6_gpu_found_where_nvpmodel_writes_it(tmp_path, state_dir):
    """The Super files' MAX_FREQ_KNEXT directory (platform/17000000.gpu/devfreq_dev) is the last Orin candidate."""
    import shutil

    from tests.fakes.jetson_sysfs import build_tree

    board = build_tree(tmp_path / "nano", "orin-nano-8gb-jp6")
    knext = board.path("sys/devices/platform/17000000.gpu/devfreq_dev")
    knext.parent.mkdir(parents=True)
    shutil.move(str(board.path(board.gpu_rel)), knext)
    ctl = JetsonSysfsController(board.root, state_dir=state_dir, handle_exit=False, safety=False)
    assert ctl.layout.gpu_variant == "jetpack6-nvpmodel" and ctl.layout.gpu_dir == knext
    assert ctl.space == board.info.space()
