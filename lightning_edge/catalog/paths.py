"""Where a Jetson's knobs live, relative to the file-system root (so tests point a controller at a fake tree with
``root=tmp_path``), per SoC family, with their sources."""

from __future__ import annotations

from lightning_edge.catalog.facts import SysfsLayout
from lightning_edge.catalog.sources import SEEDS, jetson_stats, nvpmodel_conf, third_party

__all__ = [
    "CPU_DIR", "CPUFREQ_DIR", "DEBUGFS_DIR", "DT_COMPATIBLE", "DT_MODEL", "EMC_CLK_DIR", "EMC_NVPMODEL_CAP",
    "GPU_DEVFREQ_DIRS", "LAYOUTS", "NVPMODEL_CONF", "TEGRA_RELEASE",
]

CPU_DIR = "sys/devices/system/cpu"
CPUFREQ_DIR = "sys/devices/system/cpu/cpufreq"
EMC_CLK_DIR = "sys/kernel/debug/bpmp/debug/clk/emc"
"""bpmp debugfs EMC clock: ``rate``, ``mrq_rate_locked``, ``max_rate``, ``min_rate``, ``possible_rates`` (Hz)."""
EMC_NVPMODEL_CAP = "sys/kernel/nvpmodel_emc_cap/emc_iso_cap"
"""Where nvpmodel writes ``EMC MAX_FREQ`` on JetPack 4 and 5 (Hz, 0 = no cap); JetPack 6: see :data:`LAYOUTS`."""
DEBUGFS_DIR = "sys/kernel/debug"
NVPMODEL_CONF = "etc/nvpmodel.conf"
TEGRA_RELEASE = "etc/nv_tegra_release"
DT_MODEL = "proc/device-tree/model"
DT_COMPATIBLE = "proc/device-tree/compatible"

_T234_GPU_JP5 = "sys/devices/17000000.ga10b/devfreq/17000000.ga10b"
_T234_GPU_JP6 = "sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu"
_T234_GPU_KNEXT = "sys/devices/platform/17000000.gpu/devfreq_dev"
_T194_GPU = "sys/devices/17000000.gv11b/devfreq/17000000.gv11b"

LAYOUTS: dict[str, SysfsLayout] = {
    # Orin (T234): the GPU devfreq directory of JetPack 5 and the EMC cap are what nvpmodel writes (PARAM GPU
    # MAX_FREQ, PARAM EMC MAX_FREQ); JetPack 6 moved the GPU under platform/bus@0 (the twin targets (docs/twin-targets.md)); the Super files'
    # MAX_FREQ_KNEXT name a third directory (devfreq_dev) and the JetPack 6 EMC cap (nvpmodel_clk_cap/emc)
    "t234": SysfsLayout(
        family="t234",
        gpu_devfreq=(("jetpack5", _T234_GPU_JP5), ("jetpack6", _T234_GPU_JP6), ("jetpack6-nvpmodel", _T234_GPU_KNEXT)),
        emc_kind="bpmp",
        emc_dir=EMC_CLK_DIR,
        emc_caps=((5, EMC_NVPMODEL_CAP), (6, "sys/kernel/nvpmodel_clk_cap/emc")),
        source=nvpmodel_conf("nvpmodel_p3701_0000.conf") + nvpmodel_conf("nvpmodel_p3767_0000_super.conf", True)
        + SEEDS,
    ),
    # Xavier (T194), JetPack 4 and 5: nvpmodel's PARAM GPU is the gv11b devfreq directory; EMC through bpmp debugfs
    "t194": SysfsLayout(
        family="t194",
        gpu_devfreq=(("xavier", _T194_GPU),),
        emc_kind="bpmp",
        emc_dir=EMC_CLK_DIR,
        emc_caps=((4, EMC_NVPMODEL_CAP), (5, EMC_NVPMODEL_CAP)),
        source=third_party("nvpmodel_t194_p3668.conf as copied in borongyuan/XavierNXOverclock@d993abf "
                           "(PARAM GPU, PARAM EMC); AGX Xavier's nvpmodel output replayed by "
                           "rbonghi/jetson_stats@fab55a1 tests/nvpmodel; EMC rate at bpmp/debug/clk/emc "
                           "(rbonghi/jetson_stats issue #360, AGX Xavier)"),
    ),
    # Thor (T264), JetPack 7: the GPC devfreq domain and the EMC bandwidth manager as devfreq devices, as jtop reads
    # them; no nvpmodel file of Thor was found
    "t264": SysfsLayout(
        family="t264",
        gpu_devfreq=(("thor", "sys/class/devfreq/gpu-gpc-0"),),
        emc_kind="devfreq",
        emc_dir="sys/class/devfreq/bwmgr",
        emc_caps=(),
        source=jetson_stats("jtop/core/gpu.py (THOR_GPC), jtop/core/memory.py (class/devfreq/bwmgr)"),
    ),
}
"""Each SoC family's sysfs layout (:class:`~lightning_edge.catalog.facts.SysfsLayout`)."""

GPU_DEVFREQ_DIRS: dict[str, str] = {v: p for layout in LAYOUTS.values() for v, p in layout.gpu_devfreq}
"""Every GPU devfreq directory any family uses, by variant (``jetpack5``, ``jetpack6``, ``jetpack4``, ``thor``...)."""
