"""The Lightning callbacks under DDP.

EnergyProfiler: epoch totals over ranks, a board read by several ranks counted once. The combining rule is tested
directly; the collective itself in real 2-process CPU DDP runs (gloo, forked workers), with the TensorBoard event
files read back (slow). PowerModeTuner: refuses ranks it cannot coordinate, with a clear error (slow)."""

from __future__ import annotations

import glob
import json
import math
import os

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from lightning_edge.devices.sensors.ina3221 import INA3221Sensor
from lightning_edge.devices.sensors.nvml import NvmlSensor
from lightning_edge.devices.sim.device import SimulatedOrin
from lightning_edge.lightning.energy_profiler import combine_rank_totals
from lightning_edge.lightning.session import Epoch
from lightning_edge.records import Measurement
from tests.fakes.ina3221 import build_orin_agx_ina
from tests.fakes.nvml_power import FakeNvmlPower


def _tot(energy_j=10.0, time_s=2.0, samples=24):
    return Epoch("train", 0, Measurement(time_s, energy_j / time_s, "measured", steps=3, samples=samples))


def test_ranks_reading_one_board_count_its_energy_once():
    parts = [("jetson-a/jetson", 10.0, 2.0, 24), ("jetson-a/jetson", 10.4, 2.1, 24)]
    out = combine_rank_totals(_tot(), parts)
    assert out.energy_j == pytest.approx(10.4)  # the widest window's reading, not 20.4
    assert out.samples == 48 and out.time_s == pytest.approx(2.1)
    assert (out.ranks, out.domains) == (2, 1)
    assert out.j_per_sample == pytest.approx(10.4 / 48)


def test_ranks_with_their_own_device_add_up():
    parts = [("node/nvml:0", 100.0, 2.0, 32), ("node/nvml:1", 110.0, 2.0, 32),
             ("jetson-b/jetson", 9.0, 1.9, 16), ("jetson-b/jetson", 8.5, 1.8, 16)]  # and a board with two ranks
    out = combine_rank_totals(_tot(), parts)
    assert out.energy_j == pytest.approx(219.0)
    assert (out.samples, out.ranks, out.domains) == (96, 4, 3)


def test_a_domain_without_energy_makes_the_total_unknown_not_smaller():
    parts = [("a/jetson", 10.0, 2.0, 24), ("b/model:7", math.nan, 2.0, 24)]
    assert math.isnan(combine_rank_totals(_tot(), parts).energy_j)
    # a rank of a shared board that read nothing does not hide the other's reading
    parts = [("a/jetson", math.nan, 2.0, 24), ("a/jetson", 10.0, 2.0, 24)]
    assert combine_rank_totals(_tot(), parts).energy_j == pytest.approx(10.0)


def test_energy_domains_of_the_backends(tmp_path):
    build_orin_agx_ina(tmp_path)
    assert INA3221Sensor(root=tmp_path).energy_domain == "jetson"  # the board: shared by every rank on it
    assert NvmlSensor(index=1, nvml=FakeNvmlPower(gpus=2)).energy_domain == "nvml:1"  # one GPU
    a, b = SimulatedOrin(), SimulatedOrin()  # the twin: a board per instance
    try:
        assert a.sensor.energy_domain != b.sensor.energy_domain
        assert a.sensor.energy_domain.startswith(f"sim:{os.getpid()}:")  # per process: each DDP rank its own
    finally:
        a.close()
        b.close()


# ---------------------------------------------------------------------------------------- a real DDP run
L = pytest.importorskip("lightning.pytorch")


class _Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(8, 4))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, i):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _fit_ddp(tmp_path, device):
    from lightning.pytorch.loggers import TensorBoardLogger

    from lightning_edge.lightning.pytorch import EnergyProfiler

    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(64, 3, 16, 16, generator=g), torch.randint(0, 4, (64,), generator=g))
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp_fork", max_epochs=1, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path),
                        logger=TensorBoardLogger(str(tmp_path), name="tb"),
                        callbacks=[EnergyProfiler(device=device, every_n_steps=1, figure=False)])
    trainer.fit(_Lit(), DataLoader(ds, batch_size=8))  # 64 samples: 32 per rank (DistributedSampler)
    runs = glob.glob(str(tmp_path / "tb" / "version_*"))
    assert len(runs) == 1, runs  # rank 0 writes alone
    acc = EventAccumulator(runs[0], size_guidance={"scalars": 0})
    acc.Reload()
    scal = {k: [e.value for e in acc.Scalars(k)] for k in acc.Tags()["scalars"]}
    layers = json.loads(open(os.path.join(runs[0], "layers.json")).read())
    assert not [n for n in layers["notes"] if "cost model failed" in n], layers["notes"]  # inputs captured
    return scal, layers


@pytest.mark.slow
def test_ddp_on_one_board_counts_the_board_once_and_every_rank_samples(tmp_path):
    """Two ranks on one (fake-sysfs) Orin AGX: both read its INA3221 rails. The epoch's energy is the board's,
    not twice it, and its samples are both ranks'."""
    board = build_orin_agx_ina(tmp_path / "sys")
    sensor = INA3221Sensor(root=tmp_path / "sys")
    for rail in sensor.total_rails:
        board.set_power_w(rail, 5.0)
    total_w = 5.0 * len(sensor.total_rails)
    scal, layers = _fit_ddp(tmp_path, sensor)
    (epoch_j,), (epoch_ms,), (jps,) = (scal["energy_j/train/epoch"], scal["time_ms/train/epoch"],
                                      scal["energy_j/train/per_sample"])
    assert scal["energy_j/train/epoch_domains"] == [1.0]
    assert epoch_j / (epoch_ms / 1e3) == pytest.approx(total_w, rel=0.1)  # one board's power, not 2x
    assert epoch_j / jps == pytest.approx(64)  # samples of both ranks
    (ep,) = layers["stages"]["train"]["epochs"]
    assert ep["ranks"] == 2 and ep["energy_domains"] == 1 and ep["samples"] == 64


@pytest.mark.slow
def test_ddp_on_the_twin_adds_a_board_per_rank(tmp_path):
    scal, layers = _fit_ddp(tmp_path, "sim:orin-agx")
    assert scal["energy_j_sim/train/epoch_domains"] == [2.0]
    (epoch_j,), (jps,) = scal["energy_j_sim/train/epoch"], scal["energy_j_sim/train/per_sample"]
    assert epoch_j > 0 and epoch_j / jps == pytest.approx(64)
    assert "energy_j_sim/train/step" in scal  # per-step figures are rank 0's


@pytest.mark.slow
def test_power_mode_tuner_refuses_ranks_it_cannot_coordinate(tmp_path):
    """Each rank would switch its own board from its own measurements: a clear error, before any switch."""
    from lightning_edge.lightning.pytorch import PowerModeTuner

    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(32, 3, 16, 16, generator=g), torch.randint(0, 4, (32,), generator=g))
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp_fork", max_epochs=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(tmp_path),
                        callbacks=[PowerModeTuner(30.0, device="sim:orin-agx", store=str(tmp_path / "p.db"))])
    with pytest.raises(Exception, match=r"does not coordinate distributed ranks \(world_size=2\).*devices=1"):
        trainer.fit(_Lit(), DataLoader(ds, batch_size=8))
