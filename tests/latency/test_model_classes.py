"""One class per latency model behind the abstract ``LatencyModel``: every kind is built, fitted and loaded as its own
subclass, the base class (and the families between it and the kinds) cannot be built, a saved file of every kind
loads as its class and predicts exactly what the saved model predicted, and no kind is told apart by comparing its
name in ``model.py`` (what a kind does differently is a method it overrides)."""

from __future__ import annotations

import abc
import ast
import inspect
import json
from pathlib import Path

import pytest
import torch

from lightning_edge.latency.features import describe
from lightning_edge.latency.model import (
    KINDS,
    ForestLatencyModel,
    FormulaLatencyModel,
    LatencyModel,
    LatencyModelError,
    MixedLatencyModel,
    RefinedRooflineLatencyModel,
    RooflineLatencyModel,
    StatisticalLatencyModel,
    StepwiseLatencyModel,
    UnitLatencyModel,
    model_class,
)
from tests.latency.test_model import META, Net, stepwise_model, training_samples
from tests.latency.test_model_file import mixed_doc, pool_doc, roofline_doc

CLASSES = {"roofline": RooflineLatencyModel, "refined": RefinedRooflineLatencyModel,
           "statistical": StatisticalLatencyModel, "mixed": MixedLatencyModel, "stepwise": StepwiseLatencyModel}
TILE = {"tile_m": 6, "tile_n": 16, "units": 2}

pytestmark = pytest.mark.filterwarnings("ignore:LatencyModel used outside")   # the forests' few training units


def build(kind: str) -> LatencyModel:
    """A model of ``kind`` through the constructor every kind shares, ``LatencyModel(kind, ...)``."""
    if kind == "stepwise":
        return stepwise_model()
    samples = training_samples() if kind in ("statistical", "mixed") else None
    return LatencyModel(kind, META, 5e10, 1e10, tile=TILE, samples=samples, container_s=1e-6, module_s=2e-6)


@pytest.fixture(scope="module")
def models() -> dict:
    return {k: build(k) for k in KINDS}


def rows(lm: LatencyModel) -> list[tuple]:
    torch.manual_seed(0)
    pred = lm.predict(Net().eval(), torch.randn(2, 3, 16, 16), scale=0.5)
    return [(la.name, la.time_s, la.how) for la in pred.layers] + [tuple(pred.notes)]


def test_every_kind_is_its_own_subclass_of_the_abstract_base(models):
    assert KINDS == ("roofline", "refined", "statistical", "mixed", "stepwise")
    assert inspect.isabstract(LatencyModel) and issubclass(LatencyModel, abc.ABC)
    for kind in KINDS:
        lm = models[kind]
        assert type(lm) is CLASSES[kind] is model_class(kind), kind
        assert isinstance(lm, LatencyModel) and not inspect.isabstract(type(lm))
        assert lm.kind == type(lm).kind == kind and "kind" not in vars(lm)   # the class says it, not the instance
    assert len(set(CLASSES.values())) == len(KINDS)
    assert issubclass(RooflineLatencyModel, FormulaLatencyModel) and issubclass(RefinedRooflineLatencyModel,
                                                                                FormulaLatencyModel)
    assert issubclass(StepwiseLatencyModel, UnitLatencyModel) and not issubclass(StepwiseLatencyModel,
                                                                                 ForestLatencyModel)
    assert issubclass(StatisticalLatencyModel, ForestLatencyModel) and issubclass(MixedLatencyModel,
                                                                                  ForestLatencyModel)
    assert not issubclass(MixedLatencyModel, StatisticalLatencyModel)


def test_the_base_and_the_families_cannot_be_built():
    with pytest.raises(TypeError, match="abstract"):
        LatencyModel(META, 5e10, 1e10)                        # no kind: the base class itself
    for family in (FormulaLatencyModel, UnitLatencyModel, ForestLatencyModel):
        assert inspect.isabstract(family)
        with pytest.raises(TypeError, match="abstract"):
            family(META, 5e10, 1e10, samples=training_samples())

    class NoPrediction(LatencyModel):                          # a kind that says nothing of how it predicts
        kind = "none"

    with pytest.raises(TypeError, match="abstract"):
        NoPrediction(META, 5e10, 1e10)
    with pytest.raises(ValueError, match="expected one of"):
        model_class("forest")


