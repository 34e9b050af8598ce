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
    cb = EnergyProfiler(device="sim:orin-agx", every_n_steps=1, warmup_steps=1)
    logger = TensorBoardLogger(str(tmp_path), name="run")
    trainer = _trainer(L, tmp_path, [cb], logger=logger)
    dl = _loader()
    trainer.fit(_module(L), dl, dl)
    assert _no_global_hooks()
    log_dir = logger.log_dir
    assert cb.log_dir == log_dir

    acc = _events(log_dir)
    scalars = set(acc.Tags()["scalars"])
    for tag in ("time/net.0_ms", "energy/net.0_mj", "power/net.0_w", "intensity/net.0", "time/step_ms",
                "energy/step_j", "power/step_w", "energy/epoch_j", "energy/j_per_sample", "energy/val/step_j",
                "time/val/net.0_ms", "energy/(backward)_mj"):
        assert tag in scalars, tag
    assert "roofline/train" in acc.Tags()["images"]
    assert any(t.startswith("energy/train_layers") for t in acc.Tags()["tensors"])
    text = acc.Tensors([t for t in acc.Tags()["tensors"] if t.startswith("energy/train_layers")][0])[0]
    md = text.tensor_proto.string_val[0].decode()
    assert "SIMULATED" in md and "`net.0`" in md

    # the layers of a profiled step sum to that step's measured (simulated) energy
    per_step = defaultdict(float)
    for tag in scalars:
        if tag.startswith("energy/") and tag.endswith("_mj") and "/val/" not in tag:
            for ev in acc.Scalars(tag):
                per_step[ev.step] += ev.value / 1e3
    steps = {ev.step: ev.value for ev in acc.Scalars("energy/step_j")}
    assert per_step and set(per_step) <= set(steps)
    for s, e in per_step.items():
        assert e == pytest.approx(steps[s], rel=1e-4)
        assert 0.0 < steps[s] < 67 * 10  # below the board's cap x a generous step time
    intensity = acc.Scalars("intensity/net.0")[0].value
    assert 0.1 < intensity < 1000

    # reports
    rows = list(csv.DictReader(open(os.path.join(log_dir, "layers.csv"))))
    assert {r["stage"] for r in rows} == {"train", "validate"}
    assert {r["method"] for r in rows} <= {"simulated-measured", "simulated-apportioned"}
    conv = next(r for r in rows if r["stage"] == "train" and r["layer"] == "net.0")
    assert float(conv["time_ms"]) > 0 and float(conv["flops"]) > 0 and float(conv["bwd_ms"]) > 0
    doc = json.load(open(os.path.join(log_dir, "layers.json")))
    assert doc["source"] == "simulated" and "SIMULATED" in doc["statement"]
    assert doc["stages"]["train"]["profiled_steps"] >= 4 and doc["stages"]["train"]["total_steps"] == 6
    assert doc["overhead"]["every_n_steps"] == 1

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
    assert "timings are measured on this machine" in out and "top" in out and "overhead" in out


@pytest.mark.parametrize("package", PACKAGES)
def test_validate_test_predict_without_logger_or_sensor(package, tmp_path, capsys):
    L, _TB, EnergyProfiler = _pkg(package)
    cb = EnergyProfiler(device="none", every_n_steps=1, warmup_steps=1, trace=False, figure=False)
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
    for tag in ("energy/val/step_j", "energy/test/step_j", "energy/predict/step_j", "time/test/net.0_ms",
                "energy/test/net.0_mj", "energy/test/epoch_j", "energy/predict/j_per_sample"):
        assert tag in scalars, tag
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
    # warm-up: the first steps are never profiled; "auto" profiles the first step after it, then every N
    assert [p.index for p in s.profiled["train"]] == [2]
    assert s.auto and s.every_n_steps >= 1
    assert cb.report.stages["train"].total_steps == 5


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
