"""Board files: a simulated board = a catalogued module + the twin's coefficients, each with its provenance.

    >>> from lightning_edge.twin.board_files import board_file, load_board_file
    >>> bf = board_file("orin-nano-8gb")          # extrapolated from the papers' AGX Orin by hardware ratios
    >>> bf.label, bf.provenance["p_gpu_active_w"]   # ('extrapolated', 'extrapolated')
    >>> bf.save("nano.json"); load_board_file("nano.json").params == bf.params
    >>> OrinTwin(board=bf)                          # the twin of that board (get_board("sim:nano.json") builds it)

A board file (JSON, ``schema: lightning_edge.board_file``) holds:

- ``key``: the catalogued module (:data:`lightning_edge.catalog.BOARDS`); ``board``: its catalogue facts (grid,
  cores, rated power, hardware) with their sources, for the reader; ``mode_space``: the grid when it is not the
  catalogue's (a real board's ``available_frequencies`` win);
- ``params``: the twin's coefficients (:data:`lightning_edge.twin.physics.PARAM_DOCS`); ``provenance``: one label per
  coefficient, :data:`PROVENANCE`:

  * ``published``: fitted to published figures (the papers' twin: Pagoda's and Fulcrum's tables), or a hardware fact
    from a data sheet (the memory bus width);
  * ``extrapolated``: taken from another board's coefficients by a documented hardware ratio (:data:`RULES`), or
    carried over unchanged where no ratio applies (per FLOP, per byte, per op at the same clocks);
  * ``measured``: fitted by ``lightning-edge calibrate`` to measurements of this board;
  * ``simulated``: an assumption of the twin with no figure behind it, or fitted to simulated measurements (the
    calibration run on a twin);

- ``label``: ``extrapolated`` while any coefficient is, else ``measured`` when the board was calibrated on itself,
  else ``simulated``; ``extrapolation`` (the ratios, their sources and assumptions) and ``calibration`` (what was
  measured, the fit's residuals) where they apply; ``notes``.

A twin built from a file labelled ``extrapolated`` labels everything it computes ``extrapolated``
(:attr:`OrinTwin.label <lightning_edge.twin.model.OrinTwin>`); every other twin's numbers are ``simulated``.
"""

from __future__ import annotations

import copy
import datetime as _dt
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_edge import catalog
from lightning_edge._jsonfile import json_schema_is, one_line, read_json, write_json
from lightning_edge.catalog.hardware import HARDWARE, hardware_of
from lightning_edge.modes import PowerModeSpace
from lightning_edge.twin.physics import DEFAULT_PARAMS, PARAM_DOCS, param_problem

__all__ = ["PROVENANCE", "SCHEMA", "RULES", "SEED_KEY", "BOARDS_ENV", "BoardFile", "board_file", "seed_board",
           "extrapolate", "load_board_file", "prior_board", "board_label", "board_model", "installed_board_file",
           "install_board_file", "user_board_dir"]

SCHEMA = "lightning_edge.board_file"
VERSION = 1
SEED_KEY = "orin-agx"
"""The papers' board: the one whose coefficients were fitted to published figures."""

PROVENANCE = ("published", "extrapolated", "measured", "simulated")

RULES: dict[str, tuple[str, str]] = {
    "peak_core_tflops_per_ghz": ("sms", "tensor-core FLOP per GHz ~ SMs (tensor cores per SM as the source's)"),
    "bw_gpu_gbs_per_ghz": ("sms", "bytes the GPU issues per GHz ~ SMs"),
    "p_gpu_active_w": ("sms", "the SMs' switching power ~ SMs"),
    "p_gpu_on_w": ("sms", "the GPU's on (un-gated) power ~ SMs"),
    "p_gpu_idle_leak_w": ("sms", "the idle GPU's leakage ~ SMs"),
    "p_gpu_idle_clock_w": ("sms", "the idle GPU's clock power ~ SMs"),
    "half_mflop": ("sms", "a smaller GPU fills with less work per kernel"),
    "half_mbyte": ("sms", "a smaller GPU fills with fewer bytes per kernel"),
    "peak_mem_tflops": ("bus", "the matmul's memory-feed limit ~ DRAM bandwidth ~ bus width"),
    "p_mem_active_w": ("bus", "the busy memory system's power ~ channels ~ bus width"),
    "p_mem_active_floor_w": ("bus", "the busy memory system's clock-independent power ~ bus width"),
    "p_emc_idle_w": ("bus", "the idle memory controller's power ~ bus width"),
    "p_base_w": ("rated", "always-on power (SoC, regulators, carrier) ~ the module's rated power"),
    "p_cap_w": ("rated", "the highest power the board reports ~ its rated power"),
    "dram_bus_bits": ("fact", "the module's memory bus width (catalogue hardware fact)"),
}
"""How each coefficient moves from one board to another: ``(ratio, why)``; ``sms``: the ratio of SMs (the same
architecture: of tensor cores too), ``bus``: of memory bus widths, ``rated``: of rated powers, ``fact``: the target's
own hardware fact. Every other coefficient is carried over unchanged: per FLOP, per byte, per CPU op and per core at
the same absolute clocks (the twin's physics take MHz, so a lower-clocked module is slower and its voltage lower by
the same curves)."""

