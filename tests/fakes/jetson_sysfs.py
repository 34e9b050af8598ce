"""Realistic fake Jetson file-system trees, built from the board catalogue, and the kernel's side of writing to them.

``FakeJetson.build(tmp_path, jetpack=5, board="orin-agx")`` lays out, under ``tmp_path``, the files the module
``board`` of :data:`lightning_edge.catalog.BOARDS` exposes on that JetPack, in the real units, from the catalogue's
facts (cores and clusters, frequency tables, the family's sysfs layout, the nvpmodel named modes of that firmware):

- ``sys/devices/system/cpu/cpu{0..N-1}`` (``online`` for cpu1..: cpu0 cannot be offlined and has none;
  ``cpufreq`` a symlink to its cluster's policy), ``present``, ``online``, ``offline``;
- ``sys/devices/system/cpu/cpufreq/policy{first cpu of each cluster}``: ``scaling_{min,max,cur}_freq``,
  ``scaling_available_frequencies``, ``related_cpus``... in kHz;
- GPU devfreq ``available_frequencies``, ``min_freq``, ``max_freq``, ``cur_freq`` in Hz, in the family's directory
  for that JetPack (:data:`lightning_edge.catalog.LAYOUTS`: Orin JetPack 5 ``17000000.ga10b``, JetPack 6
  ``platform/bus@0/17000000.gpu``, Xavier ``17000000.gv11b``, Thor ``sys/class/devfreq/gpu-gpc-0``), plus the
  ``sys/class/devfreq`` symlink;
- the memory clock: bpmp debugfs ``sys/kernel/debug/bpmp/debug/clk/emc/{rate,mrq_rate_locked,max_rate,min_rate,
  possible_rates}`` (Hz), or on Thor the devfreq device ``sys/class/devfreq/bwmgr`` (a min/max pair, Hz);
- nvpmodel's EMC cap (JetPack 4/5 ``sys/kernel/nvpmodel_emc_cap/emc_iso_cap``, JetPack 6
  ``sys/kernel/nvpmodel_clk_cap/emc``), ``etc/nvpmodel.conf`` (a trimmed conf with the catalogue's named modes of that
  firmware; none on Thor: no nvpmodel file of Thor is known), ``etc/nv_tegra_release``,
  ``proc/device-tree/{model,compatible}``, ``var/lib/nvpmodel/status``.

The board boots in its uncapped mode with every core (MAXN, MAXN_SUPER, or the Orin Nano's 15W/10W of JetPack 5) with
DVFS on (frequency ranges open, EMC not locked); a firmware without one (Xavier NX: NVIDIA's file has no MAXN) boots in
its default mode, else its last, as nvpmodel sets it.

What the catalogue does not know is the fake's assumption, said where it is made (:data:`ASSUMED`): Thor's CPU
clusters (one cpufreq policy per core here), the carrier board's part number in the device tree, the boot values of
the ``cur`` files.

``board.writer()`` returns a :class:`FakeBoardWriter`: the controllers' real
:class:`~lightning_edge.devices.controllers.sysfs.SysfsWriter` with the kernel's behaviour added:
it logs every write (in memory and in ``.fake_jetson_writes.jsonl``, so writes of child processes
are seen too), refuses writes that would put min above max (EINVAL), and plays a board that clamps or
ignores some values (``board.clamp(...)``, ``board.stick(...)``) or denies permission (``board.deny_writes()``).

Inactive cpufreq policies behave as in mainline kernels since 2022 (``show()``/``store()`` of
drivers/cpufreq/cpufreq.c): once every CPU of a cluster is offline its policy is inactive, and every
read and every write of a file of that policy (``policyN/*``, also through ``cpuN/cpufreq/``) fails with
EBUSY. The policy keeps its limits while inactive: ``scaling_{min,max}_freq`` read as they were once a
core of the cluster is back online (the kernel keeps its frequency QoS requests). Every sysfs store is atomic.
"""

from __future__ import annotations

import errno
import json
import os
import re
import threading
import time
from pathlib import Path

from lightning_edge import catalog
from lightning_edge.catalog import BoardInfo, NamedMode
from lightning_edge.devices.controllers.sysfs import SysfsWriter

META = ".fake_jetson.json"
WRITE_LOG = ".fake_jetson_writes.jsonl"

