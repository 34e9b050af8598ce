"""GMD walked step by step (Algorithm 1 and the variants of sections 5.1.3 and 5.1.4).

The hand-made space has cores (2, 4, 6), CPU (100..500 step 100), GPU (100..700 step 100) and memory
(1000, 2000, 3000) MHz; the midpoint is 4c/300/400/2000. In :class:`LinearWorkload` time falls and
power rises linearly along every knob, so the slope ratios are constants:

    knob    time/unit   power/unit   rho = time saved per watt
    cores   0.01        1.0          0.01
    cpu     0.00015     0.008        0.01875
    gpu     0.0005      0.01         0.05      <- largest
    mem     0.0001      0.004        0.025

    power = 5 + cores + 0.008 cpu + 0.01 gpu + 0.004 mem ; at the midpoint 5 + 4 + 2.4 + 4 + 8 = 23.4 W
"""

from __future__ import annotations

import math

import pytest

from lightning_edge._compat import removesuffix
from lightning_edge.modes import PowerModeSpace
from lightning_edge.tuning import (
    GMD,
    ConcurrentProblem,
    InferenceProblem,
    Measurement,
    TrainingProblem,
)
from lightning_edge.tuning.gmd import slope_ratio
from lightning_edge.tuning.search import Grid

from .workloads import HAND_SPACE, LinearWorkload, SaturatingWorkload


def labels(result):
    return [str(p.mode) + ("" if p.batch_size is None else f"@{p.batch_size}") for p in result.visited]


def test_slope_ratio_and_threshold():
    # GPU 400 -> 700 MHz: time 0.515 -> 0.365 s, power 23.4 -> 26.4 W: 0.15 s / 3 W = 0.05 s/W
    assert slope_ratio(0.515, 23.4, 0.365, 26.4, 0.5) == pytest.approx(0.05)
    # a negligible power change (0.01 W) counts as the 0.5 W threshold, not as a huge ratio
    assert slope_ratio(0.50, 20.0, 0.49, 20.01, 0.5) == pytest.approx(0.02)
    # a knob that does not cut time has ratio 0 (ResNet's cores in the paper)
    assert slope_ratio(0.5, 20.0, 0.5, 22.0, 0.5) == 0.0


def test_walk_training_midpoint_within_budget():
    """Power budget 29.5 W: the midpoint (23.4 W) is within, so GMD probes the highest values."""
    gmd = GMD()
    r = gmd.run(TrainingProblem(29.5), HAND_SPACE, LinearWorkload(), store=None)
    assert labels(r) == [
        "4c/300/400/2000",  # L7-8: mid, 23.4 W <= 29.5 -> probe highs (L15-20)
        "6c/300/400/2000",  # L23: cores high, 25.4 W   rho = 0.02 s / 2 W = 0.01
        "4c/500/400/2000",  # L23: cpu high, 25.0 W     rho = 0.03 s / 1.6 W = 0.01875
        "4c/300/700/2000",  # L23: gpu high, 26.4 W     rho = 0.15 s / 3 W = 0.05  (largest, L27)
        "4c/300/400/3000",  # L23: mem high, 27.4 W     rho = 0.1 s / 4 W = 0.025
        # L28: prune GPU values below the midpoint. The GPU line already holds 700 MHz within budget,
        # so the base moves there without a profile. Next largest rho with values left: memory.
        "4c/300/700/3000",  # mem 3000 at the new base: 30.4 W > 29.5, prune mem >= 3000
        "4c/500/700/2000",  # next: cpu (0.01875); values {400, 500}, upper middle 500: 28.0 W, within
        "6c/500/700/2000",  # last: cores (0.01); 6 cores: 30.0 W > 29.5. Nothing left: 8 profiles.
    ]
    assert r.solution.mode == HAND_SPACE.parse("4c/500/700/2000")
    assert r.solution.power_w == pytest.approx(28.0)
    assert r.solution.time_s == pytest.approx(0.335)
    assert r.profiles_used == 8 and r.new_profiles == 8
    kinds = [t[0] for t in gmd.last_trace]
    assert kinds == ["mid", "extreme", "extreme", "extreme", "extreme", "prune", "move", "step", "step", "step"]
    assert gmd.last_trace[5] == ("prune", 2, "low")  # L27-28: GPU, the largest ratio