RATIO_DOCS = {
    "sms": "GPU SMs (streaming multiprocessors): target / source",
    "bus": "memory bus width (bits): target / source",
    "rated": "rated module power (W): target / source",
}


def board_label(provenance: Mapping[str, str], calibrated_on: str | None = None) -> str:
    """A board file's label from its coefficients' provenance (module docstring)."""
    values = set(provenance.values())
    if "extrapolated" in values:
        return "extrapolated"
    if calibrated_on == "measured" or ("measured" in values and "simulated" not in values):
        return "measured"
    return "simulated"


@dataclass
class BoardFile:
    """One board file (module docstring). ``path``: where it was read from (None: built here)."""

    key: str
    params: dict[str, float]
    provenance: dict[str, str]
    label: str = "simulated"
    name: str = ""
    mode_space: dict[str, list[float]] | None = None
    extrapolation: dict[str, Any] | None = None
    calibration: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    created: str = ""
    path: str | None = None

    def __post_init__(self) -> None:
        unknown = set(self.params) - set(DEFAULT_PARAMS)
        if unknown:
            raise ValueError(f"board file for {self.key!r}: unknown twin parameter(s) {sorted(unknown)}; known: "
                             f"{sorted(DEFAULT_PARAMS)}")
        bad = {k: v for k, v in self.provenance.items() if v not in PROVENANCE}
        if bad:
            raise ValueError(f"board file for {self.key!r}: provenance must be one of {', '.join(PROVENANCE)}, "
                             f"got {bad}")
        for k, v in self.params.items():
            why = param_problem(k, v)
            if why:
                raise ValueError(f"board file for {self.key!r}: params.{k}: {why}")
        self.params = {k: float(v) for k, v in self.params.items()}
        if self.label not in PROVENANCE:
            raise ValueError(f"board file for {self.key!r}: label must be one of {', '.join(PROVENANCE)}, "
                             f"got {self.label!r}")
        self.name = self.name or (catalog.BOARDS[self.key].name if self.key in catalog.BOARDS else self.key)

    # ------------------------------------------------------------------ what it describes
    @property
    def full_params(self) -> dict[str, float]:
        """Every coefficient of the physics: the file's, and the physics' defaults for any it does not name (a
        coefficient added to the physics after the file was written: its provenance is ``simulated``)."""
        return {**DEFAULT_PARAMS, **self.params}

    def provenance_of(self, name: str) -> str:
        return self.provenance.get(name, "simulated")

    def space(self) -> PowerModeSpace:
        """The board's grid: the file's ``mode_space``, else the catalogue's."""
        if self.mode_space:
            ms = self.mode_space
            return PowerModeSpace(cores=[int(c) for c in ms["cores"]], cpu_mhz=ms["cpu_mhz"], gpu_mhz=ms["gpu_mhz"],
                                  mem_mhz=ms["mem_mhz"], name=self.key)
        if self.key == SEED_KEY:
            return catalog.orin_agx_space()
        space = catalog.board_info(self.key).space()
        if space is None:
            raise ValueError(f"board {self.key!r} has no grid in the catalogue; a board file for it needs a "
                             "mode_space (the frequencies read on the board)")
        return space

    @property
    def extrapolated(self) -> bool:
        return self.label == "extrapolated"

    def describe(self) -> str:
        """One line: what the coefficients are and where they come from."""
        if self.label == "extrapolated":
            src = (self.extrapolation or {}).get("from", SEED_KEY)
            return (f"EXTRAPOLATED twin of the {self.name}: the {src} coefficients scaled by hardware ratios "
                    "(SMs, memory bus, rated power), not measured on this module; calibrate it with "
                    "`lightning-edge calibrate`")
        if self.calibration:
            c = self.calibration
            how = "measurements of the board" if self.label == "measured" else "SIMULATED measurements (a twin)"
            return (f"twin of the {self.name}, calibrated {c.get('date', '')} from {how} at {c.get('modes', '?')} "
                    "modes")
        return f"twin of the {self.name}: coefficients fitted to published figures (the papers' board)"

    # ------------------------------------------------------------------ files
    def to_dict(self) -> dict[str, Any]:
        params = {k: self.params[k] for k in sorted(self.params, key=_param_order)}
        return {
            "schema": SCHEMA, "version": VERSION, "key": self.key, "name": self.name, "label": self.label,
            "created": self.created or _now(),
            "board": catalogue_facts(self.key),
            **({"mode_space": self.mode_space} if self.mode_space else {}),
            "params": params,
            "provenance": {k: self.provenance_of(k) for k in params},
            "docs": {k: PARAM_DOCS.get(k, "") for k in params},
            **({"extrapolation": self.extrapolation} if self.extrapolation else {}),
            **({"calibration": self.calibration} if self.calibration else {}),
            "notes": list(self.notes),
            "model": "lightning_edge.twin.physics/1 (docs/twin.md)",
        }

    def save(self, path: str | Path, *, force: bool = False) -> Path:
        """Write the file atomically (a new temporary file in the same folder, fsynced, renamed over it:
        :func:`lightning_edge._jsonfile.write_file`). ``path`` must be absent or a board file already (``force``:
        any regular file); a link, a device, a FIFO or a folder is refused (``ValueError``, one line)."""
        path = Path(path)
        write_json(path, self.to_dict(), lambda why: ValueError(f"board file {path}: {why}"),
                   ours=json_schema_is(SCHEMA), force=force, what="board file")
        self.path = str(path)
        return path

    @classmethod
    def from_dict(cls, data: Any, path: str | None = None) -> BoardFile:
        """A board file from its JSON document, every field checked (``ValueError``, one line naming the field and
        what was expected: :func:`board_file_problem`)."""
        where = path or "board file"
        why = board_file_problem(data)
        if why:
            raise ValueError(f"{where}: {why}")
        key = data["key"]
        return cls(key=key, params=dict(data["params"]), provenance=dict(data["provenance"]),
                   label=data.get("label", "simulated"), name=data.get("name", ""),
                   mode_space={k: list(v) for k, v in data["mode_space"].items()} if data.get("mode_space") else None,
                   extrapolation=data.get("extrapolation"), calibration=data.get("calibration"),
                   notes=list(data.get("notes") or []), created=str(data.get("created", "")), path=path)


