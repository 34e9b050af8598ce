"""LatencyModel: every kind predicts per layer (named as in analyze, labelled estimated) from the layer's units,
saves and loads (a statistical model without scikit-learn), warns outside what it was fitted on, refuses more
samples than a file may hold, and learns from EnergyProfiler's layers.json."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import statistics
import sys
import time
import warnings

import pytest
import torch
from torch import nn

from lightning_edge.cost import analyze
from lightning_edge.latency import measure
from lightning_edge.latency import stepwise as stepwise_mod
from lightning_edge.latency.features import LayerDesc, describe, units_of
from lightning_edge.latency.measure import SPECS, Sample, point_for, training_from_layers_json
from lightning_edge.latency.model import KINDS, MAX_SAMPLES, LatencyModel, LatencyModelError
from lightning_edge.latency.stepwise import generate


class Attention(nn.Module):
    def __init__(self, d: int = 16, heads: int = 2):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, n, d))


class Net(nn.Module):
    """A user's model: functional ops in forward, a keyword argument, a shared activation, attention."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = nn.Conv2d(16, 32, 1)
        self.act = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.attn = Attention()
        self.fc = nn.Linear(32, 10)

    def forward(self, x, scale: float = 1.0):
        x = self.act(self.bn(self.conv(x)))
        x = self.act(self.pw(self.dw(x))) * scale
        t = self.attn(x[:, :16].flatten(2).transpose(1, 2))
        return self.fc(torch.flatten(self.pool(x), 1)) + t.mean()


from lightning_edge.calibrate.microbench import _device_name  # noqa: E402

META = {"device": "cpu", "device_name": _device_name("cpu"), "threads": torch.get_num_threads(), "dtype": "float32",
        "torch": torch.__version__, "l2_bytes": 1 << 20, "llc_bytes": 32 << 20}


def synthetic_time(d) -> float:
    """A made-up device: 20 us per call plus 1 ns per FLOP and 0.1 ns per byte."""
    return d.calls * 20e-6 + d.flops * 1e-9 + d.bytes * 1e-10


def point_time(cls: str, point, cold: bool = False) -> float:
    """The made-up device per class, as a function of the class's dimensions: 20 us per call plus 1 ns per FLOP
    plus 0.1 ns per byte of the representative unit (fp32), plus 1 ns per weight byte read from memory."""
    if cls in ("conv", "conv1x1", "stem"):
        f, c, hw, b = point
        k2 = 1 if cls == "conv1x1" else 9
        if cls == "stem":
            c, k2 = 3, c
        flops, nbytes, w = 2 * f * c * k2 * hw * b, 4 * (c * hw * b + f * hw * b + f * c * k2), 4 * f * c * k2
    elif cls == "dwconv":
        c, hw = point
        flops, nbytes, w = 2 * c * 9 * hw, 4 * (2 * c * hw + 9 * c), 0
    elif cls == "gconv":
        cc, g, hw, b = point
        cg = math.sqrt(cc)
        flops, nbytes, w = 2 * cc * g * 9 * hw * b, 4 * (2 * cg * g * hw * b + cc * g * 9), 0
    elif cls == "linear":
        f, c, rows = point
        flops, nbytes, w = 2 * f * c * rows, 4 * (c * rows + f * rows + f * c), 4 * f * c
    elif cls == "matmul":
        n, k, m, batch = point
        flops, nbytes, w = 2 * n * k * m * batch, 4 * batch * (m * k + k * n + m * n), 0
    elif cls == "sdpa":
        s, e, lq, batch = point
        flops, nbytes, w = 4 * s * e * lq * batch, 4 * batch * (lq * e * 2 + 2 * s * e), 0
    else:
        (n,) = point
        flops, nbytes, w = n, 8 * n, 0
    return 20e-6 + flops * 1e-9 + nbytes * 1e-10 + (w * 1e-9 if cold else 0.0)


@functools.lru_cache(maxsize=1)
def _generations() -> dict:
    return {k: generate(s.dims, lambda p, s=s: point_time(s.cls, p, s.cold), tol=0.02, max_points=6)
            for k, s in SPECS.items()}


def stepwise_model(**meta) -> LatencyModel:
    """Step-wise functions generated from synthetic 'measurements' of each class (and box)."""
    return LatencyModel("stepwise", {**META, **meta}, 5e10, 1e10, stepwise=dict(_generations()), container_s=1e-6,
                        module_s=2e-6)


def training_samples() -> list[Sample]:
    out = []
    for c, f, s in [(3, 8, 8), (8, 16, 16), (16, 16, 8), (16, 32, 4), (32, 64, 8), (64, 64, 4)]:
        for mod, x in [(nn.Conv2d(c, f, 3, padding=1), torch.empty(1, c, s, s, device="meta")),
                       (nn.Conv2d(c, f, 1), torch.empty(1, c, s, s, device="meta")),
                       (nn.Linear(c, f), torch.empty(4, c, device="meta")),
                       (nn.BatchNorm2d(c), torch.empty(1, c, s, s, device="meta")),
                       (nn.ReLU(), torch.empty(1, c, s, s, device="meta"))]:
            d = describe(mod.to("meta"), x)[0][0]
            (u,) = units_of(d)
            out.append(Sample(u, synthetic_time(u), "synthetic"))
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
        lm = LatencyModel(kind, META, 5e10, 1e10, samples=training_samples(), container_s=1e-6, module_s=2e-6)
    else:
        lm = LatencyModel(kind, META, 5e10, 1e10)
    if kind in ("statistical", "mixed"):  # the forest's few training units have no matmul: it says so
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


def test_stepwise_reproduces_the_device_it_was_generated_on(sw):
    """Each layer is its units: the functions reproduce the made-up device unit by unit, a layer of ops is their
    sum less the module calls counted twice."""
    model, x = Net().eval(), torch.randn(1, 3, 32, 32)
    descs, _ = describe(model, x)
    pred = sw.predict_layers(descs)
    for d in descs:
        units = units_of(d)
        want = 0.0
        for u in units:
            cls, point, mult = point_for(u)
            want += point_time(cls, point) * mult * u.calls
        if d.cls not in ("conv", "conv1x1", "dwconv", "gconv", "linear"):
            want += (d.calls - len(units)) * sw.module_s
        assert pred.layer(d.name).time_s == pytest.approx(want, rel=0.05), d.name
    attn = pred.layer("attn").how
    assert "step-wise matmul" in attn and "softmax" in attn


