"""A realistic fake Jetson AGX Orin 32GB file-system tree, and the kernel's side of writing to it.

``build_orin_agx(tmp_path, jetpack=5)`` lays out, under ``tmp_path``, the files a real Orin AGX
exposes (JetPack 5 or 6 GPU devfreq path), in the real units:

- ``sys/devices/system/cpu/cpu{0..11}`` (``online`` for cpu1..11: cpu0 cannot be offlined and has none;
  ``cpufreq`` a symlink to its cluster's policy), ``present``, ``online``, ``offline``;
- ``sys/devices/system/cpu/cpufreq/policy{0,4,8}``: ``scaling_{min,max,cur}_freq``,
  ``scaling_available_frequencies``, ``related_cpus``... in kHz;
- GPU devfreq ``available_frequencies``, ``min_freq``, ``max_freq``, ``cur_freq`` in Hz, at
  ``sys/devices/17000000.ga10b/devfreq/17000000.ga10b`` (JetPack 5) or
  ``sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu`` (JetPack 6), plus the
  ``sys/class/devfreq`` symlink;
- bpmp debugfs ``sys/kernel/debug/bpmp/debug/clk/emc/{rate,mrq_rate_locked,max_rate,min_rate,possible_rates}`` (Hz);
- ``sys/kernel/nvpmodel_emc_cap/emc_iso_cap``, ``etc/nvpmodel.conf``, ``etc/nv_tegra_release``,
  ``proc/device-tree/{model,compatible}``, ``var/lib/nvpmodel/status``.

The board boots in MAXN with DVFS on (frequency ranges open, EMC not locked).

``board.writer()`` returns a :class:`FakeBoardWriter`: the controllers' real
:class:`~lightning_edge.devices.controllers.sysfs.SysfsWriter` with the kernel's behaviour added:
it logs every write (in memory and in ``.fake_jetson_writes.jsonl``, so writes of child processes
are seen too), refuses writes that would put min above max (EINVAL), and plays a board that clamps or
ignores some values (``board.clamp(...)``, ``board.stick(...)``) or denies permission (``board.deny_writes()``).

Inactive cpufreq policies behave as in mainline kernels since 2022 (``show()``/``store()`` of
drivers/cpufreq/cpufreq.c): once every CPU of a cluster is offline its policy is inactive, and every
read and every write of a file of that policy (``policyN/*``, also through ``cpuN/cpufreq/``) fails with
EBUSY. The policy keeps its limits while inactive: ``scaling_{min,max}_freq`` read as they were once a
core of the cluster is back online (the kernel keeps its frequency QoS requests).
"""

from __future__ import annotations

import errno
import json
import os
import re
import threading
import time
from pathlib import Path

from lightning_edge.catalog import ORIN_AGX_CPU_KHZ, ORIN_AGX_EMC_HZ, ORIN_AGX_GPU_HZ
from lightning_edge.devices.controllers.sysfs import SysfsWriter

META = ".fake_jetson.json"
WRITE_LOG = ".fake_jetson_writes.jsonl"

CPU = "sys/devices/system/cpu"
CPUFREQ = f"{CPU}/cpufreq"
GPU_JP5 = "sys/devices/17000000.ga10b/devfreq/17000000.ga10b"
GPU_JP6 = "sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu"
EMC = "sys/kernel/debug/bpmp/debug/clk/emc"
EMC_CAP = "sys/kernel/nvpmodel_emc_cap/emc_iso_cap"
CLUSTERS = {"policy0": (0, 1, 2, 3), "policy4": (4, 5, 6, 7), "policy8": (8, 9, 10, 11)}

TEGRA_RELEASE = {
    5: "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023\n"
    "# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
    6: "# R36 (release), REVISION: 3.0, GCID: 36923193, BOARD: generic, EABI: aarch64, DATE: Fri Jul 19 23:24:25 UTC 2024\n"
    "# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n",
}

_POWER_MODELS = [
    # id, name, cores online, CPU max kHz (-1 = highest), GPU max Hz (-1 = highest), EMC cap Hz (0 = none)
    (0, "MAXN", 12, -1, -1, 0),
    (1, "MODE_15W", 4, 1113600, 420750000, 2133000000),
    (2, "MODE_30W", 8, 1728000, 624750000, 3199000000),
    (3, "MODE_50W", 12, 1497600, 828750000, 0),
]


