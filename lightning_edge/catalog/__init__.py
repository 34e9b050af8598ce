"""What we know about Jetson boards: one entry per module, every fact with its source (docs/boards.md).

- :mod:`~lightning_edge.catalog.boards`: the modules (:data:`BOARDS`): CPU clusters, frequency tables, nvpmodel named
  modes, rails, rated power (:data:`MODULE_MAX_POWER`), the papers' grid and Fulcrum's subset;
- :mod:`~lightning_edge.catalog.paths`: where the knobs live in sysfs, per SoC family (:data:`LAYOUTS`);
- :mod:`~lightning_edge.catalog.hardware`: what a board's twin is extrapolated by (:data:`HARDWARE`: SMs, tensor
  cores, memory bus width, CPU architecture);
- :mod:`~lightning_edge.catalog.detect`: which module is under a root (device tree, L4T release);
- :mod:`~lightning_edge.catalog.storekey`: the key a board's profiles are kept under (:class:`StoreKey`);
- :mod:`~lightning_edge.catalog.facts` / :mod:`~lightning_edge.catalog.sources`: the shapes of the facts, and where
  they were read.

A real board's ``available_frequencies`` win over these tables: images differ (see
:func:`lightning_edge.devices.controllers.sysfs.discover_space`). All sysfs paths are relative to the file-system
root, so tests point a controller at a fake tree (``root=tmp_path``).
"""

from __future__ import annotations

from lightning_edge.catalog.boards import (
    BOARDS,
    FULCRUM_CORES,
    FULCRUM_CPU_MHZ,
    FULCRUM_GPU_MHZ,
    FULCRUM_MEM_MHZ,
    FULCRUM_MIDPOINT,
    MODULE_MAX_POWER,
    MODULE_MAX_POWER_W,
    ORIN_AGX_CPU_KHZ,
    ORIN_AGX_EMC_HZ,
    ORIN_AGX_GPU_HZ,
    ORIN_AGX_MAXN,
    SPACES,
    board_info,
    fulcrum_space,
    named_space,
    orin_agx_space,
    tuning_space,
)
from lightning_edge.catalog.detect import L4T_JETPACK, detect_board, detect_module, is_jetson, jetpack_major
from lightning_edge.catalog.facts import BoardInfo, NamedMode, Rails, RatedPower, Source, SysfsLayout, Table
from lightning_edge.catalog.hardware import HARDWARE, Hardware, hardware_of
from lightning_edge.catalog.paths import (
    CPU_DIR,
    CPUFREQ_DIR,
    DEBUGFS_DIR,
    DT_COMPATIBLE,
    DT_MODEL,
    EMC_CLK_DIR,
    EMC_NVPMODEL_CAP,
    GPU_DEVFREQ_DIRS,
    LAYOUTS,
    NVPMODEL_CONF,
    TEGRA_RELEASE,
)
from lightning_edge.catalog.storekey import StoreKey

__all__ = [
    "BOARDS", "CPUFREQ_DIR", "CPU_DIR", "DEBUGFS_DIR", "DT_COMPATIBLE", "DT_MODEL", "EMC_CLK_DIR", "EMC_NVPMODEL_CAP",
    "FULCRUM_CORES", "FULCRUM_CPU_MHZ", "FULCRUM_GPU_MHZ", "FULCRUM_MEM_MHZ", "FULCRUM_MIDPOINT", "GPU_DEVFREQ_DIRS", "HARDWARE",
    "L4T_JETPACK", "LAYOUTS", "MODULE_MAX_POWER", "MODULE_MAX_POWER_W", "NVPMODEL_CONF", "ORIN_AGX_CPU_KHZ",
    "ORIN_AGX_EMC_HZ", "ORIN_AGX_GPU_HZ", "ORIN_AGX_MAXN", "SPACES", "TEGRA_RELEASE", "BoardInfo", "NamedMode", "Rails",
    "Hardware", "RatedPower", "Source", "StoreKey", "SysfsLayout", "Table", "board_info", "hardware_of", "detect_board", "detect_module", "fulcrum_space",
    "is_jetson", "jetpack_major", "named_space", "orin_agx_space", "tuning_space",
]
