"""LatencyModel: every kind predicts per layer (named as in analyze, labelled estimated), saves and loads, warns
outside what it was fitted on, and learns from EnergyProfiler's layers.json."""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch
from torch import nn

from lightning_edge.cost import analyze
from lightning_edge.latency import measure
from lightning_edge.latency.features import describe
from lightning_edge.latency.measure import SPECS, Sample, point_for, training_from_layers_json
from lightning_edge.latency.model import KINDS, LatencyModel
from lightning_edge.latency.stepwise import generate


class Net(nn.Module):
    """A user's model: functional ops in forward, a keyword argument, a shared activation."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = nn.Conv2d(16, 32, 1)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x, scale: float = 1.0):
        x = self.act(self.bn(self.conv(x)))
        x = self.act(self.pw(self.dw(x))) * scale
        return self.fc(torch.flatten(self.pool(x), 1))


META = {"device": "cpu", "device_name": "test cpu", "threads": torch.get_num_threads(), "dtype": "float32",
        "torch": torch.__version__}


def synthetic_time(d) -> float:
    """A made-up device: 20 us per layer call plus 1 ns per FLOP and 0.1 ns per byte."""
    return d.calls * 20e-6 + d.flops * 1e-9 + d.bytes * 1e-10


def point_time(cls: str, point) -> float:
    """The made-up device per layer class, as a function of the class's dimensions: 20 us per call plus 1 ns per
    FLOP plus 0.1 ns per byte of the representative layer (weights and activations, fp32)."""
    if cls in ("conv", "conv1x1"):
        f, c, p = point
        k2 = 9 if cls == "conv" else 1
        flops, nbytes = 2 * f * c * k2 * p, 4 * (c * p + f * p + f * c * k2)
    elif cls == "dwconv":
        c, p = point
        flops, nbytes = 2 * c * 9 * p, 4 * (2 * c * p + 9 * c)
    elif cls == "linear":
        f, c, rows = point
        flops, nbytes = 2 * f * c * rows, 4 * (c * rows + f * rows + f * c)
    else:
        (n,) = point
        flops, nbytes = n, 8 * n
    return 20e-6 + flops * 1e-9 + nbytes * 1e-10


def stepwise_model() -> LatencyModel:
    """Step-wise functions generated from synthetic 'measurements' of each class."""
    gens = {cls: generate(SPECS[cls].dims, lambda p, cls=cls: point_time(SPECS[cls].cls, p), tol=0.02, max_points=6)
            for cls in SPECS}
    return LatencyModel("stepwise", META, 5e10, 1e10, stepwise=gens, container_s=1e-6)


def training_samples() -> list[Sample]:
    out = []
    for c, f, s in [(3, 8, 8), (8, 16, 16), (16, 16, 8), (16, 32, 4), (32, 64, 8), (64, 64, 4)]:
        for mod, x in [(nn.Conv2d(c, f, 3, padding=1), torch.empty(1, c, s, s, device="meta")),
                       (nn.Conv2d(c, f, 1), torch.empty(1, c, s, s, device="meta")),
                       (nn.Linear(c, f), torch.empty(4, c, device="meta")),
                       (nn.BatchNorm2d(c), torch.empty(1, c, s, s, device="meta")),
                       (nn.ReLU(), torch.empty(1, c, s, s, device="meta"))]:
            d = describe(mod.to("meta"), x)[0][0]
            out.append(Sample(d, synthetic_time(d), "synthetic"))
    return out


@pytest.fixture(scope="module")
def sw():
    return stepwise_model()


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_predicts_every_layer_named_as_analyze_and_labelled_estimated(kind, sw):
    model, x = Net().eval(), torch.randn(2, 3, 16, 16)
    if kind == "stepwise":
        lm = sw
    elif kind in ("statistical", "mixed"):
        lm = LatencyModel(kind, META, 5e10, 1e10, samples=training_samples(), container_s=1e-6)
    else:
        lm = LatencyModel(kind, META, 5e10, 1e10)
    if kind in ("statistical", "mixed"):  # the forest's few training layers do not cover Net's: it says so
        with pytest.warns(UserWarning, match="outside the fitted points"):
            pred = lm.predict(model, x, scale=0.5)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # fitted here, for this torch, these threads, inside its points
            pred = lm.predict(model, x, scale=0.5)
    names = [lc.name for lc in analyze(model, x, scale=0.5).layers]
    rows = [la for la in pred.layers if la.name != "(containers)"]
    assert [la.name for la in rows] == names
    assert pred.label == "estimated" and all(la.label == "estimated" for la in pred.layers)
    assert all(la.time_s > 0 and math.isfinite(la.time_s) for la in rows)
    assert pred.total_s == pytest.approx(sum(la.time_s for la in pred.layers))
    assert pred.to_dict()["label"] == "estimated" and "ESTIMATED" in pred.table()
    assert pred.layer("act").calls == 2  # a module called twice is one layer, both calls counted


@pytest.mark.filterwarnings("ignore:LatencyModel used outside")
def test_stepwise_reproduces_the_device_it_was_generated_on(sw):
    model, x = Net().eval(), torch.randn(1, 3, 32, 32)
    descs, _ = describe(model, x)
    pred = sw.predict(model, x)
    for d in descs:
        cls, point, mult = point_for(d)
        assert pred.layer(d.name).time_s == pytest.approx(point_time(cls, point) * mult * d.calls, rel=0.05), d.name
        assert pred.layer(d.name).how.startswith("step-wise " + cls)


def test_roofline_and_refined_follow_their_formulas():
    model, x = Net().eval(), torch.randn(1, 3, 16, 16)
    roof = LatencyModel("roofline", META, 5e10, 1e10)
    ref = LatencyModel("refined", META, 5e10, 1e10, tile={"tile_m": 6, "tile_n": 16, "units": 2})
    for d in describe(model, x)[0]:
        assert roof.predict_layers([d]).layers[0].time_s == pytest.approx(max(d.flops / 5e10, d.bytes / 1e10))
        u = ref.u_eff(d)
        assert 0 < u <= 1
        assert ref.predict_layers([d]).layers[0].time_s == pytest.approx(max(d.flops / (5e10 * u), d.bytes / 1e10))
    # 16 filters on 16 lanes: full; 10 outputs of the classifier on 16 lanes: at most 10/16
    assert ref.u_eff(next(d for d in describe(model, x)[0] if d.name == "fc")) <= 10 / 16


@pytest.mark.filterwarnings("ignore:LatencyModel used outside")
def test_save_load_round_trip_every_kind(tmp_path, sw):
    model, x = Net().eval(), torch.randn(1, 3, 16, 16)
    for lm in [sw, LatencyModel("mixed", META, 5e10, 1e10, samples=training_samples()),
               LatencyModel("refined", META, 5e10, 1e10)]:
        p = lm.save(tmp_path / f"{lm.kind}.json")
        back = LatencyModel.load(p)
        assert back.kind == lm.kind and back.meta == lm.meta
        a, b = lm.predict(model, x), back.predict(model, x)
        assert [la.time_s for la in a.layers] == pytest.approx([la.time_s for la in b.layers], rel=1e-12)
    doc = json.loads((tmp_path / "stepwise.json").read_text())
    assert doc["meta"]["torch"] == torch.__version__ and doc["meta"]["threads"] == META["threads"]
    assert doc["stepwise"]["conv"]["points"]  # the points it was fitted on


def test_warns_when_used_outside_what_it_was_fitted_on(sw):
    model, x = Net().eval(), torch.randn(1, 3, 16, 16)
    other = LatencyModel("stepwise", {**META, "threads": META["threads"] + 3, "torch": "1.0"}, 5e10, 1e10,
                         stepwise=sw.stepwise)
    with pytest.warns(UserWarning, match="threads.*torch 1.0"):
        pred = other.predict(model, x)
    assert any("threads" in n for n in pred.notes)
    with pytest.warns(UserWarning, match="fitted for float32, the model is float64"):
        sw.predict(model.double(), x.double())
    big = nn.Conv2d(1024, 1024, 3, padding=1)               # c beyond the measured 512
    with pytest.warns(UserWarning, match="outside the fitted points"):
        sw.predict(big, torch.empty(1, 1024, 8, 8, device="meta"))


def test_bad_files_give_one_line_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="latency fit"):
        LatencyModel.load(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        LatencyModel.load(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text(json.dumps({"schema": "lightning_edge.model_cost"}))
    with pytest.raises(ValueError, match="not a latency model file"):
        LatencyModel.load(tmp_path / "other.json")
    (tmp_path / "cut.json").write_text(json.dumps({"schema": "lightning_edge.latency_model", "kind": "roofline"}))
    with pytest.raises(ValueError, match="incomplete or damaged"):
        LatencyModel.load(tmp_path / "cut.json")
    with pytest.raises(ValueError, match="expected one of"):
        LatencyModel("forest", META, 1, 1)
    with pytest.raises(ValueError, match="needs measured layers"):
        LatencyModel("mixed", META, 1e9, 1e9)


def test_layers_json_from_a_profiled_run_becomes_training_data(tmp_path):
    """A real layers.json: layers timed by the profiler's LayerTimer, written by ProfileReport."""
    from lightning_edge.profiling.attribution import attribute_step
    from lightning_edge.profiling.hooks import LayerTimer
    from lightning_edge.profiling.report import ProfileReport

    model, x = Net().eval(), torch.randn(4, 3, 16, 16)
    timer = LayerTimer(model, backward=False)
    steps = []
    with torch.no_grad():
        for _ in range(2):
            with timer.step() as st:
                model(x)
            t = st.timing
            steps.append(attribute_step(t.exclusive(), t.t0_ns, t.t1_ns))
    path = ProfileReport.build({"predict": steps}, device="cpu", source="model").write_json(tmp_path / "layers.json")
    samples = training_from_layers_json(path, model, x)
    rows = {r["layer"]: r for r in json.loads(path.read_text())["stages"]["predict"]["layers"]}
    assert {s.layer.name for s in samples} <= set(rows) and len(samples) >= 6
    for s in samples:
        assert s.time_s == pytest.approx(rows[s.layer.name]["fwd_ms"] / 1e3)
        assert s.source.startswith("layers.json")
    lm = LatencyModel("mixed", META, 5e10, 1e10, samples=training_samples()).with_samples(samples)
    assert len(lm.samples) == len(training_samples()) + len(samples)
    with pytest.raises(ValueError, match="EnergyProfiler layers.json"):
        (tmp_path / "x.json").write_text("{}")
        training_from_layers_json(tmp_path / "x.json", model, x)


