"""Roofline energy of a layer: E = eps_flop * W + eps_mop * Q + pi_0 * T  (Pagoda, eq. 2).

T is the layer's roofline time (eq. 1), or the refined-roofline time with utilisation efficiency
(Jantsch, ``RefinedRoofline``) when a ``time_model`` is given, or the layer's own measured ``time_s``
when ``use_layer_time=True`` (the energy is still a model estimate).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lightning_edge.energy.base import (
    EnergyEstimator,
    EnergyLayer,
    EnergyTarget,
    LayerEnergies,
    LayerEnergy,
    layer_attr,
    resolve_roofline,
)
from lightning_edge.energy.refined import RefinedRoofline
from lightning_edge.roofline.model import Roofline
from lightning_edge.roofline.profile import DeviceProfile

__all__ = ["RooflineEnergy"]


class RooflineEnergy(EnergyEstimator):
    """Pagoda eq. 2 per layer.

    Args:
        static: include pi_0 * T (``False``: the "no static power" energy of section 5.2.1).
        time_model: ``None`` (roofline time, eq. 1) or a ``RefinedRoofline`` (Jantsch).
        use_layer_time: use a layer's ``time_s`` attribute when it has one.
        profile, precision: resolve mode strings given as targets (``estimate(layer, "12c/2201.6/1300.5/3199")``).
        roofline: default target when none is passed.
    """

    method = "roofline"

    def __init__(self, static: bool = True, time_model: RefinedRoofline | None = None, use_layer_time: bool = False,
                 profile: DeviceProfile | None = None, precision: str = "fp32", roofline: Roofline | None = None):
        self.static = static
        self.time_model = time_model
        self.use_layer_time = use_layer_time
        self.profile = profile
        self.precision = precision
        self.roofline = roofline
        if time_model is not None:
            self.method = "roofline_refined"

    def _roof(self, target: EnergyTarget) -> Roofline:
        roof = resolve_roofline(target, self.profile, self.precision, self.roofline)
        if not roof.has_energy:
            raise ValueError(
                f"RooflineEnergy: the roofline {roof.label!r} has no energy coefficients (eps_flop, eps_mop); "
                "it was probably measured without a power sensor. Use a profile with them "
                "(load_profile('orin-agx-pagoda')) or another estimator"
            )
        return roof

    def _time(self, roof: Roofline, layer: EnergyLayer) -> tuple[Any, dict]:
        t_layer = layer_attr(layer, "time_s")
        if self.use_layer_time and t_layer is not None:
            return float(t_layer), {"time": "layer time_s"}
        w, q = float(layer_attr(layer, "flops", 0) or 0), float(layer_attr(layer, "bytes", 0) or 0)
        if self.time_model is not None:
            t, u, how = self.time_model.layer_time(roof, layer)
            return t, {"time": "refined roofline (Jantsch)", "u_eff": u, "u_eff_from": how}
        return roof.time(w, q), {"time": "roofline (Pagoda eq. 1)"}

    def estimate(self, layer: EnergyLayer, target: EnergyTarget = None) -> LayerEnergy:
        roof = self._roof(target)
        w, q = float(layer_attr(layer, "flops", 0) or 0), float(layer_attr(layer, "bytes", 0) or 0)
        t, details = self._time(roof, layer)
        e = roof.energy(w, q, time_s=t, static=self.static)
        details.update(eq="E = eps_flop*W + eps_mop*Q + pi_0*T (Pagoda eq. 2)", static=self.static, flops=w, bytes=q)
        if np.ndim(e):
            raise TypeError("estimate() needs a single-mode roofline; use estimate_many() for an array roofline")
        return LayerEnergy(float(e), float(t), self.method, name=layer_attr(layer, "name"), details=details)

    def estimate_many(self, layers: Sequence[EnergyLayer], target: EnergyTarget = None) -> LayerEnergies:
        """Vectorised: one array op over all layers. An array roofline of M modes gives (M, L) arrays."""
        roof = self._roof(target)
        layers = list(layers)
        w = np.array([float(layer_attr(x, "flops", 0) or 0) for x in layers])
        q = np.array([float(layer_attr(x, "bytes", 0) or 0) for x in layers])
        r = roof.outer() if roof.shape else roof
        if self.time_model is not None:
            u = np.array([self.time_model.u_eff(x)[0] for x in layers])
            t = np.asarray(RefinedRoofline.time(r, w, q, u), dtype=float)
        else:
            t = np.asarray(r.time(w, q), dtype=float)
        if self.use_layer_time:
            lt = np.array([np.nan if layer_attr(x, "time_s") is None else float(layer_attr(x, "time_s"))
                           for x in layers])
            t = np.where(np.isnan(lt), t, lt)
        e = np.asarray(r.energy(w, q, time_s=t, static=self.static), dtype=float)
        return LayerEnergies(e, t, self.method, [str(layer_attr(x, "name", "")) for x in layers])
