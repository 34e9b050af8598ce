"""MAC-count energy regression in the spirit of SyNERGY (section 6: Rodrigues, Riley, Luján).

SyNERGY models the energy of a ConvNet's conv layers on the Jetson TX1 CPU (Caffe, single thread) as
a multi-variable linear regression (its eq. 5) on two performance counters,

    E = c_bus * bus_accesses + c_simd * SIMD_instructions,

and predicts the counters from the application's MAC count (section 6.2-6.3):

    SIMD = 0.2454 * MAC          (Table 4: e.g. 163,383,605 / 665,784,864 = 0.24540; text rounds to 0.24)
    bus  = 0.06639 * SIMD        (Table 5: e.g. 10,847,037 / 163,383,605 = 0.066390; text: 0.0663)

with the "allNets" coefficients of Table 3: c_bus = 3.34e-05 mJ, c_simd = 3.18e-06 mJ. Chained, the
energy per MAC is 0.2454 * (3.18e-9 + 0.06639 * 3.34e-8) J = 1.3245e-9 J, which reproduces Table 6
(AlexNet 665,784,864 MAC -> 881.85 mJ, published 881.41 mJ; ResNet-50 3,855,925,248 MAC -> 5107.3 mJ,
published 5104.76 mJ: 0.05 % from the rounding of c_bus and c_simd). ``MACRegression.synergy_tx1()``
is that published model.

``MACRegression`` fits the same kind of model to measured per-layer energies, with the cost model's
analytical counts standing in for the counters: by default E = c_mac * MACs + c_byte * bytes (compute
and memory traffic, as SIMD and bus accesses are in SyNERGY), non-negative coefficients, optionally an
intercept and optionally one model per layer kind (SyNERGY fits conv layers only; per-kind models
are our extension). ``report`` gives R^2 and mean absolute percentage error (SyNERGY's "relative
error", its eq. 6), and ``leave_one_group_out`` reproduces SyNERGY's protocol of leaving one network out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightning_edge.energy.base import (
    EnergyEstimator,
    EnergyLayer,
    EnergyTarget,
    LayerEnergies,
    LayerEnergy,
    layer_attr,
)
from lightning_edge.roofline.fit import nnls

__all__ = ["MACRegression", "RegressionReport", "SYNERGY_TX1", "FEATURES"]

FEATURES = ("macs", "flops", "bytes", "bytes_read", "bytes_written", "params")

# SyNERGY published constants, in J
SYNERGY_TX1 = {
    "simd_per_mac": 0.2454,        # Table 4 (slope of measured SIMD vs MAC; section 6.2)
    "bus_per_simd": 0.06639,       # Table 5 (slope of bus accesses vs SIMD; section 6.3)
    "c_bus_j": 3.34e-05 * 1e-3,    # Table 3, allNets row, bus-access coefficient (mJ -> J)
    "c_simd_j": 3.18e-06 * 1e-3,   # Table 3, allNets row, SIMD coefficient (mJ -> J)
}
SYNERGY_TX1["j_per_mac"] = SYNERGY_TX1["simd_per_mac"] * (
    SYNERGY_TX1["c_simd_j"] + SYNERGY_TX1["bus_per_simd"] * SYNERGY_TX1["c_bus_j"])


@dataclass
class RegressionReport:
    """Goodness of fit of an energy regression on some layers."""

    n: int
    r2: float
    mape: float        # mean absolute percentage error, % (SyNERGY's average relative error)
    mae_j: float       # mean absolute error, J
    max_ape: float     # worst absolute percentage error, %
    total_error_pct: float   # error of the summed energy, %
    per_kind: dict[str, RegressionReport] = field(default_factory=dict)

    def to_dict(self) -> dict:
        d: dict = {"n": self.n, "r2": self.r2, "mape": self.mape, "mae_j": self.mae_j, "max_ape": self.max_ape,
                   "total_error_pct": self.total_error_pct}
        d["per_kind"] = {k: v.to_dict() for k, v in self.per_kind.items()}
        return d


def _report(pred: np.ndarray, y: np.ndarray) -> RegressionReport:
    n = int(y.size)
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum()) if n else 0.0
    ape = np.abs(pred - y) / np.where(y != 0, np.abs(y), np.nan) * 100
    return RegressionReport(
        n=n, r2=1 - ss_res / ss_tot if ss_tot > 0 else math.nan,
        mape=float(np.nanmean(ape)) if n else math.nan, mae_j=float(np.mean(np.abs(pred - y))) if n else math.nan,
        max_ape=float(np.nanmax(ape)) if n else math.nan,
        total_error_pct=float((pred.sum() - y.sum()) / y.sum() * 100) if n and y.sum() else math.nan,
    )


class MACRegression(EnergyEstimator):
    """Linear energy model E = sum_k c_k * feature_k (+ c_0), fitted per layer kind or globally.

    Args:
        features: LayerCost attributes used as regressors (default ``("macs", "bytes")``).
        intercept: add a constant term per layer (SyNERGY has none).
        per_kind: fit one model per ``layer.kind`` that has at least ``min_per_kind`` samples; other kinds
            use the global model.
        nonneg: coefficients >= 0 (NNLS); energy per MAC or per byte cannot be negative.
        weights: ``"none"`` (ordinary least squares, as SyNERGY) or ``"relative"`` (rows divided by E).
    """

    method = "mac_regression"

    def __init__(self, features: Sequence[str] = ("macs", "bytes"), intercept: bool = False, per_kind: bool = False,
                 nonneg: bool = True, weights: str = "none", min_per_kind: int | None = None):
        bad = [f for f in features if f not in FEATURES]
        if bad or not features:
            raise ValueError(f"MACRegression: unknown feature(s) {bad}; choose from {', '.join(FEATURES)}")
        if weights not in ("none", "relative"):
            raise ValueError(f"MACRegression: weights must be 'none' or 'relative', got {weights!r}")
        self.features = tuple(features)
        self.intercept = intercept
        self.per_kind = per_kind
        self.nonneg = nonneg
        self.weights = weights
        self.min_per_kind = min_per_kind or (len(self.features) + int(intercept) + 2)
        self.coef: dict[str, np.ndarray] = {}   # "*" = global model; else a layer kind
        self.label = "estimated"
        self.source = "fitted"

    # ---------------------------------------------------------------- published model
    @classmethod
    def synergy_tx1(cls) -> MACRegression:
        """SyNERGY's published conv-layer model for the Jetson TX1 CPU: E = 1.3245e-9 J x MACs (see module doc)."""
        m = cls(features=("macs",))
        m.coef = {"*": np.array([SYNERGY_TX1["j_per_mac"]])}
        m.source = "published (SyNERGY, Tables 3-5; Jetson TX1 CPU, Caffe, single thread, conv layers)"
        return m

    # ---------------------------------------------------------------- fitting
    def _x(self, layers: Sequence[Any]) -> np.ndarray:
        rows = []
        for layer in layers:
            row = []
            for f in self.features:
                v = layer_attr(layer, f)
                if v is None:
                    raise ValueError(f"MACRegression: layer {layer_attr(layer, 'name')!r} has no {f!r}; give LayerCost "
                                     f"records (or dicts) with {', '.join(self.features)}")
                row.append(float(v))
            if self.intercept:
                row.append(1.0)
            rows.append(row)
        return np.array(rows, dtype=float).reshape(len(rows), len(self.features) + int(self.intercept))

    def _solve(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        w = 1.0 / np.abs(y) if self.weights == "relative" else np.ones_like(y)
        a, b = x * w[:, None], y * w
        if self.nonneg:
            return nnls(a, b)[0]
        scale = np.linalg.norm(a, axis=0)
        scale[scale == 0] = 1
        return np.linalg.lstsq(a / scale, b, rcond=None)[0] / scale

    def fit(self, layers: Sequence[Any], energies_j: Sequence[float]) -> MACRegression:
        """Fit on measured per-layer energies (J). Returns self."""
        layers = list(layers)
        y = np.asarray(energies_j, dtype=float)
        if y.shape != (len(layers),):
            raise ValueError(f"MACRegression.fit: one energy per layer, got {y.size} energies for {len(layers)} layers")
        if len(layers) < len(self.features) + int(self.intercept):
            raise ValueError(f"MACRegression.fit: need at least {len(self.features) + int(self.intercept)} layers, "
                             f"got {len(layers)}")
        if not np.isfinite(y).all() or (y < 0).any():
            raise ValueError("MACRegression.fit: energies must be finite and non-negative (joules)")
        x = self._x(layers)
        self.coef = {"*": self._solve(x, y)}
        if self.per_kind:
            kinds = np.array([str(layer_attr(layer, "kind", "")) for layer in layers])
            for k in sorted(set(kinds)):
                sel = kinds == k
                if sel.sum() >= self.min_per_kind:
                    self.coef[k] = self._solve(x[sel], y[sel])
        self.source = "fitted"
        return self

    def coefficients(self) -> dict[str, dict[str, float]]:
        """{model: {feature: coefficient}} with ``"*"`` the global model (J per unit of each feature)."""
        names = list(self.features) + (["intercept"] if self.intercept else [])
        return {k: dict(zip(names, map(float, c))) for k, c in self.coef.items()}

    # ---------------------------------------------------------------- prediction
    def predict(self, layers: Sequence[Any]) -> np.ndarray:
        """Energy (J) per layer."""
        if not self.coef:
            raise RuntimeError("MACRegression: not fitted; call fit(layers, energies_j) or use synergy_tx1()")
        layers = list(layers)
        x = self._x(layers)
        out = np.empty(len(layers))
        for i, layer in enumerate(layers):
            c = self.coef.get(str(layer_attr(layer, "kind", "")), self.coef["*"]) if self.per_kind else self.coef["*"]
            out[i] = x[i] @ c
        return out

    def estimate(self, layer: EnergyLayer, target: EnergyTarget = None) -> LayerEnergy:
        e = float(self.predict([layer])[0])
        kind = str(layer_attr(layer, "kind", ""))
        model = kind if self.per_kind and kind in self.coef else "*"
        return LayerEnergy(e, None, self.method, name=layer_attr(layer, "name"),
                           details={"model": model, "source": self.source, "features": list(self.features)})

    def estimate_many(self, layers: Sequence[EnergyLayer], target: EnergyTarget = None) -> LayerEnergies:
        layers = list(layers)
        return LayerEnergies(self.predict(layers), None, self.method, [str(layer_attr(x, "name", "")) for x in layers])

    # ---------------------------------------------------------------- evaluation
    def report(self, layers: Sequence[Any], energies_j: Sequence[float]) -> RegressionReport:
        """R^2, MAPE, MAE, worst error and error of the total on these layers (overall and per kind)."""
        layers = list(layers)
        y = np.asarray(energies_j, dtype=float)
        pred = self.predict(layers)
        rep = _report(pred, y)
        kinds = np.array([str(layer_attr(layer, "kind", "")) for layer in layers])
        for k in sorted(set(kinds)):
            sel = kinds == k
            rep.per_kind[k] = _report(pred[sel], y[sel])
        return rep

    def leave_one_group_out(self, layers: Sequence[Any], energies_j: Sequence[float],
                            groups: Sequence[str]) -> dict[str, float]:
        """SyNERGY's protocol (Table 3): for each group (e.g. a network), fit on the others and report the
        error of the group's total energy, %. Returns {group: test error %} plus ``"mean"``."""
        layers = list(layers)
        y = np.asarray(energies_j, dtype=float)
        g = np.asarray(list(groups))
        if g.shape != y.shape:
            raise ValueError("leave_one_group_out: one group label per layer")
        out = {}
        for grp in sorted(set(g)):
            train = g != grp
            m = MACRegression(self.features, self.intercept, self.per_kind, self.nonneg, self.weights, self.min_per_kind)
            m.fit([x for x, t in zip(layers, train) if t], y[train])
            test = [x for x, t in zip(layers, train) if not t]
            pred = m.predict(test).sum()
            out[str(grp)] = float(abs(pred - y[~train].sum()) / y[~train].sum() * 100)
        out["mean"] = float(np.mean(list(out.values())))
        return out
