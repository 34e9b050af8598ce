"""Device profiles: a versioned JSON file of roofline coefficients per power mode of one device model.

Format (``schema`` ``lightning_edge.device_profile``, ``version`` 1; docs/roofline.md has the full
description and an example)::

    {
      "schema": "lightning_edge.device_profile", "version": 1,
      "device": "jetson-orin-agx-32gb",
      "source": "measured" | "published" | "simulated",
      "created": "2025-01-01T00:00:00+00:00",           # ISO 8601
      "host": {...} | "..." | null,                       # where it was measured / transcribed from
      "mode_space": {"cores": [...], "cpu_mhz": [...], "gpu_mhz": [...], "mem_mhz": [...]},   # optional
      "modes": [
        {"mode": "12c/2201.6/1300.5/3199",                   # cores c / CPU MHz / GPU MHz / memory MHz, or a name
         "precision": {"fp32": {"peak_flops": 1.47e13, "bandwidth": 1.644e11}, "fp16": {...}},
         "eps_flop": 3.86e-12, "eps_mop": 1.4138e-10, "static_power_w": 17.9,   # null when not measured
         "cpu": {...},                                    # optional CPU-side model, free form
         "note": "...", "extra": {...}}                   # optional
      ],
      "fit": {...},                                       # optional knob-function model (the twin's)
      "reference": {...}, "notes": "..."                  # optional, free form, never read by the code
    }

Mode strings stay strings here; ``parse_mode`` reads the four knobs when needed, and lookups tolerate a 1 MHz
difference (profiles written with truncated MHz, ``12c/2201/1300/3199``, match ``12c/2201.6/1300.5/3199``).
"""

from __future__ import annotations

import copy
import datetime as _dt
import difflib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lightning_edge._compat import data_dir
from lightning_edge._jsonfile import is_json_file, read_json, write_file
from lightning_edge.roofline.model import Roofline

__all__ = [
    "SCHEMA", "VERSION", "SOURCES", "ProfileError", "ModeLookupError", "ModeEntry", "DeviceProfile",
    "load_profile", "save_profile", "validate_profile", "parse_mode", "format_mode", "available_profiles",
]

SCHEMA = "lightning_edge.device_profile"
VERSION = 1
SOURCES = ("measured", "published", "simulated")
_MODE_RE = re.compile(r"^(\d+)c/(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)$")
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.+-]*$")
_PREC_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_TOP_KEYS = ("schema", "version", "device", "source", "created", "host", "mode_space", "modes", "fit",
             "reference", "notes")
_REQUIRED_TOP = ("schema", "version", "device", "source", "created", "modes")
_MODE_KEYS = ("mode", "precision", "eps_flop", "eps_mop", "static_power_w", "cpu", "note", "extra", "source")
_PREC_KEYS = ("peak_flops", "bandwidth", "eps_flop", "eps_mop", "note", "extra")
_SPACE_KEYS = ("cores", "cpu_mhz", "gpu_mhz", "mem_mhz")


