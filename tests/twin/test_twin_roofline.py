"""The twin's roofline reproduces Pagoda's table (sections 7.2-7.3) and its qualitative facts."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_edge.modes import PowerMode
from lightning_edge.twin.validation import MAXN, pagoda_sample_space

# (GPU MHz, memory MHz) -> peak TFLOP/s, bandwidth GB/s, time balance FLOP/B (None: not published)
TABLE = [
    ((1300.5, 3199.0), 14.7, 164.4, 89.4),
    ((1134.75, 3199.0), 13.7, 159.1, 85.9),
    ((726.75, 3199.0), 9.5, 141.3, 67.0),
    ((318.75, 3199.0), None, None, 69.1),
    ((1300.5, 2133.0), 11.4, 103.9, 109.9),
    ((1300.5, 665.6), None, None, 88.1),
]


@pytest.mark.parametrize("knobs,peak,bw,balance", TABLE, ids=[f"{g:g}-{m:g}" for (g, m), *_ in TABLE])
def test_roofline_table_row(twin, knobs, peak, bw, balance):
    r = twin.roofline(MAXN.replace(gpu_mhz=knobs[0], mem_mhz=knobs[1]))
    assert r.source == "simulated"
    if peak is not None:
        assert r.peak_flops / 1e12 == pytest.approx(peak, rel=0.10)
        assert r.bandwidth / 1e9 == pytest.approx(bw, rel=0.10)
    assert r.time_balance == pytest.approx(balance, rel=0.10)


def test_energy_coefficients_at_maxn(twin):
    r = twin.roofline("maxn")
    assert r.eps_flop * 1e12 == pytest.approx(3.86, rel=0.10)
    assert r.eps_mop * 1e12 == pytest.approx(141.38, rel=0.10)
    assert r.static_power == pytest.approx(17.9, rel=0.10)


@pytest.mark.parametrize("mem,eps_mop_pj", [(665.6, 444.9), (2133.0, 174.7), (3199.0, 141.4)])
def test_eps_mop_falls_with_memory_clock(twin, mem, eps_mop_pj):
    assert twin.roofline(MAXN.replace(mem_mhz=mem)).eps_mop * 1e12 == pytest.approx(eps_mop_pj, rel=0.10)


def test_cpu_knobs_do_not_move_the_roofline(twin):
    space = twin.space
    roof = twin.roofline(space)
    for coef in (roof.peak_flops, roof.bandwidth, roof.eps_flop, roof.eps_mop):
        grid = np.asarray(coef).reshape(space.shape)
        assert np.ptp(grid, axis=(0, 1)).max() == 0.0
    static = twin.static_power(space).reshape(space.shape)
    assert np.all(np.diff(static, axis=0) > 0) and np.all(np.diff(static, axis=1) > 0)  # but pi_0 does move


def test_gpu_clock_lowers_bandwidth_and_balance_is_non_monotone(twin):
    bw = [twin.roofline(MAXN.replace(gpu_mhz=g)).bandwidth for g in (1300.5, 1134.75, 726.75, 318.75)]
    assert bw == sorted(bw, reverse=True)
    bal = [twin.roofline(MAXN.replace(gpu_mhz=g)).time_balance for g in (1300.5, 1134.75, 726.75, 318.75)]
    assert bal[0] > bal[1] > bal[2] < bal[3]
    balm = [twin.roofline(MAXN.replace(mem_mhz=m)).time_balance for m in (3199.0, 2133.0, 665.6)]
    assert balm[0] < balm[1] > balm[2]


def test_precisions_at_maxn(twin):
    r16 = twin.roofline(MAXN, "fp16")
    assert r16.peak_flops / 1e12 == pytest.approx(33.0, rel=0.10)
    assert r16.bandwidth / 1e9 == pytest.approx(159.7, rel=0.10)
    assert r16.time_balance == pytest.approx(208.4, rel=0.10)
    assert twin.roofline(MAXN, "fp32_cuda").peak_flops / 1e12 == pytest.approx(3.49, rel=0.10)


def test_ranges_over_pagoda_modes_and_full_grid(twin):
    r = twin.roofline(pagoda_sample_space())
    assert 3.4 * 0.75 <= r.peak_flops.min() / 1e12 and r.peak_flops.max() / 1e12 <= 14.8 * 1.1
    assert 35.9 * 0.75 <= r.bandwidth.min() / 1e9 and r.bandwidth.max() / 1e9 <= 164.4 * 1.1
    assert 66.7 * 0.75 <= r.time_balance.min() and r.time_balance.max() <= 113.3 * 1.25
    full = twin.roofline()  # every mode, including the 204 MHz EMC Pagoda did not sample
    assert full.shape == (18096,)
    assert np.all(full.peak_flops > 0) and np.all(full.bandwidth > 0)


def test_energy_efficiency_facts(twin):
    ps = pagoda_sample_space()
    r = twin.roofline(ps)
    knobs = ps.to_numpy()
    med = {g: np.median(np.asarray(r.eps_flop)[knobs[:, 2] == g]) for g in ps.gpu_mhz}
    assert min(med, key=med.get) == 726.75
    ee = np.asarray(r.peak_energy_efficiency(True))
    best = ps.mode_at(int(np.argmax(ee)))
    assert best.gpu_mhz == 726.75
    # Pagoda's best also has 2.1 GHz memory; the twin puts 0.7 GHz / 2.1 GHz within 1.5 % of its best
    # (a known residual, see docs/twin.md and the validation table)
    assert ee[(knobs[:, 2] == 726.75) & (knobs[:, 3] == 2133.0)].max() >= 0.985 * ee.max()
    gain = twin.roofline(PowerMode(8, 1651.2, 726.75, 2133.0)).peak_energy_efficiency(True) / \
        twin.roofline(MAXN).peak_energy_efficiency(True) - 1
    assert 100 * gain == pytest.approx(2.4, abs=2.0)


def test_single_mode_accepts_labels_and_arrays(twin):
    a = twin.roofline("8c/1344/727/2133")
    b = twin.roofline(np.array([8, 1344.0, 726.75, 2133.0]))
    assert a.peak_flops == pytest.approx(b.peak_flops)
    many = twin.roofline([MAXN, "8c/1344/727/2133"])
    assert many.shape == (2,)


def test_shipped_profile_is_a_simulated_device_profile(twin):
    from lightning_edge.roofline.profile import load_profile

    prof = load_profile("orin-agx-twin")
    assert prof.source == "simulated"
    assert set(twin.physics.p) <= set(prof.fit["params"])
    maxn = prof.roofline("12c/2201.6/1300.5/3199")
    assert maxn.peak_flops == pytest.approx(twin.roofline(MAXN).peak_flops)
    assert maxn.static_power == pytest.approx(twin.roofline(MAXN).static_power)
