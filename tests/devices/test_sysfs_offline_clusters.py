"""Clusters whose cores are all offline (issue 25, item 3), on fake Orin AGX trees and on every family's tree (issue
29: the same kernel behaviour on each, ``jetson``).

The policy of such a cluster is inactive: mainline kernels since 2022 answer EBUSY to every read and write of its
files, and keep its min/max for when a core of the cluster comes back. The fake board's writer plays exactly that,
so a controller that reads or writes an inactive policy fails here as it would on the board.
"""

from __future__ import annotations

import errno
import os
import shlex
import subprocess

import pytest

from lightning_edge.cli.mode import main
from lightning_edge.devices import JetsonSysfsController, NvpmodelController, PowerMode, orin_agx_space
from tests.fakes.nvpmodel import install_fake_nvpmodel


def offline_cluster(board, pol: str) -> None:
    """Take every core of ``pol``'s cluster offline, as ``echo 0 > .../cpuN/online`` would (not a logged write)."""
    w = board.writer()
    for c in sorted(board.clusters[pol], reverse=True):
        if c:
            w.write(board.path(board.online_rel(c)), "0")
    board.clear_writes()


def make(board, state_dir, **kw) -> JetsonSysfsController:
    kw.setdefault("handle_exit", False)
    return JetsonSysfsController(board.root, writer=board.writer(), state_dir=state_dir, **kw)


# ---------------------------------------------------------------- the fake plays the kernel
def test_the_fake_kernel_refuses_every_file_of_an_inactive_policy(orin5):
    w = orin5.writer()
    offline_cluster(orin5, "policy8")
    for rel in (
        orin5.policy_rel("policy8", "scaling_max_freq"),
        orin5.policy_rel("policy8", "scaling_available_frequencies"),
        orin5.policy_rel("policy8", "related_cpus"),
        "sys/devices/system/cpu/cpu9/cpufreq/scaling_min_freq",  # the same policy, through the cpu's link
    ):
        with pytest.raises(OSError) as exc:
            w.read(orin5.path(rel))
        assert exc.value.errno == errno.EBUSY, rel
    with pytest.raises(OSError) as exc:
        w.write(orin5.path(orin5.policy_rel("policy8", "scaling_min_freq")), "1344000")
    assert exc.value.errno == errno.EBUSY
    assert w.read(orin5.path(orin5.policy_rel("policy4", "scaling_max_freq"))) == "2201600"  # its cluster is up
    w.write(orin5.path(orin5.online_rel(10)), "1")  # one core is enough to make the policy active again
    assert w.read(orin5.path(orin5.policy_rel("policy8", "scaling_min_freq"))) == "115200"  # its limits were kept


# ---------------------------------------------------------------- reading
def test_a_board_with_a_cluster_offline_is_read(orin, state_dir):
    offline_cluster(orin, "policy8")
    ctl = make(orin, state_dir)  # reads the frequency tables: not the inactive policy's
    assert ctl.space == orin_agx_space()
    assert ctl.current() == PowerMode(8, 2201.6, 1300.5, 3199)
    offline_cluster(orin, "policy4")
    assert ctl.current() == PowerMode(4, 2201.6, 1300.5, 3199)


# ---------------------------------------------------------------- restoring every cluster's DVFS range
@pytest.mark.parametrize(
    "tour",
    [
        ["12c/1344/727/2133"],  # the cluster is online at restore time, its range pinned (seen: 1344000/1344000)
        ["12c/1344/727/2133", "8c/1344/727/2133"],  # offline again at restore time, the pinned range kept by the kernel
        ["12c/1344/727/2133", "4c/422/115/665"],  # two clusters offline at restore time
        ["4c/422/115/665", "12c/1958/931/3199", "1c/115/115/204"],
    ],
    ids=["online-at-restore", "offline-at-restore", "two-offline-at-restore", "tour"],
)
def test_restore_brings_back_a_range_found_while_its_cluster_was_offline(orin, state_dir, tour):
    offline_cluster(orin, "policy8")
    before = orin.knob_files()
    ctl = make(orin, state_dir)
    for label in tour:
        assert ctl.apply(label).verified
    assert orin.read(orin.policy_rel("policy8", "scaling_max_freq")) != "2201600"  # the session pinned it
    orin.clear_writes()
    res = ctl.restore()
    assert res.verified and res.settled == PowerMode(8, 2201.6, 1300.5, 3199)
    assert orin.knob_files() == before  # 115200/2201600, and cpu8-11 offline again
    w = orin.writes()
    pol8 = [i for i, (f, _) in enumerate(w) if "/policy8/" in f]
    ups = [i for i, (f, v) in enumerate(w) if f.endswith("/online") and v == "1"]
    downs = [i for i, (f, v) in enumerate(w) if f.endswith("/online") and v == "0"]
    assert pol8 and downs and all(i < pol8[0] for i in ups) and pol8[-1] < downs[0]  # cores up, range, cores down


