"""The hardware facts a board's twin is extrapolated by: per module, its GPU's SMs and tensor cores,
its memory bus width, its CPU cores' architecture, each with its source (the module's clocks, cores and rated power
are in its :class:`~lightning_edge.catalog.facts.BoardInfo`). A fact not found in a source read here is ``None`` and
its source says **unknown**; an extrapolation that needs it assumes the papers' board's value and says so.

The papers' board (``orin-agx``: 16 SMs of 128 CUDA cores and 4 tensor cores, a 256-bit LPDDR5 bus) is the reference
the twin's coefficients were fitted on; :func:`lightning_edge.twin.board_files.extrapolate` scales them by these ratios
(docs/boards.md, "Extrapolated boards").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lightning_edge.catalog.facts import Source
from lightning_edge.catalog.sources import SEEDS, derived, nvpmodel_conf, third_party

__all__ = ["Hardware", "HARDWARE", "hardware_of", "HARDWARE_FACTS"]

#: the facts a :class:`Hardware` holds (each with its source in ``Hardware.sources``)
HARDWARE_FACTS = ("gpu_arch", "sms", "tensor_cores", "cuda_cores", "mem_bus_bits", "mem_type", "cpu_arch")


@dataclass(frozen=True)
class Hardware:
    """One module's hardware facts (see the module docstring). ``None``: not known (``sources[fact]`` says so)."""

    gpu_arch: str
    sms: int | None
    tensor_cores: int | None
    cuda_cores: int | None
    mem_bus_bits: int | None
    mem_type: str
    cpu_arch: str
    sources: dict[str, Source] = field(default_factory=dict)

    def known(self, fact: str) -> bool:
        return getattr(self, fact) is not None

    def facts(self) -> dict[str, tuple[object, Source]]:
        """``{fact: (value, source)}`` (``value`` None: unknown)."""
        return {f: (getattr(self, f), self.sources[f]) for f in HARDWARE_FACTS}


def _unknown(what: str) -> Source:
    return Source(f"unknown: {what}", False)


# --------------------------------------------------------------------------- sources read for these facts
_ORIN_BRIEF = third_party(
    "NVIDIA Jetson AGX Orin Series Technical Brief (nvidia-jetson-agx-orin-technical-brief.pdf) as summarised at "
    "mzph.cn/web/30785.shtml: 2 GPCs, 16 SMs, 128 CUDA cores and 4 third-generation tensor cores per SM (2048 and 64)")
_ORIN_DRAM = Source("the twin's DRAM peak, 204.8 GB/s: LPDDR5, 256-bit at 3199 MHz EMC "
                    "(lightning_edge/twin/physics.py DRAM_PEAK_BPS, from the twin targets (docs/twin-targets.md))", True) + SEEDS
_NANO_DS = third_party(
    "NVIDIA Jetson Orin Nano Series data sheet as copied at scribd.com/document/673174036: 'Jetson Orin Nano 8GB: "
    "1024 NVIDIA CUDA cores | 32 Tensor cores', 'Jetson Orin Nano 4GB: 512 NVIDIA CUDA cores | 16 Tensor cores', "
    "'ON 8GB: 8GB 128-bit LPDDR5 DRAM', 'ON 4GB: 4GB 64-bit LPDDR5 DRAM'")
_NANO_PAGE = third_party(
    "brojogopalsapui.com, Jetson Orin Nano Super deep dive (from NVIDIA's Orin Nano Super data sheet): 8 SMs "
    "(1 GPC x 4 TPCs x 2), 1024 CUDA cores, 32 tensor cores, 128-bit LPDDR5")
_NX_GIST = third_party(
    "a public build list (gist.github.com/dudo/5b14dcbb873aec6a6c307ecfea2ee678): 'Jetson Orin NX 8 cores / 16 GB / "
    "1024 CUDA cores / 32 Tensor cores'; the Orin NX data sheet DS-10712-001 itself was not read here")