def test_a_grouped_convolution_is_predicted_along_its_work_per_group_and_old_files_along_their_channels(tmp_path):
    """A grouped convolution's time is linear in cc = c/g * f/g (its MACs per group and pixel / 9), not in its
    channels per group: measured at cc = 4 .. 4096 (cg 2 .. 64), ResNeXt's cg = 8 comes out right; a model file
    fitted when the dimension was cg still predicts from cg."""
    from lightning_edge.latency.measure import Dim

    unit = nn.Conv2d(256, 256, 3, padding=1, groups=32, bias=False).to("meta")
    (d,), _ = describe(unit, torch.empty(8, 256, 12, 12, device="meta"))
    cls, point, _m = point_for(units_of(d)[0])
    assert cls == "gconv" and point == (64, 32, 144, 8)
    g = generate(SPECS["gconv"].dims, lambda p: point_time("gconv", p), tol=0.02, max_points=6)
    assert g.dims[0].name == "cc"
    assert g(point) == pytest.approx(point_time("gconv", point), rel=0.02)
    # the same device generated along cg (the former dimension): a file of then
    old_dims = (Dim.range("cg", 2, 64, 8),) + SPECS["gconv"].dims[1:]
    old = generate(old_dims, lambda p: point_time("gconv", (p[0] * p[0],) + tuple(p[1:])), tol=0.02, max_points=6)
    lm = LatencyModel("stepwise", META, 5e10, 1e10, stepwise={"gconv": old}, container_s=1e-6, module_s=2e-6)
    doc = lm.to_dict()
    assert doc["version"] == 4    # a reader of version 1 would take cc for cg (2, 3: a path box for any unit): it refuses
    doc["version"] = 1
    (tmp_path / "old.json").write_text(json.dumps(doc))
    back = LatencyModel.load(tmp_path / "old.json")
    row = back.predict_layers([d]).layers[0]
    assert "gconv(cg=8, g=32, hw=144, b=8)" in row.how
    assert row.time_s == pytest.approx(old((8, 32, 144, 8)), rel=1e-6)


def test_a_depthwise_convolution_is_predicted_on_its_planes_and_old_files_on_channels_pixels_and_images(tmp_path):
    """Each image's channel is a plane of its own: a depthwise convolution at batch b is one of c*b channels (16
    channels of 64x64 at batch 8 took 0.394 ms, 128 at batch 1 0.420 ms here); a model file fitted when its
    dimensions were (c, hw, b) predicts from the unit's own channels, pixels and images, inside the box it
    fitted (144 channels at batch 8 are 1152 planes, beyond its 256 channels)."""
    from lightning_edge.latency.measure import Dim

    unit = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False).to("meta")
    (d,), _ = describe(unit, torch.empty(8, 16, 64, 64, device="meta"))
    assert point_for(units_of(d)[0]) == ("dwconv", (128, 4096), 1.0)
    old_dims = (Dim.range("c", 8, 256, 64), Dim("hw", tuple(s * s for s in range(16, 65)), 1024), Dim.range("b", 1, 8, 1))
    old = generate(old_dims, lambda p: point_time("dwconv", (p[0] * p[2], p[1])), tol=0.02, max_points=6)
    lm = LatencyModel("stepwise", META, 5e10, 1e10, stepwise={"dwconv": old}, container_s=1e-6, module_s=2e-6)
    doc = lm.to_dict()
    doc["version"] = 1
    (tmp_path / "old.json").write_text(json.dumps(doc))
    back = LatencyModel.load(tmp_path / "old.json")
    row = back.predict_layers([d]).layers[0]
    assert "dwconv(c=16, hw=4096, b=8)" in row.how
    assert row.time_s == pytest.approx(old((16, 4096, 8)), rel=1e-6)
    (wide,), _ = describe(nn.Conv2d(144, 144, 3, padding=1, groups=144, bias=False).to("meta"),
                          torch.empty(8, 144, 24, 24, device="meta"))
    out = back.predict_layers([wide])
    assert "dwconv(c=144, hw=576, b=8)" in out.layers[0].how and not any("outside" in n for n in out.notes)
    # a file whose depthwise function has another count of dimensions is refused
    bad = json.loads((tmp_path / "old.json").read_text())
    bad["stepwise"]["dwconv"]["dims"] = bad["stepwise"]["dwconv"]["dims"][:1]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(LatencyModelError, match=r"stepwise\.dwconv\.dims"):
        LatencyModel.load(tmp_path / "bad.json")


def test_attention_is_its_products_softmax_and_copies_whatever_the_module_is_called():
    descs, _ = describe(Attention(32, 4), torch.empty(2, 10, 32, device="meta"))
    units = units_of(next(d for d in descs if d.name == ""))
    ops = [u.op for u in units]
    assert ops.count("matmul") == 2 and "softmax" in ops
    qk = next(u for u in units if u.op == "matmul")
    assert (qk.batch, qk.rows, qk.c, qk.f) == (2 * 4, 10, 8, 10)   # (b*heads, tokens, head dim, tokens)
    assert point_for(qk) == ("matmul", (10, 8, 10, 8), 1.0)


def test_a_batch_of_small_maps_is_not_one_large_map():
    """1x1 convolutions at one thread run one GEMM per image: the point keeps the images apart."""
    d = describe(nn.Conv2d(512, 2048, 1).to("meta"), torch.empty(8, 512, 2, 2, device="meta"))[0][0]
    assert point_for(d) == ("conv1x1", (2048, 512, 4, 8), 1.0)
    stem = describe(nn.Conv2d(3, 48, 11, 4, 2).to("meta"), torch.empty(1, 3, 128, 128, device="meta"))[0][0]
    assert point_for(stem)[0] == "stem" and point_for(stem)[1][1] == 121


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
               LatencyModel("statistical", META, 5e10, 1e10, samples=training_samples()),
               LatencyModel("refined", META, 5e10, 1e10)]:
        p = lm.save(tmp_path / f"{lm.kind}.json")
        back = LatencyModel.load(p)
        assert back.kind == lm.kind and back.meta == lm.meta
        a, b = lm.predict(model, x), back.predict(model, x)
        assert [la.time_s for la in a.layers] == pytest.approx([la.time_s for la in b.layers], rel=1e-6)
    doc = json.loads((tmp_path / "stepwise.json").read_text())
    assert doc["meta"]["torch"] == torch.__version__ and doc["meta"]["threads"] == META["threads"]
    assert doc["stepwise"]["conv"]["points"]  # the points it was fitted on
    assert json.loads((tmp_path / "mixed.json").read_text())["forests"]["ratio"]["trees"]


