"""Per-layer energy estimators, each against values derived by hand (arithmetic beside each value)."""

from __future__ import annotations

import numpy as np
import pytest

from lightning_edge.cost.types import Cost, LayerCost
from lightning_edge.energy import (
    SYNERGY_TX1,
    TX2,
    XAVIER_NX,
    ConvFCEnergyModel,
    ConvShape,
    EnergyEstimator,
    FCShape,
    LayerEnergies,
    LayerEnergy,
    MACRegression,
    RefinedRoofline,
    RooflineEnergy,
    fit_h_params,
    gemm_utilization,
    shapes_from_model,
    utilization_efficiency,
)
from lightning_edge.roofline import Roofline, load_profile

MAXN_MODE = "12c/2201.6/1300.5/3199"


@pytest.fixture(scope="module")
def pagoda():
    return load_profile("orin-agx-pagoda")


@pytest.fixture
def maxn(pagoda) -> Roofline:
    return pagoda.roofline(MAXN_MODE)


def layer(name, flops, bytes_, kind="Conv2d", macs=None):
    return LayerCost(name, kind, forward=Cost(flops=int(flops), macs=int(macs if macs is not None else flops // 2),
                                               bytes_read=int(bytes_), bytes_written=0))


# ================================================================ (a) roofline energy, Pagoda eq. 2
def test_roofline_energy_memory_bound(maxn):
    # W = 2e9, Q = 6e7: W/F = 136.05 us < Q/BW = 364.96 us -> T = 364.96 us
    # E = 3.86e-12*2e9 (7.7200e-3) + 141.38e-12*6e7 (8.4828e-3) + 17.9*364.96e-6 (6.5328e-3) = 22.7356e-3 J
    e = RooflineEnergy().estimate(layer("conv1", 2e9, 6e7), maxn)
    assert isinstance(e, LayerEnergy)
    assert e.energy_j == pytest.approx(22.73565e-3, rel=1e-6)
    assert e.time_s == pytest.approx(6e7 / 164.4e9)
    assert e.method == "roofline" and e.label == "estimated" and e.name == "conv1"
    assert e.power_w == pytest.approx(22.73565e-3 / 364.9635e-6, rel=1e-5)   # 62.3 W


def test_roofline_energy_without_static(maxn):
    # 7.7200e-3 + 8.4828e-3 = 16.2028e-3 J
    e = RooflineEnergy(static=False).estimate(layer("conv1", 2e9, 6e7), maxn)
    assert e.energy_j == pytest.approx(16.2028e-3, rel=1e-9)


def test_roofline_energy_compute_bound(maxn):
    # W = 1e12, Q = 1e9: T = W/F = 68.027 ms; E = 3.86 + 0.14138 + 17.9*0.068027 (1.21769) = 5.21907 J
    e = RooflineEnergy().estimate({"name": "big", "flops": 1e12, "bytes": 1e9}, maxn)
    assert e.energy_j == pytest.approx(5.219067, rel=1e-6)


def test_roofline_energy_with_measured_layer_time(maxn):
    # T = 1 ms given: 7.72e-3 + 8.4828e-3 + 17.9e-3 = 34.1028e-3 J
    lay = {"name": "x", "flops": 2e9, "bytes": 6e7, "time_s": 1e-3}
    assert RooflineEnergy(use_layer_time=True).estimate(lay, maxn).energy_j == pytest.approx(34.1028e-3, rel=1e-9)
    assert RooflineEnergy().estimate(lay, maxn).energy_j == pytest.approx(22.73565e-3, rel=1e-6)


def test_roofline_energy_mode_string_via_profile(pagoda):
    est = RooflineEnergy(profile=pagoda)
    assert est.estimate(layer("c", 2e9, 6e7), MAXN_MODE).energy_j == pytest.approx(22.73565e-3, rel=1e-6)
    with pytest.raises(ValueError, match="no energy coefficients"):
        est.estimate(layer("c", 2e9, 6e7), "12c/2201.6/726.75/3199")       # published without eps
    with pytest.raises(ValueError, match="no profile"):
        RooflineEnergy().estimate(layer("c", 1, 1), MAXN_MODE)
    with pytest.raises(ValueError, match="no device given"):
        RooflineEnergy().estimate(layer("c", 1, 1))


def test_roofline_energy_vectorised(pagoda, maxn):
    layers = [layer("a", 2e9, 6e7), {"name": "b", "flops": 1e12, "bytes": 1e9}]
    res = RooflineEnergy().estimate_many(layers, maxn)
    assert isinstance(res, LayerEnergies)
    assert res.energy_j.tolist() == pytest.approx([22.73565e-3, 5.219067], rel=1e-6)
    assert res.total_energy_j == pytest.approx(22.73565e-3 + 5.219067, rel=1e-6)
    assert [x.name for x in res] == ["a", "b"]
    # every mode of the profile at once: (4 modes, 2 layers); modes without eps give NaN
    many = RooflineEnergy().estimate_many(layers, pagoda.rooflines())
    assert many.energy_j.shape == (4, 2)
    assert many.energy_j[0].tolist() == pytest.approx([22.73565e-3, 5.219067], rel=1e-6)
    assert np.isnan(many.energy_j[1:]).all()
    # times are known for every mode: the 0.7 GHz GPU mode, layer b: 1e12 / 9.5e12 = 105.26 ms
    assert many.time_s[2, 1] == pytest.approx(1e12 / 9.5e12)


# ================================================================ (d) refined roofline (Jantsch)
def test_utilization_efficiency_slide_example():
    # 12 x 6 feature map on a 16 x 12 PE array: (12/12)/1 * (6/16)/1 = 0.375
    assert utilization_efficiency((12, 6), (12, 16)) == pytest.approx(0.375)
    assert utilization_efficiency((32, 64), (16, 16)) == 1.0
    # 40 over 16: 2.5 / 3 = 0.8333
    assert utilization_efficiency((40,), (16,)) == pytest.approx(2.5 / 3)
    with pytest.raises(ValueError, match="pair up"):
        utilization_efficiency((1, 2), (1,))
    with pytest.raises(ValueError, match="positive"):
        utilization_efficiency((0,), (4,))


def test_gemm_utilization():
    # M = 112*112 = 12544 on 128-row tiles: 98 tiles exactly -> 1; N = 32 on 64: 0.5;
    # 98 tiles over 16 SMs: 6.125 / 7 = 0.875 -> u = 0.4375
    assert gemm_utilization(112 * 112, 32) == pytest.approx(0.4375)
    # 2048 x 1024: 16 x 16 = 256 tiles = 16 waves of 16 SMs: u = 1
    assert gemm_utilization(2048, 1024) == pytest.approx(1.0)


def test_refined_roofline_energy(maxn):
    # u_eff = 0.5: T = max(1e12 / (14.7e12 * 0.5) = 136.054 ms, 6.08 ms) = 136.054 ms
    # E = 3.86 + 0.14138 + 17.9 * 0.136054 (2.43537) = 6.43675 J
    lay = {"name": "x", "flops": 1e12, "bytes": 1e9, "u_eff": 0.5}
    e = RooflineEnergy(time_model=RefinedRoofline()).estimate(lay, maxn)
    assert e.time_s == pytest.approx(0.1360544, rel=1e-6)
    assert e.energy_j == pytest.approx(6.436749, rel=1e-6)
    assert e.method == "roofline_refined" and e.details["u_eff"] == 0.5


def test_refined_roofline_from_shape(maxn):
    # conv 14x14x256 -> 32 channels, 3x3, pad 1: M = 196, N = 32, tiles = ceil(196/128)*ceil(32/64) = 2
    # u = (196/128)/2 * (32/64)/1 * (2/16)/1 = 0.765625 * 0.5 * 0.125 = 0.0478515625
    shape = ConvShape(14, 256, 32, ksize=3, stride=1, padding=1, name="conv")
    rr = RefinedRoofline()
    u, how = rr.u_eff(shape)
    assert u == pytest.approx(0.0478515625) and how == "gemm tiling"
    lay = layer("conv", 2 * 196 * 32 * 256 * 9, 1e6)
    assert rr.u_eff(lay) == (1.0, "no shape: plain roofline")
    rr2 = RefinedRoofline(shapes={"conv": shape})
    t, u2, _ = rr2.layer_time(maxn, lay)
    # W = 28,901,376 FLOP: W/(F u) = 28901376 / (14.7e12 * 0.0478515625) = 41.09 us > Q/BW = 6.08 us
    assert u2 == pytest.approx(0.0478515625)
    assert t == pytest.approx(28901376 / (14.7e12 * 0.0478515625), rel=1e-9)
    with pytest.raises(ValueError, match="u_eff"):
        RefinedRoofline.time(maxn, 1, 1, u_eff=0)
    # vectorised through the estimator
    res = RooflineEnergy(time_model=rr2).estimate_many([lay], maxn)
    assert res.time_s[0] == pytest.approx(t)


# ================================================================ (b) conv/FC empirical model (Lahmer et al.)
def test_conv_shape_loads():
    s = ConvShape(224, 3, 64, ksize=3, stride=1)
    # eq. 2 exact: ((224 - 3)/1 + 1)^2 * 3 * 3^2 = 222^2 * 27 = 49284 * 27 = 1,330,668 MACs per kernel
    assert s.kclc() == 1_330_668
    assert s.clc() == 1_330_668 * 64          # eq. 3
    # approximation: (224/1)^2 * 3 * 9 = 50176 * 27 = 1,354,752
    assert s.kclc(approx=True) == pytest.approx(1_354_752)
    # stride 2: floor(221/2) + 1 = 111 (the paper's (i - k)/s + 1 = 111.5 assumes it divides)
    assert ConvShape(224, 3, 64, ksize=3, stride=2).kclc() == 111 * 111 * 27
    assert ConvShape(224, 3, 64, ksize=3, padding=1).out_size == (224, 224)
    assert ConvShape(56, 32, 32, ksize=3, groups=32).kclc() == 54 * 54 * 1 * 9   # depthwise: one channel
    assert FCShape(4096, 1000).clf() == 4_096_000                                # eq. 1


def test_conv_energy_tx2_and_xavier():
    s = ConvShape(224, 3, 64, ksize=3, stride=1)
    # TX2: a_c + b_c*ofm = 2.6727e-8 + 1.21334e-10*64 (7.765376e-9) = 3.4492376e-8 J/MAC
    #      E = 1,330,668 * 3.4492376e-8 = 0.045897901 J
    e = ConvFCEnergyModel(TX2).estimate(s)
    assert e.energy_j == pytest.approx(1_330_668 * 3.4492376e-8, rel=1e-12)
    assert e.energy_j == pytest.approx(0.0458979, rel=1e-6)
    assert e.time_s is None and e.method == "conv_fc_empirical" and e.label == "estimated"
    # Xavier NX: 2.8674e-8 + 4.7639e-10*64 (3.048896e-8) = 5.916296e-8; E = 1,330,668 * 5.916296e-8 = 0.0787263 J
    assert ConvFCEnergyModel("xavier-nx").estimate(s).energy_j == pytest.approx(0.07872626, rel=1e-6)
    # the paper's approximation: 1,354,752 * 5.916296e-8 = 0.0801511 J
    assert ConvFCEnergyModel(XAVIER_NX, approx=True).estimate(s).energy_j == pytest.approx(1_354_752 * 5.916296e-8)


def test_h_of_ofm_matches_eq5():
    # E = CLC * H(ofm) with H = a_c/ofm + b_c (eq. 5, 7): both forms agree
    s = ConvShape(32, 16, 128, ksize=5)
    m = ConvFCEnergyModel(TX2)
    h = TX2.a_c / 128 + TX2.b_c
    assert m.conv_energy_j(s) == pytest.approx(s.clc() * h, rel=1e-12)


def test_fc_energy():
    # Xavier NX: 4096 * 1000 * 6.2454e-9 = 0.0255811584 J (eq. 8)
    e = ConvFCEnergyModel(XAVIER_NX).estimate(FCShape(4096, 1000))
    assert e.energy_j == pytest.approx(0.0255811584, rel=1e-12)
    with pytest.raises(ValueError, match="publishes a_f for the Xavier NX only"):
        ConvFCEnergyModel(TX2).estimate(FCShape(10, 10))


def test_conv_fc_batch_and_extensions_are_flagged():
    e = ConvFCEnergyModel().estimate(ConvShape(28, 8, 8, ksize=3, padding=1, batch=4))
    one = ConvFCEnergyModel().estimate(ConvShape(28, 8, 8, ksize=3, padding=1))
    assert e.energy_j == pytest.approx(4 * one.energy_j)
    assert "padding" in e.details["beyond_paper"] and any("batch 4" in x for x in e.details["beyond_paper"])


def test_conv_fc_with_layer_costs_and_shapes():
    layers = [layer("features.0", 1e6, 1e5), layer("classifier", 1e6, 1e5, kind="Linear"), layer("relu", 10, 10, "ReLU")]
    shapes = {"features.0": ConvShape(224, 3, 64), "classifier": FCShape(4096, 1000)}
    with pytest.raises(ValueError, match="has no ConvShape/FCShape"):
        ConvFCEnergyModel(shapes=shapes).estimate_many(layers)
    res = ConvFCEnergyModel(shapes=shapes, skip_unsupported=True).estimate_many(layers)
    assert res.energy_j.tolist() == pytest.approx([0.07872626, 0.0255811584, 0.0], rel=1e-6)
    assert res.time_s is None
    assert "skipped" in list(res)[2].details
    with pytest.raises(ValueError, match="published parameters exist for 'tx2' and 'xavier-nx'"):
        ConvFCEnergyModel("orin")


def test_fit_h_params_eq6_closed_form():
    # slopes generated exactly from H(ofm) = a/ofm + b are recovered
    ofm = np.array([16, 32, 64, 128, 256])
    a, b = fit_h_params(ofm, TX2.a_c / ofm + TX2.b_c)
    assert a == pytest.approx(TX2.a_c, rel=1e-9) and b == pytest.approx(TX2.b_c, rel=1e-6)
    with pytest.raises(ValueError, match="two different ofm"):
        fit_h_params([8, 8], [1, 2])


def test_conv_fc_refit_recovers_parameters():
    rng = np.random.default_rng(0)
    ref = ConvFCEnergyModel(XAVIER_NX)
    convs = [ConvShape(int(rng.choice([14, 28, 56])), int(rng.choice([16, 64])), int(ofm), ksize=3)
             for ofm in (16, 32, 64, 128) for _ in range(3)]
    fcs = [FCShape(int(i), int(o)) for i, o in ((512, 10), (1024, 100), (4096, 1000))]
    fitted = ConvFCEnergyModel.fit([(s, ref.estimate(s).energy_j) for s in convs],
                                   [(s, ref.estimate(s).energy_j) for s in fcs], board="orin-test")
    assert fitted.params.a_c == pytest.approx(XAVIER_NX.a_c, rel=1e-6)
    assert fitted.params.b_c == pytest.approx(XAVIER_NX.b_c, rel=1e-6)
    assert fitted.params.a_f == pytest.approx(XAVIER_NX.a_f, rel=1e-9)
    assert fitted.params.source == "measured"


def test_shapes_from_torch_model():
    import torch

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 16 * 16, 10))
    shapes = shapes_from_model(model, torch.zeros(2, 3, 16, 16))
    assert shapes["0"] == ConvShape((16, 16), 3, 8, ksize=(3, 3), stride=(1, 1), padding=(1, 1), batch=2, name="0")
    assert shapes["3"] == FCShape(2048, 10, batch=2, name="3")
    # E_fc = 2 rows * 2048 * 10 * 6.2454e-9 = 2.5581e-4 J
    assert ConvFCEnergyModel(shapes=shapes).estimate({"name": "3"}).energy_j == pytest.approx(2 * 20480 * 6.2454e-9)


