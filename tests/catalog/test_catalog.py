"""The board catalogue (issue 29, item 1): one entry per module, every fact with its source beside it.

The expected figures below are the boards' own files, read for this test (not the catalogue's code): NVIDIA's
nvpmodel .conf files as copied in LineageOS/android_device_nvidia_concord (JetPack 5 at 640733e, "Super" at
370b63a), the papers' grid (docs/twin-targets.md), and, marked unconfirmed, the secondary sources named in
docs/boards.md.
"""

from __future__ import annotations

import re

import pytest

from lightning_edge import catalog
from lightning_edge.modes import PowerMode

KEYS = ("orin-agx", "orin-agx-32gb", "orin-agx-64gb", "orin-nx-16gb", "orin-nx-8gb", "orin-nano-8gb",
        "orin-nano-4gb", "xavier-nx", "xavier-agx", "thor")

# key: (cores, CPU max MHz, GPU max MHz, EMC max MHz)
MAXIMA = {
    "orin-agx": (12, 2201.6, 1300.5, 3199.0),
    "orin-agx-32gb": (8, 2201.6, 930.75, 3199.0),
    "orin-agx-64gb": (12, 2201.6, 1300.5, 3199.0),
    "orin-nx-16gb": (8, 1984.0, 1173.0, 3199.0),
    "orin-nx-8gb": (6, 1984.0, 1173.0, 3199.0),
    "orin-nano-8gb": (6, 1728.0, 1020.0, 3199.0),
    "orin-nano-4gb": (6, 1728.0, 1020.0, 3199.0),
    "xavier-nx": (6, 1907.2, 1109.25, 1866.0),
    "xavier-agx": (8, 2265.6, 1377.0, 2133.0),
    "thor": (14, 2600.0, 1575.0, 4266.0),
}


def test_every_module_of_the_issue_is_catalogued():
    assert set(KEYS) <= set(catalog.BOARDS)
    with pytest.raises(ValueError, match=r"unknown board 'orin-nano': known are orin-agx, .*thor"):
        catalog.board_info("orin-nano")


@pytest.mark.parametrize("key", KEYS)
def test_the_mode_space_is_as_the_files_say(key):
    info = catalog.board_info(key)
    space = info.space()
    cores, cpu, gpu, emc = MAXIMA[key]
    assert space.values("cores") == tuple(range(1, cores + 1))
    assert space.max_mode() == PowerMode(cores, cpu, gpu, emc)
    assert info.cpu_count == cores
    if key != "thor":  # Thor's cluster layout is documented nowhere: unknown
        assert sum(len(c) for c in info.clusters) == cores


def test_the_seeds_board_is_kept_exactly():
    info = catalog.board_info("orin-agx")
    assert info.module == "p3701-0000"
    assert info.space() == catalog.orin_agx_space() and info.space().size == 18_096
    assert info.space().max_mode() == catalog.ORIN_AGX_MAXN == PowerMode(12, 2201.6, 1300.5, 3199)
    assert info.clusters == ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11))
    assert all(t.source.confirmed for t in (info.cpu, info.gpu, info.emc))


@pytest.mark.parametrize("key", KEYS)
def test_every_fact_has_its_source(key):
    info = catalog.board_info(key)
    facts = info.facts()
    assert {"cores", "clusters", "cpu", "gpu", "emc", "named_modes", "rails", "layout", "max_power"} <= set(facts)
    for what, src in facts.items():
        assert src.cite.strip(), f"{key}.{what} has no source"
        if src.confirmed:  # a confirmed fact names the file it was read from and where (a commit, or the twin targets (docs/twin-targets.md))
            assert re.search(r"@[0-9a-f]{7,40}\b|docs/twin-targets\.md", src.cite), (key, what, src.cite)
    for m in info.named_modes:
        assert m.source.cite.strip()


def test_thor_is_unconfirmed_throughout():
    thor = catalog.board_info("thor")
    assert not thor.confirmed
    assert not any(src.confirmed for what, src in thor.facts().items() if what != "compatible")
    assert thor.clusters == ()  # unknown
    assert "unconfirmed" in thor.name.lower()


