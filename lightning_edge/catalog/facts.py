"""The shapes of the catalogue's facts: each one carries its :class:`Source` (where it was read, and whether that
confirms it). Data only: the boards themselves are in :mod:`lightning_edge.catalog.boards`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lightning_edge.modes import PowerMode, PowerModeSpace

__all__ = ["BoardInfo", "NamedMode", "Rails", "RatedPower", "Source", "SysfsLayout", "Table"]


@dataclass(frozen=True)
class Source:
    """Where a fact comes from. ``confirmed``: read in NVIDIA's own file (the commit of the public copy is in
    ``cite``) or in docs/twin-targets.md; otherwise the fact is **unconfirmed** (a
    secondary source: gathered notes, a third-party copy or reading, a data-sheet figure not read in a file here) and
    ``cite`` says which and, for a derived value, how it was derived."""

    cite: str
    confirmed: bool

    def __str__(self) -> str:
        return f"{self.cite} [{'confirmed' if self.confirmed else 'unconfirmed'}]"

    def __add__(self, other: Source) -> Source:
        """Two sources for one fact: confirmed only when both are."""
        return Source(f"{self.cite}; {other.cite}", self.confirmed and other.confirmed)


@dataclass(frozen=True)
class Table:
    """A frequency table in the kernel's unit (CPU kHz, GPU and EMC Hz), ascending, and its source."""

    values: tuple[int, ...]
    source: Source

    def __post_init__(self) -> None:
        if not self.values or list(self.values) != sorted(set(self.values)):
            raise ValueError(f"a frequency table is ascending and non-empty, got {self.values!r}")

    @property
    def max(self) -> int:
        return self.values[-1]


@dataclass(frozen=True)
class NamedMode:
    """One nvpmodel ``< POWER_MODEL >`` of a module: online cores and the caps it writes (``None``: no cap, ``-1``
    or ``0`` in the conf). ``firmware``: which release's file (``jetpack4``, ``jetpack5``, ``super`` for JetPack 6.2's
    ``*_super.conf``, ``unknown``). ``known=False``: only the name is documented, not the caps."""

    name: str
    id: int | None
    cores: int | None
    cpu_khz: int | None
    gpu_hz: int | None
    emc_hz: int | None
    firmware: str
    source: Source
    default: bool = False
    known: bool = True

    def mode(self, space: PowerModeSpace) -> PowerMode | None:
        """The mode of ``space`` this named mode allows at most: its cores, and on each knob the highest value of the
        grid under the cap (a cap need not be a value of the table: devfreq holds the highest frequency below it).
        ``None`` when the caps are not documented."""
        if not self.known:
            return None

        def under(values: tuple[float, ...], cap_mhz: float | None) -> float:
            if cap_mhz is None:
                return values[-1]
            below = [v for v in values if v <= cap_mhz + 1e-6]
            return below[-1] if below else values[0]

        cores = min(self.cores or space.cores[-1], space.cores[-1])
        return PowerMode(
            cores,
            under(space.cpu_mhz, None if self.cpu_khz is None else self.cpu_khz / 1e3),
            under(space.gpu_mhz, None if self.gpu_hz is None else self.gpu_hz / 1e6),
            under(space.mem_mhz, None if self.emc_hz is None else self.emc_hz / 1e6),
        )

    def caps(self) -> str:
        """``4 cores, CPU <= 1113.6, GPU <= 408, EMC <= 2133 MHz`` (``unc`` where uncapped)."""
        if not self.known:
            return "caps unknown"

        def cap(v: int | None, scale: float) -> str:
            return "unc" if v is None else f"{v / scale:g}"

        cores = "all" if self.cores is None else str(self.cores)
        return (f"{cores} cores, CPU <= {cap(self.cpu_khz, 1e3)}, GPU <= {cap(self.gpu_hz, 1e6)}, "
                f"EMC <= {cap(self.emc_hz, 1e6)} MHz")


@dataclass(frozen=True)
class Rails:
    """A module's INA3221 rails (names as the driver labels them), which one is its input (``None``: none), and the
    rails whose sum is the module's total (the input alone, or the documented sum)."""

    names: tuple[str, ...]
    input: str | None
    total: tuple[str, ...]
    source: Source


