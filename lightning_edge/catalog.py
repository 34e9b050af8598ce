"""What we know about Jetson boards: power-mode grids, sysfs paths, CPU clusters, nvpmodel names.

Sources: /work/shared/spec/orin-agx-twin.md (Orin AGX 32 GB, JetPack 5) and the Fulcrum paper
(the 441-mode experimental subset). A real board's ``available_frequencies`` win over these
tables: images differ (see :func:`lightning_edge.devices.controllers.sysfs.discover_space`).

All sysfs paths here are *relative* to the file-system root so that tests can point a
controller at a fake tree (``root=tmp_path``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from lightning_edge.modes import PowerMode, PowerModeSpace

# --------------------------------------------------------------------------- Orin AGX 32 GB grid
ORIN_AGX_CPU_KHZ: tuple[int, ...] = (
    115200, 192000, 268800, 345600, 422400, 499200, 576000, 652800, 729600, 806400,
    883200, 960000, 1036800, 1113600, 1190400, 1267200, 1344000, 1420800, 1497600, 1574400,
    1651200, 1728000, 1804800, 1881600, 1958400, 2035200, 2112000, 2188800, 2201600,
)  # fmt: skip
"""``scaling_available_frequencies`` of every CPU cluster (kHz), 29 values."""

ORIN_AGX_GPU_HZ: tuple[int, ...] = (
    114750000, 216750000, 318750000, 420750000, 522750000, 624750000, 726750000,
    828750000, 930750000, 1032750000, 1134750000, 1236750000, 1300500000,
)  # fmt: skip
"""GPU devfreq ``available_frequencies`` (Hz), 13 values."""

ORIN_AGX_EMC_HZ: tuple[int, ...] = (204000000, 665600000, 2133000000, 3199000000)
"""Memory (EMC) rates (Hz), 4 values."""

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


def orin_agx_space() -> PowerModeSpace:
    """The full Orin AGX 32 GB grid: 12 x 29 x 13 x 4 = 18,096 modes."""
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


SPACES = {"orin-agx": orin_agx_space, "fulcrum": fulcrum_space}
"""Named spaces: ``named_space("fulcrum")``."""


def named_space(name: str) -> PowerModeSpace:
    try:
        return SPACES[name]()
    except KeyError:
        raise ValueError(f"unknown power-mode space {name!r}: known are {', '.join(SPACES)}") from None


# --------------------------------------------------------------------------- sysfs paths (relative to root)
CPU_DIR = "sys/devices/system/cpu"
CPUFREQ_DIR = "sys/devices/system/cpu/cpufreq"
GPU_DEVFREQ_DIRS: dict[str, str] = {
    "jetpack5": "sys/devices/17000000.ga10b/devfreq/17000000.ga10b",
    "jetpack6": "sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu",
}
"""GPU devfreq directory (``available_frequencies``, ``min_freq``, ``max_freq``, ``cur_freq``, Hz)."""
EMC_CLK_DIR = "sys/kernel/debug/bpmp/debug/clk/emc"
"""bpmp debugfs EMC clock: ``rate``, ``mrq_rate_locked``, ``max_rate``, ``min_rate``, ``possible_rates`` (Hz)."""
EMC_NVPMODEL_CAP = "sys/kernel/nvpmodel_emc_cap/emc_iso_cap"
"""Where nvpmodel writes ``EMC MAX_FREQ`` (Hz, 0 = no cap)."""
DEBUGFS_DIR = "sys/kernel/debug"
NVPMODEL_CONF = "etc/nvpmodel.conf"
TEGRA_RELEASE = "etc/nv_tegra_release"
DT_MODEL = "proc/device-tree/model"
DT_COMPATIBLE = "proc/device-tree/compatible"


@dataclass(frozen=True)
class BoardInfo:
    """One Jetson module: its CPU layout and, where known, its frequency grids."""

    key: str
    name: str
    cpu_count: int
    clusters: tuple[tuple[int, ...], ...]
    compatible: tuple[str, ...] = ()
    cpu_khz: tuple[int, ...] | None = None
    gpu_hz: tuple[int, ...] | None = None
    emc_hz: tuple[int, ...] | None = None
    nvpmodel_clusters: tuple[str, ...] = field(default=())
    """nvpmodel.conf names of the CPU clusters, in cluster order (``CPU_A78_0``...)."""

    @property
    def max_power_w(self) -> float | None:
        """The module's rated maximum power (W), from :data:`MODULE_MAX_POWER_W`."""
        return MODULE_MAX_POWER_W.get(self.key)

    def space(self) -> PowerModeSpace | None:
        """The grid from the catalogue, or ``None`` when the frequencies must be read from the board."""
        if not (self.cpu_khz and self.gpu_hz and self.emc_hz):
            return None
        return PowerModeSpace(
            cores=range(1, self.cpu_count + 1),
            cpu_mhz=[k / 1e3 for k in self.cpu_khz],
            gpu_mhz=[h / 1e6 for h in self.gpu_hz],
            mem_mhz=[h / 1e6 for h in self.emc_hz],
            name=self.key,
        )


_A78 = tuple(f"CPU_A78_{i}" for i in range(3))