_XNX_DS = third_party(
    "NVIDIA Jetson Xavier NX data sheet DA-09366-001 [preliminary] as copied at documents.pub: '384 NVIDIA CUDA cores "
    "| 48 Tensor cores', GPU maximum 1100 MHz, '8 GB 128-bit LPDDR4x DRAM', six NVIDIA Carmel cores")
_XAGX_PAGE = third_party(
    "jonathan-hui.medium.com, 'AI Edge Chips: Nvidia Jetson Xavier NX, AGX Xavier...': '8 core Carmel ARM 64-bit CPU, "
    "512 core Volta GPU with 64 Tensor Cores'")
_THOR_RR = third_party(
    "RidgeRun, NVIDIA Jetson AGX Thor / Blackwell GPU (developer.ridgerun.com): '2560 NVIDIA CUDA Cores and 96 5th GEN "
    "Tensor Cores (3GPC), 10-TPCs'; 14 Neoverse V3AE cores (the catalogue's Thor entry)")
_THOR_FORUM = third_party(
    "NVIDIA developer forum thread 356355 ('Clarification on CUDA Core and Tensor Core counts for Jetson AGX Thor'): "
    "the CUDA driver reports 20 SMs on a Thor developer kit (20 x 128 = 2560 CUDA cores); 96 tensor cores would be the "
    "24-SM maximum of the SoC: the count is ambiguous")
_VOLTA_SM = "Volta SMs have 64 CUDA cores and 8 tensor cores"

_A78 = "cortex-a78ae"