@pytest.mark.parametrize("mode", ["8c/1344/727/2133", "4c/422/115/665", "1c/115/115/204"])
def test_restore_from_a_mode_with_clusters_offline(orin, state_dir, mode):
    before = orin.knob_files()  # MAXN, every cluster online with its DVFS range open
    ctl = make(orin, state_dir)
    ctl.apply("12c/1344/727/2133")  # pin every cluster...
    assert ctl.apply(mode).verified  # ...then take some offline: their policies keep the pinned range
    res = ctl.restore()
    assert res.verified and orin.knob_files() == before


# Child: applies a mode through a writer that stops (forever) before its first write of a file named pause_at,
# after writing a marker; the parent SIGKILLs it there.
CHILD_DIES_MID_CHANGE = r"""
import os, sys, time
from pathlib import Path
from tests.fakes.jetson_sysfs import FakeJetson, FakeBoardWriter
from lightning_edge.devices import JetsonSysfsController

root, state_dir, marker, mode, pause_at = sys.argv[1:6]

class SlowWriter(FakeBoardWriter):
    def write(self, path, value):
        if Path(path).name == pause_at:
            Path(marker).write_text(str(os.getpid()))
            time.sleep(120)
        super().write(path, value)

JetsonSysfsController(root, writer=SlowWriter(FakeJetson.open(root)), state_dir=state_dir).apply(mode)
"""


def test_a_range_read_when_its_cluster_came_online_is_on_disk_before_it_is_written(
    orin5, state_dir, tmp_path, spawn, wait
):
    """A process killed after pinning a cluster it brought online: the next start puts back its range."""
    offline_cluster(orin5, "policy8")
    before = orin5.knob_files()
    marker = tmp_path / "paused"
    child = spawn(CHILD_DIES_MID_CHANGE, orin5.root, state_dir, marker, "12c/1344/727/2133", "min_freq")
    wait(marker, child)  # every cluster is pinned, the GPU is next
    assert orin5.read(orin5.policy_rel("policy8", "scaling_max_freq")) == "1344000"
    child.kill()
    child.wait(timeout=30)
    ctl = make(orin5, state_dir)
    assert ctl.recovered is not None and ctl.recovered.verified
    assert orin5.knob_files() == before


# ---------------------------------------------------------------- the command line
def test_mode_show_set_and_the_printed_restore_with_clusters_offline(capsys, orin, state_dir):
    offline_cluster(orin, "policy8")
    before = orin.knob_files()
    common = ["--device", "jetson", "--state-dir", str(state_dir)]

    def run(argv: list[str]) -> str:
        rc = main(argv, root=orin.root, writer=orin.writer())
        out, err = capsys.readouterr()
        assert rc == 0, err
        return out

    def cli(*argv: str) -> str:
        return run([*argv, *common])

    assert "mode:   8c/2201.6/1300.5/3199" in cli("show")
    out = cli("set", "12c/1344/727/2133")
    undo = shlex.split(out.split("undo with: ", 1)[1].strip())
    cli("set", "4c/422/115/665")  # a second `mode set`: the original recorded by the first one is kept
    out = cli("show")
    assert "mode:   4c/" in out and "original mode 8c/2201.6/1300.5/3199" in out
    dry = cli("restore", "--dry-run")
    assert f"echo 1 > {orin.root / orin.online_rel(8)}" in dry  # a core of cluster 2 comes up for its policy...
    assert f"echo 0 > {orin.root / orin.online_rel(8)}" in dry  # ...and goes down again
    assert undo[undo.index("restore") - 2 :][:2] == ["lightning-edge", "mode"]
    assert "restored 8c/2201.6/1300.5/3199" in run(undo[undo.index("restore") :])  # the printed command
    assert orin.knob_files() == before
    assert "mode:   8c/2201.6/1300.5/3199" in cli("show")


# ---------------------------------------------------------------- the nvpmodel controller
def test_nvpmodel_controller_with_a_cluster_offline(orin5, tmp_path, monkeypatch, state_dir):
    bin_dir = tmp_path / "bin"
    exe = install_fake_nvpmodel(bin_dir, orin5, reboot_on_core_change=False)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    subprocess.run([str(exe), "-m", "2"], check=True, capture_output=True)  # MODE_30W: cpu8-11 offline
    orin5.clear_writes()
    before = orin5.knob_files()
    ctl = NvpmodelController(orin5.root, writer=orin5.writer(), state_dir=state_dir, handle_exit=False)
    # nvpmodel_p3701_0000.conf: MODE_30W caps the GPU at 612 MHz, not a value of the table: devfreq reads the cap
    assert ctl.current() == PowerMode(8, 1728, 612, 3199)
    assert ctl.apply("8c/1344/727/2133").verified  # same core mask: no reboot
    res = ctl.restore()
    assert res.settled == PowerMode(8, 1728, 612, 3199) and not res.mismatches
    assert orin5.knob_files() == before