def test_a_subclass_is_built_from_its_own_arguments_as_the_kind_is(models):
    """``RooflineLatencyModel(meta, ...)`` and ``LatencyModel("roofline", meta, ...)`` are the same model; a
    subclass's requirements hold however it is built."""
    assert rows(RooflineLatencyModel(META, 5e10, 1e10, tile=TILE, container_s=1e-6, module_s=2e-6)) == \
        rows(models["roofline"])
    sw = models["stepwise"]
    direct = StepwiseLatencyModel(sw.meta, sw.peak_flops, sw.bandwidth, stepwise=sw.stepwise,
                                  container_s=sw.container_s, module_s=sw.module_s)
    assert rows(direct) == rows(sw)
    assert type(LatencyModel(kind="refined", meta=META, peak_flops=5e10, bandwidth=1e10)) is \
        RefinedRooflineLatencyModel
    with pytest.raises(ValueError, match="needs at least one generated class function"):
        StepwiseLatencyModel(META, 5e10, 1e10)
    with pytest.raises(ValueError, match="mixed model needs measured units"):
        MixedLatencyModel(META, 5e10, 1e10)


def test_a_saved_model_of_every_kind_loads_as_its_class_and_predicts_exactly_the_same(tmp_path, models):
    for kind in KINDS:
        lm = models[kind]
        p = lm.save(tmp_path / f"{kind}.json")
        assert json.loads(p.read_text())["kind"] == kind            # the file format keeps its kind field
        for loader in (LatencyModel, CLASSES[kind]):
            back = loader.load(p)
            assert type(back) is CLASSES[kind], (kind, loader)
            assert rows(back) == rows(lm), kind                     # exactly: the same floats, the same words
            assert back.to_dict() == lm.to_dict()
    other = CLASSES["mixed"]
    with pytest.raises(LatencyModelError, match="holds a stepwise latency model"):
        other.load(tmp_path / "stepwise.json")


def test_hand_written_files_of_every_kind_load_as_their_class(tmp_path):
    """Files as the format defines them (a ``kind`` field, no class name), as earlier versions wrote them."""
    docs = {"roofline": roofline_doc(), "refined": roofline_doc(kind="refined", tile=TILE),
            "statistical": {**mixed_doc(), "kind": "statistical"}, "mixed": mixed_doc(), "stepwise": pool_doc()}
    for kind, doc in docs.items():
        p = tmp_path / f"{kind}.json"
        p.write_text(json.dumps(doc))
        lm = LatencyModel.load(p)
        assert type(lm) is CLASSES[kind] and lm.kind == kind
        assert lm.predict(Net().eval(), torch.randn(1, 3, 8, 8)).total_s > 0
    fc = next(d for d in describe(Net().eval(), torch.randn(1, 3, 8, 8))[0] if d.name == "fc")
    got = LatencyModel.load(tmp_path / "roofline.json").predict_layers([fc]).layers[0]
    assert got.time_s == max(fc.flops / 5e10, fc.bytes / 1e10) and got.how == "roofline max(f/P, D/B)"


def test_fit_and_with_samples_return_the_kinds_class(models):
    assert type(models["mixed"].with_samples(training_samples()[:2], kind="statistical")) is StatisticalLatencyModel
    assert type(models["stepwise"].with_samples(training_samples()[:2])) is StepwiseLatencyModel
    with pytest.raises(ValueError, match="expected one of"):
        LatencyModel.fit("forest", "cpu", budget_s=1)
    with pytest.raises(ValueError, match="fits a mixed model, not a stepwise one"):    # before measuring anything
        MixedLatencyModel.fit("stepwise", "cpu", budget_s=1)
    with pytest.raises(ValueError, match="cannot fit a stepwise model"):
        ForestLatencyModel.fit(budget_s=1)


def _kind_switches(tree: ast.AST) -> list[str]:
    """Comparisons of a kind (``kind`` or ``x.kind``) with a kind's name (a string, or strings in a tuple)."""
    def is_kind(n: ast.AST) -> bool:
        return (isinstance(n, ast.Name) and n.id in ("kind", "k")) or (isinstance(n, ast.Attribute)
                                                                       and n.attr == "kind")

    def is_name(n: ast.AST) -> bool:
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
            return any(is_name(e) for e in n.elts)
        return isinstance(n, ast.Constant) and n.value in KINDS

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(is_kind(s) for s in sides) and any(is_name(s) for s in sides):
                out.append(f"line {node.lineno}: {ast.unparse(node) if hasattr(ast, 'unparse') else ''}")
    return out


def test_no_kind_is_told_apart_by_its_name_in_the_model_module():
    src = Path(inspect.getfile(LatencyModel)).read_text()
    assert _kind_switches(ast.parse(src)) == []
    # the check finds what the one-class design did
    assert len(_kind_switches(ast.parse('if self.kind == "mixed" or kind in ("statistical", "mixed"): pass'))) == 2
