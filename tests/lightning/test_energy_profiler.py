"""EnergyProfiler in real Trainers of both Lightning packages; TensorBoard output read back from the event files."""

from __future__ import annotations

import csv
import glob
import json
import os
from collections import defaultdict

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn
from torch.nn.modules import module as nn_module
from torch.utils.data import DataLoader, TensorDataset

PACKAGES = ["lightning.pytorch", "pytorch_lightning"]


def _pkg(name):
    if name == "lightning.pytorch":
        L = pytest.importorskip("lightning.pytorch")
        from lightning.pytorch.loggers import TensorBoardLogger

        from lightning_edge.lightning.pytorch import EnergyProfiler
    else:
        L = pytest.importorskip("pytorch_lightning")
        from pytorch_lightning.loggers import TensorBoardLogger

        from lightning_edge.lightning.pl import EnergyProfiler
    return L, TensorBoardLogger, EnergyProfiler


def _module(L, fail_at: int | None = None):
    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
                                     nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, i):
            if fail_at is not None and i == fail_at:
                raise RuntimeError("training step failed on purpose")
            x, y = batch
            return nn.functional.cross_entropy(self(x), y)

        def validation_step(self, batch, i):
            x, y = batch
            self.log("val_loss", nn.functional.cross_entropy(self(x), y))

        def test_step(self, batch, i):
            x, y = batch
            self.log("test_loss", nn.functional.cross_entropy(self(x), y))

        def predict_step(self, batch, i):
            return self(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    return Lit()


def _loader(n=48, bs=8):
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 4, (n,), generator=g))
    return DataLoader(ds, batch_size=bs)


def _trainer(L, tmp_path, callbacks, logger=None, **kw):
    args = dict(max_steps=6, logger=logger if logger is not None else False, enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
                callbacks=callbacks, default_root_dir=str(tmp_path), limit_val_batches=3, num_sanity_val_steps=0)
    args.update(kw)
    return L.Trainer(**args)


def _events(log_dir):
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "images": 0, "tensors": 0,
                                                         "histograms": 0, "audio": 0, "compressedHistograms": 0})
    acc.Reload()
    return acc


def _no_global_hooks():
    return not nn_module._global_forward_hooks and not nn_module._global_forward_pre_hooks


