"""Time and energy rooflines (Pagoda, section 5), pure and vectorised over numpy arrays.

Notation follows Pagoda's Table 2:

=================  ==================================================  ===========
symbol             meaning                                             attribute
=================  ==================================================  ===========
W                  arithmetic work (FLOP)                              ``flops``
Q                  memory traffic (bytes, "MOP")                       ``bytes``
I = W / Q          arithmetic intensity (FLOP/B)                       ``intensity``
FLOP/s(peak)       peak compute of a power mode (FLOP/s)               ``peak_flops``
BW(peak)           peak DRAM bandwidth of a power mode (B/s)           ``bandwidth``
tau_flop, tau_mop  1 / FLOP/s(peak), 1 / BW(peak) (s/FLOP, s/B)        ``tau_flop``, ``tau_mop``
eps_flop, eps_mop  energy per FLOP (J/FLOP) and per byte (J/B)         ``eps_flop``, ``eps_mop``
pi_0               static (base-load) power (W)                        ``static_power``
beta_tau           time balance point (FLOP/B)                         ``time_balance``
beta_eps           energy balance point (FLOP/B)                       ``energy_balance()``
=================  ==================================================  ===========

Every coefficient may be a numpy array (for example one entry per power mode) and every
``flops``/``bytes``/``intensity`` argument may be an array (for example one entry per layer):
the usual numpy broadcasting rules apply. To evaluate M modes against L layers use
``roof.outer()`` (coefficients of shape (M, 1)) and get (M, L) results. Scalars in give
Python floats out.

Energy coefficients are optional (a time roofline measured without a power sensor has none):
they are stored as NaN, energy results for those entries are NaN, and asking for energy from a
roofline with no energy coefficient at all raises a ``ValueError`` that says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["Roofline", "Bound", "pagoda_energy"]


class Bound(NamedTuple):
    """Which resource bounds a workload, in time and in energy: ``"memory"`` or ``"compute"``.

    For array input each field is a numpy array of strings with the broadcast shape.
    """

    time: str | np.ndarray
    energy: str | np.ndarray | None


#: the coefficients in the order ``Roofline`` takes them, with their units; the first two are required
_COEFS = {"peak_flops": "FLOP/s", "bandwidth": "B/s", "eps_flop": "J/FLOP", "eps_mop": "J/B", "static_power": "W"}
_REQUIRED = ("peak_flops", "bandwidth")


def _coef(name: str, value, *, required: bool, unit: str) -> np.ndarray:
    """Coefficient as a float64 array: a required one positive, the others non-negative or missing (None -> NaN)."""
    if value is None:
        if required:
            raise ValueError(f"Roofline.{name}: expected a positive number in {unit}, got None")
        return np.array(np.nan)
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"Roofline.{name}: expected a number (or an array of numbers) in {unit}, got {value!r}") from None
    finite = arr[~np.isnan(arr)] if not required else arr
    if required and np.isnan(arr).any():
        raise ValueError(f"Roofline.{name}: expected a positive number in {unit}, got NaN")
    bad = ~np.isfinite(finite) | ((finite <= 0) if required else (finite < 0))
    if bad.any():
        first = finite[bad].flat[0]
        what = "a positive" if required else "a non-negative"
        raise ValueError(
            f"Roofline.{name}: expected {what} finite number in {unit}, got {first!r}; "
            f"check the units (e.g. pJ must be written as 1e-12 J)"
        )
    return arr


def _out(x):
    """numpy 0-d results -> Python scalars; arrays stay arrays."""
    return x.item() if isinstance(x, np.generic) or (isinstance(x, np.ndarray) and x.ndim == 0) else x


def _nonneg(name: str, value) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if np.isnan(arr).any() or (arr < 0).any():
        raise ValueError(f"{name}: expected non-negative numbers, got {value!r}")
    return arr


def pagoda_energy(flops, bytes, time_s, eps_flop, eps_mop, static_power):
    """E = eps_flop * W + eps_mop * Q + pi_0 * T, joules (Pagoda eq. 2), on numbers or arrays, unchecked
    (``Roofline.energy`` checks first): the package's one copy of the formula."""
    return eps_flop * flops + eps_mop * bytes + static_power * time_s