@pytest.mark.filterwarnings("ignore:LatencyModel used outside")
def test_a_saved_statistical_model_loads_and_predicts_without_scikit_learn(tmp_path, monkeypatch):
    model, x = Net().eval(), torch.randn(1, 3, 16, 16)
    lm = LatencyModel("mixed", META, 5e10, 1e10, samples=training_samples())
    p = lm.save(tmp_path / "m.json")
    for name in [n for n in sys.modules if n == "sklearn" or n.startswith("sklearn.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sklearn", None)      # import sklearn now raises ImportError
    back = LatencyModel.load(p)
    assert back.predict(model, x).total_s == pytest.approx(lm.predict(model, x).total_s, rel=1e-6)
    with pytest.raises(ImportError, match="scikit-learn"):
        back.with_samples(training_samples()[:2])        # training again needs it, and says so
    with pytest.raises(ImportError, match="scikit-learn"):
        LatencyModel.fit("mixed", "cpu", budget_s=1)


def test_the_sample_cap_holds_for_every_way_of_making_a_model(tmp_path):
    """A model that could be saved but not loaded: with_samples and the constructor refuse it, as load would."""
    one = training_samples()[0]
    with pytest.raises(ValueError, match=f"at most {MAX_SAMPLES}"):
        LatencyModel("mixed", META, 5e10, 1e10, samples=[one] * (MAX_SAMPLES + 1))
    lm = LatencyModel("mixed", META, 5e10, 1e10, samples=[one] * (MAX_SAMPLES - 1) + training_samples()[1:2])
    with pytest.raises(ValueError, match=f"at most {MAX_SAMPLES}"):
        lm.with_samples([one])
    with pytest.raises(ValueError, match=f"at most {MAX_SAMPLES}"):
        LatencyModel.fit("stepwise", "cpu", budget_s=1, samples=[one] * (MAX_SAMPLES + 1))


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


def test_warns_when_the_machine_is_not_the_one_it_was_fitted_on():
    here = stepwise_model(device_name=_device_name("cpu"))
    assert here.conditions() == []
    there = stepwise_model(device_name="cpu Some Other CPU")
    assert any("Some Other CPU" in m for m in there.conditions())
    with pytest.warns(UserWarning, match="fitted on cpu Some Other CPU"):
        there.predict(nn.Linear(8, 8), torch.empty(2, 8, device="meta"))


def test_weights_are_read_from_memory_when_the_network_overflows_the_cache(sw):
    """dram_share: 0 up to a quarter of the (measured) last-level cache, 1 from half of it, linear between (a
    network of 9-17 MB read its weights from memory in a 16 MB cache); the step-wise model blends the boxes
    measured with warm and with cold weights by it."""
    small = describe(nn.Linear(512, 512), torch.empty(1, 512, device="meta"))[0]
    big = describe(nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(4)]),
                   torch.empty(1, 2048, device="meta"))[0]                     # 64 MB of weights
    assert sw.dram_share(small) == 0.0 and sw.dram_share(big) == 1.0
    llc = sw.meta["llc_bytes"]

    def linear_of(mb: float):   # one layer of about `mb` MB of weights (and `mb` KB of output)
        return describe(nn.Linear(1024, int(mb * (1 << 20) / 4 / 1024)), torch.empty(1, 1024, device="meta"))[0]
    assert sw.dram_share(linear_of(0.2 * llc / (1 << 20))) == 0.0
    assert sw.dram_share(linear_of(0.375 * llc / (1 << 20))) == pytest.approx(0.5, abs=0.01)
    assert sw.dram_share(linear_of(0.55 * llc / (1 << 20))) == 1.0
    assert stepwise_model(llc_bytes=llc // 2).dram_share(linear_of(0.375 * llc / (1 << 20))) == 1.0  # its cache
    t_small = sw.predict_layers(small).layers[0]
    assert "from memory" not in t_small.how
    t_big = sw.predict_layers(big).layers[1]
    assert "100% weights from memory" in t_big.how
    warm = point_time("linear", (2048, 2048, 1))
    assert t_big.time_s == pytest.approx(warm + 4 * 2048 * 2048 * 1e-9, rel=0.05)


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
    with pytest.raises(ValueError, match="needs measured units"):
        LatencyModel("mixed", META, 1e9, 1e9)


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.act = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU()
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.act(self.bn(self.conv(x))).mean((2, 3)))


def test_layers_json_from_a_profiled_run_becomes_training_data(tmp_path):
    """A real layers.json: layers timed by the profiler's LayerTimer, written by ProfileReport."""
    from lightning_edge.profiling.attribution import attribute_step
    from lightning_edge.profiling.hooks import LayerTimer
    from lightning_edge.profiling.report import ProfileReport

    model, x = Small().eval(), torch.randn(4, 3, 16, 16)
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
    got = {s.layer.name.split("#")[0] for s in samples}
    assert got <= set(rows) and {"conv", "bn", "act", "fc"} <= got
    for s in samples:
        assert s.time_s == pytest.approx(rows[s.layer.name.split("#")[0]]["fwd_ms"] / 1e3)
        assert s.source.startswith("layers.json")
    lm = LatencyModel("mixed", META, 5e10, 1e10, samples=training_samples()).with_samples(samples)
    assert len(lm.samples) == len(training_samples()) + len(samples)
    with pytest.raises(ValueError, match="EnergyProfiler layers.json"):
        (tmp_path / "x.json").write_text("{}")
        training_from_layers_json(tmp_path / "x.json", model, x)


def test_a_fit_that_fails_restores_the_speed_tracker_it_found():
    """The fit sets its own speed tracker for its measurements; on every exit it puts back the one it found (here a
    caller's, which must not be left replaced by the fit's, nor cleared)."""
    base = LatencyModel("roofline", META, 5e10, 1e10)
    mine = measure.SpeedTrack("cpu", probe=lambda: 1.0)
    measure.use_speed_track(mine)
    try:
        with pytest.raises(ValueError, match="class 'nope'"):
            LatencyModel.fit("stepwise", "cpu", budget_s=5, threads=1, classes=["nope"], base=base, repeats=2)
        assert measure._SPEED["track"] is mine
    finally:
        measure.use_speed_track(None)