@pytest.mark.parametrize("package", PACKAGES)
def test_fit_with_the_twin_writes_tensorboard_reports_and_trace(package, tmp_path, capsys):
    L, TensorBoardLogger, EnergyProfiler = _pkg(package)
    cb = EnergyProfiler(device="sim:orin-agx", every_n_steps=1, warmup_steps=1, figure=True, log_layers="all",
                        trace=True)
    logger = TensorBoardLogger(str(tmp_path), name="run")
    trainer = _trainer(L, tmp_path, [cb], logger=logger)
    dl = _loader()
    trainer.fit(_module(L), dl, dl)
    assert _no_global_hooks()
    log_dir = logger.log_dir
    assert cb.log_dir == log_dir

    acc = _events(log_dir)
    scalars = set(acc.Tags()["scalars"])
    # every time/energy/power card says it is simulated in its path, one unit per family
    for tag in ("time_ms_sim_layer/train/net.0", "energy_j_sim_layer/train/net.0", "time_ms_sim/train/step",
                "energy_j_sim/train/step", "power_w_sim/train/step", "energy_j_sim/train/epoch",
                "energy_j_sim/train/per_sample", "energy_j_sim/validate/step", "time_ms_sim_layer/validate/net.0",
                "time_ms_host/train/step", "time_ms_host_layer/train/net.0", "energy_j_sim_region/train/optimizer"):
        assert tag in scalars, tag
    assert all(("_sim" in t.split("/")[0]) != ("_host" in t.split("/")[0])
               for t in scalars if "time_ms" in t or "energy_j" in t), scalars
    assert not [t for t in scalars if t.startswith("power_w") and "_layer/" in t]  # per-layer power only on request
    assert not [t for t in scalars if t.endswith("_mj") or "/mj" in t]
    # the card's description says simulated (TensorBoard shows it on the card)
    meta = acc.SummaryMetadata("energy_j_sim/train/step")
    assert "SIMULATED" in meta.summary_description and "Jetson AGX Orin" in meta.summary_description
    assert "this machine" in acc.SummaryMetadata("time_ms_host/train/step").summary_description
    # a custom scalars layout, once per run
    layouts = [t for t in acc.Tags()["tensors"] if t == "custom_scalars__config__"]
    assert len(layouts) == 1 and len(acc.Tensors(layouts[0])) == 1
    from tensorboard.plugins.custom_scalar import layout_pb2

    lay = layout_pb2.Layout()
    lay.ParseFromString(acc.Tensors(layouts[0])[0].tensor_proto.string_val[0])
    titles = {c.title for cat in lay.category for c in cat.chart}
    assert {"step energy (J)", "epoch energy (J)", "train: top layers, energy per step (J)"} <= titles
    assert "roofline/train" in acc.Tags()["images"] and "layers/train" in acc.Tags()["images"]  # figure=True
    assert any(t.startswith("energy/train_layers") for t in acc.Tags()["tensors"])
    text = acc.Tensors([t for t in acc.Tags()["tensors"] if t.startswith("energy/train_layers")][0])[0]
    md = text.tensor_proto.string_val[0].decode()
    assert "SIMULATED" in md and "`net.0`" in md

    # the layers and the rows outside them of a profiled step sum to that step's simulated energy (every layer
    # logged: log_layers="all")
    per_step = defaultdict(float)
    for tag in scalars:
        if tag.startswith(("energy_j_sim_layer/train/", "energy_j_sim_region/train/")):
            for ev in acc.Scalars(tag):
                per_step[ev.step] += ev.value
    steps = {ev.step: ev.value for ev in acc.Scalars("energy_j_sim/train/step")}
    assert per_step and set(per_step) <= set(steps)
    for s, e in per_step.items():
        assert e == pytest.approx(steps[s], rel=1e-4)
        assert 0.0 < steps[s] < 67 * 10  # below the board's cap x a generous step time

    # reports: the twin's times, this machine's apart
    rows = list(csv.DictReader(open(os.path.join(log_dir, "layers.csv"))))
    assert {r["stage"] for r in rows} == {"train", "validate"}
    assert {r["method"] for r in rows} == {"simulated"}
    conv = next(r for r in rows if r["stage"] == "train" and r["layer"] == "net.0")
    assert float(conv["time_ms"]) > 0 and float(conv["flops"]) > 0 and float(conv["bwd_ms"]) > 0
    assert float(conv["host_time_ms"]) > 0 and conv["host_time_ms"] != conv["time_ms"]
    doc = json.load(open(os.path.join(log_dir, "layers.json")))
    assert doc["source"] == "simulated" and "SIMULATED" in doc["statement"]
    assert doc["stages"]["train"]["profiled_steps"] >= 4 and doc["stages"]["train"]["total_steps"] == 6
    assert doc["overhead"]["every_n_steps"] == 1
    step = doc["stages"]["train"]["step"]
    assert step["host_time_s"] > 0 and step["time_s"] != step["host_time_s"]
    layer_sum = sum(r["energy_mj"] for r in doc["stages"]["train"]["layers"]) / 1e3
    assert layer_sum == pytest.approx(step["energy_j"], rel=1e-4)
    assert doc["overhead"]["run_wall_s"] > 0 and doc["overhead"]["run_overhead_s"] > 0

    # the Chrome/Perfetto trace, in the torch-tb-profiler layout
    traces = glob.glob(os.path.join(log_dir, "plugins", "profile", "energy", "*.pt.trace.json"))
    assert len(traces) == 1 and str(cb.trace_file) == traces[0]
    tr = json.load(open(traces[0]))
    spans = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    assert any(e["name"] == "net.0" and e["args"]["phase"] == "bwd" for e in spans)
    assert any(e["name"].startswith("ProfilerStep#") for e in spans)
    counters = {e["name"] for e in tr["traceEvents"] if e["ph"] == "C"}
    assert {"power total (W)", "power VDD_GPU_SOC (W)", "power VDD_CPU_CV (W)"} <= counters

    out = capsys.readouterr().out
    assert "EnergyProfiler summary" in out and "SIMULATED for a Jetson AGX Orin" in out
    assert "this machine's measured times are host_time" in out and "top" in out and "overhead" in out


