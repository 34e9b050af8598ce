"""The formulas of Fulcrum section 4, checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_edge.modes import PowerMode
from lightning_edge.tuning import (
    ConcurrentProblem,
    InferenceProblem,
    Measurement,
    ProfileTable,
    TrainingProblem,
)
from lightning_edge.tuning.pareto import best_index, cummin_by_power, pareto_front
from lightning_edge.tuning.problems import (
    concurrent_power_w,
    concurrent_throughput,
    inference_latency_s,
    interleaved_minibatches,
    keeps_up,
    queueing_time_s,
)


def test_queueing_and_latency():
    # bs 16 at 60 rps: the first request waits for 15 more: 15 / 60 = 0.25 s
    assert queueing_time_s(16, 60.0) == pytest.approx(0.25)
    # + 0.1 s of execution = 0.35 s
    assert inference_latency_s(0.1, 16, 60.0) == pytest.approx(0.35)
    # bs 1: no queueing, latency = execution time
    assert inference_latency_s(0.02, 1, 60.0) == pytest.approx(0.02)
    # vectorised over batch sizes: (0, 3, 15) / 30 + 0.01
    np.testing.assert_allclose(inference_latency_s(0.01, np.array([1, 4, 16]), 30.0), [0.01, 0.11, 0.51])


def test_keeps_up_with_arrivals():
    # bs 4 at 100 rps: 4 requests arrive every 40 ms; a 40 ms minibatch just keeps up, 41 ms does not
    assert keeps_up(0.040, 4, 100.0)
    assert not keeps_up(0.041, 4, 100.0)
    np.testing.assert_array_equal(keeps_up(np.array([0.01, 0.02]), 1, 60.0), [True, False])


def test_constraint_values_are_what_the_assessment_checks():
    # a profile store records these (feasible when <= 0): the same numbers, with the same tolerance, as assess
    inf = InferenceProblem(25.0, 0.1, 100.0, batch_sizes=(4,))
    t = np.array([0.04, 0.041, 0.07, 0.071, 0.05])
    p = np.array([25.0, 25.0, 24.0, 24.0, 25.0 * (1 + 1e-12)])  # the budget itself, and within the tolerance
    c = inf.constraints(t, p, 4)
    assert set(c) == {"power_w", "latency_s", "keep_up_s"}
    np.testing.assert_allclose(c["latency_s"], 3 / 100.0 + t - 0.1, atol=1e-12)
    np.testing.assert_allclose(c["keep_up_s"], t - 0.04, atol=1e-12)
    holds = np.logical_and.reduce([v <= 0 for v in c.values()])
    np.testing.assert_array_equal(inf.assess(t, p, 4).feasible, holds)
    assert inf.constraints(0.04, 26.0).keys() == {"power_w"}  # a training profile of a serving problem
    tr = TrainingProblem(30.0)
    np.testing.assert_array_equal(tr.assess([1.0, 1.0], [30.0, 30.1]).feasible, tr.constraints(1.0, np.array([30.0, 30.1]))["power_w"] <= 0)


def test_interleaving_throughput():
    # bs 16 at 60 rps: cycle 16/60 = 0.2667 s; inference 0.1 s leaves 0.1667 s idle;
    # 0.05 s training minibatches: floor(0.1667 / 0.05) = 3 per cycle; 3 * 60 / 16 = 11.25 minibatches/s
    assert interleaved_minibatches(0.05, 0.1, 16, 60.0) == 3
    assert concurrent_throughput(0.05, 0.1, 16, 60.0) == pytest.approx(11.25)
    # exact fit: cycle 0.4 s (bs 4, 10 rps), inference 0.1 s, idle 0.3 s = 3 x 0.1 s exactly
    assert interleaved_minibatches(0.1, 0.1, 4, 10.0) == 3
    # inference alone cannot keep up: no training at all (never negative)
    assert interleaved_minibatches(0.05, 0.5, 16, 60.0) == 0
    assert concurrent_power_w(30.0, 42.0) == 42.0
    np.testing.assert_array_equal(interleaved_minibatches(np.array([0.05, 0.2]), 0.1, 16, 60.0), [3, 0])


def test_problem_validation():
    with pytest.raises(ValueError, match="power_budget_w"):
        TrainingProblem(power_budget_w=0)
    with pytest.raises(ValueError, match="latency_budget_s"):
        InferenceProblem(30.0, latency_budget_s=-1, arrival_rps=60)
    with pytest.raises(ValueError, match="batch_sizes"):
        InferenceProblem(30.0, 0.2, 60.0, batch_sizes=())
    p = InferenceProblem(30, 0.2, 60, batch_sizes=(16, 1, 4, 4))
    assert p.batch_sizes == (1, 4, 16)
    with pytest.raises(ValueError, match="time_s"):
        Measurement(time_s=0.0, power_w=1.0)


def test_training_assessment_picks_fastest_within_budget():
    t = np.array([0.30, 0.20, 0.10, 0.25])
    p = np.array([10.0, 20.0, 31.0, 20.0])
    a = TrainingProblem(30.0).assess(t, p)
    np.testing.assert_array_equal(a.feasible, [True, True, False, True])
    assert best_index(a) == 1  # 0.10 s breaks the budget; 0.20 s at 20 W beats 0.25 s at 20 W


def test_inference_assessment():
    # 60 rps, latency <= 0.2 s, power <= 30 W
    prob = InferenceProblem(30.0, 0.2, 60.0, batch_sizes=(1, 4, 16))
    t = np.array([0.020, 0.050, 0.060, 0.010])
    p = np.array([25.0, 25.0, 25.0, 40.0])
    bs = np.array([1, 4, 16, 1])
    a = prob.assess(t, p, bs)
    # row 0: bs 1, 20 ms > 1/60 = 16.7 ms: cannot keep up
    # row 1: bs 4, latency 3/60 + 0.05 = 0.10 s, keeps up (0.05 <= 4/60)
    # row 2: bs 16, latency 15/60 + 0.06 = 0.31 s > 0.2 s
    # row 3: over the power budget
    np.testing.assert_array_equal(a.feasible, [False, True, False, False])
    np.testing.assert_allclose(a.latency_s, [0.02, 0.10, 0.31, 0.01])
    assert best_index(a) == 1


def test_concurrent_assessment_prefers_throughput_then_latency():
    prob = ConcurrentProblem(30.0, 1.0, 60.0, batch_sizes=(4, 16, 32))
    # rows: (t_tr, p_tr, t_in, p_in, bs)
    rows = np.array([
        [0.05, 20.0, 0.10, 25.0, 16],  # cycle 0.267, idle 0.167 -> tau 3 -> 11.25/s, latency 0.35
        [0.05, 20.0, 0.15, 26.0, 32],  # cycle 0.533, idle 0.383 -> tau 7 -> 13.125/s, latency 0.667
        [0.05, 20.0, 0.02, 35.0, 4],   # power 35 > 30 (and idle 0.047 s < 0.05 s: tau 0)
        [0.05, 20.0, 0.20, 26.0, 32],  # idle 0.333 -> tau 6 -> 11.25/s, latency 0.717
    ])
    a = prob.assess(*rows.T)
    np.testing.assert_array_equal(a.feasible, [True, True, False, True])
    np.testing.assert_array_equal(a.train_minibatches, [3, 7, 0, 6])
    np.testing.assert_allclose(a.throughput[[0, 1, 3]], [11.25, 13.125, 11.25])
    np.testing.assert_allclose(a.power_w, [25.0, 26.0, 35.0, 26.0])
    assert best_index(a) == 1
    # rows 0 and 3 tie on throughput: the lower latency (row 0) wins once row 1 is gone
    a2 = prob.assess(*rows[[0, 3]].T)
    assert best_index(a2) == 0


def test_concurrent_needs_one_training_minibatch():
    prob = ConcurrentProblem(30.0, 1.0, 60.0, batch_sizes=(4,))
    # cycle 4/60 = 0.0667 s, inference 0.05 s: 0.0167 s idle < one 0.05 s training minibatch
    a = prob.assess(0.05, 10.0, 0.05, 10.0, 4)
    assert a.train_minibatches[0] == 0 and not a.feasible[0]


def test_pareto_front():
    t = np.array([5.0, 4.0, 3.0, 4.5, 1.0, 3.0])
    p = np.array([1.0, 2.0, 3.0, 2.5, 9.0, 3.5])
    # (4.5, 2.5) is dominated by (4, 2); (3, 3.5) by (3, 3)
    np.testing.assert_array_equal(pareto_front(t, p), [4, 2, 1, 0])
    assert pareto_front([], []).size == 0


def test_cummin_by_power_matches_brute_force():
    rng = np.random.default_rng(1)
    p = rng.uniform(10, 50, 200)
    c = rng.uniform(0, 1, 200)
    budgets = np.arange(5, 56, 1.0)
    best, idx = cummin_by_power(p, c, budgets)
    for b, cost, i in zip(budgets, best, idx):
        ok = p <= b
        if not ok.any():
            assert i == -1 and np.isinf(cost)
        else:
            assert cost == c[ok].min() and p[i] <= b


def test_profile_table_solves_and_combines():
    modes = [PowerMode(4, 400, 300, 1000), PowerMode(8, 800, 600, 2000)]
    train = ProfileTable("train", modes, train_time_s=[0.2, 0.1], train_power_w=[15, 25], labels=["simulated"] * 2)
    sol = train.solve(TrainingProblem(20.0))
    assert sol.mode == modes[0] and sol.batch_size is None and sol.label == "simulated"
    assert train.solve(TrainingProblem(10.0)) is None
    infer = ProfileTable("infer", [modes[1], modes[0], modes[1]], batch_size=[4, 4, 16],
                         infer_time_s=[0.02, 0.04, 0.05], infer_power_w=[26, 16, 28])
    both = ProfileTable.combine(train, infer)
    assert both.kind == "concurrent" and len(both) == 3
    s = both.solve(ConcurrentProblem(30.0, 1.0, 60.0, batch_sizes=(4, 16)))
    # bs 16 at mode 1: cycle 0.267 - 0.05 = 0.217 / 0.1 -> 2 -> 7.5/s; bs 4 at mode 1: 0.0467/0.1 -> 0;
    # bs 4 at mode 0: 0.0267/0.2 -> 0
    assert (s.mode, s.batch_size, s.train_minibatches) == (modes[1], 16, 2)
    assert s.throughput == pytest.approx(7.5)
    with pytest.raises(ValueError, match="concurrent"):
        train.solve(ConcurrentProblem(30.0, 1.0, 60.0))