def test_tiny_real_fit_measures_this_machine(tmp_path):
    base = LatencyModel("roofline", META, 5e10, 1e10)
    prev = torch.get_num_threads()
    # budget_s: room for host_meta's cache measurement (6-8 s on a 2-vCPU VM under load): the budget bounds the whole
    # fit, and a tighter one left the "relu" box unmeasured on a busy machine; max_points ends the fit sooner
    lm = LatencyModel.fit("stepwise", "cpu", budget_s=30, threads=1, classes=["relu"], base=base, repeats=2,
                          max_points=4, clock="thread")
    assert torch.get_num_threads() == prev and measure.clock() == "wall"   # threads and clock restored
    assert sorted(lm.stepwise) == ["relu", "relu/small"]
    assert lm.meta["threads"] == 1 and lm.meta["clock"] == "thread" and lm.meta["llc_bytes"] > 0
    # the machine as it was: a factor per pass length (about 1 quiet), the unit calls the OS preempted
    assert len(lm.meta["disturbance_factor"]) == len(lm.meta["disturbance_pass_s"]) >= 3
    assert all(0.5 <= f < 3 for f in lm.meta["disturbance_factor"])
    pre, timed = lm.meta["unit_calls_preempted"]
    assert 0 <= pre <= timed and timed > 0
    assert measure._DISTURBANCE["curve"] is None                          # not left set for others
    # the machine's speed, probed through the fit (a first probe at the start), and the tracker not left set
    speed = lm.fit_cost["speed"]
    assert len(speed["probes"]) >= 1 and speed["interval_s"] == measure.SPEED_INTERVAL_S
    assert 0 <= speed["corrected"][0] <= speed["corrected"][1] and speed["corrected"][1] > 0
    assert measure._SPEED["track"] is None
    assert speed["waited"]["wait_s"] in (0.0, pytest.approx(measure.SPEED_WAIT_SHARE * 30))   # none if shared
    assert 0 <= speed["waited"]["waited_s"] <= speed["waited"]["wait_s"]
    assert "the machine's speed through the fit:" in lm.describe() and "'probes'" not in lm.describe()
    lm.fit_cost["speed"] = {**speed, "waited": {**speed["waited"], "bursts": 2, "ended": 1, "waited_s": 3.5}}
    assert "waited 3.5 s for 2 bursts (1 ended in time)" in lm.describe()
    assert "network_factor" not in lm.meta      # a fit of some classes cannot predict a network: not calibrated
    assert lm.fit_cost["points"] == sum(g.n_points for g in lm.stepwise.values()) >= 6
    assert lm.anchor == (stepwise_mod.ANCHOR_LOG2, stepwise_mod.ANCHOR_PRIOR) and "anchored" in lm.describe()
    y = lm.stepwise["relu"]((64 * 16 * 16,))
    assert 0 < y < 0.1
    from lightning_edge.latency.plot import plot_model

    pngs = plot_model(lm, tmp_path)
    assert pngs and pngs[0].read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="class 'attention'"):
        LatencyModel.fit("stepwise", "cpu", budget_s=1, classes=["attention"], base=base)
    with pytest.raises(ValueError, match="budget_s must be a positive"):
        LatencyModel.fit("stepwise", "cpu", budget_s=0)
    with pytest.raises(ValueError, match="thread clock needs torch.set_num_threads"):
        LatencyModel.fit("stepwise", "cpu", budget_s=1, threads=2, classes=["relu"], base=base, clock="thread")
    assert torch.get_num_threads() == prev and measure.clock() == "wall"


def test_a_model_fitted_on_a_busy_machine_predicts_its_passes_as_long_as_they_were_there(sw, tmp_path):
    """The disturbance curve the fit measured (``measure.disturbance``) multiplies a prediction by the factor of its
    pass's length, every layer alike; a model without one (quiet, or older) predicts as before; the curve is kept in
    the file."""
    model, x = Net().eval(), torch.randn(2, 3, 16, 16)
    quiet = sw.predict(model, x)
    t = quiet.total_s
    busy = stepwise_model(disturbance_pass_s=[t / 10, t, 10 * t], disturbance_factor=[1.0, 1.2, 1.5])
    got = busy.predict(model, x)
    assert got.total_s == pytest.approx(1.2 * t, rel=1e-9)
    for a, b in zip(quiet.layers, got.layers):
        assert b.time_s == pytest.approx(1.2 * a.time_s, rel=1e-9)
    assert busy.disturbance(t * math.sqrt(10)) == pytest.approx(1.35)    # interpolated in log time
    assert busy.disturbance(1e3) == pytest.approx(1.5) and busy.disturbance(1e-9) == pytest.approx(1.0)
    back = LatencyModel.load(busy.save(tmp_path / "busy.json"))
    assert back.predict(model, x).total_s == pytest.approx(got.total_s, rel=1e-9)
    bound = LatencyModel("roofline", busy.meta, 5e10, 1e10)        # a bound stays a bound
    assert bound.predict(model, x).total_s == pytest.approx(
        LatencyModel("roofline", META, 5e10, 1e10).predict(model, x).total_s)


# ------------------------------------------------------------------ boxes
def test_a_unit_is_predicted_from_the_smallest_box_that_holds_it():
    def eff_time(p):  # small GEMMs run far below peak, as on a CPU: not multilinear in the channels
        f, c, hw, b = p
        return 20e-6 + 2 * f * c * hw * b / (5e10 * min(1.0, (f * c) / (512 * 512)) ** 0.5)

    gens = {k: generate(SPECS[k].dims, eff_time, tol=0.02, max_points=6)
            for k in ("conv1x1", "conv1x1/small", "conv1x1/map", "conv1x1/dram")}
    lm = LatencyModel("stepwise", META, 5e10, 1e10, stepwise=gens)
    small, large, big_map = (96, 16, 64, 1), (512, 256, 64, 8), (64, 32, 2304, 1)
    assert lm.generation_for("conv1x1", small) is gens["conv1x1/small"]
    assert lm.generation_for("conv1x1", big_map) is gens["conv1x1/map"]
    assert lm.generation_for("conv1x1", large) is gens["conv1x1"]
    assert lm.generation_for("conv1x1", large, dram=True) is gens["conv1x1/dram"]
    assert lm.generation_for("conv1x1", small, dram=True) is gens["conv1x1/dram"]   # the only cold box
    assert lm.generation_for("conv1x1", (4096, 16, 64, 1)) is gens["conv1x1"]       # outside all: the full box
    assert lm.generation_for("conv", small) is None
    truth = eff_time(small)
    err_small = abs(gens["conv1x1/small"](small) - truth) / truth
    err_full = abs(gens["conv1x1"](small) - truth) / truth
    assert err_small < err_full / 2, (err_small, err_full)


def test_a_fit_asked_for_a_class_generates_its_boxes_measuring_the_class_unit(monkeypatch):
    import time

    from lightning_edge.latency import model as model_mod

    calls = []

    def fake_measure(cls, point, device, repeats, cold=False, path="", warmup=2):
        calls.append((cls, cold, path))
        return 20e-6 + 2e-11 * math.prod(point) * (2 if cold else 1)

    monkeypatch.setattr(measure, "measure_point", fake_measure)
    g = model_mod._fit_stepwise("cpu", time.monotonic() + 60, ["conv1x1"], 3, lambda _m: None, 0.05, 5)
    assert sorted(g) == sorted(f"conv1x1{box}{cold}" for box in ("", "/map", "/px1", "/px4", "/small", "/s2",
                                                                  "/s2-b1", "/deep-s2-b1")
                               for cold in (("/dram",) if box == "" else ("-dram",)) + ("",))
    assert {c for c, _cold, _p in calls} == {"conv1x1"} and {cold for _c, cold, _p in calls} == {False, True}
    assert {p for _c, _cold, p in calls} == {"", "s2"}
    # a box of another kernel path is measured on it, warm and cold
    calls.clear()
    model_mod._fit_stepwise("cpu", time.monotonic() + 60, ["conv/im2col", "conv/im2col-dram", "dwconv/ragged"], 3,
                            lambda _m: None, 0.05, 5)
    assert {(c, cold, p) for c, cold, p in calls} == {("conv", False, "im2col"), ("conv", True, "im2col"),
                                                      ("dwconv", False, "ragged")}
    # a device whose units take no such path (a GPU) does not spend its budget on them
    calls.clear()
    g = model_mod._fit_stepwise("cuda", time.monotonic() + 60, ["conv1x1"], 3, lambda _m: None, 0.05, 5)
    assert {p for _c, _cold, p in calls} == {""} and not any("s2" in k for k in g)


