"""Power modes and the grid of valid modes of a device.

A :class:`PowerMode` is one setting of the four knobs of a Jetson:
``(cores, cpu_mhz, gpu_mhz, mem_mhz)``. A :class:`PowerModeSpace` is the grid of valid values
per knob (the Orin AGX has 12 x 29 x 13 x 4 = 18,096 modes).

Conventions:

- Frequencies are MHz, stored *as on the board* (``2201.6``, ``1300.5``, ``3199.0``), canonicalised
  to 1 kHz (``round(mhz, 3)``) so that equality and hashing are exact.
- The label is ``"12c/2201.6/1300.5/3199"``: cores, then CPU / GPU / memory MHz as on the board (no trailing
  zeros), so it parses back to the same mode. :meth:`PowerMode.parse` keeps the numbers it is given;
  :meth:`PowerModeSpace.parse` snaps each one to the grid value within 1 MHz, so a truncated or rounded label
  (``12c/2201/1300/3199``, the paper's ``8c/1344/727/2133``) names a valid mode too:
  ``space.parse("8c/1344/727/2133")`` is the mode ``8c/1344.0/726.75/2133.0``.
- The fixed knob order, used by every array: ``KNOBS = ("cores", "cpu_mhz", "gpu_mhz", "mem_mhz")``.

Pure: no sysfs, no torch. Only numpy.
"""

from __future__ import annotations

import itertools
import math
import re
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from dataclasses import replace as _dc_replace
from typing import TYPE_CHECKING, Any, SupportsFloat, Union

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

KNOBS: tuple[str, ...] = ("cores", "cpu_mhz", "gpu_mhz", "mem_mhz")
"""The knobs, in the order of every array, tuple and label."""

KNOB_TITLES = {
    "cores": "online CPU cores",
    "cpu_mhz": "CPU MHz",
    "gpu_mhz": "GPU MHz",
    "mem_mhz": "memory MHz",
}

# short names accepted wherever a knob is named
_KNOB_ALIASES = {alias: knob for knob, aliases in (
    ("cores", ("cores", "core", "c")),
    ("cpu_mhz", ("cpu_mhz", "cpu", "cpuf", "cpu_freq")),
    ("gpu_mhz", ("gpu_mhz", "gpu", "gpuf", "gpu_freq")),
    ("mem_mhz", ("mem_mhz", "mem", "memf", "emc", "memory")),
) for alias in aliases}

SNAP_TOLERANCE_MHZ = 1.0
"""How far a given frequency may be from a grid value and still name it (truncated or rounded MHz, as in papers and
labels written by older versions)."""

_EXACT_TOL = 5e-4  # half of the 1 kHz canonical resolution


class InvalidModeError(ValueError):
    """A mode, knob or value that is not in a :class:`PowerModeSpace`; the message lists the valid ones."""


def knob_name(knob: str) -> str:
    """Canonical knob name for ``knob`` (accepts ``"gpu"``, ``"mem"``, ``"emc"``...)."""
    try:
        return _KNOB_ALIASES[str(knob).lower()]
    except KeyError:
        raise InvalidModeError(f"unknown knob {knob!r}: expected one of {', '.join(KNOBS)}") from None


def _canon(knob: str, value: SupportsFloat | str) -> int | float:
    if knob == "cores":
        v = float(value)
        if not v.is_integer() or v < 1:
            raise InvalidModeError(f"cores must be a whole number >= 1, got {value!r}")
        return int(v)
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise InvalidModeError(f"{knob} must be a finite frequency >= 0 MHz, got {value!r}")
    v = round(v, 3)
    return v + 0.0  # no -0.0


def _fmt_mhz(v: float) -> str:
    """1300.5 -> '1300.5', 3199.0 -> '3199', 726.75 -> '726.75'."""
    return f"{v:.3f}".rstrip("0").rstrip(".")


