"""``OrinTwin.predict`` of a user's own training cost takes the optimizer, and says what it assumed when not told
(issue 37: it silently modelled PyTorch 1.12's SGD loop, 29.8 ms for a step the profiler, modelling the run's AdamW,
put at 14.6 ms)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from lightning_edge import analyze
from lightning_edge.twin.model import OrinTwin
from lightning_edge.twin.workload import FULCRUM_OPTIMIZER, OptimizerRun, optimizer_run

MODE = "4c/1036.8/522.75/2133"


def _cost():
    m = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    return m, analyze(m, torch.randn(16, 3, 32, 32, device="meta"), training=True)


def test_predict_says_which_optimizer_it_assumed_and_takes_the_runs():
    m, cost = _cost()
    twin = OrinTwin()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assumed = twin.predict(cost, MODE, kind="train")
    assert any("optimizer not given" in str(w.message) for w in caught)
    assert len(assumed.notes) == 1 and "optimizer not given" in assumed.notes[0] and "sgd-momentum-wd" in assumed.notes[0]
    given = twin.predict(cost, MODE, kind="train", optimizer=torch.optim.AdamW(m.parameters(), lr=1e-3))
    named = twin.predict(cost, MODE, kind="train", optimizer="adamw")
    assert "(given)" in given.notes[0] and "adam" in given.notes[0]
    assert float(given.time_s) == pytest.approx(float(named.time_s), rel=1e-12)
    # PyTorch 2.x's multi-tensor AdamW: far fewer launches than the papers' per-tensor SGD loop
    assert float(given.time_s) < 0.8 * float(assumed.time_s)
    fulcrum = twin.predict(cost, MODE, kind="train", optimizer="fulcrum")
    assert float(fulcrum.time_s) == pytest.approx(float(assumed.time_s), rel=1e-12)
    infer = twin.predict(analyze(m, torch.randn(16, 3, 32, 32, device="meta")), MODE, kind="infer")
    assert infer.notes == []  # no optimizer in an inference step: nothing assumed


def test_optimizer_run_reads_names_runs_and_torch_optimizers():
    assert optimizer_run("fulcrum") is FULCRUM_OPTIMIZER
    run = OptimizerRun("sgd", "fused", False)
    assert optimizer_run(run) is run
    assert optimizer_run("sgd").name == "sgd" and optimizer_run("sgd").impl == "foreach"
    p = [nn.Parameter(torch.zeros(3))]
    assert optimizer_run(torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=False)).describe().startswith(
        "sgd-momentum, one kernel per op per tensor")
    with pytest.raises(ValueError, match="expected one of"):
        optimizer_run("lion")
