"""EnergySession without Lightning (a plain loop), the step-selection policy, auto every-N, and the reports."""

from __future__ import annotations

import csv
import itertools
import json

import pytest
import torch
from torch import nn

from lightning_edge.lightning.budget import OverheadBudget
from lightning_edge.lightning.session import EnergySession
from lightning_edge.profiling.attribution import LayerEnergy, StepEnergy
from lightning_edge.profiling.report import CSV_FIELDS, ProfileReport, RunOverhead


def _loop(session, steps, stage="train"):
    torch.manual_seed(0)
    m = session.model
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
    for _ in range(steps):
        session.step_begin(stage, (x, y))
        opt.zero_grad()
        loss = nn.functional.cross_entropy(m(x), y)
        session.mark("(backward)", "bwd")
        loss.backward()
        session.mark("(optimizer)")
        opt.step()
        session.step_end(stage)
        session.flush()


def test_plain_loop_with_the_twin():
    """On the twin every step's time and power is one number: the board's step meter's (the twin's model of the
    captured workload in the step's mode, with the meter's noise and the power settling from the idle board), the
    same meter a tuner of the model reads; a profiled step's layers are the twin's per-layer model of the mode,
    scaled to that number, so they sum to it; this machine's times stay available as host times."""
    from lightning_edge.devices.meter import TwinMeter
    from lightning_edge.lightning.steps import shared_loop

    m = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    s = EnergySession(m, "sim:orin-agx", every_n_steps=2, warmup_steps=2)
    _loop(s, 8)
    s.flush(wait=True)
    idx = [p.index for p in s.profiled["train"]]
    assert idx == [2, 4, 6]  # step 0 captures the inputs for the cost model, 1 is warm-up
    assert s.meter is shared_loop(m).twin_meter(s.device)  # the model's one meter on this board
    twin, live = s.device.twin, s.device.live
    cost = s.twin.main_cost(True)[0]
    # the same meter's readings, replayed: a fresh meter of the same seed, the same workload, the same mode
    replay = TwinMeter(twin, seed=0)
    replay.bind_cost(cost, 4, param_tensors=4)
    want = []
    for _ in range(8):
        replay.start()
        want.append(replay.stop(live.current_mode(), "train", 4))
    got = s.totals["train"]
    assert [t.time_s for t in got] == pytest.approx([w.time_s for w in want], rel=1e-12)
    assert [t.power_w for t in got] == pytest.approx([w.power_w for w in want], rel=1e-12)
    assert all(t.label == "simulated" and t.simulated and not t.settled for t in got)  # 8 steps: still settling
    assert all(t.host_time_s > 0 and t.host_time_s != t.time_s for t in got)
    pred = twin.predict(cost, live.current_mode(), kind="train", batch_size=4)
    assert [t.time_s for t in got] == pytest.approx([float(pred.time_s)] * 8, rel=0.15)  # the model, with noise
    for p in s.profiled["train"]:
        assert p.step is got[p.index]  # one record of the step
        assert p.energy.source == "simulated" and p.energy.label == "simulated"
        assert p.energy.time_s == pytest.approx(p.step.time_s, rel=1e-12)
        assert p.energy.layer_sum_j == pytest.approx(p.step.energy_j, rel=1e-9)
        assert sum(x.time_s for x in p.energy.layers.values()) == pytest.approx(p.step.time_s, rel=1e-9)
        assert p.energy.host_time_s == pytest.approx((p.timing.t1_ns - p.timing.t0_ns) / 1e9)
    p = s.profiled["train"][0]
    assert {"0", "1", "2", "(forward)", "(backward)", "(optimizer)"} <= set(p.energy.layers)
    assert s.costs[True]["0"].backward.flops > 0  # the cost model ran on the captured inputs, with backward
    assert live.activity is not None and live.activity.kind == "train"
    lt = twin.layer_times(cost, live.current_mode(), kind="train", batch_size=4)
    rows = [i for i, n in enumerate(lt.names) if n == "0"]
    le = p.energy.layers["0"]
    # the Orin's time and energy of the layer (GPU + launch wait), scaled to the step's reading
    assert le.time_s == pytest.approx(sum(lt.wall_s[i] for i in rows) * p.step.time_s / float(lt.time_s), rel=1e-9)
    assert le.energy_j == pytest.approx(sum(lt.energy_j[i] for i in rows) * p.step.energy_j / float(lt.energy_total_j),
                                        rel=1e-6)
    assert le.host_time_s == pytest.approx(p.timing.exclusive()["0"].self_s)  # this machine's, kept apart
    tot = s.epoch_end("train")
    assert tot.steps == 8 and tot.samples == 32 and tot.label == "simulated"
    assert tot.energy_j == pytest.approx(sum(w.energy_j for w in want), rel=1e-9)
    assert tot.time_s == pytest.approx(sum(w.time_s for w in want), rel=1e-9)
    assert tot.total.host_time_s > 0 and tot.total.host_time_s != tot.time_s
    assert tot.j_per_sample == pytest.approx(tot.energy_j / 32)
    s.close()
    assert s.device.live.activity is None


