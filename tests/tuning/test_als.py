"""ALS (Algorithm 2, quadrants) and the NN it trains; the baselines."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_edge.tuning import (
    ALS,
    BinarySearch,
    Exhaustive,
    ExploreSpec,
    InferenceProblem,
    NeuralBaseline,
    RandomSampling,
    TrainingProblem,
)
from lightning_edge.tuning.als import (
    PAPER_SETTINGS,
    fill_layers,
    pick_diverse,
    quadrant_miss,
    quadrant_view,
    quadrants,
)
from lightning_edge.tuning.nn import MLP, mape

from .workloads import HAND_SPACE, SMALL_SPACE, LinearWorkload, SaturatingWorkload

TINY = dict(epochs=40, finetune_epochs=10, hidden=(16, 8))


def test_paper_budgets():
    als = ALS()
    assert als.budget_for(ExploreSpec("train"), HAND_SPACE) == 10 + 8 * 5 == 50
    assert als.budget_for(ExploreSpec("infer"), HAND_SPACE) == 25 + 6 * 4 * 5 == 145
    assert als.budget_for(ExploreSpec("concurrent"), HAND_SPACE) == 25 + 3 * 4 * 10 == 145
    assert PAPER_SETTINGS["train"] == {"init": 10, "per_round": 5, "rounds": 8}


def test_quadrants_split_both_ranges_in_two():
    q = quadrants((0.05, 1.0), (30.0, 90.0))
    assert q == [((0.05, 0.525), (30.0, 60.0)), ((0.05, 0.525), (60.0, 90.0)),
                 ((0.525, 1.0), (30.0, 60.0)), ((0.525, 1.0), (60.0, 90.0))]


def test_pick_max_k_by_power_distance():
    cand = np.array([10, 11, 12, 13, 14])
    pred = np.array([20.0, 25.0, 31.0, 32.0, 46.0])
    observed = np.array([14.7, 22.8, 28.0, 38.0, 49.3])
    # distances to the nearest observed power: 2.8, 2.2, 3.0, 4.0, 3.3
    np.testing.assert_array_equal(pick_diverse(cand, pred, observed, 3), [13, 14, 12])
    # greedy (GSy): after 32 W is taken, 31 W is 1 W from it, so 20 W comes before it
    np.testing.assert_array_equal(pick_diverse(cand, pred, observed, 3, greedy=True), [13, 14, 10])
    assert pick_diverse(cand[:0], pred[:0], observed, 3).size == 0


def test_fill_layers_offers_the_next_pareto_layers_in_order():
    # cost (to minimise), power: layer 1 = {0, 1, 2}, layer 2 = {3, 4}, layer 3 = {5}
    cost = np.array([1.0, 2.0, 3.0, 1.5, 2.5, 4.0])
    power = np.array([30.0, 20.0, 10.0, 31.0, 21.0, 35.0])
    cand = np.arange(6)
    front = np.array([0, 1, 2])
    np.testing.assert_array_equal(fill_layers(cand, front, cost, power, np.array([]), 2, greedy=True), [3, 4])
    np.testing.assert_array_equal(fill_layers(cand, front, cost, power, np.array([]), 5, greedy=True), [3, 4, 5])
    # within a layer, power diversity against the observed powers and the front's: 21 W is 1 W from
    # the front's 20 W, 31 W 1 W from its 30 W, so against an observed 31 W the 21 W point comes first
    np.testing.assert_array_equal(fill_layers(cand, front, cost, power, np.array([31.0]), 1, greedy=True), [4])
    assert fill_layers(cand, cand, cost, power, np.array([]), 3, greedy=True).size == 0


def test_quadrant_miss_is_the_pruning_test_as_a_ratio():
    quad = ((0.1, 0.5), (10.0, 20.0))
    bs = np.array([1.0, 4.0, 4.0, 4.0])
    # inference [t_in, p_in]: latency at 20 rps (bs-1)/20 + t_in against 0.5 s; t_in against bs / 10 rps
    v = np.array([[0.05, 10.0], [0.30, 10.0], [0.40, 10.0], [0.1, 10.0]])
    miss = quadrant_miss("infer", v, bs, quad)
    np.testing.assert_allclose(miss, [0.5, 0.9, 1.1, 0.5])
    np.testing.assert_array_equal(quadrant_view("infer", v, bs, quad)[0], miss <= 1.0)
    # concurrent [t_tr, p_tr, t_in, p_in]: one training minibatch must also fit the 0.4 s cycle at 10 rps
    c = np.array([[0.03, 20.0, 0.05, 10.0], [0.15, 20.0, 0.30, 10.0], [0.5, 20.0, 0.1, 10.0], [0.25, 20.0, 0.1, 10.0]])
    miss_c = quadrant_miss("concurrent", c, bs, quad)
    np.testing.assert_allclose(miss_c, [0.8, 1.125, 1.5, 0.875])
    np.testing.assert_array_equal(quadrant_view("concurrent", c, bs, quad)[0], [True, False, False, True])


def test_als_fill_spends_the_profiles_a_thin_front_leaves():
    """As published a quadrant whose predicted front is thinner than the per-round count profiles fewer
    points; ``fill`` spends the whole budget, on new points only, and never more."""
    kw = dict(init_profiles=10, per_round=4, rounds=2, **TINY)
    spec = dict(kind="concurrent", batch_sizes=(1, 4, 16), latency_range_s=(0.02, 0.1), arrival_range_rps=(30, 90),
                store=None, seed=0)
    budget = ALS(**kw).budget_for(ExploreSpec("concurrent", (1, 4, 16)), HAND_SPACE)
    w = SaturatingWorkload(scale=0.5)
    filled = ALS(**kw)
    table = filled.explore(HAND_SPACE, w, **spec)
    assert table.profiles_used == len(table) == budget == 9 + 2 * 4 * 4
    assert set(w.calls.values()) == {1}  # nothing measured twice
    assert sum(1 for c in w.calls if c[0] == "infer") == len(table)
    assert all(len(r["picked"]) == 4 for r in filled.last_info["rounds"])
    assert any(r["kept"] == 0 for r in filled.last_info["rounds"])  # a round with nothing predicted feasible
    thin = ALS(fill=False, **kw)
    assert thin.explore(HAND_SPACE, SaturatingWorkload(scale=0.5), **spec).profiles_used < budget
    assert ALS.as_published().fill is False


def test_als_train_profiles_the_pareto_region():
    w = SaturatingWorkload()
    als = ALS(**TINY)
    table = als.explore(HAND_SPACE, w, kind="train", store=None, seed=0)
    assert 10 < len(table) <= 50
    rounds = als.last_info["rounds"]
    assert 1 <= len(rounds) <= 8 and all(len(r["picked"]) <= 5 for r in rounds)
    # every profiled point is measured exactly once, and nothing else is
    assert sum(w.calls.values()) == len(table)
    # the table answers many budgets with profiled modes only
    for b in range(14, 40, 3):
        sol = table.solve(TrainingProblem(float(b)))
        assert sol is None or (sol.power_w <= b and (sol.mode, None) in table.points())


def test_als_train_starts_with_both_corners_among_its_random_profiles():
    maxn, minn = HAND_SPACE.parse("6c/500/700/3000"), HAND_SPACE.parse("2c/100/100/1000")
    n0 = PAPER_SETTINGS["train"]["init"]
    # 13 W: only modes near the least-power one (12.8 W) fit; the oracle answers it, so ALS must
    assert Exhaustive().solve(TrainingProblem(13.0), HAND_SPACE, SaturatingWorkload(), store=None) is not None
    for seed in range(4):
        w = SaturatingWorkload()
        table = ALS(**TINY).explore(HAND_SPACE, w, kind="train", store=None, seed=seed)
        first = list(w.calls)[:n0]  # the initial sample is measured first
        assert ("train", maxn, None) in first and ("train", minn, None) in first and len(set(first)) == n0
        assert table.solve(TrainingProblem(13.0)) is not None
    # as published the initial sample is purely random (each corner is 1 of 315 modes: absent for this seed)
    w = SaturatingWorkload()
    ALS.as_published(**TINY).explore(HAND_SPACE, w, kind="train", store=None, seed=0)
    assert not {("train", maxn, None), ("train", minn, None)} & set(list(w.calls)[:n0])
    assert ALS(anchor_minn=False).anchor_minn is False and ALS.as_published().anchor_minn is False


def test_als_inference_quadrants_and_determinism():
    w = SaturatingWorkload(scale=0.5)
    als = ALS(init_profiles=10, per_round=2, rounds=2, **TINY)
    t1 = als.explore(SMALL_SPACE, w, kind="infer", batch_sizes=(1, 4, 16), latency_range_s=(0.05, 1.0),
                     arrival_range_rps=(30, 90), store=None, seed=7)
    info = als.last_info["rounds"]
    assert [r["quadrant"] for r in info] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert len(t1) <= 9 + 2 * 4 * 2  # 3 modes x 3 batch sizes, then <= 2 per quadrant visit
    t2 = ALS(init_profiles=10, per_round=2, rounds=2, **TINY).explore(
        SMALL_SPACE, SaturatingWorkload(scale=0.5), kind="infer", batch_sizes=(1, 4, 16),
        latency_range_s=(0.05, 1.0), arrival_range_rps=(30, 90), store=None, seed=7)
    assert t1.points() == t2.points()


def test_mlp_learns_and_overpredicts_rather_than_under():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, size=(120, 2))
    y = 10 + 5 * X[:, 0] + 3 * X[:, 1] ** 2
    net = MLP(2, 1, hidden=(32, 16), seed=0, batch_size=32)
    net.fit(X[:100], y[:100, None], epochs=300, val_frac=0.0)
    pred = net.predict(X[100:])[:, 0]
    assert mape(pred, y[100:]) < 5.0
    # the 4x penalty on under-prediction: more test points over-predicted than under
    assert np.mean(pred >= y[100:]) > 0.5


def test_mlp_is_deterministic():
    X = np.linspace(0, 1, 30)[:, None]
    Y = np.stack([1 + X[:, 0], 2 + X[:, 0] ** 2], 1)
    a, b = MLP(1, 2, (8,), seed=3), MLP(1, 2, (8,), seed=3)
    a.fit(X, Y, epochs=20)
    b.fit(X, Y, epochs=20)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))


def test_random_sampling_sizes_and_shared_sample_with_nn():
    spec = ExploreSpec("infer", (1, 4, 16))
    assert RandomSampling(150).budget_for(ExploreSpec("infer"), HAND_SPACE) == 150  # 30 modes x 5 sizes
    assert RandomSampling(12).budget_for(spec, HAND_SPACE) == 12
    rnd = RandomSampling(12).explore(HAND_SPACE, LinearWorkload(), kind="infer", batch_sizes=(1, 4, 16), store=None, seed=5)
    assert len(rnd) == 12 and len({m for m, _ in rnd.points()}) == 4
    nn = NeuralBaseline(12, **{k: v for k, v in TINY.items() if k != "finetune_epochs"}, verify=False)
    pred = nn.explore(HAND_SPACE, LinearWorkload(), kind="infer", batch_sizes=(1, 4, 16), store=None, seed=5)
    # NN-N trains on the same random sample as RND-N and predicts every point
    assert len(pred) == HAND_SPACE.size * 3 and set(pred.labels) == {"estimated"}
    assert pred.profiles_used == 12


def test_nn_verify_profiles_its_choice():
    nn = NeuralBaseline(12, epochs=40, hidden=(16, 8), verify=True, max_verify=3)
    r = nn.run(InferenceProblem(30.0, 0.5, 30.0, batch_sizes=(1, 4)), SMALL_SPACE, SaturatingWorkload(), store=None)
    assert 12 <= r.profiles_used <= 12 + 3
    if r.solution is not None:
        assert r.solution.label == "simulated"


def test_binary_search_halves_round_robin():
    """Fig. 6a: centre of every knob, then halve one knob per profile, in knob order."""
    r = BinarySearch().run(TrainingProblem(29.5), HAND_SPACE, LinearWorkload(), store=None)
    got = [str(p.mode) for p in r.visited]
    # each profile is the centre of the remaining box; its power halves the next knob in turn
    assert got[0] == "4c/300/400/2000"  # 23.4 W within: cores keep [4, 6] -> centre 6
    assert got[1] == "6c/300/400/2000"  # 25.4 W within: cpu keeps [300, 500] -> centre 400
    assert got[2] == "6c/400/400/2000"  # 26.2 W within: gpu keeps [400, 700] -> centre 600
    assert got[3] == "6c/400/600/2000"  # 28.2 W within: mem keeps [2000, 3000] -> centre 3000
    assert len(got) <= BinarySearch().budget(TrainingProblem(29.5), HAND_SPACE)
    assert r.solution.power_w <= 29.5


@pytest.mark.parametrize("kind", ["infer", "concurrent"])
def test_binary_search_tries_batch_sizes_in_order(kind):
    from lightning_edge.tuning import ConcurrentProblem

    cls = InferenceProblem if kind == "infer" else ConcurrentProblem
    prob = cls(30.0, 1.0, 30.0, batch_sizes=(1, 4, 16))
    r = BinarySearch().run(prob, SMALL_SPACE, SaturatingWorkload(0.5), store=None)
    first_bs = r.visited[0].batch_size
    assert first_bs == (1 if kind == "infer" else 16)
