"""Which module is under a file-system root: its device tree, its L4T release."""

from __future__ import annotations

import re
from pathlib import Path

from lightning_edge.catalog.boards import BOARDS
from lightning_edge.catalog.facts import BoardInfo
from lightning_edge.catalog.paths import DT_COMPATIBLE, DT_MODEL, TEGRA_RELEASE

__all__ = ["L4T_JETPACK", "detect_board", "detect_module", "is_jetson", "jetpack_major"]

#: L4T major release -> JetPack major: R32 is JetPack 4, R34/R35 JetPack 5, R36 JetPack 6 (NVIDIA's release notes,
#: as jtop maps them), R38 and R39 JetPack 7 (rbonghi/jetson_stats@f41d5ca jtop/core/hw_detect.py: "L4T R38 =
#: JetPack 7.0/7.1, R39 = JetPack 7.2")
L4T_JETPACK: dict[int, int] = {32: 4, 34: 5, 35: 5, 36: 6, 38: 7, 39: 7}

# model-string fallbacks for a device tree whose compatible names no module (checked in order)
_MODELS: tuple[tuple[str, str], ...] = (
    ("agx thor", "thor"), ("jetson thor", "thor"),
    ("agx orin 64gb", "orin-agx-64gb"), ("agx orin 32gb", "orin-agx-32gb"),
    ("agx orin", "orin-agx"), ("orin agx", "orin-agx"),
    ("orin nx 8gb", "orin-nx-8gb"), ("orin nx", "orin-nx-16gb"),
    ("orin nano 4gb", "orin-nano-4gb"), ("orin nano", "orin-nano-8gb"),
    ("xavier nx", "xavier-nx"), ("agx xavier", "xavier-agx"),
)


def _read(path: Path) -> str | None:
    try:
        return path.read_bytes().replace(b"\x00", b"\n").decode("utf-8", "replace").strip()
    except OSError:
        return None


def is_jetson(root: str | Path = "/") -> bool:
    """True if ``root`` looks like a Jetson (L4T release file or a tegra device tree)."""
    r = Path(root)
    if (r / TEGRA_RELEASE).exists():
        return True
    compat = _read(r / DT_COMPATIBLE) or ""
    return "tegra" in compat.lower()


def detect_board(root: str | Path = "/") -> BoardInfo | None:
    """The module under ``root`` from ``/proc/device-tree/compatible`` (an entry ``nvidia,<module>`` or
    ``...+<module>``), then from ``model``; ``None`` when neither names a catalogued module."""
    r = Path(root)
    entries = [e.strip().lower() for e in (_read(r / DT_COMPATIBLE) or "").splitlines() if e.strip()]
    names = {part.split(",", 1)[-1] for e in entries for part in e.split("+")}
    for info in BOARDS.values():  # "p3668" names p3668-0000 and p3668-0001; "p3767-0000" only itself
        if any(n == c or n.startswith(c + "-") for c in info.compatible for n in names):
            return info
    model = (_read(r / DT_MODEL) or "").lower()
    for words, key in _MODELS:
        if words in model:
            return BOARDS[key]
    return None


def detect_module(root: str | Path = "/") -> str | None:
    """The key in :data:`~lightning_edge.catalog.MODULE_MAX_POWER_W` of the module under ``root``, or ``None``."""
    info = detect_board(root)
    return info.key if info is not None else None


def jetpack_major(root: str | Path = "/") -> int | None:
    """JetPack major version from ``/etc/nv_tegra_release`` (:data:`L4T_JETPACK`), or ``None``."""
    text = _read(Path(root) / TEGRA_RELEASE) or ""
    m = re.search(r"#\s*R(\d+)", text)
    if not m:
        return None
    return L4T_JETPACK.get(int(m.group(1)))
