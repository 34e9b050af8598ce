"""The modules: one :class:`~lightning_edge.catalog.facts.BoardInfo` per Jetson module, every fact with its source.

Read from the boards' own files (see :mod:`lightning_edge.catalog.sources` and docs/boards.md): NVIDIA's nvpmodel
.conf files (named modes, cores, CPU clusters, the sysfs files nvpmodel writes), mainline device trees (module
numbers), the papers' grid. A fact not read in such a file is marked unconfirmed with what it rests on. A real
board's ``available_frequencies`` win over every table here (:func:`lightning_edge.devices.controllers.sysfs.
discover_space`): images differ.
"""

from __future__ import annotations

from dataclasses import replace

from lightning_edge.catalog.facts import BoardInfo, NamedMode, Rails, RatedPower, Source, Table
from lightning_edge.catalog.paths import LAYOUTS
from lightning_edge.catalog.sources import (
    SEEDS,
    SPEC_NOTES,
    derived,
    jetson_stats,
    linux_dt,
    nvpmodel_conf,
    third_party,
)
from lightning_edge.modes import PowerMode, PowerModeSpace

__all__ = [
    "BOARDS", "FULCRUM_CORES", "FULCRUM_CPU_MHZ", "FULCRUM_GPU_MHZ", "FULCRUM_MEM_MHZ", "FULCRUM_MIDPOINT",
    "MODULE_MAX_POWER", "MODULE_MAX_POWER_W", "ORIN_AGX_CPU_KHZ", "ORIN_AGX_EMC_HZ", "ORIN_AGX_GPU_HZ",
    "ORIN_AGX_MAXN", "SPACES", "board_info", "fulcrum_space", "named_space", "orin_agx_space",
]

# --------------------------------------------------------------------------- the papers' board: AGX Orin dev kit
ORIN_AGX_CPU_KHZ: tuple[int, ...] = (
    115200, 192000, 268800, 345600, 422400, 499200, 576000, 652800, 729600, 806400,
    883200, 960000, 1036800, 1113600, 1190400, 1267200, 1344000, 1420800, 1497600, 1574400,
    1651200, 1728000, 1804800, 1881600, 1958400, 2035200, 2112000, 2188800, 2201600,
)  # fmt: skip
"""``scaling_available_frequencies`` of every CPU cluster (kHz), 29 values (the papers' grid)."""

ORIN_AGX_GPU_HZ: tuple[int, ...] = (
    114750000, 216750000, 318750000, 420750000, 522750000, 624750000, 726750000,
    828750000, 930750000, 1032750000, 1134750000, 1236750000, 1300500000,
)  # fmt: skip
"""GPU devfreq ``available_frequencies`` (Hz), 13 values (the papers' grid)."""

ORIN_AGX_EMC_HZ: tuple[int, ...] = (204000000, 665600000, 2133000000, 3199000000)
"""Memory (EMC) rates (Hz), 4 values (the papers' grid)."""

ORIN_AGX_MAXN = PowerMode(12, 2201.6, 1300.5, 3199.0)
"""MAXN: ``12c/2201.6/1300.5/3199``."""

# --------------------------------------------------------------------------- Fulcrum's 441-mode subset
# Fulcrum (Table 9c): cores {4, 8, 12} x 7 CPU (422-2200 MHz) x 7 GPU (115-1300 MHz) x 3 memory
# (665-3200 MHz), "uniformly distributed" over the 18,096 modes, midpoint 8c/1344/727/2133.
# The paper does not list the 7 values; we take every 4th CPU value from 422.4 MHz and every other
# GPU value from 114.75 MHz: both are evenly spread, end at the maximum (2201.6, 1300.5) and have
# the paper's midpoint in the middle (1344.0, 726.75). They also contain the paper's other named
# modes (1651 MHz CPU; 0.3 / 0.7 / 1.1 GHz GPU in Pagoda).
FULCRUM_CORES: tuple[int, ...] = (4, 8, 12)
FULCRUM_CPU_MHZ: tuple[float, ...] = (422.4, 729.6, 1036.8, 1344.0, 1651.2, 1958.4, 2201.6)
FULCRUM_GPU_MHZ: tuple[float, ...] = (114.75, 318.75, 522.75, 726.75, 930.75, 1134.75, 1300.5)
FULCRUM_MEM_MHZ: tuple[float, ...] = (665.6, 2133.0, 3199.0)
FULCRUM_MIDPOINT = PowerMode(8, 1344.0, 726.75, 2133.0)
"""Fulcrum's ``mid1`` mode, ``8c/1344/727/2133`` in the paper (printed ``8c/1344/726.75/2133``)."""