@pytest.mark.parametrize("package", PACKAGES)
def test_validate_test_predict_without_logger_or_sensor(package, tmp_path, capsys):
    L, _TB, EnergyProfiler = _pkg(package)
    cb = EnergyProfiler(device="none", every_n_steps=1, warmup_steps=1, trace=False, figure=False, analyze=True)
    trainer = _trainer(L, tmp_path, [cb])
    model = _module(L)
    dl = _loader(n=32)
    trainer.validate(model, dl)
    trainer.test(model, dl)
    preds = trainer.predict(model, dl)
    assert len(preds) == 4
    assert cb.log_dir.startswith(str(tmp_path / "lightning_logs" / "energy"))  # own SummaryWriter
    acc = _events(cb.log_dir)
    scalars = set(acc.Tags()["scalars"])
    for tag in ("energy_j_estimated/validate/step", "energy_j_estimated/test/step", "energy_j_estimated/predict/step",
                "time_ms_layer/test/net.0", "energy_j_estimated_layer/test/net.0", "energy_j_estimated/test/epoch",
                "energy_j_estimated/predict/per_sample"):
        assert tag in scalars, tag
    assert "ESTIMATED" in acc.SummaryMetadata("energy_j_estimated/test/step").summary_description
    doc = json.load(open(os.path.join(cb.log_dir, "layers.json")))
    assert doc["source"] == "model" and set(doc["stages"]) == {"validate", "test", "predict"}
    for st in doc["stages"].values():
        assert {r["method"] for r in st["layers"]} == {"estimated"}
        assert all(r["bwd_ms"] == 0 for r in st["layers"])
        # the cost model ran outside Lightning's inference_mode: the Linear layer is counted
        assert next(r for r in st["layers"] if r["layer"] == "net.5")["flops"] > 0
    out = capsys.readouterr().out
    assert "estimated: no power sensor" in out


def test_default_arguments_and_the_package_level_name(tmp_path):
    import lightning_edge.lightning as le_lightning

    L = pytest.importorskip("lightning.pytorch")
    EnergyProfiler = le_lightning.EnergyProfiler
    assert issubclass(EnergyProfiler, L.Callback)
    cb = EnergyProfiler(print_summary=False)  # no arguments needed
    trainer = _trainer(L, tmp_path, [cb], max_steps=5)
    trainer.fit(_module(L), _loader())
    s = cb.session
    # issue 28: every fit gets numbers. 5 batches of a few ms: the run may spend 1 s (5 % of it is less), which pays
    # for a profiled step after the 2 warm-up steps and its per-layer table; what it spent is measured and within it
    assert s.schedule.auto and [p.index for p in s.profiled["train"]][:1] == [2]
    st = cb.report.stages["train"]
    assert st.total_steps == 5 and st.profiled_steps >= 1 and st.layers and "net.0" in st.layers
    o = cb.overhead  # (the bound itself is benchmarks/overhead.py's to check: BENCHMARKS.md)
    assert 0 < o.run_overhead_s < o.run_wall_s and o.run_overhead_s == pytest.approx(cb.budget.spent_s())
    assert not any(n.startswith("train not profiled per layer") for n in cb.report.notes)


def test_a_run_that_its_budget_cannot_pay_for_is_told_once_what_it_needs(tmp_path):
    """Without the 1 s floor (an injected budget of 0.01 %, so that no load on the machine makes this run long enough),
    5 batches cannot pay for a profiled step: none is profiled and the summary says how many batches it would need,
    computed once for the run."""
    from lightning_edge.lightning.budget import OverheadBudget

    L, _TB, EnergyProfiler = _pkg("lightning.pytorch")
    cb = EnergyProfiler(print_summary=False, budget=OverheadBudget(1e-4, floor_s=0.0))
    _trainer(L, tmp_path, [cb], max_steps=5).fit(_module(L), _loader())
    assert cb.session.profiled["train"] == []
    st = cb.report.stages["train"]
    assert st.total_steps == 5 and st.min_batches > 5
    assert f"needs at least {st.min_batches} batches (to pay for one profiled step within the overhead budget" in (
        cb.summary_text)
    (note,) = [n for n in cb.report.notes if n.startswith("train not profiled per layer")]
    assert f"it needs about {st.min_batches} batches" in note and "overhead_target=" in note


def test_exception_in_a_step_removes_every_hook(tmp_path):
    L = pytest.importorskip("lightning.pytorch")
    from lightning_edge.lightning.pytorch import EnergyProfiler

    cb = EnergyProfiler(device="none", every_n_steps=1, warmup_steps=1, print_summary=False)
    trainer = _trainer(L, tmp_path, [cb])
    with pytest.raises(RuntimeError, match="on purpose"):
        trainer.fit(_module(L, fail_at=2), _loader())
    assert _no_global_hooks()
    assert not cb.session.timer.active