_LABEL_RE = re.compile(
    r"""^\s*(?P<cores>\d+)\s*(?:c|cores?)?\s*[/,]\s*
        (?P<cpu_mhz>\d+(?:\.\d*)?)\s*(?:mhz)?\s*[/,]\s*
        (?P<gpu_mhz>\d+(?:\.\d*)?)\s*(?:mhz)?\s*[/,]\s*
        (?P<mem_mhz>\d+(?:\.\d*)?)\s*(?:mhz)?\s*$""",
    re.IGNORECASE | re.VERBOSE,
)


@dataclass(frozen=True, order=True)
class PowerMode:
    """One power mode: online CPU cores and CPU / GPU / memory (EMC) frequencies in MHz.

    Immutable and hashable. Frequencies are kept as given (canonicalised to 1 kHz), so the
    Orin AGX MAXN is ``PowerMode(12, 2201.6, 1300.5, 3199)``, printed ``12c/2201.6/1300.5/3199`` (parses back to it).
    A frequency of 0 means "this knob is not controlled" (for example the CPU on a desktop GPU).
    """

    cores: int
    cpu_mhz: float
    gpu_mhz: float
    mem_mhz: float

    def __post_init__(self) -> None:
        for k, v in zip(KNOBS, self.as_tuple()):
            object.__setattr__(self, k, _canon(k, v))

    # ----------------------------------------------------------------- text
    def __str__(self) -> str:
        return f"{self.cores}c/{_fmt_mhz(self.cpu_mhz)}/{_fmt_mhz(self.gpu_mhz)}/{_fmt_mhz(self.mem_mhz)}"

    @property
    def label(self) -> str:
        """Label ``12c/2201.6/1300.5/3199``: the exact frequencies in MHz (no trailing zeros), so that
        :meth:`parse` gives this mode back."""
        return str(self)

    def describe(self) -> str:
        """Exact, spelled-out form: ``12 cores, CPU 2201.6 MHz, GPU 1300.5 MHz, memory 3199 MHz``."""
        return (
            f"{self.cores} cores, CPU {_fmt_mhz(self.cpu_mhz)} MHz, GPU {_fmt_mhz(self.gpu_mhz)} MHz, "
            f"memory {_fmt_mhz(self.mem_mhz)} MHz"
        )

    @classmethod
    def parse(cls, text: str) -> PowerMode:
        """Parse ``"12c/2201.6/1300.5/3199"`` (or a rounded ``"12c/2201/1300/3199"``) keeping the numbers as given.

        Use :meth:`PowerModeSpace.parse` to snap a label to the valid grid values.
        """
        if isinstance(text, PowerMode):
            return text
        m = _LABEL_RE.match(str(text))
        if not m:
            raise InvalidModeError(
                f"cannot parse power mode {text!r}: expected CORESc/CPU_MHZ/GPU_MHZ/MEM_MHZ, e.g. 8c/1344/727/2133"
            )
        return cls(int(m["cores"]), float(m["cpu_mhz"]), float(m["gpu_mhz"]), float(m["mem_mhz"]))

    # ----------------------------------------------------------------- dict / tuple
    def to_dict(self) -> dict[str, int | float]:
        return dict(zip(KNOBS, self.as_tuple()))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PowerMode:
        """From ``{"cores": 8, "cpu_mhz": 1344, "gpu_mhz": 726.75, "mem_mhz": 2133}`` (short knob names accepted)."""
        vals: dict[str, Any] = {}
        for key, value in d.items():
            name = knob_name(key)
            if name in vals:
                raise InvalidModeError(f"knob {name} given twice in {dict(d)!r}")
            vals[name] = value
        missing = [k for k in KNOBS if k not in vals]
        if missing:
            raise InvalidModeError(f"power mode {dict(d)!r} lacks {', '.join(missing)}")
        return cls(**vals)

    def as_tuple(self) -> tuple[int, float, float, float]:
        return (self.cores, self.cpu_mhz, self.gpu_mhz, self.mem_mhz)

    def replace(self, **changes: Any) -> PowerMode:
        """A copy with some knobs changed: ``mode.replace(gpu_mhz=114.75)`` (short knob names accepted)."""
        return _dc_replace(self, **{knob_name(k): v for k, v in changes.items()})

    def get(self, knob: str) -> int | float:
        return self.as_tuple()[KNOBS.index(knob_name(knob))]