# --------------------------------------------------------------------------- nvpmodel named modes
def _modes(src: Source, firmware: str, default: int | None, rows) -> tuple[NamedMode, ...]:
    """``rows``: (ID, NAME, cores online, CPU MAX_FREQ kHz, GPU MAX_FREQ Hz, EMC MAX_FREQ Hz), ``None`` for no cap
    (``-1`` for a clock, ``0`` or ``-1`` for EMC in the conf)."""
    return tuple(NamedMode(name, ident, cores, cpu, gpu, emc, firmware, src, default=ident == default)
                 for ident, name, cores, cpu, gpu, emc in rows)


def _conf(conf: str, default: int, rows, super_: bool = False) -> tuple[NamedMode, ...]:
    return _modes(nvpmodel_conf(conf, super_), "super" if super_ else "jetpack5", default, rows)


_P3701_0000 = _conf("nvpmodel_p3701_0000.conf", 2, [
    (0, "MAXN", 12, None, None, None),
    (1, "MODE_15W", 4, 1113600, 408000000, 2133000000),
    (2, "MODE_30W", 8, 1728000, 612000000, None),
    (3, "MODE_50W", 12, 1497600, 816000000, None),
])
_P3701_0004 = _conf("nvpmodel_p3701_0004.conf", 2, [
    (0, "MAXN", 8, None, None, None),
    (1, "MODE_15W", 4, 1113600, 408000000, 2133000000),
    (2, "MODE_30W", 8, 1728000, 612000000, None),
    (3, "MODE_40W", 8, 1497600, 816000000, None),
])
# no public nvpmodel_p3701_0005.conf was found: the 64GB module's modes are the developer kit's, as the notes have it
_P3701_0005 = _modes(
    derived("no public nvpmodel_p3701_0005.conf was found; the developer kit's modes, 'as p3701-0000' in "
            "docs/jetson-board-notes.md", nvpmodel_conf("nvpmodel_p3701_0000.conf")),
    "jetpack5", 2, [(m.id, m.name, m.cores, m.cpu_khz, m.gpu_hz, m.emc_hz) for m in _P3701_0000])
_P3767_0000 = _conf("nvpmodel_p3767_0000.conf", 2, [
    (0, "MAXN", 8, None, None, None),
    (1, "10W", 4, 1190400, 612000000, 2133000000),
    (2, "15W", 4, 1651200, 612000000, None),
    (3, "25W", 8, 1497600, 408000000, None),
]) + _conf("nvpmodel_p3767_0000_super.conf", 4, [
    (0, "MAXN_SUPER", 8, None, None, None),
    (1, "10W", 4, 1190400, 612000000, 2133000000),
    (2, "15W", 4, 1420800, 612000000, None),
    (3, "25W", 8, 1497600, 408000000, None),
    (4, "40W", 8, 1497600, 1173000000, None),
], super_=True)
_P3767_0001 = _conf("nvpmodel_p3767_0001.conf", 2, [
    (0, "MAXN", 6, None, None, None),
    (1, "10W", 4, 1190400, 612000000, 2133000000),
    (2, "15W", 4, 1420800, 612000000, None),
    (3, "20W", 6, 1497600, 408000000, None),
]) + _conf("nvpmodel_p3767_0001_super.conf", 4, [
    (0, "MAXN_SUPER", 6, None, None, None),
    (1, "10W", 4, 1190400, 612000000, 2133000000),
    (2, "15W", 4, 1420800, 612000000, None),
    (3, "20W", 6, 1497600, 408000000, None),
    (4, "40W", 6, 1984000, 1173000000, None),
], super_=True)
_P3767_0003 = _conf("nvpmodel_p3767_0003.conf", 0, [
    (0, "15W", 6, None, None, None),
    (1, "7W", 4, 960000, 408000000, 2133000000),
]) + _conf("nvpmodel_p3767_0003_super.conf", 1, [
    (0, "15W", 6, 1497600, 612000000, 2133000000),
    (1, "25W", 6, 1344000, 918000000, 3199000000),
    (2, "MAXN_SUPER", 6, None, None, None),
], super_=True)
_P3767_0004 = _conf("nvpmodel_p3767_0004.conf", 0, [
    (0, "10W", 6, None, None, None),
    (1, "7W_AI", 4, 806400, 408000000, 2133000000),
    (2, "7W_CPU", 4, 960000, 306000000, 2133000000),
]) + _conf("nvpmodel_p3767_0004_super.conf", 1, [
    (0, "10W", 6, 1497600, 612000000, 2133000000),
    (1, "25W", 6, 1728000, 1020000000, 3199000000),
    (2, "MAXN_SUPER", 6, None, None, None),
], super_=True)
# Xavier NX: a third-party copy of NVIDIA's JetPack 4.6 file that adds its own MAXN as ID 0 (left out here) and so
# shifts NVIDIA's IDs by one (the IDs below are NVIDIA's, as other public copies list them: 10W_DESKTOP is 5)
_XAVIER_NX_SRC = third_party(
    "nvpmodel_t194_p3668.conf as copied in borongyuan/XavierNXOverclock@d993abf 'JetPack-4.6 [32.6.1]/' (a "
    "third-party copy of NVIDIA's file with one mode added, MAXN, which is left out here)")
