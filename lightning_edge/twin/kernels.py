"""One kernel on the twin: what a roofline microbenchmark (a matmul, an element-wise op, a copy) takes on the simulated
board in a power mode, so the microbenchmarks that measure a real board's rooflines run unchanged on the twin
(``lightning-edge roofline --device sim:orin-agx``: simulated measurements, labelled so).

A kernel of ``flops`` FLOP and ``nbytes`` bytes at ``precision``:

- time = ``LAUNCH_S`` + max(flops / (peak x utilisation), nbytes / bandwidth), where the utilisation of a matmul
  grows with its work, ``flops / (flops + HALF_FLOPS)`` (a small matrix fills few SMs: the GPU reaches half its
  peak at ``HALF_FLOPS``), and peak and bandwidth are the twin's roofline of the mode;
- energy = pi_0 x time + eps_flop x flops + eps_mop x nbytes (Pagoda's energy roofline, the twin's coefficients);
- each call draws seeded gaussian noise (``time_noise``, ``power_noise``) as a board's repeated runs scatter.

The sweep's peak (the best size) therefore comes out a few per cent under the roofline's peak, as on a real board.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["LAUNCH_S", "HALF_FLOPS", "kernel_time_energy", "PRECISIONS"]

#: a kernel launch and its synchronisation on the Orin's GPU (s)
LAUNCH_S = 8e-6
#: the matmul work at which the GPU reaches half its peak (FLOP): a 128x128 matmul is 4.2 MFLOP
HALF_FLOPS = 4e7
#: the precisions the twin has rooflines for (``fp32`` is TF32 tensor cores, as Pagoda's published fp32)
PRECISIONS = ("fp32", "fp16", "fp32_cuda")


def kernel_time_energy(twin: Any, mode: Any, flops: float, nbytes: float, precision: str = "fp32", *,
                       matmul: bool = False, rng: np.random.Generator | None = None, time_noise: float = 0.01,
                       power_noise: float = 0.01) -> tuple[float, float]:
    """``(time_s, energy_j)`` of one call of the kernel on ``twin`` in ``mode`` (simulated; see the module doc)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: the twin has rooflines for {', '.join(PRECISIONS)}")
    roof = twin.roofline(mode, precision)
    peak, bw = float(roof.peak_flops), float(roof.bandwidth)
    util = flops / (flops + HALF_FLOPS) if matmul and flops > 0 else 1.0
    t = LAUNCH_S + max(flops / (peak * util) if flops > 0 else 0.0, nbytes / bw)
    if rng is not None:
        t *= max(1.0 + time_noise * float(rng.standard_normal()), 0.5)
    e = float(roof.static_power) * t + float(roof.eps_flop) * flops + float(roof.eps_mop) * nbytes
    if rng is not None:
        e *= max(1.0 + power_noise * float(rng.standard_normal()), 0.5)
    if not (math.isfinite(t) and t > 0 and math.isfinite(e) and e > 0):
        raise ValueError(f"the twin cannot time a kernel of {flops} FLOP and {nbytes} B at {precision}")
    return t, e
