"""Where the catalogue's facts were read. NVIDIA's files are not copied into this project (licence): the facts are
taken, and each is cited by the public copy it was read from, with the commit. docs/boards.md lists them."""

from __future__ import annotations

from lightning_edge.catalog.facts import Source

__all__ = [
    "CONCORD", "JP5_COMMIT", "LINUX", "SEEDS", "SPEC_NOTES", "SUPER_COMMIT", "derived", "jetson_stats", "linux_dt",
    "nvpmodel_conf", "third_party",
]

#: the public repository that carries NVIDIA's nvpmodel .conf files verbatim (nvpmodel/*.conf)
CONCORD = "LineageOS/android_device_nvidia_concord"
#: its commit with the JetPack 5 files ("Add nvpmodel and configs", 2022-02-25)
JP5_COMMIT = "640733e607499e9bb841d200638996680e5dd47b"
#: its commit with the JetPack 6.2 "Super" files (*_super.conf, NVIDIA copyright 2024)
SUPER_COMMIT = "370b63a8dbe954cd5f2da0c24694a1af5796612f"
LINUX = "torvalds/linux"

SEEDS = Source("the papers' grid, docs/twin-targets.md (Orin AGX developer kit, JetPack 5: the frequencies "
               "the reference papers list)", True)
SPEC_NOTES = Source("docs/jetson-board-notes.md (facts gathered from public files, not verified against NVIDIA's "
                    "files here)", False)


def nvpmodel_conf(conf: str, super_: bool = False) -> Source:
    """NVIDIA's nvpmodel configuration ``conf`` (e.g. ``nvpmodel_p3767_0000.conf``), read at the public copy."""
    commit = SUPER_COMMIT if super_ else JP5_COMMIT
    release = 'JetPack 6.2 "Super"' if super_ else "JetPack 5"
    return Source(f"NVIDIA {conf} ({release}), copied verbatim in {CONCORD}@{commit[:7]} nvpmodel/{conf}", True)


def linux_dt(path: str, commit: str, what: str = "") -> Source:
    """A device tree of mainline Linux (arch/arm64/boot/dts/nvidia/)."""
    return Source(f"{LINUX}@{commit[:7]} arch/arm64/boot/dts/nvidia/{path}{f' ({what})' if what else ''}", True)


def jetson_stats(files: str, commit: str = "f41d5cadfeafc3516ff8cb7ddd5712cfa9a78611", what: str = "") -> Source:
    """rbonghi/jetson_stats (jtop), which reads these at run time on real boards: third-party, unconfirmed."""
    return Source(f"rbonghi/jetson_stats@{commit[:7]} {files}{f' ({what})' if what else ''}", False)


def third_party(what: str) -> Source:
    """A public reading or copy not made by NVIDIA (a script, a wiki, a modified conf): unconfirmed."""
    return Source(what, False)


def derived(how: str, *from_: Source) -> Source:
    """A value computed from other facts by a stated rule: never more confirmed than what it comes from, and marked
    unconfirmed (the rule itself is not a board's file)."""
    cites = "; ".join(s.cite for s in from_)
    return Source(f"derived: {how}{f' (from {cites})' if cites else ''}", False)
