"""Refined roofline with utilisation efficiency (Jantsch's slides, after ANNETTE, Wess et al. 2021).

Transcribed from the slides ("Refined Roofline Model"):

    T_roof_n(f_n, D_n) = max( f_n / P_peak , D_n / B_peak )                       (plain roofline)
    T_ref_n(f_n, D_n)  = max( f_n / (P_peak * u_eff_n) , D_n / B_peak )            (refined roofline)
    u_eff(x) = prod_{i=1..A} (x_i / s_i) / ceil(x_i / s_i)

with n the layer, f_n its operations, D_n its bytes, s the number of parallel resources along each of
the A mapped dimensions and x the number of operations (the loop extent) along each. A dimension whose
extent is not a multiple of the resources leaves part of the last round idle; u_eff is the fraction
of the parallel resources doing useful work.

Worked example of the slides: a 12 x 6 x 128 input, 1x1 convolution, 256 outputs, on a 16 x 12 PE
array: the 12-wide dimension on the 12 PEs and the 6-high one on the 16 PEs give
u_eff = (12/12)/1 * (6/16)/1 = 0.375. (The slide writes s = (16 x 12) but pairs 12 with 12 and 6 with 16.)

On a GPU we map a GEMM (a linear layer, or a convolution as an implicit GEMM: M = N*H_out*W_out output
pixels, N = C_out output channels) onto thread-block tiles and the tiles onto the SMs:

    x = (M, N, tiles),  s = (tile_m, tile_n, SMs),  tiles = ceil(M/tile_m) * ceil(N/tile_n)

so u_eff covers tile quantisation (Pagoda section 7.1: channel counts not multiples of the 64/128 tile
waste up to 38 % of MobileNet's FLOP) and wave quantisation over the SMs. Orin AGX: 16 SMs (8 TPCs x 2,
2048 CUDA cores / 128 per SM). The statistical and mixed models of the slides (random-forest u_stat)
need training data and are not implemented here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lightning_edge.roofline.model import Roofline

if TYPE_CHECKING:
    from lightning_edge.energy.base import EnergyLayer

__all__ = ["utilization_efficiency", "gemm_utilization", "RefinedRoofline", "ORIN_AGX_SMS"]

ORIN_AGX_SMS = 16  # Ampere GA10B on Orin AGX: 8 TPCs x 2 SMs (Pagoda section 4.2 keeps all 8 TPCs on)


def utilization_efficiency(x: Sequence[float], s: Sequence[float]) -> float:
    """u_eff(x) = prod_i (x_i / s_i) / ceil(x_i / s_i)  (Jantsch, "Refined Roofline Model").

    ``x``: operations (loop extent) along each parallelised dimension; ``s``: parallel resources along
    it, paired element by element. ``utilization_efficiency((12, 6), (12, 16)) == 0.375``.
    """
    x = list(x)
    s = list(s)
    if len(x) != len(s) or not x:
        raise ValueError(f"utilization_efficiency: x and s must pair up dimension by dimension, got {x} and {s}")
    u = 1.0
    for xi, si in zip(x, s):
        if not (xi > 0 and si > 0):
            raise ValueError(f"utilization_efficiency: extents and resources must be positive, got x={xi}, s={si}")
        r = xi / si
        u *= r / math.ceil(r)
    return u


def gemm_utilization(m: int, n: int, tile_m: int = 128, tile_n: int = 64, sm_count: int = ORIN_AGX_SMS) -> float:
    """u_eff of an (M x N) output GEMM tiled in (tile_m x tile_n) blocks spread over ``sm_count`` SMs:
    ``utilization_efficiency((M, N, tiles), (tile_m, tile_n, sm_count))``."""
    tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n)
    return utilization_efficiency((m, n, tiles), (tile_m, tile_n, sm_count))


@dataclass
class RefinedRoofline:
    """Time model T = max(W / (P_peak * u_eff), Q / B_peak) on top of a ``Roofline`` (Jantsch).

    ``u_eff`` comes from a layer's shape: a layer (or ``shapes[layer.name]``) with ``gemm_dims()``
    (``ConvShape``, ``FCShape``) or an explicit ``u_eff`` attribute. Layers without either keep
    u_eff = 1 (the plain roofline), and the result says so.
    """

    tile_m: int = 128
    tile_n: int = 64
    sm_count: int = ORIN_AGX_SMS
    shapes: dict | None = None

    def u_eff(self, layer: EnergyLayer) -> tuple[float, str]:
        """(u_eff, how it was obtained) for a layer."""
        explicit = getattr(layer, "u_eff", None) if not isinstance(layer, dict) else layer.get("u_eff")
        if explicit is not None:
            return float(explicit), "given"
        name = getattr(layer, "name", None) if not isinstance(layer, dict) else layer.get("name")
        if self.shapes and name in self.shapes:
            shape = self.shapes[name]
        elif hasattr(layer, "gemm_dims"):
            shape = layer
        else:
            shape = getattr(layer, "shape", None)
        if shape is not None and hasattr(shape, "gemm_dims"):
            m, n, _k = shape.gemm_dims()
            return gemm_utilization(m, n, self.tile_m, self.tile_n, self.sm_count), "gemm tiling"
        return 1.0, "no shape: plain roofline"

    @staticmethod
    def time(roofline: Roofline, flops, bytes, u_eff=1.0):
        """T_ref = max(W / (P_peak * u_eff), Q / B_peak), seconds (vectorised like Roofline.time)."""
        u = np.asarray(u_eff, dtype=float)
        if (u <= 0).any() or (u > 1).any():
            raise ValueError(f"u_eff must lie in (0, 1], got {u_eff!r}")
        w = np.asarray(flops, dtype=float)
        q = np.asarray(bytes, dtype=float)
        t = np.maximum(w / (roofline.peak_flops * u), q / roofline.bandwidth)
        return t.item() if t.ndim == 0 else t

    def layer_time(self, roofline: Roofline, layer: EnergyLayer) -> tuple[float, float, str]:
        """(time_s, u_eff, how) for one LayerCost-like layer."""
        u, how = self.u_eff(layer)
        w = float(getattr(layer, "flops", 0) if not isinstance(layer, dict) else layer.get("flops", 0))
        q = float(getattr(layer, "bytes", 0) if not isinstance(layer, dict) else layer.get("bytes", 0))
        return self.time(roofline, w, q, u), u, how