def test_a_step_wise_fit_revisits_its_boxes_and_keeps_each_points_lesser_time(monkeypatch):
    """A burst of other work slows the first visit of some points (1.6 times); the second visit, after every box's
    first, finds the machine at its speed: the function is generated through the lesser times, every box is
    revisited while time is left, each visit times ``visit_calls(repeats)`` calls, the second without warm-up."""
    import time

    from lightning_edge.latency import model as model_mod

    def truth(point):
        return 20e-6 + 2e-11 * math.prod(point)

    visits = []

    def fake_measure(cls, point, device, repeats, cold=False, path="", warmup=2):
        n = sum(p == tuple(point) for p, _r, _w in visits)    # this point's earlier visits
        visits.append((tuple(point), repeats, warmup))
        # bursts: some points slow on their first visit, others on their second
        slow = sum(point) % 3 == (0 if n == 0 else 1)
        return truth(point) * (1.6 if slow else 1.0)

    monkeypatch.setattr(measure, "measure_point", fake_measure)
    revisited: list[str] = []
    g = model_mod._fit_stepwise("cpu", time.monotonic() + 60, ["conv1x1/small"], 5, lambda _m: None, 0.05, 5,
                                revisited=revisited)
    assert revisited == ["conv1x1/small"]
    twice = {p for p, _r, w in visits if w == model_mod.REVISIT_WARMUP}
    pts = g["conv1x1/small"].points
    # every point timed on both visits is its lesser time: the truth, whichever visit the burst slowed
    assert twice and all(v == pytest.approx(truth(p)) for p, v in pts if p in twice)
    assert any(sum(p) % 3 == 1 for p in twice) and any(sum(p) % 3 == 0 for p in twice)
    assert {r for _p, r, _w in visits} == {model_mod.visit_calls(5)} == {3}
    assert twice <= {p for p, _r, w in visits if w == 2}
    # the burst's points alone would have bent the function: one visit (no time left for a second) keeps them
    visits.clear()
    revisited.clear()
    one = model_mod._fit_stepwise("cpu", time.monotonic() - 1, ["conv1x1/small"], 5, lambda _m: None, 0.05, 5,
                                  revisited=revisited)
    assert not revisited and all(w == 2 for _p, _r, w in visits)
    assert any(v > 1.5 * truth(p) for p, v in one["conv1x1/small"].points)


def test_a_revisit_the_deadline_cuts_short_keeps_the_first_visit(monkeypatch):
    import time

    from lightning_edge.latency import model as model_mod

    clock = {"t": 0.0}
    monkeypatch.setattr(time, "monotonic", lambda: clock["t"])   # the fit's and the generation's clock

    warmups = []

    def fake_measure(cls, point, device, repeats, cold=False, path="", warmup=2):
        warmups.append(warmup)
        clock["t"] += 0.01 if warmup else 1.0     # the second visit overruns the deadline at its first points
        return 20e-6 + 2e-11 * math.prod(point) * (1.0 if warmup else 0.5)

    monkeypatch.setattr(measure, "measure_point", fake_measure)
    revisited: list[str] = []
    g = model_mod._fit_stepwise("cpu", 5.0, ["conv1x1/small"], 5, lambda _m: None, 0.05, 5, revisited=revisited)
    first_visit = warmups.index(model_mod.REVISIT_WARMUP)    # the revisit started, and was cut
    assert not revisited and first_visit > 0
    kept = g["conv1x1/small"]
    assert kept.n_points == first_visit    # the first visit's function: its points and their times
    assert all(v == pytest.approx(20e-6 + 2e-11 * math.prod(p)) for p, v in kept.points)
    assert kept.elapsed_s > first_visit * 0.01 + 1.0   # the cut revisit's time counted


def _path_model(keys: list[str]) -> tuple[dict, LatencyModel]:
    """Boxes ``keys`` generated on a synthetic device whose kernel paths differ by a constant per call (``im2col``
    3e-4 s, ``ragged`` 2e-4, ``s2`` 5e-4, PyTorch's usual 1e-4, plus 1e-12 s per unit of the point's product),
    and the step-wise model of them: which box predicted a unit shows in its time."""
    extra = {"": 1e-4, "im2col": 3e-4, "ragged": 2e-4, "s2": 5e-4}

    def t(path):
        return lambda p: extra[path] + 1e-12 * math.prod(p)

    gens = {k: generate(SPECS[k].dims, t(SPECS[k].path), tol=0.02, max_points=4) for k in keys}
    return gens, LatencyModel("stepwise", META, 5e10, 1e10, stepwise=gens)


def _only_unit(mod: nn.Module, shape: tuple) -> LayerDesc:
    """The one unit of a one-layer module on an input of ``shape``."""
    d = describe(mod.eval(), torch.randn(shape))[0][0]
    (u,) = units_of(d)
    return u


def test_a_unit_is_predicted_from_the_boxes_of_its_kernel_path():
    """A 3x3 convolution PyTorch runs as im2col (batch 1, a small input) is predicted from the boxes measured on
    that path, one it runs through oneDNN at batch 1 from the oneDNN batch-1 boxes, the nearest when none holds it
    (not a batch 2..8 box extrapolated to one image); a depthwise convolution of 72 channels from the ragged boxes;
    a file fitted before the paths from the boxes it has."""
    gens, lm = _path_model(["conv", "conv/b1", "conv/map-b1", "conv/im2col", "conv/small-im2col", "dwconv",
                            "dwconv/ragged"])
    unit = _only_unit
    alex = unit(nn.Conv2d(192, 192, 3, padding=1), (1, 192, 7, 7))      # 9408 input elements: im2col
    big = unit(nn.Conv2d(128, 128, 3, padding=1), (1, 128, 24, 24))     # oneDNN at batch 1
    gap = unit(nn.Conv2d(64, 64, 3, padding=1), (1, 64, 24, 24))        # oneDNN, in no batch-1 box
    gap2 = unit(nn.Conv2d(208, 64, 3, padding=1), (1, 208, 10, 10))     # 20800: oneDNN; nearer a batch 2-8 box
    batch = unit(nn.Conv2d(192, 192, 3, padding=1), (2, 192, 7, 7))     # oneDNN, batch 2
    dw72 = unit(nn.Conv2d(72, 72, 3, padding=1, groups=72), (1, 72, 16, 16))
    dw64 = unit(nn.Conv2d(64, 64, 3, padding=1, groups=64), (1, 64, 16, 16))
    assert [measure.unit_path(u) for u in (alex, big, gap, gap2, batch, dw72, dw64)] == \
        ["im2col", "", "", "", "", "ragged", ""]
    # a torch without oneDNN runs a batch of 8 as im2col too: not from the batch-1 im2col boxes
    assert measure.unit_path(dataclasses.replace(alex, batch=8)) == ""
    chosen = {n: lm.generation_for(point_for(u)[0], point_for(u)[1], path=measure.unit_path(u))
              for n, u in dict(alex=alex, big=big, gap=gap, gap2=gap2, batch=batch, dw72=dw72, dw64=dw64).items()}
    assert chosen == {"alex": gens["conv/im2col"], "big": gens["conv/b1"], "gap": gens["conv/b1"],
                      "gap2": gens["conv/b1"], "batch": gens["conv"], "dw72": gens["dwconv/ragged"],
                      "dw64": gens["dwconv"]}
    est = lm._predict_units([alex])[0]
    assert "im2col" in est.how and est.time_s == pytest.approx(gens["conv/im2col"](point_for(alex)[1]))
    # a file fitted before the paths: the im2col unit from the boxes it has
    old = LatencyModel("stepwise", META, 5e10, 1e10, stepwise={k: gens[k] for k in ("conv", "conv/b1")})
    assert old.generation_for("conv", point_for(alex)[1], path="im2col") is \
        old.generation_for("conv", point_for(alex)[1]) is not None
    assert "im2col" not in old._predict_units([alex])[0].how


