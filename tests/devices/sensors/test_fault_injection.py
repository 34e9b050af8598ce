"""Fault injection: bad sensor data during a short fit, on the fake trees of tests/fakes.

Each test trains a small model for a few steps with the profiler's session reading a fake sensor, breaks the
sensor part-way (garbage text, a rail file that vanishes, EACCES, negative and absurd values, a read that hangs,
every rail lost, the jtop service stopping, a GPU power counter going wild) and asserts that

* training continues (every step is recorded);
* the labels say what the numbers are: ``measured`` only where every rail of the total was read and believed,
  ``measured (partial)`` where one was missing or rejected, ``estimated`` where no valid reading covers a step;
* the numbers stay within bounds: no negative power, nothing above what the board really draws.

Issue 15 saw, on the fake INA3221 tree: -277.9 J / -125 W [measured] from a negative current, 4.95e5 W
[measured] from 999 V x 999 A, a rail that returned garbage, vanished or was denied silently dropped from the sum
(5.9-6.6 W [measured] instead of 8.1 W), and with every rail lost, step and epoch figures above the true maximum
still labelled measured.
"""

from __future__ import annotations

import math
import os
import socket
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from lightning_edge.devices.sensors import INA3221Sensor, NvmlSensor, RaplSensor
from lightning_edge.devices.sensors.jtop import JtopSensor
from lightning_edge.lightning.session import EnergySession
from tests.fakes.ina3221 import build_orin_agx_ina, build_xavier_nx_jp4, remove_tree, world_tmpdir
from tests.fakes.jtop import make_module
from tests.fakes.nvml_power import FakeNvmlPower
from tests.fakes.rapl import build_rapl

ORIN_TRUE_W = 4.976 * 0.803 + 4.984 * 0.160 + 5.000 * 0.560 + 4.992 * 0.100  # 8.09 W: the four rails
XNX_TRUE_W = 5.064 * 1.176  # VDD_IN of the fake Xavier NX


