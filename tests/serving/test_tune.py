"""Serving's ``tuner=`` takes exactly the registered strategies' names (and its own ``"dynamic"``), in any case
and alias, and refuses anything else with the list of them."""

from __future__ import annotations

import pytest

from lightning_edge.serving.tune import DYNAMIC, Retuner, tuner_name, tuner_names
from lightning_edge.tuning import ALS, BinarySearch, Exhaustive, InferenceProblem, ProfileTable
from lightning_edge.tuning.search import STRATEGIES
from tests.tuning.workloads import SMALL_SPACE, SaturatingWorkload

PROBLEM = InferenceProblem(25.0, latency_budget_s=0.3, arrival_rps=60.0, batch_sizes=(1, 4, 16))


def test_serving_takes_exactly_the_registered_names_and_dynamic():
    assert tuner_names() == (DYNAMIC, *STRATEGIES)
    for name in STRATEGIES:
        r = Retuner(name.upper(), SMALL_SPACE, SaturatingWorkload(), store=None)
        assert r.name == name and type(r.strategy) is STRATEGIES.get(name)
    assert Retuner("Dynamic", SMALL_SPACE, SaturatingWorkload()).name == DYNAMIC
    assert tuner_name("BinarySearch") == "binary-search"
    with pytest.raises(ValueError, match="tuner: expected one of 'dynamic', " + ", ".join(
            repr(n) for n in STRATEGIES)):
        Retuner("magic", SMALL_SPACE, SaturatingWorkload())
    with pytest.raises(ValueError, match="needs a mode space and a workload"):
        Retuner("rnd", None, None)


def test_each_kind_of_tuner_solves_a_sequence_of_rates():
    w = SaturatingWorkload(scale=0.5)
    als = Retuner("als", SMALL_SPACE, w, store=None, als_rate_range_rps=(30.0, 90.0))
    assert isinstance(als.strategy, ALS) and als.explore_once
    als.strategy = ALS(init_profiles=6, per_round=3, rounds=2, epochs=40, finetune_epochs=10, hidden=(16, 8))  # quick
    first, new = als.solve(PROBLEM)
    assert new > 0 and isinstance(als.table, ProfileTable)
    again, none = als.solve(InferenceProblem(25.0, 0.3, 80.0, batch_sizes=(1, 4, 16)))
    assert none == 0  # one exploration, then lookups
    for name, cls in (("exhaustive", Exhaustive), ("binary-search", BinarySearch)):
        r = Retuner(name, SMALL_SPACE, SaturatingWorkload(scale=0.5), store=None)
        sol, new = r.solve(PROBLEM)
        assert type(r.strategy) is cls and sol is not None and sol.power_w <= 25.0 and new > 0
        assert r.solve(PROBLEM)[1] == 0  # its profiles are shared: nothing profiled twice
    instance = Retuner(ALS(init_profiles=6, per_round=3, rounds=1, epochs=20, finetune_epochs=5, hidden=(8,)),
                       SMALL_SPACE, SaturatingWorkload(scale=0.5), store=None)
    assert instance.name == "ALS" and not instance.explore_once  # an instance runs as given, for each problem