def test_a_fitted_stepwise_model_predicts_from_the_anchored_functions_and_an_older_file_from_its_trees(tmp_path):
    """A fit records its anchoring (``meta`` ``anchor_log2``, ``anchor_prior``) and its units are predicted from
    ``Generation.anchored``; a file written before (no such fields) keeps its trees, on which its network
    calibration was fitted; the fields survive the file."""
    def t(p):   # a bend along the pixels the tree's straight line misses
        f, c, hw, b = p
        return 2e-5 + 2e-11 * f * c * hw * b * (1 + 3 / (1 + math.exp(-(hw - 300) / 60)))

    g = generate(SPECS["conv1x1"].dims, t, tol=0.02, max_points=8)
    unit = describe(nn.Conv2d(256, 256, 1).eval(), torch.randn(1, 256, 16, 16))[0][0]
    (u,) = units_of(unit)
    point = point_for(u)[1]
    old = LatencyModel("stepwise", META, 5e10, 1e10, stepwise={"conv1x1": g})
    new = LatencyModel("stepwise", {**META, "anchor_log2": 1.0, "anchor_prior": 0.3}, 5e10, 1e10,
                       stepwise={"conv1x1": g})
    assert old.anchor is None and new.anchor == (1.0, 0.3)
    assert old._predict_units([u])[0].time_s == pytest.approx(g(point))
    assert new._predict_units([u])[0].time_s == pytest.approx(g.anchored(point, 1.0, 0.3))
    assert g.anchored(point, 1.0, 0.3) != pytest.approx(g(point), rel=0.01)    # the anchoring does something here
    assert "anchored" in new.describe() and "anchored" not in old.describe()
    back = LatencyModel.load(new.save(tmp_path / "m.json"))
    assert back.anchor == (1.0, 0.3) and back._predict_units([u])[0].time_s == pytest.approx(
        new._predict_units([u])[0].time_s)


def test_a_strided_convolution_through_onednn_is_predicted_from_the_stride_2_boxes():
    """oneDNN runs a strided 1x1 convolution (any batch) and a strided 3x3 one at batch 1 with a large input; they
    are predicted from the boxes measured at stride 2 (``s2``): the stride-1 1x1 boxes measured PyTorch's GEMM
    (ResNeXt-like's 128 -> 256 downsampling, 0.20 ms in the network, predicted 0.13-0.14 ms) and the stride-1
    batch-1 oneDNN boxes stop at 15x15 outputs (a 192-channel 16x16 -> 8x8 layer, 0.54 ms in the network, was
    extrapolated to 0.10 ms in one fit and 1.54 ms in another). A small strided input stays on im2col, a strided
    3x3 convolution at batch 8 on the stride-1 boxes (both strides run through oneDNN there, 5-18 % apart); a file
    fitted before the stride-2 boxes predicts them from PyTorch's usual path's boxes, not another path's."""
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch has no oneDNN: a strided convolution takes the usual path")

    gens, lm = _path_model(["conv", "conv/b1", "conv/im2col", "conv/s2-b1", "conv/deep-s2-b1", "conv1x1",
                            "conv1x1/s2", "conv1x1/s2-b1", "conv1x1/deep-s2-b1"])
    unit = _only_unit
    units = {
        "allconv": unit(nn.Conv2d(192, 192, 3, 2, 1), (1, 192, 16, 16)),     # 49152 input elements: oneDNN
        "deep": unit(nn.Conv2d(448, 448, 3, 2, 1), (1, 448, 12, 12)),
        "small": unit(nn.Conv2d(64, 64, 3, 2, 1), (1, 64, 12, 12)),          # 9216: im2col
        "batch": unit(nn.Conv2d(192, 192, 3, 2, 1), (8, 192, 16, 16)),
        "down": unit(nn.Conv2d(128, 256, 1, 2), (1, 128, 24, 24)),
        "down8": unit(nn.Conv2d(128, 256, 1, 2), (8, 128, 24, 24)),
        "deep_down": unit(nn.Conv2d(1024, 2048, 1, 2), (1, 1024, 14, 14)),
        "plain1x1": unit(nn.Conv2d(128, 256, 1), (1, 128, 12, 12)),
    }
    assert {n: measure.unit_path(u) for n, u in units.items()} == {
        "allconv": "s2", "deep": "s2", "small": "im2col", "batch": "", "down": "s2", "down8": "s2",
        "deep_down": "s2", "plain1x1": ""}
    chosen = {n: lm._box_key(point_for(u)[0], point_for(u)[1], path=measure.unit_path(u)) for n, u in units.items()}
    assert chosen == {"allconv": "conv/s2-b1", "deep": "conv/deep-s2-b1", "small": "conv/im2col", "batch": "conv",
                      "down": "conv1x1/s2-b1", "down8": "conv1x1/s2", "deep_down": "conv1x1/deep-s2-b1",
                      "plain1x1": "conv1x1"}
    est = lm._predict_units([units["allconv"]])[0]
    assert " s2" in est.how and est.time_s == pytest.approx(gens["conv/s2-b1"](point_for(units["allconv"])[1]))
    # a 5x5 strided convolution runs through oneDNN at any size: the stride-1 boxes, its channels scaled, as before
    big_k = unit(nn.Conv2d(64, 64, 5, 2, 2), (1, 64, 16, 16))
    assert measure.unit_path(big_k) == ""
    # with the weights from memory: the cold box of the unit's own path; where the fit left those out (cold boxes
    # go last), the warm one alone, not the stride-1 GEMM's cold box
    u = dataclasses.replace(units["down8"], cold=1.0)
    cold_gens = dict(gens, **{"conv1x1/dram": generate(SPECS["conv1x1/dram"].dims, lambda p: 1.0, tol=0.02,
                                                        max_points=3)})
    lm2 = LatencyModel("stepwise", META, 5e10, 1e10, stepwise=cold_gens)
    est = lm2._predict_units([u])[0]
    assert est.time_s == pytest.approx(gens["conv1x1/s2"](point_for(u)[1])) and "from memory" not in est.how
    cold_gens["conv1x1/s2-dram"] = generate(SPECS["conv1x1/s2-dram"].dims, lambda p: 2e-3, tol=0.02, max_points=3)
    lm3 = LatencyModel("stepwise", META, 5e10, 1e10, stepwise=cold_gens)
    assert lm3._predict_units([u])[0].time_s == pytest.approx(2e-3) and "from memory" in lm3._predict_units([u])[0].how
    # a file fitted before the stride-2 boxes (version 3): the usual path's boxes, never the im2col ones
    old = LatencyModel("stepwise", META, 5e10, 1e10,
                       stepwise={k: gens[k] for k in ("conv", "conv/b1", "conv/im2col", "conv1x1")})
    assert old._box_key("conv", point_for(units["allconv"])[1], path="s2") == "conv/b1"
    assert old._box_key("conv1x1", point_for(units["down"])[1], path="s2") == "conv1x1"


