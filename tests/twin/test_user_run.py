"""What the twin takes from the user's own run (issue 27), through the profiler's TwinDriver: the CPU work outside the
layers measured on this machine, and the optimizer steps per batch (gradient accumulation, manual optimisation).
No Lightning here: a model with a ``_trainer`` stands for a LightningModule; the Trainer runs are in
tests/compat/test_twin_plausibility.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from lightning_edge.cost import analyze
from lightning_edge.lightning.twin_driver import HOST_GAPS, TwinDriver, host_cpu_between
from lightning_edge.twin.model import OrinTwin
from lightning_edge.twin.timeline import IDLE_ROW
from lightning_edge.twin.validation import MAXN

X = torch.randn(8, 32)


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def _steps(gaps_ms: list[float], step_ms: float = 5.0) -> list[SimpleNamespace]:
    """Steps on this machine (t0_ns, t1_ns) with the given gaps between them."""
    out, t = [], 1_000_000_000
    for g in [0.0, *gaps_ms]:
        t += int(g * 1e6)
        out.append(SimpleNamespace(t0_ns=t, t1_ns=t + int(step_ms * 1e6)))
        t += int(step_ms * 1e6)
    return out


def test_host_cpu_is_the_smallest_early_gap():
    """The first gap after the capture holds the cost analysis: the smallest of the first gaps is the loop's own."""
    h = host_cpu_between([(s.t0_ns, s.t1_ns) for s in _steps([900.0, 3.0])], 2600.0)
    assert h.cpu_s == pytest.approx(0.003) and h.orin_s == pytest.approx(0.003 * 2600 / 2201.6)
    assert host_cpu_between([(0, 10)], 2600.0) is None


def test_the_driver_puts_the_runs_cpu_work_and_accumulation_on_the_twin():
    twin = OrinTwin(noise=False, settling=False)
    module = _net()
    module._trainer = SimpleNamespace(accumulate_grad_batches=4)  # Lightning's automatic optimisation
    module.automatic_optimization = True
    drv = TwinDriver(twin, module, "model", [])
    cost = analyze(module, X, training=True)
    steps = _steps([800.0])  # the capture step and one more: not enough gaps yet
    drv.add_cost(cost, True, steps=steps)
    run = twin.runs["train"]
    assert run.optimizer_steps == 0.25 and run.host is None
    assert any("apportioned" in n and "accumulate_grad_batches=4" in n for n in drv.notes)
    before = drv.layer_model(True, str(MAXN), 8)[0]
    steps.extend(_steps([800.0, 2.0, 2.5])[2:])  # the session's list grows as steps end
    lt, _ = drv.layer_model(True, str(MAXN), 8)
    run = twin.runs["train"]
    assert len(steps) == HOST_GAPS + 2 and run.host is not None and run.host.cpu_s == pytest.approx(0.002)
    idle = lt.names.index(IDLE_ROW)
    assert lt.wall_s[idle] > before.wall_s[before.names.index(IDLE_ROW)] + 0.002
    assert any("outside the layers" in n for n in drv.notes)
    # the tuner's steps of the same cost on the same twin take the same run: one model
    from lightning_edge.twin.live import SimWorkload

    sim = SimWorkload(cost, twin, train_batch_size=8, param_tensors=4, noise=False)
    assert sim.twin_workload("train", 8) is drv.workload(True, 8)
    drv.end()


def test_manual_optimisation_steps_are_counted():
    """Without Lightning's automatic optimisation the optimizer steps per batch are measured: an optimizer stepping
    every other batch is half a step per batch."""
    twin = OrinTwin(noise=False, settling=False)
    module = _net()
    drv = TwinDriver(twin, module, "model", [])
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    try:
        for i in range(6):
            drv.follow(True, 8)  # a training batch begins
            module(X).sum().backward()
            if i % 2 == 1:
                opt.step()
            opt.zero_grad()
        share, how = drv.optimizer_steps()
        assert share == pytest.approx(0.5) and "measured" in how
    finally:
        drv.end()
    assert drv._hook is None
