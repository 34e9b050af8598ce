"""Every roofline formula against values derived by hand (the arithmetic is written beside each)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import lightning_edge
from lightning_edge.roofline import Bound, Roofline
from lightning_edge.roofline.profile import ModeEntry

# Pagoda MAXN (sections 5.2.4 and 7.2.1)
F, B, EF, EM, P0 = 14.7e12, 164.4e9, 3.86e-12, 141.38e-12, 17.9


@pytest.fixture
def maxn() -> Roofline:
    return Roofline(peak_flops=F, bandwidth=B, eps_flop=EF, eps_mop=EM, static_power=P0)


def test_lazy_export_from_package():
    assert lightning_edge.Roofline is Roofline


def test_tau_and_time_balance(maxn):
    assert maxn.tau_flop == pytest.approx(1 / 14.7e12)
    assert maxn.tau_mop == pytest.approx(1 / 164.4e9)
    # 14.7e12 / 164.4e9 = 89.416 FLOP/B (Pagoda: 89.4 / 89.41)
    assert maxn.time_balance == pytest.approx(89.41606, rel=1e-6)
    assert round(maxn.time_balance, 1) == 89.4


def test_time_memory_and_compute_bound(maxn):
    # W = 1e9, Q = 1e8: W/F = 68.03 us, Q/B = 608.27 us -> memory-bound, T = 608.27 us (eq. 1)
    assert maxn.time(1e9, 1e8) == pytest.approx(1e8 / 164.4e9)
    assert maxn.time(1e9, 1e8) == pytest.approx(608.2725e-6, rel=1e-6)
    # W = 1e12, Q = 1e9: W/F = 68.027 ms, Q/B = 6.083 ms -> compute-bound, T = 68.027 ms
    assert maxn.time(1e12, 1e9) == pytest.approx(68.02721e-3, rel=1e-6)
    assert maxn.time(0, 0) == 0.0


def test_attainable(maxn):
    # memory side: I * BW = 10 * 164.4e9 = 1.644 TFLOP/s; compute side: capped at 14.7 TFLOP/s
    assert maxn.attainable(10) == pytest.approx(1.644e12)
    assert maxn.attainable(1000) == pytest.approx(14.7e12)
    assert maxn.attainable(maxn.time_balance) == pytest.approx(14.7e12)
    assert maxn.attainable(0) == 0.0
    assert maxn.attainable(math.inf) == pytest.approx(14.7e12)


def test_energy_eq2_memory_bound(maxn):
    # E = 3.86e-12 * 1e9 + 141.38e-12 * 1e8 + 17.9 * 608.2725e-6
    #   = 3.860e-3 + 14.138e-3 + 10.888e-3 = 28.886e-3 J
    assert maxn.energy(1e9, 1e8) == pytest.approx(28.88608e-3, rel=1e-5)
    # without static power: 3.860e-3 + 14.138e-3 = 17.998e-3 J
    assert maxn.energy(1e9, 1e8, static=False) == pytest.approx(17.998e-3, rel=1e-9)


def test_energy_eq2_compute_bound_and_given_time(maxn):
    # E = 3.86 + 0.14138 + 17.9 * 0.0680272 (= 1.21769) = 5.21907 J
    assert maxn.energy(1e12, 1e9) == pytest.approx(5.219067, rel=1e-6)
    # a measured time replaces the roofline time: 3.86 + 0.14138 + 17.9 * 0.1 = 5.79138 J
    assert maxn.energy(1e12, 1e9, time_s=0.1) == pytest.approx(5.79138, rel=1e-9)


def test_power(maxn):
    # 28.886e-3 J / 608.27e-6 s = 47.49 W
    assert maxn.power(1e9, 1e8) == pytest.approx(28.88608e-3 / 608.2725e-6, rel=1e-6)


def test_efficiency_eq7_memory_bound(maxn):
    # I = 10 < beta_tau: 1/(W/E) = 3.86e-12 + 141.38e-12/10 + (17.9/164.4e9)/10
    #                            = (3.86 + 14.138 + 10.888) pJ = 28.886 pJ -> 34.62 GFLOP/J
    assert maxn.efficiency(10) == pytest.approx(1 / 28.88608e-12, rel=1e-6)
    # without static: 1 / (3.86 + 14.138) pJ = 55.56 GFLOP/J
    assert maxn.efficiency(10, static=False) == pytest.approx(1 / 17.998e-12, rel=1e-9)


def test_efficiency_eq8_compute_bound(maxn):
    # I = 200 > beta_tau: 1/(W/E) = 3.86 + 141.38/200 + 17.9/14.7e12*1e12 = 3.86 + 0.7069 + 1.21769 pJ
    assert maxn.efficiency(200) == pytest.approx(1 / 5.784587e-12, rel=1e-6)
    assert maxn.efficiency(0) == 0.0


def test_efficiency_equals_w_over_e(maxn):
    w, q = np.array([1e9, 3e11, 5e12]), np.array([1e8, 2e9, 1e10])
    assert np.allclose(maxn.efficiency(w / q), w / np.asarray(maxn.energy(w, q)), rtol=1e-12)


def test_peak_energy_efficiency(maxn):
    # eq. 4: 1 / 3.86e-12 = 259.07 GFLOP/J (Pagoda: 0.26 TFLOP/J)
    assert maxn.peak_energy_efficiency(static=False) == pytest.approx(259.0674e9, rel=1e-6)
    # section 5.2.2: 1 / (3.86e-12 + 17.9/14.7e12) = 1 / 5.077687e-12 = 196.94 GFLOP/J (Pagoda: 0.196)
    assert maxn.peak_energy_efficiency() == pytest.approx(196.9401e9, rel=1e-6)
    assert maxn.efficiency(math.inf) == pytest.approx(maxn.peak_energy_efficiency())


def test_energy_balance_eq5(maxn):
    # with pi_0: (141.38 + 17.9/164.4e9 [=108.881 pJ]) / (3.86 + 2*17.9/14.7e12 [=2.435 pJ])
    #          = 250.261 / 6.29537 = 39.753 FLOP/B (Pagoda: 39.8)
    assert maxn.energy_balance() == pytest.approx(39.75312, rel=1e-6)
    # without: 141.38 / 3.86 = 36.627 FLOP/B (Pagoda prints 36.5 and "36.6x")
    assert maxn.energy_balance(static=False) == pytest.approx(36.62694, rel=1e-6)
    # here eq. 5's memory-bound assumption holds (39.75 < 89.42): "auto" agrees
    assert maxn.energy_balance(region="auto") == pytest.approx(maxn.energy_balance())
    # the definition: efficiency at the balance point is half the peak
    assert maxn.efficiency(maxn.energy_balance()) == pytest.approx(maxn.peak_energy_efficiency() / 2, rel=1e-9)
    assert maxn.efficiency(maxn.energy_balance(False), static=False) == pytest.approx(
        maxn.peak_energy_efficiency(False) / 2, rel=1e-9)


def test_energy_balance_when_eq5_falls_in_the_compute_region():
    # beta_tau = 1e12 / 1e11 = 10. eq. 5: (100 + 1/1e11 [=10 pJ]) / (1 + 2/1e12 [=2 pJ]) = 110/3 = 36.67 > 10,
    # so T = Q/BW does not hold there. Compute branch: 100 / (1 + 1) = 50, where W/E = 1/(1 + 2 + 1) pJ = 0.25e12,
    # half of the peak 1/(1 + 1) pJ = 0.5e12.
    r = Roofline(1e12, 1e11, eps_flop=1e-12, eps_mop=100e-12, static_power=1.0)
    assert r.energy_balance() == pytest.approx(110 / 3)
    assert r.energy_balance(region="auto") == pytest.approx(50.0)
    assert r.efficiency(50.0) == pytest.approx(0.25e12)
    assert r.peak_energy_efficiency() == pytest.approx(0.5e12)
    assert r.efficiency(110 / 3) != pytest.approx(0.25e12)
    with pytest.raises(ValueError, match="region"):
        r.energy_balance(region="compute")


def test_bound_scalars(maxn):
    assert maxn.bound(20) == Bound("memory", "memory")            # 20 < 39.75 < 89.42
    assert maxn.bound(50) == Bound("memory", "compute")           # BERT-like: 39.75 < 50 < 89.42
    assert maxn.bound(100) == Bound("compute", "compute")
    assert maxn.bound(38).energy == "memory"                      # 38 < 39.75 with pi_0 ...
    assert maxn.bound(38, static=False).energy == "compute"       # ... but > 36.63 without
    assert maxn.bound(maxn.time_balance).time == "compute"        # ties go to compute
    assert isinstance(maxn.bound(20).time, str)


def test_bound_arrays(maxn):
    b = maxn.bound(np.array([1.0, 50.0, 500.0]))
    assert b.time.tolist() == ["memory", "memory", "compute"]
    assert b.energy.tolist() == ["memory", "compute", "compute"]


def test_time_only_roofline():
    r = Roofline(1e12, 1e11)
    assert not r.has_energy
    assert r.time_balance == pytest.approx(10.0)
    assert r.bound(5.0) == Bound("memory", None)
    with pytest.raises(ValueError, match="no energy coefficients"):
        r.energy(1, 1)
    with pytest.raises(ValueError, match="no energy coefficients"):
        r.efficiency(1.0)


def test_missing_static_power():
    r = Roofline(1e12, 1e11, eps_flop=1e-12, eps_mop=1e-10)
    assert r.energy(1e9, 0, static=False) == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="static power"):
        r.energy(1e9, 0)


def test_zero_static_power_equals_no_static(maxn):
    r = Roofline(F, B, EF, EM, static_power=0.0)
    assert r.energy_balance() == pytest.approx(maxn.energy_balance(static=False))
    assert r.peak_energy_efficiency() == pytest.approx(maxn.peak_energy_efficiency(static=False))


@pytest.mark.parametrize("kwargs, match", [
    ({"peak_flops": -1, "bandwidth": 1e9}, "peak_flops: expected a positive"),
    ({"peak_flops": 1e12, "bandwidth": 0}, "bandwidth: expected a positive"),
    ({"peak_flops": 1e12, "bandwidth": 1e9, "eps_flop": -3.86}, "eps_flop: expected a non-negative"),
    ({"peak_flops": 1e12, "bandwidth": 1e9, "static_power": float("inf")}, "static_power"),
    ({"peak_flops": "fast", "bandwidth": 1e9}, "peak_flops: expected a number"),
    ({"peak_flops": None, "bandwidth": 1e9}, "peak_flops"),
    ({"peak_flops": [1e12, 2e12], "bandwidth": [1e9, 2e9, 3e9]}, "do not broadcast"),
])
def test_bad_coefficients(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Roofline(**kwargs)


def test_bad_workload_inputs(maxn):
    with pytest.raises(ValueError, match="flops"):
        maxn.time(-1, 10)
    with pytest.raises(ValueError, match="intensity"):
        maxn.attainable(float("nan"))


# ---------------------------------------------------------------- vectorisation
def test_array_coefficients_elementwise():
    # three modes: (peak, bw) -> balance 10, 20, 40
    r = Roofline([1e12, 2e12, 4e12], [1e11, 1e11, 1e11], eps_flop=[1e-12, 2e-12, 3e-12], eps_mop=1e-10,
                 static_power=[5.0, 10.0, 20.0])
    assert r.shape == (3,)
    assert np.allclose(r.time_balance, [10, 20, 40])
    # the same layer W = 1e9, Q = 1e8 on each: times max(1e-3, 1e-3), max(5e-4, 1e-3), max(2.5e-4, 1e-3) = 1e-3
    assert np.allclose(r.time(1e9, 1e8), [1e-3, 1e-3, 1e-3])
    # energies: 1e-3 + 1e-2 + 5e-3 ; 2e-3 + 1e-2 + 1e-2 ; 3e-3 + 1e-2 + 2e-2
    assert np.allclose(r.energy(1e9, 1e8), [0.016, 0.022, 0.033])
    assert r.bound(15).time.tolist() == ["compute", "memory", "memory"]
    # eq. 5 per mode, e.g. mode 0: (1e-10 + 5/1e11) / (1e-12 + 10/1e12) = 1.5e-10 / 1.1e-11 = 13.636
    assert r.energy_balance()[0] == pytest.approx(1.5e-10 / 1.1e-11)


def test_outer_gives_modes_by_layers():
    r = Roofline([1e12, 2e12], 1e11, eps_flop=1e-12, eps_mop=1e-10, static_power=0.0)
    w = np.array([1e9, 1e10, 1e11])
    q = np.array([1e7, 1e7, 1e7])
    t = r.outer().time(w, q)
    assert t.shape == (2, 3)
    # mode 0, layer 2: max(1e11/1e12, 1e7/1e11) = 0.1; mode 1: 0.05
    assert t[0, 2] == pytest.approx(0.1) and t[1, 2] == pytest.approx(0.05)
    assert r.outer().energy(w, q).shape == (2, 3)


def test_layers_vector_with_scalar_roofline(maxn):
    w = np.array([1e9, 1e12])
    q = np.array([1e8, 1e9])
    assert np.allclose(maxn.time(w, q), [608.2725e-6, 68.02721e-3], rtol=1e-6)
    assert np.allclose(maxn.energy(w, q), [28.88608e-3, 5.219067], rtol=1e-5)
    assert isinstance(maxn.time(1e9, 1e8), float)


def test_stack_and_getitem(maxn):
    r2 = Roofline(13.7e12, 159.1e9, label="1.1 GHz")
    s = Roofline.stack([Roofline(F, B, EF, EM, P0, label="maxn"), r2])
    assert s.shape == (2,) and s.label == ("maxn", "1.1 GHz")
    # 13.7e12 / 159.1e9 = 86.11 (Pagoda: 85.9)
    assert np.allclose(s.time_balance, [89.41606, 86.10937], rtol=1e-6)
    one = s[1]
    assert one.label == "1.1 GHz" and one.shape == ()
    assert not one.has_energy
    assert np.isnan(s.summary()["energy_balance_static"][1])
    assert s.summary()["energy_balance_static"][0] == pytest.approx(maxn.energy_balance())
    with pytest.raises(TypeError):
        len(maxn)


def test_dict_round_trip(maxn):
    d = maxn.to_dict()
    assert d["static_power_w"] == 17.9 and d["eps_mop"] == pytest.approx(141.38e-12)
    back = Roofline.from_dict(d)
    assert back.energy_balance() == pytest.approx(maxn.energy_balance())
    assert Roofline(1e12, 1e11).to_dict()["eps_flop"] is None


def test_from_profile_mode_entry():
    entry = {"mode": "12c/2201.6/1300.5/3199",
             "precision": {"fp32": {"peak_flops": F, "bandwidth": B}, "fp16": {"peak_flops": 33.0e12, "bandwidth": 159.7e9}},
             "eps_flop": EF, "eps_mop": EM, "static_power_w": P0}
    r = ModeEntry.from_dict(entry).roofline()
    assert r.energy_balance() == pytest.approx(39.75312, rel=1e-6)
    # fp16: 33.0e12 / 159.7e9 = 206.64 FLOP/B (Pagoda prints 208.4 from unrounded peaks)
    assert ModeEntry.from_dict(entry).roofline("fp16").time_balance == pytest.approx(206.6374, rel=1e-6)
    assert r.label == "12c/2201.6/1300.5/3199"
