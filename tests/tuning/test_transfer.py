"""Transfer between boards (issue 29 item 5): a board's calibrated file and the workload's profiles stored for it
make the tuner's prior on another board; on a real board the installed calibrated file is the prior's model."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from lightning_edge.devices import get_board
from lightning_edge.devices.meter import TwinMeter
from lightning_edge.devices.sim.device import SimulatedOrin
from lightning_edge.tuning.online import OnlineTuner, WindowSpec, simulate_tuning
from lightning_edge.tuning.store import ProfileStore
from lightning_edge.tuning.transfer import (
    MODULE_BIAS,
    MODULE_SD,
    fit_to_profiles,
    stored_profiles,
    target_model,
    transferred_prior,
)
from lightning_edge.twin.board_files import board_file, extrapolate, install_board_file, seed_board
from lightning_edge.twin.model import OrinTwin
from lightning_edge.twin.sim_workload import SimWorkload

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.fakes.boards import hidden_board, module_variant  # noqa: E402

FAST = WindowSpec(settle_s=0.0, warmup_steps=1, min_steps=3, max_steps=6)


def _calibrated(bf):
    """``bf`` as if ``lightning-edge calibrate`` had fitted it (its coefficients exactly: a perfect calibration)."""
    bf.calibration = {"label": "simulated", "modes": 15}
    bf.label = "simulated"
    return bf


def _mape(prior, truth) -> tuple[float, float]:
    return (100 * float(np.mean(np.abs(prior.time_s / truth.time_s - 1))),
            100 * float(np.mean(np.abs(prior.power_w / truth.power_w - 1))))


def test_bs_model_is_as_calibrated_coefficients_extrapolated_unless_b_has_its_own():
    a = _calibrated(board_file("orin-nx-16gb"))
    a.params["eff_tc"] = 0.5
    b = board_file("orin-nano-8gb")
    m = target_model(b, a)
    assert m.params["eff_tc"] == 0.5 and m.extrapolation["from"] == "orin-nx-16gb" and m.label == "extrapolated"
    assert target_model(b, board_file("orin-nx-16gb")) is b  # an uncalibrated source teaches nothing
    own = _calibrated(board_file("orin-nano-8gb"))
    assert target_model(own, a) is own


def test_the_workloads_errors_on_a_carry_to_b():
    """A's profiles 10 % slower and 5 % more power than A's calibrated model: B's prior carries the same ratios."""
    a = _calibrated(board_file("orin-nx-16gb"))
    twin_a = OrinTwin(board=a, settling=False)
    wl_a = SimWorkload("mobilenet_v2", twin_a, train_batch_size=8)
    modes = [twin_a.space.coerce(m) for m in ("8c/1984/1173/3199", "4c/1036.8/612/2133", "2c/729.6/306/665.6")]
    profiles = {m: (1.10 * wl_a.expected("train", m)[0], 1.05 * wl_a.expected("train", m)[1]) for m in modes}
    b_space = board_file("orin-nano-8gb").space()
    wl_b = SimWorkload("mobilenet_v2", OrinTwin(board=board_file("orin-nano-8gb")), train_batch_size=8)
    plain = transferred_prior(wl_b, b_space, target=board_file("orin-nano-8gb"), source=a)
    carried = transferred_prior(wl_b, b_space, target=board_file("orin-nano-8gb"), source=a, profiles=profiles)
    assert np.allclose(carried.time_s / plain.time_s, 1.10, rtol=1e-6)
    assert np.allclose(carried.power_w / plain.power_w, 1.05, rtol=1e-6)
    assert "3 profiles" in carried.source and "orin-nx-16gb" in carried.source


