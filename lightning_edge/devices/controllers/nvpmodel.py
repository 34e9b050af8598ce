"""Switching power modes on a Jetson through nvpmodel, for users who prefer NVIDIA's tool.

``apply(mode)`` writes (or rewrites) one custom block into nvpmodel.conf, between marker comments::

    # >>> lightning_edge: custom power model, removed on restore >>>
    < POWER_MODEL ID=4 NAME=lightning_edge_8c_1344_726_2133 >
    CPU_ONLINE CORE_0 1
    ...
    CPU_A78_0 MIN_FREQ 1344000
    CPU_A78_0 MAX_FREQ 1344000
    ...
    GPU MIN_FREQ 726750000
    GPU MAX_FREQ 726750000
    EMC MAX_FREQ 2133000000
    # <<< lightning_edge <<<

copying every other line (TPC power gating, DLA, PVA...) from the mode the board is in, then runs
``nvpmodel -f <conf> -m <ID>``. ``restore()`` runs ``nvpmodel -m <original ID>`` and puts the
conf file back byte for byte.

The reboot caveat: nvpmodel may ask for a reboot to enter a mode whose CPU core mask (or GPU TPC
mask) differs from the running one. lightning_edge never reboots a board: it answers "no",
switches back to the original mode (so the board does not boot into the custom one), removes the
block and raises :class:`RebootRequiredError` explaining the choice. The sysfs controller
(``--device jetson``) switches cores without a reboot, which is why it is the default.

Note that nvpmodel's ``EMC MAX_FREQ`` is a cap, not a lock: memory may run below it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from lightning_edge import catalog
from lightning_edge.catalog import BoardInfo, NamedMode, Source
from lightning_edge.devices.controllers.base import ModeController
from lightning_edge.devices.controllers.errors import (
    ControllerUnavailableError,
    ModeWriteError,
    RebootRequiredError,
)
from lightning_edge.devices.controllers.sysfs import JetsonLayout, JetsonSysfs, SysfsWriter, root_suffix
from lightning_edge.modes import PowerMode, PowerModeSpace

BEGIN_MARK = "# >>> lightning_edge: custom power model, removed on restore >>>"
END_MARK = "# <<< lightning_edge <<<"
NAME_PREFIX = "lightning_edge_"

_BLOCK_RE = re.compile(r"^\s*<\s*POWER_MODEL\s+ID=(\d+)\s+NAME=([^\s>]+)\s*>\s*$")
_REBOOT_RE = re.compile(r"reboot", re.IGNORECASE)


class CommandRunner:
    """Runs external commands (the seam where tests record them). Returns ``CompletedProcess``."""

    def run(self, argv: list[str], input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=120, check=False)


class DryRunRunner(CommandRunner):
    """Prints each command instead of running it (the controller runs read-only queries on the real runner)."""

    def __init__(self, inner: CommandRunner | None = None, out: TextIO | None = None) -> None:
        self.inner = inner or CommandRunner()
        self.out = out
        self.commands: list[list[str]] = []

    def run(self, argv: list[str], input: str | None = None) -> subprocess.CompletedProcess:
        self.commands.append(list(argv))
        print(shlex.join(argv), file=self.out or sys.stdout)
        return subprocess.CompletedProcess(argv, 0, "", "")


@dataclass(frozen=True)
class PowerModelBlock:
    """One ``< POWER_MODEL ID=.. NAME=.. >`` block of nvpmodel.conf: its header line and body lines."""

    id: int
    name: str
    start: int  # index of the header line
    end: int  # index one past its last body line
    body: tuple[str, ...]

    def settings(self) -> dict[tuple[str, str], str]:
        """``{("CPU_ONLINE", "CORE_0"): "1", ("GPU", "MAX_FREQ"): "1300500000", ...}``"""
        out = {}
        for line in self.body:
            parts = line.split()
            if len(parts) >= 3 and not parts[0].startswith("#"):
                out[(parts[0], parts[1])] = parts[2]
        return out


def parse_power_models(text: str) -> list[PowerModelBlock]:
    """Every POWER_MODEL block of an nvpmodel.conf (a block runs until the next ``<`` line)."""
    lines = text.splitlines()
    blocks: list[PowerModelBlock] = []
    i = 0
    while i < len(lines):
        m = _BLOCK_RE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].lstrip().startswith("<"):
            j += 1
        body = tuple(ln.strip() for ln in lines[i + 1 : j] if ln.strip() and ln.strip() != END_MARK)
        blocks.append(PowerModelBlock(int(m.group(1)), m.group(2), i, j, body))
        i = j
    return blocks


def _cap(value: str | None) -> int | None:
    """A MAX_FREQ value of nvpmodel.conf: a positive integer is a cap (EMC caps exceed 2**31: 3199000000 Hz);
    ``-1`` (nvpmodel reads it as INT_MAX, 2147483647), ``0`` (EMC: none), a missing or malformed value are no cap."""
    try:
        v = int(value) if value is not None else -1
    except ValueError:
        return None
    return v if v > 0 and v != 2**31 - 1 else None


def named_modes_of_conf(text: str, source: Source, firmware: str = "this board") -> tuple[NamedMode, ...]:
    """The named modes of an nvpmodel.conf (without the lightning_edge block): each ``POWER_MODEL``'s online cores and
    its CPU (the highest cluster cap; none if a cluster is uncapped), GPU and EMC caps, and which one is the default."""
    m = re.search(r"^\s*<\s*PM_CONFIG\s+DEFAULT=(\d+)\s*>", text, re.MULTILINE)
    default = int(m.group(1)) if m else None
    out = []
    for b in parse_power_models(strip_custom_block(text)):
        s = b.settings()
        online = [v for (p, _), v in s.items() if p == "CPU_ONLINE"]
        cpu = [_cap(v) for (p, a), v in s.items() if p.startswith("CPU_") and p != "CPU_ONLINE" and a == "MAX_FREQ"]
        out.append(NamedMode(
            b.name, b.id, sum(1 for v in online if v == "1") if online else None,
            max(cpu) if cpu and None not in cpu else None,  # type: ignore[type-var]
            _cap(s.get(("GPU", "MAX_FREQ"))), _cap(s.get(("EMC", "MAX_FREQ"))), firmware, source,
            default=b.id == default))
    return tuple(out)


def read_conf_text(path: str | os.PathLike, limit: int = 1 << 20) -> str:
    """An nvpmodel.conf's text, for reading only: a regular file (on a board ``/etc/nvpmodel.conf`` is a link NVIDIA's
    packages make to ``/etc/nvpmodel/<module>.conf``), at most ``limit`` bytes; ``OSError`` otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(f"{path} is larger than {limit} bytes: not an nvpmodel configuration")
    return data.decode("utf-8", "replace")


