"""One workload model (issue 26, item 2): the profiler's per-layer table, the tuner's step, its prior, serving's
workloads and the live board's power are the same model of the same workload, so they agree exactly; and the rows
of the per-layer table sum to the step by construction."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from lightning_edge.cost import analyze
from lightning_edge.devices.meter import TwinMeter
from lightning_edge.devices.sim.live import LiveTwin
from lightning_edge.lightning.twin_driver import TwinDriver
from lightning_edge.modes import PowerMode
from lightning_edge.tuning.prior import prior_for_twin
from lightning_edge.twin.model import OrinTwin
from lightning_edge.twin.sim_workload import SimWorkload

MODES = [PowerMode(12, 2201.6, 1300.5, 3199), PowerMode(4, 1344.0, 318.75, 2133), PowerMode(8, 1497.6, 726.75, 665.6)]
BS = 8


def small_cnn() -> nn.Module:
    """Bias-free convolutions and batch norms: 5 parameter tensors where a per-layer guess (2 per layer with
    parameters) says 6, so a model that guesses the optimizer's kernels differs from one that counts them."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


def _x() -> torch.Tensor:
    return torch.randn(BS, 3, 32, 32)


def _profiler(twin: OrinTwin, model: nn.Module, cost, mode, live: LiveTwin | None = None):
    """What EnergySession does on the twin: the captured step's cost to its TwinDriver, the per-layer model."""
    drv = TwinDriver(twin, model, "model", [], live=live)
    drv.add_cost(cost, True)
    found = drv.layer_model(True, str(mode), BS)
    assert found is not None, drv.notes
    return drv, found[0]


def _tuner_meter(twin: OrinTwin, model: nn.Module, cost, precision: str = "fp32") -> TwinMeter:
    """What PowerModeTuner does on the twin: its meter bound to the captured training step's cost."""
    from lightning_edge.twin.workload import count_param_tensors

    meter = TwinMeter(twin, noise=False, settling=False, precision=precision)
    meter.bind_cost(cost, BS, param_tensors=count_param_tensors(model))
    return meter


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_the_profilers_table_and_the_tuners_step_are_one_model(mode):
    twin = OrinTwin(settling=False)
    model = small_cnn()
    cost = analyze(model, _x(), training=True)  # the one capture both callbacks share
    _, lt = _profiler(twin, model, cost, mode)
    t, p, clean = _tuner_meter(twin, model, cost).draw("train", mode)
    assert (lt.time_s, lt.power_w) == (t, p) == (t, clean)  # exactly: the same model, not two kept in line
    # serving, the interleaver and OnlineTuner.bind analyse the module themselves (meta tensors): the same step
    sim = SimWorkload(model, twin, example_inputs=(_x(),), noise=False)
    assert sim.expected("train", mode) == (lt.time_s, lt.power_w)


def test_mixed_precision_is_modelled_alike_by_the_profiler_and_the_tuner():
    """A 16-mixed run: the captured cost says autocast float16; the tuner's meter (precision from the Trainer) and
    the profiler (precision from the cost) model the same fp16 step. Linear layers with biases: the tensor count and
    the per-layer guess agree, so only the precision can make them differ."""
    twin = OrinTwin(settling=False)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 256), nn.ReLU(), nn.Linear(256, 10))
    cost = analyze(model, _x(), training=True, autocast="fp16")
    meter = TwinMeter(twin, noise=False, settling=False, precision="fp16")
    meter.bind_cost(cost, BS)
    for mode in MODES:
        _, lt = _profiler(twin, model, cost, mode)
        t, p, _ = meter.draw("train", mode)
        assert (lt.time_s, lt.power_w) == (t, p)


@pytest.mark.parametrize("mode", MODES, ids=str)
def test_the_layers_sum_to_the_step(mode):
    twin = OrinTwin(settling=False)
    model = small_cnn()
    cost = analyze(model, _x(), training=True)
    _, lt = _profiler(twin, model, cost, mode)
    rows = lt.table()
    step_e = lt.time_s * lt.power_w
    assert sum(r["energy_j"] for r in rows) == pytest.approx(step_e, rel=1e-12)
    assert sum(r["time_s"] for r in rows) == pytest.approx(lt.time_s, rel=1e-12)
    assert all(r["time_s"] >= 0 and r["energy_j"] >= 0 for r in rows)
    # the energy's parts add up row by row and over the step
    parts = {k: sum(r[k] for r in rows) for k in ("static_j", "gpu_j", "mem_j", "cpu_j")}
    assert sum(parts.values()) == pytest.approx(step_e, rel=1e-12)
    assert all(sum(r[k] for k in parts) == pytest.approx(r["energy_j"], rel=1e-12, abs=1e-15) for r in rows)
    step = lt.step
    for k, v in parts.items():
        assert float(step.parts[k]) == pytest.approx(v, rel=1e-12, abs=1e-15)