def test_twin_follows_the_power_mode():
    """A mode change moves every simulated number to the new mode's (the MAXN step is shorter than 15 W's)."""
    m = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    s = EnergySession(m, "sim:orin-agx", every_n_steps=1, warmup_steps=1, settle_s=0.0)
    _loop(s, 3)
    s.flush(wait=True)
    twin, live = s.device.twin, s.device.live
    before = s.totals["train"][-1]
    cur = live.current_mode()
    slow = cur.replace(gpu_mhz=min(twin.space.gpu_mhz))
    assert slow != cur
    live.set_mode(slow)
    _loop(s, 4)
    s.flush(wait=True)
    after = s.totals["train"][-1]
    pred = twin.predict(s.twin.main_cost(True)[0], live.current_mode(), kind="train", batch_size=4)
    early = twin.predict(s.twin.main_cost(True)[0], cur, kind="train", batch_size=4)
    assert after.time_s == pytest.approx(float(pred.time_s), rel=0.15)  # the new mode's model, the meter's noise
    assert before.time_s == pytest.approx(float(early.time_s), rel=0.15) and pred.time_s > 1.3 * early.time_s
    assert after.mode == slow and before.mode == cur and not after.settled  # the power still moves to the new level
    s.close()


def test_warmup_and_every_n_policy():
    m = nn.Linear(6, 3)
    s = EnergySession(m, "none", every_n_steps=3, warmup_steps=2, analyze=False)
    _loop(s, 12)
    s.flush(wait=True)
    assert [p.index for p in s.profiled["train"]] == [2, 5, 8, 11]
    assert all(p.energy.label == "estimated" for p in s.profiled["train"])
    # eval stages count their own steps
    _loop(s, 4, stage="validate")
    s.flush(wait=True)
    assert [p.index for p in s.profiled["validate"]] == [2]


def _steps():
    out = []
    for i, scale in enumerate((1.0, 1.2)):
        layers = {
            "conv": LayerEnergy(0.5 * scale, 0.02, "measured", "conv", "measured", "Conv2d", 0.4, 0.01, 0.01, 1),
            "bn": LayerEnergy(0.1, 0.005, "apportioned", "bn", "measured", "BatchNorm2d", 0.1, 0.002, 0.003, 1),
            "(other)": LayerEnergy(0.05, 0.004, "apportioned", "(other)", "measured", "region", 0.05),
        }
        e = sum(le.energy_j for le in layers.values())
        out.append(StepEnergy(i * 10**8, i * 10**8 + 29_000_000, e, "measured", "measured", layers, 1e-3,
                              samples=8))
    return out