def nvpmodel_conf(jetpack: int = 5) -> str:
    """A trimmed but faithful Orin AGX nvpmodel.conf (PARAM definitions, 4 POWER_MODELs, PM_CONFIG)."""
    gpu = "/" + (GPU_JP5 if jetpack == 5 else GPU_JP6)
    gpu_dev = gpu.split("/devfreq/")[0]
    out = [
        "# SPDX-FileCopyrightText: Copyright (c) 2021-2023 NVIDIA CORPORATION & AFFILIATES. All rights reserved.",
        "# SPDX-License-Identifier: LicenseRef-NvidiaProprietary",
        "#",
        "# nvpmodel configuration for Jetson AGX Orin 32GB (p3701-0000)",
        "",
        "< PARAM TYPE=FILE NAME=CPU_ONLINE >",
    ]
    out += [f"CORE_{i} /sys/devices/system/cpu/cpu{i}/online" for i in range(12)]
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
    for i, first in enumerate((0, 4, 8)):
        base = f"/sys/devices/system/cpu/cpu{first}/cpufreq"
        out += [
            "",
            f"< PARAM TYPE=CLOCK NAME=CPU_A78_{i} >",
            f"FREQ_TABLE {base}/scaling_available_frequencies",
            f"MAX_FREQ {base}/scaling_max_freq",
            f"MIN_FREQ {base}/scaling_min_freq",
            f"FREQ_TABLE_KNEXT {base}/scaling_available_frequencies",
            f"MAX_FREQ_KNEXT {base}/scaling_max_freq",
            f"MIN_FREQ_KNEXT {base}/scaling_min_freq",
        ]
    out += [
        "",
        "< PARAM TYPE=CLOCK NAME=GPU >",
        f"FREQ_TABLE {gpu}/available_frequencies",
        f"MAX_FREQ {gpu}/max_freq",
        f"MIN_FREQ {gpu}/min_freq",
        f"FREQ_TABLE_KNEXT {gpu}/available_frequencies",
        f"MAX_FREQ_KNEXT {gpu}/max_freq",
        f"MIN_FREQ_KNEXT {gpu}/min_freq",
        "",
        "< PARAM TYPE=FILE NAME=EMC >",
        f"MAX_FREQ /{EMC_CAP}",
        "",
    ]
    for ident, name, cores, cpu_max, gpu_max, emc in _POWER_MODELS:
        out.append(f"< POWER_MODEL ID={ident} NAME={name} >")
        out += [f"CPU_ONLINE CORE_{i} {int(i < cores)}" for i in range(12)]
        out += ["TPC_POWER_GATING TPC_PG_MASK 0", "GPU_POWER_CONTROL_ENABLE GPU_PWR_CNTL_EN on"]
        for i in range(3):
            out += [f"CPU_A78_{i} MIN_FREQ 115200", f"CPU_A78_{i} MAX_FREQ {cpu_max}"]
        out += [
            "GPU MIN_FREQ 0",
            f"GPU MAX_FREQ {gpu_max}",
            "GPU_POWER_CONTROL_DISABLE GPU_PWR_CNTL_DIS auto",
            f"EMC MAX_FREQ {emc}",
            "DLA0_CORE MAX_FREQ -1",
            "DLA1_CORE MAX_FREQ -1",
            "DLA0_FALCON MAX_FREQ -1",
            "DLA1_FALCON MAX_FREQ -1",
            "PVA0_VPS MAX_FREQ -1",
            "PVA0_AXI MAX_FREQ -1",
            "",
        ]
    out += ["# mandatory section to configure the default power mode", "< PM_CONFIG DEFAULT=0 >", ""]
    return "\n".join(out)