def test_tiny_real_fit_measures_this_machine(tmp_path):
    base = LatencyModel("roofline", META, 5e10, 1e10)
    prev = torch.get_num_threads()
    lm = LatencyModel.fit("stepwise", "cpu", budget_s=2, threads=1, classes=["eltwise"], base=base, repeats=2,
                          max_points=4, clock="thread")
    assert torch.get_num_threads() == prev and measure.clock() == "wall"   # threads and clock restored
    assert lm.meta["threads"] == 1 and lm.meta["clock"] == "thread" and lm.fit_cost["points"] == lm.stepwise["eltwise"].n_points >= 3
    y = lm.stepwise["eltwise"]((64 * 16 * 16,))
    assert 0 < y < 0.1
    from lightning_edge.latency.plot import plot_model

    (png,) = plot_model(lm, tmp_path)
    assert png.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="layer class 'attention'"):
        LatencyModel.fit("stepwise", "cpu", budget_s=1, classes=["attention"], base=base)
    with pytest.raises(ValueError, match="budget_s must be a positive"):
        LatencyModel.fit("stepwise", "cpu", budget_s=0)
    with pytest.raises(ValueError, match="thread clock needs torch.set_num_threads"):
        LatencyModel.fit("stepwise", "cpu", budget_s=1, threads=2, classes=["eltwise"], base=base, clock="thread")
    assert torch.get_num_threads() == prev and measure.clock() == "wall"


