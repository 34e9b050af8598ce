"""Conformance suite every strategy passes (in the spirit of optuna/testing/pytest_samplers.py).

- never returns a (mode, batch size) that it did not profile;
- never returns a solution that breaks a constraint of the problem (checked against the workload);
- never profiles more distinct points than its budget (counted at the workload too);
- is deterministic for a seed;
- returns ``None`` when nothing can be feasible;
- an exploring strategy's table answers the problem like ``solve`` does.

The strategies are the registry's (``search.STRATEGIES``): a strategy registered anywhere, the package's or a
plugin's, is in the suite without a line here.
"""

from __future__ import annotations

import collections

import pytest

from lightning_edge.tuning import (
    ALS,
    GMD,
    ConcurrentProblem,
    InferenceProblem,
    MemoryStore,
    NeuralBaseline,
    RandomSampling,
    TrainingProblem,
)
from lightning_edge.tuning.search import STRATEGIES, ExploreSpec, ExploringStrategy, Strategy

from .workloads import SMALL_SPACE, SaturatingWorkload

BS = (1, 4, 16)

#: quicker settings (fewer profiles and epochs) for the registered strategies whose defaults take long on this
#: space; every other one runs with its defaults
QUICK = {
    "als": lambda: ALS(init_profiles=6, per_round=3, rounds=2, epochs=40, finetune_epochs=10, hidden=(16, 8)),
    "rnd": lambda: RandomSampling(12),
    "nn": lambda: NeuralBaseline(12, epochs=40, hidden=(16, 8)),
}


def make(name: str) -> Strategy:
    return QUICK[name]() if name in QUICK else STRATEGIES.get(name)()


def registered() -> list[str]:
    """The suite's strategies: every registered one (read when the tests are collected)."""
    return list(STRATEGIES)


def observed_tables() -> list[str]:
    """The exploring strategies whose table is what they profiled (the NN's holds predictions, by design)."""
    return [n for n in registered() if issubclass(STRATEGIES.get(n), ExploringStrategy)
            and STRATEGIES.get(n).make_table is ExploringStrategy.make_table]

PROBLEMS = {
    "train-tight": TrainingProblem(20.0),
    "train-loose": TrainingProblem(30.0),
    "infer": InferenceProblem(25.0, latency_budget_s=0.3, arrival_rps=60.0, batch_sizes=BS),
    "infer-fast": InferenceProblem(40.0, latency_budget_s=0.2, arrival_rps=200.0, batch_sizes=BS),
    "concurrent": ConcurrentProblem(30.0, latency_budget_s=1.0, arrival_rps=30.0, batch_sizes=BS),
}


def _truth(w, problem, sol):
    """Re-measure the returned point and assess it with the problem (the ground truth)."""
    if problem.kind == "train":
        m = w.train(sol.mode)
        return problem.assess(m.time_s, m.power_w)
    if problem.kind == "infer":
        m = w.infer(sol.mode, sol.batch_size)
        return problem.assess(m.time_s, m.power_w, sol.batch_size)
    mt, mi = w.train(sol.mode), w.infer(sol.mode, sol.batch_size)
    return problem.assess(mt.time_s, mt.power_w, mi.time_s, mi.power_w, sol.batch_size)


@pytest.mark.parametrize("pname", list(PROBLEMS))
@pytest.mark.parametrize("sname", registered())
def test_conformance(sname, pname):
    check_conformance(lambda: make(sname), PROBLEMS[pname])


def check_conformance(new, problem):
    w = SaturatingWorkload(scale=0.5)
    strategy = new()
    r = strategy.run(problem, SMALL_SPACE, w, store=None, seed=3)
    budget = strategy.budget(problem, SMALL_SPACE)

    # respects its profiling budget, and each distinct point is measured once
    assert r.profiles_used == len(r.visited) <= budget
    assert all(n == 1 for n in w.calls.values())
    points = {(p.mode, p.batch_size) for p in r.visited if p.kind == problem.kind}
    sol = r.solution
    if sol is not None:
        # never returns an unprofiled point
        assert (sol.mode, sol.batch_size) in points
        # never returns an infeasible one (ground truth)
        assert bool(_truth(w, problem, sol).feasible[0])
        assert sol.power_w <= problem.power_budget_w
        assert sol.profiles_used == r.profiles_used
        assert sol.label == "simulated"

    # deterministic for a seed
    r2 = new().run(problem, SMALL_SPACE, SaturatingWorkload(scale=0.5), store=None, seed=3)
    assert r2.visited == r.visited
    assert r2.solution == r.solution


