"""Power-mode tuning: Fulcrum's problems, GMD, ALS and their baselines, on Optuna.

```python
from lightning_edge.tuning import TrainingProblem, GMD
sol = GMD().solve(TrainingProblem(power_budget_w=30.0), space, workload)   # profiles kept in the default store
table = ALS().explore(space, workload, kind="infer")   # profile once, then table.solve(problem) many times
```

See docs/tuning.md. The core talks to a profile backend (``tuning/backend.py``); the Optuna-backed pieces
(``ProfileStore``, the samplers) load lazily. The strategies load with the package: each registers its name in
``search.STRATEGIES`` when its class is defined, so every name resolves once this package is imported.
"""

from __future__ import annotations

from lightning_edge._lazy import lazy_getattr
from lightning_edge.tuning.als import ALS
from lightning_edge.tuning.backend import MemoryStore, ProfileBackend
from lightning_edge.tuning.baselines import BinarySearch, Exhaustive, NeuralBaseline, RandomSampling
from lightning_edge.tuning.gmd import GMD, DynamicGMD
from lightning_edge.tuning.problems import (
    DEFAULT_BATCH_SIZES,
    ConcurrentMeasurement,
    ConcurrentProblem,
    InferenceProblem,
    Measurement,
    Solution,
    TrainingProblem,
    Workload,
)
from lightning_edge.tuning.search import (
    STRATEGIES,
    BudgetExhausted,
    ExploreSpec,
    Point,
    ProfilingStopped,
    SearchResult,
    Strategy,
    strategy_named,
)
from lightning_edge.tuning.table import ProfileTable

_LAZY = {
    "ProfileStore": "lightning_edge.tuning.store",
    "StrategySampler": "lightning_edge.tuning.samplers",
    "GMDSampler": "lightning_edge.tuning.samplers",
    "ALSSampler": "lightning_edge.tuning.samplers",
}

__all__ = [
    "ALS", "GMD", "DynamicGMD", "BinarySearch", "Exhaustive", "NeuralBaseline", "RandomSampling",
    "TrainingProblem", "InferenceProblem", "ConcurrentProblem", "Measurement", "ConcurrentMeasurement",
    "Solution", "Workload", "DEFAULT_BATCH_SIZES", "Point", "ExploreSpec", "MemoryStore", "ProfileBackend",
    "SearchResult",
    "Strategy", "STRATEGIES", "strategy_named", "BudgetExhausted", "ProfilingStopped", "ProfileTable", "ProfileStore", "StrategySampler",
    "GMDSampler", "ALSSampler",
]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
