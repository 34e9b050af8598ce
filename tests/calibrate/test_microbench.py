"""Microbenchmarks: NNLS and the energy fit on synthetic data, timing with an injected clock, a real
quick CPU run that writes a valid profile, and the ``lightning-edge roofline`` command."""

from __future__ import annotations

import itertools
import json
import os
import time

import numpy as np
import pytest

from lightning_edge.calibrate.microbench import (
    NO_SENSOR_MESSAGE,
    EnergyMeter,
    NullEnergyMeter,
    SweepConfig,
    find_energy_meter,
    run_microbench,
    time_callable,
)
from lightning_edge.cli import main
from lightning_edge.roofline import load_profile
from lightning_edge.roofline.fit import fit_energy_coefficients, nnls

ON_JETSON = os.path.exists("/etc/nv_tegra_release")


# ---------------------------------------------------------------- NNLS
def _brute_force_nnls(a, b):
    """Exact NNLS for few columns: best least-squares fit over every support set, clamped feasible."""
    best, best_x = np.inf, None
    n = a.shape[1]
    for k in range(n + 1):
        for support in itertools.combinations(range(n), k):
            x = np.zeros(n)
            if support:
                x[list(support)] = np.linalg.lstsq(a[:, support], b, rcond=None)[0]
            if (x >= -1e-12).all():
                r = np.linalg.norm(a @ x - b)
                if r < best:
                    best, best_x = r, x
    return best_x, best


@pytest.mark.parametrize("seed", range(20))
def test_nnls_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(4, 10)), int(rng.integers(1, 4))
    a = rng.normal(size=(m, n)) * 10.0 ** rng.uniform(-3, 3, size=n)   # badly scaled columns on purpose
    b = rng.normal(size=m)
    x, res = nnls(a, b)
    xb, rb = _brute_force_nnls(a, b)
    assert (x >= 0).all()
    assert res == pytest.approx(rb, rel=1e-6, abs=1e-9)
    assert np.linalg.norm(a @ x - b) == pytest.approx(np.linalg.norm(a @ xb - b), rel=1e-6, abs=1e-9)


def test_nnls_clamps_a_negative_coefficient():
    # b = 2*a0 - 1*a1 exactly; the best non-negative answer drops a1: x = (b.a0 / a0.a0, 0)
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    b = a @ np.array([2.0, -1.0])            # (2, -1, 1)
    x, _ = nnls(a, b)
    assert x[1] == 0.0
    assert x[0] == pytest.approx((2 * 1 + 1 * 1) / 2)   # (b . a0) / (a0 . a0) = 3 / 2


def test_nnls_bad_input():
    with pytest.raises(ValueError, match="shape"):
        nnls(np.ones((3, 2)), np.ones(4))
    with pytest.raises(ValueError, match="finite"):
        nnls(np.array([[np.nan]]), np.ones(1))


# ---------------------------------------------------------------- energy fit (Pagoda section 5.2.4)
def _synthetic_samples(eps_flop, eps_mop, pi0, peak, bw, noise, seed=0):
    """Matmul and ReLU/transpose-like samples timed by a roofline at 80-90 % efficiency, E by eq. 2 + noise."""
    rng = np.random.default_rng(seed)
    w, q = [], []
    for n in (256, 512, 1024, 2048, 4096, 8192):           # matmul: W = 2n^3, Q = 3n^2*4
        w.append(2.0 * n ** 3)
        q.append(12.0 * n * n)
    for k in range(16, 28):                                # element-wise: W = n, Q = 8n
        w.append(float(2 ** k))
        q.append(8.0 * 2 ** k)
    for m in (512, 1024, 2048, 4096, 8192):                # transpose: W = 0, Q = 8m^2
        w.append(0.0)
        q.append(8.0 * m * m)
    w, q = np.array(w), np.array(q)
    t = np.maximum(w / peak, q / bw) / rng.uniform(0.8, 0.9, size=w.size)
    e = (eps_flop * w + eps_mop * q + pi0 * t) * (1 + noise * rng.normal(size=w.size))
    return w, q, t, e


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_recovers_pagoda_maxn_coefficients(seed):
    # MAXN: eps_flop 3.86 pJ/FLOP, eps_mop 141.38 pJ/B, pi_0 17.9 W; 1 % noise on every energy
    w, q, t, e = _synthetic_samples(3.86e-12, 141.38e-12, 17.9, 14.7e12, 164.4e9, noise=0.01, seed=seed)
    fit = fit_energy_coefficients(w, q, t, e, static_power_w=17.9)
    assert fit.eps_flop == pytest.approx(3.86e-12, rel=0.03)
    assert fit.eps_mop == pytest.approx(141.38e-12, rel=0.03)
    assert fit.static_power_w == 17.9 and not fit.static_fitted
    assert fit.r2 > 0.99 and fit.mape < 3 and fit.n == w.size and fit.label == "measured"