CPU = "sys/devices/system/cpu"
CPUFREQ = f"{CPU}/cpufreq"
GPU_JP5 = catalog.GPU_DEVFREQ_DIRS["jetpack5"]
GPU_JP6 = catalog.GPU_DEVFREQ_DIRS["jetpack6"]
EMC = catalog.EMC_CLK_DIR
EMC_CAP = catalog.EMC_NVPMODEL_CAP
CLUSTERS = {"policy0": (0, 1, 2, 3), "policy4": (4, 5, 6, 7), "policy8": (8, 9, 10, 11)}
"""The AGX Orin developer kit's clusters (``orin-agx``); other boards: ``board.clusters``."""

#: the fake trees the tests run on, one per family and layout: id -> (catalogue key, JetPack)
TREES: dict[str, tuple[str, int]] = {
    "orin-agx-jp5": ("orin-agx", 5),  # the papers' board: 12 cores in 3 clusters, JetPack 5 GPU path
    "orin-agx-jp6": ("orin-agx", 6),  # JetPack 6 GPU path, nvpmodel_clk_cap/emc
    "orin-agx-32gb-jp5": ("orin-agx-32gb", 5),  # 8 of the SoC's cores
    "orin-nx-16gb-jp6": ("orin-nx-16gb", 6),  # 2 clusters of 4
    "orin-nano-8gb-jp6": ("orin-nano-8gb", 6),  # clusters of 4 and 2, the Super firmware's modes
    "xavier-nx-jp4": ("xavier-nx", 4),  # JetPack 4: gv11b devfreq, 3 clusters of 2, no MAXN named mode
    "xavier-agx-jp5": ("xavier-agx", 5),  # 4 clusters of 2
    "thor-jp7": ("thor", 7),  # unconfirmed: gpu-gpc-0 and the bwmgr devfreq memory clock
}

#: the JetPacks a family's trees can be built for (the fixtures use :data:`TREES`); see :func:`jetpacks_of`
JETPACKS = {"t234": (5, 6), "t194": (4, 5), "t264": (7,)}


def jetpacks_of(info: BoardInfo) -> tuple[int, ...]:
    """The JetPacks a fake of ``info`` is built for: a module whose catalogue grid is the Super firmware's (Orin NX
    and Nano) only on JetPack 6, where those tables are (the catalogue has no JetPack 5 tables of them)."""
    return (6,) if info.grid_firmware == "super" else JETPACKS[info.soc]

TEGRA_RELEASE = {
    4: "# R32 (release), REVISION: 7.4, GCID: 33514132, BOARD: t186ref, EABI: aarch64, DATE: Fri Jun  9 04:25:08 UTC 2023\n",
    5: "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023\n"
    "# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
    6: "# R36 (release), REVISION: 3.0, GCID: 36923193, BOARD: generic, EABI: aarch64, DATE: Fri Jul 19 23:24:25 UTC 2024\n"
    "# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
    7: "# R38 (release), REVISION: 2.0, GCID: 41844464, BOARD: generic, EABI: aarch64, DATE: Fri Aug 22 00:00:00 UTC 2025\n",
}

#: what the fake assumes where the catalogue has no fact (each is test scaffolding, not a fact about a board)
ASSUMED = {
    "thor clusters": "one cpufreq policy per core (Thor's cluster layout is documented in no file found)",
    "carrier": "the developer kits' carrier part numbers in the device tree (p3737-0000, p3768-0000, p3509-0000, "
               "p2822-0000, p3971-0000): only the module's part number is the catalogue's",
    "cur": "cur_freq / scaling_cur_freq / EMC rate at boot: a value of the table, not a reading",
}
_CARRIER = {"t234-p3701": "p3737-0000", "t234-p3767": "p3768-0000", "t194-p3668": "p3509-0000",
            "t194-p2888": "p2822-0000", "t264-p3834": "p3971-0000"}
_SOC = {"t234": "tegra234", "t194": "tegra194", "t264": "tegra264"}


def device_tree(info: BoardInfo) -> tuple[str, tuple[str, ...]]:
    """``(model, compatible)`` of a developer kit carrying the module, as ``/proc/device-tree`` shows them: the
    module's part number is the catalogue's, the carrier's the fake's assumption (:data:`ASSUMED`)."""
    carrier = _CARRIER[f"{info.soc}-{info.module.split('-')[0]}"]
    return f"{info.name} (fake)", tuple(
        f"nvidia,{c}" for c in (f"{carrier}+{info.module}", carrier, info.module, _SOC[info.soc]))