def test_confirmed_and_unconfirmed_are_told_apart():
    agx32 = catalog.board_info("orin-agx-32gb")
    f = agx32.facts()
    assert f["cores"].confirmed and f["clusters"].confirmed and f["named_modes"].confirmed  # its nvpmodel.conf
    assert not f["gpu"].confirmed  # "about 930 MHz": the devfreq table was not read from a file
    nx = catalog.board_info("orin-nx-16gb").facts()
    assert nx["named_modes"].confirmed and not nx["cpu"].confirmed


# ---------------------------------------------------------------- nvpmodel named modes (caps as in the .conf files)
def _mode(key, name, firmware=None):
    modes = [m for m in catalog.board_info(key).named_modes if m.name == name and (firmware in (None, m.firmware))]
    assert len(modes) == 1, [(m.name, m.firmware) for m in catalog.board_info(key).named_modes]
    return modes[0]


@pytest.mark.parametrize(
    "key, name, firmware, caps, default",
    [
        # nvpmodel_p3701_0000.conf @640733e: MODE_15W 4 cores, CPU 1113600 kHz, GPU 408000000 Hz, EMC 2133000000 Hz
        ("orin-agx", "MAXN", "jetpack5", (12, None, None, None), False),
        ("orin-agx", "MODE_15W", "jetpack5", (4, 1113600, 408000000, 2133000000), False),
        ("orin-agx", "MODE_30W", "jetpack5", (8, 1728000, 612000000, None), True),
        ("orin-agx", "MODE_50W", "jetpack5", (12, 1497600, 816000000, None), False),
        # nvpmodel_p3701_0004.conf @640733e
        ("orin-agx-32gb", "MAXN", "jetpack5", (8, None, None, None), False),
        ("orin-agx-32gb", "MODE_40W", "jetpack5", (8, 1497600, 816000000, None), False),
        # nvpmodel_p3767_0000.conf @640733e and nvpmodel_p3767_0000_super.conf @370b63a
        ("orin-nx-16gb", "15W", "jetpack5", (4, 1651200, 612000000, None), True),
        ("orin-nx-16gb", "25W", "jetpack5", (8, 1497600, 408000000, None), False),
        ("orin-nx-16gb", "15W", "super", (4, 1420800, 612000000, None), False),
        ("orin-nx-16gb", "40W", "super", (8, 1497600, 1173000000, None), True),
        ("orin-nx-16gb", "MAXN_SUPER", "super", (8, None, None, None), False),
        # nvpmodel_p3767_0001{,_super}.conf
        ("orin-nx-8gb", "20W", "jetpack5", (6, 1497600, 408000000, None), False),
        ("orin-nx-8gb", "40W", "super", (6, 1984000, 1173000000, None), True),
        # nvpmodel_p3767_0003{,_super}.conf
        ("orin-nano-8gb", "7W", "jetpack5", (4, 960000, 408000000, 2133000000), False),
        ("orin-nano-8gb", "25W", "super", (6, 1344000, 918000000, 3199000000), True),
        # nvpmodel_p3767_0004{,_super}.conf
        ("orin-nano-4gb", "7W_AI", "jetpack5", (4, 806400, 408000000, 2133000000), False),
        ("orin-nano-4gb", "25W", "super", (6, 1728000, 1020000000, 3199000000), True),
    ],
)
def test_named_modes_carry_the_caps_of_their_conf(key, name, firmware, caps, default):
    m = _mode(key, name, firmware)
    assert (m.cores, m.cpu_khz, m.gpu_hz, m.emc_hz) == caps
    assert m.default == default
    assert m.source.confirmed and "nvpmodel_p" in m.source.cite


def test_xavier_modes_are_from_secondary_copies_and_unconfirmed():
    m = _mode("xavier-agx", "MODE_30W_2CORE")
    assert (m.cores, m.cpu_khz, m.gpu_hz, m.emc_hz) == (2, 2100000, 900000000, 1600000000)
    assert not m.source.confirmed and "jetson_stats" in m.source.cite
    m = _mode("xavier-nx", "MODE_10W_DESKTOP")
    assert (m.cores, m.cpu_khz, m.gpu_hz, m.emc_hz) == (4, 1907200, 510000000, 1600000000)
    assert not m.source.confirmed


