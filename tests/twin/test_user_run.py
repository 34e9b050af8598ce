"""What the twin takes from the user's own run (issue 27), through the profiler's TwinDriver: the CPU work outside the
layers measured on this machine (issue 37: this thread's CPU time between steps, the median of the first gaps), and
the optimizer steps per batch (gradient accumulation, manual optimisation).
No Lightning here: a model with a ``_trainer`` stands for a LightningModule; the Trainer runs are in
tests/compat/test_twin_plausibility.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from lightning_edge._torchcompat import optimizer_hooks_fire
from lightning_edge.cost import analyze
from lightning_edge.lightning.twin_driver import HOST_GAPS, TwinDriver, host_cpu_from_gaps
from lightning_edge.twin.model import OrinTwin
from lightning_edge.twin.validation import MAXN
from lightning_edge.twin.workload_model import IDLE_ROW

X = torch.randn(8, 32)


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def test_host_cpu_is_the_least_of_the_first_gaps():
    """The first gap after the capture holds the cost analysis, another one a logger's set-up, others ran slower on
    a shared core: the least of the first gaps is the loop's own work."""
    h = host_cpu_from_gaps([0.9, 0.0036, 0.0031, 0.0029, 0.05, 0.0045, 0.0032, 0.003], 2600.0)
    assert h.cpu_s == pytest.approx(0.0029) and h.orin_s == pytest.approx(h.cpu_s * 2600 / 2201.6)
    assert "least of this thread's CPU time in 8 gap(s)" in h.describe()
    assert host_cpu_from_gaps([], 2600.0) is None


def test_the_driver_puts_the_runs_cpu_work_and_accumulation_on_the_twin():
    twin = OrinTwin(settling=False)
    module = _net()
    module._trainer = SimpleNamespace(accumulate_grad_batches=4)  # Lightning's automatic optimisation
    module.automatic_optimization = True
    drv = TwinDriver(twin, module, "model", [])
    cost = analyze(module, X, training=True)
    drv.add_cost(cost, True)
    drv.add_gap("train", 0.8)  # the capture step's analysis, then the loop's own work
    run = twin.runs["train"]
    assert run.optimizer_steps == 0.25 and run.host is None  # not enough gaps yet
    assert any("apportioned" in n and "accumulate_grad_batches=4" in n for n in drv.notes)
    before = drv.layer_model(True, str(MAXN), 8)[0]
    for g in [0.0025] + [0.002] * (HOST_GAPS - 2):
        drv.add_gap("train", g)
    lt, _ = drv.layer_model(True, str(MAXN), 8)
    run = twin.runs["train"]
    assert run.host is not None and run.host.cpu_s == pytest.approx(0.002)
    drv.add_gap("train", 5.0)  # kept for the rest of the run once measured
    assert twin.runs["train"].host is run.host
    idle = lt.names.index(IDLE_ROW)
    assert lt.wall_s[idle] > before.wall_s[before.names.index(IDLE_ROW)] + 0.002
    assert any("outside the layers" in n for n in drv.notes)
    # the tuner's steps of the same cost on the same twin take the same run: one model
    from lightning_edge.twin.sim_workload import SimWorkload

    sim = SimWorkload(cost, twin, train_batch_size=8, param_tensors=4, noise=False)
    assert sim.twin_workload("train", 8) is drv.workload(True, 8)
    drv.end()


def _manual_loop(batches: int, every: int) -> TwinDriver:
    """A plain loop of ``batches`` training batches whose SGD steps every ``every`` batches, followed by a driver."""
    twin = OrinTwin(settling=False)
    module = _net()
    drv = TwinDriver(twin, module, "model", [])
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    for i in range(batches):
        drv.follow(True, 8)  # a training batch begins
        module(X).sum().backward()
        if i % every == every - 1:
            opt.step()
        opt.zero_grad()
    return drv


def test_manual_optimisation_steps_are_counted():
    """Without Lightning's automatic optimisation the optimizer steps per batch are measured: an optimizer stepping
    every other batch is half a step per batch."""
    drv = _manual_loop(6, every=2)
    try:
        share, how = drv.optimizer_steps()
        assert share == pytest.approx(0.5) and "measured" in how
    finally:
        drv.end()
    assert drv._hook is None


# ------------------------------------------------------------------ the run's optimizer (issue 27: per-step work)
def _deep(n: int = 60) -> nn.Module:
    return nn.Sequential(*[nn.Linear(32, 32) for _ in range(n)])  # 2n parameter tensors