def tree_ids(keys: tuple[str, ...] | None = None) -> list[str]:
    """The ids of :data:`TREES` (those of the modules ``keys`` only)."""
    return [t for t, (k, _) in TREES.items() if keys is None or k in keys]


def clusters_of(info: BoardInfo) -> tuple[tuple[int, ...], ...]:
    """The module's CPU clusters, or the fake's assumption where the catalogue has none (Thor)."""
    return info.clusters or tuple((c,) for c in range(info.cpu_count))


def firmware_of(info: BoardInfo, jetpack: int) -> str:
    """Whose named modes an image of that JetPack carries: the Super files on JetPack 6 where the module has them."""
    firmwares = {m.firmware for m in info.named_modes}
    if info.soc == "t194":
        return "jetpack4"
    if jetpack >= 6 and "super" in firmwares:
        return "super"
    return "jetpack5" if "jetpack5" in firmwares else next(iter(firmwares), "")


def _boot_mode(modes: tuple[NamedMode, ...], cores: int) -> NamedMode | None:
    full = [m for m in modes if m.known and m.cores == cores and m.cpu_khz is None and m.gpu_hz is None
            and m.emc_hz is None]
    if full:
        return full[0]
    return next((m for m in modes if m.default), modes[-1] if modes else None)


def nvpmodel_conf(jetpack: int = 5, board: str = "orin-agx", gpu_rel: str | None = None,
                  cap_rel: str | None = None) -> str:
    """A trimmed but faithful nvpmodel.conf of ``board`` on that JetPack: PARAM definitions, the catalogue's named
    modes of that firmware (``-1``: no clock cap, ``0``: no EMC cap), PM_CONFIG with the catalogue's default."""
    info = catalog.board_info(board)
    layout = info.layout
    assert layout is not None
    gpu = "/" + (gpu_rel or _gpu_rel(info, jetpack))
    gpu_dev = gpu.split("/devfreq")[0]
    cap = "/" + (cap_rel or _cap_rel(info, jetpack) or EMC_CAP)
    clusters = clusters_of(info)
    names = info.nvpmodel_clusters or tuple(f"CPU_{i}" for i in range(len(clusters)))
    modes = info.modes_of(firmware_of(info, jetpack))
    out = [
        "# Test fixture: a trimmed nvpmodel.conf written from lightning_edge's board catalogue (not NVIDIA's file)",
        f"# {info.name}, JetPack {jetpack}",
        "",
        "< PARAM TYPE=FILE NAME=CPU_ONLINE >",
    ]
    out += [f"CORE_{i} /sys/devices/system/cpu/cpu{i}/online" for i in range(info.cpu_count)]
    out += [
        "",
        "< PARAM TYPE=FILE NAME=TPC_POWER_GATING >",
        f"TPC_PG_MASK {gpu_dev}/tpc_pg_mask",
        "",
        "< PARAM TYPE=FILE NAME=GPU_POWER_CONTROL_ENABLE >",
        f"GPU_PWR_CNTL_EN {gpu_dev}/power/control",
        "",
        "< PARAM TYPE=FILE NAME=GPU_POWER_CONTROL_DISABLE >",
        f"GPU_PWR_CNTL_DIS {gpu_dev}/power/control",
    ]
    for name, cpus in zip(names, clusters):
        base = f"/sys/devices/system/cpu/cpu{cpus[0]}/cpufreq"
        out += [
            "",
            f"< PARAM TYPE=CLOCK NAME={name} >",
            f"FREQ_TABLE {base}/scaling_available_frequencies",
            f"MAX_FREQ {base}/scaling_max_freq",
            f"MIN_FREQ {base}/scaling_min_freq",
        ]
    out += [
        "",
        "< PARAM TYPE=CLOCK NAME=GPU >",
        f"FREQ_TABLE {gpu}/available_frequencies",
        f"MAX_FREQ {gpu}/max_freq",
        f"MIN_FREQ {gpu}/min_freq",
        "",
        "< PARAM TYPE=CLOCK NAME=EMC >",
        f"MAX_FREQ {cap}",
        "",
    ]
    lo = info.cpu_khz[0] if info.cpu_khz else 0
    for i, m in enumerate(modes):
        ident = m.id if m.id is not None else i
        cores = m.cores or info.cpu_count
        out.append(f"< POWER_MODEL ID={ident} NAME={m.name} >")
        out += [f"CPU_ONLINE CORE_{c} {int(c < cores)}" for c in range(info.cpu_count)]
        out += ["TPC_POWER_GATING TPC_PG_MASK 0", "GPU_POWER_CONTROL_ENABLE GPU_PWR_CNTL_EN on"]
        for name, cpus in zip(names, clusters):
            if cpus[0] < cores:  # nvpmodel lists the clusters a mode keeps online
                out += [f"{name} MIN_FREQ {lo}", f"{name} MAX_FREQ {m.cpu_khz if m.cpu_khz else -1}"]
        out += [
            "GPU MIN_FREQ 0",
            f"GPU MAX_FREQ {m.gpu_hz if m.gpu_hz else -1}",
            "GPU_POWER_CONTROL_DISABLE GPU_PWR_CNTL_DIS auto",
            f"EMC MAX_FREQ {m.emc_hz if m.emc_hz else 0}",
            "DLA0_CORE MAX_FREQ -1",
            "PVA0_VPS MAX_FREQ -1",
            "",
        ]
    default = next((m for m in modes if m.default), _boot_mode(modes, info.cpu_count))
    default_id = (default.id if default and default.id is not None else 0)
    out += ["# mandatory section to configure the default power mode", f"< PM_CONFIG DEFAULT={default_id} >", ""]
    return "\n".join(out)