def test_fit_exact_without_noise_and_with_fitted_static():
    w, q, t, e = _synthetic_samples(2e-12, 80e-12, 5.0, 1e12, 5e10, noise=0.0)
    fit = fit_energy_coefficients(w, q, t, e, static_power_w=5.0)
    assert fit.eps_flop == pytest.approx(2e-12, rel=1e-6) and fit.eps_mop == pytest.approx(80e-12, rel=1e-6)
    fit3 = fit_energy_coefficients(w, q, t, e)            # pi_0 as a third unknown
    assert fit3.static_fitted
    assert fit3.static_power_w == pytest.approx(5.0, rel=1e-4)
    assert fit3.eps_flop == pytest.approx(2e-12, rel=1e-4)


def test_fit_never_returns_negative_coefficients():
    # energies that only depend on time (a sensor that sees static power only): eps must clamp to 0, not go < 0
    w, q, t, _ = _synthetic_samples(1e-12, 1e-10, 10.0, 1e12, 1e11, noise=0.0)
    e = 10.0 * t * (1 - 0.01 * (q > 0))  # slightly below pi_0 * T: unconstrained LS would want negative eps
    fit = fit_energy_coefficients(w, q, t, e, static_power_w=10.0)
    assert fit.eps_flop >= 0 and fit.eps_mop >= 0


def test_fit_input_errors():
    with pytest.raises(ValueError, match="one value per sample"):
        fit_energy_coefficients([1, 2], [1], [1, 2], [1, 2], 1.0)
    with pytest.raises(ValueError, match="at least 2 samples"):
        fit_energy_coefficients([1], [1], [1], [1], 1.0)
    with pytest.raises(ValueError, match="positive"):
        fit_energy_coefficients([1, 2], [1, 2], [1, 2], [0, 1], 1.0)
    with pytest.raises(ValueError, match="static_power_w"):
        fit_energy_coefficients([1, 2], [1, 2], [1, 2], [1, 1], -3.0)


# ---------------------------------------------------------------- timing with an injected clock
def test_time_callable_with_fake_clock():
    now = [0]

    def clock():
        return now[0]

    def slow():              # 2 ms per call: timed one by one
        now[0] += 2_000_000

    t, inner = time_callable(slow, "cpu", repeats=5, warmup=1, min_block_s=1e-3, clock_ns=clock)
    assert t == pytest.approx(2e-3) and inner == 1

    def fast():              # 10 us per call: looped ceil(2e-3 / 1e-5) = 200 times per block
        now[0] += 10_000

    t, inner = time_callable(fast, "cpu", repeats=3, warmup=0, min_block_s=2e-3, clock_ns=clock)
    assert inner == 200 and t == pytest.approx(1e-5)
    with pytest.raises(ValueError, match="repeats"):
        time_callable(fast, "cpu", repeats=0)


# ---------------------------------------------------------------- meters
def test_null_meter_and_finder():
    m = NullEnergyMeter()
    assert isinstance(m, EnergyMeter) and not m.available
    with pytest.raises(RuntimeError, match="no power sensor found"):
        m.measure(lambda: None)
    found = find_energy_meter("cpu")
    assert not found.available                # no sensor on a CI machine
    assert found.reason.startswith(NO_SENSOR_MESSAGE)


class FakeMeter:
    """A sensor stand-in: idle 5 W, 12 W while running; integrates time x power over a window."""

    name = "fake"
    available = True
    reason = ""
    min_window_s = 0.002

    def __init__(self):
        self.windows = []

    def measure(self, fn, repeats=1):
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        dt = time.perf_counter() - t0
        self.windows.append(repeats)
        return dt, 12.0 * dt

    def idle_power_w(self, duration_s=2.0):
        return 5.0


TINY = SweepConfig(matmul_sizes=[32, 64], relu_bytes=[2 ** 16, 2 ** 18], transpose_bytes=[2 ** 16, 2 ** 18],
                   repeats=2, warmup=1, max_call_s=0.5, budget_s=5, min_block_s=2e-4, min_bandwidth_bytes=2 ** 17)