def fit(sensor, fault=None, *, steps: int = 10, fault_at: int = 4, step_s: float = 0.03):
    """A short training run with the session reading ``sensor``; ``fault()`` is called before step ``fault_at``.
    Returns ``(session, epoch totals, t_ns when the fault was injected)``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 16)
    s = EnergySession(model, device=sensor, every_n_steps=1, warmup_steps=1, analyze=False, settle_s=0.0)
    s.start()
    t_fault = None
    try:
        for i in range(steps):
            if i == fault_at and fault is not None:
                t_fault = time.perf_counter_ns()
                fault()
            s.step_begin("train", x)
            loss = model(x).square().mean()
            s.mark("(backward)", "bwd")
            loss.backward()
            opt.step()
            opt.zero_grad()
            time.sleep(step_s)  # the step spans several sensor periods
            s.step_end("train")
            s.flush()
        epoch = s.epoch_end("train")
    finally:
        s.close()
    return s, epoch, t_fault


def _after(session, t_fault):
    """The step totals that began after the fault, and those that ended before it."""
    tots = session.totals["train"]
    return [t for t in tots if t.t0_ns > t_fault], [t for t in tots if t.t1_ns < t_fault]


def check_bounds(session, epoch, true_w):
    """Every number that says it was measured lies in [0, what the board really draws]. (An ``estimated`` one is the
    roofline model's, for the Orin AGX at MAXN: it says so, and knows nothing of this fake board.)"""
    for t in session.totals["train"]:
        if math.isfinite(t.energy_j) and t.label != "estimated":
            p = t.energy_j / t.time_s
            assert -1e-9 <= p <= true_w * 1.02, f"step {t.index}: {p:.4g} W [{t.label}] outside [0, {true_w:.3g}] W"
    for p in session.profiled["train"]:
        assert p.energy.label == "estimated" or -1e-9 <= p.energy.power_w <= true_w * 1.02, p.energy.label
        for le in p.energy.layers.values():
            assert le.energy_j >= -1e-12, (le.name, le.energy_j, le.label)
    if math.isfinite(epoch.energy_j) and epoch.label != "estimated":
        assert 0 <= epoch.energy_j / epoch.time_s <= true_w * 1.02, epoch.label


def assert_trained(session, steps=10):
    assert len(session.totals["train"]) == steps  # training went on


# ---------------------------------------------------------------- INA3221, hwmon (Orin AGX: total = sum of 4 rails)
@pytest.fixture
def orin(tmp_path):
    return build_orin_agx_ina(tmp_path)


def test_baseline_everything_is_measured(orin):
    s, epoch, _ = fit(INA3221Sensor(root=orin.root))
    assert_trained(s)
    assert {t.label for t in s.totals["train"]} == {"measured"} and epoch.label == "measured"
    assert epoch.readings.trusted
    assert epoch.energy_j / epoch.time_s == pytest.approx(ORIN_TRUE_W, rel=1e-6)
    for t in s.totals["train"]:  # (a profiled step's energy covers its timer's window, a little inside the step's)
        assert 0.9 * ORIN_TRUE_W <= t.energy_j / t.time_s <= ORIN_TRUE_W * (1 + 1e-9)


@pytest.mark.parametrize("fault", ["garbage", "vanish"])
def test_a_rail_of_the_total_lost_mid_run_makes_the_numbers_partial(orin, fault):
    rail = "VDD_CPU_CV"
    do = {"garbage": lambda: orin.garbage(rail, "\x00\x7fgarbage"), "vanish": lambda: orin.remove(rail)}[fault]
    s, epoch, t_fault = fit(INA3221Sensor(root=orin.root), do)
    assert_trained(s)
    after, before = _after(s, t_fault)
    assert {t.label for t in before} == {"measured"}
    assert after and all(t.label == "measured (partial)" for t in after), [t.label for t in after]
    assert epoch.label == "measured (partial)" and rail in epoch.readings.missing_rails
    assert any("partial" in n and rail in n for n in s.notes)
    assert all(p.energy.label == "measured (partial)" for p in s.profiled["train"] if p.energy.t0_ns > t_fault)
    check_bounds(s, epoch, ORIN_TRUE_W)


@pytest.mark.parametrize("values", [dict(ma=-30000), dict(mv=999_000, ma=999_000), dict(ma=16_000)],
                         ids=["negative", "absurd", "above-the-module-rating"])  # 79.6 W: within the chip's scale
def test_negative_and_absurd_values_are_rejected_never_summed(orin, values):
    rail = "VDD_GPU_SOC"
    sensor = INA3221Sensor(root=orin.root)
    s, epoch, t_fault = fit(sensor, lambda: orin.set(rail, **values))
    assert_trained(s)
    after, _ = _after(s, t_fault)
    assert after and all(t.label == "measured (partial)" for t in after), [t.label for t in after]
    assert epoch.readings.rejected > 0 and rail in epoch.readings.rejected_rails
    assert sensor.rejected_count > 0 and rail in sensor.last_rejection
    check_bounds(s, epoch, ORIN_TRUE_W)  # was -125 W / 4.95e5 W [measured]


def test_every_rail_lost_leaves_nothing_labelled_measured(orin):
    def lose_all():
        for r in list(orin.rails):
            orin.remove(r)

    s, epoch, t_fault = fit(INA3221Sensor(root=orin.root), lose_all)
    assert_trained(s)
    after, _ = _after(s, t_fault)
    assert after and not any(t.label.startswith("measured") for t in after if math.isfinite(t.energy_j)), \
        [(t.label, t.energy_j) for t in after]
    assert not epoch.label.startswith("measured") or "partial" in epoch.label
    assert not any(p.energy.label.startswith("measured") and "partial" not in p.energy.label
                   for p in s.profiled["train"] if p.energy.t0_ns > t_fault)
    assert s.sampler.errors > 0
    check_bounds(s, epoch, ORIN_TRUE_W)  # was 11.8 W [measured]


def test_a_read_that_hangs_does_not_hold_training_up(orin):
    """An i2c read that never returns (a FIFO stands in for the stuck file): the sampler thread waits, training
    does not; with no new reading, later steps are not labelled measured."""
    rail = "VIN_SYS_5V0"
    cur = orin.files(rail)[1]
    released = []

    def hang():
        cur.unlink()
        os.mkfifo(cur)

    sensor = INA3221Sensor(root=orin.root)
    t_start = time.perf_counter()
    try:
        s, epoch, t_fault = fit(sensor, hang)
    finally:
        if cur.exists() and not cur.is_file():  # release the sampler thread blocked in open()
            try:
                fd = os.open(cur, os.O_WRONLY | os.O_NONBLOCK)
                os.write(fd, b"560\n")
                os.close(fd)
                released.append(True)
            except OSError:
                pass
    assert_trained(s)
    assert time.perf_counter() - t_start < 20  # 10 steps of 30 ms; the hang is not on the training thread
    after, _ = _after(s, t_fault)
    late = [t for t in after if t.t0_ns > t_fault + 100_000_000]
    assert late and not any(t.label == "measured" for t in late), [t.label for t in late]
    check_bounds(s, epoch, ORIN_TRUE_W)


@pytest.mark.skipif(not hasattr(os, "seteuid"), reason="POSIX only")
def test_eacces_on_a_rail_mid_run():
    """A rail's files made unreadable mid-run (EACCES). Root reads anything: as root, the run drops its effective
    uid to ``nobody`` (every thread: glibc applies it process-wide) and owns the rail's files, so that it can
    chmod them itself; the uid is restored afterwards."""
    d = world_tmpdir()
    fake = build_orin_agx_ina(d)
    rail = "VDD_CPU_CV"
    as_root = os.geteuid() == 0
    try:
        if as_root:
            for f in fake.files(rail):
                os.chown(f, 65534, 65534)
            os.setegid(65534)
            os.seteuid(65534)
        try:
            s, epoch, t_fault = fit(INA3221Sensor(root=fake.root), lambda: fake.deny(rail))
        finally:
            if as_root:
                os.seteuid(0)
                os.setegid(0)
    finally:
        remove_tree(d)
    assert_trained(s)
    after, before = _after(s, t_fault)
    assert {t.label for t in before} == {"measured"}
    assert after and {t.label for t in after} == {"measured (partial)"}, [t.label for t in after]
    assert epoch.label == "measured (partial)" and epoch.readings.missing_rails == (rail,)
    check_bounds(s, epoch, ORIN_TRUE_W)


# ---------------------------------------------------------------- INA3221, iio (Xavier NX on JetPack 4: VDD_IN)
def test_iio_input_rail_garbage_leaves_no_measured_total(tmp_path):
    fake = build_xavier_nx_jp4(tmp_path)
    s, epoch, t_fault = fit(INA3221Sensor(root=tmp_path), lambda: fake.garbage("VDD_IN", "-5\x00junk"))
    assert_trained(s)
    after, _ = _after(s, t_fault)
    assert after and not any(t.label == "measured" for t in after), [t.label for t in after]
    check_bounds(s, epoch, XNX_TRUE_W)


def test_iio_absurd_sub_rail_is_rejected_and_counted_total_still_measured(tmp_path):
    fake = build_xavier_nx_jp4(tmp_path)
    sensor = INA3221Sensor(root=tmp_path)
    s, epoch, t_fault = fit(sensor, lambda: fake.set("VDD_SOC", mv=999_000, ma=999_000))
    assert_trained(s)
    assert {t.label for t in s.totals["train"]} == {"measured"}  # VDD_IN, the total, is fine
    assert epoch.readings.rejected > 0 and not epoch.readings.trusted and sensor.rejected_count > 0
    assert "VDD_SOC" in epoch.readings.rejected_rails
    check_bounds(s, epoch, XNX_TRUE_W)


# ---------------------------------------------------------------- jtop (jetson-stats service)
@pytest.fixture
def jtop_root(tmp_path):
    (tmp_path / "run").mkdir()
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "run/jtop.sock"))
    yield tmp_path
    sock.close()


