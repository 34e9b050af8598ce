"""lightning-edge analyze: zoo models, user factories, JSON output and clear errors."""

import json
import subprocess
import sys
import textwrap

import pytest

from lightning_edge.cli import main


def test_analyze_zoo_model(capsys, tmp_path):
    out = tmp_path / "c.json"
    assert main(["analyze", "zoo:resnet18", "--batch-size", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "layer1.0.conv1" in text and "TOTAL" in text and "estimated" in text
    data = json.loads(out.read_text())
    assert data["inputs"] == [[2, 3, 224, 224]]
    assert data["layers"][0]["name"] == "conv1"


def test_analyze_training_fp16_fold(capsys):
    assert main(["analyze", "zoo:mobilenet_v2", "--training", "--dtype", "fp16", "--top", "5"]) == 0
    assert "training" in capsys.readouterr().out
    assert main(["analyze", "zoo:resnet18", "--fold-bn", "--sort", "flops", "--top", "3"]) == 0
    assert "folded" in capsys.readouterr().out


def test_analyze_user_factory(tmp_path, capsys, monkeypatch):
    (tmp_path / "mymodels.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn
        def build():
            return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
        def build_with_inputs():
            return build(), torch.randn(1, 3, 16, 16)
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["analyze", "mymodels:build", "--input-shape", "3,16,16", "-b", "4"]) == 0
    assert "0" in capsys.readouterr().out
    assert main(["analyze", "mymodels:build_with_inputs"]) == 0
    # no shapes for a bare model: a clear error, exit 1
    assert main(["analyze", "mymodels:build"]) == 1
    assert "--input-shape" in capsys.readouterr().err


def test_analyze_bad_names(capsys):
    assert main(["analyze", "zoo:resnet1000"]) == 1
    assert "resnet18" in capsys.readouterr().err  # lists what exists
    assert main(["analyze", "not_a_spec"]) == 1
    assert "zoo:NAME" in capsys.readouterr().err
    assert main(["analyze", "zoo:resnet18", "--batch-size", "0"]) == 1


def test_console_script_runs():
    r = subprocess.run([sys.executable, "-m", "lightning_edge", "analyze", "zoo:lstm", "--seq-len", "8"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "GFLOP" in r.stdout


@pytest.mark.parametrize("argv", [["--help"], ["analyze", "--help"]])
def test_help(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0


# ---------------------------------------------------------------- one-line errors, never a traceback (issue 15)
def _one_line_error(capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc != 0 and "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "error:" in lines[0], err
    return lines[0]


@pytest.mark.parametrize("n", ["0", "-3"])
def test_seq_len_below_one_is_a_one_line_error(capsys, n):
    msg = _one_line_error(capsys, ["analyze", "zoo:bert_base", "--seq-len", n])
    assert "--seq-len" in msg and ">= 1" in msg


def test_a_factory_that_returns_no_module(tmp_path, capsys, monkeypatch):
    (tmp_path / "notmodels.py").write_text(textwrap.dedent("""
        def build():
            return {"weights": [1, 2, 3]}
        def build_pair():
            return "resnet", (1, 2)
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    msg = _one_line_error(capsys, ["analyze", "notmodels:build", "--input-shape", "3,16,16"])
    assert "notmodels:build returned a dict" in msg and "torch.nn.Module" in msg
    msg = _one_line_error(capsys, ["analyze", "notmodels:build_pair"])
    assert "returned a str" in msg and "torch.nn.Module" in msg


def test_a_model_that_fails_on_its_inputs_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    (tmp_path / "shapes.py").write_text(textwrap.dedent("""
        from torch import nn
        def build():
            return nn.Linear(16, 4)
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    msg = _one_line_error(capsys, ["analyze", "shapes:build", "--input-shape", "3,15"])  # Linear wants 16
    assert "shapes:build" in msg and "--input-shape" in msg


def test_input_shape_for_a_zoo_model_is_not_silently_ignored(capsys):
    msg = _one_line_error(capsys, ["analyze", "zoo:resnet18", "--input-shape", "3,64,64"])
    assert "--input-shape" in msg and "zoo" in msg
    msg = _one_line_error(capsys, ["analyze", "zoo:resnet18", "--input-dtype", "float16"])
    assert "--input-dtype" in msg


def test_input_shape_with_a_factory_that_returns_inputs_is_not_silently_ignored(tmp_path, capsys, monkeypatch):
    (tmp_path / "withinputs.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn
        def build():
            return nn.Linear(16, 4), torch.randn(2, 16)
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    msg = _one_line_error(capsys, ["analyze", "withinputs:build", "--input-shape", "3,16,16"])
    assert "--input-shape" in msg and "its own example inputs" in msg


def test_a_profile_json_of_random_bytes_names_the_file(tmp_path, capsys):
    bad = tmp_path / "board.json"
    bad.write_bytes(bytes(range(256)) * 3)
    msg = _one_line_error(capsys, ["roofline", "--profile", str(bad)])
    assert str(bad) in msg


def test_json_dash_prints_only_the_json_to_stdout(capsys):
    """issue 16: ``--json [PATH|-]`` is the same in every command (it used to write a file named '-')."""
    import json

    from lightning_edge.cli import main

    assert main(["analyze", "zoo:resnet18", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["model"] == "ResNet" and doc["layers"]
    assert main(["roofline", "--profile", "orin-agx-pagoda", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["device"] and doc["modes"][0]["time_balance"] > 0


def test_json_to_a_folder_that_does_not_exist_is_a_one_line_error(tmp_path, capsys):
    from lightning_edge.cli import main

    dest = tmp_path / "missing" / "x.json"
    assert main(["analyze", "zoo:resnet18", "--json", str(dest)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lightning-edge analyze: error: --json ") and "existing, writable folder" in err


# ---------------------------------------------------------------- model factory specs (issue 25, item 6)
FACTORIES = """
import sys
from torch import nn
def boom():
    raise RuntimeError("no weights here")
def quits():
    sys.exit(3)
def imports_missing():
    import not_a_real_module_xyz
def needs_an_argument(n):
    return nn.Linear(n, n)
NOT_CALLABLE = 3
def returns_none():
    return None
"""


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "facs.py").write_text(FACTORIES)
    (tmp_path / "brokendep.py").write_text("import not_a_real_dep_xyz\n")
    (tmp_path / "exits_on_import.py").write_text("raise SystemExit(0)\n")
    (tmp_path / "syntax_error.py").write_text("def f(:\n")
    (tmp_path / "raises_on_import.py").write_text("raise RuntimeError('configure me first')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for m in ("facs", "brokendep", "exits_on_import", "syntax_error", "raises_on_import"):
        sys.modules.pop(m, None)


@pytest.mark.parametrize("spec", ["../x:build", "./facs:boom", "/abs/facs:boom", ":build", "facs:", "facs:a.b",
                                  "a b:c", "facs.py:boom", "zoo"])
def test_a_malformed_spec_says_the_expected_forms(factories, capsys, spec):
    msg = _one_line_error(capsys, ["analyze", spec, "--input-shape", "3"])
    assert spec in msg and "zoo:NAME" in msg and "module.path:factory" in msg, msg


@pytest.mark.parametrize("spec, words", [
    ("sys:exit", ["sys:exit", "SystemExit"]),
    ("facs:quits", ["facs:quits", "SystemExit", "3"]),
    ("facs:boom", ["facs:boom", "RuntimeError", "no weights here", "facs.py"]),
    ("facs:imports_missing", ["facs:imports_missing", "ModuleNotFoundError", "not_a_real_module_xyz"]),
    ("facs:needs_an_argument", ["facs:needs_an_argument", "TypeError", "argument"]),
    ("os.path:join", ["os.path:join", "TypeError"]),
])
def test_a_factory_that_raises_is_one_line_naming_it_and_the_exception(factories, capsys, spec, words):
    msg = _one_line_error(capsys, ["analyze", spec, "--input-shape", "3"])
    assert "raised" in msg and all(w in msg for w in words), msg


@pytest.mark.parametrize("spec, words", [
    ("facs:NOT_CALLABLE", ["facs:NOT_CALLABLE", "int", "not callable"]),
    ("facs:returns_none", ["facs:returns_none", "returned None", "torch.nn.Module"]),
    ("brokendep:f", ["brokendep", "not_a_real_dep_xyz"]),
    ("exits_on_import:f", ["exits_on_import", "SystemExit"]),
    ("syntax_error:f", ["syntax_error", "SyntaxError"]),
    ("raises_on_import:f", ["raises_on_import", "RuntimeError", "configure me first"]),
])
def test_a_module_or_factory_that_is_not_usable_is_one_line(factories, capsys, spec, words):
    msg = _one_line_error(capsys, ["analyze", spec, "--input-shape", "3"])
    assert all(w in msg for w in words), msg


def test_an_import_error_inside_the_module_is_not_called_a_missing_module(factories, capsys):
    msg = _one_line_error(capsys, ["analyze", "brokendep:f", "--input-shape", "3"])
    assert "run from the folder that holds it" not in msg and "not_a_real_dep_xyz" in msg, msg


def test_latency_predict_takes_specs_through_the_same_loader(factories, capsys, tmp_path):
    from tests.latency.test_model import stepwise_model

    saved = stepwise_model().save(tmp_path / "sw.json")
    for spec in ("sys:exit", "../x:build"):
        rc = main(["latency", "predict", str(saved), spec, "--input-shape", "3"])
        err = capsys.readouterr().err
        assert rc == 1 and len(err.strip().splitlines()) == 1 and spec in err, err


# ---------------------------------------------------------------- the first runs a user tries (issue 28, CLI)
HF_STYLE = """
import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 16)
        self.head = nn.Linear(16, 100)

    def forward(self, input_ids, attention_mask=None):
        h = self.emb(input_ids)
        if attention_mask is not None:
            h = h * attention_mask.unsqueeze(-1)
        return self.head(h)


def build():  # the usual Hugging Face form: the model and a dict of keyword inputs
    ids = torch.randint(0, 100, (2, 12))
    return TinyLM(), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def build_bs(batch_size=2):
    ids = torch.randint(0, 100, (batch_size, 12))
    return TinyLM(), {"input_ids": ids}


def model_only():
    return TinyLM()
"""


@pytest.fixture
def hf_style(tmp_path, monkeypatch):
    (tmp_path / "hfstyle.py").write_text(HF_STYLE)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("hfstyle", None)


def test_a_factory_returning_a_dict_of_keyword_inputs_is_analysed(hf_style, capsys):
    assert main(["analyze", "hfstyle:build", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["flops"] > 0


@pytest.mark.parametrize("spec", ["hfstyle:build", "hfstyle:build_bs"])
def test_batch_size_is_honoured_for_a_factory_with_inputs(hf_style, capsys, spec):
    """``-b 8`` was silently ignored when the factory returned its inputs, while the summary said "batch 8"."""
    assert main(["analyze", spec, "--json", "-"]) == 0
    two = json.loads(capsys.readouterr().out)["flops"]
    assert main(["analyze", spec, "-b", "8", "--json", "-"]) == 0
    eight = json.loads(capsys.readouterr().out)["flops"]
    assert eight == pytest.approx(4 * two, rel=1e-6)
    assert main(["analyze", spec, "-b", "8"]) == 0
    assert "batch 8" in capsys.readouterr().out


def test_a_language_model_given_a_float_input_shape_is_told_about_input_dtype(hf_style, capsys):
    assert main(["analyze", "hfstyle:model_only", "--input-shape", "32"]) == 1
    err = capsys.readouterr().err
    assert "--input-dtype long" in err and "Traceback" not in err


def test_the_json_destination_is_checked_before_any_work(capsys, tmp_path):
    dest = tmp_path / "missing" / "out.json"
    assert main(["analyze", "zoo:resnet18", "--json", str(dest)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "--json" in err and str(dest) in err  # no table first


def test_roofline_model_imports_from_the_current_folder_like_analyze(hf_style, capsys):
    assert main(["roofline", "--profile", "orin-agx-pagoda", "--model", "hfstyle:build"]) == 0
    assert "layers with work" in capsys.readouterr().out