@dataclass(frozen=True)
class SysfsLayout:
    """Where a family's knobs live, relative to the file-system root: GPU devfreq directories in the order a
    controller tries them (``(variant, path)``), the memory clock (``emc_kind`` ``bpmp``: the bpmp debugfs clock, a
    rate and a lock; ``devfreq``: a devfreq device, a min/max pair) and nvpmodel's EMC cap file by JetPack."""

    family: str
    gpu_devfreq: tuple[tuple[str, str], ...]
    emc_kind: str
    emc_dir: str
    emc_caps: tuple[tuple[int, str], ...]
    source: Source


@dataclass(frozen=True)
class RatedPower:
    """A module's rated maximum power (W) and its source."""

    watts: float
    source: Source


@dataclass(frozen=True)
class BoardInfo:
    """One Jetson module: its CPU layout, frequency tables, nvpmodel named modes, rails, sysfs layout and sources.

    Only ``key``, ``name``, ``cpu_count`` and ``clusters`` are required: a board the catalogue does not know is
    described by what its sysfs shows (:meth:`lightning_edge.devices.controllers.sysfs.JetsonLayout.probe`)."""

    key: str
    name: str
    cpu_count: int
    clusters: tuple[tuple[int, ...], ...]
    compatible: tuple[str, ...] = ()
    module: str = ""
    soc: str = ""
    cpu: Table | None = None
    gpu: Table | None = None
    emc: Table | None = None
    nvpmodel_clusters: tuple[str, ...] = ()
    """nvpmodel.conf names of the CPU clusters, in cluster order (``CPU_A78_0``...)."""
    named_modes: tuple[NamedMode, ...] = ()
    rails: Rails | None = None
    layout: SysfsLayout | None = None
    grid_firmware: str = ""
    """Whose frequency tables the grid is (``jetpack5``, ``super``...): modules whose firmware raised the clocks."""
    sources: dict[str, Source] = field(default_factory=dict)
    """The source of the facts that are not tables, modes, rails or layout: ``cores``, ``clusters``, ``compatible``."""
    rated: RatedPower | None = None
    """The module's rated maximum power: its entry of :data:`lightning_edge.catalog.MODULE_MAX_POWER` (the home)."""

    @property
    def confirmed(self) -> bool:
        """Whether the module's mode space (cores and the three tables) is confirmed."""
        f = self.facts()
        return all(f[k].confirmed for k in ("cores", "cpu", "gpu", "emc") if k in f) and "cpu" in f

    @property
    def cpu_khz(self) -> tuple[int, ...] | None:
        return self.cpu.values if self.cpu else None

    @property
    def gpu_hz(self) -> tuple[int, ...] | None:
        return self.gpu.values if self.gpu else None

    @property
    def emc_hz(self) -> tuple[int, ...] | None:
        return self.emc.values if self.emc else None

    @property
    def max_power_w(self) -> float | None:
        """The module's rated maximum power (W), from :data:`lightning_edge.catalog.MODULE_MAX_POWER`."""
        return self.rated.watts if self.rated is not None else None

    def facts(self) -> dict[str, Source]:
        """``{fact: its source}`` for every fact the catalogue has of this module."""
        out = dict(self.sources)
        for name in ("cpu", "gpu", "emc"):
            table = getattr(self, name)
            if table is not None:
                out[name] = table.source
        if self.named_modes:
            srcs = _distinct(m.source for m in self.named_modes)
            out["named_modes"] = Source("; ".join(s.cite for s in srcs), all(s.confirmed for s in srcs))
        if self.rails is not None:
            out["rails"] = self.rails.source
        if self.layout is not None:
            out["layout"] = self.layout.source
        if self.rated is not None:
            out["max_power"] = self.rated.source
        return out

    def space(self) -> PowerModeSpace | None:
        """The grid from the catalogue, or ``None`` when the frequencies must be read from the board."""
        if not (self.cpu and self.gpu and self.emc):
            return None
        return PowerModeSpace(
            cores=range(1, self.cpu_count + 1),
            cpu_mhz=[k / 1e3 for k in self.cpu.values],
            gpu_mhz=[h / 1e6 for h in self.gpu.values],
            mem_mhz=[h / 1e6 for h in self.emc.values],
            name=self.key,
        )

    def modes_of(self, firmware: str | None = None) -> tuple[NamedMode, ...]:
        """The named modes of one firmware (``None``: all)."""
        return tuple(m for m in self.named_modes if firmware is None or m.firmware == firmware)


def _distinct(sources: Sequence[Source] | object) -> list[Source]:
    out: list[Source] = []
    for s in sources:  # type: ignore[attr-defined]
        if s not in out:
            out.append(s)
    return out