def test_walk_training_midpoint_over_budget():
    """Power budget 19.9 W: the midpoint is over, so GMD probes the lowest values and descends."""
    gmd = GMD()
    r = gmd.run(TrainingProblem(19.9), HAND_SPACE, LinearWorkload(), store=None)
    assert labels(r) == [
        "4c/300/400/2000",  # mid 23.4 W > 19.9 -> probe lows (L9-14)
        "2c/300/400/2000",  # 21.4 W (over)
        "4c/100/400/2000",  # 21.8 W (over)
        "4c/300/100/2000",  # 20.4 W (over)    rho 0.05: GPU is searched first, its high half pruned
        "4c/300/400/1000",  # 19.4 W (within)  a candidate already
        # The GPU line {100: over, 400: over} has nothing within budget: the base descends to GPU 100 MHz
        # (no profile). Next knob by rho with values left: memory, below 2000 -> 1000.
        "4c/300/100/1000",  # 16.4 W, within. On the GPU line through it, 400 MHz (the memory-low extreme)
        # is known within budget: the base moves up to 4c/300/400/1000 (19.4 W) without a profile.
        "4c/500/400/1000",  # cpu (next rho), values {400, 500}: 500 -> 21.0 W over
        "4c/400/400/1000",  # then 400 -> 20.2 W over: the CPU line is exhausted
        "6c/300/400/1000",  # cores: 21.4 W over. Nothing left: 9 profiles (budget 10)
    ]
    assert r.solution.mode == HAND_SPACE.parse("4c/300/400/1000")  # the best candidate is an extreme
    assert r.solution.power_w == pytest.approx(19.4)
    assert gmd.last_trace[5] == ("prune", 2, "high")


def test_finish_line_pins_the_crossing_before_switching_knobs():
    """SaturatingWorkload, 22 W. Both variants descend the same way until GPU 200 MHz at 4c/100/*/2000 (19.0 W,
    within); the GPU line then holds 200 within and 400 over (the CPU-low extreme, 23.0 W), with 300 unprofiled.
    Algorithm 1 re-picks the knob by slope ratio (CPU); ``finish_line`` profiles GPU 300 first."""
    w = SaturatingWorkload()
    common = ["4c/300/400/2000", "2c/300/400/2000", "4c/100/400/2000", "4c/300/100/2000", "4c/300/400/1000",
              "4c/100/200/2000"]
    ours = GMD().run(TrainingProblem(22.0), HAND_SPACE, w, store=None)
    pub = GMD.as_published().run(TrainingProblem(22.0), HAND_SPACE, w, store=None)
    assert labels(ours)[:6] == labels(pub)[:6] == common
    assert labels(ours)[6] == "4c/100/300/2000"  # the GPU gap first: 21.0 W, within
    assert labels(pub)[6] == "4c/200/200/2000"  # Algorithm 1: CPU, the largest ratio now
    assert ours.profiles_used == pub.profiles_used == 10
    assert ours.solution.mode == HAND_SPACE.parse("4c/200/300/2000") and ours.solution.time_s == pytest.approx(0.13)
    assert pub.solution.mode == HAND_SPACE.parse("6c/200/200/2000") and pub.solution.time_s == pytest.approx(0.145)
    assert GMD.as_published().inference_bound is False and GMD().finish_line is True


def test_budget_cuts_the_walk_short():
    full = GMD().run(TrainingProblem(29.5), HAND_SPACE, LinearWorkload(), store=None)
    short = GMD(max_profiles=6).run(TrainingProblem(29.5), HAND_SPACE, LinearWorkload(), store=None)
    assert short.visited == full.visited[:6]
    assert short.profiles_used == 6


def test_no_mode_within_budget_returns_none():
    r = GMD().run(TrainingProblem(5.0), HAND_SPACE, LinearWorkload(), store=None)
    assert r.solution is None
    assert r.profiles_used <= 10
    # it kept descending: the last profiled modes are lower-power than the midpoint
    assert LinearWorkload.power_w(r.visited[-1].mode) < LinearWorkload.power_w(r.visited[0].mode)


def test_generous_budget_reaches_maxn():
    r = GMD().run(TrainingProblem(100.0), HAND_SPACE, LinearWorkload(), store=None)
    assert r.solution.mode == HAND_SPACE.max_mode()


