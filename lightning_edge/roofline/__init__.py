"""Time and energy rooflines (Pagoda), device profiles, microbenchmarks and roofline pictures.

``Roofline`` and the profile functions are pure numpy and import fast; ``plot_rooflines`` (matplotlib) loads on
first use. Measuring a board's rooflines (the microbenchmarks) lives above the devices, in
:mod:`lightning_edge.calibrate.microbench`: this package stays pure math.
"""

from __future__ import annotations

from lightning_edge._lazy import lazy_getattr
from lightning_edge.roofline.model import Bound, Roofline
from lightning_edge.roofline.profile import (
    DeviceProfile,
    ModeEntry,
    ModeLookupError,
    ProfileError,
    available_profiles,
    format_mode,
    load_profile,
    parse_mode,
    save_profile,
    validate_profile,
)

_LAZY = {
    "plot_rooflines": "lightning_edge.roofline.plot",
    "fit_energy_coefficients": "lightning_edge.roofline.fit",
    "EnergyFit": "lightning_edge.roofline.fit",
    "nnls": "lightning_edge.roofline.fit",
}

__all__ = [
    "Roofline", "Bound", "DeviceProfile", "ModeEntry", "ModeLookupError", "ProfileError", "available_profiles", "format_mode",
    "load_profile", "parse_mode", "save_profile", "validate_profile", *_LAZY,
]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