class ModeLookupError(KeyError, ValueError):
    """A mode or precision that a profile does not have (a KeyError and a ValueError, with a readable message)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ProfileError(ValueError):
    """A device profile that does not follow the format. ``errors`` lists every problem found,
    each as ``"<field path>: <what is wrong>; <how to fix it>"``."""

    def __init__(self, errors: list[str], where: str | None = None):
        self.errors = list(errors)
        head = f"invalid device profile{f' {where}' if where else ''}"
        if len(self.errors) == 1:
            msg = f"{head}: {self.errors[0]}"
        else:
            msg = f"{head} ({len(self.errors)} problems):\n  - " + "\n  - ".join(self.errors)
        super().__init__(msg)


# ---------------------------------------------------------------------------------------------- modes
def parse_mode(mode: str) -> tuple[int, float, float, float] | None:
    """``"12c/2201.6/1300.5/3199"`` -> ``(12, 2201.6, 1300.5, 3199.0)`` (cores, CPU, GPU, memory MHz);
    ``None`` for a named mode such as ``"MAXN"``. Raises ``ValueError`` for anything else."""
    s = str(mode).strip()
    m = _MODE_RE.match(s)
    if m:
        return int(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4))
    if _NAME_RE.match(s):
        return None
    raise ValueError(
        f"mode {mode!r}: expected 'CORESc/CPU_MHz/GPU_MHz/MEM_MHz' such as '12c/2201.6/1300.5/3199', "
        "or a mode name such as 'MAXN' (letters, digits, _ . + -)"
    )


def format_mode(cores: int, cpu_mhz: float, gpu_mhz: float, mem_mhz: float) -> str:
    """Knobs -> mode string, as :class:`~lightning_edge.modes.PowerMode` prints it ('12c/2201.6/1300.5/3199')."""
    from lightning_edge.modes import PowerMode

    return str(PowerMode(int(cores), cpu_mhz, gpu_mhz, mem_mhz))


def _same_mode(a: str, b: str, tol_mhz: float = 1.0) -> bool:
    if a == b:
        return True
    try:
        pa, pb = parse_mode(a), parse_mode(b)
    except ValueError:
        return False
    if pa is None or pb is None:
        return a.lower() == b.lower()
    return pa[0] == pb[0] and all(abs(x - y) <= tol_mhz for x, y in zip(pa[1:], pb[1:]))


# ---------------------------------------------------------------------------------------------- validation
def _is_num(x) -> bool:
    # compared, not converted: math.isfinite of a 400-digit integer raises OverflowError; NaN and inf fail too
    return isinstance(x, (int, float)) and not isinstance(x, bool) and -1e300 <= x <= 1e300


def _unknown(path: str, key: str, allowed) -> str:
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.5)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"{path}{key}: unknown field; {hint}(allowed: {', '.join(allowed)})"


#: the plausible range of each coefficient (eps: at most 1e-6 J): beyond it the balance points and energy efficiencies
#: computed from a profile overflow (a bandwidth of 1e-300 B/s made the time balance inf)
_PLAUSIBLE = {"FLOP/s": (1e3, 1e18), "B/s": (1e3, 1e16), "W": (0.0, 1e5)}


def _check_coef(errors, path, value, unit, *, nullable, allow_zero=False):
    if value is None:
        if not nullable:
            errors.append(f"{path}: expected a positive number in {unit}, got null; give the measured value")
        return
    if not _is_num(value) or value < 0 or (value == 0 and not allow_zero):
        what = "a non-negative" if allow_zero else "a positive"
        extra = " (or null when not measured)" if nullable else ""
        shown = repr(value) if not isinstance(value, int) or abs(value) < 1e300 else \
            f"an integer of {len(str(abs(value)))} digits"
        errors.append(f"{path}: expected {what} number in {unit}{extra}, got {shown}")
        return
    if unit in ("J/FLOP", "J/B") and value > 1e-6:
        errors.append(f"{path}: {value!r} J is implausibly large for one FLOP/byte; the value is in joules "
                      "(3.86 pJ is 3.86e-12)")
        return
    lo, hi = _PLAUSIBLE.get(unit, (0.0, math.inf))
    if not (lo <= value <= hi) and not (value == 0 and allow_zero):
        errors.append(f"{path}: {value!r} {unit} is outside the plausible {lo:g} to {hi:g} {unit}; check the unit")


def validate_profile(data: Any, where: str | None = None) -> dict:
    """Check a profile dict against the format; return it unchanged, or raise ``ProfileError`` listing
    every problem with the field path, what was expected and how to fix it."""
    errors: list[str] = []
    if not isinstance(data, dict):
        raise ProfileError([f"top level: expected a JSON object, got {type(data).__name__}"], where)
    for key in data:
        if key not in _TOP_KEYS:
            errors.append(_unknown("", key, _TOP_KEYS))
    for key in _REQUIRED_TOP:
        if key not in data:
            errors.append(f"{key}: missing; every profile needs {', '.join(_REQUIRED_TOP)}")
    if "schema" in data and data["schema"] != SCHEMA:
        errors.append(f"schema: expected {SCHEMA!r}, got {data['schema']!r}; this is not a lightning_edge "
                      "device profile (or set schema to that value)")
    if "version" in data:
        v = data["version"]
        if not isinstance(v, int) or isinstance(v, bool):
            errors.append(f"version: expected the integer {VERSION}, got {v!r}")
        elif v > VERSION:
            errors.append(f"version: this profile is version {v}, newer than this lightning_edge reads ({VERSION}); "
                          "upgrade lightning_edge")
        elif v < 1:
            errors.append(f"version: expected {VERSION}, got {v}")
    if "device" in data and (not isinstance(data["device"], str) or not data["device"].strip()):
        errors.append(f"device: expected a non-empty device model name such as 'jetson-orin-agx-32gb', "
                      f"got {data['device']!r}")
    if "source" in data and data["source"] not in SOURCES:
        errors.append(f"source: expected one of {', '.join(SOURCES)}, got {data['source']!r}")
    if "created" in data:
        c = data["created"]
        try:
            if not isinstance(c, str):
                raise TypeError
            _dt.datetime.fromisoformat(c.replace("Z", "+00:00"))
        except (TypeError, ValueError):
            errors.append(f"created: expected an ISO 8601 time such as '2025-01-01T00:00:00+00:00', got {c!r}")
    if "host" in data and data["host"] is not None and not isinstance(data["host"], (str, dict)):
        errors.append(f"host: expected a string, an object or null, got {type(data['host']).__name__}")
    for key in ("fit", "reference"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            errors.append(f"{key}: expected a JSON object or null, got {type(data[key]).__name__}")
    if data.get("notes") is not None and not isinstance(data["notes"], (str, list)):
        errors.append(f"notes: expected a string or a list of strings, got {type(data['notes']).__name__}")

    space = data.get("mode_space")
    if space is not None:
        if not isinstance(space, dict):
            errors.append(f"mode_space: expected an object with {', '.join(_SPACE_KEYS)}, got {type(space).__name__}")
        else:
            for key, vals in space.items():
                if key not in _SPACE_KEYS:
                    errors.append(_unknown("mode_space.", key, _SPACE_KEYS))
                    continue
                if not isinstance(vals, list) or not vals or not all(_is_num(v) and v > 0 for v in vals):
                    errors.append(f"mode_space.{key}: expected a non-empty list of positive numbers"
                                  f"{' (core counts)' if key == 'cores' else ' in MHz'}, got {vals!r}")

    modes = data.get("modes")
    if "modes" in data:
        if not isinstance(modes, list) or not modes:
            errors.append("modes: expected a non-empty list of mode entries, got "
                          f"{modes!r}" if not isinstance(modes, list) else "modes: expected at least one mode entry, got []")
        else:
            seen: dict[str, int] = {}
            for i, entry in enumerate(modes):
                _validate_mode(errors, f"modes[{i}]", entry)
                if isinstance(entry, dict) and isinstance(entry.get("mode"), str):
                    if entry["mode"] in seen:
                        errors.append(f"modes[{i}].mode: {entry['mode']!r} repeats modes[{seen[entry['mode']]}]; "
                                      "keep one entry per mode")
                    seen.setdefault(entry["mode"], i)
    if errors:
        raise ProfileError(errors, where)
    return data


def _validate_mode(errors, path, entry):
    if not isinstance(entry, dict):
        errors.append(f"{path}: expected an object with mode, precision, eps_flop, eps_mop, static_power_w; "
                      f"got {type(entry).__name__}")
        return
    for key in entry:
        if key not in _MODE_KEYS:
            errors.append(_unknown(f"{path}.", key, _MODE_KEYS))
    mode = entry.get("mode")
    if mode is None:
        errors.append(f"{path}.mode: missing; give the power mode as 'CORESc/CPU_MHz/GPU_MHz/MEM_MHz' "
                      "(e.g. '12c/2201.6/1300.5/3199') or a name")
    elif not isinstance(mode, str):
        errors.append(f"{path}.mode: expected a string such as '12c/2201.6/1300.5/3199', got {mode!r}")
    else:
        try:
            parse_mode(mode)
        except ValueError as exc:
            errors.append(f"{path}.mode: {exc}")
    if entry.get("source") is not None and entry["source"] not in SOURCES + ("estimated",):
        errors.append(f"{path}.source: expected one of {', '.join(SOURCES + ('estimated',))}, got {entry['source']!r}")
    prec = entry.get("precision")
    if prec is None:
        errors.append(f"{path}.precision: missing; give at least "
                      "{'fp32': {'peak_flops': FLOP/s, 'bandwidth': B/s}}")
    elif not isinstance(prec, dict) or not prec:
        errors.append(f"{path}.precision: expected a non-empty object such as "
                      f"{{'fp32': {{'peak_flops': ..., 'bandwidth': ...}}}}, got {prec!r}")
    else:
        for name, p in prec.items():
            ppath = f"{path}.precision.{name}"
            if not _PREC_RE.match(str(name)):
                errors.append(f"{ppath}: precision names are lower case such as fp32, tf32, fp16, bf16, int8")
            if not isinstance(p, dict):
                errors.append(f"{ppath}: expected an object with peak_flops and bandwidth, got {p!r}")
                continue
            for key in p:
                if key not in _PREC_KEYS:
                    errors.append(_unknown(f"{ppath}.", key, _PREC_KEYS))
            for key, unit in (("peak_flops", "FLOP/s"), ("bandwidth", "B/s")):
                if key not in p:
                    errors.append(f"{ppath}.{key}: missing; expected a positive number in {unit}")
                else:
                    _check_coef(errors, f"{ppath}.{key}", p[key], unit, nullable=False)
            for key, unit in (("eps_flop", "J/FLOP"), ("eps_mop", "J/B")):
                if key in p:
                    _check_coef(errors, f"{ppath}.{key}", p[key], unit, nullable=True, allow_zero=True)
    for key, unit in (("eps_flop", "J/FLOP"), ("eps_mop", "J/B"), ("static_power_w", "W")):
        if key in entry:
            _check_coef(errors, f"{path}.{key}", entry[key], unit, nullable=True, allow_zero=True)
    for key in ("cpu", "extra"):
        if entry.get(key) is not None and not isinstance(entry[key], dict):
            errors.append(f"{path}.{key}: expected a JSON object or null, got {type(entry[key]).__name__}")
    if entry.get("note") is not None and not isinstance(entry["note"], str):
        errors.append(f"{path}.note: expected a string, got {type(entry['note']).__name__}")


# ---------------------------------------------------------------------------------------------- classes
@dataclass
class ModeEntry:
    """One power mode of a profile: per-precision peaks plus the mode's energy coefficients."""

    mode: str
    precision: dict[str, dict]
    eps_flop: float | None = None
    eps_mop: float | None = None
    static_power_w: float | None = None
    cpu: dict | None = None
    note: str | None = None
    extra: dict | None = None
    source: str | None = None

    @classmethod
    def from_dict(cls, d: dict) -> ModeEntry:
        errors: list[str] = []
        _validate_mode(errors, "mode entry", d)
        if errors:
            raise ProfileError(errors)
        return cls(
            mode=d["mode"], precision=copy.deepcopy(d["precision"]), eps_flop=d.get("eps_flop"),
            eps_mop=d.get("eps_mop"), static_power_w=d.get("static_power_w"), cpu=d.get("cpu"),
            note=d.get("note"), extra=d.get("extra"), source=d.get("source"),
        )

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"mode": self.mode, "precision": copy.deepcopy(self.precision),
                             "eps_flop": self.eps_flop, "eps_mop": self.eps_mop, "static_power_w": self.static_power_w}
        for key in ("cpu", "note", "extra", "source"):
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        return d

    @property
    def knobs(self) -> tuple[int, float, float, float] | None:
        """(cores, CPU MHz, GPU MHz, memory MHz), or None for a named mode."""
        return parse_mode(self.mode)

    def roofline(self, precision: str = "fp32", source: str | None = None) -> Roofline:
        """The Roofline of this mode at ``precision`` (per-precision eps values override the mode's)."""
        if precision not in self.precision:
            raise ModeLookupError(
                f"mode {self.mode!r} has no {precision!r} roofline; it has {', '.join(self.precision)}; "
                f"pass precision= one of those"
            )
        p = self.precision[precision]
        return Roofline(
            p["peak_flops"], p["bandwidth"], p.get("eps_flop", self.eps_flop), p.get("eps_mop", self.eps_mop),
            self.static_power_w, label=self.mode, source=self.source or source,
        )