#: the largest board file read (a calibrated one is tens of KiB)
MAX_BOARD_FILE_BYTES = 4 << 20
_GRID_LIMITS = {"cores": (1, 1024), "cpu_mhz": (1.0, 10000.0), "gpu_mhz": (1.0, 10000.0), "mem_mhz": (1.0, 20000.0)}
_MAX_GRID = 512  # values of one knob: a real table has tens


def _typename(v: Any) -> str:
    return "null" if v is None else {"dict": "an object", "list": "a list", "str": "a text", "bool": "true/false",
                                      "int": "a number", "float": "a number"}.get(type(v).__name__,
                                                                                  type(v).__name__)


def grid_problem(ms: Any, where: str = "mode_space") -> str | None:
    """Why ``ms`` is not a board's grid (``None``: it is): an object with ``cores`` (whole numbers 1..1024) and
    ``cpu_mhz``, ``gpu_mhz``, ``mem_mhz`` (MHz within what a Jetson clocks), each a non-empty list sorted ascending
    without repeats, of at most 512 values."""
    if not isinstance(ms, Mapping):
        return f"{where}: expected an object {{cores, cpu_mhz, gpu_mhz, mem_mhz}}, got {_typename(ms)}"
    for knob, (lo, hi) in _GRID_LIMITS.items():
        vals = ms.get(knob)
        at = f"{where}.{knob}"
        if not isinstance(vals, list) or not vals:
            return f"{at}: expected a non-empty list of numbers, got {_typename(vals)}"
        if len(vals) > _MAX_GRID:
            return f"{at}: {len(vals)} values (a board lists at most {_MAX_GRID})"
        for i, v in enumerate(vals):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                return f"{at}[{i}]: expected a finite number, got {one_line(repr(v), 40)}"
            if knob == "cores" and float(v) != int(v):
                return f"{at}[{i}]: {v!r} is not a whole number of cores"
            if not lo <= float(v) <= hi:
                return f"{at}[{i}]: {v!r} is outside {lo:g}..{hi:g}" + (" MHz" if knob != "cores" else "")
        if any(b <= a for a, b in zip(vals, vals[1:])):
            return f"{at}: expected values sorted ascending without repeats, got {one_line(repr(vals), 60)}"
    extra = sorted(set(ms) - set(_GRID_LIMITS))
    if extra:
        return f"{where}: unknown knob(s) {one_line(', '.join(map(str, extra)), 60)} (cores, cpu_mhz, gpu_mhz, mem_mhz)"
    return None


