"""Energy attribution against synthetic power traces whose per-layer energy is known.

Each layer runs at a known power for a known time; the sensor samples that piecewise-constant power at 1 kHz
(an INA3221-like rate) with an arbitrary phase. Power levels are Jetson-like: a static floor of 18 W with layers
drawing 20-31 W. Long layers must be *measured* within 5 %, short ones *apportioned* from the rest of the step
within 5 % (their model energies are right), and the layers must always sum to the step's measured energy."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from lightning_edge.devices.sampler import PowerSampler
from lightning_edge.devices.sensors import ReplaySensor
from lightning_edge.profiling.attribution import (
    APPORTIONED,
    ESTIMATED,
    MEASURED,
    PowerTrace,
    aggregate,
    aggregate_steps,
    attribute_step,
    label_of,
    model_energies,
)
from lightning_edge.profiling.hooks import LayerSelf, LayerTimer

MS = 1_000_000
T0 = 5_000 * MS
PERIOD_NS = 1 * MS
IDLE_W = 18.0  # the static floor; regions (no FLOP) draw it too, so their model energy is exact


def timeline(spans):
    """spans: (name, phase, duration_ns, power_w) run back to back from T0 -> LayerSelf dict, truth, t1."""
    selfs: dict[str, LayerSelf] = {}
    truth: dict[str, float] = {}
    power = []
    t = T0
    for name, phase, dur, p in spans:
        s = selfs.setdefault(name, LayerSelf(name, "region" if name.startswith("(") else "Conv2d", calls=1))
        s.self_ns += dur
        s.by_phase[phase] = s.by_phase.get(phase, 0) + dur
        s.segments.append((t, t + dur))
        truth[name] = truth.get(name, 0.0) + p * dur / 1e9
        power.append((t, t + dur, p))
        t += dur
    return selfs, truth, t, power


def sample(power, t_start, t_end, period_ns=PERIOD_NS, phase_ns=370_000):
    """What a sensor reports: the instantaneous power at each sample time (idle outside the step)."""
    ts = np.arange(t_start - 20 * period_ns + phase_ns, t_end + 20 * period_ns, period_ns)
    ps = np.full(ts.shape, IDLE_W)
    for a, b, p in power:
        ps[(ts >= a) & (ts < b)] = p
    return ts, ps


def network_step():
    """A training step: two long convs (measured at 1 kHz) and runs of many short layers (apportioned)."""
    small = [(f"s{i}", 0.25 * MS + (i % 5) * 0.05 * MS, 20.0 + (i % 7)) for i in range(120)]
    spans = [("(forward)", "other", 3 * MS, IDLE_W), ("big1", "fwd", 20 * MS, 24.0)]
    spans += [(n, "fwd", int(d / 2), p) for n, d, p in small[:60]]
    spans += [("big2", "fwd", 40 * MS, 30.0)]
    spans += [(n, "fwd", int(d / 2), p) for n, d, p in small[60:]]
    spans += [("(backward)", "other", 2 * MS, IDLE_W)]
    spans += [(n, "bwd", int(d / 2), p) for n, d, p in reversed(small[60:])]
    spans += [("big2", "bwd", 60 * MS, 31.0)]
    spans += [(n, "bwd", int(d / 2), p) for n, d, p in reversed(small[:60])]
    spans += [("big1", "bwd", 40 * MS, 26.0), ("(optimizer)", "other", 8 * MS, IDLE_W)]
    return timeline(spans)


def exact_model(selfs, truth, static_w=IDLE_W):
    """A roofline and costs under which every layer's model energy equals its true energy."""
    roof = SimpleNamespace(eps_flop=1e-10, eps_mop=0.0, static_power=static_w)
    costs = {}
    for n, s in selfs.items():
        dyn = truth[n] - static_w * s.self_s
        costs[n] = {"fwd": (dyn / 1e-10, 0.0), "bwd": (0.0, 0.0)} if s.fwd_ns else {"bwd": (dyn / 1e-10, 0.0)}
    return roof, costs


