"""Jetson's on-board INA3221 power monitors, read directly from sysfs (the fast path: 100 Hz and more).

Two kernel layouts are supported, found by globbing (the hwmon index changes across boots):

- **hwmon** (JetPack 5/6, mainline ``ina3221`` driver):
  ``/sys/bus/i2c/drivers/ina3221/<bus>-<addr>/hwmon/hwmon*/`` with ``in{1,2,3}_label`` (rail name, ``NC`` when
  not connected), ``in{N}_input`` (bus voltage, mV) and ``curr{N}_input`` (current, mA);
  power = V x I = mV x mA / 1e6 W. ``update_interval`` (ms) tells how often the chip produces a new value.
- **iio** (JetPack 4, NVIDIA's ``ina3221x`` driver, TX2 / Xavier / Nano):
  ``/sys/bus/i2c/drivers/ina3221x/<bus>-<addr>/iio:device*/`` with ``rail_name_{N}``, ``in_power{N}_input`` (mW),
  ``in_voltage{N}_input`` (mV), ``in_current{N}_input`` (mA).

Every rail is kept by name. The board total is ``VDD_IN`` (or ``POM_5V_IN`` on the Nano) when the board has
one; otherwise the documented sum of the board's rails (Orin AGX: VDD_GPU_SOC + VDD_CPU_CV + VIN_SYS_5V0 +
VDDQ_VDD2_1V8AO, which is what tegrastats / jtop report; Xavier AGX: GPU + CPU + SOC + CV + VDDRQ + SYS5V);
for an unknown rail set without an input rail, the sum of every rail (said in ``notes``).

Every value is checked before it is believed (:func:`~lightning_edge.devices.sensors.base.check_rail`): bounds per
rail from the board's own limits (:func:`rail_bounds`: the shunt resistor and the chip's full scale, or the channel's
critical-current limit; at most 26 V), no negative power, and what the rail can plausibly draw on this module
(:func:`module_cap`: the module's rated power from the catalogue x :data:`MODULE_POWER_MARGIN`, a share of it by the
rail's role, :data:`RAIL_ROLE_SHARE`); a total summed from several rails above the module's cap is not believed
either. Each channel's label is read again on every read: a channel whose label changed since the sensor was opened
is refused (its values belong to another rail now). A rail that vanishes, is denied or returns garbage mid-run
is marked missing in that reading, a rail whose value fails the checks is rejected (and counted); either makes the
total ``partial`` if the rail contributes to it; with no valid rail of the total, the total is ``nan``. Nothing
raises unless no rail at all can be read. See docs/sensors.md.
"""

from __future__ import annotations

import glob
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_edge import catalog
from lightning_edge.devices.sensors.base import (
    PowerReading,
    PowerSensor,
    RailBounds,
    SensorError,
    SensorUnavailableError,
)

HWMON_GLOB = "sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*"
CLASS_HWMON_GLOB = "sys/class/hwmon/hwmon*"
IIO_GLOB = "sys/bus/i2c/drivers/ina3221x/*/iio:device*"

#: rails that are the board's input (the total) when present, in order of preference: the catalogue's input rails
#: (VDD_IN), then the original Jetson Nano's POM_5V_IN (not catalogued; jtop treats both as the input,
#: rbonghi/jetson_stats jtop/core/power.py)
INPUT_RAILS: tuple[str, ...] = tuple(dict.fromkeys(
    [b.rails.input for b in catalog.BOARDS.values() if b.rails is not None and b.rails.input] + ["POM_5V_IN"]))


def _board_sums() -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for key, b in catalog.BOARDS.items():
        if b.rails is not None and b.rails.input is None and b.rails.total and b.rails.total not in out.values():
            out[key] = b.rails.total
    return out


#: boards without an input rail: the rails whose sum is the documented board total, from the catalogue (one entry per
#: rail set, named by the first module that has it: ``orin-agx`` for every AGX Orin, ``xavier-agx``)
BOARD_SUMS: dict[str, tuple[str, ...]] = _board_sums()

