"""A Jetson's sysfs as the mode controllers see it: its layout, what it reads, and the writes of one mode change.

Used by :class:`~lightning_edge.devices.controllers.jetson.JetsonSysfsController` (direct writes, the preferred
way) and :class:`~lightning_edge.devices.controllers.nvpmodel.NvpmodelController`.

What one mode change writes, in this order (see docs/power-modes.md):

1. ``cpu{N}/online`` = 1 for every core the new mode adds (ascending), so their cluster's cpufreq
   policy is active before it is read or written;
2. per cluster active in the new mode, ``cpufreq/policy{first}/scaling_{min,max}_freq`` (kHz), both set to the
   target;
3. GPU devfreq ``min_freq`` / ``max_freq`` (Hz), both set to the target;
4. EMC through the bpmp debugfs clock: ``mrq_rate_locked`` = 1, then ``rate`` (Hz); on a board whose memory clock
   is a devfreq device (Thor's ``bwmgr``), its ``min_freq`` / ``max_freq`` pair (Hz), like the GPU's;
5. ``cpu{N}/online`` = 0 for every core the new mode removes (descending; cpu0 is never offlined).

Offline clusters. The policy of a cluster whose cores are all offline is inactive: mainline kernels (since 2022)
answer EBUSY to every read and write of its files, and keep its min/max (its frequency QoS requests) for when a
core of the cluster comes back. So an inactive policy is never read (a snapshot lacks its range: unknown) nor
written. Once step 1 has brought cores online, the board is read again and the rest planned from that reading
(:meth:`JetsonSysfs.change`): the range of a cluster that was offline is known only then, and the controller
records it in the snapshot before writing it. A restore writes every range its snapshot knows, also of a cluster
the snapshot has offline: the range is written while the cluster is online (step 2, before step 5), and a cluster
offline now and in the snapshot gets its first core online for the write and offline again after it.

For every min/max pair the order keeps ``min <= max`` after every single write: when the target
is above the current max, max is written first (raising); otherwise min first (lowering).
Every written file is read back; differences are reported (and raise unless ``strict=False``).
Only files whose value changes are written.

Where the knobs live is the catalogue's (:data:`lightning_edge.catalog.LAYOUTS`, per SoC family: GPU devfreq
directories of JetPack 4 to 7, EMC through bpmp debugfs or a devfreq device, nvpmodel's EMC cap file); a directory
that resolves outside the root's ``sys`` (a link out of sysfs) is refused. The file-system root is injectable
(``root=tmp_path``) and every read/write goes through a :class:`SysfsWriter`, the seam where tests put a fake board.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from lightning_edge import catalog
from lightning_edge.catalog import BoardInfo
from lightning_edge.devices.controllers.errors import ControllerUnavailableError, ModeWriteError
from lightning_edge.modes import InvalidModeError, PowerMode, PowerModeSpace


# --------------------------------------------------------------------------- the file seam
class SysfsWriter:
    """Every read and write of a sysfs / debugfs file goes through one of these.

    The real one opens the file and writes the value in one ``write`` call, as ``echo`` does. It never follows a
    symbolic link as the file itself (``O_NOFOLLOW``; sysfs attributes are never links) and never creates a file:
    a root process writes only into knob files that exist. Reads are capped at 4 KiB.
    Tests subclass it to record the sequence of writes and to play the kernel's part.
    """

    def read(self, path: str | os.PathLike) -> str:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | os.O_CLOEXEC)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        return data.replace(b"\x00", b"").decode("utf-8", "replace").strip()

    def write(self, path: str | os.PathLike, value: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | _NOFOLLOW | os.O_CLOEXEC)  # sysfs ignores O_TRUNC
        try:
            os.write(fd, str(value).encode())
        finally:
            os.close(fd)


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class DryRunWriter(SysfsWriter):
    """Reads through ``inner``; prints each write as the shell command that would do it, writes nothing."""

    def __init__(self, inner: SysfsWriter | None = None, out: TextIO | None = None) -> None:
        self.inner = inner or SysfsWriter()
        self.out = out
        self.writes: list[tuple[str, str]] = []

    def read(self, path: str | os.PathLike) -> str:
        return self.inner.read(path)

    def write(self, path: str | os.PathLike, value: str) -> None:
        self.writes.append((str(path), value))
        print(f"echo {value} > {path}", file=self.out or sys.stdout)


@dataclass(frozen=True)
class Write:
    """One planned write: ``value`` into ``path``."""

    path: Path
    value: str
    what: str = ""
    lower_bound: Path | None = None  # for a max write: the min file it must stay >= to
    upper_bound: Path | None = None  # for a min write: the max file it must stay <= to

    def command(self) -> str:
        return f"echo {self.value} > {self.path}"


# --------------------------------------------------------------------------- layout of a board
_POLICY_RE = re.compile(r"^policy(\d+)$")
_CPU_RE = re.compile(r"^cpu(\d+)$")


def _parse_cpu_list(text: str) -> tuple[int, ...]:
    """'0 1 2 3' or '0-3' or '0-3,8' -> (0, 1, 2, 3[, 8])."""
    out: list[int] = []
    for part in re.split(r"[\s,]+", text.strip()):
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return tuple(sorted(set(out)))


@dataclass(frozen=True)
class JetsonLayout:
    """Where the knobs of one board live under ``root``."""

    root: Path
    board: BoardInfo
    cpu_count: int
    policies: tuple[tuple[str, tuple[int, ...]], ...]  # ("policy0", (0, 1, 2, 3)), ...
    gpu_dir: Path
    gpu_variant: str  # a variant of catalog.LAYOUTS: "jetpack5", "jetpack6", "jetpack6-nvpmodel", "xavier", "thor"
    emc_dir: Path
    jetpack: int | None
    emc_kind: str = "bpmp"  # "bpmp": debugfs clock (rate + lock); "devfreq": a min/max pair (Thor's bwmgr)
    emc_cap: Path | None = None  # nvpmodel's EMC cap file (JetPack 5: emc_iso_cap, 6: nvpmodel_clk_cap/emc)

    @classmethod
    def probe(cls, root: str | os.PathLike = "/", board: str | BoardInfo | None = None) -> JetsonLayout:
        """Find the knobs under ``root``; raise :class:`ControllerUnavailableError` saying what is missing."""
        r = Path(root)
        cpu_dir = r / catalog.CPU_DIR
        if not cpu_dir.is_dir():
            raise ControllerUnavailableError(f"no {_show(r, catalog.CPU_DIR)}: not a Linux sysfs tree")
        if not catalog.is_jetson(r):
            raise ControllerUnavailableError(
                f"no NVIDIA Jetson found: neither {_show(r, catalog.TEGRA_RELEASE)} nor a tegra "
                f"{_show(r, catalog.DT_COMPATIBLE)}"
            )
        jp = catalog.jetpack_major(r)
        cpus = sorted(int(m.group(1)) for p in cpu_dir.iterdir() if (m := _CPU_RE.match(p.name)))
        if not cpus:
            raise ControllerUnavailableError(f"no cpuN directories in {_show(r, catalog.CPU_DIR)}")
        if isinstance(board, str):
            info: BoardInfo | None = catalog.board_info(board)
        else:
            info = board or catalog.detect_board(r)
        policies = []
        freq_dir = r / catalog.CPUFREQ_DIR
        if freq_dir.is_dir():
            for p in sorted(freq_dir.iterdir(), key=lambda p: _natural(p.name)):
                m = _POLICY_RE.match(p.name)
                if not m:
                    continue
                rel = None
                for name in ("related_cpus", "affected_cpus"):
                    try:
                        rel = _parse_cpu_list((p / name).read_text())
                        break
                    except (OSError, ValueError):
                        continue
                if not rel and info is not None:
                    first = int(m.group(1))
                    rel = next((c for c in info.clusters if first in c), (first,))
                policies.append((p.name, tuple(rel or (int(m.group(1)),))))
        if not policies:
            raise ControllerUnavailableError(
                f"no CPU frequency policies under {_show(r, catalog.CPUFREQ_DIR)}"
            )
        if info is None:
            info = BoardInfo(
                key="jetson",
                name="NVIDIA Jetson (module not recognised)",
                cpu_count=len(cpus),
                clusters=tuple(c for _, c in policies),
            )
        # the module's family first (the catalogue's layout), then every other family's
        layouts = list(catalog.LAYOUTS.values())
        if info.layout is not None:
            layouts.sort(key=lambda L: L.family != info.layout.family)  # type: ignore[union-attr]
        gpu_cands = [(v, p) for L in layouts for v, p in L.gpu_devfreq]
        gpu_cands.sort(key=lambda c: not (jp is not None and c[0].startswith(f"jetpack{jp}")))
        if info.layout is not None:  # a known module: its family's directories only
            gpu_cands = [c for c in gpu_cands if c in info.layout.gpu_devfreq] or gpu_cands
        gpu_dir = variant = None
        for v, rel_dir in gpu_cands:
            d = r / rel_dir
            if (d / "max_freq").exists():
                gpu_dir, variant = _inside_sysfs(r, d, "GPU devfreq"), v
                break
        if gpu_dir is None:
            tried = ", ".join(_show(r, p) for _, p in gpu_cands)
            raise ControllerUnavailableError(f"no GPU devfreq directory (tried {tried})")
        emc_layouts = [L for L in layouts if info.layout is None or L.family == info.layout.family] or layouts
        emc = emc_kind = None
        for L in emc_layouts:
            d = r / L.emc_dir
            if (d / ("rate" if L.emc_kind == "bpmp" else "max_freq")).exists():
                emc, emc_kind = _inside_sysfs(r, d, "memory (EMC) clock"), L.emc_kind
                break
        if emc is None:
            if all(L.emc_kind == "devfreq" for L in emc_layouts):
                raise ControllerUnavailableError(
                    "no memory (EMC) devfreq device (tried "
                    + ", ".join(_show(r, L.emc_dir) for L in emc_layouts) + ")")
            dbg = r / catalog.DEBUGFS_DIR
            if dbg.exists() and not os.access(dbg, os.R_OK | os.X_OK):
                raise ControllerUnavailableError(
                    f"cannot read {_show(r, catalog.DEBUGFS_DIR)}, where the bpmp clock of the memory (EMC) "
                    f"lives: run as root (sudo), see docs/power-modes.md"
                )
            raise ControllerUnavailableError(
                f"no bpmp debugfs EMC clock at {_show(r, catalog.EMC_CLK_DIR)}: mount debugfs "
                f"(sudo mount -t debugfs none /sys/kernel/debug) and run as root"
            )
        caps = [(j, p) for L in emc_layouts for j, p in L.emc_caps]
        caps.sort(key=lambda c: c[0] != jp)
        cap = next((r / p for _, p in caps if (r / p).exists()), None)
        return cls(
            root=r,
            board=info,
            cpu_count=len(cpus),
            policies=tuple(policies),
            gpu_dir=gpu_dir,
            gpu_variant=variant or "",
            emc_dir=emc,
            jetpack=jp,
            emc_kind=emc_kind or "bpmp",
            emc_cap=cap,
        )

    def online_path(self, cpu: int) -> Path:
        return self.root / catalog.CPU_DIR / f"cpu{cpu}" / "online"

    def policy_path(self, policy: str, name: str) -> Path:
        return self.root / catalog.CPUFREQ_DIR / policy / name

    @property
    def emc_cap_path(self) -> Path:
        """nvpmodel's EMC cap file (the one this board has; JetPack 5's name when it has none)."""
        return self.emc_cap if self.emc_cap is not None else self.root / catalog.EMC_NVPMODEL_CAP


def _inside_sysfs(root: Path, d: Path, what: str) -> Path:
    """``d`` when it resolves inside ``root``'s ``sys`` (a class directory such as sys/class/devfreq/gpu-gpc-0 is a
    link the kernel makes into sys/devices); a link out of sysfs is refused (lightning_edge may run as root)."""
    real, top = os.path.realpath(d), os.path.realpath(root / "sys")
    if real != top and not real.startswith(top + os.sep):
        raise ControllerUnavailableError(f"the {what} directory {d} resolves to {real}, outside {top}: refused "
                                         "(sysfs directories never lead out of sysfs)")
    return d


def _active(cpus: tuple[int, ...], online: dict[int, int]) -> bool:
    """Whether a cluster's cpufreq policy is active: one of ``cpus`` is online (a CPU without an ``online`` file,
    such as cpu0, always is)."""
    return any(online.get(c, 1) for c in cpus)


def _natural(name: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _show(root: Path, rel: str) -> str:
    return str(root / rel) if str(root) != "/" else "/" + rel


def _parse_rates(text: str) -> list[int]:
    """EMC ``possible_rates``: numbers in Hz, or kHz/MHz when the text says so (or when they are small)."""
    nums = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", text)]
    low = text.lower()
    scale = 1.0
    if "mhz" in low:
        scale = 1e6
    elif "khz" in low or (nums and max(nums) < 1e7):
        scale = 1e3
    return sorted({int(round(n * scale)) for n in nums if n > 0})


# --------------------------------------------------------------------------- reading and planning
class JetsonSysfs:
    """Reads the raw state of a board, plans ordered writes, executes and verifies them."""

    def __init__(self, layout: JetsonLayout, writer: SysfsWriter) -> None:
        self.layout = layout
        self.writer = writer

    # -- reads
    def _int(self, path: Path) -> int:
        try:
            text = self.writer.read(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ModeWriteError(f"{path} is a symbolic link: refused (sysfs knob files are never links; "
                                     "lightning_edge does not follow one, as it may run as root)") from None
            raise
        try:
            return int(text.split()[0])
        except (ValueError, IndexError):
            shown = text[:24] + ("..." if len(text) > 24 else "")  # never echo a whole file
            raise ModeWriteError(f"unexpected content {shown!r} in {path}: expected an integer") from None

    def hotplug_cpus(self) -> list[int]:
        """CPUs that can be switched on/off (have an ``online`` file); cpu0 never is."""
        return [c for c in range(1, self.layout.cpu_count) if self.layout.online_path(c).exists()]

    def online_now(self) -> dict[int, int]:
        """``{cpu: 0 or 1}`` for every CPU that can be switched on/off."""
        return {c: self._int(self.layout.online_path(c)) for c in self.hotplug_cpus()}

    def read_raw(self) -> dict[str, Any]:
        """The board's state, as a JSON-able snapshot (what a restore writes back).

        The policy of a cluster that is offline is not read (the kernel answers EBUSY): its range is unknown and
        absent from ``cpufreq``."""
        L = self.layout
        on = self.online_now()
        cpufreq = {
            pol: {
                "min_khz": self._int(L.policy_path(pol, "scaling_min_freq")),
                "max_khz": self._int(L.policy_path(pol, "scaling_max_freq")),
            }
            for pol, cpus in L.policies
            if _active(cpus, on)
        }
        online = {str(c): v for c, v in on.items()}
        gpu = {"min_hz": self._int(L.gpu_dir / "min_freq"), "max_hz": self._int(L.gpu_dir / "max_freq")}
        emc: dict[str, Any]
        if L.emc_kind == "devfreq":
            emc = {"min_hz": self._int(L.emc_dir / "min_freq"), "max_hz": self._int(L.emc_dir / "max_freq")}
        else:
            emc = {"rate_hz": self._int(L.emc_dir / "rate")}
            lock = L.emc_dir / "mrq_rate_locked"
            emc["locked"] = self._int(lock) if lock.exists() else 0
            if (L.emc_dir / "max_rate").exists():
                emc["max_rate_hz"] = self._int(L.emc_dir / "max_rate")
        if L.emc_cap_path.exists():
            emc["cap_hz"] = self._int(L.emc_cap_path)
        return {"kind": "jetson-sysfs", "online": online, "cpufreq": cpufreq, "gpu": gpu, "emc": emc}

    def mode_of_raw(self, raw: dict[str, Any]) -> PowerMode:
        """The mode a raw state corresponds to: online cores, and the ceiling (max) of each frequency.

        Memory: the locked rate; when not locked, the highest rate allowed (bpmp ``max_rate``, lowered
        by an nvpmodel EMC cap if any); a devfreq memory clock: its ``max_freq``.
        """
        cores = 1 + sum(1 for v in raw["online"].values() if int(v))
        first = self.layout.policies[0][0]
        cpu_mhz = raw["cpufreq"][first]["max_khz"] / 1e3
        gpu_mhz = raw["gpu"]["max_hz"] / 1e6
        emc = raw["emc"]
        if "max_hz" in emc:
            return PowerMode(cores, cpu_mhz, gpu_mhz, int(emc["max_hz"]) / 1e6)
        if int(emc.get("locked", 0)):
            mem_hz = emc["rate_hz"]
        else:
            mem_hz = emc.get("max_rate_hz", emc["rate_hz"])
            cap = int(emc.get("cap_hz", 0) or 0)
            if cap > 0:
                mem_hz = min(mem_hz, cap)
        return PowerMode(cores, cpu_mhz, gpu_mhz, mem_hz / 1e6)

    # -- what the board offers
    def cpu_khz_available(self) -> list[int]:
        """CPU frequencies every online cluster offers (kHz; an offline cluster's policy cannot be read)."""
        common: set[int] | None = None
        on = self.online_now()
        for pol, cpus in self.layout.policies:
            if not _active(cpus, on):
                continue
            path = self.layout.policy_path(pol, "scaling_available_frequencies")
            vals = {int(x) for x in self.writer.read(path).split()}
            common = vals if common is None else common & vals
        return sorted(common or ())

    def gpu_hz_available(self) -> list[int]:
        return sorted(
            {int(x) for x in self.writer.read(self.layout.gpu_dir / "available_frequencies").split()}
        )

    def emc_hz_available(self) -> list[int]:
        if self.layout.emc_kind == "devfreq":
            path = self.layout.emc_dir / "available_frequencies"
            return sorted({int(x) for x in self.writer.read(path).split()})
        path = self.layout.emc_dir / "possible_rates"
        rates: list[int] = []
        if path.exists():
            try:
                rates = _parse_rates(self.writer.read(path))
            except OSError:
                rates = []
        if not rates and self.layout.board.emc_hz:
            rates = list(self.layout.board.emc_hz)
        if not rates:
            raise ControllerUnavailableError(
                f"cannot tell the memory (EMC) rates of this {self.layout.board.name}: no {path} and the "
                "board is not in the catalogue; pass space=PowerModeSpace(...) from a device profile"
            )
        max_path = self.layout.emc_dir / "max_rate"
        if max_path.exists():
            top = self._int(max_path)
            rates = [x for x in rates if x <= top] or rates
        return rates

    def space(self) -> PowerModeSpace:
        return PowerModeSpace(
            cores=range(1, self.layout.cpu_count + 1),
            cpu_mhz=[k / 1e3 for k in self.cpu_khz_available()],
            gpu_mhz=[h / 1e6 for h in self.gpu_hz_available()],
            mem_mhz=[h / 1e6 for h in self.emc_hz_available()],
            name=self.layout.board.key,
        )

    # -- planning
    @staticmethod
    def _pick(target: float, available: list[int], what: str, unit: str, tol: float) -> int:
        if not available:
            raise InvalidModeError(f"the board lists no available {what} frequencies")
        best = min(available, key=lambda v: abs(v - target))
        if abs(best - target) > tol:
            listed = ", ".join(str(v) for v in available)
            raise InvalidModeError(
                f"{what} {target:.0f} {unit} is not available on this board: available are {listed} {unit}"
            )
        return best

    def want_of_mode(self, mode: PowerMode) -> dict[str, Any]:
        """The raw state that realises ``mode`` (frequencies pinned: min = max)."""
        if mode.cores > self.layout.cpu_count:
            raise InvalidModeError(
                f"{mode.cores} cores requested, but this board has {self.layout.cpu_count}"
            )
        khz = self._pick(mode.cpu_mhz * 1e3, self.cpu_khz_available(), "CPU", "kHz", 1e3)
        gpu = self._pick(mode.gpu_mhz * 1e6, self.gpu_hz_available(), "GPU", "Hz", 1e6)
        emc = self._pick(mode.mem_mhz * 1e6, self.emc_hz_available(), "memory (EMC)", "Hz", 1e6)
        on = {c: int(c < mode.cores) for c in self.hotplug_cpus()}
        return {
            "online": {str(c): v for c, v in on.items()},
            # a cluster the mode takes offline is left alone: its policy is inactive once its cores are off
            "cpufreq": {pol: {"min_khz": khz, "max_khz": khz} for pol, cpus in self.layout.policies
                        if _active(cpus, on)},
            "gpu": {"min_hz": gpu, "max_hz": gpu},
            "emc": {"min_hz": emc, "max_hz": emc} if self.layout.emc_kind == "devfreq" else {"rate_hz": emc, "locked": 1},
        }

    @staticmethod
    def _pair(min_path: Path, max_path: Path, cur: dict[str, Any] | None, want: dict[str, Any], unit: str,
              what: str) -> list[Write]:
        """Writes that move (min, max) (the ``min_<unit>`` and ``max_<unit>`` values of a raw state) from ``cur``
        to ``want`` with min <= max after every write. ``cur`` ``None``: not known (an offline cluster's, which
        :meth:`change` reads once the cluster is online), both are written, min first."""
        wmin, wmax = int(want[f"min_{unit}"]), int(want[f"max_{unit}"])
        cmin, cmax = (int(cur[f"min_{unit}"]), int(cur[f"max_{unit}"])) if cur is not None else (None, None)
        if wmin > wmax:
            raise InvalidModeError(f"{what}: target min {wmin} is above target max {wmax}")
        out = []
        w_max = Write(max_path, str(wmax), f"{what} max", lower_bound=min_path)
        w_min = Write(min_path, str(wmin), f"{what} min", upper_bound=max_path)
        if cmax is not None and wmin > cmax:  # raising past the current max: max first
            out += [w for w, changed in ((w_max, wmax != cmax), (w_min, wmin != cmin)) if changed]
        else:  # lowering (or inside the current range): min first
            out += [w for w, changed in ((w_min, wmin != cmin), (w_max, wmax != cmax)) if changed]
        return out

    def plan(self, cur: dict[str, Any], want: dict[str, Any]) -> list[Write]:
        """Ordered writes from raw state ``cur`` to raw state ``want`` (see the module docstring)."""
        L = self.layout
        cur_on = {int(c): int(v) for c, v in cur["online"].items()}
        want_on = {int(c): int(v) for c, v in want.get("online", {}).items() if int(c) in cur_on}
        up = {c for c, v in want_on.items() if v and not cur_on[c]}
        for pol, cpus in L.policies:  # a policy is written while its cluster is online (see the module docstring)
            if pol in want.get("cpufreq", {}) and not _active(cpus, {**cur_on, **dict.fromkeys(up, 1)}):
                up.update(sorted(c for c in cpus if c in cur_on)[:1])
        writes = [Write(L.online_path(c), "1", f"cpu{c} online") for c in sorted(up)]
        for pol, _ in L.policies:
            if pol in want.get("cpufreq", {}):
                writes += self._pair(L.policy_path(pol, "scaling_min_freq"), L.policy_path(pol, "scaling_max_freq"),
                                     cur["cpufreq"].get(pol), want["cpufreq"][pol], "khz", f"CPU {pol}")
        if "gpu" in want:
            writes += self._pair(L.gpu_dir / "min_freq", L.gpu_dir / "max_freq", cur["gpu"], want["gpu"], "hz", "GPU")
        if "emc" in want and "max_hz" in want["emc"]:  # a devfreq memory clock: a pair, like the GPU's
            writes += self._pair(L.emc_dir / "min_freq", L.emc_dir / "max_freq", cur["emc"], want["emc"], "hz", "EMC")
        elif "emc" in want:
            c, w = cur["emc"], want["emc"]
            lock = L.emc_dir / "mrq_rate_locked"
            if int(w.get("locked", 0)):
                if not int(c.get("locked", 0)):
                    writes.append(Write(lock, "1", "EMC lock"))
                if int(w["rate_hz"]) != int(c["rate_hz"]) or not int(c.get("locked", 0)):
                    writes.append(Write(L.emc_dir / "rate", str(int(w["rate_hz"])), "EMC rate"))
            else:
                if int(w["rate_hz"]) != int(c["rate_hz"]):
                    writes.append(Write(L.emc_dir / "rate", str(int(w["rate_hz"])), "EMC rate"))
                if int(c.get("locked", 0)):
                    writes.append(Write(lock, "0", "EMC unlock"))
        final_on = {**cur_on, **want_on}
        for c in sorted(cur_on, reverse=True):
            if (cur_on[c] or c in up) and not final_on[c]:
                writes.append(Write(L.online_path(c), "0", f"cpu{c} offline"))
        return writes

    def change(self, want: dict[str, Any], on_online: Callable[[dict[str, Any]], None] | None = None
               ) -> tuple[list[str], list[str]]:
        """Move the board from what it reads now to raw state ``want``: :meth:`plan`, then :meth:`execute` in three
        steps, each read back before the next.

        Cores that come online first; then the board is read again (the policies of their clusters can be read
        only now), ``on_online(raw)`` is called with that reading, and the frequencies are planned from it and
        written; cores that go offline last (a range is read back while its cluster is still online). A dry run
        prints one plan (a range it cannot read is written whole)."""
        writes = self.plan(self.read_raw(), want)
        if isinstance(self.writer, DryRunWriter):
            return self.execute(writes)
        actions: list[str] = []
        mismatches: list[str] = []
        ups = [w for w in writes if w.path.name == "online" and w.value == "1"]
        if ups:
            actions, mismatches = self.execute(ups)
            raw = self.read_raw()
            if on_online is not None:
                on_online(raw)
            writes = self.plan(raw, want)
        downs = [w for w in writes if w.path.name == "online" and w.value == "0"]
        for step in ([w for w in writes if w not in downs], downs):
            actions, more = self.execute(step, done=actions)
            mismatches += more
        return actions, mismatches

    # -- doing it
    def _bound_violation(self, w: Write) -> str | None:
        """Why ``w`` must not be written (it would leave min > max given what the board reads now)."""
        v = int(w.value)
        if w.upper_bound is not None:
            hi = self._int(w.upper_bound)
            if v > hi:
                return f"{w.what}: {w.value} not written: the board holds the max at {hi} (capped?), min must stay <= max"
        if w.lower_bound is not None:
            lo = self._int(w.lower_bound)
            if v < lo:
                return (
                    f"{w.what}: {w.value} not written: the board holds the min at {lo}, max must stay >= min"
                )
        return None

    def execute(self, writes: list[Write], verify: bool = True,
                done: Sequence[str] = ()) -> tuple[list[str], list[str]]:
        """Perform ``writes`` in order; read back each written file once all are done. ``done``: the actions of an
        earlier step of the same change (they lead the returned actions and count in a failure's message)."""
        actions: list[str] = list(done)
        last: dict[Path, Write] = {}
        skipped: list[str] = []
        dry = isinstance(self.writer, DryRunWriter)
        for w in writes:
            bound = self._bound_violation(w) if not dry else None
            if bound:  # the board clamped the other end of the pair: never write min > max
                skipped.append(bound)
                continue
            try:
                self.writer.write(w.path, w.value)
            except PermissionError:
                raise
            except OSError as exc:
                hint = {
                    errno.EBUSY: " (busy: is the CPU cluster offline, or the clock held by another user?)",
                    errno.EINVAL: " (invalid: the kernel rejected the value, or min > max)",
                }.get(exc.errno or 0, "")
                raise ModeWriteError(
                    f"writing {w.value} to {w.path} ({w.what}) failed: {exc.strerror or exc}{hint}. "
                    f"{len(actions)} write(s) done of {len(done) + len(writes)}: the board is partly switched (the "
                    "caller restores the original mode; if that fails too it says what to run)."
                ) from exc
            actions.append(w.command())
            last[w.path] = w
        mismatches: list[str] = list(skipped)
        if verify and not dry:
            for path, w in last.items():
                got = self.writer.read(path)
                if got.split()[:1] != [w.value]:
                    mismatches.append(f"{w.what}: wrote {w.value} to {path}, reads back {got!r}")
        return actions, mismatches


def discover_space(root: str | os.PathLike = "/", board: str | BoardInfo | None = None) -> PowerModeSpace:
    """The power-mode grid of the Jetson under ``root``, read from its ``available_frequencies``."""
    layout = JetsonLayout.probe(root, board)
    return JetsonSysfs(layout, SysfsWriter()).space()


def root_suffix(root: Path) -> str:
    """What tells a board under a fake root from the real one in a device id (empty for ``/``)."""
    if str(root) in ("/", ""):
        return ""
    return "-" + hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:8]