def test_measured_and_apportioned_recover_known_energies():
    selfs, truth, t1, power = network_step()
    ts, ps = sample(power, T0, t1)
    trace = PowerTrace(ts, ps)
    roof, costs = exact_model(selfs, truth)
    model = model_energies(selfs, costs, roof)
    for n in truth:
        assert model[n] == pytest.approx(truth[n], rel=1e-9)
    e = attribute_step(selfs, T0, t1, trace=trace, update_period_s=PERIOD_NS / 1e9, model_energy_j=model)
    assert e.method == MEASURED and e.label == "measured" and e.resolved
    assert e.energy_j == pytest.approx(sum(truth.values()), rel=0.01)
    assert e.layer_sum_j == pytest.approx(e.energy_j, rel=1e-12)  # exactly the measured step energy
    methods = {n: le.method for n, le in e.layers.items()}
    assert {n for n, m in methods.items() if m == MEASURED} == {"big1", "big2", "(optimizer)"}
    for n, le in e.layers.items():
        assert le.energy_j == pytest.approx(truth[n], rel=0.05), (n, le.method)
    # the long layers are far better than 5 %
    assert e.layers["big2"].energy_j == pytest.approx(truth["big2"], rel=0.01)
    assert e.layers["s3"].method == APPORTIONED and e.layers["s3"].power_w == pytest.approx(23.0, rel=0.05)


def test_same_result_through_a_power_sampler():
    selfs, truth, t1, power = network_step()
    ts, ps = sample(power, T0, t1)
    sensor = ReplaySensor([0.0, 1.0], [1.0, 1.0])
    sampler = PowerSampler(sensor, rate_hz=1000, capacity=8192)
    for t, p in zip(ts, ps):
        sampler.record(int(t), float(p))
    roof, costs = exact_model(selfs, truth)
    model = model_energies(selfs, costs, roof)
    a = attribute_step(selfs, T0, t1, trace=sampler, update_period_s=1e-3, model_energy_j=model)
    b = attribute_step(selfs, T0, t1, trace=PowerTrace(ts, ps), update_period_s=1e-3, model_energy_j=model)
    assert a.energy_j == pytest.approx(b.energy_j, rel=1e-9)
    for n in truth:
        assert a.layers[n].energy_j == pytest.approx(b.layers[n].energy_j, rel=1e-6)
        assert a.layers[n].energy_j == pytest.approx(truth[n], rel=0.05)


def test_slow_sensor_apportions_everything_but_keeps_the_step_total():
    selfs, truth, t1, power = network_step()
    period = 150 * MS  # a slow sensor: no layer spans two of its periods
    ts, ps = sample(power, T0, t1, period_ns=period, phase_ns=7 * MS)
    ts, ps = np.append(ts, [T0 - 1000 * MS, t1 + 1000 * MS]), np.append(ps, [IDLE_W, IDLE_W])
    roof, costs = exact_model(selfs, truth)
    e = attribute_step(selfs, T0, t1, trace=PowerTrace(ts, ps), update_period_s=period / 1e9,
                       model_energy_j=model_energies(selfs, costs, roof))
    assert all(le.method == APPORTIONED for le in e.layers.values())
    assert e.layer_sum_j == pytest.approx(e.energy_j, rel=1e-12)
    # with exact model weights every share is the step's energy split in the true proportions
    for n, le in e.layers.items():
        assert le.energy_j / e.energy_j == pytest.approx(truth[n] / sum(truth.values()), rel=1e-9)


def test_no_sensor_is_estimated_and_simulated_is_labelled():
    selfs, truth, t1, power = network_step()
    roof, costs = exact_model(selfs, truth)
    model = model_energies(selfs, costs, roof)
    e = attribute_step(selfs, T0, t1, trace=None, model_energy_j=model)
    assert e.method == ESTIMATED and e.source == "model" and e.label == "estimated"
    assert all(le.label == ESTIMATED for le in e.layers.values())
    assert e.energy_j == pytest.approx(sum(truth.values()), rel=1e-9)

    ts, ps = sample(power, T0, t1)
    sim = attribute_step(selfs, T0, t1, trace=PowerTrace(ts, ps), update_period_s=1e-3, model_energy_j=model,
                         source="simulated")
    assert sim.label == "simulated-measured"
    assert {le.label for le in sim.layers.values()} == {"simulated-measured", "simulated-apportioned"}
    assert label_of("estimated", "simulated") == "estimated"


def test_trace_not_covering_the_step_falls_back_to_estimated():
    selfs, truth, t1, power = network_step()
    trace = PowerTrace([T0 - 10 * MS * 100, T0 - 10 * MS * 99], [5.0, 5.0])
    e = attribute_step(selfs, T0, t1, trace=trace, update_period_s=1e-3, model_energy_j={"big1": 1.0})
    assert e.method == ESTIMATED and e.notes and "does not cover" in e.notes[0]


