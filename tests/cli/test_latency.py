"""``lightning-edge latency fit | predict | evaluate``."""

from __future__ import annotations

import json

import pytest

from lightning_edge.cli import main
from tests.latency.test_model import stepwise_model


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return stepwise_model().save(tmp_path_factory.mktemp("lat") / "sw.json")


pytestmark = pytest.mark.filterwarnings("ignore:LatencyModel used outside")


def test_predict_prints_an_estimated_table_and_writes_json(saved, tmp_path, capsys):
    out = tmp_path / "pred.json"
    assert main(["latency", "predict", str(saved), "zoo:resnet18", "--image-size", "32", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ESTIMATED by the stepwise model" in text and "layer1.0.conv1" in text and "TOTAL" in text
    doc = json.loads(out.read_text())
    assert doc["label"] == "estimated" and doc["latency_model"] == "stepwise" and doc["total_s"] > 0


def test_evaluate_measures_and_compares(saved, capsys):
    assert main(["latency", "evaluate", str(saved), "zoo:mobilenet_v2", "--image-size", "32", "--repeats", "2"]) == 0
    text = capsys.readouterr().out
    assert "measured" in text and "stepwise estimate" in text and "per-layer RMSPE" in text


def test_json_dash_is_the_same_in_predict_and_evaluate(saved, capsys):
    """issue 16: ``--json [PATH|-]`` in every command; with '-' stdout holds only the JSON."""
    assert main(["latency", "predict", str(saved), "zoo:resnet18", "--image-size", "32", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] == "estimated"
    assert main(["latency", "evaluate", str(saved), "zoo:mobilenet_v2", "--image-size", "32", "--repeats", "2",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["measured_s"] > 0 and doc["estimated_s"] > 0 and doc["kind"] == "stepwise"


def test_bad_arguments_are_one_line_errors(saved, tmp_path, capsys):
    assert main(["latency", "fit", "--out", str(tmp_path / "m.json"), "--layers-json", "x.json"]) == 1
    assert "--layers-json needs --model" in capsys.readouterr().err
    assert main(["latency", "predict", str(tmp_path / "missing.json"), "zoo:resnet18"]) == 1
    assert "no such latency model file" in capsys.readouterr().err
    assert main(["latency", "predict", str(saved), "zoo:bert_base", "--image-size", "32"]) == 1
    assert "--image-size applies to image models" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["latency", "fit", "--kind", "forest", "--out", "m.json"])


def test_fitting_a_forest_without_scikit_learn_is_one_line(tmp_path, capsys, monkeypatch):
    import sys

    for name in [n for n in sys.modules if n == "sklearn" or n.startswith("sklearn.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sklearn", None)      # import sklearn raises ImportError
    assert main(["latency", "fit", "--kind", "mixed", "--budget-s", "1", "--out", str(tmp_path / "m.json")]) == 1
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "scikit-learn" in lines[0] and "Traceback" not in err, err
    assert not (tmp_path / "m.json").exists()


def test_the_kind_choices_are_the_registered_models():
    """``latency fit --kind`` offers exactly the model classes registered in latency/model.py (the command keeps its
    list literal so that ``--help`` loads no torch)."""
    import argparse

    from lightning_edge.cli import latency as cmd
    from lightning_edge.latency.model import KINDS

    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    kind = next(a for a in sub.choices["fit"]._actions if a.dest == "kind")
    assert sorted(kind.choices) == sorted(KINDS)