#: INA3221 reset defaults, used when the driver does not say (no ``update_interval``):
#: 1.1 ms bus + 1.1 ms shunt conversion per enabled channel, 1 sample (no averaging)
DEFAULT_CONVERSION_MS_PER_CHANNEL = 2.2
DEFAULT_SAMPLES = 1

FIX_PERMISSION = (
    "INA3221 sysfs files are normally world-readable (0444); something made them root-only. Fix for this boot: "
    "`sudo chmod a+r {dir}/*_input` (iio: `{dir}/in_*_input`); permanently, a udev rule in "
    "/etc/udev/rules.d/99-ina3221.rules: "
    "SUBSYSTEM==\"hwmon\", ATTR{{name}}==\"ina3221\", RUN+=\"/bin/sh -c 'chmod a+r /sys%p/*_input'\" "
    "(then `sudo udevadm control --reload && sudo udevadm trigger`), or run as root"
)


class RailIdentityError(Exception):
    """A channel's label is not the one it had when the sensor was opened: its values belong to another rail."""


@dataclass
class Rail:
    """One monitored channel. ``files``: (power mW) for iio, (voltage mV, current mA) for hwmon or for an
    iio channel without ``in_power``. ``label_file``: the channel's label (``in{N}_label``, ``rail_name_{N}``) and
    ``label`` its text when the sensor was opened (``None``: the driver gives no label)."""

    name: str
    chip: str  # i2c device, e.g. "1-0040"
    channel: int  # 1-based for hwmon, 0-based for iio (as the files number them)
    layout: str  # "hwmon" | "iio"
    files: tuple[str, ...]
    label_file: str | None = None
    label: str | None = None

    def read(self) -> tuple[float, float | None, float | None]:
        """``(power W, volts or None, amps or None)``; raises OSError (file gone, permission), ValueError
        (garbage) or :class:`RailIdentityError` (the channel's label changed: checked first, on every read; the
        driver answers it from memory, no I2C transfer). Not yet checked: see :meth:`INA3221Sensor.read`."""
        if self.label_file is not None:
            now = _read_raw(self.label_file).strip().decode("ascii", "replace")
            if now != self.label:
                raise RailIdentityError(f"the channel's label is now {now!r}, not {self.label!r} as when the sensor "
                                        f"was opened ({self.label_file}): its values belong to another rail")
        if len(self.files) == 1:
            return _read_number(self.files[0]) / 1e3, None, None  # mW
        mv = _read_number(self.files[0])
        ma = _read_number(self.files[1])
        return mv * ma / 1e6, mv / 1e3, ma / 1e3


#: INA3221 limits (TI datasheet): bus voltage 0-26 V; shunt voltage full scale 163.84 mV (40 uV LSB x 4096)
INA3221_MAX_BUS_V = 26.0
INA3221_SHUNT_FULL_SCALE_V = 0.16384
#: the shunt Jetson carrier boards use (5 mOhm), for a channel whose sysfs gives neither shunt nor limit
JETSON_DEFAULT_SHUNT_OHM = 0.005

#: a module is believed to draw at most its rated maximum power (catalog.MODULE_MAX_POWER_W) times this margin: MAXN is
#: uncapped and transients exceed the rating (the AGX Orin rated 60 W peaks at 67 W, docs/twin-targets.md;
#: the AGX Xavier rated 30 W drew 33 W on its summed rails, docs/jetson-board-notes.md)
MODULE_POWER_MARGIN = 1.5
#: the share of the module's cap one rail may draw, by the rail's role (:func:`rail_role`). The input rail is the whole
#: module. Every other rail feeds one part of it, and the module always feeds more than that part (memory, always-on
#: domains, regulator losses): no part draws the whole. The GPU's rail is the largest part (AGX Orin VDD_GPU_SOC:
#: 40.4 W under a GPU stress at MAXN, 0.67 of the 60 W rating, NVIDIA forum 323456, docs/jetson-board-notes.md);
#: a CPU, SOC, CV, memory or system rail gets at most half of the cap. No published per-rail maximum exists: these are
#: generous on purpose, bounds no real reading reaches that a current scaled x1000 still crosses. A carrier-board rail
#: (``CVB_*``) powers more than the module: no module cap
RAIL_ROLE_SHARE: dict[str, float | None] = {"input": 1.0, "gpu": 0.75, "part": 0.5, "carrier": None}