def test_report_files_table_and_summary(tmp_path):
    costs = {"conv": {"fwd": (2e9, 1e8), "bwd": (4e9, 2e8)}}
    rep = ProfileReport.build({"train": _steps()}, costs={"train": costs},
                              totals={"train": {"steps": 20, "energy_j": 13.0, "time_s": 0.6, "samples": 160,
                                                "label": "measured"}},
                              device="jetson: INA3221", source="measured", mode="MAXN", roofline="orin",
                              overhead=RunOverhead(fraction=0.021, every_n_steps=10, sampler_cpu_percent=1.5))
    rows = rep.rows("train")
    assert [r["layer"] for r in rows] == ["conv", "bn", "(other)"]
    assert rows[0]["method"] == "measured" and rows[1]["method"] == "apportioned"
    assert rows[0]["energy_mj"] == pytest.approx(550.0) and rows[0]["flops"] == 6e9
    assert rows[0]["intensity"] == pytest.approx(20.0)
    rep.write_csv(tmp_path / "layers.csv")
    got = list(csv.DictReader(open(tmp_path / "layers.csv")))
    assert list(got[0]) == list(CSV_FIELDS) and len(got) == 3
    rep.write_json(tmp_path / "layers.json")
    doc = json.loads((tmp_path / "layers.json").read_text())
    assert doc["stages"]["train"]["total"]["j_per_sample"] == pytest.approx(13.0 / 160)
    assert doc["statement"] is None and doc["overhead"]["every_n_steps"] == 10
    md = rep.markdown("train")
    assert "| `conv` | Conv2d | measured |" in md
    text = rep.summary(top=2)
    assert "conv" in text and "bn" in text and "(other)" not in text.split("top 2")[1].split("methods")[0]
    assert "13 J" in text and "2.10 %" in text and "every 10 steps" in text
    assert "methods (layer-steps): 4 apportioned, 2 measured" in text

    sim = ProfileReport.build({"train": _steps()}, source="simulated", mode="8c/1344/726.75/2133")
    assert "SIMULATED for a Jetson AGX Orin" in sim.summary() and "8c/1344/726.75/2133" in sim.summary()
    est = ProfileReport.build({"train": _steps()}, source="model", roofline="orin-agx-pagoda MAXN")
    assert "estimated: no power sensor" in est.markdown("train")


def test_write_scalars_batches_and_falls_back_to_add_scalar(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    from lightning_edge.lightning.energy_profiler import write_scalars

    w = SummaryWriter(str(tmp_path))
    write_scalars(w, [("time/a_ms", 1.5), ("energy/a_mj", 2.5), ("power/a_w", float("nan"))], 7)
    w.close()
    acc = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"time/a_ms", "energy/a_mj"}  # non-finite values are left out
    assert acc.Scalars("energy/a_mj")[0].step == 7 and acc.Scalars("energy/a_mj")[0].value == 2.5

    class Plain:  # a writer with only the public API
        def __init__(self):
            self.calls = []

        def add_scalar(self, tag, value, step):
            self.calls.append((tag, value, step))

    p = Plain()
    write_scalars(p, [("x", 1.0), ("y", 2.0)], 3)
    assert p.calls == [("x", 1.0, 3), ("y", 2.0, 3)]


def test_with_a_real_sensor_times_are_this_machines_and_energy_is_measured(tmp_path):
    """Issue 17 item 2: the twin's per-layer model is for the twin only; with a (fake-sysfs) Orin INA3221 sensor
    every time is measured here and the energies are measured or apportioned, as before."""
    from lightning_edge.devices.sensors.ina3221 import INA3221Sensor
    from tests.fakes.ina3221 import build_orin_agx_ina

    board = build_orin_agx_ina(tmp_path / "sys")
    sensor = INA3221Sensor(root=tmp_path / "sys")
    for rail in sensor.total_rails:
        board.set_power_w(rail, 5.0)
    m = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    s = EnergySession(m, sensor, every_n_steps=1, warmup_steps=1)
    _loop(s, 4)
    s.flush(wait=True)
    assert not s.twin_times
    p = s.profiled["train"][-1]
    assert p.energy.sim_time_s is None and p.energy.time_s == p.energy.host_time_s
    assert {le.label for le in p.energy.layers.values()} <= {"measured", "apportioned"}
    assert all(le.host_s == le.time_s for le in p.energy.layers.values())
    assert all(not t.simulated and t.time_s == t.host_time_s and t.label == "measured" for t in s.totals["train"])
    s.close()


