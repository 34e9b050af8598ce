"""describe: layers, their units (a module, or the ops of any other layer), the convolution backend PyTorch picks,
and the features the statistical models learn from."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from lightning_edge.latency.features import (
    FEATURE_NAMES,
    OP_KEYS,
    OPS,
    conv_backend,
    describe,
    unit_features,
    units_of,
)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(8, 8, 1), nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = torch.cat([self.a(x), self.b(x)], 1)
        return y + y.transpose(2, 3).contiguous()


def test_modules_are_one_unit_and_everything_else_is_its_ops():
    layers, containers = describe(nn.Sequential(Block(), nn.ReLU(inplace=True)), torch.empty(2, 8, 6, 6, device="meta"))
    by = {d.name: d for d in layers}
    assert units_of(by["0.a"]) == [by["0.a"]] and by["0.a"].cls == "conv1x1"
    assert [u.op for u in units_of(by["0"])] == ["cat", "copy_t", "add"]      # a non-contiguous copy is a gather
    (relu,) = units_of(by["1"])
    assert relu.op == "relu_" and relu.n_out == 2 * 16 * 6 * 6
    assert containers == {"": 1}


def test_every_op_key_has_a_class_and_every_table_entry_a_known_key():
    assert set(OP_KEYS) == {k for k, _c in OPS.values()}
    assert {c for _k, c in OPS.values()} <= {"eltwise", "norm", "pool", "embedding", "matmul"}


def test_the_backend_is_what_pytorch_picks_at_one_thread():
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert conv_backend(8, 64, 16, 16, 64, 1, 1, 1, (0, 0), 1) == "slow2d"    # 1x1: one GEMM per image
        assert conv_backend(8, 64, 16, 16, 64, 3, 3, 1, (1, 1), 1) == "mkldnn"
        assert conv_backend(1, 64, 8, 8, 64, 3, 3, 1, (1, 1), 1) == "slow2d"      # batch 1, small map
        assert conv_backend(1, 64, 8, 8, 64, 3, 3, 1, (1, 1), 64) == "mkldnn"     # depthwise
    finally:
        torch.set_num_threads(prev)


def test_unit_features_are_finite_and_named():
    layers, _ = describe(nn.Conv2d(3, 16, 5, 2, 2), torch.empty(4, 3, 32, 32, device="meta"))
    (u,) = units_of(layers[0])
    x = unit_features(u, peak_flops=1e11, bandwidth=1e10, t_ref=1e-4, l2=1 << 20, llc=32 << 20)
    assert len(x) == len(FEATURE_NAMES) and all(math.isfinite(v) for v in x)
    assert x[FEATURE_NAMES.index("cls=conv")] == 1.0 and x[FEATURE_NAMES.index("kh")] == pytest.approx(math.log1p(5))