# ================================================================ (c) MAC regression (SyNERGY)
@pytest.mark.parametrize("net, macs, published_mj", [
    ("alexNet", 665_784_864, 881.41),        # Table 4 MAC, Table 6 predicted energy
    ("resNet-50", 3_855_925_248, 5104.76),
    ("googleNet", 1_581_647_872, 2093.90),
])
def test_synergy_published_model_reproduces_table6(net, macs, published_mj):
    # E = MAC * 0.2454 * (3.18e-9 + 0.06639 * 3.34e-8) = MAC * 1.32453e-9 J; AlexNet: 881.85 mJ
    m = MACRegression.synergy_tx1()
    e = m.estimate({"name": net, "macs": macs}).energy_j
    assert e == pytest.approx(macs * 1.3245283e-9, rel=1e-7)
    assert e * 1e3 == pytest.approx(published_mj, rel=1e-3)   # within 0.1 %: coefficient rounding in Table 3
    # Table 4: predicted SIMD = 0.2454 * MAC (AlexNet: 163,383,605)
    assert SYNERGY_TX1["simd_per_mac"] * 665_784_864 == pytest.approx(163_383_605, abs=1)


def _synthetic_layers():
    rng = np.random.default_rng(3)
    layers, energies = [], []
    for i in range(30):
        kind = "Conv2d" if i % 3 else "Linear"
        macs = float(rng.uniform(1e6, 1e9))
        q = float(rng.uniform(1e5, 1e8))
        # conv: 1 nJ/MAC + 50 pJ/B; linear: 3 nJ/MAC + 200 pJ/B
        e = (1e-9 * macs + 50e-12 * q) if kind == "Conv2d" else (3e-9 * macs + 200e-12 * q)
        layers.append(LayerCost(f"l{i}", kind, forward=Cost(flops=int(2 * macs), macs=int(macs), bytes_read=int(q))))
        energies.append(e)
    return layers, np.array(energies)