def test_bar_chart_is_an_image_with_a_bar_per_layer_and_panel():
    import numpy as np

    from lightning_edge.profiling.report import bar_chart

    img = bar_chart(["a", "b", "c"], [("energy, J", [3.0, 1.0, float("nan")]), ("time, ms", [1.0, 2.0, 0.5])],
                    title="train")
    arr = np.asarray(img)
    assert arr.ndim == 3 and arr.shape[2] == 3 and arr.shape[0] >= 3 * 18
    red = (arr[..., 0] > 150) & (arr[..., 1] < 110) & (arr[..., 2] < 110)
    blue = (arr[..., 2] > 150) & (arr[..., 0] < 110)
    assert red.sum() > 0 and blue.sum() > 0
    # the longest bar is the largest value: row a is wider than row b in the energy panel
    rows = [red[40 + i * 18: 40 + (i + 1) * 18].sum() for i in range(3)]
    assert rows[0] > rows[1] > 0 and rows[2] == 0  # nan: no bar


# ------------------------------------------------------------------ analyze="auto": the cost model within the budget
def _mlp():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


def test_auto_analysis_is_skipped_when_the_run_cannot_afford_it():
    """issue 17 item 3: a run of a few short steps cannot pay for the cost analysis within overhead_target; the
    session says so (and how to force it) and apportions the layers by time."""
    # (a budget of 0.01 % without a floor, whatever the machine's load: with the default 1 s that every run may spend,
    # this run would pay for it: test_a_short_run_gets_its_cost_model_and_a_profiled_step_within_the_floor)
    s = EnergySession(_mlp(), "none", every_n_steps=1, warmup_steps=1, budget=OverheadBudget(1e-4, floor_s=0.0))
    s.start()
    s.new_run()
    s.expect("train", 5)
    _loop(s, 5)
    s.flush(wait=True)
    assert s.costs == {True: {}}
    note = next(n for n in s.cost_notes if "cost model skipped for train" in n)
    assert "overhead budget" in note and "analyze=True" in note
    assert s.profiled["train"]  # still profiled per layer, by time
    assert s.budget.spent_s("analysis") == 0


def test_auto_analysis_runs_when_the_run_is_long_enough():
    s = EnergySession(_mlp(), "none", every_n_steps=1, warmup_steps=2)
    s.expect("train", 10_000_000)  # a long run: the analysis is a small part of its budget
    _loop(s, 4)
    s.flush(wait=True)
    assert s.costs[True]["0"].forward.flops > 0 and s.budget.spent_s("analysis") > 0
    assert not [n for n in s.cost_notes if "skipped" in n]
    assert s.profiled["train"][0].index == 2  # decided at step 1, the step after the capture


def test_a_run_that_cannot_afford_the_analysis_hooks_no_step_for_it():
    """issue 17 item 3, issue 26 item 4: the capture step is no profiled step: the model's calls come from its
    shared capture (a forward pre-hook per module), the layer timer is never started for it, and a run that cannot
    afford the analysis wastes nothing on it; a long run analyses at the step after the capture."""
    hooked = []
    short = EnergySession(_mlp(), "none", every_n_steps=100, warmup_steps=2, budget=OverheadBudget(1e-4, floor_s=0))
    short.start()
    short.new_run()  # the run starts here (not with the board's set-up, first in this process)
    orig = short.timer.start_step
    short.timer.start_step = lambda *a, **k: (hooked.append(short.schedule.stages["train"].batches),
                                              orig(*a, **k))[1]
    short.expect("train", 30)
    _loop(short, 4)
    short.flush(wait=True)
    assert short.costs == {True: {}} and any("skipped" in n for n in short.cost_notes)
    assert hooked == [2]  # only the profiled step 2: the capture step does not start the layer timer
    long = EnergySession(_mlp(), "none", every_n_steps=100, warmup_steps=2)
    long.expect("train", 10_000_000)
    _loop(long, 3)
    long.flush(wait=True)
    assert long.costs[True]["0"].forward.flops > 0 and long.budget.spent_s("analysis") > 0
    assert long.schedule.stages["train"].captured and [p.index for p in long.profiled["train"]] == [2]


