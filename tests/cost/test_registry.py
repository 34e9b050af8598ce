"""The formula registry as torch's: keyed by op (namespace kept), unknown names rejected, per-call overrides,
and a formula registered for a custom op defined with ``torch.library``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lightning_edge import analyze, register_formula
from lightning_edge.cost.formulas import REGISTRY, OpCost, lookup, op_key

# defined with torch.library.Library, which every supported torch has (torch.library.custom_op is 2.4+)
_LIB = torch.library.Library("le_test", "DEF")
_LIB.define("mm(Tensor a, Tensor b) -> Tensor")
_LIB.impl("mm", lambda a, b: a @ b, "CompositeExplicitAutograd")
_LIB.impl("mm", lambda a, b: a.new_empty(a.shape[0], b.shape[1]), "Meta")


class UsesCustomMM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 5))

    def forward(self, x):
        return torch.ops.le_test.mm(x, self.w)


def mm_formula(a, b, out=None, **kwargs) -> OpCost:
    m, k = a.shape
    n = b.shape[1]
    return OpCost(flops=2 * m * k * n, macs=m * k * n)


@pytest.fixture
def clean_registry():
    before = dict(REGISTRY)
    yield
    REGISTRY.clear()
    REGISTRY.update(before)


def test_a_custom_op_is_not_counted_with_atens_formula_of_the_same_name():
    cost = analyze(UsesCustomMM(), torch.randn(4, 6))
    (layer,) = cost.layers
    assert layer.ops == {"le_test::mm": 1}  # the namespace is kept
    assert layer.forward.flops == 0  # not aten::mm's 2*4*6*5
    assert cost.uncounted == {"le_test::mm": 1}


def test_per_call_formulas_count_it_for_that_analysis_only():
    cost = analyze(UsesCustomMM(), torch.randn(4, 6), formulas={torch.ops.le_test.mm: mm_formula})
    assert cost.layers[0].forward.macs == 4 * 6 * 5  # = 120
    assert not cost.uncounted
    assert analyze(UsesCustomMM(), torch.randn(4, 6)).uncounted == {"le_test::mm": 1}  # nothing left behind


def test_a_registered_formula_counts_the_custom_op(clean_registry):
    register_formula(torch.ops.le_test.mm, mm_formula)
    cost = analyze(UsesCustomMM(), torch.randn(4, 6))
    assert cost.layers[0].forward.flops == 2 * 4 * 6 * 5  # = 240
    # bytes by the generic rule: both inputs read, the result written (fp32)
    assert cost.layers[0].forward.bytes_read == (4 * 6 + 6 * 5) * 4  # = 216
    with pytest.raises(ValueError, match="already has a formula.*override=True"):
        register_formula("le_test::mm", mm_formula)
    register_formula("le_test::mm", lambda *a, out=None, **k: OpCost(flops=1), override=True)
    assert analyze(UsesCustomMM(), torch.randn(4, 6)).flops == 1


def test_an_overload_formula_is_more_specific_than_the_packets(clean_registry):
    register_formula(torch.ops.le_test.mm, mm_formula)

    @register_formula(torch.ops.le_test.mm.default)
    def default_only(a, b, out=None, **kwargs) -> OpCost:
        return OpCost(flops=7)

    assert lookup(torch.ops.le_test.mm.default) is default_only
    assert lookup("le_test::mm") is mm_formula
    assert analyze(UsesCustomMM(), torch.randn(4, 6)).flops == 7


@pytest.mark.parametrize("bad, match", [("mmm_typo", r"no op aten::mmm_typo"), ("aten::mm.no_such_overload",
                                        r"no op aten::mm\.no_such_overload"), ("nolib::mm", "no op nolib::mm"),
                                       (42, "torch.ops.<namespace>")])
def test_unknown_ops_are_rejected_at_registration(bad, match, clean_registry):
    with pytest.raises(ValueError, match=match):
        register_formula(bad, mm_formula)


def test_keys_keep_the_namespace_and_the_builtins_are_atens():
    assert op_key(torch.ops.aten.mm) == op_key("mm") == "aten::mm"
    assert op_key(torch.ops.aten.mm.default) == "aten::mm.default"
    assert op_key(torch.ops.le_test.mm) == "le_test::mm"
    assert lookup("le_test::mm") is None and lookup("mm") is lookup(torch.ops.aten.mm.default) is not None
    assert all(k.startswith("aten::") for k in REGISTRY if not k.startswith("le_test::"))
