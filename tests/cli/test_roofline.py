"""``lightning-edge roofline --model SPEC``: the same model-factory loader as ``analyze`` (issue 25, item 6)."""

from __future__ import annotations

import sys

import pytest

from lightning_edge.cli import main

FACTORIES = """
import sys
import torch
from torch import nn
def boom():
    raise RuntimeError("no weights here")
def quits():
    sys.exit(3)
def nothing():
    return None
def pair(batch_size=1):
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()), torch.empty(batch_size, 3, 16, 16)
"""


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "rfacs.py").write_text(FACTORIES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("rfacs", None)


def _one_line_error(capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 1 and "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("lightning-edge roofline: error: "), err
    return lines[0]


@pytest.mark.parametrize("spec, words", [
    ("../x:build", ["../x:build", "zoo:NAME", "module.path:factory"]),
    ("sys:exit", ["sys:exit", "raised SystemExit"]),
    ("rfacs:quits", ["rfacs:quits", "raised SystemExit"]),
    ("rfacs:boom", ["rfacs:boom", "raised RuntimeError", "no weights here"]),
    ("rfacs:missing", ["rfacs", "no attribute 'missing'"]),
    ("rfacs:nothing", ["rfacs:nothing", "returned None", "torch.nn.Module"]),
])
def test_model_specs_are_one_line_errors(factories, capsys, spec, words):
    msg = _one_line_error(capsys, ["roofline", "--profile", "orin-agx-pagoda", "--model", spec])
    assert all(w in msg for w in words), msg


def test_a_factory_taking_the_batch_size_still_works(factories, capsys):
    assert main(["roofline", "--profile", "orin-agx-pagoda", "--model", "rfacs:pair", "--batch-size", "2"]) == 0
    assert "model rfacs:pair: 2 layers with work" in capsys.readouterr().out