# ------------------------------------------------------------------ ranges and boxes (issue 19 follow-up)
@pytest.mark.parametrize("mod,shape", [
    (nn.Conv2d(3, 64, 7, stride=2, padding=3), (8, 3, 64, 64)),     # ResNet stem, batch 8 at 64x64: 8192 pixels
    (nn.Conv2d(32, 16, 1), (8, 32, 32, 32)),                       # MobileNetV2 1x1 at batch 8
    (nn.Conv2d(32, 32, 3, padding=1, groups=32), (8, 32, 32, 32)),  # its depthwise 3x3
])
def test_batch8_layers_of_a_64px_network_are_inside_the_measured_pixel_range(mod, shape):
    d = describe(mod.to("meta"), torch.empty(*shape, device="meta"))[0][0]
    cls, point, _g = point_for(d)
    for key in (cls, f"{cls}/small"):
        dims = SPECS[key].dims
        assert all(dim.lo <= p <= dim.hi for p, dim in zip(point, dims)), (key, point)
    # the representative layer at that many pixels folds the batch: same output pixels, maps no larger than 32x32
    p = point[-1]
    rep, x = measure.build_layer(cls, point, device="meta")
    y = rep(x)
    assert y.shape[0] * y.shape[2] * y.shape[3] == p and x.shape[0] == p // (x.shape[2] * x.shape[3]) > 1


def test_every_pixel_value_builds_a_layer_with_exactly_that_many_output_pixels():
    for key in ("conv", "conv1x1", "dwconv"):
        spec = SPECS[key]
        for p in spec.dims[-1].values:
            point = tuple(d.lo for d in spec.dims[:-1]) + (p,)
            rep, x = measure.build_layer(spec.cls, point, device="meta")
            y = rep(x)
            assert y.shape[0] * y.shape[2] * y.shape[3] == p, (key, p, tuple(x.shape))