@pytest.mark.parametrize("how", ["unknown length", "analyze=True", "twin"])
def test_analysis_at_the_capture_step(how):
    kw = {"analyze": True} if how == "analyze=True" else {}
    s = EnergySession(_mlp(), "sim:orin-agx" if how == "twin" else "none", every_n_steps=1, warmup_steps=1, **kw)
    if how != "unknown length":
        s.expect("train", 2)  # far too short for the budget: only "auto" without a twin would skip
    _loop(s, 1)
    assert s.costs[True]["0"].forward.flops > 0
    s.close()


def test_a_new_run_starts_its_budget_afresh():
    s = EnergySession(_mlp(), "none", every_n_steps=1, warmup_steps=1)
    s.expect("train", 10_000_000)
    s.new_run()
    assert s.expected_batches == {}
    with pytest.raises(ValueError, match="analyze must be True"):
        EnergySession(_mlp(), "none", analyze="sometimes")


def test_auto_every_n_keeps_a_short_run_within_its_whole_budget():
    """issue 17 item 3: the per-step policy alone profiled a 30-step run at steps 2, 12, 22 although the run could
    not afford even its fixed costs within overhead_target; knowing the run's length, it stops after the first."""
    # a clock that ticks 50 us per reading: steps of a fixed, short length whatever the machine's load (on a loaded
    # machine real plain steps slow down, the run's budget grows and more steps are rightly profiled)
    def clock():
        return itertools.count(0, 50_000).__next__

    tick = clock()  # (no floor: the default 1 s would pay for profiled steps on this 30-step run)
    short = EnergySession(_mlp(), "none", warmup_steps=2, analyze=False, clock_ns=tick,
                          budget=OverheadBudget(0.03, floor_s=0.0, clock_ns=tick))
    short.expect("train", 30)
    _loop(short, 30)
    short.flush(wait=True)
    # (a run that cannot pay for even one profiled step and the reports is not profiled per layer: it is told how
    # many batches it would need)
    assert [p.index for p in short.profiled["train"]] == []
    assert short.schedule.stages["train"].min_batches > 30
    assert any(n.startswith("train not profiled per layer") and "30 batches" in n for n in short.notes)
    # a run of unknown length: the per-step rate alone decides (a profiled step costs ~10 plain steps of this clock:
    # N doubles, at most, at each update)
    long = EnergySession(_mlp(), "none", warmup_steps=2, analyze=False, clock_ns=clock())
    long.expect("train", None)
    _loop(long, 30)
    long.flush(wait=True)
    assert [p.index for p in long.profiled["train"]] == [2, 22]
    # a long run of known length: profiling every 20th of its 10M steps would overspend its 5 %: they share it
    long = EnergySession(_mlp(), "none", warmup_steps=2, analyze=False, clock_ns=clock())
    long.expect("train", 10_000_000)
    _loop(long, 30)
    long.flush(wait=True)
    assert [p.index for p in long.profiled["train"]] == [2] and long.schedule.every_n_steps > 20


def test_the_capture_step_counts_in_the_overhead():
    """The capture step (every module hooked, the inputs recorded for the cost model) is overhead like a profiled
    step: it was left out of the measured overhead, which then under-reported short fits."""
    s = EnergySession(_mlp(), "none", warmup_steps=2, analyze=True)
    _loop(s, 1)
    assert s.schedule.stages["train"].n_profiled == 0 and s.costs[True]
    assert s.budget.spent_s("capture") > 0 and s.budget.spent_s() >= s.budget.spent_s("capture")


def test_the_analysis_rate_learns_only_from_analyses_that_ran():
    """The per-module-call cost of the analysis (what analyze="auto" weighs against the budget) is learnt from the
    budget's last analysis; a stage whose cost was already known (or skipped) spends ~0 s and must not teach it that
    analyses are free."""
    s = EnergySession(_mlp(), "none", every_n_steps=1, warmup_steps=1, analyze=True)
    s.budget.costs.analysis_s_per_call[True] = 1.0  # an absurd rate: any real analysis replaces it, a no-op must not
    s.expect("train", 5)
    _loop(s, 2)
    learnt = s.budget.costs.analysis_s_per_call[True]
    assert 0 < learnt < 1.0
    step = s.captures.known(True)
    assert step is not None and step.training
    s._timed_analyze("train", step, 4)  # the train cost is known: nothing runs
    assert s.budget.costs.analysis_s_per_call[True] == learnt