def test_all_layers_measured_sum_exactly_and_time_weights_without_model():
    spans = [("a", "fwd", 30 * MS, 10.0), ("b", "fwd", 50 * MS, 4.0), ("c", "fwd", 20 * MS, 7.0)]
    selfs, truth, t1, power = timeline(spans)
    ts, ps = sample(power, T0, t1)
    e = attribute_step(selfs, T0, t1, trace=PowerTrace(ts, ps), update_period_s=1e-3)
    assert all(le.method == MEASURED for le in e.layers.values())
    assert e.layer_sum_j == pytest.approx(e.energy_j, rel=1e-12)
    for n in truth:
        assert e.layers[n].energy_j == pytest.approx(truth[n], rel=0.03)
    # short layers without any model are apportioned by time
    spans = [("a", "fwd", 30 * MS, 10.0), ("x", "fwd", MS // 4, 10.0), ("y", "fwd", MS // 2, 10.0),
             ("b", "fwd", 30 * MS, 10.0)]
    selfs, truth, t1, power = timeline(spans)
    ts, ps = sample(power, T0, t1)
    e = attribute_step(selfs, T0, t1, trace=PowerTrace(ts, ps), update_period_s=1e-3)
    assert e.layers["y"].energy_j == pytest.approx(2 * e.layers["x"].energy_j, rel=1e-9)


@pytest.mark.parametrize("u", [0.0, 0.25, 0.5, 0.9])
def test_edge_blur_of_a_measured_layer_is_bounded(u):
    """A layer of k = 4 periods between neighbours 10 W away: the error is dP * P * (u^2 + (1-u)^2) / 2 at most."""
    spans = [("left", "fwd", 20 * MS, 30.0), ("mid", "fwd", 4 * MS, 20.0), ("right", "fwd", 20 * MS, 30.0)]
    selfs, truth, t1, power = timeline(spans)
    ts, ps = sample(power, T0, t1, phase_ns=int(u * PERIOD_NS))
    e = attribute_step(selfs, T0, t1, trace=PowerTrace(ts, ps), update_period_s=1e-3)
    assert e.layers["mid"].method == MEASURED
    err = abs(e.layers["mid"].energy_j - truth["mid"])
    assert err <= 10.0 * 1e-3 * 0.5 * 2 + 1e-12
    assert err / truth["mid"] <= 0.125  # dP / (k p) at worst


def test_model_energies_use_phase_costs_and_time():
    s = LayerSelf("conv", "Conv2d", self_ns=2 * MS, by_phase={"fwd": MS, "bwd": MS})
    fwd_only = LayerSelf("conv", "Conv2d", self_ns=MS, by_phase={"fwd": MS})
    cost = SimpleNamespace(forward=SimpleNamespace(flops=1e9, bytes=1e6), backward=SimpleNamespace(flops=2e9, bytes=3e6))
    roof = SimpleNamespace(eps_flop=4e-12, eps_mop=1e-10, static_power=10.0)
    both = model_energies({"conv": s}, {"conv": cost}, roof)["conv"]
    assert both == pytest.approx(4e-12 * 3e9 + 1e-10 * 4e6 + 10.0 * 2e-3)
    one = model_energies({"conv": fwd_only}, {"conv": cost}, roof)["conv"]
    assert one == pytest.approx(4e-12 * 1e9 + 1e-10 * 1e6 + 10.0 * 1e-3)
    # a time roofline (no energy coefficients) gives time weights
    roof_t = SimpleNamespace(eps_flop=math.nan, eps_mop=math.nan, static_power=math.nan)
    assert model_energies({"conv": s}, {"conv": cost}, roof_t)["conv"] == pytest.approx(2e-3)


def test_aggregate_mean_and_spread():
    steps = []
    for scale in (1.0, 1.1, 0.9):
        spans = [("a", "fwd", int(30 * MS * scale), 10.0), ("b", "bwd", 50 * MS, 4.0)]
        selfs, truth, t1, power = timeline(spans)
        ts, ps = sample(power, T0, t1)
        steps.append(attribute_step(selfs, T0, t1, trace=PowerTrace(ts, ps), update_period_s=1e-3))
    stats = aggregate(steps, costs={"a": {"fwd": (3e9, 1e9)}})
    a = stats["a"]
    assert a.steps == 3 and a.time_s == pytest.approx(0.030, rel=1e-9)
    assert a.time_s_std == pytest.approx(0.003, rel=1e-6)
    assert a.energy_j == pytest.approx(0.30, rel=0.03) and a.energy_j_std > 0
    assert a.power_w == pytest.approx(10.0, rel=0.03)
    assert a.label == "measured" and a.labels["measured"] == 3
    assert a.intensity == pytest.approx(3.0)
    assert stats["b"].bwd_s == pytest.approx(0.050) and stats["b"].fwd_s == 0
    st = aggregate_steps(steps)
    assert st.steps == 3 and st.time_s == pytest.approx(0.080, rel=1e-9) and st.label == "measured"
    assert a.to_dict()["method"] == "measured"


class _BusyFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, clock, fwd_ns, bwd_ns):
        clock[0] += fwd_ns
        ctx.clock, ctx.bwd_ns = clock, bwd_ns
        return x * 1.0

    @staticmethod
    def backward(ctx, g):
        ctx.clock[0] += ctx.bwd_ns
        return g, None, None, None