@pytest.mark.parametrize("fault", ["garbage", "negative", "stops"])
def test_jtop_faults(jtop_root, fault):
    mod = make_module()
    sensor = JtopSensor(root=jtop_root, jtop_module=mod, interval_s=0.02)

    def do():
        if fault == "stops":
            mod.state.alive = False
            return
        rail = mod.state.power["rail"]["VDD_CPU_CV"]
        rail["power"] = "ERR" if fault == "garbage" else -40000

    s, epoch, t_fault = fit(sensor, do, step_s=0.06)
    sensor.close()
    assert_trained(s)
    after, before = _after(s, t_fault)
    late = [t for t in after if t.t0_ns > t_fault + 150_000_000]
    assert late and not any(t.label == "measured" for t in late), [t.label for t in late]
    check_bounds(s, epoch, 8.011)


# ---------------------------------------------------------------- NVML (a GPU board) and RAPL (CPU package)
class _Nvml(FakeNvmlPower):
    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        return (100_000, 400_000)  # mW: an A100 SXM's range


@pytest.mark.parametrize("energy", [False, True], ids=["power", "counter"])
def test_nvml_absurd_values_are_rejected(energy):
    nv = _Nvml(energy=energy)
    nv.power_mw = 65_000
    sensor = NvmlSensor(nvml=nv, update_period_s=0.005)
    stop = []

    def feed():  # the counter moves at 65 W in the background
        import threading

        def run():
            while not stop:
                nv.advance(65 * 0.002)
                time.sleep(0.002)
        threading.Thread(target=run, daemon=True).start()

    def wild():
        nv.power_mw = 10**9  # 1 MW
        nv.energy_mj -= 10**9  # the counter goes back (a driver reload)

    feed()
    try:
        s, epoch, t_fault = fit(sensor, wild)
    finally:
        stop.append(True)
    assert_trained(s)
    assert sensor.rejected_count > 0
    check_bounds(s, epoch, 800.0)  # twice the board's highest power limit