def test_a_transferred_prior_knows_b_better_than_the_catalogue():
    """Two modules of one hidden silicon: A calibrated to the silicon, the workload profiled on A at a few modes (its
    data loader is not what the calibration measures); B's prior from A has B's times within a few per cent, the
    catalogue's does not."""
    silicon = hidden_board("orin-agx", 3, base=seed_board())
    a_truth = module_variant(extrapolate(silicon, "orin-nx-16gb"), 1)
    b_truth = module_variant(extrapolate(silicon, "orin-nano-8gb"), 2)
    a_cal = _calibrated(extrapolate(silicon, "orin-nx-16gb"))  # the silicon, not A's own power figures
    wl_a = SimWorkload("resnet18", OrinTwin(board=a_truth), train_batch_size=16)
    rng = np.random.default_rng(0)
    a_space = a_truth.space()
    modes = [a_space.coerce(tuple(k)) for k in a_space.to_numpy()[rng.choice(a_space.size, 8, replace=False)]]
    profiles = {m: wl_a.expected("train", m) for m in modes}
    b_twin = OrinTwin(board=b_truth, settling=False)
    truth = SimWorkload("resnet18", b_twin, train_batch_size=16).sweep("train", modes=b_twin.space)
    wl_b = SimWorkload("resnet18", b_twin, train_batch_size=16)
    catalogue = transferred_prior(wl_b, b_twin.space, target=board_file("orin-nano-8gb"))
    carried = transferred_prior(wl_b, b_twin.space, target=board_file("orin-nano-8gb"), source=a_cal,
                                profiles=profiles)
    t_cat, p_cat = _mape(catalogue, truth)
    t_tr, p_tr = _mape(carried, truth)
    # time is the silicon's: carried whole; power is each module's own too (its figures differ from A's): closer
    # than the catalogue's, and the tuner's profiles on B correct the rest
    assert t_cat > 10 and t_tr < 3 and p_tr < p_cat, (t_cat, p_cat, t_tr, p_tr)


def test_what_a_calibration_cannot_measure_is_fitted_to_the_workloads_profiles_on_a():
    """Issue 38: the reference steps run on synthetic inputs, so a calibrated file holds the data loader's costs at
    the catalogue's; A's profiles of the workload (its own loader) fit them, and only them (what the calibration
    could not separate stays), and B's prior carries them: its times within 1 %, where the calibrated file alone
    is several per cent off."""
    a_cal = board_file("orin-nx-16gb")
    a_cal.calibration = {"label": "simulated", "modes": 15, "unidentified": {"p_gpu_idle_leak_w": {}},
                         "held": ["t_decode_train_ms_per_mpix", "t_fetch_ms_per_mb", "p_gpu_idle_leak_w",
                                  "loader_workers", "dram_bus_bits"], "fitted": ["eff_tc"]}
    a_cal.label = "simulated"
    a_truth = board_file("orin-nx-16gb")
    a_truth.params.update(t_decode_train_ms_per_mpix=a_truth.full_params["t_decode_train_ms_per_mpix"] * 1.35,
                          t_fetch_ms_per_mb=a_truth.full_params["t_fetch_ms_per_mb"] * 0.8)
    twin_a = OrinTwin(board=a_truth, settling=False)
    wl_a = SimWorkload("resnet18", twin_a, train_batch_size=16)
    rng = np.random.default_rng(1)
    modes = [twin_a.space.coerce(tuple(k)) for k in twin_a.space.to_numpy()[rng.choice(twin_a.space.size, 10,
                                                                                         replace=False)]]
    profiles = {m: wl_a.expected("train", m) for m in modes}
    fitted = fit_to_profiles(a_cal, wl_a.twin_workload("train"), profiles, twin_a.space)
    assert fitted.calibration["fitted_to_workload"] and "p_gpu_idle_leak_w" not in fitted.calibration[
        "fitted_to_workload"]
    assert fitted.params["t_decode_train_ms_per_mpix"] == pytest.approx(
        a_truth.params["t_decode_train_ms_per_mpix"], rel=0.05)
    assert fitted.params["p_gpu_idle_leak_w"] == a_cal.full_params["p_gpu_idle_leak_w"]
    assert fit_to_profiles(a_cal, wl_a.twin_workload("train"), dict(list(profiles.items())[:2]), twin_a.space) is a_cal
    b_truth = extrapolate(a_truth, "orin-nano-8gb")
    b_twin = OrinTwin(board=b_truth, settling=False)
    truth = SimWorkload("resnet18", b_twin, train_batch_size=16).sweep("train", modes=b_twin.space)
    wl_b = SimWorkload("resnet18", b_twin, train_batch_size=16)
    prior = transferred_prior(wl_b, b_twin.space, target=board_file("orin-nano-8gb"), source=a_cal, profiles=profiles)
    plain = transferred_prior(wl_b, b_twin.space, target=board_file("orin-nano-8gb"), source=a_cal)
    assert _mape(prior, truth)[0] < 1.0 < _mape(plain, truth)[0]
    assert "fitted to the workload's profiles" in prior.source


