"""Workload predictions: the spec's table within 25 %, the response shape, the sweep over all modes."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_edge.twin.validation import MAXN, MID, WORKLOAD_ROWS, slope_ratios


@pytest.mark.parametrize("row", WORKLOAD_ROWS, ids=[f"{r[0]}@{'MAXN' if r[4] == MAXN else 'low'}" for r in WORKLOAD_ROWS])
def test_workload_row_within_25_percent(twin, row):
    label, model, bs, kind, mode, seq, t_target, p_target, _ = row
    pred = twin.predict_workload(model, bs, kind, mode, seq_len=seq)
    assert pred.label == "simulated"
    assert float(pred.time_s) == pytest.approx(t_target, rel=0.25)
    assert float(pred.power_w) == pytest.approx(p_target, rel=0.25)


def test_sweep_covers_every_mode(twin):
    pred = twin.predict_workload("resnet18", 16, "train")
    assert pred.time_s.shape == (18096,) and pred.power_w.shape == (18096,)
    assert np.all(np.isfinite(pred.time_s)) and np.all(pred.time_s > 0)
    assert np.all(pred.power_w <= 67.0) and np.all(pred.power_w >= pred.static_w)
    assert np.allclose(pred.energy_j, pred.time_s * pred.power_w)
    # one mode in a sweep equals the same mode asked for alone
    i = twin.space.index(MID)
    alone = twin.predict_workload("resnet18", 16, "train", MID)
    assert float(alone.time_s) == pytest.approx(pred.time_s[i])
    assert float(alone.power_w) == pytest.approx(pred.power_w[i])


def test_power_monotone_along_every_knob_resnet18_training(twin):
    space = twin.space
    power = np.asarray(twin.predict_workload("resnet18", 16, "train").power_w).reshape(space.shape)
    for axis in range(4):
        assert (np.diff(power, axis=axis) >= -1e-6).all(), f"power falls along knob {axis}"


def test_training_time_falls_steeply_with_gpu_then_saturates(twin):
    gpus = twin.space.gpu_mhz
    t = np.asarray(twin.predict_workload("resnet18", 16, "train", [MAXN.replace(gpu_mhz=g) for g in gpus]).time_s)
    assert np.all(np.diff(t) <= 1e-12)
    assert (t[0] - t[4]) > 5 * (t[-5] - t[-1])


def test_slope_ratio_ordering_at_the_midpoint(twin):
    rho = slope_ratios(twin, "high")
    assert rho["mem"] > rho["gpu"] > rho["cpu"] > rho["cores"]
    assert rho["cores"] < 0.2
    for k, target in (("mem", 8.93), ("gpu", 1.8), ("cpu", 1.59)):
        assert rho[k] == pytest.approx(target, rel=0.5)


def test_lowering_gpu_clock_mobilenet_keeps_time_saves_energy(twin):
    modes = [MAXN.replace(gpu_mhz=g) for g in (1300.5, 1134.75, 726.75, 318.75)]
    pred = twin.predict_workload("mobilenet_v3_large", 1, "infer", modes)
    t, e = np.asarray(pred.time_s), np.asarray(pred.energy_j)
    assert np.all(np.abs(t[1:] / t[0] - 1) < 0.01)
    saving = 100 * (1 - e[1:] / e[0])
    assert saving == pytest.approx([6.0, 11.5, 15.4], abs=5.0)


def test_lowering_memory_clock_slows_resnet50_without_saving_power(twin):
    modes = [MAXN, MAXN.replace(mem_mhz=2133.0), MAXN.replace(mem_mhz=665.6)]
    pred = twin.predict_workload("resnet50", 1, "infer", modes)
    t, p = np.asarray(pred.time_s), np.asarray(pred.power_w)
    assert 100 * (t[1] / t[0] - 1) == pytest.approx(7.3, abs=5.0)
    assert 100 * (t[2] / t[0] - 1) == pytest.approx(41.5, abs=10.0)
    assert np.all(100 * (1 - p[1:] / p[0]) < 3.0)


def test_layer_times_and_detail(twin):
    lt = twin.layer_times(twin.workload_cost("resnet50", 1, "infer")[0], MAXN)
    assert lt.label == "simulated"
    assert len(lt.names) == len(lt.gpu_s) == len(lt.energy_j)
    assert np.all(lt.end_s >= lt.start_s) and np.all(np.diff(lt.start_s) >= 0)
    assert lt.end_s[-1] <= lt.time_s
    assert lt.gpu_s.sum() > 0 and lt.energy_j.sum() > 0
    pred = twin.predict_workload("resnet50", 1, "infer", MAXN)
    assert lt.time_s == pytest.approx(float(pred.time_s))


def test_predict_accepts_a_model_cost_and_every_mode_form(twin):
    cost, _ = twin.workload_cost("resnet18", 16, "train")
    a = twin.predict(cost, MAXN, kind="train")
    b = twin.predict(cost, "12c/2201.6/1300.5/3199", kind="train")
    c = twin.predict(cost, np.array([MAXN.as_tuple()] * 3), kind="train")
    assert float(a.time_s) == pytest.approx(float(b.time_s)) == pytest.approx(c.time_s[2])
    assert a.at(0)["mode"] == MAXN and c.time_s.shape == (3,)


def test_fp16_is_faster_than_fp32(twin):
    t32 = float(twin.predict_workload("resnet50", 64, "infer", MAXN).time_s)
    t16 = float(twin.predict_workload("resnet50", 64, "infer", MAXN, precision="fp16").time_s)
    assert t16 < t32


def test_training_prediction_needs_a_training_cost(twin):
    cost, _ = twin.workload_cost("resnet18", 16, "infer")
    with pytest.raises(ValueError, match="training=True"):
        twin.predict(cost, MAXN, kind="train")
    train_cost, _ = twin.workload_cost("resnet18", 16, "train")
    infer_from_train = twin.predict(train_cost, MAXN, kind="infer")  # forward steps only
    assert float(infer_from_train.time_s) < float(twin.predict(train_cost, MAXN, kind="train").time_s)