_P3668 = _modes(_XAVIER_NX_SRC, "jetpack4", None, [
    (0, "MODE_15W_2CORE", 2, 1907200, 1109250000, 1600000000),
    (1, "MODE_15W_4CORE", 4, 1420800, 1109250000, 1600000000),
    (2, "MODE_15W_6CORE", 6, 1420800, 1109250000, 1600000000),
    (3, "MODE_10W_2CORE", 2, 1497600, 803250000, 1600000000),
    (4, "MODE_10W_4CORE", 4, 1190400, 803250000, 1600000000),
    (5, "MODE_10W_DESKTOP", 4, 1907200, 510000000, 1600000000),
    (6, "MODE_20W_2CORE", 2, 1907200, 1109250000, 1866000000),
    (7, "MODE_20W_4CORE", 4, 1420800, 1109250000, 1866000000),
    (8, "MODE_20W_6CORE", 6, 1420800, 1109250000, 1866000000),
])
_XAVIER_AGX_SRC = jetson_stats(
    "tests/nvpmodel (show_verbose_xavier)", "fab55a16de1d31a36da5866e2ef3d89c5591192b",
    "AGX Xavier's `nvpmodel -p --verbose` output replayed by jtop's nvpmodel emulator: a third-party copy")
_P2888 = _modes(_XAVIER_AGX_SRC, "jetpack4", 2, [
    (0, "MAXN", 8, None, None, None),
    (1, "MODE_10W", 2, 1200000, 520000000, 1065600000),
    (2, "MODE_15W", 4, 1200000, 670000000, 1331200000),
    (3, "MODE_30W_ALL", 8, 1200000, 900000000, 1600000000),
    (4, "MODE_30W_6CORE", 6, 1450000, 900000000, 1600000000),
    (5, "MODE_30W_4CORE", 4, 1780000, 900000000, 1600000000),
    (6, "MODE_30W_2CORE", 2, 2100000, 900000000, 1600000000),
])
_THOR_MODES = tuple(
    NamedMode(name, None, None, None, None, None, "unknown",
              Source("docs/jetson-board-notes.md: names from a third-party test fixture only, caps unknown", False),
              default=name == "120W", known=False)
    for name in ("MAXN", "120W", "90W", "70W"))

# --------------------------------------------------------------------------- frequency tables
_THIRD_PARTY_NX = third_party(
    "an Orin NX's scaling_available_frequencies and GPU available_frequencies (JetPack 5) as listed in a public "
    "TensorRT power-benchmark script (stored-code index, repository not named there); GPU 306-918 MHz as in "
    "docs/jetson-board-notes.md")
_ORIN_NX_CPU_KHZ = ORIN_AGX_CPU_KHZ[:25] + (1984000,)  # 115.2-1958.4 MHz as on the AGX Orin, then 1984 MHz
_P3767_GPU_JP5_HZ = (306000000, 408000000, 510000000, 612000000, 714000000, 816000000, 918000000)