def test_a_small_layer_is_predicted_from_the_small_box_and_a_large_one_from_the_full_box():
    def eff_time(cls, p):  # small GEMMs run far below peak, as on a CPU: not bilinear in the channels
        f, c, pix = p
        work = 2 * f * c * pix * (9 if cls == "conv" else 1)
        return 20e-6 + work / (5e10 * min(1.0, (f * c) / (512 * 512)) ** 0.5)

    gens = {k: generate(SPECS[k].dims, lambda p, k=k: eff_time(SPECS[k].cls, p), tol=0.02, max_points=6)
            for k in ("conv1x1", "conv1x1/small")}
    lm = LatencyModel("stepwise", META, 5e10, 1e10, stepwise=gens)
    small, large = (96, 16, 256), (512, 256, 64)
    assert lm.generation_for("conv1x1", small) is gens["conv1x1/small"]
    assert lm.generation_for("conv1x1", large) is gens["conv1x1"]
    assert lm.generation_for("conv1x1", (4096, 16, 64)) is gens["conv1x1"]          # outside both: the full box
    assert lm.generation_for("conv", small) is None
    truth = eff_time("conv1x1", small)
    err_small = abs(gens["conv1x1/small"](small) - truth) / truth
    err_full = abs(gens["conv1x1"](small) - truth) / truth
    assert err_small < err_full / 2, (err_small, err_full)


def test_a_fit_asked_for_a_class_generates_its_sub_boxes_measuring_the_class_layer(monkeypatch):
    import time

    from lightning_edge.latency import model as model_mod

    calls = []

    def fake_measure(cls, point, device, repeats):
        calls.append(cls)
        return 20e-6 + 2e-11 * math.prod(point)

    monkeypatch.setattr(measure, "measure_layer", fake_measure)
    g = model_mod._fit_stepwise("cpu", time.monotonic() + 60, ["conv1x1"], 3, lambda _m: None, 0.05, 5)
    assert sorted(g) == ["conv1x1", "conv1x1/small"] and set(calls) == {"conv1x1"}


def test_cold_weight_copies_are_cycled_only_when_reading_the_weights_could_matter():
    big_w = nn.Linear(2048, 2048).eval()                 # 16 MiB of weights for one row: weights dominate
    assert measure._weights_matter(big_w, torch.randn(1, 2048), 16 * 2 ** 20, "cpu")
    big_x = nn.Conv2d(16, 16, 3, padding=1, bias=False).eval()   # 9 KiB of weights over 8 maps of 64x64
    assert not measure._weights_matter(big_x, torch.randn(8, 16, 64, 64), 16 * 16 * 9 * 4, "cpu")


def test_a_small_container_without_macs_is_predicted_from_layers_of_its_size_not_its_children():
    """YOLOv8n's C2f (chunk + concat in its own forward, convolutions in its children) was predicted 10 times too
    slow: the forest matched it, on its children's channels and weights, to large activations."""
    from lightning_edge.latency.features import LayerDesc

    samples = []
    for n in (1024, 4096, 16384, 65536):          # small activations: a per-call cost of ~10 us
        d = LayerDesc(name=f"relu{n}", kind="ReLU", cls="eltwise", flops=0, macs=0, bytes=8 * n, n_in=n, n_out=n, c=16)
        samples.append(Sample(d, 10e-6 + 8 * n / 1e10, "synthetic"))
    for n in (2 ** 19, 2 ** 20):                  # large ones, with many channels
        d = LayerDesc(name=f"silu{n}", kind="SiLU", cls="eltwise", flops=5 * n, macs=0, bytes=8 * n, n_in=n, n_out=n, c=1280)
        samples.append(Sample(d, 10e-6 + 8 * n / 1e10, "synthetic"))
    samples += training_samples()                 # layers with MACs, for the other forest
    c2f = LayerDesc(name="model.12", kind="C2f", cls="eltwise", flops=0, macs=0, bytes=24576, n_in=6144, n_out=2048,
                    c=1280, f=1280, params=500_000)
    plain = LayerDesc(name="concat", kind="Concat", cls="eltwise", flops=0, macs=0, bytes=24576, n_in=6144,
                      n_out=2048)
    for kind in ("statistical", "mixed"):
        lm = LatencyModel(kind, META, 5e10, 1e10, samples=samples)
        t, t_plain = (r.time_s for r in lm.predict_layers([c2f, plain]).layers)
        assert t == pytest.approx(t_plain), (kind, t, t_plain)    # its children's channels and weights do not count
        assert 5e-6 < t < 40e-6, (kind, t)