def test_a_transferred_prior_says_how_far_off_it_may_be():
    """The prior's uncertainty (what the search uses to choose its first profiles): what A's profiles still scatter
    by, plus what another module adds (MODULE_SD); on A's own module only the first."""
    a = _calibrated(board_file("orin-nx-16gb"))
    twin_a = OrinTwin(board=a, settling=False)
    wl_a = SimWorkload("mobilenet_v2", twin_a, train_batch_size=8)
    rng = np.random.default_rng(0)
    modes = [twin_a.space.coerce(tuple(k)) for k in twin_a.space.to_numpy()[rng.choice(twin_a.space.size, 6,
                                                                                         replace=False)]]
    noisy = {m: (wl_a.expected("train", m)[0], wl_a.expected("train", m)[1] * (1 + 0.02 * (-1) ** i))
             for i, m in enumerate(modes)}
    b_space = board_file("orin-nano-8gb").space()
    wl_b = SimWorkload("mobilenet_v2", OrinTwin(board=board_file("orin-nano-8gb")), train_batch_size=8)
    other = transferred_prior(wl_b, b_space, target=board_file("orin-nano-8gb"), source=a, profiles=noisy)
    assert other.power_sd >= MODULE_SD[1] and other.time_sd >= MODULE_SD[0]
    assert other.power_sd > np.hypot(MODULE_SD[1], 0.015)  # A's profiles scatter by 2 % around its model
    same = transferred_prior(wl_a, twin_a.space, target=a, source=a, profiles=noisy)
    assert same.power_sd < other.power_sd and "uncertain by" in same.source
    # another module's power figures offset the whole board (MODULE_BIAS), which B's first profile corrects: the
    # first pick leaves room for it; on A's own module nothing is offset
    assert other.power_error == MODULE_BIAS and same.power_error == 0.0


def test_profiles_stored_for_one_board_are_read_back_for_another(tmp_path):
    url = f"sqlite:///{tmp_path}/p.db"
    board = get_board("sim:orin-nx-16gb", control="write")
    wl = SimWorkload("lstm", board.twin, train_batch_size=4, seed=0)
    tuner = OnlineTuner(12.0, board.controller, TwinMeter(board.twin, seed=0, train=wl), window=FAST,
                        store=ProfileStore(url), fingerprint=wl.fingerprint, prior=None)
    tuner.start()
    while tuner.tuned_at_step is None and tuner.step < 3000:
        tuner.before_step()
        tuner.after_step()
    tuner.close()
    key = board.store_key
    board.close()
    assert key.startswith("sim:orin-nx-16gb+")  # the twin's model digest: another model's profiles stay apart
    got = stored_profiles(ProfileStore(url), key, wl.fingerprint)
    assert len(got) >= tuner.summary().profiles_used >= 3  # the strategy's profiles, and MAXN's for the summary
    assert all(m in board.space for m in got) and all(t > 0 and p > 0 for t, p in got.values())


def tiny() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(8, 10))


X = torch.randn(16, 3, 32, 32)