_AGX_CPU = Table(ORIN_AGX_CPU_KHZ, SEEDS)
_AGX_GPU = Table(ORIN_AGX_GPU_HZ, SEEDS)
_AGX_EMC = Table(ORIN_AGX_EMC_HZ, SEEDS)
_ORIN_EMC = Table(ORIN_AGX_EMC_HZ, derived(
    "the AGX Orin's EMC rates (the same SoC); 2133 MHz is an EMC cap in every Orin nvpmodel file, 3199 MHz in the Orin "
    "Nano's Super files", SEEDS))
_NX_CPU = Table(_ORIN_NX_CPU_KHZ, _THIRD_PARTY_NX + Source(
    "its maximum, 1984 MHz, is the CPU cap of 40W in nvpmodel_p3767_0001_super.conf", True))
_NX_GPU = Table(_P3767_GPU_JP5_HZ + (1173000000,), derived(
    "the JetPack 5 table read on an Orin NX, topped by 1173 MHz, the GPU cap of the Super 40W mode (the Super "
    "table between 918 and 1173 MHz is not known)", _THIRD_PARTY_NX, nvpmodel_conf("nvpmodel_p3767_0000_super.conf",
                                                                                    True)))
_NANO_CPU = Table(ORIN_AGX_CPU_KHZ[:22], derived(
    "the Orin CPU table (the same on the AGX Orin and the Orin NX readings up to 1958.4 MHz) up to 1728 MHz, the "
    "CPU cap of 25W in nvpmodel_p3767_0004_super.conf and the Super maximum in docs/jetson-board-notes.md", SEEDS,
    _THIRD_PARTY_NX))
_NANO_GPU = Table(_P3767_GPU_JP5_HZ + (1020000000,), derived(
    "the Orin NX's JetPack 5 table, topped by 1020 MHz, the GPU cap of 25W in nvpmodel_p3767_0004_super.conf and "
    "the Super maximum in docs/jetson-board-notes.md (JetPack 5: 625 MHz)", _THIRD_PARTY_NX))

# --------------------------------------------------------------------------- rails
_AGX_RAIL_NAMES = ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO")
_AGX_RAILS = Rails(_AGX_RAIL_NAMES, None, _AGX_RAIL_NAMES, Source(
    "docs/twin-targets.md: INA3221 1-0040 VDD_GPU_SOC, VDD_CPU_CV, VIN_SYS_5V0, 1-0041 VDDQ_VDD2_1V8AO, no "
    "VDD_IN: the total is their sum, what tegrastats and jtop report", True))
_AGX_RAILS_OTHER = Rails(_AGX_RAIL_NAMES, None, _AGX_RAIL_NAMES, _AGX_RAILS.source + SPEC_NOTES)
_P3767_RAIL_NAMES = ("VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC")
_P3767_RAILS = Rails(_P3767_RAIL_NAMES, "VDD_IN", ("VDD_IN",), Source(
    "docs/twin-targets.md: Orin NX/Nano rails VDD_IN (the total), VDD_CPU_GPU_CV, VDD_SOC", True))
_XAVIER_AGX_RAIL_NAMES = ("GPU", "CPU", "SOC", "CV", "VDDRQ", "SYS5V")

# --------------------------------------------------------------------------- the modules
_ORIN_ONLINE = "CPU_ONLINE CORE_n and the CPU_A78_k clock PARAMs of"


def _cores(conf: str, cores: str, super_: bool = False) -> Source:
    return Source(f"{cores}: {_ORIN_ONLINE} {nvpmodel_conf(conf, super_).cite}", True)


_A78 = tuple(f"CPU_A78_{i}" for i in range(3))
_C12 = ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11))
_C8 = ((0, 1, 2, 3), (4, 5, 6, 7))
_C6 = ((0, 1, 2, 3), (4, 5))
_DT_P3767_0005 = linux_dt("tegra234-p3767-0005.dtsi", "cdd5b5a9761fd66d17586e4f4ba6588c70e640ea")


def _module_numbers(*confs: str) -> Source:
    return Source("the module numbers nvpmodel selects its file by: " + ", ".join(
        nvpmodel_conf(c).cite for c in confs), True)