def strip_custom_block(text: str) -> str:
    """``text`` without the lightning_edge block (between the marker comments)."""
    out, skip = [], False
    for line in text.splitlines(keepends=True):
        s = line.strip()
        if s == BEGIN_MARK:
            skip = True
            continue
        if s == END_MARK and skip:
            skip = False
            continue
        if not skip:
            out.append(line)
    return "".join(out)


def insert_custom_block(text: str, block: str) -> str:
    """``text`` with ``block`` (without markers) added before ``< PM_CONFIG ... >``, replacing an older one."""
    base = strip_custom_block(text)
    wrapped = f"{BEGIN_MARK}\n{block.rstrip()}\n{END_MARK}\n"
    lines = base.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if re.match(r"^\s*<\s*PM_CONFIG\b", line):
            j = i
            while j > 0 and lines[j - 1].lstrip().startswith("#"):  # keep its comment with it
                j -= 1
            return "".join(lines[:j]) + wrapped + "".join(lines[j:])
    if base and not base.endswith("\n"):
        base += "\n"
    return base + wrapped


def checked_conf(snapshot: dict[str, Any], board_conf: Path, trusted: bool) -> tuple[Path, str | None]:
    """The nvpmodel.conf to put back and its text, from a state file's snapshot, or ``ModeWriteError``.

    A state file never chooses the file root writes: its ``conf_path`` must be the board's own nvpmodel.conf. Its
    ``conf_text`` (which tells nvpmodel what to write where) is used only from a state dir root owns
    (``trusted``); from a user's state dir (``sudo ... --state-dir``) it is refused."""
    named = snapshot.get("conf_path")
    if named and os.path.abspath(str(named)) != os.path.abspath(str(board_conf)):
        raise ModeWriteError(
            f"the state file names {named} as the nvpmodel configuration, not this board's {board_conf}: refused "
            "(a state file never chooses a file to write). Put the board back by hand (`sudo nvpmodel -m <ID>`) "
            "and delete the state file."
        )
    text = snapshot.get("conf_text")
    if text is not None and not trusted:
        raise ModeWriteError(
            f"not restoring {board_conf} from a state file in a directory root does not own: run the restore with "
            "root's own state dir (without --state-dir), or restore nvpmodel.conf by hand."
        )
    return board_conf, text