@dataclass
class DeviceProfile:
    """A device model's roofline coefficients for one or more power modes (see module docstring)."""

    device: str
    source: str
    modes: list[ModeEntry]
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    host: Any = None
    mode_space: dict | None = None
    fit: dict | None = None
    reference: dict | None = None
    notes: Any = None
    version: int = VERSION

    # -- construction / serialisation
    @classmethod
    def from_dict(cls, data: dict, where: str | None = None) -> DeviceProfile:
        validate_profile(data, where)
        return cls(
            device=data["device"], source=data["source"], modes=[ModeEntry.from_dict(m) for m in data["modes"]],
            created=data["created"], host=data.get("host"), mode_space=data.get("mode_space"),
            fit=data.get("fit"), reference=data.get("reference"), notes=data.get("notes"), version=data["version"],
        )

    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "schema": SCHEMA, "version": self.version, "device": self.device, "source": self.source,
            "created": self.created, "host": self.host,
        }
        if self.mode_space is not None:
            d["mode_space"] = self.mode_space
        d["modes"] = [m.to_dict() for m in self.modes]
        for key in ("fit", "reference", "notes"):
            if getattr(self, key) is not None:
                d[key] = getattr(self, key)
        return d

    # -- lookups
    @property
    def mode_names(self) -> list[str]:
        return [m.mode for m in self.modes]

    def entry(self, mode=None) -> ModeEntry:
        """The entry for ``mode`` (a string, or anything whose ``str()`` is a mode string, such as a
        ``PowerMode``); ``None`` picks the only mode of a single-mode profile. Knob modes match within
        1 MHz, named modes case-insensitively."""
        if mode is None:
            if len(self.modes) == 1:
                return self.modes[0]
            raise ModeLookupError(f"profile {self.device!r} has {len(self.modes)} modes; name one of: "
                           f"{', '.join(self.mode_names)}")
        key = str(mode)
        for m in self.modes:
            if m.mode == key:
                return m
        for m in self.modes:
            if _same_mode(m.mode, key):
                return m
        close = difflib.get_close_matches(key, self.mode_names, n=3)
        hint = f" Closest: {', '.join(close)}." if close else ""
        raise ModeLookupError(f"profile {self.device!r} has no mode {key!r}; it has {', '.join(self.mode_names)}.{hint}")

    def roofline(self, mode=None, precision: str = "fp32") -> Roofline:
        """The Roofline of one mode (see ``entry``) at ``precision``."""
        return self.entry(mode).roofline(precision, source=self.source)

    def rooflines(self, precision: str = "fp32", modes=None) -> Roofline:
        """One vectorised Roofline over ``modes`` (default: every mode that has ``precision``):
        coefficient arrays of shape (M,), ``label`` the tuple of mode strings, unknown coefficients NaN."""
        entries = [self.entry(m) for m in modes] if modes is not None else \
            [m for m in self.modes if precision in m.precision]
        if not entries:
            raise ModeLookupError(f"profile {self.device!r} has no mode with a {precision!r} roofline")
        rows = [e.roofline(precision, source=self.source) for e in entries]
        return Roofline.stack(rows, labels=[e.mode for e in entries])

    def summary_table(self, precision: str = "fp32") -> list[dict]:
        """One dict per mode: mode, peak, bandwidth, balance points, peak energy efficiencies."""
        out = []
        for e in self.modes:
            if precision not in e.precision:
                continue
            s = e.roofline(precision).summary()
            out.append({"mode": e.mode, **{k: (None if isinstance(v, float) and math.isnan(v) else v)
                                           for k, v in s.items()}})
        return out