def test_a_small_container_without_macs_is_predicted_from_units_of_its_size_not_its_children():
    """YOLOv8n's C2f (chunk + concat in its own forward, convolutions in its children) was predicted 10 times too
    slow: the forest matched it, on its children's channels and weights, to large activations. Now a layer of ops
    is its ops: the concatenation alone."""
    samples = []
    for n in (1024, 4096, 16384, 65536, 2 ** 19, 2 ** 20):
        d = LayerDesc(name=f"cat{n}", kind="cat", cls="eltwise", op="cat", flops=0, macs=0, bytes=8 * n, n_in=n,
                      n_out=n, c=16)
        samples.append(Sample(d, 10e-6 + 8 * n / 1e10, "synthetic"))
    samples += training_samples()                 # units with MACs, for the other forest
    cat = LayerDesc(name="model.12#0", kind="cat", cls="eltwise", op="cat", flops=0, macs=0, bytes=24576,
                    n_in=6144, n_out=6144)
    c2f = LayerDesc(name="model.12", kind="C2f", cls="eltwise", flops=0, macs=0, bytes=24576, n_in=6144,
                    n_out=2048, c=1280, f=1280, params=500_000, ops=[cat])
    for kind in ("statistical", "mixed"):
        lm = LatencyModel(kind, META, 5e10, 1e10, samples=samples, module_s=1e-6)
        t = lm.predict_layers([c2f]).layers[0].time_s
        assert 8e-6 < t < 30e-6, (kind, t)       # the concatenation: ~15 us; its children would make it 10x


def _passes(lm, names, a, c=0.0):
    """Pass times of the calibration networks ``names`` that are ``a(label)`` x ``lm``'s predictions + ``c`` per
    layer call (a synthetic board whose networks run otherwise than its units add up to)."""
    out = []
    for label, model, inputs in measure.network_cases("cpu", names):
        descs, containers = describe(model, *inputs)
        calls = sum(max(1, d.calls) for d in descs)
        out.append((label, a(label) * lm.predict_layers(descs, containers).total_s + c * calls))
    return out