def test_microbench_with_a_meter_fits_energy(tmp_path):
    meter = FakeMeter()
    res = run_microbench("cpu", precisions=["fp32"], meter=meter, config=TINY, idle_s=0)
    assert isinstance(meter, EnergyMeter) and meter.windows
    assert res.static_power_w == 5.0 and res.sensor == "fake"
    fit = res.energy_fits["fp32"]
    assert fit.eps_flop >= 0 and fit.eps_mop >= 0 and fit.static_power_w == 5.0
    assert all(s.energy_j is not None and s.energy_j > 0 for s in res.samples)
    roof = res.roofline("fp32")
    assert roof.has_energy and roof.source == "measured" and float(roof.static_power) == 5.0
    path = tmp_path / "p.json"
    from lightning_edge.roofline import save_profile

    save_profile(res.to_profile(mode="4c/1000/500/2000", device="fake-board"), path)
    p = load_profile(path)
    assert p.source == "measured" and p.entry().static_power_w == 5.0 and p.entry().eps_mop is not None


def test_microbench_tiny_cpu_run_writes_a_valid_profile(tmp_path):
    res = run_microbench("cpu", precisions=["fp32"], config=TINY)
    assert set(res.precisions) == {"fp32"}
    p = res.precisions["fp32"]
    assert p["peak_flops"] > 1e6 and p["bandwidth"] > 1e6
    kernels = {s.kernel for s in res.samples}
    assert kernels == {"matmul", "relu", "transpose"}
    mm = [s for s in res.samples if s.kernel == "matmul"]
    assert mm[0].flops == 2 * 32 ** 3 and mm[0].bytes == 3 * 32 * 32 * 4    # W = 2n^3, Q = 3n^2 x 4 B
    relu = [s for s in res.samples if s.kernel == "relu"][0]
    assert relu.bytes == 2 ** 16 and relu.size == 2 ** 16 // 8             # working set 64 KiB = 8192 fp32 in + out
    assert res.static_power_w is None and not res.energy_fits
    assert any("no power sensor found" in n for n in res.notes)
    from lightning_edge.roofline import save_profile

    path = save_profile(res.to_profile(), tmp_path / "cpu.json")
    prof = load_profile(path)
    assert prof.source == "measured" and prof.mode_names == ["current"]
    assert not prof.roofline().has_energy


def test_microbench_input_errors():
    with pytest.raises(ValueError, match="precision 'fp8'"):
        run_microbench("cpu", precisions=["fp8"], config=TINY)
    with pytest.raises(ValueError, match="device"):
        run_microbench("tpu", config=TINY)


# ---------------------------------------------------------------- the command line
def test_cli_quick_run_writes_profile(tmp_path, capsys):
    out = tmp_path / "profile.json"
    t0 = time.monotonic()
    rc = main(["roofline", "--quick", "--torch-device", "cpu", "--precision", "fp32", "--out", str(out)])
    elapsed = time.monotonic() - t0
    text = capsys.readouterr().out
    assert rc == 0
    assert elapsed < 20
    assert "no power sensor found on this machine: measured the time roofline only; the energy roofline needs a sensor" \
        in text
    data = json.loads(out.read_text())
    assert data["source"] == "measured" and data["modes"][0]["eps_flop"] is None
    assert load_profile(out).roofline(precision="fp32").peak_flops > 0


def test_cli_profile_table(capsys):
    assert main(["roofline", "--profile", "orin-agx-pagoda"]) == 0
    text = capsys.readouterr().out
    assert "12c/2201.6/1300.5/3199" in text and "89.42" in text and "39.75" in text and "36.63" in text


def test_cli_profile_mode_subset(tmp_path, capsys):
    out = tmp_path / "maxn.json"
    assert main(["roofline", "--profile", "orin-agx-pagoda", "--modes", "12c/2201.6/1300.5/3199", "--out", str(out)]) == 0
    assert load_profile(out).mode_names == ["12c/2201.6/1300.5/3199"]