@pytest.mark.parametrize("sname", registered())
@pytest.mark.parametrize("problem", [TrainingProblem(1.0), InferenceProblem(1.0, 0.3, 60.0, batch_sizes=BS),
                                     ConcurrentProblem(1.0, 1.0, 30.0, batch_sizes=BS)], ids=["train", "infer", "conc"])
def test_infeasible_problem_returns_none(sname, problem):
    strategy = make(sname)
    r = strategy.run(problem, SMALL_SPACE, SaturatingWorkload(), store=None)
    assert r.solution is None
    assert r.profiles_used <= strategy.budget(problem, SMALL_SPACE)


@pytest.mark.parametrize("sname", observed_tables())
@pytest.mark.parametrize("kind", ["train", "infer", "concurrent"])
def test_exploring_strategies_answer_many_problems_from_one_table(sname, kind):
    strategy = make(sname)
    assert isinstance(strategy, ExploringStrategy)
    w = SaturatingWorkload(scale=0.5)
    table = strategy.explore(SMALL_SPACE, w, kind=kind, batch_sizes=BS, latency_range_s=(0.1, 1.0),
                             arrival_range_rps=(20.0, 120.0), store=None, seed=1)
    calls = sum(w.calls.values())
    assert len(table) == table.profiles_used <= strategy.budget_for(ExploreSpec(kind, BS), SMALL_SPACE)
    if kind == "train":
        problems = [TrainingProblem(b) for b in (12.0, 16.0, 20.0, 30.0)]
    elif kind == "infer":
        problems = [InferenceProblem(b, lat, rate, BS) for b in (20.0, 30.0) for lat in (0.2, 0.8) for rate in (30.0, 90.0)]
    else:
        problems = [ConcurrentProblem(b, lat, rate, BS) for b in (20.0, 30.0) for lat in (0.3, 0.9) for rate in (30.0, 90.0)]
    profiled = set(table.points())
    for prob in problems:
        sol = table.solve(prob)
        if sol is not None:
            assert (sol.mode, sol.batch_size) in profiled
            assert bool(_truth(w, prob, sol).feasible[0])
    # answering problems profiles nothing more (the _truth calls above re-measure on purpose)
    assert calls == table.profiles_used or kind == "concurrent"


def test_nn_as_published_may_answer_with_predictions():
    # verify=False: the NN answers from its predicted Pareto, labelled "estimated" (it may break budgets)
    nn = NeuralBaseline(12, epochs=40, hidden=(16, 8), verify=False)
    r = nn.run(TrainingProblem(20.0), SMALL_SPACE, SaturatingWorkload(), store=None)
    assert r.solution is None or r.solution.label in ("estimated", "simulated")
    assert r.profiles_used == 12


def test_profiles_in_a_shared_store_are_never_measured_twice():
    store = MemoryStore()
    w = SaturatingWorkload()
    first = GMD().run(TrainingProblem(20.0), SMALL_SPACE, w, store=store)
    assert first.new_profiles == first.profiles_used > 0
    again = GMD().run(TrainingProblem(20.0), SMALL_SPACE, w, store=store)
    assert again.new_profiles == 0 and again.solution == first.solution.__class__(
        **{**first.solution.__dict__, "new_profiles": 0})
    other = GMD().run(TrainingProblem(25.0), SMALL_SPACE, w, store=store)
    assert other.new_profiles < other.profiles_used  # the midpoint and the extremes were already profiled
    assert all(n == 1 for n in w.calls.values())
    counts = collections.Counter(k[0] for k in w.calls)
    assert counts["train"] == len(store)


def test_the_suite_runs_every_registered_strategy_and_the_package_registers_its_own():
    assert set(QUICK) <= set(STRATEGIES)  # a quick setting for a name nobody registered would test nothing
    assert {"gmd", "als", "rnd", "nn", "exhaustive", "binary-search"} <= set(registered())
    assert {"als", "rnd", "exhaustive"} <= set(observed_tables()) and "nn" not in observed_tables()


def test_a_strategy_registered_outside_the_package_joins_the_suite_and_passes_it():
    from lightning_edge.tuning import BinarySearch

    class HalvingSearch(BinarySearch):  # a plugin's strategy: here Fig. 6a's search under a name of its own
        strategy_name = "halving"

    try:
        assert "halving" in registered() and "HALVING" in STRATEGIES
        assert isinstance(make("halving"), HalvingSearch)
        for problem in PROBLEMS.values():
            check_conformance(lambda: make("halving"), problem)
    finally:
        STRATEGIES.unregister("halving")
    assert "halving" not in registered()
