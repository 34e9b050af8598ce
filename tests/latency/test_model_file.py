"""A latency-model file is checked before anything is built from it (issue 25, item 6): a damaged or crafted file
is one ``LatencyModelError`` (a ValueError; the CLI prints it as one line) naming the file, the field and what was
expected, raised before any array is allocated, any division done or any prediction made from it."""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_edge.cli import main
from lightning_edge.latency.model import FILE_VERSION
from tests.latency.test_model import META, stepwise_model, training_samples

ROOT = Path(__file__).resolve().parents[2]


def roofline_doc(**kw) -> dict:
    d = {"schema": "lightning_edge.latency_model", "version": 1, "kind": "roofline", "meta": dict(META),
         "peak_flops": 5e10, "bandwidth": 1e10}
    d.update(kw)
    return d


def pool_doc(dims=None, tree=None, **gen) -> dict:
    """A step-wise model with one small generation (class ``relu``: one dimension ``n``)."""
    g = {"dims": dims if dims is not None else [{"name": "n", "lo": 1, "hi": 9, "ref": 9, "widths": None}],
         "tree": tree if tree is not None else {"dim": 0, "name": "n", "w": 1, "a": 1e-5, "h": 1e-9},
         "points": [[[1], 1e-5], [[9], 1.0001e-5]], "phases": [], "elapsed_s": 0.1}
    g.update(gen)
    return roofline_doc(kind="stepwise", stepwise={"relu": g})


@functools.lru_cache(maxsize=1)
def _sample() -> str:
    return json.dumps(training_samples()[0].to_dict())


def mixed_doc(sample=None, n=1) -> dict:
    s = sample if sample is not None else json.loads(_sample())
    return roofline_doc(kind="mixed", samples=[copy.deepcopy(s) for _ in range(n)])


def nested(depth: int, leaf=1e-5):
    t = leaf
    for _ in range(depth):
        t = {"dim": 0, "name": "n", "w": 1, "a": t, "h": 0.0}
    return t


def with_layer(**kw) -> dict:
    s = json.loads(_sample())
    s["layer"].update(kw)
    return mixed_doc(s)


def with_sample(**kw) -> dict:
    s = json.loads(_sample())
    s.update(kw)
    return mixed_doc(s)