def test_the_prior_and_the_live_board_follow_the_same_model():
    twin = OrinTwin(settling=False)
    model = small_cnn()
    cost = analyze(model, _x(), training=True)
    mode = MODES[1]
    live = LiveTwin(twin, noise=False)
    drv, lt = _profiler(twin, model, cost, mode, live)
    # the board's sensor shows the same workload's power (the profiler starts it on the live board)
    drv.begin(True, BS)
    assert live.target_power(mode) == lt.power_w
    drv.end()
    # the prior on a real Orin is the calibrated model of the same workload over every mode
    wl = SimWorkload(model, twin, example_inputs=(_x(),), noise=False)
    prior = prior_for_twin(wl, twin.space, simulated=False)
    i = twin.space.index(mode)
    assert prior.time_s[i] == pytest.approx(lt.time_s, rel=1e-12)
    assert prior.power_w[i] == pytest.approx(lt.power_w, rel=1e-12)


def test_a_sweep_and_one_mode_are_the_same_timeline():
    twin = OrinTwin(settling=False)
    cost, n = twin.workload_cost("resnet18", 16, "train")
    wl = twin.workload(cost, batch_size=16, kind="train", param_tensors=n)
    sweep = wl.step()  # every mode
    assert sweep.time_s.shape == (twin.space.size,)
    for mode in MODES:
        i = twin.space.index(mode)
        one = wl.step(mode)
        lt = wl.layers(mode)
        assert float(one.time_s) == pytest.approx(sweep.time_s[i], rel=1e-12)
        assert float(one.power_w) == pytest.approx(sweep.power_w[i], rel=1e-12)
        assert (lt.time_s, lt.power_w) == (float(one.time_s), float(one.power_w))
        assert np.sum(lt.wall_s) == pytest.approx(lt.time_s, rel=1e-12)
        assert np.sum(lt.energy_j) == pytest.approx(float(one.energy_j), rel=1e-12)
        # the GPU's timeline: each row starts when the previous ended or when the CPU launched it, whichever later
        k = lt.kernel_rows
        assert np.all(lt.start_s[k][1:] >= lt.end_s[k][:-1] - 1e-15)
        assert np.allclose(lt.end_s[k] - lt.start_s[k], lt.gpu_s[k], rtol=1e-9, atol=1e-15)


def test_when_the_power_cap_binds_every_row_is_scaled_alike():
    """The board's cap (66.5 W; 30 W here, so that it binds) scales the step's power and every row's energy alike:
    the rows still sum to the step, no part is negative, and the step sits at the cap."""
    twin = OrinTwin(params={"p_cap_w": 30.0}, settling=False)
    cost, n = twin.workload_cost("resnet18", 16, "train")
    wl = twin.workload(cost, batch_size=16, kind="train", param_tensors=n)
    lt = wl.layers(MODES[0])
    assert lt.power_w == 30.0
    assert np.sum(lt.energy_j) == pytest.approx(lt.time_s * 30.0, rel=1e-12)
    for k, v in lt.parts.items():
        assert np.all(v >= 0) and np.sum(v) == pytest.approx(float(lt.step.parts[k]), rel=1e-12, abs=1e-15)
    free = OrinTwin(settling=False).workload(cost, batch_size=16, kind="train", param_tensors=n)
    assert float(free.step(MODES[0]).power_w) > 30.0  # uncapped, the same workload draws more
    assert float(wl.step(MODES[0]).time_s) == float(free.step(MODES[0]).time_s)  # the cap does not slow it


def test_callers_asking_for_the_same_workload_share_one_object():
    twin = OrinTwin(settling=False)
    model = small_cnn()
    cost = analyze(model, _x(), training=True)
    drv, _ = _profiler(twin, model, cost, MODES[0])
    meter = _tuner_meter(twin, model, cost)
    assert meter.workload.twin_workload("train") is drv.workload(True, BS)
    # defaults spelled out are the same workload
    assert twin.workload(cost, BS) is twin.workload(cost, BS, "train", precision="fp32", dataloader=False)