def test_steps_after_a_power_mode_change_are_not_profiled(tmp_path):
    L = pytest.importorskip("lightning.pytorch")
    from lightning_edge.devices.sim.device import SimulatedOrin
    from lightning_edge.lightning.pytorch import EnergyProfiler

    dev = SimulatedOrin(noise=False)
    target = str(dev.space.coerce("8c/1344/727/2133"))

    class Switch(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == 3:
                dev.controller.apply(target)

    cb = EnergyProfiler(device=dev, every_n_steps=1, warmup_steps=2, settle_s=0.0, print_summary=False,
                        trace=False)
    trainer = _trainer(L, tmp_path, [Switch(), cb], max_steps=9)
    trainer.fit(_module(L), _loader(n=80))
    idx = [p.index for p in cb.session.profiled["train"]]
    assert idx == [2, 6, 7, 8]  # 0-1 warm-up; 3 sees the change, 4-5 are its warm-up
    assert any("power mode changed" in n for n in cb.report.notes)
    modes = {p.index: p.mode for p in cb.session.profiled["train"]}
    assert modes[2] != modes[6] and modes[6] == target
    assert target in cb.report.roofline

    # with the settling time, nothing is profiled for settle_s after the change
    cb2 = EnergyProfiler(device=SimulatedOrin(noise=False), every_n_steps=1, warmup_steps=2, settle_s=3600.0,
                         print_summary=False, trace=False, figure=False)
    dev = cb2.device
    trainer = _trainer(L, tmp_path, [Switch(), cb2], max_steps=9)
    trainer.fit(_module(L), _loader(n=80))
    assert [p.index for p in cb2.session.profiled["train"]] == [2]


def test_power_and_layer_energy_go_into_lightnings_pytorch_profiler_trace(tmp_path):
    """Issue 17 item 6: with Lightning's PyTorchProfiler running, its own trace gets the power counter tracks and
    the layers with their FLOP, bytes and energy (a process of their own), beside its operators."""
    L = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.profilers import PyTorchProfiler

    from lightning_edge.lightning.pytorch import EnergyProfiler
    from lightning_edge.profiling.trace import MERGED_PID

    cb = EnergyProfiler(device="sim:orin-agx", every_n_steps=1, warmup_steps=1, print_summary=False, figure=False,
                        log_dir=str(tmp_path / "energy"))
    prof = PyTorchProfiler(dirpath=str(tmp_path / "prof"), filename="p")
    trainer = _trainer(L, tmp_path, [cb], profiler=prof, max_steps=8)
    trainer.fit(_module(L), _loader(n=80))
    traces = [p for p in glob.glob(str(tmp_path / "prof" / "**" / "*.pt.trace.json"), recursive=True)]
    assert traces, os.listdir(tmp_path / "prof")
    merged, layers = 0, []
    for p in traces:
        doc = json.load(open(p))
        ours = [e for e in doc["traceEvents"] if e.get("pid") == MERGED_PID]
        if not ours:
            continue
        merged += 1
        assert any(e["ph"] == "C" and e["name"] == "power total (W)" for e in ours)
        assert any(e.get("cat") == "cpu_op" and e["name"].startswith("aten::") for e in doc["traceEvents"])
        layers += [e for e in ours if e["ph"] == "X" and e["name"] == "net.0"]
    assert merged >= 1 and layers
    assert all(e["args"]["flops"] > 0 and e["args"]["energy_mj"] > 0 for e in layers)
    assert prof.describe.__func__ is type(prof).describe  # its own method given back


def test_on_the_twin_the_fit_reports_the_boards_one_meter(tmp_path):
    """Issue 37 (item 5; it was issue 17's noise-free twin, a second story beside the tuner's): on the twin a step has
    one number, the board's step meter's (the twin's model of the workload in the step's mode, with the meter's noise
    and the power settling from the idle board), the meter a PowerModeTuner of the model reads too; step time, step
    energy, epoch energy and J/sample are those readings, the per-layer table sums to them, and the headline is the
    mode's figure over them; not this CPU's time x the Orin's power."""
    L = pytest.importorskip("lightning.pytorch")
    from lightning_edge.devices.meter import TwinMeter
    from lightning_edge.devices.sim.device import SimulatedOrin
    from lightning_edge.lightning.pytorch import EnergyProfiler
    from lightning_edge.lightning.steps import shared_loop
    from lightning_edge.twin.workload import count_param_tensors

    dev = SimulatedOrin(noise=False)
    cb = EnergyProfiler(device=dev, every_n_steps=1, warmup_steps=1, print_summary=False, figure=False,
                        log_dir=str(tmp_path / "energy"))
    model = _module(L)
    trainer = _trainer(L, tmp_path, [cb], max_steps=6)
    trainer.fit(model, _loader(n=48))
    s = cb.session
    assert s.meter is shared_loop(model).twin_meter(s.device)
    replay = TwinMeter(dev.twin, seed=0)  # the same meter, replayed: same seed, workload and mode
    replay.bind_cost(s.twin.main_cost(True)[0], 8, param_tensors=count_param_tensors(model))
    want = []
    for _ in range(6):
        replay.start()
        want.append(replay.stop(dev.live.current_mode(), "train", 8))
    got = s.totals["train"]
    assert [m.time_s for m in got] == pytest.approx([w.time_s for w in want], rel=1e-12)
    assert [m.energy_j for m in got] == pytest.approx([w.energy_j for w in want], rel=1e-12)
    doc = json.load(open(os.path.join(cb.log_dir, "layers.json")))
    train = doc["stages"]["train"]
    st = cb.report.stages["train"]
    head = st.headline
    assert head.role == "ended in" and head.mode == str(dev.live.current_mode()) and head.all_steps == 6
    t_s = sum(w.time_s for w in want) / 6  # 6 steps of a few ms: none settled, the figure is over all of them
    p_w = sum(w.energy_j for w in want) / sum(w.time_s for w in want)
    assert not head.settled and head.step_time_s == pytest.approx(t_s, rel=1e-9)
    assert head.power_w == pytest.approx(p_w, rel=1e-9)
    assert train["step"]["time_s"] == pytest.approx(t_s, abs=1e-6)  # the file (rounded to 1e-6)
    assert train["step"]["power_w"] == pytest.approx(p_w, abs=1e-6) and train["step"]["mode"] == head.mode
    assert train["step"]["host_time_s"] > 0
    # the layers: the twin's model of the mode, scaled to the mode's step
    assert sum(ls.energy_j for ls in st.layers.values()) == pytest.approx(t_s * p_w, rel=1e-9)
    assert sum(ls.time_s for ls in st.layers.values()) == pytest.approx(t_s, rel=1e-9)
    assert all(r["host_time_ms"] is not None for r in train["layers"] if r["layer"].startswith("net."))
    for p in s.profiled["train"]:  # every profiled step: the meter's step, its layers summing to it
        assert p.step is got[p.index]
        assert p.energy.sim_time_s == pytest.approx(want[p.index].time_s, rel=1e-12)
        assert p.energy.layer_sum_j == pytest.approx(want[p.index].energy_j, rel=1e-9)
    (ep,) = train["epochs"]
    e_ep = sum(w.energy_j for w in want)
    assert ep["energy_j"] == pytest.approx(e_ep, rel=1e-9)
    assert ep["time_s"] == pytest.approx(sum(w.time_s for w in want))
    assert ep["j_per_sample"] == pytest.approx(e_ep / 48, rel=1e-9) and ep["method"] == "simulated"
    opt = next(r for r in train["layers"] if r["layer"] == "(optimizer)")
    assert opt["time_ms"] / 1e3 < t_s  # the Orin's optimizer step, not this machine's


def test_tensorboard_stays_readable_on_a_deep_model_and_figures_are_drawn_once_per_call(tmp_path):
    """Issue 17 items 3 and 5: a demo run wrote 986 scalar tags (one energy, time and power card per layer) and drew
    the roofline figure every epoch; now the per-layer cards are the top 10 layers, and tables and figures are made
    once per Trainer call (figure=True), or not at all when they do not fit the overhead budget (figure='auto')."""
    L = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loggers import TensorBoardLogger

    from lightning_edge.lightning.pytorch import EnergyProfiler

    class Deep(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(*[m for _ in range(20) for m in (nn.Linear(16, 16), nn.ReLU())],
                                     nn.Linear(16, 4))

        def training_step(self, batch, i):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    g = torch.Generator().manual_seed(0)
    dl = DataLoader(TensorDataset(torch.randn(16, 16, generator=g), torch.randint(0, 4, (16,), generator=g)),
                    batch_size=4)
    cb = EnergyProfiler(device="sim:orin-agx", every_n_steps=1, warmup_steps=1, figure=True, print_summary=False)
    logger = TensorBoardLogger(str(tmp_path), name="deep")
    trainer = _trainer(L, tmp_path, [cb], logger=logger, max_steps=-1, max_epochs=3)  # 3 short epochs
    trainer.fit(Deep(), dl)
    acc = _events(logger.log_dir)
    scalars = acc.Tags()["scalars"]
    assert len([t for t in scalars if "_layer/" in t]) == 3 * 10  # time, energy, host time of the top 10
    regions = {t.rsplit("/", 1)[1] for t in scalars if "_region/" in t}  # (optimizer), (loss), ...: a few rows
    assert regions and len(regions) <= 6 and "optimizer" in regions and not any("(" in r for r in regions), regions
    assert len(scalars) <= 30 + 3 * len(regions) + 20, len(scalars)
    assert len(acc.Images("roofline/train")) == 1 and len(acc.Images("layers/train")) == 1  # not per epoch
    (text_tag,) = [t for t in acc.Tags()["tensors"] if t.startswith("energy/train_layers")]
    assert len(acc.Tensors(text_tag)) == 1

    # figure="auto": the figures cost more than this short fit's budget (injected: 0.01 %, no floor), so they are
    # left out, and the summary says so
    from lightning_edge.lightning.budget import OverheadBudget

    cb = EnergyProfiler(device="none", every_n_steps=1, warmup_steps=1, print_summary=False,
                        budget=OverheadBudget(1e-4, floor_s=0.0))
    logger = TensorBoardLogger(str(tmp_path), name="short")
    _trainer(L, tmp_path, [cb], logger=logger, max_steps=-1, max_epochs=2).fit(Deep(), dl)
    acc = _events(logger.log_dir)
    assert "roofline/train" not in acc.Tags()["images"]
    assert any(n.startswith("roofline figures not drawn") for n in cb.report.notes)
    assert "roofline figures not drawn" in cb.summary_text and "overhead:" in cb.summary_text
    # the bar chart too is drawn when the budget allows it (about 20 ms: more than 3 % of a fit shorter than 0.7 s)
    # (with the default 1 s floor both are, on this fit: docs/profiler.md)
    drawn = "layers/train" in acc.Tags()["images"]
    assert drawn != any(n.startswith("layer bar charts not drawn") for n in cb.report.notes)


def test_a_torch_profiler_around_fit_gets_the_layers_and_power(tmp_path):
    """Issue 17 item 6 with a bare torch.profiler.profile: its trace is written after fit returns, so the summary
    says how to merge, and merge_into_trace adds the layers (FLOP, bytes, energy) and power tracks on its clock."""
    L = pytest.importorskip("lightning.pytorch")
    from torch.profiler import ProfilerActivity, profile

    from lightning_edge.lightning.pytorch import EnergyProfiler
    from lightning_edge.profiling.trace import MERGED_PID

    cb = EnergyProfiler(device="sim:orin-agx", every_n_steps=1, warmup_steps=1, print_summary=False, figure=False,
                        log_dir=str(tmp_path / "energy"))
    trainer = _trainer(L, tmp_path, [cb], max_steps=4)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        trainer.fit(_module(L), _loader())
    assert "EnergyProfiler.merge_into_trace(path)" in cb.summary_text
    path = tmp_path / "torch_trace.json"
    prof.export_chrome_trace(str(path))
    assert cb.merge_into_trace(path) > 0
    doc = json.load(open(path))
    ours = [e for e in doc["traceEvents"] if e.get("pid") == MERGED_PID]
    assert any(e["ph"] == "C" and e["name"] == "power total (W)" for e in ours)
    net0 = [e for e in ours if e["ph"] == "X" and e["name"] == "net.0"]
    assert net0 and all(e["args"]["flops"] > 0 and e["args"]["energy_mj"] > 0 for e in net0)
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op" and e.get("name", "").startswith("aten::conv")]
    # on the same clock: a traced net.0 forward span overlaps one of the profiler's convolutions
    fwd = [e for e in net0 if e["args"]["phase"] == "fwd"]
    assert any(o["ts"] <= f["ts"] + f["dur"] and f["ts"] <= o["ts"] + o.get("dur", 0) for f in fwd for o in ops)


def test_step_totals_follow_the_trainers_log_every_n_steps(tmp_path):
    """A plain step's time/energy/power scalars are written at the Trainer's log_every_n_steps (as Lightning writes
    its own metrics; a TensorBoard event costs tens of microseconds on every step otherwise); a profiled step's
    always, so its layers can be read against its total."""
    L, TensorBoardLogger, EnergyProfiler = _pkg("lightning.pytorch")
    cb = EnergyProfiler(device="none", every_n_steps=4, warmup_steps=1, trace=False, figure=False, analyze=False,
                        print_summary=False)
    logger = TensorBoardLogger(str(tmp_path), name="run")
    trainer = _trainer(L, tmp_path, [cb], logger=logger, max_steps=12, log_every_n_steps=5, limit_val_batches=0)
    trainer.fit(_module(L), _loader(n=96))
    acc = _events(logger.log_dir)
    logged = sorted(ev.step for ev in acc.Scalars("energy_j_estimated/train/step"))
    prof = cb.session.profiled["train"]
    profiled = {p.global_step for p in prof}
    offset = prof[0].global_step - prof[0].index  # the Trainer's global step at a batch's end: its index + 1
    every_5th = {i + offset for i in (4, 9)}  # batches 5 and 10
    assert profiled and len(every_5th) == 2 and offset == 1
    assert logged == sorted(profiled | every_5th)


def test_trace_auto_is_written_only_within_the_overhead_budget(tmp_path):
    """trace='auto' (the default) writes the Chrome trace when its expected cost fits the call's overhead budget, like
    figure='auto'; a run that has spent its budget (every step profiled on a tiny model) gets a
    note instead (a budget of 0.01 % without a floor: whatever the machine's load)."""
    from lightning_edge.lightning.budget import OverheadBudget

    L, _TB, EnergyProfiler = _pkg("lightning.pytorch")
    cb = EnergyProfiler(device="none", every_n_steps=1, warmup_steps=1, figure=False, analyze=False,
                        print_summary=False, log_dir=str(tmp_path / "auto"), budget=OverheadBudget(1e-4, floor_s=0))
    _trainer(L, tmp_path, [cb]).fit(_module(L), _loader())
    assert cb.trace_file is None and not list((tmp_path / "auto").rglob("*.pt.trace.json"))
    note = next(n for n in cb.report.notes if n.startswith("the Chrome trace not written"))
    assert "overhead budget" in note and "EnergyProfiler(trace=True) always writes" in note
    assert (tmp_path / "auto" / "layers.csv").exists()  # the reports are always written
    cb = EnergyProfiler(device="none", every_n_steps=1, warmup_steps=1, figure=False, analyze=False,
                        print_summary=False, log_dir=str(tmp_path / "always"), trace=True)
    _trainer(L, tmp_path, [cb]).fit(_module(L), _loader())
    assert cb.trace_file is not None and cb.trace_file.exists()
    with pytest.raises(ValueError, match="trace must be True"):
        EnergyProfiler(trace="sometimes")


def test_a_short_fit_on_a_real_sensor_gets_a_profiled_step_with_its_layer_table(tmp_path):
    """issue 28: on a real sensor too (a fake-sysfs Orin INA3221 here), a fit of a few batches with the defaults gets
    its step totals measured and a profiled step with its per-layer table, within the budget's 1 s floor."""
    from lightning_edge.devices.sensors.ina3221 import INA3221Sensor
    from tests.fakes.ina3221 import build_orin_agx_ina

    L, _TB, EnergyProfiler = _pkg("lightning.pytorch")
    board = build_orin_agx_ina(tmp_path / "sys")
    sensor = INA3221Sensor(root=tmp_path / "sys")
    for rail in sensor.total_rails:
        board.set_power_w(rail, 5.0)
    cb = EnergyProfiler(device=sensor, print_summary=False, log_dir=str(tmp_path / "energy"))
    _trainer(L, tmp_path, [cb], max_steps=8).fit(_module(L), _loader(n=80))
    doc = json.load(open(os.path.join(cb.log_dir, "layers.json")))
    train = doc["stages"]["train"]
    assert train["profiled_steps"] >= 1 and train["total"]["method"].startswith("measured")
    assert {r["method"] for r in train["layers"]} <= {"measured", "apportioned"} and len(train["layers"]) >= 6
    assert train["step"]["energy_j"] > 0 and not [n for n in doc["notes"] if "not profiled per layer" in n]