class _SlowToAnalyse(nn.Module):
    """Trains as fast as any MLP; its analysis (a run on the meta device) takes a second."""

    def __init__(self):
        super().__init__()
        self.net = _mlp()

    def forward(self, x):
        if x.device.type == "meta":
            import time

            time.sleep(1.0)
        return self.net(x)


def test_what_one_session_measures_does_not_move_another_sessions_decisions():
    """issue 26 item 5: the learned costs were process-wide (module-level lists and dicts): a run that measured a slow
    analysis (a big model, a loaded machine) taught every later run in the process that analyses are slow, and a
    later, ordinary run skipped its cost model. Each session's budget keeps what it measured."""
    def run(model):
        clock = itertools.count(0, 1_000_000).__next__  # 1 ms per reading: steps of a few ms, whatever the load
        s = EnergySession(model, "none", every_n_steps=1, warmup_steps=2, clock_ns=clock)
        s.expect("train", 20_000)
        _loop(s, 3)
        s.flush(wait=True)
        return s

    before = run(_mlp())
    assert before.costs[True] and not [n for n in before.cost_notes if "skipped" in n]
    slow = run(_SlowToAnalyse())  # its analysis ran (a long run), and took a second
    assert slow.costs[True]
    after = run(_mlp())
    assert after.costs[True] and not [n for n in after.cost_notes if "skipped" in n], after.cost_notes


def test_a_plain_loop_drives_the_reporter_as_the_callback_does(tmp_path):
    """issue 26 item 5: the callback is thin glue over EnergyReporter, which a loop without Lightning drives: a short
    run on the twin gets its step totals, a profiled step with its per-layer table (layers.json), TensorBoard
    scalars, and its overhead measured through the one budget."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from lightning_edge.lightning.reporter import EnergyReporter

    torch.manual_seed(0)
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
    rep = EnergyReporter(model, "sim:orin-agx", log_dir=tmp_path, print_summary=False)
    rep.begin_run("fit", expected={"train": 12})
    for i in range(12):
        rep.step_begin("train", (x, y), global_step=i)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        rep.mark("(backward)", "bwd")
        loss.backward()
        rep.mark("(optimizer)")
        opt.step()
        rep.step_end("train", global_step=i)
    rep.epoch_end("train")
    report = rep.finish("fit", global_step=12)
    rep.close()
    doc = json.loads((tmp_path / "layers.json").read_text())
    train = doc["stages"]["train"]
    assert train["profiled_steps"] >= 1 and train["total_steps"] == 12
    assert train["step"]["time_s"] > 0 and train["step"]["energy_j"] > 0 and train["step"]["method"] == "simulated"
    assert {"0", "1", "2"} <= {r["layer"] for r in train["layers"]}
    assert report is rep.call_report and "EnergyProfiler summary" in rep.summary_text
    o = doc["overhead"]
    assert o["run_overhead_s"] == pytest.approx(rep.budget.spent_s(), rel=1e-6)
    assert o["setup_s"] > 0 and o["excess_s"] > 0  # the analysis and the profiled steps, charged by their parts
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert "energy_j_sim/train/step" in acc.Tags()["scalars"] and "energy_j_sim_layer/train/0" in acc.Tags()["scalars"]


def test_a_short_run_gets_its_cost_model_and_a_profiled_step_within_the_floor():
    """issue 28: the budget was 3 % of the run, so a run of 40 short steps could pay for neither the cost analysis nor
    a profiled step: no layer table, and advice to run 116 batches. The rule is 5 % of the run or 1 s, whichever is
    larger: the run gets both (a clock of 50 us per reading: steps of a fixed, short length whatever the load)."""
    s = EnergySession(_mlp(), "none", warmup_steps=2, clock_ns=itertools.count(0, 50_000).__next__)
    s.expect("train", 40)
    _loop(s, 40)
    s.flush(wait=True)
    assert s.costs[True] and not [n for n in s.cost_notes if "skipped" in n]
    assert [p.index for p in s.profiled["train"]][:1] == [2] and not s.notes