# (id, the file's text, a piece of the field path the error must name)
HOSTILE = [
    # a huge declared size: 1e12 values would be allocated (in-process, a size the old loader's allocation fails
    # on at once; test_a_350_byte_file_does_not_exhaust_memory runs the 3e9 that exhausted memory)
    ("range-allocates", pool_doc([{"name": "n", "lo": 1, "hi": 10 ** 12}]), "stepwise.relu.dims[0]"),
    ("range-overflows", pool_doc([{"name": "n", "lo": 1, "hi": 1e300}]), "stepwise.relu.dims[0].hi"),
    ("values-list-too-long", pool_doc([{"name": "n", "values": list(range(1, 70_000))}]),
     "stepwise.relu.dims[0].values"),
    ("value-zero", pool_doc([{"name": "n", "values": [0, 1, 2]}]), "stepwise.relu.dims[0].values"),
    ("ref-not-a-value", pool_doc([{"name": "n", "lo": 1, "hi": 9, "ref": 99}]), "stepwise.relu.dims[0].ref"),
    ("widths-zero", pool_doc([{"name": "n", "lo": 1, "hi": 9, "widths": [0]}]), "stepwise.relu.dims[0].widths"),
    ("two-dims-for-a-one-dim-class", pool_doc([{"name": "n", "lo": 1, "hi": 9}, {"name": "m", "lo": 1, "hi": 9}]),
     "stepwise.relu.dims"),
    ("dims-not-a-list", pool_doc({"name": "n"}), "stepwise.relu.dims"),
    # zero divisors and numbers that blow up later
    ("step-width-zero", pool_doc(tree={"dim": 0, "name": "n", "w": 0, "a": 1.0, "h": 1.0}), "stepwise.relu.tree.w"),
    ("step-width-infinite", pool_doc(tree={"dim": 0, "name": "n", "w": "1e999", "a": 1.0, "h": 1.0}),
     "stepwise.relu.tree.w"),
    ("tree-dim-out-of-range", pool_doc(tree={"dim": 5, "name": "n", "w": 1, "a": 1.0, "h": 1.0}),
     "stepwise.relu.tree.dim"),
    ("tree-nested-deeper-than-its-dims", pool_doc(tree=nested(3)), "stepwise.relu.tree.a"),
    ("tree-nested-900-deep", pool_doc(tree=nested(900)), "nested more than"),
    ("tree-leaf-1e308", pool_doc(tree={"dim": 0, "name": "n", "w": 1, "a": 1e308, "h": 1e308}),
     "stepwise.relu.tree.a"),
    ("tree-leaf-nan", pool_doc(tree={"dim": 0, "name": "n", "w": 1, "a": "NaN", "h": 0.0}), "stepwise.relu.tree"),
    ("tree-leaf-a-string", pool_doc(tree={"dim": 0, "name": "n", "w": 1, "a": "fast", "h": 0.0}),
     "stepwise.relu.tree.a"),
    ("points-not-pairs", pool_doc(points=[[1, 2]]), "stepwise.relu.points[0]"),
    ("phases-a-dict", pool_doc(phases={"a": 1}), "stepwise.relu.phases"),
    ("unknown-layer-class", roofline_doc(kind="stepwise", stepwise={"bogus": pool_doc()["stepwise"]["relu"]}),
     "stepwise.bogus"),
    ("stepwise-a-list", roofline_doc(kind="stepwise", stepwise=[1, 2]), "stepwise"),
    ("peak-zero", roofline_doc(peak_flops=0), "peak_flops"),
    ("peak-nan", roofline_doc(peak_flops="NaN"), "peak_flops"),
    ("peak-infinity", roofline_doc(peak_flops="Infinity"), "peak_flops"),
    ("peak-denormal", roofline_doc(peak_flops=1e-300), "peak_flops"),
    ("peak-a-string", roofline_doc(peak_flops="fast"), "peak_flops"),
    ("peak-a-400-digit-integer", roofline_doc(peak_flops=10 ** 400), "peak_flops"),
    ("bandwidth-negative", roofline_doc(bandwidth=-1e9), "bandwidth"),
    ("container-1e308", roofline_doc(kind="stepwise", container_s=1e308, stepwise=pool_doc()["stepwise"]),
     "container_s"),
    ("tile-zero", roofline_doc(kind="refined", tile={"tile_m": 0, "tile_n": 16, "units": 1}), "tile.tile_m"),
    ("meta-a-list", roofline_doc(meta=[1, 2]), "meta"),
    ("meta-threads-a-string", roofline_doc(meta={**META, "threads": "many"}), "meta.threads"),
    # the refined roofline's units default to meta.threads: int(None) raised TypeError in predict
    ("no-units-and-threads-null", roofline_doc(kind="refined", meta={**META, "threads": None}), "tile.units"),
    ("disturbance-lengths-differ", roofline_doc(meta={**META, "disturbance_pass_s": [1e-3, 1e-2],
                                                      "disturbance_factor": [1.1]}), "meta.disturbance_factor"),
    ("disturbance-factor-zero", roofline_doc(meta={**META, "disturbance_pass_s": [1e-3],
                                                   "disturbance_factor": [0.0]}), "meta.disturbance_factor[0]"),
    ("disturbance-pass-nan", roofline_doc(meta={**META, "disturbance_pass_s": ["NaN"], "disturbance_factor": [1.0]}),
     "meta.disturbance_pass_s"),
    ("disturbance-without-pass-lengths", roofline_doc(meta={**META, "disturbance_factor": [1.1]}),
     "meta.disturbance_pass_s"),
    ("anchor-negative", roofline_doc(meta={**META, "anchor_log2": -1.0, "anchor_prior": 0.3}), "meta.anchor_log2"),
    ("anchor-without-prior", roofline_doc(meta={**META, "anchor_log2": 1.0}), "meta.anchor_prior"),
    # a prior of 0 divided 0 by 0 at a unit far from every measured point
    ("anchor-prior-zero", roofline_doc(meta={**META, "anchor_log2": 0.05, "anchor_prior": 0.0}), "meta.anchor_prior"),
    ("anchor-a-bool", roofline_doc(meta={**META, "anchor_log2": True, "anchor_prior": 0.3}), "meta.anchor_log2"),
    ("anchor-prior-a-string", roofline_doc(meta={**META, "anchor_log2": 1.0, "anchor_prior": "x"}),
     "meta.anchor_prior"),
    ("kind-a-list", roofline_doc(kind=["roofline"]), "kind"),
    ("version-from-the-future", roofline_doc(version=FILE_VERSION + 1), "version"),
    ("version-a-bool", roofline_doc(version=True), "version"),
    ("notes-a-number", roofline_doc(notes=3), "notes"),
    ("fit-cost-nested-deep", roofline_doc(fit_cost={"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}), "fit_cost"),
    ("samples-a-dict", roofline_doc(kind="mixed", samples={"a": 1}), "samples"),
    ("samples-too-many", mixed_doc(n=10_001), "samples"),
    ("sample-time-negative", with_sample(time_s=-1.0), "samples[0].time_s"),
    ("sample-time-nan", with_sample(time_s="NaN"), "samples[0].time_s"),
    ("sample-layer-a-list", with_sample(layer=[1]), "samples[0].layer"),
    ("layer-class-unknown", with_layer(cls="bogus"), "samples[0].layer.cls"),
    ("layer-field-unknown", with_layer(bogus=1), "samples[0].layer.bogus"),
    ("layer-flops-infinite", with_layer(flops="Infinity"), "samples[0].layer.flops"),
    ("layer-channels-negative", with_layer(c=-5), "samples[0].layer.c"),
    ("layer-gemm-without-outputs", with_layer(cls="linear", flops=100.0, f=0), "samples[0].layer.f"),
]


def _text(doc) -> str:
    # "NaN", "Infinity", "1e999" written as the bare JSON tokens a crafted file would hold
    text = json.dumps(doc)
    for tok in ("NaN", "Infinity", "1e999"):
        text = text.replace(f'"{tok}"', tok)
    return text


@pytest.mark.parametrize("name, doc, field", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_model_file_is_one_error_naming_the_file_and_the_field(tmp_path, name, doc, field):
    from lightning_edge.latency.model import LatencyModel

    p = tmp_path / f"{name}.json"
    p.write_text(_text(doc))
    with pytest.raises(ValueError) as info:
        LatencyModel.load(p)
    msg = str(info.value)
    assert str(p) in msg and field in msg and "expected" in msg, msg
    assert "\n" not in msg and len(msg) < 500, msg
    assert type(info.value).__name__ == "LatencyModelError", repr(info.value)


@pytest.mark.parametrize("text, what", [
    ('{"schema": "lightning_edge.latency_model", "meta": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested"),
    ('{"schema": "lightning_edge.latency_model", "peak_flops": 1' + "0" * 5000 + "}", "digits"),
], ids=["nested-100000", "5000-digits"])
def test_json_the_parser_chokes_on_is_one_error_naming_the_file(tmp_path, text, what):
    from lightning_edge.latency.model import LatencyModel

    p = tmp_path / "m.json"
    p.write_text(text)
    with pytest.raises(ValueError, match=what) as info:
        LatencyModel.load(p)
    assert str(p) in str(info.value)


def test_a_file_larger_than_the_limit_is_refused_before_it_is_read(tmp_path):
    from lightning_edge.latency.model import LatencyModel

    p = tmp_path / "big.json"
    with open(p, "wb") as f:
        f.truncate(100 << 20)           # sparse: nothing is written
    with pytest.raises(ValueError, match="larger than"):
        LatencyModel.load(p)


def test_a_folder_given_as_the_model_file(tmp_path):
    from lightning_edge.latency.model import LatencyModel

    with pytest.raises(ValueError, match="folder"):
        LatencyModel.load(tmp_path)


_LOAD = ("from lightning_edge.latency.model import LatencyModel as M\n"
         "try:\n    M.load({!r})\nexcept ValueError as e:\n    print('ERR', e)\n")


def _run(code: str, timeout: float, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    def limit():
        if limit_bytes:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env,
                          preexec_fn=limit)


def test_a_350_byte_file_does_not_exhaust_memory(tmp_path):
    """Run under a 1.5 GB address-space limit, so that the old loader fails fast (MemoryError) instead of
    exhausting this machine."""
    p = tmp_path / "small.json"
    p.write_text(json.dumps({"schema": "lightning_edge.latency_model", "kind": "stepwise", "meta": {},
                             "peak_flops": 1e9, "bandwidth": 1e9, "stepwise": {"relu": {
                                 "dims": [{"name": "n", "lo": 1, "hi": 3_000_000_000}], "tree": 1.0, "points": [],
                                 "phases": []}}}))
    assert p.stat().st_size < 350
    r = _run(_LOAD.format(str(p)), 60, 1536 << 20)
    assert r.returncode == 0 and r.stdout.startswith("ERR ") and "stepwise.relu.dims[0]" in r.stdout, r.stderr[-800:]


def test_a_fifo_given_as_the_model_file_does_not_hang(tmp_path):
    p = tmp_path / "pipe.json"
    os.mkfifo(p)
    try:
        r = _run(_LOAD.format(str(p)), 30)
    except subprocess.TimeoutExpired:
        pytest.fail("loading a FIFO hangs")
    assert r.stdout.startswith("ERR ") and "not a regular file" in r.stdout, r.stderr[-800:]


CLI_CASES = [h for h in HOSTILE if h[0] in ("range-overflows", "step-width-zero", "peak-zero", "stepwise-a-list",
                                            "peak-a-400-digit-integer", "tile-zero", "tree-dim-out-of-range")]


@pytest.mark.parametrize("name, doc, field", CLI_CASES, ids=[h[0] for h in CLI_CASES])
def test_the_cli_prints_one_line(tmp_path, capsys, name, doc, field):
    p = tmp_path / f"{name}.json"
    p.write_text(_text(doc))
    rc = main(["latency", "predict", str(p), "zoo:resnet18", "--image-size", "32"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 1 and len(lines) == 1 and lines[0].startswith("lightning-edge latency: error: "), err
    assert str(p) in lines[0] and field in lines[0]


@pytest.mark.filterwarnings("ignore:LatencyModel used outside")
def test_files_this_package_writes_load_unchanged(tmp_path):
    from lightning_edge.latency.model import LatencyModel

    sw = stepwise_model()
    for lm in (sw, LatencyModel("mixed", META, 5e10, 1e10, samples=training_samples(), stepwise=sw.stepwise,
                                tile={"tile_m": 6, "tile_n": 16, "units": 2, "mapping": "cpu micro-kernel"},
                                fit_cost={"points": 3, "per_class": {"conv": {"points": 3, "elapsed_s": 0.5}}},
                                notes=["a note"])):
        p = lm.save(tmp_path / f"{lm.kind}.json")
        back = LatencyModel.load(p)
        assert back.to_dict() == lm.to_dict()


@functools.lru_cache(maxsize=1)
def _forest_doc() -> str:
    from lightning_edge.latency.model import LatencyModel

    return json.dumps(LatencyModel("mixed", META, 5e10, 1e10, samples=training_samples()).to_dict())


def forest_doc(edit) -> dict:
    d = json.loads(_forest_doc())
    edit(d["forests"]["ratio"]["trees"][0])
    return d


def _inner(tree) -> int:
    return next(i for i, le in enumerate(tree["left"]) if le >= 0)


FOREST_HOSTILE = [
    # a child that points back at its parent: a walk that never ends
    ("child-points-back", lambda t: t["right"].__setitem__(_inner(t), 0), "forests.ratio.trees[0].left"),
    ("child-beyond-the-tree", lambda t: t["left"].__setitem__(_inner(t), 10 ** 6), "forests.ratio.trees[0].left"),
    ("half-a-leaf", lambda t: t["left"].__setitem__(_inner(t), -1), "forests.ratio.trees[0].left"),
    ("feature-out-of-range", lambda t: t["feature"].__setitem__(_inner(t), 10 ** 4), "forests.ratio.trees[0].feature"),
    ("threshold-nan", lambda t: t["threshold"].__setitem__(0, "NaN"), "forests.ratio.trees[0].threshold"),
    ("value-a-string", lambda t: t["value"].__setitem__(0, "fast"), "forests.ratio.trees[0].value"),
    ("lengths-differ", lambda t: t["value"].pop(), "forests.ratio.trees[0].value"),
    ("no-nodes", lambda t: t.update(left=[], right=[], feature=[], threshold=[], value=[]),
     "forests.ratio.trees[0].left"),
]


@pytest.mark.parametrize("name, edit, field", FOREST_HOSTILE, ids=[h[0] for h in FOREST_HOSTILE])
def test_a_damaged_stored_forest_is_one_error_naming_the_node(tmp_path, name, edit, field):
    from lightning_edge.latency.model import LatencyModel

    p = tmp_path / f"{name}.json"
    p.write_text(_text(forest_doc(edit)))
    with pytest.raises(ValueError) as info:
        LatencyModel.load(p)
    msg = str(info.value)
    assert str(p) in msg and field in msg and "expected" in msg and "\n" not in msg, msg


def test_forests_without_their_feature_names_or_for_other_features_are_refused_or_retrained(tmp_path):
    from lightning_edge.latency.model import LatencyModel

    d = json.loads(_forest_doc())
    del d["features"]
    p = tmp_path / "nofeat.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="features"):
        LatencyModel.load(p)
    d = json.loads(_forest_doc())
    d["features"] = d["features"][:-1]            # another version's features: the forests cannot be used
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="n_features"):
        LatencyModel.load(p)
    d = json.loads(_forest_doc())
    d["features"] = ["x"] * len(d["features"])    # as many, other names: trained again from the samples
    p.write_text(json.dumps(d))
    assert LatencyModel.load(p).kind == "mixed"