BOARDS: dict[str, BoardInfo] = {b.key: b for b in (
    BoardInfo(
        "orin-agx", "NVIDIA Jetson AGX Orin Developer Kit 32GB (p3701-0000)", 12, _C12,
        compatible=("p3701-0000",), module="p3701-0000", soc="t234",
        cpu=_AGX_CPU, gpu=_AGX_GPU, emc=_AGX_EMC, nvpmodel_clusters=_A78, named_modes=_P3701_0000,
        rails=_AGX_RAILS, layout=LAYOUTS["t234"], grid_firmware="jetpack5",
        sources={"cores": _cores("nvpmodel_p3701_0000.conf", "12 cores (MAXN: CORE_0-11 online)"),
                 "clusters": _cores("nvpmodel_p3701_0000.conf", "clusters at cpu0, cpu4, cpu8"),
                 "compatible": _module_numbers("nvpmodel_p3701_0000.conf")}),
    BoardInfo(
        "orin-agx-32gb", "NVIDIA Jetson AGX Orin 32GB (p3701-0004)", 8, _C8,
        compatible=("p3701-0004",), module="p3701-0004", soc="t234",
        cpu=Table(ORIN_AGX_CPU_KHZ, derived(
            "the developer kit's table (the same SoC; the caps of nvpmodel_p3701_0004.conf, 1113.6, 1497.6 and "
            "1728 MHz, are on it)", SEEDS)),
        gpu=Table(ORIN_AGX_GPU_HZ[:9], derived(
            "the developer kit's GPU table up to 930.75 MHz: 'GPU about 930 MHz', 'GPU max per "
            "datasheet ~930 MHz' (docs/jetson-board-notes.md); one TPC gated in every mode (TPC_PG_MASK 128 in "
            "MAXN)", SEEDS, SPEC_NOTES)),
        emc=_ORIN_EMC, nvpmodel_clusters=_A78[:2], named_modes=_P3701_0004, rails=_AGX_RAILS_OTHER,
        layout=LAYOUTS["t234"], grid_firmware="jetpack5",
        sources={"cores": _cores("nvpmodel_p3701_0004.conf", "8 cores (MAXN: CORE_0-7 online)"),
                 "clusters": _cores("nvpmodel_p3701_0004.conf", "clusters at cpu0, cpu4"),
                 "compatible": _module_numbers("nvpmodel_p3701_0004.conf")}),
    BoardInfo(
        "orin-agx-64gb", "NVIDIA Jetson AGX Orin 64GB (p3701-0005)", 12, _C12,
        compatible=("p3701-0005",), module="p3701-0005", soc="t234",
        cpu=Table(ORIN_AGX_CPU_KHZ, SPEC_NOTES), gpu=Table(ORIN_AGX_GPU_HZ, SPEC_NOTES),
        emc=Table(ORIN_AGX_EMC_HZ, SPEC_NOTES), nvpmodel_clusters=_A78, named_modes=_P3701_0005,
        rails=_AGX_RAILS_OTHER, layout=LAYOUTS["t234"], grid_firmware="jetpack5",
        sources={"cores": SPEC_NOTES, "clusters": SPEC_NOTES, "compatible": SPEC_NOTES}),
    BoardInfo(
        "orin-nx-16gb", "NVIDIA Jetson Orin NX 16GB (p3767-0000)", 8, _C8,
        compatible=("p3767-0000",), module="p3767-0000", soc="t234",
        cpu=_NX_CPU, gpu=_NX_GPU, emc=_ORIN_EMC, nvpmodel_clusters=_A78[:2], named_modes=_P3767_0000,
        rails=_P3767_RAILS, layout=LAYOUTS["t234"], grid_firmware="super",
        sources={"cores": _cores("nvpmodel_p3767_0000.conf", "8 cores (MAXN: CORE_0-7 online)"),
                 "clusters": _cores("nvpmodel_p3767_0000.conf", "clusters at cpu0, cpu4"),
                 "compatible": _module_numbers("nvpmodel_p3767_0000.conf")}),
    BoardInfo(
        "orin-nx-8gb", "NVIDIA Jetson Orin NX 8GB (p3767-0001)", 6, _C6,
        compatible=("p3767-0001",), module="p3767-0001", soc="t234",
        cpu=_NX_CPU, gpu=Table(_NX_GPU.values, derived(
            "the Orin NX 16GB's table, assumed for the 8GB (its JetPack 5 maximum is not in a file found); 1173 MHz "
            "is the GPU cap of 40W in nvpmodel_p3767_0001_super.conf", _NX_GPU.source)),
        emc=_ORIN_EMC, nvpmodel_clusters=_A78[:2], named_modes=_P3767_0001, rails=_P3767_RAILS,
        layout=LAYOUTS["t234"], grid_firmware="super",
        sources={"cores": _cores("nvpmodel_p3767_0001.conf", "6 cores (MAXN: CORE_0-5 online)"),
                 "clusters": _cores("nvpmodel_p3767_0001.conf", "clusters at cpu0 (4 cores), cpu4 (2)"),
                 "compatible": _module_numbers("nvpmodel_p3767_0001.conf")}),
    BoardInfo(
        "orin-nano-8gb", "NVIDIA Jetson Orin Nano 8GB (p3767-0003/0005)", 6, _C6,
        compatible=("p3767-0003", "p3767-0005"), module="p3767-0003", soc="t234",
        cpu=_NANO_CPU, gpu=_NANO_GPU, emc=_ORIN_EMC, nvpmodel_clusters=_A78[:2], named_modes=_P3767_0003,
        rails=_P3767_RAILS, layout=LAYOUTS["t234"], grid_firmware="super",
        sources={"cores": _cores("nvpmodel_p3767_0003.conf", "6 cores (15W: CORE_0-5 online)"),
                 "clusters": _cores("nvpmodel_p3767_0003.conf", "clusters at cpu0 (4 cores), cpu4 (2)"),
                 "compatible": _module_numbers("nvpmodel_p3767_0003.conf") + _DT_P3767_0005}),
    BoardInfo(
        "orin-nano-4gb", "NVIDIA Jetson Orin Nano 4GB (p3767-0004)", 6, _C6,
        compatible=("p3767-0004",), module="p3767-0004", soc="t234",
        cpu=_NANO_CPU, gpu=_NANO_GPU, emc=_ORIN_EMC, nvpmodel_clusters=_A78[:2], named_modes=_P3767_0004,
        rails=_P3767_RAILS, layout=LAYOUTS["t234"], grid_firmware="super",
        sources={"cores": _cores("nvpmodel_p3767_0004.conf", "6 cores (10W: CORE_0-5 online)"),
                 "clusters": _cores("nvpmodel_p3767_0004.conf", "clusters at cpu0 (4 cores), cpu4 (2)"),
                 "compatible": _module_numbers("nvpmodel_p3767_0004.conf")}),
    BoardInfo(
        "xavier-nx", "NVIDIA Jetson Xavier NX (p3668)", 6, ((0, 1), (2, 3), (4, 5)),
        compatible=("p3668",), module="p3668", soc="t194",
        cpu=Table((1190400, 1420800, 1497600, 1907200), derived(
            "the CPU caps of its nvpmodel modes: documented points, not the board's table", _XAVIER_NX_SRC)),
        gpu=Table((114750000, 204000000, 306000000, 408000000, 510000000, 599250000, 701250000, 752250000,
                   803250000, 854250000, 905250000, 956250000, 1007250000, 1058250000, 1109250000), third_party(
            "a Xavier NX's GPU available_frequencies as printed in several public scripts and notes (stored-code "
            "index): 114.75-1109.25 MHz, 15 values; 1109.25 MHz is the GPU cap of its 15W and 20W modes")),
        emc=Table((1600000000, 1866000000), derived(
            "the EMC caps of its nvpmodel modes (1866 MHz in the 20W modes)", _XAVIER_NX_SRC)),
        nvpmodel_clusters=("CPU_DENVER_0", "CPU_DENVER_1", "CPU_DENVER_2"), named_modes=_P3668,
        rails=Rails(_P3767_RAIL_NAMES, "VDD_IN", ("VDD_IN",), SPEC_NOTES + third_party(
            "energymon/energymon jetson/JetsonPowerRails.md")),
        layout=LAYOUTS["t194"], grid_firmware="jetpack4",
        sources={"cores": _XAVIER_NX_SRC, "clusters": third_party(
            f"CPU_DENVER_0-2 clock PARAMs at cpu0, cpu2, cpu4 of {_XAVIER_NX_SRC.cite}"),
            "compatible": linux_dt("tegra194-p3668.dtsi", "f4d8f354d753ab21379060a5cf5553fa45a698b2")}),
    BoardInfo(
        "xavier-agx", "NVIDIA Jetson AGX Xavier (p2888)", 8, ((0, 1), (2, 3), (4, 5), (6, 7)),
        compatible=("p2888",), module="p2888", soc="t194",
        cpu=Table((1200000, 1450000, 1780000, 2100000, 2265600), derived(
            "the CPU caps of its nvpmodel modes and the MAXN maximum 2265.6 MHz of docs/jetson-board-notes.md: "
            "documented points, not the board's table", _XAVIER_AGX_SRC, SPEC_NOTES)),
        gpu=Table((114750000, 216750000, 318750000, 420750000, 522750000, 624750000, 675750000, 828750000,
                   905250000, 1032750000, 1198500000, 1236750000, 1338750000, 1377000000), third_party(
            "an AGX Xavier's GPU frequencies as listed in a public benchmark script (stored-code index), up to "
            "1377 MHz, the MAXN GPU maximum of docs/jetson-board-notes.md")),
        emc=Table((1065600000, 1331200000, 1600000000, 2133000000), derived(
            "the EMC caps of its nvpmodel modes and the MAXN maximum 2133 MHz of docs/jetson-board-notes.md",
            _XAVIER_AGX_SRC, SPEC_NOTES)),
        nvpmodel_clusters=tuple(f"CPU_DENVER_{i}" for i in range(4)), named_modes=_P2888,
        rails=Rails(_XAVIER_AGX_RAIL_NAMES, None, _XAVIER_AGX_RAIL_NAMES, SPEC_NOTES),
        layout=LAYOUTS["t194"], grid_firmware="jetpack4",
        sources={"cores": _XAVIER_AGX_SRC, "clusters": third_party(
            f"CPU_DENVER_0-3 clock PARAMs at cpu0, cpu2, cpu4, cpu6 of {_XAVIER_AGX_SRC.cite}"),
            "compatible": linux_dt("tegra194-p2888.dtsi", "bba25915b172c72f6fa635f091624d799e3c9cae")}),
    BoardInfo(
        "thor", "NVIDIA Jetson AGX Thor T5000 (p3834-0008; unconfirmed)", 14, (),
        compatible=("p3834",), module="p3834-0008", soc="t264",
        cpu=Table((2600000,), third_party(
            "RidgeRun's Jetson AGX Thor SoM overview (developer.ridgerun.com): 14 Neoverse V3AE cores, 'CPU Max "
            "Freq 2.6 GHz': the maximum only")),
        gpu=Table((1575000000,), third_party("the same page: 'Max GPU Freq 1.575 GHz': the maximum only")),
        emc=Table((4266000000,), third_party("the same page: '128GB LPDDR5x DRAM 4266 MHz': the maximum only")),
        named_modes=_THOR_MODES,
        rails=Rails(("VDD_GPU", "VDD_CPU_SOC_MSS", "VIN_SYS_5V0"), None, (), SPEC_NOTES + third_party(
            "rbonghi/jetson_stats PR #900: an INA238 on the carrier reads VIN, which the INA3221 sensor does not")),
        layout=LAYOUTS["t264"], grid_firmware="unknown",
        sources={"cores": third_party("RidgeRun's Jetson AGX Thor SoM overview: 14 cores"),
                 "clusters": third_party("not documented in any file found: unknown (a real board's related_cpus "
                                         "tell)"),
                 "compatible": linux_dt("tegra264-p3834.dtsi", "3116e1d5c145faf7d39bfba0afd1d22e9546e470",
                                        '"nvidia,p3834", "nvidia,tegra264"')}),
)}
"""Every catalogued module, by key."""