def board_file_problem(data: Any) -> str | None:
    """Why ``data`` (a parsed JSON document) is not a board file this version reads (``None``: it is); one line
    naming the field and what was expected."""
    if not isinstance(data, Mapping):
        return (f"holds {_typename(data)}, not a board file (a JSON object with schema {SCHEMA!r}; "
                "`lightning-edge calibrate --out FILE.json` writes one)")
    if data.get("schema") != SCHEMA:
        return (f"not a lightning_edge board file (schema {one_line(repr(data.get('schema')), 60)}, expected "
                f"{SCHEMA!r}); write one with `lightning-edge calibrate --out FILE.json`")
    version = data.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        return f"version: expected a whole number >= 1, got {one_line(repr(version), 40)}"
    if version > VERSION:
        return f"board-file version {version} is newer than this lightning_edge reads ({VERSION}); upgrade lightning_edge"
    for name in ("key", "name", "label", "created"):
        if name in data and not isinstance(data[name], str):
            return f"{name}: expected a text, got {_typename(data[name])}"
    key = data.get("key")
    if not isinstance(key, str) or not key:
        return "key: expected the catalogued module's key (a text, e.g. 'orin-nano-8gb')"
    if data.get("mode_space") is not None:
        why = grid_problem(data["mode_space"])
        if why:
            return why
    elif key not in catalog.BOARDS:
        return (f"board {one_line(repr(key), 40)} is not catalogued ({', '.join(catalog.BOARDS)}) and the file has "
                "no mode_space")
    if data.get("label", "simulated") not in PROVENANCE:
        return f"label: expected one of {', '.join(PROVENANCE)}, got {one_line(repr(data.get('label')), 40)}"
    params = data.get("params")
    if not isinstance(params, Mapping) or not params:
        return f"params: expected an object of the twin's coefficients, got {_typename(params)}"
    unknown = sorted(set(params) - set(DEFAULT_PARAMS))
    if unknown:
        return f"params: unknown twin parameter(s) {one_line(', '.join(unknown), 80)}"
    for k, v in params.items():
        why = param_problem(k, v)
        if why:
            return f"params.{k}: {why}"
    prov = data.get("provenance")
    if not isinstance(prov, Mapping):
        return f"provenance: expected an object (coefficient -> {', '.join(PROVENANCE)}), got {_typename(prov)}"
    missing = [k for k in params if k not in prov]
    if missing:
        return f"provenance: coefficient(s) {', '.join(missing[:5])} have no provenance label ({', '.join(PROVENANCE)})"
    for k, v in prov.items():
        if v not in PROVENANCE:
            return (f"provenance.{one_line(str(k), 40)}: provenance must be one of {', '.join(PROVENANCE)}, got "
                    f"{one_line(repr(v), 40)}")
    notes = data.get("notes")
    if notes is not None and (not isinstance(notes, list) or not all(isinstance(n, str) for n in notes)):
        return f"notes: expected a list of texts, got {_typename(notes)}"
    for name in ("extrapolation", "calibration", "board"):
        if data.get(name) is not None and not isinstance(data[name], Mapping):
            return f"{name}: expected an object, got {_typename(data[name])}"
    return None