def test_inference_bounds_searches_bs1_and_backtracks_to_a_larger_batch():
    """100 requests/s: a bs-1 minibatch must take <= 10 ms, which needs more than 25 W here.

    GMD first checks that MAXN, the fastest mode, keeps up at bs 1 (9.5 ms: the bound of 5.1.4), then
    searches at bs 1 (A in Fig. 15b) keeping one profile for backtracking, finds modes within 25 W that
    are too slow for the arrivals, and tries the fastest of them at bs 4 (B, C), which keeps up."""
    w = LinearWorkload()
    prob = InferenceProblem(power_budget_w=25.0, latency_budget_s=0.1, arrival_rps=100.0, batch_sizes=(1, 4, 16))
    gmd = GMD()
    r = gmd.run(prob, HAND_SPACE, w, store=None)
    assert (r.visited[0].mode, r.visited[0].batch_size) == (HAND_SPACE.max_mode(), 1)
    assert [t for t in gmd.last_trace if t[0] == "bound"] == [("bound", 1, "kept")]
    bs1 = [p for p in r.visited if p.batch_size == 1]
    rest = [p for p in r.visited if p.batch_size != 1]
    assert len(bs1) <= 10 and len(r.visited) <= 11
    assert rest and rest[0].batch_size == 4
    # the first backtracking candidate: the lowest latency within power (near-ties: lowest power first)
    cands = [(w.infer(p.mode, 1).time_s, w.infer(p.mode, 1).power_w, p) for p in bs1
             if w.infer(p.mode, 1).power_w <= 25.0 and w.infer(p.mode, 1).time_s > 1 / 100]
    best = min(c[0] for c in cands)
    first = min((c for c in cands if c[0] <= best * 1.02), key=lambda c: c[1])
    assert rest[0].mode == first[2].mode
    sol = r.solution
    assert sol is not None and sol.batch_size == 4
    assert sol.latency_s == pytest.approx(3 / 100 + sol.time_s)
    assert sol.latency_s <= 0.1 and sol.power_w <= 25.0 and sol.time_s <= 4 / 100
    assert any(t[0] == "backtrack" for t in gmd.last_trace)


def test_inference_bound_skips_sizes_maxn_cannot_serve():
    # 300 requests/s: bs 1 needs <= 3.3 ms, more than MAXN can do here; bs 4 (13.3 ms cycle) is kept
    gmd = GMD()
    prob = InferenceProblem(power_budget_w=40.0, latency_budget_s=0.1, arrival_rps=300.0, batch_sizes=(1, 4, 16))
    r = gmd.run(prob, HAND_SPACE, LinearWorkload(), store=None)
    assert [t for t in gmd.last_trace if t[0] == "bound"] == [("bound", 1, "dropped"), ("bound", 4, "kept")]
    assert {p.batch_size for p in r.visited[2:]} <= {4, 16}
    assert GMD(inference_bound=False).run(prob, HAND_SPACE, LinearWorkload(), store=None).visited[0].batch_size == 1


def test_inference_solution_at_bs1_needs_no_backtracking():
    prob = InferenceProblem(power_budget_w=40.0, latency_budget_s=0.1, arrival_rps=30.0, batch_sizes=(1, 4, 16))
    r = GMD().run(prob, HAND_SPACE, LinearWorkload(), store=None)
    assert {p.batch_size for p in r.visited} == {1}
    assert r.solution.batch_size == 1 and len(r.visited) <= 10


def test_concurrent_branch_and_bound_then_search():
    """100 requests/s, latency <= 0.33 s. bs 64 queues 0.63 s: dropped without profiling.
    bs 32 queues 0.31 s, + 36 ms at MAXN = 0.346 s > 0.33: dropped after profiling MAXN (E in Fig. 15c).
    bs 16: 0.15 s + 22 ms at MAXN: kept; the search runs at bs 16 (training minibatches of 20-80 ms)."""
    prob = ConcurrentProblem(power_budget_w=30.0, latency_budget_s=0.33, arrival_rps=100.0, batch_sizes=(1, 4, 16, 32, 64))
    gmd = GMD()
    r = gmd.run(prob, HAND_SPACE, LinearWorkload(train_scale=0.1), store=None)
    bounds = [t for t in gmd.last_trace if t[0] == "bound"]
    assert bounds == [("bound", 64, "queueing"), ("bound", 32, "dropped"), ("bound", 16, "kept")]
    maxn = HAND_SPACE.max_mode()
    assert (r.visited[0].mode, r.visited[0].batch_size) == (maxn, 32)
    assert (r.visited[1].mode, r.visited[1].batch_size) == (maxn, 16)
    assert (r.visited[2].mode, r.visited[2].batch_size) == (HAND_SPACE.midpoint(), 16)
    assert len(r.visited) <= 15
    sol = r.solution
    assert sol is not None and sol.batch_size == 16 and sol.power_w <= 30.0
    assert sol.train_minibatches >= 1 and sol.latency_s <= 0.33
    assert sol.throughput == pytest.approx(sol.train_minibatches * 100.0 / 16)


