"""One record of a step, at the ground floor: what every meter, tuner, twin and report means by "a minibatch took
this long at this power".

``Measurement(time_s, power_w, label="measured", trusted=True, mode=None)``: the step's time (s) and mean power
(W); ``energy_j`` is their product. ``label`` says how they were obtained: ``measured`` (a real sensor),
``simulated`` (the twin), ``estimated`` (a model). ``trusted`` is False when the power rests on partial or
rejected readings; only an untrusted measurement may have no power at all (``nan``). ``mode``: the power mode the
step ran in (a :class:`~lightning_edge.modes.PowerMode`), when known.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Measurement", "LABELS"]

#: how a number was obtained
LABELS = ("measured", "simulated", "estimated", "apportioned")


@dataclass(frozen=True)
class Measurement:
    """One step (see the module docstring)."""

    time_s: float
    power_w: float
    label: str = "measured"
    trusted: bool = True
    mode: Any = None

    def __post_init__(self) -> None:
        t, p = float(self.time_s), float(self.power_w)
        if not (math.isfinite(t) and t > 0):
            raise ValueError(f"Measurement.time_s must be a finite time > 0 s, got {self.time_s!r}")
        if not (math.isfinite(p) and p >= 0) and not (math.isnan(p) and not self.trusted):
            raise ValueError(f"Measurement.power_w must be a finite power >= 0 W, got {self.power_w!r} (a step "
                             "without a power reading is Measurement(..., nan, trusted=False))")
        object.__setattr__(self, "time_s", t)
        object.__setattr__(self, "power_w", p)
        object.__setattr__(self, "label", str(self.label))
        object.__setattr__(self, "trusted", bool(self.trusted))

    @property
    def energy_j(self) -> float:
        return self.time_s * self.power_w

    @property
    def has_power(self) -> bool:
        return math.isfinite(self.power_w)