ModeLike = Union[PowerMode, str, typing.Mapping[str, Any], tuple]  # runtime alias: Python 3.8's typing


class PowerModeSpace:
    """The grid of valid power modes: every combination of the valid values of the four knobs.

    ``PowerModeSpace(cores=range(1, 13), cpu_mhz=[...], gpu_mhz=[...], mem_mhz=[...])``

    Modes are enumerated (``iter``, ``mode_at``, ``index``, ``to_numpy``) in C order over
    ``KNOBS``: cores vary slowest, memory fastest, each knob ascending. ``index(mode)`` is
    ``((i_cores * n_cpu + i_cpu) * n_gpu + i_gpu) * n_mem + i_mem``.
    """

    def __init__(
        self,
        cores: Iterable[Any],
        cpu_mhz: Iterable[Any],
        gpu_mhz: Iterable[Any],
        mem_mhz: Iterable[Any],
        *,
        name: str = "",
    ) -> None:
        given = {"cores": cores, "cpu_mhz": cpu_mhz, "gpu_mhz": gpu_mhz, "mem_mhz": mem_mhz}
        self._values: dict[str, tuple] = {}
        for k in KNOBS:
            vals = tuple(sorted({_canon(k, v) for v in given[k]}))
            if not vals:
                raise InvalidModeError(f"PowerModeSpace: knob {k} has no valid values")
            self._values[k] = vals
        self._arrays = {k: np.asarray(self._values[k], dtype=float) for k in KNOBS}
        self._pos = {k: {v: i for i, v in enumerate(self._values[k])} for k in KNOBS}
        self.name = name
        self._numpy_cache: np.ndarray | None = None

    # ----------------------------------------------------------------- basic container protocol
    def values(self, knob: str) -> tuple:
        """Valid values of one knob, ascending."""
        return self._values[knob_name(knob)]

    @property
    def cores(self) -> tuple[int, ...]:
        return self._values["cores"]

    @property
    def cpu_mhz(self) -> tuple[float, ...]:
        return self._values["cpu_mhz"]

    @property
    def gpu_mhz(self) -> tuple[float, ...]:
        return self._values["gpu_mhz"]

    @property
    def mem_mhz(self) -> tuple[float, ...]:
        return self._values["mem_mhz"]

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return tuple(len(self._values[k]) for k in KNOBS)  # type: ignore[return-value]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[PowerMode]:
        for combo in itertools.product(*(self._values[k] for k in KNOBS)):
            yield PowerMode(*combo)

    def __contains__(self, mode: object) -> bool:
        if not isinstance(mode, PowerMode):
            return False
        return all(v in self._pos[k] for k, v in zip(KNOBS, mode.as_tuple()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PowerModeSpace) and self._values == other._values

    def __hash__(self) -> int:
        return hash(tuple(self._values[k] for k in KNOBS))

    def __repr__(self) -> str:
        dims = " x ".join(str(n) for n in self.shape)
        name = f"{self.name!r}, " if self.name else ""
        return f"PowerModeSpace({name}{dims} = {self.size:,} modes)"

    # ----------------------------------------------------------------- validation, parsing, snapping
    def _valid_list(self, knob: str) -> str:
        vals = self._values[knob]
        return ", ".join(str(v) if knob == "cores" else _fmt_mhz(v) for v in vals)

    def validate(self, mode: PowerMode) -> PowerMode:
        """Return ``mode`` if it is in the space, else raise :class:`InvalidModeError` listing valid values."""
        if not isinstance(mode, PowerMode):
            raise InvalidModeError(f"expected a PowerMode, got {type(mode).__name__}: {mode!r}")
        vals = mode.to_dict()
        bad = [k for k in KNOBS if vals[k] not in self._pos[k]]
        if bad:
            lines = [f"power mode {mode} ({mode.describe()}) is not valid{self._for()}:"]
            lines += [f"  {k}={_fmt_mhz(vals[k])} is not one of: {self._valid_list(k)}" for k in bad]
            raise InvalidModeError("\n".join(lines))
        return mode

    def _for(self) -> str:
        return f" for {self.name}" if self.name else ""

    def snap_value(
        self, knob: str, value: SupportsFloat | str, tolerance_mhz: float | None = SNAP_TOLERANCE_MHZ
    ) -> int | float:
        """The grid value of ``knob`` nearest to ``value``; with a tolerance, error if none is that close.

        Cores are never snapped: they must match exactly. ``tolerance_mhz=None`` snaps to the nearest.
        """
        knob = knob_name(knob)
        v = _canon(knob, value)
        if v in self._pos[knob]:
            return v
        if knob == "cores" and tolerance_mhz is not None:
            raise InvalidModeError(
                f"cores={v} is not valid{self._for()}: valid values are {self._valid_list(knob)}"
            )
        arr = self._arrays[knob]
        i = int(np.argmin(np.abs(arr - v)))
        best = self._values[knob][i]
        if tolerance_mhz is not None and abs(best - v) > tolerance_mhz + _EXACT_TOL:
            raise InvalidModeError(
                f"{knob}={_fmt_mhz(v)} is not within {_fmt_mhz(tolerance_mhz)} MHz of a valid value{self._for()}: "
                f"valid values are {self._valid_list(knob)}"
            )
        return best

    def nearest(self, mode: ModeLike) -> PowerMode:
        """The valid mode nearest to ``mode``, knob by knob (no tolerance: always succeeds)."""
        m = _as_mode(mode)
        return PowerMode(*(self.snap_value(k, v, None) for k, v in zip(KNOBS, m.as_tuple())))

    def coerce(self, mode: ModeLike, tolerance_mhz: float = SNAP_TOLERANCE_MHZ) -> PowerMode:
        """Turn a label, dict, tuple or PowerMode into a valid mode of this space.

        Each frequency snaps to the grid value within ``tolerance_mhz`` (so the paper's rounded label
        ``8c/1344/727/2133`` names ``8c/1344.0/726.75/2133.0``); anything further away is an error
        that lists the valid values. Labels ``maxn``/``max``, ``min`` and ``mid``/``midpoint`` are accepted.
        """
        if isinstance(mode, str):
            return self.parse(mode, tolerance_mhz)
        m = _as_mode(mode)
        errors, vals = [], []
        for k, v in zip(KNOBS, m.as_tuple()):
            try:
                vals.append(self.snap_value(k, v, tolerance_mhz))
            except InvalidModeError as exc:
                errors.append(f"  {exc}")
        if errors:
            raise InvalidModeError(f"power mode {m} is not valid{self._for()}:\n" + "\n".join(errors))
        return PowerMode(*vals)

    def parse(self, text: str, tolerance_mhz: float = SNAP_TOLERANCE_MHZ) -> PowerMode:
        """Parse a label into a valid mode of this space (snapping within ``tolerance_mhz``); see :meth:`coerce`."""
        key = str(text).strip().lower()
        if key in ("maxn", "max", "highest"):
            return self.max_mode()
        if key in ("min", "lowest"):
            return self.min_mode()
        if key in ("mid", "midpoint"):
            return self.midpoint()
        return self.coerce(PowerMode.parse(text), tolerance_mhz)

    # ----------------------------------------------------------------- indexing
    def index(self, mode: PowerMode) -> int:
        """Position of ``mode`` in the enumeration order (see class docstring)."""
        self.validate(mode)
        i = 0
        for k, v in zip(KNOBS, mode.as_tuple()):
            i = i * len(self._values[k]) + self._pos[k][v]
        return i

    def mode_at(self, i: int) -> PowerMode:
        """The ``i``-th mode (negative indices count from the end)."""
        n = self.size
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"mode index {i} out of range for a space of {n} modes")
        out = []
        for k in reversed(KNOBS):
            i, r = divmod(i, len(self._values[k]))
            out.append(self._values[k][r])
        return PowerMode(*reversed(out))

    # ----------------------------------------------------------------- neighbours and extremes
    def neighbours(self, mode: PowerMode, knob: str) -> tuple[PowerMode | None, PowerMode | None]:
        """The modes one grid step lower and higher along ``knob`` (``None`` at the edge of the grid)."""
        return self.step(mode, knob, -1), self.step(mode, knob, +1)

    def step(self, mode: PowerMode, knob: str, delta: int = 1) -> PowerMode | None:
        """``mode`` moved ``delta`` grid steps along ``knob``; ``None`` if that leaves the grid."""
        knob = knob_name(knob)
        self.validate(mode)
        j = self._pos[knob][mode.get(knob)] + int(delta)
        vals = self._values[knob]
        if not 0 <= j < len(vals):
            return None
        return mode.replace(**{knob: vals[j]})

    def lowest(self, knob: str) -> int | float:
        return self.values(knob)[0]

    def highest(self, knob: str) -> int | float:
        return self.values(knob)[-1]

    def min_mode(self) -> PowerMode:
        return PowerMode(*(self._values[k][0] for k in KNOBS))

    def max_mode(self) -> PowerMode:
        """Every knob at its highest value (MAXN on a Jetson)."""
        return PowerMode(*(self._values[k][-1] for k in KNOBS))

    def midpoint(self) -> PowerMode:
        """Every knob at its middle value: index ``n // 2`` of the ``n`` sorted values (upper middle when even).

        For the Fulcrum subset this is ``8c/1344/726.75/2133`` (GPU 726.75 MHz), Fulcrum's "mid" mode.
        """
        return PowerMode(*(self._values[k][len(self._values[k]) // 2] for k in KNOBS))

    # ----------------------------------------------------------------- sub-grids
    def subspace(
        self, *, name: str = "", tolerance_mhz: float = SNAP_TOLERANCE_MHZ, **values: Iterable[Any]
    ) -> PowerModeSpace:
        """A sub-grid: the given knobs restricted to the given values (each snapped within ``tolerance_mhz``).

        ``space.subspace(cores=[4, 8, 12])`` keeps every other knob as it is.
        """
        new: dict[str, tuple] = dict(self._values)
        for key, vals in values.items():
            k = knob_name(key)
            new[k] = tuple(self.snap_value(k, v, tolerance_mhz) for v in vals)
        return PowerModeSpace(**new, name=name or (f"{self.name} subset" if self.name else ""))

    def is_subspace_of(self, other: PowerModeSpace) -> bool:
        return all(set(self._values[k]) <= set(other._values[k]) for k in KNOBS)

    # ----------------------------------------------------------------- numpy
    def to_numpy(self) -> np.ndarray:
        """All modes as an ``(N, 4)`` float64 array, columns ``KNOBS``, rows in :meth:`index` order."""
        if self._numpy_cache is None:
            grids = np.meshgrid(*(self._arrays[k] for k in KNOBS), indexing="ij")
            arr = np.stack([g.reshape(-1) for g in grids], axis=1)
            arr.setflags(write=False)
            self._numpy_cache = arr
        return self._numpy_cache.copy()

    def from_numpy(self, array: ArrayLike, tolerance_mhz: float = _EXACT_TOL) -> list[PowerMode]:
        """Modes from an ``(N, 4)`` (or ``(4,)``) array in ``KNOBS`` order, each checked against the grid."""
        idx = self.indices(array, tolerance_mhz)
        return [self.mode_at(i) for i in np.atleast_1d(idx)]

    def indices(self, array: ArrayLike, tolerance_mhz: float = _EXACT_TOL) -> np.ndarray:
        """Vectorised :meth:`index` for an ``(N, 4)`` array of modes (or one ``(4,)`` row)."""
        a = np.asarray(array, dtype=float)
        one = a.ndim == 1
        a = np.atleast_2d(a)
        if a.shape[1] != len(KNOBS):
            raise InvalidModeError(f"expected an array of shape (N, 4) in order {KNOBS}, got shape {a.shape}")
        out = np.zeros(a.shape[0], dtype=np.int64)
        for j, k in enumerate(KNOBS):
            grid = self._arrays[k]
            col = a[:, j]
            pos = np.clip(np.searchsorted(grid, col), 1, max(len(grid) - 1, 1))
            lo = np.clip(pos - 1, 0, len(grid) - 1)
            hi = np.clip(pos, 0, len(grid) - 1)
            pick = np.where(np.abs(grid[lo] - col) <= np.abs(grid[hi] - col), lo, hi)
            dist = np.abs(grid[pick] - col)
            bad = np.nonzero(dist > tolerance_mhz)[0]
            if bad.size:
                r = int(bad[0])
                raise InvalidModeError(
                    f"row {r} has {k}={col[r]:g}, which is not valid{self._for()} "
                    f"(valid: {self._valid_list(k)}); {bad.size} row(s) invalid"
                )
            out = out * len(grid) + pick
        return out[0] if one else out

    def modes_at(self, indices: ArrayLike) -> np.ndarray:
        """Vectorised :meth:`mode_at`: the ``(K, 4)`` array of the modes at ``indices``."""
        idx = np.asarray(indices, dtype=np.int64)
        idx = np.where(idx < 0, idx + self.size, idx)
        if np.any((idx < 0) | (idx >= self.size)):
            raise IndexError(f"mode index out of range for a space of {self.size} modes")
        cols = []
        rest = idx.copy()
        for k in reversed(KNOBS):
            n = len(self._values[k])
            rest, r = np.divmod(rest, n)
            cols.append(self._arrays[k][r])
        return np.stack(list(reversed(cols)), axis=-1)

    # ----------------------------------------------------------------- profiles
    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly profile: ``{"name": ..., "cores": [...], "cpu_mhz": [...], ...}``."""
        return {"name": self.name, **{k: list(self._values[k]) for k in KNOBS}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PowerModeSpace:
        """Load a space from a device profile (the form :meth:`to_dict` writes; ``"modes"`` sub-dict accepted)."""
        src = d.get("modes", d) if isinstance(d.get("modes"), Mapping) else d
        try:
            vals = {k: src[k] for k in KNOBS}
        except KeyError as exc:
            raise InvalidModeError(f"device profile lacks the valid values of {exc.args[0]!r}") from None
        return cls(**vals, name=str(d.get("name", "")))

    def describe(self) -> str:
        """A few lines: the values per knob and the size."""
        head = f"{self.name}: " if self.name else ""
        lines = [f"{head}{' x '.join(str(n) for n in self.shape)} = {self.size:,} power modes"]
        lines += [f"  {KNOB_TITLES[k]:>16} ({len(self._values[k]):>2}): {self._valid_list(k)}" for k in KNOBS]
        return "\n".join(lines)


def _as_mode(mode: ModeLike) -> PowerMode:
    if isinstance(mode, PowerMode):
        return mode
    if isinstance(mode, str):
        return PowerMode.parse(mode)
    if isinstance(mode, Mapping):
        return PowerMode.from_dict(mode)
    if isinstance(mode, (tuple, list, np.ndarray)):
        vals = list(mode)
        if len(vals) != 4:
            raise InvalidModeError(f"a power mode has 4 knobs {KNOBS}, got {len(vals)} values: {mode!r}")
        return PowerMode(*vals)
    raise InvalidModeError(f"cannot make a power mode from {type(mode).__name__}: {mode!r}")