def test_on_a_real_board_the_prior_and_the_profilers_roofline_come_from_its_installed_file(tmp_path, monkeypatch):
    """A real Orin Nano (the twin's controller behind a measured meter): with no file, the catalogue's extrapolated
    board is the prior's model; with a calibrated file installed, that file is (and the board's roofline)."""
    monkeypatch.setenv("LIGHTNING_EDGE_BOARDS", str(tmp_path))
    sim = SimulatedOrin(board="orin-nano-8gb", settling=False, seed=0)
    meter = TwinMeter(sim, seed=0)
    meter.bind(tiny(), (X,))
    real = type("RealMeter", (), {k: getattr(meter, k) for k in ("open", "now_s", "mode_changed", "start", "stop",
                                                                 "close")})()
    real.label, real.simulated = "measured", False

    def prior_of():
        t = OnlineTuner(8.0, sim.controller, real, window=FAST, store=None, fingerprint="tiny")
        assert t.wants_board_prior
        t.bind_model(tiny(), (X,))
        t.start()
        t.close()
        return t.prior

    before = prior_of()
    assert before is not None and "extrapolated twin model of orin-nano-8gb" in before.source
    bf = _calibrated(board_file("orin-nano-8gb"))
    bf.params["p_base_w"] *= 1.5
    bf.label = "measured"
    install_board_file(bf)
    after = prior_of()
    assert "measured twin model of orin-nano-8gb" in after.source
    assert np.all(after.power_w > before.power_w)
    board = get_board(type("Real", (), {"sensor": None, "controller": sim.controller})())
    roof, desc = board.roofline(None)
    assert "calibrated twin" in desc and roof.static_power == pytest.approx(
        float(OrinTwin(board=bf, space=sim.space).static_power(sim.controller.current())))
    board.close()


@pytest.fixture(scope="module")
def one_pair(tmp_path_factory) -> list[dict]:
    """benchmarks/transfer.py on one pair and seed: A calibrated from 15 modes, the workload tuned on A into a store,
    then on B with no prior, the catalogue's and the transferred prior (2 workloads x 3 budgets)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import transfer as bench

    rows: list[dict] = []
    bench.run_pair(("orin-nx-16gb", "orin-nano-8gb"), 0, tmp_path_factory.mktemp("pair"), rows)
    return rows


@pytest.mark.slow
def test_the_tuner_with_a_transferred_prior_lands_within_3_percent_of_the_oracle(one_pair):
    """The acceptance of issue 29 item 5 and issue 38 part 3 on one pair (benchmarks/transfer.py runs several): the
    median over budgets within 3 % of the oracle, with fewer profiles than without a prior, and none over the
    budget."""
    tr = [r for r in one_pair if r["setting"] == "transferred prior"]
    none = [r for r in one_pair if r["setting"] == "no prior"]
    assert np.median([r["excess"] for r in tr]) <= 3.0
    assert np.median([r["profiles"] for r in tr]) < np.median([r["profiles"] for r in none])
    assert not any(r["over"] for r in tr)


@pytest.mark.slow
def test_every_run_of_the_pair_lands_within_3_percent(one_pair):
    """Issue 38: every run of this pair within 3 % of the oracle. ResNet-18 at 45 % of B's highest power stopped at
    +3.15 % while a profile's guard was a fixed 0.3 %: the oracle's mode, 0.39 % under the budget, read over it; its
    window is now measured longer at the budget's edge and held to its own noise. Over seeds 0-5 100 of 108 runs
    land within 3 %, over the held-out seeds 6-11 96 of 108 (BENCHMARKS.md, transfer)."""
    tr = [r for r in one_pair if r["setting"] == "transferred prior"]
    assert all(r["excess"] <= 3.0 for r in tr), [(r["workload"], round(r["excess"], 2)) for r in tr]


def test_a_simulated_board_file_tunes_with_its_catalogues_prior(tmp_path):
    """On sim:FILE.json the default prior models the board with its catalogue's board, never the file (the truth)."""
    path = hidden_board("orin-nano-4gb", 5).save(tmp_path / "h.json")
    board = get_board(f"sim:{path}", control="write")
    wl = SimWorkload("lstm", board.twin, train_batch_size=4, seed=0)
    t = simulate_tuning(wl, 6.0, board=board, window=FAST)
    assert "extrapolated twin model of orin-nano-4gb" in t.summary().progress.prior
    board.close()