def test_the_network_calibration_takes_the_zoos_passes_and_says_what_to_expect_of_an_unseen_network(tmp_path):
    """What the units' context misses of a network is measured on the zoo's networks and removed as a factor on
    every layer and a cost per layer call; the leave-one-network-out error says how far it holds; the file keeps
    the passes, and a model trained again on the same sweep (``with_samples``) gets its own terms."""
    sw = stepwise_model()
    model, x = Net().eval(), torch.randn(2, 3, 16, 16)
    names = ["mobilenet_v2", "resnet18", "yolov8n"]
    nets = _passes(sw, names, lambda label: 1.1, 5e-6)
    assert [k for k, _ in nets] == ["mobilenet_v2 b1", "mobilenet_v2 b8", "resnet18 b1", "resnet18 b8", "yolov8n b1",
                                    "yolov8n b8"]
    cal = sw.network_calibration(nets)
    assert cal["network_factor"] == pytest.approx(1.1, rel=1e-3)
    assert cal["network_call_s"] == pytest.approx(5e-6, rel=1e-3)
    assert cal["network_error_pct"] == pytest.approx(0, abs=0.1)       # the others' terms predict each exactly
    assert cal["network_cases"] == [k for k, _ in nets] and len(cal["network_s"]) == 6
    lm = stepwise_model(**cal)
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # labelled, not warned about: it is how the model predicts
        before, after = sw.predict(model, x), lm.predict(model, x)
    assert any("network calibration" in n for n in after.notes) and not before.notes
    for a, b in zip(before.layers, after.layers):
        extra = 0.0 if a.cls == "call" else cal["network_call_s"] * max(1, a.calls)
        assert b.time_s == pytest.approx(cal["network_factor"] * a.time_s + extra, rel=1e-6)
    # calibrating a calibrated model again finds the same terms (it takes its own out first)
    again = lm.network_calibration(nets)
    assert again["network_factor"] == pytest.approx(cal["network_factor"], rel=1e-4)
    assert again["network_call_s"] == pytest.approx(cal["network_call_s"], rel=1e-3)
    # passes a cost per call cannot explain (it would be negative): the geometric mean of the ratios alone, and
    # each network's miss with the others' factor
    two = names[:2]
    uneven = sw.network_calibration(_passes(sw, two, lambda label: 1.0 if label.startswith("mobilenet") else 1.44))
    assert uneven["network_factor"] == pytest.approx(1.2, rel=1e-3) and uneven["network_call_s"] == 0
    assert uneven["network_error_pct"] == pytest.approx(100 * ((1.44 - 1) + (1 - 1 / 1.44)) / 2, abs=0.2)
    assert "leave-one-network-out error" in lm.describe()
    back = LatencyModel.load(lm.save(tmp_path / "cal.json"))
    assert back.predict(model, x).total_s == pytest.approx(after.total_s, rel=1e-9)
    # trained again (another kind, more samples): its own predictions of the same passes give its own terms
    mixed = LatencyModel("mixed", {**META, **cal}, 5e10, 1e10, samples=training_samples(), container_s=1e-6,
                         module_s=2e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the few synthetic samples: units outside them
        stat = mixed.with_samples([], kind="statistical")
        own = LatencyModel("statistical", META, 5e10, 1e10, samples=training_samples(), container_s=1e-6,
                           module_s=2e-6).network_calibration(nets)
    assert stat.meta["network_factor"] == pytest.approx(own["network_factor"], rel=1e-6)
    assert stat.meta["network_s"] == cal["network_s"]


def test_the_calibration_networks_are_built_once_a_process(monkeypatch):
    """A fit times the networks and describes them while they are built (``time_networks(layers=...)``); its
    calibration and any retraining after it (``with_samples``) predict them from those layers, built no more."""
    from lightning_edge.latency import model as model_mod

    monkeypatch.setattr(model_mod, "_NETWORK_LAYERS", {})
    built = []
    real = measure.network_cases

    def counted(device="cpu", names=None):
        for label, net, inputs in real(device, names):
            built.append(label)
            yield label, net, inputs

    monkeypatch.setattr(measure, "network_cases", counted)
    nets = measure.time_networks("cpu", repeats=1, names=["resnet18", "yolov8n"],
                                 layers=model_mod.network_layer_cache("cpu"))
    assert [k for k, _ in nets] == built == ["resnet18 b1", "resnet18 b8", "yolov8n b1", "yolov8n b8"]
    assert all(measure.network_name(k) == k.split(" ")[0] for k in built)
    sw = stepwise_model()
    cal = sw.network_calibration(nets)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the few synthetic samples: units outside them
        mixed = LatencyModel("mixed", {**META, **cal}, 5e10, 1e10, samples=training_samples(), container_s=1e-6,
                             module_s=2e-6).with_samples([])
    assert len(built) == 4 and mixed.meta["network_s"] == cal["network_s"]
    # a label the process has not described is built (and only its network)
    sw.network_calibration(nets + [("mobilenet_v2 b1", 0.01)])
    assert built[4:] == ["mobilenet_v2 b1", "mobilenet_v2 b8"]


def test_a_model_file_with_a_hostile_network_calibration_is_refused(tmp_path):
    cal = {"network_factor": 1.1, "network_call_s": 2e-6, "network_cases": ["resnet18 b1"], "network_s": [0.01]}
    d = stepwise_model(**cal).to_dict()
    for field, value, match in [("network_factor", 5.0, "meta.network_factor"),
                                ("network_factor", "1.1", "meta.network_factor"),
                                ("network_call_s", -1e-6, "meta.network_call_s"),
                                ("network_call_s", 1.0, "meta.network_call_s"),
                                ("network_s", [0.01, 0.02], "meta.network_s"),
                                ("network_s", [-1.0], r"meta.network_s\[0\]"),
                                ("network_cases", [3], r"meta.network_cases\[0\]"),
                                ("network_cases", ["../../etc b1"], r"meta.network_cases\[0\].*calibration networks")]:
        bad = json.loads(json.dumps(d))
        bad["meta"][field] = value
        p = tmp_path / "bad.json"
        p.write_text(json.dumps(bad))
        with pytest.raises(LatencyModelError, match=match):
            LatencyModel.load(p)



@pytest.mark.slow
@pytest.mark.parametrize("fails", [2, 3])
def test_a_fit_whose_calibration_networks_run_out_of_memory_keeps_its_units_uncalibrated(monkeypatch, fails):
    """A small board may not hold the zoo's networks: the minutes of units are kept, and the fit says why (a real
    full fit; a round of networks fails as an allocation would). The second round failing leaves the model
    uncalibrated; the third, calibrated on the two rounds timed. The later rounds time only the networks the first
    round timed, each within its share of the budget."""
    real, rounds = measure.time_networks, []

    def a_round_fails(*a, **k):
        if len(rounds) + 1 == fails:
            raise RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 102760448 bytes.")
        rounds.append((k.get("names"), k["deadline"] - time.monotonic(), real(*a, **k)))
        return rounds[-1][2]

    monkeypatch.setattr(measure, "time_networks", a_round_fails)
    lm = LatencyModel.fit("stepwise", "cpu", budget_s=60, threads=1, clock="thread", repeats=2, max_points=3)
    assert rounds and rounds[0][2] and all(s > 0 for _k, s in rounds[0][2])     # the first round timed real networks
    first = sorted({measure.network_name(k) for k, _s in rounds[0][2]})
    assert all(sorted(names) == first for names, _left, _r in rounds[1:])
    share = 0.15 * 60 / 3                       # each round's share of the budget, the later ones to one end
    assert rounds[0][1] <= share + 0.01 and all(
        left <= i * share + 0.01 for i, (_n, left, _r) in enumerate(rounds[1:], start=1))
    assert lm.stepwise
    if fails == 3:
        assert len(lm.fit_cost["network_rounds_s"][lm.meta["network_cases"][0]]) == 2 and "network_factor" in lm.meta
        assert "calibrated on 2 rounds of 3: RuntimeError: DefaultCPUAllocator" in lm.fit_cost["network_calibration"]
        return
    assert "network_factor" not in lm.meta
    assert "not calibrated: RuntimeError: DefaultCPUAllocator" in lm.fit_cost["network_calibration"]


def test_a_calibration_network_counts_the_median_of_its_rounds():
    """Each calibration network's pass is the median of the fit's rounds: a round a burst of the host slowed is
    left out (the mean of two took half of it; the least of them predicted the held-out networks worse: a user's
    passes have the host's bursts in them); of two rounds, their mean. Only the networks every round timed (a
    round cut short by its deadline), in the first round's order."""
    from lightning_edge.latency.model import network_passes

    first = [("resnet18 b1", 0.033), ("resnet18 b8", 0.060), ("yolov8n b1", 0.010)]
    second = [("resnet18 b8", 0.058), ("resnet18 b1", 0.0235)]
    third = [("resnet18 b1", 0.0240), ("resnet18 b8", 0.090), ("yolov8n b1", 0.011)]
    got = network_passes([first, second, third])
    assert [k for k, _ in got] == ["resnet18 b1", "resnet18 b8"]
    assert [s for _, s in got] == pytest.approx([0.0240, 0.060])      # the slow round of each left out
    assert [s for _, s in network_passes([first, second])] == pytest.approx([0.02825, 0.059])
    assert network_passes([first]) == first and network_passes([]) == []


@pytest.mark.slow
def test_a_calibrated_fit_keeps_every_round_of_its_networks_and_counts_their_median(tmp_path):
    """A real full fit (60 s: the calibration's least budget): the file keeps each calibration network's rounds
    (one before the units, the others after them), and the pass it calibrates on is their median."""
    from lightning_edge.latency.model import NETWORK_ROUNDS

    lm = LatencyModel.fit("stepwise", "cpu", budget_s=60, threads=1, clock="thread", repeats=2, max_points=3)
    rounds = lm.fit_cost["network_rounds_s"]
    assert list(rounds) == lm.meta["network_cases"]
    assert all(len(v) == NETWORK_ROUNDS and min(v) > 0 for v in rounds.values())
    assert lm.meta["network_s"] == pytest.approx([statistics.median(v) for v in rounds.values()], rel=1e-5)
    assert LatencyModel.load(lm.save(tmp_path / "m.json")).fit_cost["network_rounds_s"] == rounds
