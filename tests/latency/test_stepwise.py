"""Automatic generation of step-wise linear functions (Jantsch) from synthetic measurements."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from lightning_edge.latency.stepwise import Dim, Generation, StepFn, fit_step, generate, generate_1d


def slides_2d(k: int, d_in: int) -> float:
    """The slides' generated 2D model (Jantsch, '2D Example')."""
    return 0.1418 + math.floor((d_in - 1) / 8) * 0.0106 + math.floor((k - 1) / 32) * (
        0.044 + math.floor((d_in - 1) / 8) * 0.0121)


def test_fit_step_recovers_exact_parameters():
    x = [1, 40, 100, 1024]
    fn, res = fit_step(x, [0.216 + math.floor((v - 1) / 32) * 0.01286 for v in x], 32)
    assert (fn.a, fn.w, fn.h) == (pytest.approx(0.216), 32, pytest.approx(0.01286))
    assert res < 1e-12
    assert fit_step([1, 2, 3], [1.0, 1.0, 1.0], 32) is None  # one level: h cannot be told


def test_phase1_recovers_slides_1d_step_with_few_points():
    truth = StepFn(0.216, 32, 0.01286)                     # phase 1 of the slides' example
    seen = []

    def measure(k):
        seen.append(k)
        return [truth(k)]

    fit = generate_1d(Dim.range("k", 1, 1024), measure, tol=1e-6)
    fn = fit.fns[0]
    assert fn.w == 32 and fn.a == pytest.approx(0.216) and fn.h == pytest.approx(0.01286)
    assert fit.points == seen                              # the points it chose, in order
    assert fit.points[:2] == [1, 1024]                     # both ends first
    assert len(fit.points) <= 6                            # the slides: 5 points after 3 iterations


def test_slides_2d_example_is_recovered_exactly_with_the_points_reported():
    calls = []

    def measure(p):
        calls.append(p)
        return slides_2d(*p)

    g = generate([Dim.range("k", 1, 1024), Dim.range("d_in", 1, 256)], measure, tol=1e-6)
    # same function everywhere on the domain
    grid = [(k, d) for k in range(1, 1025, 13) for d in range(1, 257, 3)]
    assert max(abs(g(p) - slides_2d(*p)) for p in grid) < 1e-9
    # same structure as the slides: w = 32 along k (constant across d_in), steps of 8 along d_in for d and h
    k_fit, d_fit = g.phases
    assert k_fit.dim == "k" and k_fit.fns[0].w == 32
    a_fn, h_fn = d_fit.fns
    assert (a_fn.a, a_fn.w, a_fn.h) == (pytest.approx(0.1418), 8, pytest.approx(0.0106))
    assert (h_fn.a, h_fn.w, h_fn.h) == (pytest.approx(0.044), 8, pytest.approx(0.0121))
    assert "floor((k - 1) / 32)" in g.formula() and "floor((d_in - 1) / 8)" in g.formula()
    # every measured point is reported once, in order; far fewer than a full sweep (the slides needed 112)
    assert [p for p, _ in g.points] == list(dict.fromkeys(calls))
    assert len(calls) == len(set(calls)) == g.n_points
    assert g.n_points <= 20 and g.full_sweep_points == 1024 * 256


@pytest.mark.parametrize("truth,shape", [(StepFn(2e-3, 1, 3e-6), "linear"), (StepFn(5e-3, 1, 0.0), "constant"),
                                         (StepFn(1e-3, 8, 2e-4), "step")])
def test_linear_constant_and_step_shapes(truth, shape):
    fit = generate_1d(Dim.range("c", 1, 512), lambda x: [truth(x)], tol=1e-6)
    fn = fit.fns[0]
    assert fn.shape == shape
    xs = np.arange(1, 513)
    assert np.allclose(fn(xs), truth(xs), rtol=1e-9, atol=1e-15)


def test_noisy_multilinear_conv_like_surface_within_ten_percent():
    rng = np.random.default_rng(1)

    def t(p):
        f, c, P = p
        return 1e-5 + 2e-12 * f * c * P * 9

    dims = [Dim.range("f", 1, 512), Dim.range("c", 1, 512), Dim("P", tuple(s * s for s in range(1, 33)), 256, (1,))]
    g = generate(dims, lambda p: t(p) * (1 + 0.02 * rng.standard_normal()), tol=0.05, max_points=8, min_points=4)
    for p in [(64, 64, 256), (512, 512, 4), (16, 3, 1024), (256, 256, 16), (128, 96, 64)]:
        assert g(p) == pytest.approx(t(p), rel=0.10)
    assert g.n_points / g.full_sweep_points < 0.05


def test_generation_round_trips_through_dict():
    g = generate([Dim.range("k", 1, 1024), Dim.range("d_in", 1, 256)], lambda p: slides_2d(*p), tol=1e-6)
    back = Generation.from_dict(g.to_dict())
    assert back.formula() == g.formula() and back.points == g.points and back.n_points == g.n_points
    assert all(back(p) == g(p) for p in [(1, 1), (33, 9), (1024, 256)])