def rail_role(name: str) -> str:
    """``input`` (the module's input rail: VDD_IN, POM_5V_IN), ``gpu`` (a rail that feeds the GPU), ``carrier``
    (``CVB_*``: the carrier board's) or ``part`` (any other part of the module: CPU, SOC, CV, memory, 5 V system)."""
    n = name.split("@")[0].upper()
    if n in INPUT_RAILS:
        return "input"
    if n.startswith("CVB_"):
        return "carrier"
    return "gpu" if "GPU" in n else "part"


def module_cap(root: str | os.PathLike[str], board: str = "unknown",
               rails: tuple[str, ...] | list[str] = ()) -> tuple[str | None, float, str]:
    """``(module, cap W, how)``: the most this module is believed to draw, its rated maximum power
    (:data:`~lightning_edge.catalog.MODULE_MAX_POWER_W`) x :data:`MODULE_POWER_MARGIN`. The module is named by
    the device tree under ``root``, else by a rail set only one module has (``board``: ``orin-agx``, ``xavier-agx``);
    otherwise ``module`` is ``None`` and the largest rating of the catalogued modules that carry these ``rails`` is
    used (of every module when none does)."""
    key = catalog.detect_module(root) or (board if board in catalog.MODULE_MAX_POWER_W else None)
    if key is not None and key in catalog.MODULE_MAX_POWER_W:
        rated = catalog.MODULE_MAX_POWER_W[key]
        return key, rated * MODULE_POWER_MARGIN, f"{key} rated {rated:g} W x {MODULE_POWER_MARGIN:g}"
    names = {r.split("@")[0] for r in rails}
    carriers = [k for k, b in catalog.BOARDS.items()
                if names and b.rails is not None and names <= set(b.rails.names) and k in catalog.MODULE_MAX_POWER_W]
    if carriers:
        top = max(carriers, key=lambda k: catalog.MODULE_MAX_POWER_W[k])
        rated = catalog.MODULE_MAX_POWER_W[top]
        return None, rated * MODULE_POWER_MARGIN, (
            f"module not named by the device tree: the largest rating of the modules with these rails "
            f"({', '.join(carriers)}), {top} {rated:g} W, x {MODULE_POWER_MARGIN:g}")
    rated = max(catalog.MODULE_MAX_POWER_W.values())
    return None, rated * MODULE_POWER_MARGIN, (f"module not named by the device tree: the largest rating in the "
                                               f"catalogue, {rated:g} W, x {MODULE_POWER_MARGIN:g}")