# --------------------------------------------------------------------------- rated module power (the one home)
MODULE_MAX_POWER: dict[str, RatedPower] = {
    "orin-agx": RatedPower(60.0, third_party(
        "NVIDIA Jetson AGX Orin data sheet, '15 W - 60 W' (MAXN); the highest named budget in "
        "nvpmodel_p3701_0000.conf is MODE_50W, MAXN is uncapped")),
    "orin-agx-32gb": RatedPower(40.0, Source(
        f"the highest budget of its named modes, MODE_40W: {nvpmodel_conf('nvpmodel_p3701_0004.conf').cite}", True)),
    "orin-agx-64gb": RatedPower(60.0, third_party("NVIDIA Jetson AGX Orin data sheet, 60 W (MAXN)")),
    "orin-nx-16gb": RatedPower(40.0, Source(
        "the highest budget of its named modes, 40W (the Super default; JetPack 5: 25W): "
        f"{nvpmodel_conf('nvpmodel_p3767_0000_super.conf', True).cite}", True)),
    "orin-nx-8gb": RatedPower(40.0, Source(
        "the highest budget of its named modes, 40W (Super; JetPack 5: 20W): "
        f"{nvpmodel_conf('nvpmodel_p3767_0001_super.conf', True).cite}", True)),
    "orin-nano-8gb": RatedPower(25.0, Source(
        "the highest budget of its named modes, 25W (Super; JetPack 5: 15W): "
        f"{nvpmodel_conf('nvpmodel_p3767_0003_super.conf', True).cite}", True)),
    "orin-nano-4gb": RatedPower(25.0, Source(
        "the highest budget of its named modes, 25W (Super; JetPack 5: 10W): "
        f"{nvpmodel_conf('nvpmodel_p3767_0004_super.conf', True).cite}", True)),
    "xavier-nx": RatedPower(20.0, third_party(
        "its 20W modes (nvpmodel_t194_p3668.conf, third-party copy); NVIDIA Jetson Xavier NX data sheet, "
        "'10 W / 15 W / 20 W'")),
    "xavier-agx": RatedPower(30.0, third_party(
        "its 30W modes (nvpmodel output replayed by rbonghi/jetson_stats tests/nvpmodel); NVIDIA Jetson AGX Xavier "
        "data sheet, '10 W / 15 W / 30 W'")),
    "thor": RatedPower(130.0, third_party("'40-130 W configurable' (public Jetson AGX Thor announcements)")),
}
"""Each module's rated maximum power: the highest budget of its nvpmodel modes where its file has one (a Super rating
where the module has one: which firmware runs is not known to a sensor), else a data-sheet figure (unconfirmed).
The power sensors' plausibility caps start from it (:func:`lightning_edge.devices.sensors.ina3221.module_cap`). MAXN
modes are uncapped: a module may briefly exceed its rating, so the caps add a margin."""