def test_max_points_and_deadline_bound_the_measurements():
    fit = generate_1d(Dim.range("x", 1, 4096), lambda x: [1.0 + (x % 7) * 0.1], tol=1e-9, max_points=5)
    assert len(fit.points) == 5                            # nothing fits: stops at max_points
    fit = generate_1d(Dim.range("x", 1, 4096), lambda x: [1.0 + (x % 7) * 0.1], tol=1e-9, max_points=50,
                      deadline=time.monotonic() - 1)
    assert len(fit.points) == 3                            # past the deadline: the ends and one more


def test_bad_dimensions_and_measurements_are_refused():
    with pytest.raises(ValueError, match="values must be integers >= 1"):
        Dim("x", (0, 1, 2))
    with pytest.raises(ValueError, match="reference 5 is not one of its values"):
        Dim("x", (1, 2, 3), ref=5)
    with pytest.raises(ValueError, match="not a finite number"):
        generate([Dim.range("x", 1, 8)], lambda p: float("nan"))


def test_an_anchored_function_follows_the_points_its_generation_measured_where_the_tree_cannot():
    """A cost that bends along a dimension (the time per weight rises fourfold as the weights outgrow a cache, as a
    linear layer's on one row did from 8 to 32 MB) is a straight line between the dimension's ends in the tree: the
    points phase 1 measured inside it only chose the width. Anchored on those points the function follows them
    (left out one at a time: predicted from the others), and far from every measured point it is the tree."""
    import dataclasses

    def t(p):
        n = p[0] * p[1]
        return 1e-5 + 1e-10 * n * (1 + 3 / (1 + math.exp(-(n - 3e6) / 1e6)))

    dims = [Dim.range("f", 8, 4096, 1024), Dim.range("c", 8, 4096, 1024)]
    g = generate(dims, t, tol=0.02, max_points=8)
    inner = [(p, y) for p, y in g.points if p[1] == 1024 and 8 < p[0] < 4096]
    assert len(inner) >= 3
    tree_err, anch_err = [], []
    for p, y in inner:
        others = dataclasses.replace(g, points=[q for q in g.points if q[0] != p])
        tree_err.append(abs(g(p) / y - 1))
        anch_err.append(abs(others.anchored(p) / y - 1))
    assert max(tree_err) > 0.5                                   # the tree's line misses the bend
    assert sum(anch_err) < 0.5 * sum(tree_err), (anch_err, tree_err)
    # at a measured point the anchored value is near the measurement; the tree is untouched
    assert all(abs(g.anchored(p) / y - 1) < 0.5 * abs(g(p) / y - 1) + 0.02 for p, y in inner)
    far = (1 << 20, 1 << 20)                                     # 8 octaves beyond the box in each dimension
    assert g.anchored(far) == pytest.approx(g(far), rel=1e-9)
    assert g.anchored(far, log2=0.0) == g(far) and g.anchored((2048, 1024), prior=1e9) == pytest.approx(g((2048, 1024)))
    # a tree that is not positive at a point is returned as it is (a ratio cannot correct it)
    neg = dataclasses.replace(g, tree=-1.0)
    assert neg.anchored((64, 64)) == -1.0
    # recomputed for a generation read back from its dict
    back = Generation.from_dict(g.to_dict())
    assert back.anchored((2048, 1024)) == pytest.approx(g.anchored((2048, 1024)))


def test_anchoring_survives_extreme_points_and_follows_a_changed_tree():
    """A file's points and trees are numbers from 1e-300 to 1e6 seconds: a ratio of nearly nothing (or of
    thousands, on a tree nearly zero) counts at most ``ANCHOR_MAX_RATIO`` either way and never raises; the weights
    all vanishing far from every point leave the tree; a point of another length is skipped; and the anchors
    follow the tree and points a generation holds now, not those it had when first asked."""
    from lightning_edge.latency.stepwise import ANCHOR_MAX_RATIO

    dims = [Dim.range("n", 1, 1024, 64)]
    tiny = Generation(dims, 2.0, [((1,), 5e-324), ((1024,), 1e6), ((8, 8), 1.0)], [], 0.0)
    for x in (1, 2, 1024, 1 << 40):
        v = tiny.anchored((x,), 0.05, 1e-6)
        assert math.isfinite(v) and 2.0 / ANCHOR_MAX_RATIO <= v <= 2.0 * ANCHOR_MAX_RATIO, (x, v)
    assert tiny.anchored((1 << 40,), 0.05, 1e-300) == 2.0          # every weight underflows to 0
    near_zero = Generation(dims, 1e-320, [((4,), 1e6)], [], 0.0)
    assert math.isfinite(near_zero.anchored((4,))) and near_zero.anchored((4,)) <= 1e-320 * ANCHOR_MAX_RATIO
    g = Generation(dims, 2.0, [((64,), 4.0)], [], 0.0)
    first = g.anchored((64,))
    assert first > 2.0
    g.tree = 8.0                                                  # a tree measured again: ratio 4 / 8 now
    assert g.anchored((64,)) < 8.0                                # a stale cache would give 8 x 2^(1/1.3)
    g.points = [((64,), 8.0)]
    assert g.anchored((64,)) == pytest.approx(8.0)
