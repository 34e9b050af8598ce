"""Realistic fake INA3221 sysfs trees (Jetson power monitors), built from the board catalogue, and the faults a real
board can show.

:func:`build_ina` lays out the rails of any catalogued module (``catalog.BOARDS[key].rails``: the names in channel
order, three channels per INA3221, the unused ones ``NC``), as hwmon (JetPack 5 and later) or as JetPack 4's iio, with
the module's device tree. The readings (mV, mA) are fake values, idle-like, not facts; the i2c bus of a chip is the
fake's (the sensor globs it). The named builders below are that for one module each:

- :func:`build_orin_agx_ina` (JetPack 5/6 hwmon): ``sys/bus/i2c/drivers/ina3221/1-0040/hwmon/hwmonN`` with
  VDD_GPU_SOC, VDD_CPU_CV, VIN_SYS_5V0 and ``1-0041/hwmon/hwmonM`` with VDDQ_VDD2_1V8AO + two ``NC`` channels;
  ``in{1,2,3}_label``, ``in{N}_input`` (mV), ``curr{N}_input`` (mA), ``in{N}_enable``, ``name``, ``samples``,
  ``update_interval`` (ms), ``shunt{N}_resistor`` (uOhm), ``in{4,5,6}_input`` (shunt uV); also the
  ``sys/class/hwmon/hwmonN`` symlinks.
- :func:`build_orin_nx_ina` (Orin NX / Orin Nano, hwmon): VDD_IN (total), VDD_CPU_GPU_CV, VDD_SOC.
- :func:`build_xavier_nx_jp4` (JetPack 4 iio): ``sys/bus/i2c/drivers/ina3221x/7-0040/iio:device0`` with
  ``rail_name_{0,1,2}``, ``in_power{N}_input`` (mW), ``in_voltage{N}_input`` (mV), ``in_current{N}_input`` (mA).
- :func:`build_tx2_jp4` (JetPack 4 iio, two chips): 0-0040 VDD_SYS_GPU / VDD_SYS_SOC / VDD_4V0_WIFI and
  0-0041 VDD_IN / VDD_SYS_CPU / VDD_SYS_DDR.

Each builder also writes the module's device tree (``proc/device-tree/{model,compatible}``, as on the board;
``module=None`` leaves it out: a module the tree does not name).

Faults: ``board.set(rail, mv=, ma=)`` / ``board.set_power_w(rail, w)``, ``board.remove(rail)`` (the files
vanish), ``board.deny(rail)`` (chmod 000), ``board.garbage(rail, text)``, ``board.renumber(chip, index)``
(the hwmon index changes, as across boots), ``board.swap_labels(a, b)`` (two channels' labels exchanged, as a
driver re-probed with another channel map would show: each channel's values now belong to the other rail). Tests running as root can't be refused a chmod-000 file:
:func:`run_unprivileged` runs a function in a forked child as ``nobody`` (trees must then live in a
world-traversable directory: see :func:`world_tmpdir`).
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HWMON_DRIVER = "sys/bus/i2c/drivers/ina3221"
IIO_DRIVER = "sys/bus/i2c/drivers/ina3221x"

# (rail, mV, mA) per channel; None = "NC": TX2 (not catalogued: the original Jetson family, JetPack 4 only)
TX2 = {
    "0-0040": [("VDD_SYS_GPU", 19128, 8), ("VDD_SYS_SOC", 19136, 40), ("VDD_4V0_WIFI", 19136, 0)],
    "0-0041": [("VDD_IN", 19072, 104), ("VDD_SYS_CPU", 19120, 8), ("VDD_SYS_DDR", 4832, 120)],
}


@dataclass
class FakeRail:
    name: str
    chip: str
    channel: int  # hwmon: 1..3, iio: 0..2
    mv: float
    ma: float

    @property
    def power_w(self) -> float:
        return self.mv * self.ma / 1e6


@dataclass
class FakeINA3221:
    """A fake tree; ``rails`` by name; ``dirs`` chip -> hwmon/iio directory."""

    root: Path
    layout: str  # "hwmon" | "iio"
    rails: dict[str, FakeRail] = field(default_factory=dict)
    dirs: dict[str, Path] = field(default_factory=dict)

    # ------------------------------------------------------------------ paths
    def files(self, rail: str) -> list[Path]:
        r = self.rails[rail]
        d = self.dirs[r.chip]
        if self.layout == "hwmon":
            return [d / f"in{r.channel}_input", d / f"curr{r.channel}_input"]
        return [d / f"in_power{r.channel}_input", d / f"in_voltage{r.channel}_input",
                d / f"in_current{r.channel}_input"]

    def power_w(self, rail: str) -> float:
        """What the sensor should report for ``rail`` (iio: the driver's rounded mW)."""
        r = self.rails[rail]
        if self.layout == "iio":
            return round(r.mv * r.ma / 1000) / 1e3
        return r.power_w

    # ------------------------------------------------------------------ values and faults
    def _write(self, rail: str) -> None:
        r = self.rails[rail]
        d = self.dirs[r.chip]
        if self.layout == "hwmon":
            _put(d / f"in{r.channel}_input", int(round(r.mv)))
            _put(d / f"curr{r.channel}_input", int(round(r.ma)))
        else:
            _put(d / f"in_power{r.channel}_input", int(round(r.mv * r.ma / 1000)))
            _put(d / f"in_voltage{r.channel}_input", int(round(r.mv)))
            _put(d / f"in_current{r.channel}_input", int(round(r.ma)))

    def set(self, rail: str, *, mv: float | None = None, ma: float | None = None) -> None:
        r = self.rails[rail]
        if mv is not None:
            r.mv = mv
        if ma is not None:
            r.ma = ma
        self._write(rail)

    def set_power_w(self, rail: str, w: float) -> None:
        """Keep the rail's voltage, change its current so that V x I = ``w``."""
        r = self.rails[rail]
        self.set(rail, ma=w * 1e6 / r.mv)

    def remove(self, rail: str) -> None:
        for f in self.files(rail):
            f.unlink(missing_ok=True)

    def restore(self, rail: str) -> None:
        for f in self.files(rail):
            if f.exists():
                f.chmod(0o444)
        self._write(rail)

    def deny(self, rail: str) -> None:
        for f in self.files(rail):
            f.chmod(0)

    def deny_labels(self) -> None:
        for d in self.dirs.values():
            for f in list(d.glob("in*_label")) + list(d.glob("rail_name_*")):
                f.chmod(0)

    def garbage(self, rail: str, text: str = "\x00\x7fgarbage") -> None:
        for f in self.files(rail):
            f.chmod(0o644)
            f.write_text(text)

    def label_file(self, rail: str) -> Path:
        r = self.rails[rail]
        d = self.dirs[r.chip]
        return d / (f"in{r.channel}_label" if self.layout == "hwmon" else f"rail_name_{r.channel}")

    def swap_labels(self, a: str, b: str) -> None:
        """Exchange the labels of two channels: from now on rail ``a``'s values are on ``b``'s old channel (and the
        fake's ``rails`` follow, so ``power_w(name)`` stays the truth by name)."""
        ra, rb = self.rails[a], self.rails[b]
        fa, fb = self.label_file(a), self.label_file(b)
        _put(fa, b)
        _put(fb, a)
        ra.chip, rb.chip = rb.chip, ra.chip
        ra.channel, rb.channel = rb.channel, ra.channel
        self._write(a)
        self._write(b)

    def renumber(self, chip: str, index: int) -> Path:
        """Move the chip's ``hwmonN`` to ``hwmon{index}`` (and its /sys/class/hwmon link)."""
        assert self.layout == "hwmon"
        old = self.dirs[chip]
        new = old.parent / f"hwmon{index}"
        old.rename(new)
        cls = self.root / "sys/class/hwmon"
        (cls / old.name).unlink(missing_ok=True)
        (cls / new.name).symlink_to(new)
        self.dirs[chip] = new
        return new


#: fake idle readings (mV, mA) by module, where the tests rely on exact values; any other rail reads 5000 mV x 200 mA
READINGS: dict[str, dict[str, tuple[float, float]]] = {
    "orin-agx": {"VDD_GPU_SOC": (4976, 803), "VDD_CPU_CV": (4984, 160), "VIN_SYS_5V0": (5000, 560),
                 "VDDQ_VDD2_1V8AO": (4992, 100)},
    "orin-nx-16gb": {"VDD_IN": (5048, 1446), "VDD_CPU_GPU_CV": (5040, 253), "VDD_SOC": (5040, 276)},
    "xavier-nx": {"VDD_IN": (5064, 1176), "VDD_CPU_GPU_CV": (5056, 182), "VDD_SOC": (5064, 300)},
}
#: the i2c bus the fake puts a module's chips on (hwmon: bus 1, as the twin targets (docs/twin-targets.md) have the AGX Orin; JetPack 4's
#: Xavier NX: bus 7): the fake's choice, the sensor globs it
_BUS = {"hwmon": "1", "iio": "7"}


def chips_of(key: str, layout: str = "hwmon") -> dict[str, list]:
    """The module's INA3221 chips as the builders take them: ``{"1-0040": [(rail, mV, mA) or None x 3], ...}``: the
    catalogue's rail names in channel order, three to a chip at 0x40, 0x41..."""
    from lightning_edge import catalog

    rails = catalog.board_info(key).rails
    assert rails is not None, f"{key}: no rails in the catalogue"
    readings = READINGS.get(key, {})
    names: list[str | None] = list(rails.names)
    names += [None] * (-len(names) % 3)
    chips: dict[str, list] = {}
    for i in range(0, len(names), 3):
        chips[f"{_BUS[layout]}-{0x40 + i // 3:04x}"] = [
            None if n is None else (n, *readings.get(n, (5000, 200))) for n in names[i:i + 3]]
    return chips


def build_ina(root: Path, key: str, layout: str = "hwmon", hwmon_index: tuple[int, ...] | None = None,
              module: str | None | bool = True) -> FakeINA3221:
    """The INA3221 tree of catalogued module ``key``: ``layout`` ``hwmon`` (JetPack 5+) or ``iio`` (JetPack 4), with
    the module's device tree (``module=None``: none, a module the tree does not name)."""
    _device_tree(root, key if module is True else module)
    chips = chips_of(key, layout)
    return _build_hwmon(root, chips, hwmon_index) if layout == "hwmon" else _build_iio(root, chips)


def _put(path: Path, value: Any, mode: int = 0o444) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.chmod(0o644)
    path.write_text(f"{value}\n")
    path.chmod(mode)


def _device_tree(root: Path, module: str | None) -> None:
    """``proc/device-tree/model`` and ``compatible`` (NUL-separated) of ``module`` (a catalogue key, or ``tx2``); an
    existing tree (a fake Jetson built in the same root) is kept."""
    if module is None:
        return
    if module == "tx2":
        model, compatible = "quill", ("nvidia,quill", "nvidia,tegra186")
    else:
        from lightning_edge import catalog
        from tests.fakes.jetson_sysfs import device_tree

        model, compatible = device_tree(catalog.board_info(module))
    dt = Path(root) / "proc/device-tree"
    if (dt / "compatible").exists():
        return
    dt.mkdir(parents=True, exist_ok=True)
    (dt / "model").write_text(model + "\x00")
    (dt / "compatible").write_text("".join(c + "\x00" for c in compatible))


def _build_hwmon(root: Path, chips: dict, indices: tuple[int, ...] | None) -> FakeINA3221:
    root = Path(root)
    fake = FakeINA3221(root, "hwmon")
    cls = root / "sys/class/hwmon"
    cls.mkdir(parents=True, exist_ok=True)
    indices = indices or tuple(range(1, len(chips) + 1))
    for (chip, channels), idx in zip(chips.items(), indices):
        dev = root / HWMON_DRIVER / chip
        d = dev / "hwmon" / f"hwmon{idx}"
        d.mkdir(parents=True)
        _put(dev / "name", "ina3221")
        _put(d / "name", "ina3221")
        _put(d / "samples", 1, 0o644)
        enabled = sum(1 for c in channels if c is not None)
        _put(d / "update_interval", int(enabled * 2.2) or 1, 0o644)
        fake.dirs[chip] = d
        for ch, spec in enumerate(channels, start=1):
            _put(d / f"shunt{ch}_resistor", 5000, 0o644)
            _put(d / f"curr{ch}_crit", 32760, 0o644)
            _put(d / f"curr{ch}_max", 32760, 0o644)
            if spec is None:
                _put(d / f"in{ch}_label", "NC")
                _put(d / f"in{ch}_enable", 0, 0o644)
                _put(d / f"in{ch}_input", 0)
                _put(d / f"curr{ch}_input", 0)
                _put(d / f"in{ch + 3}_input", 0)
                continue
            name, mv, ma = spec
            _put(d / f"in{ch}_label", name)
            _put(d / f"in{ch}_enable", 1, 0o644)
            _put(d / f"in{ch + 3}_input", int(ma * 5))  # shunt voltage, uV (5 mOhm)
            fake.rails[name] = FakeRail(name, chip, ch, mv, ma)
            fake._write(name)
        _put(d / "in7_label", "sum of shunt voltages")
        (cls / d.name).symlink_to(d)
    return fake


def _build_iio(root: Path, chips: dict) -> FakeINA3221:
    root = Path(root)
    fake = FakeINA3221(root, "iio")
    for i, (chip, channels) in enumerate(chips.items()):
        d = root / IIO_DRIVER / chip / f"iio:device{i}"
        d.mkdir(parents=True)
        _put(d / "name", "ina3221x")
        _put(d / "running_mode", "0", 0o644)
        fake.dirs[chip] = d
        for ch, spec in enumerate(channels):
            if spec is None:
                _put(d / f"rail_name_{ch}", "NC")
                continue
            name, mv, ma = spec
            _put(d / f"rail_name_{ch}", name)
            _put(d / f"crit_current_limit_{ch}", 4000, 0o644)
            _put(d / f"warn_current_limit_{ch}", 3000, 0o644)
            fake.rails[name] = FakeRail(name, chip, ch, mv, ma)
            fake._write(name)
    return fake


def build_orin_agx_ina(root: Path, hwmon_index: tuple[int, int] = (1, 2),
                       module: str | None = "orin-agx") -> FakeINA3221:
    """Jetson AGX Orin (JetPack 5/6): two INA3221 on i2c-1, four connected rails, no VDD_IN."""
    _device_tree(root, module)
    return _build_hwmon(root, chips_of("orin-agx"), hwmon_index)


def build_orin_nx_ina(root: Path, hwmon_index: int = 1, module: str | None = "orin-nx-16gb") -> FakeINA3221:
    """Jetson Orin NX / Orin Nano (JetPack 5/6): one INA3221, VDD_IN is the module's total."""
    _device_tree(root, module)
    return _build_hwmon(root, chips_of("orin-nx-16gb"), (hwmon_index,))


def build_xavier_nx_jp4(root: Path, module: str | None = "xavier-nx") -> FakeINA3221:
    """Jetson Xavier NX on JetPack 4: NVIDIA's ina3221x iio driver, VDD_IN total."""
    _device_tree(root, module)
    return _build_iio(root, chips_of("xavier-nx", "iio"))


def build_tx2_jp4(root: Path, module: str | None = "tx2") -> FakeINA3221:
    """Jetson TX2 on JetPack 4: two ina3221x chips, VDD_IN on the second one."""
    _device_tree(root, module)
    return _build_iio(root, TX2)


# ---------------------------------------------------------------------- running as an unprivileged user
def world_tmpdir() -> Path:
    """A fresh 0755 directory under /tmp that ``nobody`` can traverse (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="le-ina3221-", dir="/tmp"))
    d.chmod(0o755)
    return d


def remove_tree(d: Path) -> None:
    for p in [d, *d.rglob("*")]:
        if p.is_symlink():
            continue
        try:
            p.chmod(0o755 if p.is_dir() else 0o644)
        except OSError:
            pass
    shutil.rmtree(d, ignore_errors=True)


def run_unprivileged(fn, *args: Any) -> Any:
    """``fn(*args)`` as a user that file permissions apply to. Not root: called directly. Root: in a forked
    child that drops to uid/gid 65534 (nobody); the result (or exception) comes back pickled."""
    if os.geteuid() != 0:
        return fn(*args)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                out: Any = ("ok", fn(*args))
            except BaseException as exc:  # noqa: BLE001 - shipped back to the parent
                out = ("err", exc)
            data = pickle.dumps(out)
            with os.fdopen(w, "wb") as f:
                f.write(data)
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        raise RuntimeError(f"unprivileged child failed (status {status})")
    kind, value = pickle.loads(data)
    if kind == "err":
        raise value
    return value
