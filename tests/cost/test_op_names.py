"""Every op name the cost model knows (formulas, free ops, op families) is an op of a supported torch.

The formula registry covers every supported torch at once: an op the running torch lacks is set aside, never an
error (``formulas.ABSENT_OPS``). So a misspelled name could hide; here every name is checked against the aten op
names of each torch the CI matrix runs (``data/aten_ops.json``, one list per torch, checked against the running
torch on each stack). After adding a torch to the matrix, or on a new torch: ``python tests/cost/test_op_names.py
--update`` on that stack adds its names."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from lightning_edge._torchcompat import TORCH_VERSION
from lightning_edge.cost import formulas, ops

DATA = Path(__file__).with_name("data") / "aten_ops.json"
THIS = f"{TORCH_VERSION[0]}.{TORCH_VERSION[1]}"


def running_names() -> set[str]:
    """The aten op names (overloads dropped) this torch registers."""
    return {n.split("::", 1)[1].split(".", 1)[0] for n in torch._C._dispatch_get_all_op_names()
            if n.startswith("aten::")}


def snapshot() -> dict[str, set[str]]:
    doc = json.loads(DATA.read_text())
    common = set(doc["common"])
    return {v: common | set(extra) for v, extra in doc["only"].items()}


def known_names() -> set[str]:
    """Every aten op name the cost model refers to."""
    return (set(formulas.BUILTIN_OPS) | set(formulas.FREE_OPS) | set(formulas.ELEMENTWISE_FLOP)
            | ops.CONV_OPS | ops.BATCH_NORM_OPS | ops.ATTENTION_OPS | ops.GEMM_OPS)


def unknown(names: set[str]) -> list[str]:
    supported = set().union(*snapshot().values())
    return sorted(names - supported)


def test_every_op_name_is_an_op_of_a_supported_torch():
    missing = unknown(known_names())
    assert not missing, (f"no supported torch ({', '.join(sorted(snapshot()))}) has these ops: {missing}; check "
                         "the spelling, or add the torch that has them to the CI matrix and its names here")


def test_a_misspelled_formula_name_is_caught(monkeypatch):
    monkeypatch.setattr(formulas, "BUILTIN_OPS", set(formulas.BUILTIN_OPS))
    before = dict(formulas.ABSENT_OPS)
    try:
        formulas.register("convolutoin")(lambda *a, out=None, **k: formulas.OpCost())  # no torch has it
        assert "convolutoin" in formulas.ABSENT_OPS  # no error at import on any torch ...
        assert unknown(known_names()) == ["convolutoin"]  # ... but this test names it
    finally:
        formulas.ABSENT_OPS.clear()
        formulas.ABSENT_OPS.update(before)


def test_the_snapshot_is_this_torchs_op_names():
    snap = snapshot()
    if THIS not in snap:
        pytest.skip(f"torch {torch.__version__} is not a stack of the CI matrix ({', '.join(sorted(snap))}): "
                    "run this file with --update on it to add its op names")
    have = running_names()
    assert snap[THIS] == have, (sorted(snap[THIS] - have)[:20], sorted(have - snap[THIS])[:20])


def test_formulas_for_ops_this_torch_lacks_are_set_aside():
    have = running_names()
    assert set(formulas.ABSENT_OPS) == {n for n in formulas.BUILTIN_OPS if n not in have}
    assert all(f"aten::{n}" in formulas.REGISTRY for n in formulas.BUILTIN_OPS if n in have)


def update() -> None:
    """Merge the running torch's op names into the snapshot (run once per stack of the matrix)."""
    per = snapshot() if DATA.exists() else {}
    per[THIS] = running_names()
    common = set.intersection(*per.values())
    doc = {"about": "aten op names (overloads dropped) per torch of the CI matrix: tests/cost/test_op_names.py",
           "common": sorted(common), "only": {v: sorted(names - common) for v, names in sorted(per.items())}}
    DATA.write_text(json.dumps(doc, indent=0) + "\n")
    print(f"{DATA}: torch {THIS} ({len(per[THIS])} names); versions {sorted(per)}")


if __name__ == "__main__":
    if "--update" in sys.argv:
        update()