HARDWARE: dict[str, Hardware] = {
    "orin-agx": Hardware("ampere", 16, 64, 2048, 256, "LPDDR5", _A78, {
        "gpu_arch": _ORIN_BRIEF, "sms": _ORIN_BRIEF, "tensor_cores": _ORIN_BRIEF, "cuda_cores": _ORIN_BRIEF,
        "mem_bus_bits": _ORIN_DRAM, "mem_type": _ORIN_DRAM, "cpu_arch": _ORIN_BRIEF}),
    "orin-agx-32gb": Hardware("ampere", 14, 56, 1792, 256, "LPDDR5", _A78, {
        "gpu_arch": _ORIN_BRIEF,
        "sms": derived("the Orin's 16 SMs less one TPC (2 SMs) gated in every mode (TPC_PG_MASK in MAXN)",
                       nvpmodel_conf("nvpmodel_p3701_0004.conf"), _ORIN_BRIEF),
        "tensor_cores": derived("14 SMs x 4 tensor cores", _ORIN_BRIEF),
        "cuda_cores": derived("14 SMs x 128 CUDA cores", _ORIN_BRIEF),
        "mem_bus_bits": derived("the same AGX Orin module family (p3701) as the developer kit: its 256-bit bus is "
                                "assumed; the 32GB module's data sheet was not read here", _ORIN_DRAM),
        "mem_type": _ORIN_DRAM, "cpu_arch": _ORIN_BRIEF}),
    "orin-agx-64gb": Hardware("ampere", 16, 64, 2048, 256, "LPDDR5", _A78, {
        "gpu_arch": _ORIN_BRIEF, "sms": _ORIN_BRIEF, "tensor_cores": _ORIN_BRIEF, "cuda_cores": _ORIN_BRIEF,
        "mem_bus_bits": derived("the developer kit's (the same p3701 module with 64 GB)", _ORIN_DRAM),
        "mem_type": _ORIN_DRAM, "cpu_arch": _ORIN_BRIEF}),
    "orin-nx-16gb": Hardware("ampere", 8, 32, 1024, 128, "LPDDR5", _A78, {
        "gpu_arch": _NX_GIST, "sms": derived("1024 CUDA cores / 128 per Orin SM", _NX_GIST, _ORIN_BRIEF),
        "tensor_cores": _NX_GIST, "cuda_cores": _NX_GIST,
        "mem_bus_bits": derived("the Orin Nano 8GB's 128-bit LPDDR5 (the same p3767 module family; the Orin NX "
                                "data sheet's figure was not read here)", _NANO_DS),
        "mem_type": _NANO_DS, "cpu_arch": _NX_GIST}),
    "orin-nx-8gb": Hardware("ampere", 8, 32, 1024, 128, "LPDDR5", _A78, {
        "gpu_arch": _NX_GIST,
        "sms": derived("assumed the Orin NX 16GB's (no source read here gives the 8GB module's GPU)", _NX_GIST),
        "tensor_cores": derived("assumed the Orin NX 16GB's", _NX_GIST),
        "cuda_cores": derived("assumed the Orin NX 16GB's", _NX_GIST),
        "mem_bus_bits": derived("assumed the Orin NX 16GB's 128-bit bus", _NANO_DS),
        "mem_type": _NANO_DS, "cpu_arch": _NX_GIST}),
    "orin-nano-8gb": Hardware("ampere", 8, 32, 1024, 128, "LPDDR5", _A78, {
        "gpu_arch": _NANO_DS, "sms": _NANO_PAGE, "tensor_cores": _NANO_DS, "cuda_cores": _NANO_DS,
        "mem_bus_bits": _NANO_DS, "mem_type": _NANO_DS, "cpu_arch": _NANO_DS}),
    "orin-nano-4gb": Hardware("ampere", 4, 16, 512, 64, "LPDDR5", _A78, {
        "gpu_arch": _NANO_DS, "sms": derived("512 CUDA cores / 128 per Orin SM", _NANO_DS, _ORIN_BRIEF),
        "tensor_cores": _NANO_DS, "cuda_cores": _NANO_DS, "mem_bus_bits": _NANO_DS, "mem_type": _NANO_DS,
        "cpu_arch": _NANO_DS}),
    "xavier-nx": Hardware("volta", 6, 48, 384, 128, "LPDDR4x", "carmel", {
        "gpu_arch": _XNX_DS, "sms": derived(f"384 CUDA cores: {_VOLTA_SM}", _XNX_DS),
        "tensor_cores": _XNX_DS, "cuda_cores": _XNX_DS, "mem_bus_bits": _XNX_DS, "mem_type": _XNX_DS,
        "cpu_arch": _XNX_DS}),
    "xavier-agx": Hardware("volta", 8, 64, 512, None, "LPDDR4x", "carmel", {
        "gpu_arch": _XAGX_PAGE, "sms": derived(f"512 CUDA cores: {_VOLTA_SM}", _XAGX_PAGE),
        "tensor_cores": _XAGX_PAGE, "cuda_cores": _XAGX_PAGE,
        "mem_bus_bits": _unknown("the AGX Xavier's memory bus width was not found in a source read here (its data "
                                 "sheet copy at studylib.net/doc/25568707 was read only in part)"),
        "mem_type": third_party("NVIDIA Jetson AGX Xavier data sheet DS-09654-002 as copied at studylib.net: "
                                "'Volta GPU + Carmel CPU + 32 GB LPDDR4x'"),
        "cpu_arch": _XAGX_PAGE}),
    "thor": Hardware("blackwell", 20, 96, 2560, None, "LPDDR5X", "neoverse-v3ae", {
        "gpu_arch": _THOR_RR, "sms": _THOR_FORUM, "tensor_cores": _THOR_RR + _THOR_FORUM, "cuda_cores": _THOR_RR,
        "mem_bus_bits": _unknown("Thor's memory bus width was not found in a source read here (RidgeRun lists "
                                 "'128GB LPDDR5x DRAM 4266 MHz' only)"),
        "mem_type": _THOR_RR, "cpu_arch": _THOR_RR}),
}
"""Every catalogued module's hardware facts, by key (the catalogue's keys)."""


def hardware_of(key: str) -> Hardware:
    """The hardware facts of module ``key``; ``ValueError`` naming the known keys otherwise."""
    try:
        return HARDWARE[key]
    except KeyError:
        raise ValueError(f"no hardware facts for board {key!r}: known are {', '.join(HARDWARE)}") from None