@pytest.mark.parametrize("argv, match", [
    (["--profile", "nope"], "no device profile 'nope'"),
    (["--profile", "orin-agx-pagoda", "--modes", "9c/1/1/1"], "has no mode '9c/1/1/1'"),
    (["--profile", "orin-agx-pagoda", "--precision", "int4"], "--precision int4: the profile has no such roofline"),
    (["--device", "sim:orin-agx", "--torch-device", "cpu"], "the sweeps run on the twin, not on a torch device"),
    (["--device", "cuda"], "for a torch device use --torch-device cuda"),
    (["--device", "cpu"], "for a torch device use --torch-device cpu"),
    (["--profile", "orin-agx-pagoda", "--batch-size", "0"], "--batch-size"),
    (["--profile", "orin-agx-pagoda", "--model", "resnet"], "expected zoo:NAME"),
])
def test_cli_errors_are_readable(argv, match, capsys):
    assert main(["roofline", *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lightning-edge roofline: error: ")
    assert match in err


def test_device_is_a_board_here_too(capsys):
    """issue 16: ``--device`` names a board in every command; ``roofline --device sim:orin-agx`` measures the twin
    (issue 26: simulated sweeps through its meter), ``--profile orin-agx-twin`` shows its shipped profile."""
    import json

    assert main(["roofline", "--profile", "orin-agx-twin", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"] == "simulated" and doc["modes"]
    assert main(["latency", "fit", "--device", "sim:orin-agx", "--out", "x.json"]) == 1
    assert "--torch-device" in capsys.readouterr().err


@pytest.mark.skipif(ON_JETSON, reason="on a Jetson --modes really switches power modes")
def test_cli_modes_without_a_controller(capsys):
    assert main(["roofline", "--quick", "--modes", "12c/2201.6/1300.5/3199"]) == 1
    err = capsys.readouterr().err
    assert "--modes needs a power-mode controller" in err
    assert "Run without --modes to measure the current mode" in err


# ---------------------------------------------------------------- through the board's meter (issue 26 item 6)
def test_the_energy_roofline_is_measured_through_a_boards_power_sensor(tmp_path):
    """Before, ``find_energy_meter`` looked up ``devices.get_energy_meter``, which never existed: no board ever got
    an energy roofline. A fake Orin NX with INA3221 rails: the board's sensor (its one sampler) measures it."""
    from lightning_edge.calibrate.microbench import SensorEnergyMeter, energy_meter
    from lightning_edge.devices.board import get_board
    from tests.fakes.ina3221 import build_orin_nx_ina

    ina = build_orin_nx_ina(tmp_path / "root")
    board = get_board("jetson", root=tmp_path / "root")
    assert isinstance(energy_meter(board), SensorEnergyMeter) and energy_meter(board).available
    meter = SensorEnergyMeter(board, min_window_s=0.05)
    res = run_microbench("cpu", precisions=["fp32"], meter=meter, config=TINY, idle_s=0.05, board=board)
    vdd_in = ina.power_w("VDD_IN")
    assert res.sensor == meter.name and res.static_power_w == pytest.approx(vdd_in, rel=0.02)
    assert "fp32" in res.energy_fits and all(s.energy_j is not None for s in res.samples)
    roof = res.roofline("fp32")
    assert roof.has_energy and roof.source == "measured"
    assert board._sampler is None  # the board's sampler is released after each window
    board.close()


def test_a_board_without_a_sensor_says_why_no_energy_roofline():
    from lightning_edge.calibrate.microbench import energy_meter
    from lightning_edge.devices.board import get_board

    m = energy_meter(get_board("none"))
    assert not m.available and m.reason.startswith(NO_SENSOR_MESSAGE)


@pytest.mark.parametrize("mode", ["12c/2201.6/1300.5/3199", "4c/1344/318.75/2133"])
def test_on_the_twin_the_sweeps_measure_the_twins_own_rooflines(mode):
    """``lightning-edge roofline --device sim:orin-agx``: the same sweeps run on the twin through its meter, and
    recover the twin's own rooflines within 10 % (peak, bandwidth, pi_0, eps_flop, eps_mop), labelled simulated."""
    from lightning_edge.devices.board import get_board

    board = get_board("sim:orin-agx", control="write")
    board.controller.apply(mode)
    res = run_microbench(board=board, quick=True)
    assert res.label == "simulated" and all(s.label == "simulated" for s in res.samples)
    assert res.to_profile(mode=mode).source == "simulated"
    for prec in ("fp32", "fp16"):
        own = board.twin.roofline(mode, prec)
        got = res.roofline(prec, mode)
        for coef in ("peak_flops", "bandwidth", "static_power", "eps_flop", "eps_mop"):
            assert float(getattr(got, coef)) == pytest.approx(float(getattr(own, coef)), rel=0.10), (prec, coef)
    board.controller.restore()
    board.close()


def test_the_roofline_command_measures_the_twin(capsys):
    from lightning_edge.cli import main

    assert main(["roofline", "--device", "sim:orin-agx", "--quick", "--json", "-"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["source"] == "simulated"
    (row,) = doc["modes"]
    assert row["mode"] == "12c/2201.6/1300.5/3199" and row["peak_energy_efficiency_static"] is not None
