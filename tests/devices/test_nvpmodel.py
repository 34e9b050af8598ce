"""The nvpmodel path: a custom POWER_MODEL block and `nvpmodel -m`, with a fake nvpmodel on PATH."""

from __future__ import annotations

import io

import pytest

from lightning_edge.devices import (
    ORIN_AGX_MAXN,
    NvpmodelController,
    PowerMode,
    RebootRequiredError,
    get_controller,
)
from lightning_edge.devices.controllers.nvpmodel import (
    BEGIN_MARK,
    END_MARK,
    insert_custom_block,
    parse_power_models,
    strip_custom_block,
)
from tests.fakes.jetson_sysfs import nvpmodel_conf
from tests.fakes.nvpmodel import install_fake_nvpmodel, nvpmodel_calls


@pytest.fixture
def fake_nvpmodel(orin5, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    install_fake_nvpmodel(bin_dir, orin5)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    return bin_dir


def make(board, state_dir, **kw) -> NvpmodelController:
    kw.setdefault("handle_exit", False)
    return NvpmodelController(board.root, writer=board.writer(), state_dir=state_dir, **kw)


def test_conf_parsing_and_block_insertion():
    text = nvpmodel_conf(5)
    blocks = parse_power_models(text)
    assert [(b.id, b.name) for b in blocks] == [
        (0, "MAXN"),
        (1, "MODE_15W"),
        (2, "MODE_30W"),
        (3, "MODE_50W"),
    ]
    assert blocks[1].settings()[("CPU_ONLINE", "CORE_4")] == "0"
    assert blocks[0].settings()[("EMC", "MAX_FREQ")] == "0"
    new = insert_custom_block(text, "< POWER_MODEL ID=4 NAME=x >\nGPU MAX_FREQ 1\n")
    assert (
        new.index(BEGIN_MARK)
        < new.index("< POWER_MODEL ID=4")
        < new.index(END_MARK)
        < new.index("< PM_CONFIG")
    )
    assert [b.id for b in parse_power_models(new)] == [0, 1, 2, 3, 4]
    again = insert_custom_block(new, "< POWER_MODEL ID=4 NAME=y >\n")  # replaces, never stacks
    assert again.count(BEGIN_MARK) == 1 and "NAME=y" in again and "NAME=x" not in again
    assert strip_custom_block(again) == text


def test_apply_writes_block_runs_nvpmodel_and_restores(orin5, fake_nvpmodel, state_dir):
    conf = orin5.path("etc/nvpmodel.conf")
    original_text = conf.read_text()
    before = orin5.knob_files()
    ctl = make(orin5, state_dir)
    assert ctl.current() == ORIN_AGX_MAXN
    applied = ctl.apply("12c/1344/727/2133")  # same core mask: no reboot
    assert applied.verified and applied.settled == PowerMode(12, 1344, 726.75, 2133)

    text = conf.read_text()
    block = next(b for b in parse_power_models(text) if b.id == 4)
    assert block.name == "lightning_edge_12c_1344_726_2133"
    s = block.settings()
    for i in range(3):
        assert s[(f"CPU_A78_{i}", "MIN_FREQ")] == s[(f"CPU_A78_{i}", "MAX_FREQ")] == "1344000"  # kHz
    assert s[("GPU", "MIN_FREQ")] == s[("GPU", "MAX_FREQ")] == "726750000"  # Hz
    assert s[("EMC", "MAX_FREQ")] == "2133000000"
    assert all(s[("CPU_ONLINE", f"CORE_{i}")] == "1" for i in range(12))
    assert s[("DLA0_CORE", "MAX_FREQ")] == "-1" and s[("TPC_POWER_GATING", "TPC_PG_MASK")] == "0"  # copied
    assert ["-f", str(conf), "-m", "4"] in [c["argv"] for c in nvpmodel_calls(fake_nvpmodel)]

    res = ctl.restore()
    assert res.settled == ORIN_AGX_MAXN and not res.mismatches
    assert nvpmodel_calls(fake_nvpmodel)[-1]["argv"] == ["-f", str(conf), "-m", "0"]
    assert conf.read_text() == original_text  # byte for byte
    assert orin5.knob_files() == before


def test_core_mask_change_needing_reboot_is_refused_and_explained(orin5, fake_nvpmodel, state_dir):
    conf = orin5.path("etc/nvpmodel.conf")
    original_text = conf.read_text()
    ctl = make(orin5, state_dir)
    with pytest.raises(RebootRequiredError) as exc:
        ctl.apply("8c/1344/727/2133")
    msg = str(exc.value)
    assert "needs a reboot" in msg and "core mask changes (0xfff -> 0xff)" in msg
    assert "never reboots" in msg and "--device jetson" in msg and "Reboot required" in msg
    calls = nvpmodel_calls(fake_nvpmodel)
    assert calls[-2]["argv"][-2:] == ["-m", "4"] and calls[-2]["answer"] == "NO"  # we said no
    assert calls[-1]["argv"][-2:] == ["-m", "0"]  # and un-staged it for the next boot
    assert orin5.read("var/lib/nvpmodel/status").startswith("pmode:0000")
    assert conf.read_text() == original_text
    assert ctl.current() == ORIN_AGX_MAXN
    ctl.restore()


def test_core_change_without_reboot_prompt(orin5, tmp_path, monkeypatch, state_dir):
    bin_dir = tmp_path / "bin2"
    install_fake_nvpmodel(bin_dir, orin5, reboot_on_core_change=False)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    ctl = make(orin5, state_dir)
    assert ctl.apply("4c/422/115/665").verified
    assert ctl.reboot_caveat and "core mask" in ctl.reboot_caveat
    assert orin5.read("sys/devices/system/cpu/cpu4/online") == "0"
    ctl.restore()
    assert ctl.current() == ORIN_AGX_MAXN


def test_dry_run_prints_block_and_command(orin5, fake_nvpmodel, state_dir):
    conf = orin5.path("etc/nvpmodel.conf")
    original_text = conf.read_text()
    out = io.StringIO()
    ctl = make(orin5, state_dir, dry_run=True, out=out)
    applied = ctl.apply("12c/1344/727/2133")
    text = out.getvalue()
    assert "< POWER_MODEL ID=4 NAME=lightning_edge_12c_1344_726_2133 >" in text
    assert f"nvpmodel -f {conf} -m 4" in text and applied.dry_run
    assert conf.read_text() == original_text
    assert all("-q" in c["argv"] for c in nvpmodel_calls(fake_nvpmodel))  # only queries ran


def test_unavailable_without_nvpmodel(orin5, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    reason = NvpmodelController.why_unavailable(root=orin5.root)
    assert "not on PATH" in reason and "nvidia-l4t-nvpmodel" in reason
    with pytest.raises(Exception, match="--device nvpmodel"):
        get_controller("nvpmodel", root=orin5.root)


def test_factory_builds_nvpmodel(orin5, fake_nvpmodel, state_dir):
    ctl = get_controller("jetson:nvpmodel", root=orin5.root, state_dir=state_dir, handle_exit=False)
    assert isinstance(ctl, NvpmodelController) and ctl.current() == ORIN_AGX_MAXN


def test_any_controller_recovers_the_others_leftover(orin5, fake_nvpmodel, state_dir):
    """One board, one state file: a leftover of the nvpmodel controller is restored by the sysfs one."""
    from lightning_edge.devices import JetsonSysfsController

    conf = orin5.path("etc/nvpmodel.conf")
    original_text, before = conf.read_text(), orin5.knob_files()
    a = make(orin5, state_dir)
    a.apply("12c/1344/727/2133")
    a._safety.lock.release()  # as if the process had died: the kernel drops its lock
    a._session = None
    b = JetsonSysfsController(orin5.root, writer=orin5.writer(), state_dir=state_dir, handle_exit=False)
    assert b.recovered.settled == ORIN_AGX_MAXN
    assert conf.read_text() == original_text and orin5.knob_files() == before
    assert nvpmodel_calls(fake_nvpmodel)[-1]["argv"][-2:] == ["-m", "0"]

    c = JetsonSysfsController(orin5.root, writer=orin5.writer(), state_dir=state_dir, handle_exit=False)
    c.apply("4c/422/115/665")
    c._safety.lock.release()
    c._session = None
    d = make(orin5, state_dir)  # and the other way round
    assert d.recovered.settled == ORIN_AGX_MAXN and orin5.knob_files() == before


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() != 0, reason="needs root")
def test_root_restores_its_own_nvpmodel_snapshot_from_a_users_state_dir(orin5, fake_nvpmodel, tmp_path, monkeypatch):
    """``sudo -E`` with the user's state dir: the conf text root itself read at start was refused at restore (it
    is not taken from a file there, it is this process's own snapshot), leaving the board's nvpmodel.conf edited."""
    import os

    d = tmp_path / "user-state"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    monkeypatch.setenv("SUDO_UID", "65534")
    conf = orin5.path("etc/nvpmodel.conf")
    original_text = conf.read_text()
    ctl = make(orin5, d)
    ctl.apply("12c/1344/727/2133")
    res = ctl.restore()
    assert res.settled == ORIN_AGX_MAXN
    assert conf.read_text() == original_text


# ---------------------------------------------------------------- every family with a known nvpmodel.conf (issue 29)
@pytest.fixture
def nvpmodel_on(jetson_conf, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    install_fake_nvpmodel(bin_dir, jetson_conf)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    return bin_dir


def test_every_family_named_modes_are_read_from_the_boards_conf(jetson_conf, state_dir):
    """The board's own nvpmodel.conf names its modes (what runs on it wins over the catalogue's)."""
    from tests.fakes.jetson_sysfs import firmware_of

    ctl = make(jetson_conf, state_dir)
    info = jetson_conf.info
    expected = info.modes_of(firmware_of(info, jetson_conf.jetpack))
    got = ctl.named_modes
    assert [(m.name, m.cores, m.cpu_khz, m.gpu_hz, m.emc_hz) for m in got] == [
        (m.name, m.cores, m.cpu_khz, m.gpu_hz, m.emc_hz) for m in expected]
    assert all("this board's" in m.source.cite and m.firmware == "this board" for m in got)
    jetson_conf.path("etc/nvpmodel.conf").unlink()  # no conf on the board: the catalogue's, both firmwares
    assert ctl.named_modes == info.named_modes


def test_every_family_apply_writes_a_block_runs_nvpmodel_and_restores(jetson_conf, nvpmodel_on, state_dir):
    board = jetson_conf
    conf = board.path("etc/nvpmodel.conf")
    original_text, before = conf.read_text(), board.knob_files()
    ctl = make(board, state_dir)
    now = ctl.current()
    target = now.replace(cpu_mhz=ctl.space.cpu_mhz[0], gpu_mhz=ctl.space.gpu_mhz[0])  # same core mask: no reboot
    applied = ctl.apply(target)
    assert applied.verified and applied.settled == target
    blocks = parse_power_models(conf.read_text())
    block = next(b for b in blocks if b.name.startswith("lightning_edge_"))
    assert block.id == max(b.id for b in blocks)
    s = block.settings()
    for name in board.info.nvpmodel_clusters[: len(board.clusters)]:  # the conf's own cluster names, pinned in kHz
        assert s[(name, "MIN_FREQ")] == s[(name, "MAX_FREQ")] == str(round(target.cpu_mhz * 1000))
    assert s[("GPU", "MIN_FREQ")] == s[("GPU", "MAX_FREQ")] == str(round(target.gpu_mhz * 1e6))
    assert s[("EMC", "MAX_FREQ")] == str(round(target.mem_mhz * 1e6))
    res = ctl.restore()
    assert res.settled == now and not res.mismatches
    assert conf.read_text() == original_text and board.knob_files() == before


def test_every_family_core_mask_change_needing_reboot_is_refused(jetson_conf, nvpmodel_on, state_dir):
    board = jetson_conf
    original_text = board.path("etc/nvpmodel.conf").read_text()
    ctl = make(board, state_dir)
    now = ctl.current()
    with pytest.raises(RebootRequiredError, match="core mask changes"):
        ctl.apply(now.replace(cores=1))
    assert board.path("etc/nvpmodel.conf").read_text() == original_text and ctl.current() == now
    ctl.restore()


def test_named_modes_of_a_conf_check_every_value():
    from lightning_edge.catalog import Source
    from lightning_edge.devices.controllers.nvpmodel import named_modes_of_conf

    text = ("< POWER_MODEL ID=0 NAME=A >\nCPU_ONLINE CORE_0 1\nCPU_ONLINE CORE_1 0\nCPU_A78_0 MAX_FREQ 2147483647\n"
            "GPU MAX_FREQ garbage\nEMC MAX_FREQ 3199000000\n< POWER_MODEL ID=3 NAME=B >\nCPU_A78_0 MAX_FREQ 1497600\n"
            "CPU_A78_1 MAX_FREQ -1\nGPU MAX_FREQ 612000000\nEMC MAX_FREQ 0\n< PM_CONFIG DEFAULT=3 >\n")
    a, b = named_modes_of_conf(text, Source("x", True))
    assert (a.cores, a.cpu_khz, a.gpu_hz, a.emc_hz, a.default) == (1, None, None, 3199000000, False)
    # a cluster without a cap leaves the CPU uncapped; no CPU_ONLINE line: the cores are not the mode's to say
    assert (b.cores, b.cpu_khz, b.gpu_hz, b.emc_hz, b.default) == (None, None, 612000000, None, True)


def test_a_conf_that_is_not_a_regular_file_or_too_large_is_not_read(orin5, state_dir):
    """A FIFO in place of nvpmodel.conf must not hang ``mode list``; an oversized file is not read: the catalogue's
    named modes are shown instead."""
    import os

    from lightning_edge.devices import JetsonSysfsController

    ctl = JetsonSysfsController(orin5.root, writer=orin5.writer(), state_dir=state_dir, handle_exit=False)
    conf = orin5.path("etc/nvpmodel.conf")
    conf.unlink()
    os.mkfifo(conf)
    assert ctl.named_modes == orin5.info.named_modes
    conf.unlink()
    conf.write_text("#" * (2 << 20))
    assert ctl.named_modes == orin5.info.named_modes
