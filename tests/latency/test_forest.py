"""The stored random forest predicts as scikit-learn's does, and survives a round trip through JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lightning_edge.latency.forest import Forest, check_forest


def data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] * (X[:, 2] > 0) + 0.1 * rng.normal(size=n)
    return X, y


def test_numpy_walk_matches_scikit_learn():
    pytest.importorskip("sklearn")
    from sklearn.ensemble import ExtraTreesRegressor, RandomForestRegressor

    X, y = data()
    Xt, _ = data(50, seed=1)
    for extra, make, mf in ((True, ExtraTreesRegressor, 1.0), (False, RandomForestRegressor, 0.5)):
        f = Forest.fit(X, y, n_trees=8, min_leaf=2, seed=3, extra=extra)
        rf = make(n_estimators=8, min_samples_leaf=2, max_features=mf, random_state=3, n_jobs=1)
        rf.fit(X, y)
        assert f.predict(Xt) == pytest.approx(rf.predict(Xt), rel=1e-5, abs=1e-6)
        assert len(f.trees) == 8 and f.n_features == 5


def test_round_trip_through_json_and_checks():
    pytest.importorskip("sklearn")
    X, y = data()
    f = Forest.fit(X, y, n_trees=4)
    d = json.loads(json.dumps(f.to_dict()))

    def fail(field, what, got=None):
        return ValueError(f"{field}: expected {what}")

    check_forest(d, "forest", 5, fail)
    back = Forest.from_dict(d)
    assert back.predict(X) == pytest.approx(f.predict(X))
    with pytest.raises(ValueError, match="n_features"):
        check_forest(d, "forest", 6, fail)
    with pytest.raises(ValueError, match="forest expects 5 features"):
        back.predict(X[:, :4])