def test_the_optimizer_row_follows_the_runs_optimizer():
    """A Trainer's AdamW (PyTorch 2.x: multi-tensor kernels on CUDA tensors) is modelled as such, not as the papers'
    PyTorch 1.12 SGD loop (a kernel per op per tensor): on a model of 120 parameter tensors the (optimizer) row
    drops by an order of magnitude, and stays above its memory-bound floor (its bytes at the board's bandwidth)."""
    from lightning_edge.twin.workload import FULCRUM_OPTIMIZER, count_param_tensors

    twin = OrinTwin(settling=False)
    module = _deep()
    opt = torch.optim.AdamW(module.parameters())
    module._trainer = SimpleNamespace(accumulate_grad_batches=1, optimizers=[opt])
    module.automatic_optimization = True
    drv = TwinDriver(twin, module, "model", [])
    cost = analyze(module, X, training=True)
    drv.add_cost(cost, True)
    run = twin.runs["train"]
    assert run.optimizer is not None and (run.optimizer.name, run.optimizer.impl) == ("adam", "foreach")
    assert any("adam, multi-tensor (foreach) kernels" in n for n in drv.notes)
    lt = drv.layer_model(True, str(MAXN), 8)[0]
    T = count_param_tensors(module)
    loop = twin.workload(cost, 8, "train", param_tensors=T, optimizer=FULCRUM_OPTIMIZER).layers(str(MAXN))
    row = lt.names.index("(optimizer)")
    assert lt.wall_s[row] < 0.1 * loop.wall_s[loop.names.index("(optimizer)")]
    bw = float(twin.roofline(str(MAXN)).bandwidth)  # the peak: no kernel moves its bytes faster
    assert float(lt.bytes[row]) > 0 and lt.gpu_s[row] >= float(lt.bytes[row]) / bw
    drv.end()


def test_a_plain_loops_optimizer_is_seen_at_its_first_step():
    """No Trainer: the optimizer is known once it steps (its step hook); SGD with momentum and foreach=False is the
    single-tensor loop, without the zero_ kernels of PyTorch 1.12 (gradients set to None)."""
    twin = OrinTwin(settling=False)
    module = _net()
    drv = TwinDriver(twin, module, "model", [])
    opt = torch.optim.SGD(module.parameters(), lr=0.1, momentum=0.9, foreach=False)
    try:
        assert drv.optimizer() is None  # not known yet: the papers' optimizer is modelled
        drv.follow(True, 8)
        module(X).sum().backward()
        opt.step()
        o = drv.optimizer()
        if optimizer_hooks_fire():
            assert (o.name, o.impl, o.zero_grad) == ("sgd-momentum", "loop", False)
        else:  # torch 2.1 once torch.compile has been called in the process: no step hook runs, and the driver says so
            assert o is None and any("optimizer is not known" in n and "step hook" in n for n in drv.notes)
    finally:
        drv.end()


def test_steps_are_counted_where_torch_runs_no_step_hook(monkeypatch):
    """torch 2.1's Dynamo, once torch.compile is called, silences every optimizer step hook: the steps per batch are
    read from the parameters' in-place updates (their version counters), and the driver says how."""
    import torch.optim.optimizer as optim_mod
    from torch.utils.hooks import RemovableHandle

    monkeypatch.setattr(optim_mod, "register_optimizer_step_post_hook", lambda hook: RemovableHandle({}))
    drv = _manual_loop(6, every=3)
    try:
        share, how = drv.optimizer_steps()
        assert share == pytest.approx(2 / 6) and "in place" in how and "no optimizer step hook" in how
        assert drv.optimizer() is None and any("optimizer is not known" in n for n in drv.notes)
    finally:
        drv.end()


def test_optimizer_work_counts():
    """Launches and bytes of one step: the loop launches ops x tensors; foreach ops x groups of 36 tensors; fused
    one per group; Fulcrum's stays as calibrated (5 kernels per tensor, 11 bytes per parameter per byte of element)."""
    from lightning_edge.twin.workload import FULCRUM_OPTIMIZER, OptimizerRun, compile_workload

    n, T = 1e6, 100
    assert OptimizerRun("adam", "loop", False).work(n, T, 4)[2:] == (800.0, 800.0)
    assert OptimizerRun("adam", "foreach", False).work(n, T, 4)[2:] == (24.0, 8.0)  # 8 ops x ceil(100/36)
    assert OptimizerRun("adam", "fused", False).work(n, T, 4)[2:] == (3.0, 1.0)
    assert OptimizerRun("sgd", "loop", True).work(n, T, 4)[2] == 200.0  # update + zero_
    cost = analyze(_net(), X, training=True)
    p = compile_workload(cost, param_tensors=4)
    row = p.names.index("(optimizer)")
    assert p.kernels[row] == 20 and p.bytes[row] == pytest.approx(11 * 4 * cost.params)
    assert compile_workload(cost, param_tensors=4, optimizer=FULCRUM_OPTIMIZER).kernels[row] == 20
    f = compile_workload(cost, param_tensors=4, optimizer=OptimizerRun("adam", "foreach", False))
    assert f.kernels[row] == 8 and f.cpu_ops[row] == 8 and f.optimizer.impl == "foreach"
