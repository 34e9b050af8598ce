"""A fake Linux powercap tree with RAPL domains, whose energy counters can be advanced and wrapped.

``build_rapl(root, packages=1, vendor="intel")`` lays out, under ``root``, what the ``intel_rapl`` driver shows
(as the real ``/sys/class/powercap`` entries: symlinks into ``sys/devices/virtual/powercap/intel-rapl``)::

    sys/class/powercap/intel-rapl:0/{name=package-0, energy_uj, max_energy_range_uj, enabled}
    sys/class/powercap/intel-rapl:0:0/{name=core, ...}   intel-rapl:0:1/{name=uncore}   intel-rapl:0:2/{name=dram}
    sys/class/powercap/intel-rapl-mmio:0/{name=package-0}   (newer Intel: a second view of the package)

``vendor="amd"`` (Zen, served by the same driver): package + core, no DRAM domain, no mmio.
``rapl.advance(rail, joules)`` adds energy (wrapping at ``max_energy_range_uj``), ``rapl.root_only()`` makes
``energy_uj`` 0400 as Linux >= 5.10 does, ``rapl.garbage(rail)`` writes junk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

MAX_RANGE_UJ = 262143328850  # a typical Intel package range (about 262 kJ)


@dataclass
class FakeRapl:
    root: Path
    files: dict[str, Path] = field(default_factory=dict)  # rail -> energy_uj
    counters: dict[str, int] = field(default_factory=dict)
    max_uj: dict[str, int] = field(default_factory=dict)

    def set_counter(self, rail: str, uj: int) -> None:
        self.counters[rail] = int(uj)
        f = self.files[rail]
        mode = f.stat().st_mode & 0o777
        f.chmod(0o644)
        f.write_text(f"{int(uj)}\n")
        f.chmod(mode)

    def advance(self, rail: str, joules: float) -> None:
        self.set_counter(rail, (self.counters[rail] + int(round(joules * 1e6))) % self.max_uj[rail])

    def root_only(self) -> None:
        for f in self.files.values():
            f.chmod(0o400)

    def garbage(self, rail: str, text: str = "n/a\n") -> None:
        f = self.files[rail]
        f.chmod(0o644)
        f.write_text(text)


def _domain(root: Path, fake: FakeRapl, rel: str, name: str, rail: str | None, start_uj: int,
            max_uj: int) -> None:
    start_uj %= max_uj
    real = root / "sys/devices/virtual/powercap" / rel
    real.mkdir(parents=True, exist_ok=True)
    (real / "name").write_text(f"{name}\n")
    (real / "max_energy_range_uj").write_text(f"{max_uj}\n")
    (real / "enabled").write_text("1\n")
    (real / "energy_uj").write_text(f"{start_uj}\n")
    (real / "energy_uj").chmod(0o444)
    link = root / "sys/class/powercap" / real.name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(real)
    if rail:
        fake.files[rail] = real / "energy_uj"
        fake.counters[rail] = start_uj
        fake.max_uj[rail] = max_uj


def build_rapl(root: Path, packages: int = 1, vendor: str = "intel", max_uj: int = MAX_RANGE_UJ) -> FakeRapl:
    root = Path(root)
    fake = FakeRapl(root)
    (root / "sys/class/powercap").mkdir(parents=True, exist_ok=True)
    for p in range(packages):
        pkg = f"intel-rapl/intel-rapl:{p}"
        _domain(root, fake, pkg, f"package-{p}", f"package-{p}", 123_456_789 * (p + 1), max_uj)
        _domain(root, fake, f"{pkg}/intel-rapl:{p}:0", "core", None, 55_555_555, max_uj)
        if vendor == "intel":
            _domain(root, fake, f"{pkg}/intel-rapl:{p}:1", "uncore", None, 1_111_111, max_uj)
            _domain(root, fake, f"{pkg}/intel-rapl:{p}:2", "dram", f"dram-{p}", 9_876_543, 65_712_999_613)
    if vendor == "intel":
        _domain(root, fake, "intel-rapl-mmio/intel-rapl-mmio:0", "package-0", None, 42, max_uj)
    return fake
