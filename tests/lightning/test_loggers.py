"""Every Lightning logger gets the energy (issue 37): step and epoch energy, power and time go through
``trainer.loggers`` (``CSVLogger``'s metrics.csv read back here), TensorBoard keeps its charts and tables on top."""

from __future__ import annotations

import csv
import glob
import os

import pytest

from tests.lightning.test_energy_profiler import PACKAGES, _events, _loader, _module, _pkg, _trainer


def _csv_rows(logger) -> list[dict]:
    path = os.path.join(logger.log_dir, "metrics.csv")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("pkg", PACKAGES)
def test_a_csv_logger_gets_step_and_epoch_energy_power_and_time(tmp_path, pkg):
    L, _TB, EnergyProfiler = _pkg(pkg)
    CSVLogger = L.loggers.CSVLogger
    cb = EnergyProfiler(device="sim:orin-agx", every_n_steps=3, warmup_steps=1, print_summary=False, figure=False,
                        trace=False, log_dir=str(tmp_path / "energy"))
    logger = CSVLogger(str(tmp_path), name="csv")
    trainer = _trainer(L, tmp_path, [cb], logger=logger, max_steps=10, log_every_n_steps=2, limit_val_batches=0)
    trainer.fit(_module(L), _loader(n=80))
    rows = _csv_rows(logger)
    cols = set(rows[0])
    for tag in ("energy_j_sim/train/step", "power_w_sim/train/step", "time_ms_sim/train/step",
                "energy_j_sim/train/cumulative", "time_ms_host/train/step", "energy_j_sim/train/epoch",
                "power_w_sim/train/epoch", "time_ms_sim/train/epoch", "energy_j_sim/train/per_sample"):
        assert tag in cols, (tag, sorted(cols))
    steps = [r for r in rows if r.get("energy_j_sim/train/step")]
    # every profiled step and every log_every_n_steps-th batch, at the Trainer's global step, the session's numbers
    totals = cb.session.totals["train"]
    want = {i + 1: m for i, m in enumerate(totals) if (i + 1) % 2 == 0}
    want.update({p.global_step: p.step for p in cb.session.profiled["train"]})
    got = {int(r["step"]): r for r in steps}
    assert set(got) == set(want)
    for gstep, m in want.items():
        assert float(got[gstep]["energy_j_sim/train/step"]) == pytest.approx(m.energy_j, rel=1e-6)
        assert float(got[gstep]["power_w_sim/train/step"]) == pytest.approx(m.power_w, rel=1e-6)
        assert float(got[gstep]["time_ms_sim/train/step"]) == pytest.approx(m.time_s * 1e3, rel=1e-6)
    (epoch,) = [r for r in rows if r.get("energy_j_sim/train/epoch")]
    ep = cb.session.epochs[-1]
    assert float(epoch["energy_j_sim/train/epoch"]) == pytest.approx(ep.energy_j, rel=1e-6)
    assert int(epoch["step"]) == 10  # at the epoch's last step, as Lightning logs its own epoch metrics


def test_tensorboard_and_csv_together_each_get_the_energy_once(tmp_path):
    L, TensorBoardLogger, EnergyProfiler = _pkg("lightning.pytorch")
    CSVLogger = L.loggers.CSVLogger
    cb = EnergyProfiler(device="sim:orin-agx", every_n_steps=3, warmup_steps=1, print_summary=False, figure=False,
                        trace=False)
    tb, cl = TensorBoardLogger(str(tmp_path), name="tb"), CSVLogger(str(tmp_path), name="csv")
    trainer = _trainer(L, tmp_path, [cb], logger=[tb, cl], max_steps=8, log_every_n_steps=4, limit_val_batches=0)
    trainer.fit(_module(L), _loader(n=64))
    acc = _events(tb.log_dir)
    tb_steps = sorted(ev.step for ev in acc.Scalars("energy_j_sim/train/step"))
    csv_steps = sorted(int(r["step"]) for r in _csv_rows(cl) if r.get("energy_j_sim/train/step"))
    assert tb_steps == csv_steps and len(tb_steps) == len(set(tb_steps))  # once each, not twice in TensorBoard
    assert any(t.startswith("energy/train_layers") for t in acc.Tags()["tensors"])  # the table, on top
    assert not glob.glob(os.path.join(cl.log_dir, "events.out.tfevents*"))


def test_the_tuner_logs_through_every_logger_too(tmp_path):
    L = pytest.importorskip("lightning.pytorch")
    from lightning_edge.lightning.pytorch import PowerModeTuner

    tuner = PowerModeTuner(20.0, device="sim:orin-agx", store=None, print_summary=False, log_every_n_steps=2,
                           window=dict(settle_s=0, warmup_steps=1, min_steps=3, max_steps=5))
    logger = L.loggers.CSVLogger(str(tmp_path), name="csv")
    _trainer(L, tmp_path, [tuner], logger=logger, max_steps=12, limit_val_batches=0).fit(_module(L), _loader(n=96))
    cols = set(_csv_rows(logger)[0])
    assert {"tuner/simulated/step_time_ms", "tuner/simulated/power_w", "tuner/power_budget_w",
            "tuner/simulated/epoch_energy_j"} <= cols