def load_board_file(path: str | Path) -> BoardFile:
    """Read a board file (``ValueError`` saying what is wrong with it; ``FileNotFoundError`` when it is not there)."""
    path = Path(path)
    try:
        data = read_json(path, lambda why: ValueError(f"board file {path}: {why}"), limit=MAX_BOARD_FILE_BYTES)
    except FileNotFoundError:
        raise FileNotFoundError(f"board file {path} not found (write one with `lightning-edge calibrate --out "
                                f"{path.name}`, or name a catalogued board: sim:{SEED_KEY})") from None
    return BoardFile.from_dict(data, str(path))


# ============================================================================================ the papers' board
def _seed_fitted() -> set[str]:
    """The coefficients the papers' calibration fits to published figures (twin/calibrate.py's two stages)."""
    from lightning_edge.twin.calibrate import REST_PARAMS, ROOF_PARAMS

    return set(ROOF_PARAMS) | set(REST_PARAMS)


#: coefficients of the papers' twin that are published figures themselves (Pagoda's ratios, Fulcrum's loader)
_SEED_PUBLISHED = ("fp16_peak_ratio", "fp16_bw_ratio", "cuda_fp32_ratio", "loader_workers", "dram_bus_bits")

_CACHE: dict[tuple, BoardFile] = {}


def seed_board(*, calibrated: bool = True) -> BoardFile:
    """The papers' board (``orin-agx``): the twin's coefficients from ``lightning_edge/data/orin-agx-twin.json``
    (``calibrated=False``: the physics' defaults, before the fit to the published figures), labelled ``simulated``
    with each coefficient ``published`` (fitted to or taken from published figures) or ``simulated``."""
    key = ("seed", calibrated)
    if key not in _CACHE:
        if calibrated:
            from lightning_edge.twin.model import load_twin_params

            params = {**DEFAULT_PARAMS, **load_twin_params()[0]}
            fitted = _seed_fitted() | set(_SEED_PUBLISHED)
            prov = {k: "published" if k in fitted else "simulated" for k in params}
            notes = ["the papers' AGX Orin developer kit: coefficients fitted to published figures (Pagoda, Fulcrum; "
                     "python -m lightning_edge.twin.calibrate); every number the twin computes is simulated"]
        else:
            params = dict(DEFAULT_PARAMS)
            prov = {k: "published" if k in _SEED_PUBLISHED else "simulated" for k in params}
            notes = ["the twin's physics defaults before the fit to the published figures (uncalibrated)"]
        _CACHE[key] = BoardFile(SEED_KEY, params, prov, label="simulated", notes=notes)
    return _copy(_CACHE[key])


def board_file(key: str) -> BoardFile:
    """The board file of catalogued module ``key``: the papers' board for ``orin-agx``, else the papers' coefficients
    extrapolated to it (:func:`extrapolate`), labelled ``extrapolated``."""
    catalog.board_info(key)  # ValueError naming the known keys
    if key == SEED_KEY:
        return seed_board()
    ck = ("board", key)
    if ck not in _CACHE:
        _CACHE[ck] = extrapolate(seed_board(), key)
    return _copy(_CACHE[ck])


def prior_board(board: BoardFile) -> BoardFile:
    """What a tuner's prior may model a *simulated* board with without knowing its simulated truth (the twin's
    noise-free prediction is the truth): for the papers' board its uncalibrated coefficients; for a catalogued board
    extrapolated from the papers' board, the same extrapolation of the uncalibrated coefficients; for any other board file
    (a calibrated or written one: the truth is the file) the catalogue's board of its key."""
    if board.key == SEED_KEY and board.label == "simulated" and not board.calibration and board.path is None:
        return seed_board(calibrated=False)
    if board.extrapolated and board.path is None:
        return extrapolate(seed_board(calibrated=False), board.key)
    return board_file(board.key) if board.key in catalog.BOARDS else seed_board(calibrated=False)