def _succeeded(argv: list[str], res: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """``res`` of ``argv``, or a :class:`ModeWriteError` with the command and what it said when it failed."""
    if res.returncode != 0:
        raise ModeWriteError(f"`{shlex.join(argv)}` failed ({res.returncode}): {(res.stderr or res.stdout).strip()}")
    return res


def restore_nvpmodel_snapshot(
    snapshot: dict[str, Any],
    *,
    board_conf: str | os.PathLike,
    trusted: bool = True,
    writer: SysfsWriter | None = None,
    runner: CommandRunner | None = None,
    nvpmodel: str = "nvpmodel",
    dry_run: bool = False,
    out: TextIO | None = None,
) -> list[str]:
    """Put back the nvpmodel part of a snapshot (conf file, then ``nvpmodel -m <ID>``), for other controllers.
    ``board_conf``: the board's own nvpmodel.conf (see :func:`checked_conf`).

    Without an ``nvpmodel`` executable only the conf file is put back (the caller rewrites the knobs).
    """
    writer = writer or SysfsWriter()
    conf, text = checked_conf(snapshot, Path(board_conf), trusted)
    actions = []
    if text is not None:
        try:
            same = conf.read_text() == text
        except OSError:
            same = False
        if not same:
            actions.append(f"restore {conf} as found at start")
            if dry_run:
                print(f"# would put back {conf} as found at start", file=out or sys.stdout)
            else:
                writer.write(conf, text)
    if shutil.which(nvpmodel) is None:
        return actions
    argv = [nvpmodel, "-f", str(conf), "-m", str(int(snapshot["nvpmodel_id"]))]
    actions.append(shlex.join(argv))
    if dry_run:
        print(shlex.join(argv), file=out or sys.stdout)
        return actions
    _succeeded(argv, (runner or CommandRunner()).run(argv, input="NO\n"))
    return actions


class _SysfsBoardController(ModeController):
    """The hooks the two Jetson controllers share: the board's mode read through ``self.sysfs``
    (:class:`JetsonSysfs`), and no controller without the board's knobs under ``root``."""

    sysfs: JetsonSysfs
    layout: JetsonLayout

    @property
    def board(self) -> str:
        """The catalogue key of the module found (or named) under ``root`` (``"orin-agx"``)."""
        return self.layout.board.key

    @classmethod
    def why_unavailable(cls, root: str | os.PathLike = "/", board: str | BoardInfo | None = None,
                        **_: Any) -> str | None:
        try:
            JetsonLayout.probe(root, board)
        except ControllerUnavailableError as exc:
            return str(exc)
        return None

    def _read_mode(self) -> PowerMode:
        return self.sysfs.mode_of_raw(self.sysfs.read_raw())

    @property
    def named_modes(self) -> tuple[NamedMode, ...]:
        """The board's nvpmodel named modes: read from its own nvpmodel.conf (what runs on it wins), else the
        catalogue's for this module (both firmwares where they differ), else none."""
        conf = self.root / catalog.NVPMODEL_CONF  # type: ignore[attr-defined]
        try:
            text = read_conf_text(conf)
        except OSError:
            return self.layout.board.named_modes  # type: ignore[attr-defined]
        return named_modes_of_conf(text, Source(f"this board's {conf}", True), firmware="this board")

    def _mode_of_snapshot(self, snapshot: dict[str, Any]) -> PowerMode | None:
        try:
            return self.sysfs.mode_of_raw(snapshot.get("raw", snapshot))  # "raw": an nvpmodel snapshot
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


class NvpmodelController(_SysfsBoardController):
    """Power modes through ``nvpmodel`` and a custom POWER_MODEL block (may need a reboot: see module doc).

    ``NvpmodelController(root="/", conf_path=None, nvpmodel="nvpmodel", runner=None, mode_id=None,
    writer=None, space=None, **common)``: ``conf_path`` defaults to ``<root>/etc/nvpmodel.conf``;
    ``nvpmodel`` is the executable (found on PATH); ``runner`` the :class:`CommandRunner` seam;
    ``mode_id`` the ID of the custom block (default: one above the highest ID in the file).
    """

    name = "nvpmodel"

    def __init__(
        self,
        root: str | os.PathLike = "/",
        *,
        conf_path: str | os.PathLike | None = None,
        nvpmodel: str = "nvpmodel",
        runner: CommandRunner | None = None,
        mode_id: int | None = None,
        board: str | BoardInfo | None = None,
        writer: SysfsWriter | None = None,
        space: PowerModeSpace | None = None,
        dry_run: bool = False,
        out: TextIO | None = None,
        **common: Any,
    ) -> None:
        self.root = Path(root)
        self.conf_path = Path(conf_path) if conf_path else self.root / catalog.NVPMODEL_CONF
        self.nvpmodel = nvpmodel
        real_runner = runner or CommandRunner()
        self.runner: CommandRunner = DryRunRunner(real_runner, out) if dry_run else real_runner
        self._query_runner = real_runner
        self.layout = JetsonLayout.probe(self.root, board)
        self.writer = writer or SysfsWriter()
        self.sysfs = JetsonSysfs(self.layout, self.writer)
        self._mode_id = mode_id
        self.reboot_caveat: str | None = None
        device_id = f"jetson-{self.layout.board.key}{root_suffix(self.root)}"
        super().__init__(
            space=space or self.sysfs.space(), device_id=device_id, dry_run=dry_run, out=out, **common
        )

    @classmethod
    def why_unavailable(
        cls,
        root: str | os.PathLike = "/",
        conf_path: str | os.PathLike | None = None,
        nvpmodel: str = "nvpmodel",
        board: str | BoardInfo | None = None,
        **_: Any,
    ) -> str | None:
        why = super().why_unavailable(root, board)
        if why:
            return why
        if shutil.which(nvpmodel) is None:
            return (
                f"{nvpmodel!r} is not on PATH (it ships with JetPack: sudo apt install nvidia-l4t-nvpmodel)"
            )
        conf = Path(conf_path) if conf_path else Path(root) / catalog.NVPMODEL_CONF
        if not conf.exists():
            return f"no nvpmodel configuration at {conf}"
        return None

    # ------------------------------------------------------------------ nvpmodel helpers
    def _cmd(self, *args: str) -> list[str]:
        return [self.nvpmodel, "-f", str(self.conf_path), *args]

    def query(self) -> tuple[int | None, str | None]:
        """``nvpmodel -q``: (ID, NAME) of the running mode."""
        res = self._query_runner.run(self._cmd("-q"))
        if res.returncode != 0:
            raise ModeWriteError(
                f"`{shlex.join(self._cmd('-q'))}` failed ({res.returncode}): {res.stderr.strip()}"
            )
        name = None
        ident = None
        for line in res.stdout.splitlines():
            s = line.strip()
            if s.lower().startswith("nv power mode:"):
                name = s.split(":", 1)[1].strip()
            elif s.isdigit():
                ident = int(s)
        return ident, name

    def _read_conf_exact(self) -> str:
        with open(self.conf_path) as fh:
            return fh.read()

    def custom_id(self, text: str | None = None) -> int:
        if self._mode_id is not None:
            return self._mode_id
        blocks = [b for b in parse_power_models(strip_custom_block(text or self._read_conf_exact()))]
        return max((b.id for b in blocks), default=-1) + 1

    def block_for(self, mode: PowerMode, text: str | None = None, template_id: int | None = None) -> str:
        """The POWER_MODEL block (without markers) that realises ``mode``."""
        text = text if text is not None else self._read_conf_exact()
        want = self.sysfs.want_of_mode(mode)  # validates and picks the exact board values
        khz = next(iter(want["cpufreq"].values()))["max_khz"]
        gpu_hz = want["gpu"]["max_hz"]
        emc_hz = want["emc"].get("rate_hz", want["emc"].get("max_hz"))
        blocks = parse_power_models(strip_custom_block(text))
        template = next((b for b in blocks if b.id == template_id), None)
        body = list(template.body) if template else []
        # the template's own cluster names, else the board's (catalogue), else one per cpufreq policy
        cluster_names = [p[0] for p in map(str.split, body) if len(p) >= 2 and p[0].startswith("CPU_")
                         and p[0] != "CPU_ONLINE" and p[1] == "MIN_FREQ"] \
            or list(self.layout.board.nvpmodel_clusters) or [f"CPU_A78_{i}" for i in range(len(self.layout.policies))]
        values = {("CPU_ONLINE", f"CORE_{i}"): "1" if i < mode.cores else "0" for i in range(self.layout.cpu_count)}
        values.update({(name, bound): str(khz) for name in cluster_names for bound in ("MIN_FREQ", "MAX_FREQ")})
        values.update({("GPU", "MIN_FREQ"): str(gpu_hz), ("GPU", "MAX_FREQ"): str(gpu_hz),
                       ("EMC", "MAX_FREQ"): str(emc_hz)})
        out_lines, done = [], set()
        for line in body:
            p = line.split()
            key = (p[0], p[1]) if len(p) >= 3 else None
            if key in values:
                out_lines.append(f"{key[0]} {key[1]} {values[key]}")
                done.add(key)
            else:
                out_lines.append(line)
        # keys the template lacks go where nvpmodel expects them: cores first, then the rest
        missing = [k for k in values if k not in done]
        cores = [f"{k[0]} {k[1]} {values[k]}" for k in missing if k[0] == "CPU_ONLINE"]
        rest = [f"{k[0]} {k[1]} {values[k]}" for k in missing if k[0] != "CPU_ONLINE"]
        out_lines = cores + out_lines + rest
        ident = self.custom_id(text)
        label = f"{NAME_PREFIX}{mode.cores}c_{int(mode.cpu_mhz)}_{int(mode.gpu_mhz)}_{int(mode.mem_mhz)}"
        return "\n".join([f"< POWER_MODEL ID={ident} NAME={label} >", *out_lines]) + "\n"

    def _core_mask_now(self) -> int:
        return 1 | sum(1 << int(c) for c, v in self.sysfs.read_raw()["online"].items() if int(v))

    # ------------------------------------------------------------------ hooks
    def _snapshot(self) -> dict[str, Any]:
        ident, name = self.query()
        if ident is None:
            raise ModeWriteError(
                f"cannot tell the running nvpmodel mode from `{shlex.join(self._cmd('-q'))}`"
            )
        return {
            "kind": "nvpmodel",
            "nvpmodel_id": ident,
            "nvpmodel_name": name,
            "conf_path": str(self.conf_path),
            "conf_text": self._read_conf_exact(),
            "raw": self.sysfs.read_raw(),
        }

    def _run_mode(self, ident: int) -> subprocess.CompletedProcess:
        argv = self._cmd("-m", str(ident))
        return _succeeded(argv, self.runner.run(argv, input="NO\n"))  # never accept nvpmodel's offer to reboot

    def _apply_mode(self, mode: PowerMode) -> tuple[list[str], list[str]]:
        text = self._read_conf_exact()
        ident_now, _ = self.query()
        block = self.block_for(mode, text, template_id=ident_now)
        new_text = insert_custom_block(text, block)
        ident = self.custom_id(text)
        mask_new = sum(1 << i for i in range(mode.cores))
        mask_now = self._core_mask_now()
        self.reboot_caveat = None
        if mask_new != mask_now:
            self.reboot_caveat = (
                f"the CPU core mask changes ({mask_now:#x} -> {mask_new:#x}); nvpmodel may ask for a reboot "
                "to switch to this mode"
            )
        actions = [f"add to {self.conf_path}:\n{block.rstrip()}"]
        if self.dry_run:
            self._say(f"# would add this block to {self.conf_path}:\n{block.rstrip()}")
            if self.reboot_caveat:
                self._say(f"# note: {self.reboot_caveat}")
            self._run_mode(ident)
            return actions + [shlex.join(self._cmd("-m", str(ident)))], []
        self.writer.write(self.conf_path, new_text)
        res = self._run_mode(ident)
        actions.append(shlex.join(self._cmd("-m", str(ident))))
        said = f"{res.stdout}\n{res.stderr}"
        if _REBOOT_RE.search(said):
            # nvpmodel staged the mode for the next boot: undo that, we never reboot a board
            snap = self._session["snapshot"] if self._session else None
            if snap is not None:
                self._run_mode(int(snap["nvpmodel_id"]))
                self.writer.write(self.conf_path, snap["conf_text"])
            why = (
                self.reboot_caveat
                or "the mode differs in a way nvpmodel only applies at boot (e.g. GPU TPC mask)"
            )
            raise RebootRequiredError(
                f"nvpmodel needs a reboot to enter {mode}: {why}.\nnvpmodel said: "
                + " ".join(said.split())[:300]
                + "\nlightning_edge never reboots a board: it answered no, switched back to the original "
                "nvpmodel mode and removed its block, so the next boot is unaffected. Use the sysfs "
                "controller (--device jetson, the default), which switches cores without a reboot, or "
                "add the block yourself and reboot."
            )
        want = self.sysfs.want_of_mode(mode)
        raw = self.sysfs.read_raw()
        mismatches = []
        khz = next(iter(want["cpufreq"].values()))["max_khz"]
        first = self.layout.policies[0][0]
        checks = [
            ("CPU max (kHz)", raw["cpufreq"][first]["max_khz"], khz),
            ("GPU max (Hz)", raw["gpu"]["max_hz"], want["gpu"]["max_hz"]),
            ("online cores", 1 + sum(int(v) for v in raw["online"].values()), mode.cores),
        ]
        for what, got, exp in checks:
            if int(got) != int(exp):
                mismatches.append(f"{what}: nvpmodel mode {ident} should give {exp}, board reads {got}")
        return actions, mismatches

    def _apply_snapshot(self, snapshot: dict[str, Any]) -> tuple[list[str], list[str]]:
        if snapshot.get("kind") != "nvpmodel":
            # left by the sysfs controller (same board, same state file): write its files back
            return self.sysfs.change(snapshot)
        ident = int(snapshot["nvpmodel_id"])
        self._run_mode(ident)
        actions = [shlex.join(self._cmd("-m", str(ident)))]
        if self.dry_run:
            self._say(f"# would put back {snapshot.get('conf_path', self.conf_path)} as found at start")
            return actions, []
        trusted = self._snapshot_trusted
        conf, text = checked_conf(snapshot, self.conf_path, trusted)
        if text is not None and (not conf.exists() or self._read_conf_exact() != text):
            self.writer.write(conf, text)
            actions.append(f"restore {conf} as found at start")
        mismatches = []
        orig = self._mode_of_snapshot(snapshot)
        now = self._read_mode()
        if orig is not None and now != orig:
            mismatches.append(f"after `nvpmodel -m {ident}` the board reads {now}, it read {orig} at start")
        return actions, mismatches