class _TwoSlopes:
    """Training time depends mostly on CPU, inference time mostly on GPU; ``dominant`` picks whose power is higher."""

    def __init__(self, dominant: str) -> None:
        self.extra = {"train": 5.0, "infer": 0.0} if dominant == "train" else {"train": 0.0, "infer": 5.0}

    @staticmethod
    def _p(m):
        return 5 + m.cores + 0.008 * m.cpu_mhz + 0.01 * m.gpu_mhz + 0.004 * m.mem_mhz

    def train(self, m):
        return Measurement(1.0 - 0.0015 * m.cpu_mhz - 0.0001 * m.gpu_mhz, self._p(m) + self.extra["train"])

    def infer(self, m, bs):
        return Measurement((0.5 - 0.0005 * m.gpu_mhz - 0.00001 * m.cpu_mhz) * bs / 16, self._p(m) + self.extra["infer"])


@pytest.mark.parametrize("dominant, first_knob", [("infer", 2), ("train", 1)])
def test_concurrent_uses_the_dominant_workloads_slopes(dominant, first_knob):
    # whichever workload draws more power decides which knob's ratio leads the search (section 5.1.4)
    prob = ConcurrentProblem(power_budget_w=60.0, latency_budget_s=5.0, arrival_rps=10.0, batch_sizes=(16,))
    gmd = GMD()
    gmd.run(prob, HAND_SPACE, _TwoSlopes(dominant), store=None)
    prune = [t for t in gmd.last_trace if t[0] == "prune"]
    assert prune and prune[0][1] == first_knob


def test_single_valued_knobs_are_skipped():
    space = PowerModeSpace(cores=(4,), cpu_mhz=(1000,), gpu_mhz=(100, 200, 300, 400, 500), mem_mhz=(2000,))
    r = GMD().run(TrainingProblem(29.5), space, LinearWorkload(), store=None)
    # only the GPU knob varies (power 5 + 4 + 8 + 0.01 gpu + 8): mid 300 (28 W, within), high 500 (30 W, over),
    # then the only value left between them, 400 (29 W, within): the answer
    assert [p.mode.gpu_mhz for p in r.visited] == [300, 500, 400]
    assert r.solution.mode.gpu_mhz == 400