def test_rapl_garbage_on_dram_is_partial(tmp_path):
    rapl = build_rapl(tmp_path)
    sensor = RaplSensor(root=tmp_path)
    s, epoch, t_fault = fit(sensor, lambda: rapl.garbage("dram-0"))
    assert_trained(s)
    after, _ = _after(s, t_fault)
    assert after and not any(t.label == "measured" for t in after)


# ---------------------------------------------------------------- in a real Trainer: every place the label appears
def test_partial_readings_are_labelled_in_summary_reports_and_tensorboard(orin, tmp_path, capsys):
    """A rail of the total goes bad mid-fit: layers.csv, layers.json (layers, step, totals, epochs), the TensorBoard
    table and ``readings/*`` scalars, and the printed summary all say partial."""
    import csv
    import json

    L = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_edge.lightning.pytorch import EnergyProfiler

    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

        def training_step(self, batch, i):
            time.sleep(0.03)
            return self.net(batch[0]).square().mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Break(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == 2:
                orin.garbage("VDD_CPU_CV")

    ds = TensorDataset(torch.randn(64, 16))
    prof = EnergyProfiler(device=INA3221Sensor(root=orin.root), every_n_steps=1, warmup_steps=1, figure=False,
                          trace=False)
    logger = TensorBoardLogger(str(tmp_path), name="tb")
    trainer = L.Trainer(max_steps=8, logger=logger, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1, callbacks=[prof, Break()],
                        default_root_dir=str(tmp_path))
    trainer.fit(Lit(), DataLoader(ds, batch_size=8))
    assert trainer.global_step == 8  # training went on
    out = capsys.readouterr().out
    assert "measured (partial)" in out and "VDD_CPU_CV missing" in out

    log_dir = Path(logger.log_dir)
    rows = list(csv.DictReader(open(log_dir / "layers.csv")))
    assert rows and all(r["method"].endswith("(partial)") for r in rows if r["method"] != "estimated")
    doc = json.loads((log_dir / "layers.json").read_text())
    st = doc["stages"]["train"]
    assert st["total"]["method"].count("partial") and st["step"]["method"].endswith("(partial)")
    assert st["epochs"][0]["method"] == "measured (partial)" and st["epochs"][0]["readings"]["partial"] > 0
    assert "VDD_CPU_CV" in st["epochs"][0]["readings"]["missing_rails"]
    assert any("partial" in n for n in doc["notes"])

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    assert acc.Scalars("readings/train/epoch_partial")[0].value > 0
    table = "".join(e.tensor_proto.string_val[0].decode() for e in acc.Tensors("energy/train_layers/text_summary"))
    assert "(partial)" in table



# ---------------------------------------------------------------- tuner profiles
def test_a_tuner_step_on_partial_readings_is_remeasured_then_marked(orin):
    """The power-mode tuner's profile of a mode must not rest on partial or rejected readings: such a step is
    measured again by the next one; if they never get better, the profile says ``(partial)`` and has no power."""
    from lightning_edge.devices.meter import SensorMeter
    from lightning_edge.modes import PowerMode
    from lightning_edge.tuning.online import ProfileWindow, WindowSpec

    meter = SensorMeter(INA3221Sensor(root=orin.root), sync=lambda: None)
    meter.open()
    mode = PowerMode(12, 2201.6, 1300.5, 3199)
    spec = WindowSpec(settle_s=0.0, warmup_steps=0, min_steps=2, max_steps=3, rel_sem=0.5)
    try:
        good = ProfileWindow(0, mode, switched_s=0.0, settle_s=0.0, spec=spec)
        for _ in range(3):
            meter.start()
            time.sleep(0.03)
            r = meter.stop(mode)
            assert r.trusted and r.label == "measured" and good.feed(meter.now_s(), r.time_s, r.power_w, r.trusted)
        assert good.result("measured").label == "measured"

        orin.set("VDD_GPU_SOC", ma=-30000)  # rejected from now on
        time.sleep(0.05)
        bad = ProfileWindow(1, mode, switched_s=0.0, settle_s=0.0, spec=spec)
        fed = []
        for _ in range(6):
            meter.start()
            time.sleep(0.03)
            r = meter.stop(mode)
            assert not r.trusted
            fed.append(bad.feed(meter.now_s(), r.time_s, r.power_w, trusted=r.trusted))
        assert fed == [False, False, False, True, True, True]  # re-measured 3 times (max_steps), then kept
        m = bad.result("measured")
        assert m.label == "measured (partial)" and bad.remeasured == 3 and bad.partial == 3
        # the rejected rail is not in it (never -149 W), and (issue 36) neither is the partial sum of the others: a
        # profile on partial readings has no power a budget could be checked against, and is untrusted
        assert math.isnan(m.power_w) and not m.trusted
    finally:
        meter.close()