# ---------------------------------------------------------------------------------------------- files
def _data_dir() -> Path:
    return data_dir()


def available_profiles() -> list[str]:
    """Names of the profiles shipped with lightning_edge (``load_profile(name)`` loads them)."""
    names = []
    try:
        for p in _data_dir().iterdir():
            if p.name.endswith(".json"):
                try:
                    d = read_json(p, ValueError)
                except (OSError, ValueError):
                    continue
                if isinstance(d, dict) and d.get("schema") == SCHEMA:
                    names.append(p.name[:-5])
    except (FileNotFoundError, NotADirectoryError):
        pass
    return sorted(names)


def load_profile(path_or_name: str | os.PathLike) -> DeviceProfile:
    """Load and validate a profile from a file path, or by the name of a shipped profile
    (``"orin-agx-pagoda"``). Raises ``FileNotFoundError`` naming the choices, or ``ProfileError``."""
    p = Path(path_or_name)
    if p.is_file():  # a user's file: read within limits (size, nesting), every value checked by from_dict
        return _read_profile(p, str(p))
    name = str(path_or_name)
    name = name[:-5] if name.endswith(".json") else name
    res = _data_dir() / f"{name}.json"
    if "/" in name or os.sep in name or not res.is_file():
        raise FileNotFoundError(
            f"no device profile {str(path_or_name)!r}: not a file, and not a shipped profile name "
            f"(shipped: {', '.join(available_profiles()) or 'none'}); "
            "measure one with `lightning-edge roofline --out profile.json`"
        )
    return _read_profile(res, f"'{name}' ({res})")


def _read_profile(path: Path, where: str) -> DeviceProfile:
    """The profile in ``path`` (a user's file or a shipped one), read within limits (size, nesting), every value
    checked by :meth:`DeviceProfile.from_dict`; :class:`ProfileError` naming ``where``."""
    data = read_json(path, lambda why: ProfileError([f"the file {why}; expected a device profile written by "
                                                     "`lightning-edge roofline --out`"], where))
    return DeviceProfile.from_dict(data, where)


def save_profile(profile: DeviceProfile | dict, path: str | os.PathLike) -> Path:
    """Validate and write a profile as indented JSON; returns the path written."""
    data = profile.to_dict() if isinstance(profile, DeviceProfile) else profile
    validate_profile(data, str(path))
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    # atomically (a crash mid-write keeps the old file), never through a link nor over a file that is not JSON: _jsonfile.write_file
    return write_file(path, json.dumps(data, indent=2, default=_json_default) + "\n",
                      lambda why: ValueError(f"{path}: {why}"), ours=is_json_file, what="device profile")


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"cannot write {type(o).__name__} to a profile")