class Busy(nn.Module):
    def __init__(self, clock, fwd_ns, bwd_ns):
        super().__init__()
        self.clock, self.fwd_ns, self.bwd_ns = clock, fwd_ns, bwd_ns

    def forward(self, x):
        return _BusyFn.apply(x, self.clock, self.fwd_ns, self.bwd_ns)


def test_end_to_end_from_layer_timer_intervals():
    """LayerTimer intervals (injected clock) -> a trace at the layers' known powers -> attribution.

    Two long layers (measured) and a run of 40 short ones (0.2-0.4 ms at 1 kHz: apportioned) whose model energies
    are right: each is recovered within 5 %."""
    clock = [T0]
    short = [Busy(clock, MS // 5 + (i % 3) * MS // 10, MS // 4 + (i % 2) * MS // 10) for i in range(40)]
    net = nn.Sequential(Busy(clock, 20 * MS, 40 * MS), *short, Busy(clock, 30 * MS, 50 * MS))
    watts = {"0": 15.0, "41": 25.0}
    watts.update({str(i + 1): 8.0 + (i % 4) for i in range(40)})
    timer = LayerTimer(net, clock_ns=lambda: clock[0])
    x = torch.ones(3, requires_grad=True)
    with timer.step() as s:
        net(x).sum().backward()
    ex = s.timing.exclusive()
    power = [(a, b, watts.get(n, IDLE_W)) for n, v in ex.items() for a, b in v.segments]
    ts, ps = sample(power, s.timing.t0_ns, s.timing.t1_ns)
    truth = {n: watts.get(n, IDLE_W) * v.self_s for n, v in ex.items()}
    # model: 6 W static plus dynamic energy from FLOP (1e-10 J each) that matches each layer's true power
    roof = SimpleNamespace(eps_flop=1e-10, eps_mop=0.0, static_power=6.0)
    costs = {n: {"fwd": ((watts.get(n, IDLE_W) - 6.0) * v.fwd_ns / 1e9 / 1e-10, 0.0),
                 "bwd": ((watts.get(n, IDLE_W) - 6.0) * v.bwd_ns / 1e9 / 1e-10, 0.0)} for n, v in ex.items()}
    model = model_energies(ex, costs, roof)
    e = attribute_step(ex, s.timing.t0_ns, s.timing.t1_ns, trace=PowerTrace(ts, ps), update_period_s=1e-3,
                       model_energy_j=model)
    assert e.layers["0"].method == MEASURED and e.layers["41"].method == MEASURED
    assert e.layers["1"].method == APPORTIONED
    for n in watts:
        assert e.layers[n].energy_j == pytest.approx(truth[n], rel=0.05), n


def test_a_recorded_trace_is_integrated_once_by_the_samplers_integrator_with_its_gap_rules():
    """Issue 37: ``PowerTrace`` integrated recorded readings a second time, its own way, bridging any gap between two
    readings with a straight line. It is now the sampler holding those readings: one integrator, one set of rules (a
    gap without readings longer than the sampler's ``max_gap_s`` has no energy; its edges are held for ``hold_s``)."""
    ts = [T0 + i * MS for i in range(10)] + [T0 + 1000 * MS + i * MS for i in range(10)]  # a 1 s gap
    ps = [10.0] * 10 + [30.0] * 10
    tr = PowerTrace(ts, ps)
    assert isinstance(tr, PowerSampler)
    assert tr.energy_j(T0, T0 + 9 * MS) == pytest.approx(10.0 * 9e-3)
    assert math.isnan(tr.energy_j(T0 + 400 * MS, T0 + 500 * MS))  # nothing was read then: no energy, not a line
    assert tr.quality(T0, T0 + 1009 * MS).coverage < 1.0  # and a window across the gap says it was partly unread