def rail_bounds(rail: Rail, chip_dir: str, module_cap_w: float | None = None, module_how: str = "") -> RailBounds:
    """A rail's physical maximum, from the board's own limits: hwmon gives the channel's shunt resistor
    (``shunt{N}_resistor``, uOhm), so the current cannot exceed the ADC's full scale 163.84 mV / R; iio gives the
    channel's critical-current limit (``crit_current_limit_{N}``, mA); else the Jetson's 5 mOhm shunt. The bus
    voltage is at most the chip's 26 V. With ``module_cap_w`` (:func:`module_cap`), also what the rail can plausibly
    draw: its role's share of the module's cap (:data:`RAIL_ROLE_SHARE`)."""
    amps = source = None
    if rail.layout == "hwmon":
        try:
            uohm = float(_read_text(os.path.join(chip_dir, f"shunt{rail.channel}_resistor")))
            if uohm > 0:
                amps = INA3221_SHUNT_FULL_SCALE_V / (uohm * 1e-6)
                source = f"INA3221 full scale 163.84 mV over the {uohm / 1e3:g} mOhm shunt"
        except (OSError, ValueError):
            pass
    else:
        try:
            ma = float(_read_text(os.path.join(chip_dir, f"crit_current_limit_{rail.channel}")))
            if ma > 0:
                amps, source = ma / 1e3, f"the channel's critical-current limit {ma:g} mA"
        except (OSError, ValueError):
            pass
    if amps is None:
        amps = INA3221_SHUNT_FULL_SCALE_V / JETSON_DEFAULT_SHUNT_OHM
        source = "INA3221 full scale over a Jetson's 5 mOhm shunt (the board does not say)"
    cap_w, cap_source = None, ""
    role = rail_role(rail.name)
    share = RAIL_ROLE_SHARE[role]
    if module_cap_w is not None and share is not None:
        cap_w = share * module_cap_w
        cap_source = (f"the module's input: {module_how}" if role == "input" else
                      f"a {role} rail: {share:g} of the module's {module_cap_w:g} W, {module_how}")
    return RailBounds(max_w=INA3221_MAX_BUS_V * amps, source=f"{source}, at most {INA3221_MAX_BUS_V:g} V",
                      max_v=INA3221_MAX_BUS_V, max_a=amps, cap_w=cap_w, cap_source=cap_source)


