"""The statistical models' random forest, kept as plain arrays.

``Forest.fit`` trains scikit-learn's ``RandomForestRegressor`` and keeps only what predicting needs: per tree, the
children, the feature and threshold of each split and the value of each leaf. ``predict`` walks those arrays with
numpy, so a saved statistical or mixed model loads and predicts without scikit-learn and without training again.
``check`` validates the arrays of a file before anything is built from them (``LatencyModel.load``): every child
index lies after its parent (so a walk always ends at a leaf), every split names a feature that exists, every
number is finite.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["Forest", "check_forest", "MAX_TREES", "MAX_NODES"]

#: limits on a stored forest (far above what ``fit`` makes: 48 trees of at most a few thousand nodes)
MAX_TREES = 512
MAX_NODES = 1 << 17          # per tree
MAX_TOTAL_NODES = 1 << 21    # per forest


def _short(v: float) -> float:
    """A float rounded to 7 significant digits (a stored threshold or leaf value; JSON stays small)."""
    return float(f"{float(v):.7g}")


class Forest:
    """A fitted random forest of regression trees: ``trees`` is a list of ``(left, right, feature, threshold,
    value)`` integer/float arrays; ``left[i] == -1`` marks a leaf."""

    def __init__(self, trees: list[tuple[np.ndarray, ...]], n_features: int):
        self.trees = trees
        self.n_features = int(n_features)

    @classmethod
    def fit(cls, X: np.ndarray, y: np.ndarray, *, n_trees: int = 48, min_leaf: int = 2, seed: int = 0,
            extra: bool = True) -> Forest:
        """``extra``: extremely randomised trees (random split points, every sample in every tree), which
        generalised better than bootstrapped ones on units held out of the sweep (mean error 21 % against 25 %)."""
        try:
            from sklearn.ensemble import ExtraTreesRegressor, RandomForestRegressor
        except ImportError as exc:  # the core package does not depend on scikit-learn
            raise ImportError("fitting the statistical and mixed latency models needs scikit-learn: "
                              "pip install 'lightning-edge[latency]' (loading a saved one does not)") from exc
        make = ExtraTreesRegressor if extra else RandomForestRegressor
        rf = make(n_estimators=n_trees, min_samples_leaf=min_leaf, max_features=1.0 if extra else 0.5,
                  random_state=seed, n_jobs=1)
        rf.fit(X, y)
        trees = []
        for est in rf.estimators_:
            t = est.tree_
            left = t.children_left.astype(np.int64)
            right = t.children_right.astype(np.int64)
            feat = np.where(left >= 0, t.feature, 0).astype(np.int64)
            thr = np.array([_short(v) for v in np.where(left >= 0, t.threshold, 0.0)])
            val = np.array([_short(v) for v in t.value.reshape(-1)])
            trees.append((left, right, feat, thr, val))
        return cls(trees, X.shape[1])

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(f"forest expects {self.n_features} features, got {X.shape}")
        out = np.zeros(X.shape[0])
        rows = np.arange(X.shape[0])
        for left, right, feat, thr, val in self.trees:
            node = np.zeros(X.shape[0], dtype=np.int64)
            while True:
                inner = left[node] >= 0
                if not inner.any():
                    break
                go_left = X[rows, feat[node]] <= thr[node]
                node = np.where(inner, np.where(go_left, left[node], right[node]), node)
            out += val[node]
        return out / max(1, len(self.trees))

    def to_dict(self) -> dict:
        return {"n_features": self.n_features,
                "trees": [{"left": t[0].tolist(), "right": t[1].tolist(), "feature": t[2].tolist(),
                           "threshold": t[3].tolist(), "value": t[4].tolist()} for t in self.trees]}

    @classmethod
    def from_dict(cls, d: dict) -> Forest:
        trees = [(np.asarray(t["left"], dtype=np.int64), np.asarray(t["right"], dtype=np.int64),
                  np.asarray(t["feature"], dtype=np.int64), np.asarray(t["threshold"], dtype=float),
                  np.asarray(t["value"], dtype=float)) for t in d["trees"]]
        return cls(trees, int(d["n_features"]))


def check_forest(d: Any, field: str, n_features: int, fail: Callable[..., Exception]) -> None:
    """Raise ``fail(field, expected, got)`` at the first thing in a stored forest that ``Forest.from_dict`` and
    ``predict`` could not use safely."""
    if not isinstance(d, dict):
        raise fail(field, "a forest object {n_features, trees}", d)
    nf = d.get("n_features")
    if isinstance(nf, bool) or not isinstance(nf, int) or nf != n_features:
        raise fail(f"{field}.n_features", f"{n_features} (the features this version computes)", nf)
    trees = d.get("trees")
    if not isinstance(trees, list) or not 1 <= len(trees) <= MAX_TREES:
        raise fail(f"{field}.trees", f"a list of 1 to {MAX_TREES} trees", trees)
    total = 0
    for i, t in enumerate(trees):
        tf = f"{field}.trees[{i}]"
        if not isinstance(t, dict):
            raise fail(tf, "a tree {left, right, feature, threshold, value}", t)
        arrs = {k: t.get(k) for k in ("left", "right", "feature", "threshold", "value")}
        n = arrs["left"]
        if not isinstance(n, list) or not 1 <= len(n) <= MAX_NODES:
            raise fail(f"{tf}.left", f"a list of 1 to {MAX_NODES} nodes", n)
        n = len(n)
        total += n
        if total > MAX_TOTAL_NODES:
            raise fail(f"{field}.trees", f"at most {MAX_TOTAL_NODES} nodes in all", f"{total}")
        for k, a in arrs.items():
            if not isinstance(a, list) or len(a) != n:
                raise fail(f"{tf}.{k}", f"a list of {n} values (one per node)", a)
        for j in range(n):
            le, ri, fe = arrs["left"][j], arrs["right"][j], arrs["feature"][j]
            for k, v in (("left", le), ("right", ri), ("feature", fe)):
                if isinstance(v, bool) or not isinstance(v, int):
                    raise fail(f"{tf}.{k}[{j}]", "an integer", v)
            if le == -1 or ri == -1:
                if le != ri:
                    raise fail(f"{tf}.left[{j}]", "-1 in both children (a leaf) or in neither", le)
            elif not (j < le < n and j < ri < n):
                raise fail(f"{tf}.left[{j}]", f"child indices after the node ({j}) and below {n}, or -1", le)
            elif not 0 <= fe < n_features:
                raise fail(f"{tf}.feature[{j}]", f"a feature index from 0 to {n_features - 1}", fe)
            for k in ("threshold", "value"):
                v = arrs[k][j]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) > 1e300:
                    raise fail(f"{tf}.{k}[{j}]", "a finite number", v)