def test_mac_regression_fit_global_and_per_kind():
    layers, e = _synthetic_layers()
    conv = [x for x in layers if x.kind == "Conv2d"]
    e_conv = e[[x.kind == "Conv2d" for x in layers]]
    m = MACRegression().fit(conv, e_conv)                   # exact on one kind
    c = m.coefficients()["*"]
    assert c["macs"] == pytest.approx(1e-9, rel=1e-6) and c["bytes"] == pytest.approx(50e-12, rel=1e-4)
    rep = m.report(conv, e_conv)
    assert rep.r2 == pytest.approx(1.0) and rep.mape < 1e-4 and rep.n == 20

    glob = MACRegression().fit(layers, e)
    per = MACRegression(per_kind=True).fit(layers, e)
    assert per.coefficients()["Linear"]["macs"] == pytest.approx(3e-9, rel=1e-6)
    assert per.report(layers, e).mape < 1e-4
    g = glob.report(layers, e)
    assert g.mape > 1.0                                     # one model for two kinds cannot be exact
    assert set(g.per_kind) == {"Conv2d", "Linear"}
    est = per.estimate(layers[0])
    assert est.label == "estimated" and est.method == "mac_regression" and est.details["model"] == "Linear"


def test_mac_regression_leave_one_group_out_and_options():
    layers, e = _synthetic_layers()
    conv_mask = [x.kind == "Conv2d" for x in layers]
    conv = [x for x, k in zip(layers, conv_mask) if k]
    groups = [f"net{i % 4}" for i in range(len(conv))]
    res = MACRegression().leave_one_group_out(conv, e[conv_mask], groups)
    assert set(res) == {"net0", "net1", "net2", "net3", "mean"} and res["mean"] < 1e-3
    # an intercept and relative weights still recover the exact model
    m = MACRegression(features=("macs", "bytes"), intercept=True, weights="relative").fit(conv, e[conv_mask])
    assert m.coefficients()["*"]["intercept"] == pytest.approx(0.0, abs=1e-6)   # energies here are 1e-3..1 J
    assert m.coefficients()["*"]["macs"] == pytest.approx(1e-9, rel=1e-4)