# ============================================================================================ a real board's own file
BOARDS_ENV = "LIGHTNING_EDGE_BOARDS"
"""Environment variable: the folder of calibrated board files (default ``$XDG_CONFIG_HOME/lightning_edge/boards``,
``~/.config/lightning_edge/boards``), one ``<key>.json`` per module (``lightning-edge calibrate`` installs there)."""


def user_board_dir() -> Path:
    """Where a real board's calibrated file is installed (see :data:`BOARDS_ENV`)."""
    env = os.environ.get(BOARDS_ENV)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "lightning_edge" / "boards"


def installed_board_file(key: str) -> BoardFile | None:
    """The calibrated board file installed for module ``key`` (None when there is none, or it is not readable: a
    broken file is never a model of the board)."""
    path = user_board_dir() / f"{key}.json"
    if not path.is_file():
        return None
    try:
        bf = load_board_file(path)
    except (OSError, ValueError):
        return None
    return bf if bf.key == key else None


def install_board_file(bf: BoardFile) -> Path:
    """Install ``bf`` as its module's calibrated file (:func:`user_board_dir`); returns where."""
    folder = user_board_dir()
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / f"{bf.key}.json"
    saved_path = bf.path
    _copy(bf).save(dest)
    bf.path = saved_path
    return dest


def board_model(key: str) -> BoardFile:
    """The best model of a real board of module ``key``: its installed calibrated file, else the catalogue's board
    file (the papers' twin for ``orin-agx``; an ``extrapolated`` one for the others)."""
    return installed_board_file(key) or board_file(key)


def _copy(bf: BoardFile) -> BoardFile:
    return BoardFile(bf.key, dict(bf.params), dict(bf.provenance), bf.label, bf.name,
                     None if bf.mode_space is None else {k: list(v) for k, v in bf.mode_space.items()},
                     copy.deepcopy(bf.extrapolation) if bf.extrapolation else None,
                     copy.deepcopy(bf.calibration) if bf.calibration else None, list(bf.notes), bf.created,
                     bf.path)


# ============================================================================================ extrapolation
def _ratio(name: str, src_key: str, dst_key: str) -> tuple[float, str, list[str]]:
    """``(ratio, how it was computed, assumptions)`` of one hardware quantity between two catalogued modules."""
    if name == "rated":
        a, b = catalog.MODULE_MAX_POWER.get(src_key), catalog.MODULE_MAX_POWER.get(dst_key)
        if a is None or b is None:
            return 1.0, "a rated power is not known: 1", [f"rated power of {src_key if a is None else dst_key} "
                                                          "unknown: assumed equal"]
        return b.watts / a.watts, f"{b.watts:g} W / {a.watts:g} W", []
    fact = {"sms": "sms", "bus": "mem_bus_bits"}[name]
    ha, hb = hardware_of(src_key), hardware_of(dst_key)
    va, vb = getattr(ha, fact), getattr(hb, fact)
    if va is None or vb is None:
        who = src_key if va is None else dst_key
        return 1.0, f"{fact} of {who} unknown: 1", [f"{fact} of {who} is unknown: the ratio is taken as 1 "
                                                    f"({(ha if va is None else hb).sources[fact].cite})"]
    return vb / va, f"{vb} / {va}", []