# ---------------------------------------------------------------- every family (issue 29)
def _last(board) -> str:
    """The last cluster (the one a mode with fewer cores takes offline first)."""
    return list(board.clusters)[-1]


def test_every_family_the_fake_kernel_refuses_an_inactive_policy(jetson):
    pol = _last(jetson)
    cpus = jetson.clusters[pol]
    limits = (jetson.read(jetson.policy_rel(pol, "scaling_min_freq")),
              jetson.read(jetson.policy_rel(pol, "scaling_max_freq")))
    offline_cluster(jetson, pol)
    w = jetson.writer()
    for rel in (jetson.policy_rel(pol, "scaling_max_freq"), jetson.policy_rel(pol, "related_cpus"),
                f"sys/devices/system/cpu/cpu{cpus[-1]}/cpufreq/scaling_min_freq"):
        with pytest.raises(OSError) as exc:
            w.read(jetson.path(rel))
        assert exc.value.errno == errno.EBUSY, rel
    with pytest.raises(OSError) as exc:
        w.write(jetson.path(jetson.policy_rel(pol, "scaling_min_freq")), limits[0])
    assert exc.value.errno == errno.EBUSY
    w.write(jetson.path(jetson.online_rel(cpus[-1])), "1")  # one core is enough to make the policy active again
    assert (w.read(jetson.path(jetson.policy_rel(pol, "scaling_min_freq"))),
            w.read(jetson.path(jetson.policy_rel(pol, "scaling_max_freq")))) == limits  # its limits were kept


def test_every_family_with_a_cluster_offline_is_read(jetson, state_dir):
    pol = _last(jetson)
    offline_cluster(jetson, pol)
    ctl = make(jetson, state_dir)  # reads the frequency tables: not the inactive policy's
    assert ctl.space == jetson.info.space()
    assert ctl.current().cores == jetson.cpu_count - len(jetson.clusters[pol])


@pytest.mark.parametrize("steps", ["online-at-restore", "offline-at-restore", "tour"])
def test_every_family_restores_a_range_found_while_its_cluster_was_offline(jetson, state_dir, steps):
    pol = _last(jetson)
    offline_cluster(jetson, pol)
    before = jetson.knob_files()
    ctl = make(jetson, state_dir)
    space = ctl.space
    pinned = space.max_mode().replace(cpu_mhz=space.cpu_mhz[len(space.cpu_mhz) // 2])  # every cluster online, pinned
    fewer = pinned.replace(cores=jetson.cpu_count - len(jetson.clusters[pol]))
    tour = {"online-at-restore": [pinned], "offline-at-restore": [pinned, fewer],
            "tour": [space.min_mode(), space.max_mode(), space.min_mode().replace(cores=1)]}[steps]
    for mode in tour:
        assert ctl.apply(mode).verified
    jetson.clear_writes()
    res = ctl.restore()
    assert res.verified and jetson.knob_files() == before
    w = jetson.writes()
    mine = [i for i, (f, _) in enumerate(w) if f"/{pol}/" in f]
    downs = [i for i, (f, v) in enumerate(w) if f.endswith("/online") and v == "0"]
    if mine and downs:
        assert mine[-1] < downs[0]  # the range is written while its cluster is online, before cores go down


def test_every_family_nvpmodel_controller_with_a_cluster_offline(jetson_conf, tmp_path, monkeypatch, state_dir):
    """A named mode that takes cores offline (nvpmodel -m), then a custom mode with the same core mask, then back."""
    from tests.fakes.jetson_sysfs import conf_models

    board = jetson_conf
    bin_dir = tmp_path / "bin"
    exe = install_fake_nvpmodel(bin_dir, board, reboot_on_core_change=False)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    models = conf_models(board.path("etc/nvpmodel.conf").read_text())
    fewest = min(models, key=lambda i: sum(v == "1" for (p, _), v in models[i]["set"].items() if p == "CPU_ONLINE"))
    if all(v == "1" for (p, _), v in models[fewest]["set"].items() if p == "CPU_ONLINE"):
        pytest.skip(f"no named mode of {board.key} on JetPack {board.jetpack} takes a core offline")
    subprocess.run([str(exe), "-m", str(fewest)], check=True, capture_output=True)
    board.clear_writes()
    before = board.knob_files()
    ctl = NvpmodelController(board.root, writer=board.writer(), state_dir=state_dir, handle_exit=False)
    now = ctl.current()
    assert now.cores < board.cpu_count
    target = ctl.space.nearest(now.replace(gpu_mhz=ctl.space.gpu_mhz[0]))  # same core mask: no reboot
    assert ctl.apply(target).verified
    res = ctl.restore()
    assert res.settled == now and not res.mismatches
    assert board.knob_files() == before