def _store(path: Path, text: str) -> None:
    """Replace ``path``'s content atomically (a temporary file renamed over it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


class FakeJetson:
    """A fake Orin AGX tree under ``root`` (see module docstring). Reopen in another process with :meth:`open`."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        meta = json.loads((self.root / META).read_text())
        self.jetpack: int = meta["jetpack"]
        self.gpu_rel: str = meta["gpu"]

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, root: str | os.PathLike, jetpack: int = 5) -> FakeJetson:
        r = Path(root)
        gpu = GPU_JP5 if jetpack == 5 else GPU_JP6
        _write(
            r / META, json.dumps({"jetpack": jetpack, "gpu": gpu, "clamp": {}, "stick": [], "deny": False})
        )
        _write(r / "etc/nv_tegra_release", TEGRA_RELEASE[jetpack])
        _write(r / "proc/device-tree/model", "NVIDIA Jetson AGX Orin Developer Kit\x00")
        _write(
            r / "proc/device-tree/compatible",
            "nvidia,p3737-0000+p3701-0000\x00nvidia,p3737-0000\x00nvidia,p3701-0000\x00nvidia,tegra234\x00",
        )
        for name, text in (
            ("present", "0-11"),
            ("possible", "0-11"),
            ("online", "0-11"),
            ("offline", ""),
            ("kernel_max", "11"),
        ):
            _write(r / CPU / name, text + "\n")
        freqs = " ".join(str(f) for f in ORIN_AGX_CPU_KHZ) + " \n"
        for pol, cpus in CLUSTERS.items():
            d = r / CPUFREQ / pol
            files = {
                "affected_cpus": " ".join(map(str, cpus)),
                "related_cpus": " ".join(map(str, cpus)),
                "cpuinfo_min_freq": "115200",
                "cpuinfo_max_freq": "2201600",
                "cpuinfo_transition_latency": "0",
                "scaling_available_frequencies": freqs.strip(),
                "scaling_available_governors": "conservative ondemand userspace powersave performance schedutil",
                "scaling_driver": "tegra194",
                "scaling_governor": "schedutil",
                "scaling_min_freq": "115200",
                "scaling_max_freq": "2201600",
                "scaling_cur_freq": "1497600",
                "cpuinfo_cur_freq": "1497600",
            }
            for k, v in files.items():
                _write(d / k, v + "\n")
            for c in cpus:
                cdir = r / CPU / f"cpu{c}"
                cdir.mkdir(parents=True, exist_ok=True)
                if c != 0:
                    _write(cdir / "online", "1\n")
                (cdir / "cpufreq").symlink_to(Path("..") / "cpufreq" / pol)
        g = r / gpu
        gfiles = {
            "available_frequencies": " ".join(str(f) for f in ORIN_AGX_GPU_HZ),
            "available_governors": "userspace nvhost_podgov performance simple_ondemand",
            "governor": "nvhost_podgov",
            "min_freq": str(ORIN_AGX_GPU_HZ[0]),
            "max_freq": str(ORIN_AGX_GPU_HZ[-1]),
            "cur_freq": str(ORIN_AGX_GPU_HZ[0]),
            "target_freq": str(ORIN_AGX_GPU_HZ[0]),
            "polling_interval": "25",
        }
        for k, v in gfiles.items():
            _write(g / k, v + "\n")
        devname = gpu.rsplit("/", 1)[1]
        cls_dir = r / "sys/class/devfreq"
        cls_dir.mkdir(parents=True, exist_ok=True)
        (cls_dir / devname).symlink_to(Path("../../..") / gpu)
        e = r / EMC
        efiles = {
            "rate": "2133000000",
            "mrq_rate_locked": "0",
            "max_rate": str(ORIN_AGX_EMC_HZ[-1]),
            "min_rate": str(ORIN_AGX_EMC_HZ[0]),
            "possible_rates": " ".join(str(h) for h in ORIN_AGX_EMC_HZ),
            "state": "1",
            "parent": "pllm",
        }
        for k, v in efiles.items():
            _write(e / k, v + "\n")
        _write(r / EMC_CAP, "0\n")
        _write(r / "etc/nvpmodel.conf", nvpmodel_conf(jetpack))
        _write(r / "var/lib/nvpmodel/status", "pmode:0000 fmode:cool\n")
        _write(r / WRITE_LOG, "")
        return cls(r)

    @classmethod
    def open(cls, root: str | os.PathLike) -> FakeJetson:
        return cls(root)

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

    def knob_files(self) -> dict[str, str]:
        """Every file a mode change may write, with its content: compare before/after a restore."""
        files = [self.online_rel(c) for c in range(1, 12)]
        for pol in CLUSTERS:
            files += [self.policy_rel(pol, "scaling_min_freq"), self.policy_rel(pol, "scaling_max_freq")]
        files += [self.gpu_rel_file("min_freq"), self.gpu_rel_file("max_freq")]
        files += [f"{EMC}/rate", f"{EMC}/mrq_rate_locked", EMC_CAP]
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
        if rel in (b.gpu_rel_file("min_freq"), b.gpu_rel_file("max_freq")):
            which = "min" if rel.endswith("min_freq") else "max"
            self._check_pair(path, b.gpu_rel_file("min_freq"), b.gpu_rel_file("max_freq"), which, int(v))
            self._sysfs_store(path, v)
            lo, hi = int(b.read(b.gpu_rel_file("min_freq"))), int(b.read(b.gpu_rel_file("max_freq")))
            cur = min(max(int(b.read(b.gpu_rel_file("cur_freq"))), lo), hi)
            b.set_file(b.gpu_rel_file("cur_freq"), str(cur))
            return
        m = _ONLINE_FILE.match(rel)
        if m:
            if v not in ("0", "1"):
                raise OSError(errno.EINVAL, "Invalid argument", str(path))
            self._sysfs_store(path, v)
            online = [0] + [c for c in range(1, 12) if self._online(c)]
            b.set_file(f"{CPU}/online", _ranges(online))
            b.set_file(f"{CPU}/offline", _ranges([c for c in range(12) if c not in online]))
            return
        self._sysfs_store(path, v)

    def _refuse_inactive_policy(self, path: str | os.PathLike) -> None:
        """EBUSY for a file of a cpufreq policy whose CPUs are all offline (the kernel's show()/store())."""
        rel = self.board.rel(path)
        m = _IN_POLICY.match(rel)
        pol = m.group(1) if m else None
        m = _IN_CPU_POLICY.match(rel)
        if m:
            pol = next((p for p, cpus in CLUSTERS.items() if int(m.group(1)) in cpus), None)
        if pol in CLUSTERS and not any(self._online(c) for c in CLUSTERS[pol]):
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
    """Build a fake Orin AGX 32GB tree under ``root`` (JetPack 5 or 6 layout), booted in MAXN with DVFS."""
    return FakeJetson.build(root, jetpack)