MODULE_MAX_POWER_W: dict[str, float] = {k: r.watts for k, r in MODULE_MAX_POWER.items()}
""":data:`MODULE_MAX_POWER` in watts (a view of it, not a second home)."""

BOARDS.update({k: replace(b, rated=MODULE_MAX_POWER.get(k)) for k, b in BOARDS.items()})


def board_info(key: str) -> BoardInfo:
    """The catalogued module ``key``; ``ValueError`` naming the known keys otherwise."""
    try:
        return BOARDS[key]
    except KeyError:
        raise ValueError(f"unknown board {key!r}: known are {', '.join(BOARDS)}") from None


# --------------------------------------------------------------------------- named spaces
def orin_agx_space() -> PowerModeSpace:
    """The full Orin AGX developer-kit grid (the papers' board): 12 x 29 x 13 x 4 = 18,096 modes."""
    return BOARDS["orin-agx"].space()  # type: ignore[return-value]


def fulcrum_space() -> PowerModeSpace:
    """Fulcrum's 441-mode subset of the Orin AGX grid (3 x 7 x 7 x 3)."""
    return orin_agx_space().subspace(
        cores=FULCRUM_CORES,
        cpu_mhz=FULCRUM_CPU_MHZ,
        gpu_mhz=FULCRUM_GPU_MHZ,
        mem_mhz=FULCRUM_MEM_MHZ,
        name="fulcrum",
    )


def tuning_space(space: PowerModeSpace | None) -> PowerModeSpace | None:
    """The modes a tuner searches on a board whose power-mode space is ``space``: Fulcrum's 441-mode subset on an
    Orin AGX, real or simulated (the grid the papers tuned on: a 18,096-mode search would profile for hours), else
    the board's whole space (another module's grid does not hold the AGX's subset). The one rule of the Board, the
    tuner and serving."""
    if space is None:
        return None
    return fulcrum_space() if space.name == "orin-agx" else space


SPACES = {"orin-agx": orin_agx_space, "fulcrum": fulcrum_space}
"""Named spaces: ``named_space("fulcrum")``."""


def named_space(name: str) -> PowerModeSpace:
    try:
        return SPACES[name]()
    except KeyError:
        raise ValueError(f"unknown power-mode space {name!r}: known are {', '.join(SPACES)}") from None