@dataclass(frozen=True, eq=False)
class Roofline:
    """A device's time and energy roofline for one power mode (or, with array coefficients, many).

    Args:
        peak_flops: FLOP/s(peak), FLOP/s.
        bandwidth: BW(peak), bytes/s.
        eps_flop: energy per FLOP, J/FLOP (``None`` if unknown: time roofline only).
        eps_mop: energy per byte moved, J/B (``None`` if unknown).
        static_power: pi_0, the static base-load power, W (``None`` if unknown; read as 0 only
            where ``static=False`` is asked for).
        label: free text (or a tuple of texts, one per mode) for plots and reports.
        source: how the coefficients were obtained: ``measured``, ``published``, ``simulated``
            or ``estimated``.
    """

    peak_flops: ArrayLike
    bandwidth: ArrayLike
    eps_flop: ArrayLike | None = None
    eps_mop: ArrayLike | None = None
    static_power: ArrayLike | None = None
    label: str | tuple[str, ...] | None = None
    source: str | None = None
    _shape: tuple = field(init=False, repr=False)

    def __post_init__(self):
        for (name, unit), value in zip(_COEFS.items(), self._coefficients()):
            object.__setattr__(self, name, _coef(name, value, required=name in _REQUIRED, unit=unit))
        coefs = self._coefficients()
        try:
            shape = np.broadcast_shapes(*(np.shape(c) for c in coefs))
        except ValueError:
            shapes = ", ".join(f"{name} {np.shape(c)}" for name, c in zip(_COEFS, coefs))
            raise ValueError(f"Roofline: the coefficient arrays do not broadcast together (shapes {shapes}); "
                             "give one value per mode, all the same length") from None
        object.__setattr__(self, "_shape", shape)

    def _coefficients(self) -> tuple[ArrayLike | None, ...]:
        """The coefficients in the order of :data:`_COEFS` (the constructor's): float64 arrays once constructed."""
        return (self.peak_flops, self.bandwidth, self.eps_flop, self.eps_mop, self.static_power)

    # ------------------------------------------------------------------ construction helpers
    @property
    def shape(self) -> tuple:
        """Broadcast shape of the coefficients (``()`` for a single mode)."""
        return self._shape

    @property
    def has_energy(self) -> bool:
        """True when eps_flop and eps_mop are known for at least one mode."""
        return bool(np.isfinite(self.eps_flop).any() and np.isfinite(self.eps_mop).any())

    @classmethod
    def stack(cls, roofs, labels=None) -> Roofline:
        """Stack single-mode rooflines into one with coefficient arrays of shape (M,)."""
        roofs = list(roofs)
        if not roofs:
            raise ValueError("Roofline.stack: expected at least one Roofline, got none")
        def col(values):
            return np.array([np.asarray(v, dtype=float).reshape(()) for v in values])
        if labels is None:
            labels = tuple(str(r.label) if r.label is not None else str(i) for i, r in enumerate(roofs))
        sources = {r.source for r in roofs}
        columns = zip(*(r._coefficients() for r in roofs))  # one per coefficient, in the constructor's order
        return cls(*map(col, columns), label=tuple(labels), source=sources.pop() if len(sources) == 1 else "mixed")

    def outer(self) -> Roofline:
        """Copy whose coefficients gain a trailing axis, so ``roof.outer().time(W, Q)`` with W, Q of
        shape (L,) gives an (M, L) table: one row per mode, one column per layer."""
        def add(a):
            return np.broadcast_to(a, self.shape)[..., None]
        return Roofline(*(add(c) for c in self._coefficients()), label=self.label, source=self.source)

    def __getitem__(self, idx) -> Roofline:
        """Select modes of an array roofline (``roof[3]``, ``roof[mask]``)."""
        def sel(a):
            return np.broadcast_to(a, self.shape)[idx]
        label = self.label
        if isinstance(label, tuple) and self.shape:
            picked = np.asarray(label, dtype=object)[idx]
            label = tuple(picked) if isinstance(picked, np.ndarray) else picked
        return Roofline(*(sel(c) for c in self._coefficients()), label=label, source=self.source)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("a single-mode Roofline has no len(); its coefficients are scalars")
        return self.shape[0]

    # ------------------------------------------------------------------ time roofline (section 5.1)
    @property
    def tau_flop(self):
        """tau_flop = 1 / FLOP/s(peak), seconds per FLOP (Pagoda Table 2)."""
        return _out(1.0 / self.peak_flops)

    @property
    def tau_mop(self):
        """tau_mop = 1 / BW(peak), seconds per byte (Pagoda Table 2)."""
        return _out(1.0 / self.bandwidth)

    @property
    def time_balance(self):
        """beta_tau = FLOP/s(peak) / BW(peak) = tau_mop / tau_flop, FLOP/B (Pagoda section 5.1):
        the intensity at which compute time W*tau_flop equals memory time Q*tau_mop.
        MAXN: 14.7e12 / 164.4e9 = 89.4 FLOP/B."""
        return _out(self.peak_flops / self.bandwidth)

    def time(self, flops, bytes):
        """T = max(W * tau_flop, Q * tau_mop), seconds (Pagoda eq. 1; compute and memory overlap)."""
        return _out(self._wqt(flops, bytes)[2])

    def _wqt(self, flops, bytes, time_s=None):
        """W, Q and T (eq. 1, or ``time_s`` when given) as checked arrays."""
        w, q = _nonneg("flops", flops), _nonneg("bytes", bytes)
        return w, q, np.maximum(w / self.peak_flops, q / self.bandwidth) if time_s is None else _nonneg("time_s", time_s)

    def attainable(self, intensity):
        """Attainable performance W/T = min(FLOP/s(peak), I * BW(peak)), FLOP/s (the time roofline,
        Pagoda section 5.1: W/T = 1 / (tau_flop * max(1, beta_tau / I)))."""
        i = _nonneg("intensity", intensity)
        with np.errstate(invalid="ignore"):
            return _out(np.minimum(self.peak_flops, i * self.bandwidth))

    # ------------------------------------------------------------------ energy roofline (section 5.2)
    def _need_energy(self, static: bool):
        if not np.isfinite(self.eps_flop).any() or not np.isfinite(self.eps_mop).any():
            raise ValueError(
                "this Roofline has no energy coefficients (eps_flop, eps_mop): it is a time roofline, "
                "for example one measured without a power sensor. Give eps_flop (J/FLOP) and eps_mop (J/B), "
                "or load a profile that has them (e.g. load_profile('orin-agx-pagoda'))"
            )
        if static and not np.isfinite(self.static_power).any():
            raise ValueError(
                "this Roofline has no static power (pi_0): pass static=False to ignore it, or give "
                "static_power in W (measured as idle power)"
            )

    def _pi0(self, static: bool):
        return self.static_power if static else np.zeros_like(self.static_power)

    def energy(self, flops, bytes, time_s=None, static=True):
        """E = eps_flop * W + eps_mop * Q + pi_0 * T, joules (Pagoda eq. 2).

        T is the roofline time of eq. 1 unless ``time_s`` (a measured or refined time) is given.
        ``static=False`` drops the pi_0 * T term (the "no static power" case of section 5.2.1).
        """
        self._need_energy(static)
        w, q, t = self._wqt(flops, bytes, time_s)
        return _out(pagoda_energy(w, q, t, self.eps_flop, self.eps_mop, self._pi0(static)))

    def power(self, flops, bytes, time_s=None, static=True):
        """Average power E / T, watts (eq. 2 divided by the eq. 1 time, or by ``time_s``)."""
        w, q, t = self._wqt(flops, bytes, time_s)
        e = np.asarray(self.energy(w, q, time_s=t, static=static))
        with np.errstate(divide="ignore", invalid="ignore"):
            return _out(np.where(t > 0, e / np.where(t > 0, t, 1.0), np.nan))

    def efficiency(self, intensity, static=True):
        """Energy efficiency W/E as a function of intensity, FLOP/J (Pagoda eqs. 3, 7, 8):

        W/E = 1 / (eps_flop + eps_mop / I + pi_0 * T / W), with T/W = max(tau_flop, tau_mop / I), i.e.
        memory-bound (I < beta_tau): 1/(W/E) = eps_flop + eps_mop/I + (pi_0/BW)/I   (eq. 7)
        compute-bound (I >= beta_tau): 1/(W/E) = eps_flop + eps_mop/I + pi_0/FLOP/s (eq. 8)
        I = 0 gives 0; I = inf gives ``peak_energy_efficiency``.
        """
        self._need_energy(static)
        i = _nonneg("intensity", intensity)
        pi0 = self._pi0(static)
        with np.errstate(divide="ignore", invalid="ignore"):
            inv_i = np.where(i > 0, 1.0 / np.where(i > 0, i, 1.0), np.inf)
            e_per_flop = self.eps_flop + self.eps_mop * inv_i + pi0 * np.maximum(1.0 / self.peak_flops,
                                                                                 inv_i / self.bandwidth)
            out = np.where(np.isinf(inv_i), 0.0, 1.0 / e_per_flop)
        return _out(out)

    def peak_energy_efficiency(self, static=True):
        """Energy efficiency as I -> infinity, FLOP/J: 1 / eps_flop without static power (Pagoda eq. 4),
        1 / (eps_flop + pi_0 / FLOP/s(peak)) with it (section 5.2.2).
        MAXN: 1/3.86e-12 = 259.1 GFLOP/J; 1/(3.86e-12 + 17.9/14.7e12) = 196.9 GFLOP/J."""
        self._need_energy(static)
        with np.errstate(divide="ignore"):
            return _out(1.0 / (self.eps_flop + self._pi0(static) / self.peak_flops))

    def energy_balance(self, static=True, region="memory"):
        """beta_eps, the energy balance point, FLOP/B (Pagoda eq. 5).

        Pagoda defines it as the intensity at which the energy efficiency is half its peak. With
        pi_0 = 0 that is where FLOP and MOP energies are equal: beta_eps = eps_mop / eps_flop.
        With static power, eq. 5 is

            beta_eps = (eps_mop + pi_0 / BW(peak)) / (eps_flop + 2 * pi_0 / FLOP/s(peak))

        which is the half-peak solution *in the memory-bound region of the time roofline* (T = Q/BW):
        solve eps_flop + (eps_mop + pi_0/BW)/I = 2 (eps_flop + pi_0/FLOP/s) for I. ``region="memory"``
        (default) returns eq. 5 as published. If that value exceeds beta_tau the assumption T = Q/BW
        does not hold there; ``region="auto"`` then uses the compute-bound branch (T = W/FLOP/s):
        eps_flop + eps_mop/I + pi_0/FLOP/s = 2 (eps_flop + pi_0/FLOP/s), i.e. I = eps_mop / (eps_flop +
        pi_0/FLOP/s), which is the one intensity where eq. 3 really is half of its peak.
        MAXN: (141.38 + 108.88) / (3.86 + 2.435) = 39.75 FLOP/B with pi_0 (Pagoda: 39.8), 36.63 without.
        """
        if region not in ("memory", "auto"):
            raise ValueError(f"energy_balance: region must be 'memory' (Pagoda eq. 5) or 'auto', got {region!r}")
        self._need_energy(static)
        pi0 = self._pi0(static)
        with np.errstate(divide="ignore", invalid="ignore"):
            mem = (self.eps_mop + pi0 / self.bandwidth) / (self.eps_flop + 2.0 * pi0 / self.peak_flops)
            if region == "memory":
                return _out(mem)
            comp = self.eps_mop / (self.eps_flop + pi0 / self.peak_flops)
            return _out(np.where(mem <= self.peak_flops / self.bandwidth, mem, comp))

    def bound(self, intensity, static=True):
        """Which side bounds a workload of intensity I, in time and in energy.

        time: ``"memory"`` if I < beta_tau else ``"compute"`` (Pagoda section 5.1);
        energy: ``"memory"`` if I < beta_eps(static) else ``"compute"`` (section 7.3: below the energy
        balance more energy goes to memory than to compute). At exactly the balance point the
        answer is ``"compute"``. Returns a ``Bound`` of strings, or of string arrays for array input.
        Without energy coefficients the energy field is ``None``.
        """
        i = _nonneg("intensity", intensity)
        t = np.where(i < self.peak_flops / self.bandwidth, "memory", "compute")
        e = None
        if self.has_energy and (not static or np.isfinite(self.static_power).any()):
            e = np.where(i < np.asarray(self.energy_balance(static=static)), "memory", "compute")
            e = str(e) if e.ndim == 0 else e
        return Bound(str(t) if t.ndim == 0 else t, e)

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict:
        """Coefficients as plain JSON values (lists for array rooflines, ``None`` for unknown)."""
        def val(a):
            a = np.broadcast_to(a, self.shape)
            if a.ndim == 0:
                x = float(a)
                return None if math.isnan(x) else x
            return [None if math.isnan(x) else float(x) for x in a.ravel()] if a.ndim == 1 else \
                np.where(np.isnan(a), None, a).tolist()
        d = {
            "peak_flops": val(self.peak_flops),
            "bandwidth": val(self.bandwidth),
            "eps_flop": val(self.eps_flop),
            "eps_mop": val(self.eps_mop),
            "static_power_w": val(self.static_power),
        }
        if self.label is not None:
            d["label"] = list(self.label) if isinstance(self.label, tuple) else self.label
        if self.source is not None:
            d["source"] = self.source
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Roofline:
        """Inverse of ``to_dict`` (also accepts ``static_power`` for ``static_power_w``)."""
        label = d.get("label")
        return cls(
            d["peak_flops"], d["bandwidth"], d.get("eps_flop"), d.get("eps_mop"),
            d.get("static_power_w", d.get("static_power")),
            label=tuple(label) if isinstance(label, list) else label, source=d.get("source"),
        )

    def summary(self) -> dict:
        """Derived numbers (balance points, peak efficiencies) as a dict of floats/arrays (NaN when unknown)."""
        out = {
            "peak_flops": _out(np.broadcast_to(self.peak_flops, self.shape).copy()),
            "bandwidth": _out(np.broadcast_to(self.bandwidth, self.shape).copy()),
            "time_balance": self.time_balance,
        }
        nan = _out(np.full(self.shape, np.nan))
        has_e = self.has_energy
        has_s = has_e and np.isfinite(self.static_power).any()
        out["energy_balance_static"] = self.energy_balance(True) if has_s else nan
        out["energy_balance_no_static"] = self.energy_balance(False) if has_e else nan
        out["peak_energy_efficiency_static"] = self.peak_energy_efficiency(True) if has_s else nan
        out["peak_energy_efficiency_no_static"] = self.peak_energy_efficiency(False) if has_e else nan
        return out

    def __repr__(self) -> str:
        def fmt(a, scale, unit):
            a = np.asarray(a)
            if a.ndim == 0:
                return "?" if np.isnan(a) else f"{float(a) / scale:.4g} {unit}"
            return f"array{a.shape} {unit}"
        parts = [
            fmt(self.peak_flops, 1e12, "TFLOP/s"), fmt(self.bandwidth, 1e9, "GB/s"),
            f"eps_flop={fmt(self.eps_flop, 1e-12, 'pJ/FLOP')}", f"eps_mop={fmt(self.eps_mop, 1e-12, 'pJ/B')}",
            f"static={fmt(self.static_power, 1, 'W')}",
        ]
        lab = f"{self.label!r}, " if self.label is not None and not isinstance(self.label, tuple) else ""
        return f"Roofline({lab}{', '.join(parts)})"
