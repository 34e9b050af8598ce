"""Latency statistics and the inference serving loop (twin: simulated time; CPU: wall clock)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lightning_edge.serving import ConstantArrivals, InferenceRunner, Plan, PoissonArrivals, TraceArrivals
from lightning_edge.serving.engine import RequestQueue, plan_from_times
from lightning_edge.serving.stats import summarize_latencies
from lightning_edge.tuning import InferenceProblem

from .conftest import tiny_net


def test_summarize_latencies():
    lat = np.arange(1, 101) / 1000.0  # 1..100 ms
    s = summarize_latencies(lat, 0.095)
    assert s.n_requests == 100
    assert s.p50_s == pytest.approx(0.0505)
    assert s.p99_s == pytest.approx(0.09901)
    assert s.max_s == 0.1
    assert s.deadline_misses == 5 and s.within_budget == pytest.approx(0.95)
    assert summarize_latencies([], 0.1).within_budget == 1.0
    with pytest.raises(ValueError, match="budget_s"):
        summarize_latencies(lat, 0)
    with pytest.raises(ValueError, match="finite"):
        summarize_latencies([0.1, float("nan")], 0.2)


def test_request_queue_is_fifo_and_open_loop():
    q = RequestQueue(ConstantArrivals(10.0), stop_s=1.0)
    assert q.admit(0.25).tolist() == [0.0, 0.1, 0.2]
    assert q.next_arrival_s() == pytest.approx(0.3)
    idx = q.take(2)
    q.complete(idx, 0.5)
    np.testing.assert_allclose(q.latencies_s(), [0.5, 0.4])
    q.admit(5.0)
    assert q.pending == 8 and math.isinf(q.next_arrival_s())


def test_runner_on_the_twin_meets_the_budget_at_a_constant_rate():
    problem = InferenceProblem(power_budget_w=30, latency_budget_s=0.1, arrival_rps=200)
    runner = InferenceRunner("resnet18", problem, tuner="gmd", retune=False)
    rep = runner.run(30.0)
    assert rep.label == "simulated" and rep.latency.label == "simulated"
    assert rep.latency.n_requests == 6000
    assert rep.latency.deadline_misses == 0
    plan = Plan.from_solution(runner.retuner.solve(problem)[0])
    assert plan.batch_size > 1  # 200 requests/s at 30 W: bs 1 cannot keep up
    # the peak latency is the formula's (bs - 1) / alpha + t_in, within the twin's time noise
    assert rep.latency.max_s == pytest.approx(plan.latency_s, rel=0.05)
    assert rep.minibatches == pytest.approx(6000 / plan.batch_size, abs=2)
    assert rep.energy_j == pytest.approx(rep.mean_power_w * rep.duration_s)
    assert 5 < rep.mean_power_w <= 30 * 1.05


def test_runner_retunes_to_a_larger_batch_when_the_rate_rises():
    problem = InferenceProblem(power_budget_w=30, latency_budget_s=0.1, arrival_rps=30)
    arrivals = TraceArrivals([(0.0, 30.0), (40.0, 200.0)], end_s=100.0)
    rep = InferenceRunner("resnet18", problem, arrivals=arrivals, tuner="dynamic", rate_window_s=5.0,
                          report_window_s=10.0).run()
    first, *later = rep.retunes
    assert first.reason == "initial" and first.batch_size == 1
    bigger = [e for e in later if e.plan is not None and e.batch_size > 1]
    assert bigger, f"no re-tune to a larger batch: {rep.retunes}"
    assert 40.0 < bigger[0].t_s < 50.0  # within about one estimation window of the change
    assert bigger[0].arrival_rps == pytest.approx(200, rel=0.1)
    # DynamicGMD reuses the profiles: the whole run profiles fewer points than two GMD11 runs
    assert rep.profiles <= 22
    late = [w for w in rep.windows if w["start_s"] >= 60.0]
    assert late and all(w["deadline_misses"] == 0 for w in late)
    assert rep.latency.within_budget > 0.9


def test_runner_without_retune_falls_behind_when_the_rate_rises():
    """The same trace with the first plan kept: bs 1 cannot keep up with 200 requests/s, latencies blow up."""
    problem = InferenceProblem(power_budget_w=30, latency_budget_s=0.1, arrival_rps=30)
    arrivals = TraceArrivals([(0.0, 30.0), (40.0, 200.0)], end_s=100.0)
    rep = InferenceRunner("resnet18", problem, arrivals=arrivals, tuner="dynamic", retune=False).run()
    assert rep.latency.within_budget < 0.7


def test_runner_on_the_twin_runs_the_real_model_for_real_predictions():
    net = tiny_net()
    problem = InferenceProblem(power_budget_w=30, latency_budget_s=0.05, arrival_rps=50)
    rep = InferenceRunner(net, problem, example_input=torch.randn(3, 16, 16), tuner="gmd", retune=False,
                          keep_outputs=1).run(2.0)
    assert rep.label == "simulated"
    assert rep.latency.n_requests == 100 and rep.latency.deadline_misses == 0
    out = rep.outputs
    assert isinstance(out, torch.Tensor) and out.shape[1] == 10 and torch.isfinite(out).all()


def test_deadline_guard_serves_partial_batches_when_the_rate_is_low():
    """A fixed plan of bs 16 at 10 requests/s would wait 1.5 s for a batch: the guard serves earlier."""
    from lightning_edge.catalog import ORIN_AGX_MAXN
    from lightning_edge.twin.sim_workload import SimWorkload

    problem = InferenceProblem(power_budget_w=30, latency_budget_s=0.2, arrival_rps=10)
    t16 = SimWorkload("resnet18", noise=False).infer(ORIN_AGX_MAXN, 16).time_s  # the twin's default mode
    plan = Plan(None, 16, infer_time_s=t16, label="simulated")
    rep = InferenceRunner("resnet18", problem, tuner=plan, arrivals=PoissonArrivals(10, seed=1)).run(20.0)
    assert rep.partial_minibatches > 0
    assert rep.latency.deadline_misses == 0
    assert rep.latency.max_s <= 0.2


def test_runner_on_this_cpu_measures_on_the_wall_clock():
    net = tiny_net()
    x = torch.randn(3, 16, 16)
    problem = InferenceProblem(power_budget_w=1000, latency_budget_s=0.25, arrival_rps=40)
    with pytest.raises(ValueError, match="workload="):
        InferenceRunner(net, problem, device="cpu", example_input=x, tuner="gmd")
    plan = plan_from_times(problem, {1: 0.002, 4: 0.003})
    assert plan is not None and plan.batch_size == 1  # least latency
    rep = InferenceRunner(net, problem, device="cpu", example_input=x, tuner=plan).run(1.0)
    assert rep.label == "measured"
    assert rep.latency.n_requests == 40
    assert rep.duration_s >= 0.97  # wall time passed
    assert rep.latency.p50_s < 0.25
    assert math.isnan(rep.energy_j)  # no power sensor here: no invented energy


def test_runner_input_errors():
    problem = InferenceProblem(power_budget_w=30, latency_budget_s=0.1, arrival_rps=10)
    with pytest.raises(TypeError, match="InferenceProblem"):
        InferenceRunner("resnet18", object())
    with pytest.raises(ValueError, match="tuner"):
        InferenceRunner("resnet18", problem, tuner="magic")
    with pytest.raises(ValueError, match="example input"):
        InferenceRunner(tiny_net(), problem)
    with pytest.raises(ValueError, match="duration_s"):
        InferenceRunner("resnet18", problem, tuner=Plan(None, 1, infer_time_s=0.01)).run()
    impossible = InferenceProblem(power_budget_w=5, latency_budget_s=0.001, arrival_rps=500)
    with pytest.raises(RuntimeError, match="no feasible plan"):
        InferenceRunner("resnet18", impossible, tuner="gmd").run(1.0)


def test_the_report_prints_as_a_readable_table():
    """Issue 28: ``print(runner.run())`` printed the raw dataclass dump."""
    problem = InferenceProblem(power_budget_w=30, latency_budget_s=0.1, arrival_rps=30)
    rep = InferenceRunner("resnet18", problem, arrivals=TraceArrivals([(0.0, 30.0)], end_s=20.0)).run()
    text = str(rep)
    assert "ServingReport(" not in text and "LatencySummary(" not in text
    lines = text.splitlines()
    assert lines[0].startswith("served") and any(ln.startswith("latency") and "p95" in ln for ln in lines)
    assert "simulated" in lines[0] and "W mean" in text
