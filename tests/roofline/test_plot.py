"""Roofline pictures: a PNG is written and the figure has the expected axes, lines and points."""

from __future__ import annotations

import pytest

from lightning_edge.cli import main
from lightning_edge.cost.types import Cost, LayerCost
from lightning_edge.roofline import Roofline, load_profile
from lightning_edge.roofline.plot import layer_points, plot_rooflines

PNG = b"\x89PNG\r\n\x1a\n"


def layers():
    # intensities 1, 20, 200 FLOP/B; the middle one has a measured time
    return [
        LayerCost("conv1", "Conv2d", forward=Cost(flops=10**8, bytes_read=6 * 10**7, bytes_written=4 * 10**7)),
        {"name": "fc", "kind": "Linear", "flops": 2 * 10**9, "bytes": 10**8, "time_s": 1e-3},
        LayerCost("big", "Conv2d", forward=Cost(flops=2 * 10**11, bytes_read=10**9)),
        LayerCost("empty", "Identity"),   # no work: not drawn
    ]


def test_png_and_axes(tmp_path):
    prof = load_profile("orin-agx-pagoda")
    roofs = {m: prof.roofline(m) for m in prof.mode_names}
    path = tmp_path / "roof.png"
    fig = plot_rooflines(roofs, layers=layers(), path=path, title="Orin")
    assert path.read_bytes()[:8] == PNG and path.stat().st_size > 20_000
    ax_t, ax_e = fig.axes[0], fig.axes[1]
    assert len(fig.axes) == 3                                   # time, energy, colour bar of the time shares
    assert ax_t.get_xscale() == ax_t.get_yscale() == "log"
    assert ax_e.get_xscale() == ax_e.get_yscale() == "log"
    assert "FLOP/byte" in ax_t.get_xlabel() and "GFLOP/s" in ax_t.get_ylabel()
    assert "GFLOP/J" in ax_e.get_ylabel()
    # 4 modes on the time roofline (plus 4 balance markers); MAXN twice on the energy roofline
    labels = [t.get_text() for t in ax_t.get_legend().get_texts()]
    assert any("β_τ=89.4" in s for s in labels) and len([s for s in labels if s.startswith("12c/")]) == 4
    elabels = [t.get_text() for t in ax_e.get_legend().get_texts()]
    assert elabels == ["12c/2201.6/1300.5/3199 (π0=17.9 W), β_ε=39.8", "12c/2201.6/1300.5/3199 (no static), β_ε=36.6"]
    # 3 layers drawn (the empty one skipped) on both panels
    assert ax_t.collections[0].get_offsets().shape == (3, 2)
    assert ax_e.collections[0].get_offsets().shape == (3, 2)


def test_layer_points_estimates_and_shares():
    roof = Roofline(14.7e12, 164.4e9)
    pts = layer_points(layers(), roof)
    assert list(pts["name"]) == ["conv1", "fc", "big"]
    assert pts["intensity"].tolist() == pytest.approx([1.0, 20.0, 200.0])
    assert pts["measured"].tolist() == [False, True, False]
    # conv1: Q/BW = 1e8 / 164.4e9 = 608.27 us; big: W/F = 2e11 / 14.7e12 = 13.605 ms; fc measured 1 ms
    assert pts["time_s"].tolist() == pytest.approx([608.2725e-6, 1e-3, 13.60544e-3], rel=1e-6)
    assert pts["share"].sum() == pytest.approx(1.0)


def test_time_only_roofline_says_energy_needs_a_sensor(tmp_path):
    fig = plot_rooflines(Roofline(2.5e11, 2e10, label="cpu"), path=tmp_path / "t.png")
    texts = " ".join(t.get_text() for t in fig.axes[1].texts)
    assert "no energy coefficients" in texts and "INA3221" in texts


def test_static_only_and_array_roofline(tmp_path):
    prof = load_profile("orin-agx-pagoda")
    fig = plot_rooflines(prof.roofline("12c/2201.6/1300.5/3199"), static=True)
    assert len(fig.axes[1].get_legend().get_texts()) == 1
    fig = plot_rooflines(prof.rooflines())         # an array roofline is split into its modes
    assert len(fig.axes[0].get_legend().get_texts()) == 4


def test_bad_arguments():
    with pytest.raises(ValueError, match="static"):
        plot_rooflines(Roofline(1e12, 1e11), static="sometimes")
    with pytest.raises(ValueError, match="expected a Roofline"):
        plot_rooflines({"x": 3})
    with pytest.raises(ValueError, match="intensity_range"):
        plot_rooflines(Roofline(1e12, 1e11), intensity_range=(10, 1))


def test_cli_plot_from_profile_without_measuring(tmp_path, capsys):
    out = tmp_path / "orin.png"
    assert main(["roofline", "--plot", str(out), "--profile", "orin-agx-pagoda"]) == 0
    assert out.read_bytes()[:8] == PNG
    assert "measuring" not in capsys.readouterr().out


def test_a_layer_sits_at_the_same_time_in_both_panels():
    """Issue 17: a layer placed on the roof (no device time) used to keep its apportioned energy from another
    machine's time in the energy panel, 2-4 decades below the roof; now both panels use the same time."""
    prof = load_profile("orin-agx-pagoda")
    roof = prof.roofline(prof.mode_names[0])
    w, q = 2 * 10**9, 10**8
    far_off = 50.0  # J: host time x simulated power, nothing to do with the roof's time
    fig = plot_rooflines(roof, layers=[{"name": "fc", "flops": w, "bytes": q, "energy_j": far_off}])
    ax_t, ax_e = fig.axes[0], fig.axes[1]
    (x_t, y_t), = ax_t.collections[0].get_offsets()
    (x_e, y_e), = ax_e.collections[0].get_offsets()
    t_roof = float(roof.time(w, q))
    assert y_t == pytest.approx(w / t_roof / 1e9)  # on the roof
    e_roof = float(roof.energy(w, q, time_s=t_roof, static=True))
    assert y_e == pytest.approx(w / e_roof / 1e9, rel=1e-6)  # the roof's energy at that same time
    assert y_e != pytest.approx(w / far_off / 1e9)
    # a layer with its device's time keeps its energy (twin or board): the same time in both panels
    fig = plot_rooflines(roof, layers=[{"name": "fc", "flops": w, "bytes": q, "time_s": 1e-3, "energy_j": 0.02}])
    (_, y_e), = fig.axes[1].collections[0].get_offsets()
    assert y_e == pytest.approx(w / 0.02 / 1e9)