def conf_models(text: str) -> dict[int, dict]:
    """``{ID: {"name": NAME, "set": {(PARAM, ARG): VALUE}}}`` of every POWER_MODEL of an nvpmodel.conf's text."""
    out: dict[int, dict] = {}
    cur = None
    for line in text.splitlines():
        m = re.match(r"^\s*<\s*POWER_MODEL\s+ID=(\d+)\s+NAME=([^\s>]+)\s*>", line)
        if m:
            cur = int(m.group(1))
            out[cur] = {"name": m.group(2), "set": {}}
            continue
        if line.lstrip().startswith("<"):
            cur = None
            continue
        p = line.split()
        if cur is not None and len(p) >= 3 and not p[0].startswith("#"):
            out[cur]["set"][(p[0], p[1])] = p[2]
    return out


def _gpu_rel(info: BoardInfo, jetpack: int) -> str:
    cands = dict(info.layout.gpu_devfreq)  # type: ignore[union-attr]
    return cands.get(f"jetpack{jetpack}") or next(iter(cands.values()))


def _cap_rel(info: BoardInfo, jetpack: int) -> str | None:
    caps = dict(info.layout.emc_caps)  # type: ignore[union-attr]
    return caps.get(jetpack) or (next(iter(caps.values())) if caps else None)