def _read_text(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read().strip()


def _read_raw(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 64)
    finally:
        os.close(fd)


def _read_number(path: str) -> float:
    data = _read_raw(path)
    return float(int(data))  # int() accepts b"1234\n"; anything else is garbage (ValueError); a number is checked
    # against the rail's bounds by the sensor (check_rail), so an implausible one is rejected and counted


def _index(path: str, prefix: str) -> int:
    tail = os.path.basename(path.rstrip("/"))[len(prefix):]
    return int(tail) if tail.isdigit() else 1 << 30


@dataclass
class Discovery:
    """What a probe found: the rails, per-chip update intervals, and the first error that makes the
    sensor unusable (``None`` when usable)."""

    layout: str | None
    rails: list[Rail]
    chip_dirs: dict[str, str]  # chip -> its hwmon/iio dir
    update_ms: dict[str, float]
    skipped: list[str]  # "1-0041 ch2 (NC)" ...
    error: str | None


def _hwmon_dirs(root: Path) -> list[str]:
    dirs = sorted(glob.glob(str(root / HWMON_GLOB)))
    if dirs:
        return dirs
    out = []  # some kernels only show it through /sys/class/hwmon
    for d in sorted(glob.glob(str(root / CLASS_HWMON_GLOB)), key=lambda p: _index(p, "hwmon")):
        try:
            if _read_text(os.path.join(d, "name")) == "ina3221":
                out.append(d)
        except OSError:
            continue
    return out


def _hwmon_chip(d: str) -> str:
    real = os.path.realpath(d)
    parts = Path(real).parts
    if len(parts) >= 3 and parts[-2] == "hwmon":
        return parts[-3]
    return os.path.basename(real)


def discover(root: str | os.PathLike[str] = "/") -> Discovery:
    """Probe ``root`` for INA3221 monitors (hwmon first, then iio). Never raises."""
    root = Path(root)
    hw = _hwmon_dirs(root)
    if hw:
        return _discover_hwmon(hw)
    iio = sorted(glob.glob(str(root / IIO_GLOB)))
    if iio:
        return _discover_iio(iio)
    return Discovery(None, [], {}, {}, [], f"no INA3221 found under {root / 'sys/bus/i2c/drivers'} "
                     "(looked for ina3221/*/hwmon/hwmon* and ina3221x/*/iio:device*): not a Jetson?")


def _check_readable(rail: Rail, d: str) -> str | None:
    for f in rail.files:
        try:
            _read_number(f)
        except PermissionError:
            return f"permission denied reading {f}. " + FIX_PERMISSION.format(dir=d)
        except (OSError, ValueError):
            return None  # a bad value at probe time is not fatal: that reading marks the rail missing
    return None


def _discover_hwmon(dirs: list[str]) -> Discovery:
    rails: list[Rail] = []
    chip_dirs: dict[str, str] = {}
    update_ms: dict[str, float] = {}
    skipped: list[str] = []
    for d in dirs:
        d = os.path.realpath(d)
        chip = _hwmon_chip(d)
        chip_dirs[chip] = d
        enabled = 0
        for ch in (1, 2, 3):
            vin = os.path.join(d, f"in{ch}_input")
            cur = os.path.join(d, f"curr{ch}_input")
            label_f = os.path.join(d, f"in{ch}_label")
            if not (os.path.exists(vin) and os.path.exists(cur)):
                continue
            label_path: str | None = label_f if os.path.exists(label_f) else None
            try:
                label = _read_text(label_f) if label_path else f"{chip}:in{ch}"
            except PermissionError:
                return Discovery("hwmon", [], chip_dirs, {}, skipped,
                                 f"permission denied reading {label_f}. " + FIX_PERMISSION.format(dir=d))
            except OSError:
                label, label_path = f"{chip}:in{ch}", None
            if label.upper() == "NC" or not label:
                skipped.append(f"{chip} ch{ch} (NC)")
                continue
            try:
                if _read_text(os.path.join(d, f"in{ch}_enable")) == "0":
                    skipped.append(f"{chip} ch{ch} {label} (disabled)")
                    continue
            except OSError:
                pass
            rail = Rail(label, chip, ch, "hwmon", (vin, cur), label_path, label if label_path else None)
            err = _check_readable(rail, d)
            if err:
                return Discovery("hwmon", [], chip_dirs, {}, skipped, err)
            rails.append(rail)
            enabled += 1
        update_ms[chip] = _update_interval_ms(d, enabled)
    return _finish("hwmon", rails, chip_dirs, update_ms, skipped)


def _update_interval_ms(d: str, channels: int) -> float:
    try:
        ms = float(_read_text(os.path.join(d, "update_interval")))
        if ms > 0:
            return ms
    except (OSError, ValueError):
        pass
    try:
        samples = int(_read_text(os.path.join(d, "samples")))
    except (OSError, ValueError):
        samples = DEFAULT_SAMPLES
    return max(channels, 1) * max(samples, 1) * DEFAULT_CONVERSION_MS_PER_CHANNEL


def _discover_iio(dirs: list[str]) -> Discovery:
    rails: list[Rail] = []
    chip_dirs: dict[str, str] = {}
    update_ms: dict[str, float] = {}
    skipped: list[str] = []
    for d in dirs:
        chip = Path(d).parts[-2]  # .../ina3221x/7-0040/iio:device0 -> 7-0040
        chip_dirs[chip] = d
        enabled = 0
        for name_f in sorted(glob.glob(os.path.join(d, "rail_name_*")), key=lambda p: _index(p, "rail_name_")):
            ch = _index(name_f, "rail_name_")
            try:
                label = _read_text(name_f)
            except PermissionError:
                return Discovery("iio", [], chip_dirs, {}, skipped,
                                 f"permission denied reading {name_f}. " + FIX_PERMISSION.format(dir=d))
            except OSError:
                continue
            if label.upper() == "NC" or not label:
                skipped.append(f"{chip} ch{ch} (NC)")
                continue
            pw = os.path.join(d, f"in_power{ch}_input")
            if os.path.exists(pw):
                files: tuple[str, ...] = (pw,)
            else:
                files = (os.path.join(d, f"in_voltage{ch}_input"), os.path.join(d, f"in_current{ch}_input"))
                if not all(os.path.exists(f) for f in files):
                    skipped.append(f"{chip} ch{ch} {label} (no power/voltage/current files)")
                    continue
            rail = Rail(label, chip, ch, "iio", files, name_f, label)
            err = _check_readable(rail, d)
            if err:
                return Discovery("iio", [], chip_dirs, {}, skipped, err)
            rails.append(rail)
            enabled += 1
        # the iio driver does not expose its conversion settings: assume the chip's reset defaults
        update_ms[chip] = max(enabled, 1) * DEFAULT_SAMPLES * DEFAULT_CONVERSION_MS_PER_CHANNEL
    return _finish("iio", rails, chip_dirs, update_ms, skipped)


def _finish(layout: str, rails: list[Rail], chip_dirs: dict[str, str], update_ms: dict[str, float],
            skipped: list[str]) -> Discovery:
    err = None
    if not rails:
        err = (f"INA3221 ({layout}) found at {', '.join(chip_dirs.values())} but no connected, readable rail "
               f"(skipped: {', '.join(skipped) or 'none'})")
    seen: set[str] = set()
    for r in rails:  # keep every rail by a unique name
        if r.name in seen:
            r.name = f"{r.name}@{r.chip}"
        else:
            seen.add(r.name)
    return Discovery(layout, rails, chip_dirs, update_ms, skipped, err)


def board_total(rails: list[str] | tuple[str, ...]) -> tuple[tuple[str, ...], str, str]:
    """How the board total is formed from these rail names: ``(rails summed, board, description)``."""
    names = set(rails)
    for r in INPUT_RAILS:
        if r in names:
            return (r,), "input-rail", f"{r} (the board's input rail)"
    for board, parts in BOARD_SUMS.items():
        if set(parts) <= names:
            return parts, board, f"{' + '.join(parts)} (documented sum for {board}; no input rail)"
    parts = tuple(rails)
    return parts, "unknown", (f"sum of every rail ({' + '.join(parts)}): unknown board without an input rail, "
                              "nested rails would be double counted")


class INA3221Sensor(PowerSensor):
    """Jetson INA3221 rails through sysfs. ``INA3221Sensor(root="/", clock_ns=time.perf_counter_ns,
    update_period_s=None)``; raises :class:`SensorUnavailableError` (with the reason) when there is none.

    ``update_period_s``: how often the chip produces a new value; by default the driver's ``update_interval``
    (hwmon) or, when it does not say, the INA3221 reset default of 2.2 ms per enabled channel (1.1 ms bus +
    1.1 ms shunt conversion, no averaging), the slowest chip deciding.
    """

    name = "jetson"
    is_sysfs = True

    def __init__(self, root: str | os.PathLike[str] = "/", *, clock_ns: Callable[[], int] = time.perf_counter_ns,
                 update_period_s: float | None = None) -> None:
        found = discover(root)
        if found.error:
            raise SensorUnavailableError(f"jetson: {found.error}", {"jetson": found.error})
        self.root = Path(root)
        self.layout: str = found.layout or "?"
        self._rails = found.rails
        self._chip_dirs = found.chip_dirs
        self.skipped = tuple(found.skipped)
        self.rails = tuple(r.name for r in found.rails)
        self.total_rails, self.board, self.total_desc = board_total(self.rails)
        self.update_ms = dict(found.update_ms)
        self.update_period_s = float(update_period_s) if update_period_s else max(found.update_ms.values()) / 1e3
        self.clock_ns = clock_ns
        self._last_relocate_ns = 0
        self.module, self.module_cap_w, self._cap_how = module_cap(root, self.board, self.rails)
        self.bounds = {r.name: rail_bounds(r, self._chip_dirs.get(r.chip, ""), self.module_cap_w, self._cap_how)
                       for r in self._rails}
        self.label = f"INA3221 ({self.layout}) total = {self.total_desc}"
        self.notes = (f"rails: {', '.join(self.rails)}; total = {self.total_desc}; chip update every "
                      f"{self.update_period_s * 1e3:g} ms; believed up to {self.module_cap_w:g} W "
                      f"({self._cap_how})")
        if self.board == "orin-agx":
            self.notes += ("; Orin AGX has no VDD_IN: the sum is the module's four monitored rails (what "
                           "tegrastats/jtop report) and leaves out regulator losses and the carrier board")

    @classmethod
    def why_unavailable(cls, root: str | os.PathLike[str] = "/", **_: Any) -> str | None:
        return discover(root).error

    def read(self) -> PowerReading:
        t_ns = int(self.clock_ns())
        rails_w: dict[str, float] = {}
        missing: list[str] = []
        rejected: list[str] = []
        for r in self._rails:
            try:
                w, volts, amps = r.read()
            except RailIdentityError as exc:  # relabelled: never its values under the old name
                self.reject(r.name, str(exc))
                rejected.append(r.name)
                continue
            except (OSError, ValueError):
                missing.append(r.name)
                continue
            w = self.check(r.name, w, volts=volts, amps=amps)  # negative, above the rail's maximum or cap: rejected
            if not math.isfinite(w):
                rejected.append(r.name)
                continue
            rails_w[r.name] = w
        if not rails_w and not rejected:
            if self._relocate(t_ns):
                return self.read()
            raise SensorError(f"jetson: no INA3221 rail could be read ({', '.join(missing)}): "
                              f"driver unbound or files gone under {', '.join(self._chip_dirs.values())}")
        if missing and self._relocate(t_ns):  # a whole chip moved (hwmon renumbered)? retry once
            return self.read()
        present = [rails_w[r] for r in self.total_rails if r in rails_w]
        # a partial sum is flagged partial (never passed off as the total); with no valid rail there is no total
        total = sum(present) if present else math.nan
        # a documented sum (not an unknown board's, which may count nested rails twice) above the module's cap: which
        # rail is wrong is unknown, so none of them is believed
        if self.board in BOARD_SUMS and total > self.module_cap_w:
            why = (f"the rails of the total sum to {total:.4g} W, above the module's {self.module_cap_w:g} W "
                   f"({self._cap_how})")
            for name in self.total_rails:
                if rails_w.pop(name, None) is not None:
                    self.reject(name, why)
                    rejected.append(name)
            total = math.nan
        total_missing = [r for r in self.total_rails if r not in rails_w]
        return PowerReading(t_ns, total, rails_w, partial=bool(total_missing), missing=tuple(missing),
                            rejected=tuple(rejected))

    def _relocate(self, now_ns: int) -> bool:
        """Re-glob the hwmon index of chips whose directory vanished (at most once a second)."""
        if self.layout != "hwmon" or now_ns - self._last_relocate_ns < 1_000_000_000:
            return False
        self._last_relocate_ns = now_ns
        moved = False
        for chip, d in list(self._chip_dirs.items()):
            if os.path.isdir(d):
                continue
            parent = os.path.dirname(d)  # .../1-0040/hwmon
            cands = sorted(glob.glob(os.path.join(parent, "hwmon*")))
            if not cands:
                continue
            new = cands[0]
            self._chip_dirs[chip] = new
            for r in self._rails:
                if r.chip == chip:
                    r.files = tuple(os.path.join(new, os.path.basename(f)) for f in r.files)
                    if r.label_file is not None:
                        r.label_file = os.path.join(new, os.path.basename(r.label_file))
            moved = True
        return moved


__all__ = ["BOARD_SUMS", "INPUT_RAILS", "MODULE_POWER_MARGIN", "RAIL_ROLE_SHARE", "INA3221Sensor", "Rail",
           "RailIdentityError", "board_total", "discover", "module_cap", "rail_bounds", "rail_role"]
