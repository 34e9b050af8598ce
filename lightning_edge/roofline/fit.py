"""Fitting the energy coefficients of a roofline from (FLOP, bytes, time, energy) samples.

Pagoda (section 5.2.4) measures time and power for matmul (compute-bound) and ReLU / transpose
(memory-bound) microbenchmarks, takes the static power pi_0 as the idle power, and fits eq. 2

    E - pi_0 * T = eps_flop * W + eps_mop * Q

by regression. Coefficients are energies, so they must not be negative: we solve a non-negative
least-squares problem (Lawson & Hanson's active-set algorithm, implemented here in numpy for a
handful of unknowns, so scipy is not needed). When pi_0 is not known it can be fitted as a third
unknown (``static_power_w=None``).

Samples span orders of magnitude in energy, so by default each row is weighted by 1 / E (the
fit minimises relative, not absolute, residuals); ``weights="none"`` gives ordinary least squares.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from lightning_edge.roofline.model import pagoda_energy

__all__ = ["nnls", "EnergyFit", "fit_energy_coefficients"]


def nnls(a, b, max_iter: int | None = None, tol: float | None = None) -> tuple[np.ndarray, float]:
    """Solve min ||a x - b||_2 subject to x >= 0 (Lawson & Hanson 1974, active-set method).

    Returns ``(x, residual_norm)``. Meant for few unknowns (columns); columns are rescaled to unit
    norm internally, so FLOP (~1e12) and byte (~1e9) columns can be mixed.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.ndim != 2 or a.shape[0] != b.shape[0]:
        raise ValueError(f"nnls: expected a of shape (m, n) and b of shape (m,), got {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("nnls: a and b must be finite (a sample has NaN or inf)")
    m, n = a.shape
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    A = a / scale
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tol = tol if tol is not None else 10 * np.finfo(float).eps * max(m, n) * max(1.0, np.linalg.norm(A, 1))
    max_iter = max_iter or 3 * n + 10
    w = A.T @ (b - A @ x)
    it = 0
    while (~passive).any() and (w[~passive] > tol).any():
        j = np.flatnonzero(~passive)[np.argmax(w[~passive])]
        passive[j] = True
        while True:
            it += 1
            if it > max_iter * 10:
                raise RuntimeError("nnls: did not converge; the samples may be degenerate")
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(A[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
        w = A.T @ (b - A @ x)
    res = float(np.linalg.norm(A @ x - b))
    return x / scale, res


@dataclass
class EnergyFit:
    """Result of ``fit_energy_coefficients`` (label ``measured``: fitted to measured samples)."""

    eps_flop: float          # J/FLOP
    eps_mop: float           # J/B
    static_power_w: float    # W (given, or fitted when it was not)
    static_fitted: bool
    r2: float                # coefficient of determination of E, on the samples
    mape: float              # mean absolute percentage error of E, %
    n: int                   # samples used
    label: str = "measured"

    def to_dict(self) -> dict:
        return asdict(self)


def fit_energy_coefficients(flops, bytes, time_s, energy_j, static_power_w: float | None = None,
                            weights: str = "relative") -> EnergyFit:
    """Fit eps_flop and eps_mop (and pi_0 when ``static_power_w`` is None) of Pagoda eq. 2 by NNLS.

    Args:
        flops, bytes, time_s, energy_j: one value per sample (a microbenchmark run: W, Q, T, E).
        static_power_w: pi_0 from an idle measurement; None fits it as a third non-negative unknown.
        weights: ``"relative"`` (rows divided by E) or ``"none"``.
    """
    w = np.asarray(flops, dtype=float).ravel()
    q = np.asarray(bytes, dtype=float).ravel()
    t = np.asarray(time_s, dtype=float).ravel()
    e = np.asarray(energy_j, dtype=float).ravel()
    if not (w.shape == q.shape == t.shape == e.shape):
        raise ValueError(f"fit_energy_coefficients: flops, bytes, time_s and energy_j need one value per sample, "
                         f"got lengths {w.size}, {q.size}, {t.size}, {e.size}")
    need = 2 if static_power_w is not None else 3
    if w.size < need:
        raise ValueError(f"fit_energy_coefficients: need at least {need} samples (some compute-bound, some "
                         f"memory-bound), got {w.size}")
    if (e <= 0).any() or (t <= 0).any() or (w < 0).any() or (q < 0).any():
        raise ValueError("fit_energy_coefficients: energies and times must be positive, FLOP and bytes non-negative")
    if weights not in ("relative", "none"):
        raise ValueError(f"fit_energy_coefficients: weights must be 'relative' or 'none', got {weights!r}")
    if static_power_w is not None and (not np.isfinite(static_power_w) or static_power_w < 0):
        raise ValueError(f"fit_energy_coefficients: static_power_w must be a non-negative number of watts or None, "
                         f"got {static_power_w!r}")
    row = 1.0 / e if weights == "relative" else np.ones_like(e)
    if static_power_w is None:
        a = np.column_stack([w, q, t])
        b = e
    else:
        a = np.column_stack([w, q])
        b = e - static_power_w * t
    x, _ = nnls(a * row[:, None], b * row)
    eps_flop, eps_mop = float(x[0]), float(x[1])
    pi0 = float(x[2]) if static_power_w is None else float(static_power_w)
    pred = pagoda_energy(w, q, t, eps_flop, eps_mop, pi0)
    ss_res = float(((e - pred) ** 2).sum())
    ss_tot = float(((e - e.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan")
    mape = float(np.mean(np.abs(pred - e) / e) * 100)
    return EnergyFit(eps_flop, eps_mop, pi0, static_power_w is None, r2, mape, int(w.size))