def _store(path: Path, text: str) -> None:
    """Replace ``path``'s content atomically (a temporary file renamed over it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


class FakeJetson:
    """A fake tree of one catalogued module under ``root`` (see module docstring). Reopen in another process with
    :meth:`open`."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        meta = json.loads((self.root / META).read_text())
        self.jetpack: int = meta["jetpack"]
        self.key: str = meta["board"]
        self.gpu_rel: str = meta["gpu"]
        self.emc_rel: str = meta["emc"]
        self.emc_kind: str = meta["emc_kind"]
        self.cap_rel: str | None = meta["cap"]
        self.cpu_count: int = meta["cpu_count"]
        self.clusters: dict[str, tuple[int, ...]] = {p: tuple(c) for p, c in meta["clusters"].items()}

    @property
    def info(self) -> BoardInfo:
        return catalog.board_info(self.key)

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, root: str | os.PathLike, jetpack: int = 5, board: str = "orin-agx") -> FakeJetson:
        r = Path(root)
        info = catalog.board_info(board)
        assert info.layout is not None and info.cpu and info.gpu and info.emc, f"{board}: no grid in the catalogue"
        if jetpack not in jetpacks_of(info):
            raise ValueError(f"the catalogue's {board} tables are those of JetPack "
                             f"{', '.join(map(str, jetpacks_of(info)))}, not {jetpack}")
        gpu = _gpu_rel(info, jetpack)
        emc_kind, emc = info.layout.emc_kind, info.layout.emc_dir
        cap = _cap_rel(info, jetpack)
        clusters = {f"policy{c[0]}": c for c in clusters_of(info)}
        n = info.cpu_count
        _write(r / META, json.dumps({
            "jetpack": jetpack, "board": board, "gpu": gpu, "emc": emc, "emc_kind": emc_kind, "cap": cap,
            "cpu_count": n, "clusters": clusters, "clamp": {}, "stick": [], "deny": False}))
        _write(r / "etc/nv_tegra_release", TEGRA_RELEASE[jetpack])
        model, compatible = device_tree(info)
        _write(r / "proc/device-tree/model", f"{model}\x00")
        _write(r / "proc/device-tree/compatible", "".join(f"{c}\x00" for c in compatible))
        last = f"0-{n - 1}" if n > 1 else "0"
        for name, text in (("present", last), ("possible", last), ("online", last), ("offline", ""),
                           ("kernel_max", str(n - 1))):
            _write(r / CPU / name, text + "\n")
        khz = info.cpu.values
        for pol, cpus in clusters.items():
            d = r / CPUFREQ / pol
            files = {
                "affected_cpus": " ".join(map(str, cpus)),
                "related_cpus": " ".join(map(str, cpus)),
                "cpuinfo_min_freq": str(khz[0]),
                "cpuinfo_max_freq": str(khz[-1]),
                "cpuinfo_transition_latency": "0",
                "scaling_available_frequencies": " ".join(str(f) for f in khz),
                "scaling_available_governors": "conservative ondemand userspace powersave performance schedutil",
                # drivers/cpufreq/tegra194-cpufreq.c drives T194 and T234; Thor's driver is not known here
                "scaling_driver": "tegra194" if info.soc in ("t194", "t234") else "unknown (fake)",
                "scaling_governor": "schedutil",
                "scaling_min_freq": str(khz[0]),
                "scaling_max_freq": str(khz[-1]),
                "scaling_cur_freq": str(khz[len(khz) // 2]),
                "cpuinfo_cur_freq": str(khz[len(khz) // 2]),
            }
            for k, v in files.items():
                _write(d / k, v + "\n")
            for c in cpus:
                cdir = r / CPU / f"cpu{c}"
                cdir.mkdir(parents=True, exist_ok=True)
                if c != 0:
                    _write(cdir / "online", "1\n")
                (cdir / "cpufreq").symlink_to(Path("..") / "cpufreq" / pol)
        hz = info.gpu.values
        cls._devfreq(r / gpu, hz, "nvhost_podgov")
        cls_dir = r / "sys/class/devfreq"
        cls_dir.mkdir(parents=True, exist_ok=True)
        if not gpu.startswith("sys/class/"):  # a device directory: the kernel links it from the class
            (cls_dir / gpu.rsplit("/", 1)[1]).symlink_to(Path("../../..") / gpu)
        rates = info.emc.values
        if emc_kind == "devfreq":
            cls._devfreq(r / emc, rates, "performance")
        else:
            efiles = {
                "rate": str(rates[-2] if len(rates) > 1 else rates[0]),
                "mrq_rate_locked": "0",
                "max_rate": str(rates[-1]),
                "min_rate": str(rates[0]),
                "possible_rates": " ".join(str(h) for h in rates),
                "state": "1",
                "parent": "pllm",
            }
            for k, v in efiles.items():
                _write(r / emc / k, v + "\n")
        if cap is not None:
            _write(r / cap, "0\n")
        board_ = cls(r)
        firmware = firmware_of(info, jetpack)
        modes = info.modes_of(firmware)
        if modes and all(m.known for m in modes):
            _write(r / "etc/nvpmodel.conf", nvpmodel_conf(jetpack, board, gpu, cap))
            boot = _boot_mode(modes, n)
            boot_id = boot.id if boot is not None and boot.id is not None else 0
            _write(r / "var/lib/nvpmodel/status", f"pmode:{boot_id:04d} fmode:cool\n")
            if boot is not None and (boot.cores != n or boot.cpu_khz or boot.gpu_hz or boot.emc_hz):
                board_.nvpmodel_apply(board_.conf_settings(boot_id), who="boot")
        _write(r / WRITE_LOG, "")
        return board_

    @staticmethod
    def _devfreq(d: Path, hz: tuple[int, ...], governor: str) -> None:
        files = {
            "available_frequencies": " ".join(str(f) for f in hz),
            "available_governors": f"userspace {governor} performance simple_ondemand",
            "governor": governor,
            "min_freq": str(hz[0]),
            "max_freq": str(hz[-1]),
            "cur_freq": str(hz[0]),
            "target_freq": str(hz[0]),
            "polling_interval": "25",
        }
        for k, v in files.items():
            _write(d / k, v + "\n")

    @classmethod
    def open(cls, root: str | os.PathLike) -> FakeJetson:
        return cls(root)

    # ------------------------------------------------------------------ nvpmodel's side (also the fake nvpmodel's)
    def conf_settings(self, ident: int, conf: str | os.PathLike | None = None) -> dict[tuple[str, str], str]:
        """The settings of ``< POWER_MODEL ID=ident >`` in the board's (or ``conf``'s) nvpmodel.conf; ``KeyError`` for
        an ID it does not define."""
        return conf_models(Path(conf or self.root / "etc/nvpmodel.conf").read_text())[ident]["set"]

    def nvpmodel_apply(self, s: dict[tuple[str, str], str], who: str = "nvpmodel") -> None:
        """Write a POWER_MODEL's settings into the tree as nvpmodel does: cores online, each listed cluster's range,
        the GPU range, the EMC cap, cores offline (``-1`` for a max: the highest; ``0`` for a min: the lowest)."""
        info = self.info
        names = dict(zip(info.nvpmodel_clusters or tuple(f"CPU_{i}" for i in range(len(self.clusters))),
                         self.clusters))

        def avail(rel):
            return [int(x) for x in self.read(rel).split()]

        def pick(v, table, is_max):
            v = int(v)
            if v < 0 or (v == 0 and is_max):
                return max(table)
            return min(table) if v == 0 else v

        def put(rel, v):
            self.set_file(rel, str(v))
            self.log_write(rel, str(v), who)

        for c in range(1, self.cpu_count):
            if s.get(("CPU_ONLINE", f"CORE_{c}"), "1") == "1":
                put(self.online_rel(c), "1")
        for name, pol in zip(names, self.clusters):
            cpus = self.clusters[pol]
            if not any(c == 0 or s.get(("CPU_ONLINE", f"CORE_{c}"), "1") == "1" for c in cpus):
                continue
            table = avail(self.policy_rel(pol, "scaling_available_frequencies"))
            lo = pick(s.get((name, "MIN_FREQ"), "0"), table, False)
            hi = pick(s.get((name, "MAX_FREQ"), "-1"), table, True)
            for f, v in (("scaling_min_freq", lo), ("scaling_max_freq", hi), ("scaling_cur_freq", hi)):
                put(self.policy_rel(pol, f), v)
        gtable = avail(self.gpu_rel_file("available_frequencies"))
        glo = pick(s.get(("GPU", "MIN_FREQ"), "0"), gtable, False)
        ghi = pick(s.get(("GPU", "MAX_FREQ"), "-1"), gtable, True)
        for f, v in (("min_freq", glo), ("max_freq", ghi), ("cur_freq", ghi)):
            put(self.gpu_rel_file(f), v)
        if self.cap_rel is not None:
            put(self.cap_rel, max(int(s.get(("EMC", "MAX_FREQ"), "0")), 0))
        for c in range(self.cpu_count - 1, 0, -1):
            if s.get(("CPU_ONLINE", f"CORE_{c}"), "1") == "0":
                put(self.online_rel(c), "0")

    # ------------------------------------------------------------------ paths and files
    def path(self, rel: str) -> Path:
        return self.root / rel

    def rel(self, path: str | os.PathLike) -> str:
        return os.path.relpath(os.path.abspath(path), os.path.abspath(self.root))

    def read(self, rel: str) -> str:
        return self.path(rel).read_text().strip()

    def set_file(self, rel: str, value: str) -> None:
        """Change a file as the kernel would (no checks, not logged as a controller write): at once, never torn (a
        process killed in the middle of a write leaves the old or the new value, as with a sysfs attribute)."""
        _store(self.path(rel), f"{value}\n")

    def online_rel(self, cpu: int) -> str:
        return f"{CPU}/cpu{cpu}/online"

    def policy_rel(self, pol: str, name: str) -> str:
        return f"{CPUFREQ}/{pol}/{name}"

    def gpu_rel_file(self, name: str) -> str:
        return f"{self.gpu_rel}/{name}"

    def emc_rel_file(self, name: str) -> str:
        return f"{self.emc_rel}/{name}"

    def cluster_of(self, cpu: int) -> str:
        return next(p for p, cpus in self.clusters.items() if cpu in cpus)

    def knob_files(self) -> dict[str, str]:
        """Every file a mode change may write, with its content: compare before/after a restore."""
        files = [self.online_rel(c) for c in range(1, self.cpu_count)]
        for pol in self.clusters:
            files += [self.policy_rel(pol, "scaling_min_freq"), self.policy_rel(pol, "scaling_max_freq")]
        files += [self.gpu_rel_file("min_freq"), self.gpu_rel_file("max_freq")]
        if self.emc_kind == "devfreq":
            files += [self.emc_rel_file("min_freq"), self.emc_rel_file("max_freq")]
        else:
            files += [self.emc_rel_file("rate"), self.emc_rel_file("mrq_rate_locked")]
        if self.cap_rel is not None:
            files.append(self.cap_rel)
        return {f: self.read(f) for f in files}

    # ------------------------------------------------------------------ misbehaviour
    def _meta(self) -> dict:
        return json.loads((self.root / META).read_text())

    def _set_meta(self, **kw) -> None:
        meta = self._meta()
        meta.update(kw)
        (self.root / META).write_text(json.dumps(meta))

    def clamp(self, rel: str, limit: int) -> None:
        """Writes to ``rel`` above ``limit`` store ``limit`` instead (a thermal / power cap)."""
        meta = self._meta()
        meta["clamp"][rel] = int(limit)
        self._set_meta(clamp=meta["clamp"])

    def stick(self, rel: str) -> None:
        """Writes to ``rel`` succeed but change nothing (a value the board refuses silently)."""
        self._set_meta(stick=sorted(set(self._meta()["stick"]) | {rel}))

    def deny_writes(self, deny: bool = True) -> None:
        """Every write fails with EACCES, as for a user who is not root."""
        self._set_meta(deny=bool(deny))

    # ------------------------------------------------------------------ the write log
    def log_write(self, rel: str, value: str, who: str = "controller") -> None:
        with open(self.root / WRITE_LOG, "a") as fh:
            fh.write(
                json.dumps({"file": rel, "value": value, "pid": os.getpid(), "who": who, "t": time.time()})
                + "\n"
            )
            fh.flush()

    def writes(self, who: str | None = "controller") -> list[tuple[str, str]]:
        """Every write so far, in order, by every process (``who=None``: the fake nvpmodel's too)."""
        out = []
        for line in (self.root / WRITE_LOG).read_text().splitlines():
            d = json.loads(line)
            if who is None or d["who"] == who:
                out.append((d["file"], d["value"]))
        return out

    def clear_writes(self) -> None:
        (self.root / WRITE_LOG).write_text("")

    def writer(self) -> FakeBoardWriter:
        return FakeBoardWriter(self)


_POLICY_FILE = re.compile(rf"^{re.escape(CPUFREQ)}/(policy\d+)/scaling_(min|max)_freq$")
_ONLINE_FILE = re.compile(rf"^{re.escape(CPU)}/cpu(\d+)/online$")
_IN_POLICY = re.compile(rf"^{re.escape(CPUFREQ)}/(policy\d+)/")
_IN_CPU_POLICY = re.compile(rf"^{re.escape(CPU)}/cpu(\d+)/cpufreq/")  # cpuN/cpufreq -> its policy


class FakeBoardWriter(SysfsWriter):
    """The real writer plus the kernel's side of the fake board: logs, refuses, clamps (see module doc).

    A sysfs attribute takes a value at once: the fake stores it atomically (the real writer's open checks first,
    O_NOFOLLOW included), so a process killed mid-write never leaves an empty knob file."""

    def _sysfs_store(self, path, value: str) -> None:
        os.close(os.open(path, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC))  # what the real one refuses
        _store(Path(path), f"{value}\n")

    def __init__(self, board: FakeJetson) -> None:
        self.board = board

    def read(self, path: str | os.PathLike) -> str:
        self._refuse_inactive_policy(path)
        return super().read(path)

    def write(self, path: str | os.PathLike, value: str) -> None:
        b = self.board
        rel = b.rel(path)
        b.log_write(rel, value)
        meta = b._meta()
        if meta["deny"]:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        self._refuse_inactive_policy(path)
        if rel in meta["stick"]:
            return
        if not rel.startswith("sys/"):  # a regular file (nvpmodel.conf): written as given
            super().write(path, value)
            return
        v = value.strip()
        if rel in meta["clamp"] and v.lstrip("-").isdigit():
            v = str(min(int(v), meta["clamp"][rel]))
        m = _POLICY_FILE.match(rel)
        if m:
            pol, which = m.groups()
            self._check_pair(
                path,
                b.policy_rel(pol, "scaling_min_freq"),
                b.policy_rel(pol, "scaling_max_freq"),
                which,
                int(v),
            )
            self._sysfs_store(path, v)
            lo, hi = (
                int(b.read(b.policy_rel(pol, "scaling_min_freq"))),
                int(b.read(b.policy_rel(pol, "scaling_max_freq"))),
            )
            cur = min(max(int(b.read(b.policy_rel(pol, "scaling_cur_freq"))), lo), hi)
            b.set_file(b.policy_rel(pol, "scaling_cur_freq"), str(cur))
            b.set_file(b.policy_rel(pol, "cpuinfo_cur_freq"), str(cur))
            return
        for file_of in (b.gpu_rel_file, b.emc_rel_file if b.emc_kind == "devfreq" else None):
            if file_of is not None and rel in (file_of("min_freq"), file_of("max_freq")):  # a devfreq pair
                which = "min" if rel.endswith("min_freq") else "max"
                self._check_pair(path, file_of("min_freq"), file_of("max_freq"), which, int(v))
                self._sysfs_store(path, v)
                lo, hi = int(b.read(file_of("min_freq"))), int(b.read(file_of("max_freq")))
                cur = min(max(int(b.read(file_of("cur_freq"))), lo), hi)
                b.set_file(file_of("cur_freq"), str(cur))
                return
        m = _ONLINE_FILE.match(rel)
        if m:
            if v not in ("0", "1"):
                raise OSError(errno.EINVAL, "Invalid argument", str(path))
            self._sysfs_store(path, v)
            online = [0] + [c for c in range(1, b.cpu_count) if self._online(c)]
            b.set_file(f"{CPU}/online", _ranges(online))
            b.set_file(f"{CPU}/offline", _ranges([c for c in range(b.cpu_count) if c not in online]))
            return
        self._sysfs_store(path, v)

    def _refuse_inactive_policy(self, path: str | os.PathLike) -> None:
        """EBUSY for a file of a cpufreq policy whose CPUs are all offline (the kernel's show()/store())."""
        b = self.board
        rel = b.rel(path)
        m = _IN_POLICY.match(rel)
        pol = m.group(1) if m else None
        m = _IN_CPU_POLICY.match(rel)
        if m:
            pol = next((p for p, cpus in b.clusters.items() if int(m.group(1)) in cpus), None)
        if pol in b.clusters and not any(self._online(c) for c in b.clusters[pol]):
            raise OSError(errno.EBUSY, "Device or resource busy", str(path))

    def _online(self, cpu: int) -> bool:
        if cpu == 0:
            return True
        return self.board.read(self.board.online_rel(cpu)) == "1"

    def _check_pair(self, path, min_rel: str, max_rel: str, which: str, value: int) -> None:
        lo, hi = int(self.board.read(min_rel)), int(self.board.read(max_rel))
        lo, hi = (value, hi) if which == "min" else (lo, value)
        if lo > hi:
            raise OSError(errno.EINVAL, f"Invalid argument (min {lo} > max {hi})", str(path))


def _ranges(cpus: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8' (the kernel's cpu list format)."""
    out, start, prev = [], None, None
    for c in sorted(cpus):
        if start is None:
            start = prev = c
        elif c == prev + 1:
            prev = c
        else:
            out.append(f"{start}-{prev}" if start != prev else f"{start}")
            start = prev = c
    if start is not None:
        out.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ",".join(out)


def build_orin_agx(root: str | os.PathLike, jetpack: int = 5) -> FakeJetson:
    """Build a fake AGX Orin developer kit tree under ``root`` (JetPack 5 or 6 layout), booted in MAXN with DVFS."""
    return FakeJetson.build(root, jetpack)


def build_tree(root: str | os.PathLike, tree: str) -> FakeJetson:
    """Build the fake tree ``tree`` of :data:`TREES` (``"orin-nano-8gb-jp6"``...) under ``root``."""
    key, jetpack = TREES[tree]
    return FakeJetson.build(root, jetpack, key)