def extrapolate(source: BoardFile, key: str) -> BoardFile:
    """``source``'s coefficients moved to catalogued module ``key`` by :data:`RULES` (hardware ratios from
    :mod:`lightning_edge.catalog.hardware` and the rated powers): a board file labelled ``extrapolated``, every
    coefficient ``extrapolated`` but the target's hardware facts (``published``), with the ratios, their sources and
    every assumption made (an unknown fact, another GPU or CPU architecture) in ``extrapolation``."""
    info = catalog.board_info(key)
    if key not in HARDWARE:
        raise ValueError(f"board {key!r} has no hardware facts to extrapolate by (lightning_edge.catalog.hardware)")
    src_key = source.key
    ha, hb = hardware_of(src_key), hardware_of(key)
    ratios: dict[str, dict[str, Any]] = {}
    assumptions: list[str] = []
    for name in RATIO_DOCS:
        r, how, assume = _ratio(name, src_key, key)
        ratios[name] = {"value": r, "how": how, "what": RATIO_DOCS[name]}
        assumptions += assume
    if ha.gpu_arch != hb.gpu_arch:
        assumptions.append(f"another GPU architecture ({hb.gpu_arch}, the source's {ha.gpu_arch}): per-SM throughput "
                           "per GHz, energy per FLOP and byte, kernel efficiencies and the voltage curve are assumed "
                           "the source's (unknown)")
        if hb.gpu_arch == "volta":
            assumptions.append("Volta has no TF32: the twin's FP32 convolutions on tensor cores are an assumption "
                               "there (unknown)")
    if ha.cpu_arch != hb.cpu_arch:
        assumptions.append(f"another CPU ({hb.cpu_arch}, the source's {ha.cpu_arch}): per-op dispatch times and "
                           "per-core power at the same clock are assumed the source's (unknown)")
    if ha.known("sms") and hb.known("sms") and ha.gpu_arch == hb.gpu_arch and ha.tensor_cores and hb.tensor_cores \
            and ha.tensor_cores * hb.sms != hb.tensor_cores * ha.sms:
        assumptions.append("tensor cores per SM differ: the SM ratio is used")
    params: dict[str, float] = {}
    prov: dict[str, str] = {}
    rules: dict[str, str] = {}
    full = source.full_params
    for k, v in full.items():
        rule = RULES.get(k)
        if rule is None:
            params[k], prov[k] = v, "extrapolated"
            continue
        kind, why = rule
        if kind == "fact":
            bits = hb.mem_bus_bits
            if bits is None:
                params[k], prov[k] = v, "extrapolated"
                rules[k] = f"{why}: unknown, the source's {v:g} kept"
            else:
                params[k], prov[k] = float(bits), "published"
                rules[k] = f"{why}: {bits} ({hb.sources['mem_bus_bits'].cite[:80]}...)"
            continue
        r = ratios[kind]["value"]
        params[k], prov[k] = v * r, "extrapolated"
        rules[k] = f"x {r:.4g} ({kind}: {ratios[kind]['how']}): {why}"
    carried = sorted(k for k in full if k not in RULES)
    extrap = {
        "from": src_key, "from_label": source.label, "to": key, "date": _now(),
        "ratios": ratios, "rules": rules,
        "carried": {"params": carried, "why": "the same per FLOP, per byte, per CPU op and per core at the same "
                                              "absolute clocks (the physics take MHz)"},
        "hardware": {"source": _hw_dict(src_key), "target": _hw_dict(key)},
        "assumptions": assumptions,
    }
    notes = [f"EXTRAPOLATED from {src_key} ({source.label}) by hardware ratios: SMs x{ratios['sms']['value']:.3g}, "
             f"memory bus x{ratios['bus']['value']:.3g}, rated power x{ratios['rated']['value']:.3g}; not measured on "
             f"the {info.name}: calibrate it (`lightning-edge calibrate --device jetson --out board.json`)"]
    notes += [f"assumption: {a}" for a in assumptions]
    return BoardFile(key, params, prov, label="extrapolated", extrapolation=extrap, notes=notes)


def _hw_dict(key: str) -> dict[str, Any]:
    return {f: {"value": v, "source": str(s)} for f, (v, s) in hardware_of(key).facts().items()}


def catalogue_facts(key: str) -> dict[str, Any]:
    """The catalogue's facts of module ``key`` a reader of a board file wants beside the coefficients."""
    if key not in catalog.BOARDS:
        return {"key": key, "catalogued": False}
    info = catalog.board_info(key)
    src = info.facts()
    out: dict[str, Any] = {"key": key, "name": info.name, "module": info.module, "soc": info.soc,
                           "cores": info.cpu_count, "cores_source": str(src.get("cores", ""))}
    for name, scale in (("cpu", 1e3), ("gpu", 1e6), ("emc", 1e6)):
        table = getattr(info, name)
        if table is not None:
            out[f"{name}_mhz"] = [v / scale for v in table.values]
            out[f"{name}_source"] = str(table.source)
    if info.rated is not None:
        out["rated_power_w"] = info.rated.watts
        out["rated_power_source"] = str(info.rated.source)
    if key in HARDWARE:
        out["hardware"] = _hw_dict(key)
    return out


def _param_order(name: str) -> int:
    order = list(PARAM_DOCS)
    return order.index(name) if name in order else len(order)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