BOARDS: dict[str, BoardInfo] = {b.key: b for b in (
    BoardInfo("orin-agx", "NVIDIA Jetson AGX Orin 32GB", 12, ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11)),
              compatible=("p3701-0000", "p3701-0004"), cpu_khz=ORIN_AGX_CPU_KHZ, gpu_hz=ORIN_AGX_GPU_HZ,
              emc_hz=ORIN_AGX_EMC_HZ, nvpmodel_clusters=_A78),
    BoardInfo("orin-agx-64gb", "NVIDIA Jetson AGX Orin 64GB", 12, ((0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11)),
              compatible=("p3701-0005",), nvpmodel_clusters=_A78),
    BoardInfo("orin-nx-16gb", "NVIDIA Jetson Orin NX 16GB", 8, ((0, 1, 2, 3), (4, 5, 6, 7)),
              compatible=("p3767-0000",), nvpmodel_clusters=_A78[:2]),
    BoardInfo("orin-nx-8gb", "NVIDIA Jetson Orin NX 8GB", 6, ((0, 1, 2, 3), (4, 5)),
              compatible=("p3767-0001",), nvpmodel_clusters=_A78[:2]),
    BoardInfo("orin-nano", "NVIDIA Jetson Orin Nano", 6, ((0, 1, 2, 3), (4, 5)),
              compatible=("p3767-0003", "p3767-0004", "p3767-0005"), nvpmodel_clusters=_A78[:2]),
)}


# --------------------------------------------------------------------------- rated module power
MODULE_MAX_POWER_W: dict[str, float] = {
    # AGX Orin developer kit (p3701-0000), MAXN: 60 W module power (NVIDIA Jetson AGX Orin data sheet, "15 W - 60 W")
    "orin-agx": 60.0,
    # AGX Orin 64GB (p3701-0005): MAXN, 60 W (same data sheet)
    "orin-agx-64gb": 60.0,
    # Orin NX 16GB (p3767-0000): 25 W (JetPack 5 nvpmodel "25W"); 40 W in the JetPack 6.2 "Super" modes
    # (nvpmodel_p3767_0000_super.conf "40W", its default; shared/spec/jetson-boards.md)
    "orin-nx-16gb": 40.0,
    # Orin NX 8GB (p3767-0001): 20 W (JetPack 5 nvpmodel "20W"); 40 W Super (nvpmodel_p3767_0001_super.conf "40W")
    "orin-nx-8gb": 40.0,
    # Orin Nano (p3767-0003/4/5): 15 W (JetPack 5 nvpmodel "15W"); 25 W "Super" (nvpmodel_p3767_0003_super.conf "25W")
    "orin-nano": 25.0,
    # Xavier NX (p3668): 20 W (nvpmodel "20W" modes; NVIDIA Jetson Xavier NX data sheet, "10 W / 15 W / 20 W")
    "xavier-nx": 20.0,
    # AGX Xavier (p2888): 30 W (nvpmodel "30W" budgets; NVIDIA Jetson AGX Xavier data sheet, "10 W / 15 W / 30 W")
    "xavier-agx": 30.0,
}
"""Each module's rated maximum power (W): the highest budget of its nvpmodel modes (a Super rating where the module has
one: which firmware runs is not known to a sensor). The power sensors' plausibility caps start from it
(:func:`lightning_edge.devices.sensors.ina3221.module_cap`). MAXN modes are uncapped: a module may briefly exceed its
rating, so the caps add a margin."""

XAVIER_COMPATIBLE: dict[str, tuple[str, ...]] = {"xavier-nx": ("p3668",), "xavier-agx": ("p2888", "p2972")}
"""Device-tree ``compatible`` names of modules rated in :data:`MODULE_MAX_POWER_W` that have no :data:`BOARDS` entry
(no mode grid in the catalogue)."""


def detect_module(root: str | Path = "/") -> str | None:
    """The key in :data:`MODULE_MAX_POWER_W` of the module under ``root`` (its device tree), or ``None``."""
    info = detect_board(root)
    if info is not None:
        return info.key
    r = Path(root)
    compat = (_read(r / DT_COMPATIBLE) or "").lower()
    model = (_read(r / DT_MODEL) or "").lower()
    for key, names in XAVIER_COMPATIBLE.items():
        if any(n in compat for n in names):
            return key
    if "xavier nx" in model:
        return "xavier-nx"
    if "agx xavier" in model:
        return "xavier-agx"
    return None


def board_info(key: str) -> BoardInfo:
    try:
        return BOARDS[key]
    except KeyError:
        raise ValueError(f"unknown board {key!r}: known are {', '.join(BOARDS)}") from None


def _read(path: Path) -> str | None:
    try:
        return path.read_bytes().replace(b"\x00", b"\n").decode("utf-8", "replace").strip()
    except OSError:
        return None


def is_jetson(root: str | Path = "/") -> bool:
    """True if ``root`` looks like a Jetson (L4T release file or a tegra device tree)."""
    r = Path(root)
    if (r / TEGRA_RELEASE).exists():
        return True
    compat = _read(r / DT_COMPATIBLE) or ""
    return "tegra" in compat.lower()


def detect_board(root: str | Path = "/") -> BoardInfo | None:
    """The board under ``root`` from ``/proc/device-tree/compatible`` (then ``model``), or ``None``."""
    r = Path(root)
    compat = (_read(r / DT_COMPATIBLE) or "").lower()
    for info in BOARDS.values():
        if any(c in compat for c in info.compatible):
            return info
    model = (_read(r / DT_MODEL) or "").lower()
    if "agx orin" in model or "orin agx" in model:
        return BOARDS["orin-agx-64gb" if "64gb" in model else "orin-agx"]
    if "orin nx" in model:
        return BOARDS["orin-nx-8gb" if "8gb" in model else "orin-nx-16gb"]
    if "orin nano" in model:
        return BOARDS["orin-nano"]
    return None


def jetpack_major(root: str | Path = "/") -> int | None:
    """JetPack major version from ``/etc/nv_tegra_release`` (L4T R35 -> 5, R36 -> 6), or ``None``."""
    text = _read(Path(root) / TEGRA_RELEASE) or ""
    m = re.search(r"#\s*R(\d+)", text)
    if not m:
        return None
    return {32: 4, 34: 5, 35: 5, 36: 6}.get(int(m.group(1)))
