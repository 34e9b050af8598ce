"""Time and energy rooflines (Pagoda), device profiles, microbenchmarks and roofline pictures.

``Roofline`` and the profile functions are pure numpy and import fast; ``plot_rooflines`` (matplotlib)
and the microbenchmarks (torch) load on first use.
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
    "run_microbench": "lightning_edge.calibrate.microbench",
    "MicrobenchResult": "lightning_edge.calibrate.microbench",
    "EnergyMeter": "lightning_edge.calibrate.microbench",
    "NullEnergyMeter": "lightning_edge.calibrate.microbench",
    "find_energy_meter": "lightning_edge.calibrate.microbench",
    "fit_energy_coefficients": "lightning_edge.roofline.fit",
    "EnergyFit": "lightning_edge.roofline.fit",
    "nnls": "lightning_edge.roofline.fit",
}

__all__ = [
    "Roofline", "Bound", "DeviceProfile", "ModeEntry", "ModeLookupError", "ProfileError", "available_profiles", "format_mode",
    "load_profile", "parse_mode", "save_profile", "validate_profile", *_LAZY,
]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