def test_a_named_mode_is_a_point_of_the_grid_under_its_caps():
    agx = catalog.board_info("orin-agx")
    space = agx.space()
    # 408 MHz is a cap, not a value of the AGX Orin's GPU table: the highest value under it is 318.75 MHz
    assert _mode("orin-agx", "MODE_15W").mode(space) == PowerMode(4, 1113.6, 318.75, 2133)
    assert _mode("orin-agx", "MAXN").mode(space) == catalog.ORIN_AGX_MAXN
    assert _mode("orin-agx", "MODE_30W").mode(space) == PowerMode(8, 1728, 522.75, 3199)
    assert _mode("thor", "MAXN").mode(catalog.board_info("thor").space()) is None  # caps unknown


# ---------------------------------------------------------------- rails, layout, rated power, detection
def test_rails_say_which_is_the_input():
    for key in ("orin-nx-16gb", "orin-nx-8gb", "orin-nano-8gb", "orin-nano-4gb", "xavier-nx"):
        rails = catalog.board_info(key).rails
        assert rails.input == "VDD_IN" and rails.total == ("VDD_IN",)
    for key in ("orin-agx", "orin-agx-32gb", "orin-agx-64gb"):
        rails = catalog.board_info(key).rails
        assert rails.input is None
        assert rails.total == ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO")
    assert catalog.board_info("xavier-agx").rails.total == ("GPU", "CPU", "SOC", "CV", "VDDRQ", "SYS5V")


def test_sysfs_layouts_per_family():
    orin = catalog.board_info("orin-nx-16gb").layout
    assert [v for v, _ in orin.gpu_devfreq] == ["jetpack5", "jetpack6", "jetpack6-nvpmodel"]
    assert dict(orin.gpu_devfreq)["jetpack6-nvpmodel"] == "sys/devices/platform/17000000.gpu/devfreq_dev"
    assert orin.emc_kind == "bpmp" and orin.emc_dir == catalog.EMC_CLK_DIR
    assert dict(orin.emc_caps) == {5: "sys/kernel/nvpmodel_emc_cap/emc_iso_cap", 6: "sys/kernel/nvpmodel_clk_cap/emc"}
    xavier = catalog.board_info("xavier-nx").layout
    assert dict(xavier.gpu_devfreq)["xavier"] == "sys/devices/17000000.gv11b/devfreq/17000000.gv11b"
    thor = catalog.board_info("thor").layout
    assert dict(thor.gpu_devfreq) == {"thor": "sys/class/devfreq/gpu-gpc-0"}
    assert thor.emc_kind == "devfreq" and thor.emc_dir == "sys/class/devfreq/bwmgr"


@pytest.mark.parametrize("key, watts, confirmed", [
    ("orin-agx", 60.0, False), ("orin-agx-32gb", 40.0, True), ("orin-agx-64gb", 60.0, False),
    ("orin-nx-16gb", 40.0, True), ("orin-nx-8gb", 40.0, True), ("orin-nano-8gb", 25.0, True),
    ("orin-nano-4gb", 25.0, True), ("xavier-nx", 20.0, False), ("xavier-agx", 30.0, False), ("thor", 130.0, False),
])
def test_rated_power_has_one_home_with_its_source(key, watts, confirmed):
    assert catalog.MODULE_MAX_POWER_W[key] == watts == catalog.board_info(key).max_power_w
    assert catalog.MODULE_MAX_POWER[key].source.confirmed is confirmed


@pytest.mark.parametrize("key", KEYS)
def test_each_module_is_detected_by_its_device_tree(tmp_path, key):
    info = catalog.board_info(key)
    dt = tmp_path / "proc/device-tree"
    dt.mkdir(parents=True)
    (dt / "compatible").write_bytes(b"".join(f"nvidia,{c}\x00".encode() for c in info.compatible))
    assert catalog.detect_board(tmp_path) is info
    assert catalog.detect_module(tmp_path) == key


def test_jetpack_from_the_l4t_release(tmp_path):
    (tmp_path / "etc").mkdir()
    for release, jp in ((32, 4), (35, 5), (36, 6), (38, 7), (39, 7), (99, None)):
        (tmp_path / "etc/nv_tegra_release").write_text(f"# R{release} (release), REVISION: 1.0\n")
        assert catalog.jetpack_major(tmp_path) == jp