def test_gmd_on_saturating_workload_is_close_to_the_oracle():
    from lightning_edge.tuning import Exhaustive

    w = SaturatingWorkload()
    oracle = Exhaustive().explore(HAND_SPACE, w, kind="train", store=None)
    excess = []
    for budget in range(12, 40, 2):
        prob = TrainingProblem(float(budget))
        best = oracle.solve(prob)
        sol = GMD().solve(prob, HAND_SPACE, w, store=None)
        if best is None:
            continue
        assert sol is not None and sol.power_w <= budget
        excess.append(sol.time_s / best.time_s - 1)
    excess.sort()
    assert excess[len(excess) // 2] < 0.15  # median excess time below 15 %
    assert not any(math.isnan(e) for e in excess)


def test_dynamic_gmd_profiles_again_only_when_the_rate_needs_it():
    from lightning_edge.tuning.gmd import DynamicGMD

    w = LinearWorkload()
    dyn = DynamicGMD(HAND_SPACE, w)
    bss = (1, 4, 16)
    first = dyn.step(InferenceProblem(25.0, 0.1, 30.0, bss))
    assert first.solution is not None and first.new_profiles > 0
    n = sum(w.calls.values())
    same = dyn.step(InferenceProblem(25.0, 0.1, 35.0, bss))  # still met by a profiled point
    assert same.extra["reused"] and same.new_profiles == 0 and sum(w.calls.values()) == n
    faster = dyn.step(InferenceProblem(25.0, 0.1, 100.0, bss))  # bs 1 cannot keep up any more
    assert not faster.extra["reused"] and faster.new_profiles >= 1
    assert faster.solution is not None and faster.solution.batch_size > 1
    assert all(c == 1 for c in w.calls.values())  # nothing measured twice across the windows


def test_backtracking_skips_sizes_that_cannot_work():
    """With t(bs) >= t(1), a size whose queueing plus t(1) already misses the latency budget, or whose
    cycle bs/alpha is shorter than t(1), is never profiled."""
    w = LinearWorkload()
    prob = InferenceProblem(power_budget_w=25.0, latency_budget_s=0.1, arrival_rps=100.0, batch_sizes=(1, 4, 16, 64))
    r = GMD().run(prob, HAND_SPACE, w, store=None)
    assert all(p.batch_size in (1, 4) for p in r.visited)  # 16 queues 0.15 s > 0.1 s: never tried


def test_descend_min_rho_lowers_the_cheapest_knob_first():
    """Option ``descend_min_rho``: over budget, the knob lowered first is the one with the smallest ratio
    (cores, 0.01: the least time lost per watt saved), not GPU (0.05) as in Algorithm 1's argmax."""
    published = GMD()
    published.run(TrainingProblem(19.9), HAND_SPACE, LinearWorkload(), store=None)
    assert published.last_trace[5] == ("prune", 2, "high")
    gmd = GMD(descend_min_rho=True)
    r = gmd.run(TrainingProblem(19.9), HAND_SPACE, LinearWorkload(), store=None)
    assert gmd.last_trace[5] == ("prune", 0, "high")
    assert r.profiles_used <= 10 and r.solution is not None and r.solution.power_w <= 19.9
    # within budget (ascending) it is Algorithm 1 unchanged: the same walk as the default
    a, b = GMD(), GMD(descend_min_rho=True)
    ra = a.run(TrainingProblem(29.5), HAND_SPACE, LinearWorkload(), store=None)
    rb = b.run(TrainingProblem(29.5), HAND_SPACE, LinearWorkload(), store=None)
    assert labels(ra)[:6] == labels(rb)[:6] and a.last_trace[5] == b.last_trace[5] == ("prune", 2, "low")


class _TightCycle:
    """A concurrent pair whose cycle is tight: inference time hangs on the memory clock, training time on the GPU.

    Power is :class:`LinearWorkload`'s (inference 1 W less), so training is the dominant workload and GPU has
    the largest slope ratio. At 80 requests/s and bs 16 the cycle is 0.2 s; ``t_tr + t_in`` must fit in it."""

    @staticmethod
    def train(m):
        return Measurement(0.01 + 10.0 / m.gpu_mhz + 1.0 / m.cpu_mhz + 50.0 / m.mem_mhz, LinearWorkload.power_w(m))

    @staticmethod
    def infer(m, bs):
        return Measurement((0.001 + 0.1 / m.gpu_mhz + 12.5 / m.mem_mhz) * bs, LinearWorkload.power_w(m) - 1.0)


def test_stall_aware_leaves_modes_too_slow_for_the_cycle():
    """20 W, 80 requests/s, bs 16 (cycle 0.2 s). Both variants profile MAXN, the midpoint 4c/300/400/2000
    (23.4 W, over; t_tr + t_in = 0.183 s), the four low extremes, then GPU 100 and memory 1000 on that line:
    4c/300/100/1000 (16.4 W, within, 0.395 s), and move the base up GPU to 4c/300/400/1000 (19.4 W, within,
    0.308 s: stalled, no training minibatch fits in the cycle, nor at any lower memory clock).

    Algorithm 1 raises the knob with the largest ratio from there (CPU 500, 400, then 6 cores), all over
    20 W and no faster: nothing feasible, and nothing to backtrack to with one batch size.
    ``stall_aware`` compares the memory line's two ends: 1000 misses the cycle by 54 %, 2000 misses the
    power by 17 %, so the search goes on from 4c/300/400/2000 and lowers the knob that costs the cycle the
    least time per watt (cores, no time at all), then CPU: 2c/100/400/2000, 19.8 W, 0.190 s, one training
    minibatch per cycle."""
    prob = ConcurrentProblem(power_budget_w=20.0, latency_budget_s=2.0, arrival_rps=80.0, batch_sizes=(16,))
    common = ["6c/500/700/3000", "4c/300/400/2000", "2c/300/400/2000", "4c/100/400/2000", "4c/300/100/2000",
              "4c/300/400/1000", "4c/300/100/1000"]
    ours, pub = GMD(), GMD.as_published()
    ro = ours.run(prob, HAND_SPACE, _TightCycle(), store=None)
    rp = pub.run(prob, HAND_SPACE, _TightCycle(), store=None)
    lo, lp = ([removesuffix(x, "@16") for x in labels(r)] for r in (ro, rp))
    assert lo[:7] == lp[:7] == common
    assert lp[7:] == ["4c/500/400/1000", "4c/400/400/1000", "6c/300/400/1000"]
    assert rp.solution is None
    assert lo[7:9] == ["2c/200/400/2000", "2c/100/400/2000"]
    grid = Grid.of(HAND_SPACE)
    assert ("move", 3, grid.index(HAND_SPACE.parse("4c/300/400/2000"))) in ours.last_trace  # over, not stalled
    assert ("move", 0, grid.index(HAND_SPACE.parse("2c/300/400/2000"))) in ours.last_trace  # cores: free
    sol = ro.solution
    assert sol.mode == HAND_SPACE.parse("2c/100/400/2000") and sol.power_w == pytest.approx(19.8)
    assert sol.train_minibatches == 1 and ro.profiles_used <= 15
    assert GMD().stall_aware is True and GMD(stall_aware=False).run(prob, HAND_SPACE, _TightCycle(), store=None).solution is None