def test_mac_regression_errors():
    with pytest.raises(ValueError, match="unknown feature"):
        MACRegression(features=("simd",))
    with pytest.raises(RuntimeError, match="not fitted"):
        MACRegression().predict([{"macs": 1, "bytes": 1}])
    with pytest.raises(ValueError, match="one energy per layer"):
        MACRegression().fit([{"macs": 1, "bytes": 1}] * 3, [1.0])
    with pytest.raises(ValueError, match="has no 'bytes'"):
        MACRegression().fit([{"name": "x", "macs": 1}] * 3, [1.0, 2.0, 3.0])


# ================================================================ every estimator follows the interface
def _estimators(pagoda):
    shapes = {"a": ConvShape(28, 16, 32, ksize=3, padding=1), "b": FCShape(512, 10)}
    return [
        (RooflineEnergy(profile=pagoda), MAXN_MODE),
        (RooflineEnergy(time_model=RefinedRoofline(shapes=shapes)), pagoda.roofline(MAXN_MODE)),
        (ConvFCEnergyModel(shapes=shapes), None),
        (MACRegression.synergy_tx1(), None),
    ]


def test_conformance(pagoda):
    layers = [layer("a", 2 * 28 * 28 * 32 * 16 * 9, 1e5), layer("b", 2 * 5120, 2e4, kind="Linear")]
    for est, target in _estimators(pagoda):
        assert isinstance(est, EnergyEstimator) and isinstance(est.method, str)
        one = [est.estimate(x, target) for x in layers]
        many = est.estimate_many(layers, target)
        assert all(isinstance(x, LayerEnergy) and x.label == "estimated" and x.energy_j > 0 for x in one)
        assert len(many) == 2 and many.label == "estimated" and many.method == one[0].method
        assert many.energy_j.tolist() == pytest.approx([x.energy_j for x in one], rel=1e-12)
        assert many.names == ["a", "b"]
