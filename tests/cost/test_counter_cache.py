"""The meta-kernel shape cache is shared by every analysis in the process (issue 17: the whole-fit overhead), and
never changes a result: a second analysis gives the same cost, also after the default dtype changed."""

from __future__ import annotations

import torch
from torch import nn

import lightning_edge
from lightning_edge.cost import counter


class _Arange(nn.Module):
    def forward(self, x):
        return x + torch.arange(x.shape[-1])  # a factory op without dtype=: follows the default dtype


def test_a_second_analysis_is_identical_and_hits_the_cache():
    counter._SHAPES.clear()
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.LazyLinear(4))
    model(torch.randn(2, 3, 8, 8))
    first = lightning_edge.analyze(model, torch.randn(2, 3, 8, 8), training=True)
    filled = len(counter._SHAPES)
    assert filled > 0
    second = lightning_edge.analyze(model, torch.randn(2, 3, 8, 8), training=True)
    assert len(counter._SHAPES) == filled  # every op came from the cache
    assert first.to_json() == second.to_json()


def test_the_cache_key_follows_the_default_dtype():
    counter._SHAPES.clear()
    m = _Arange()
    a = lightning_edge.analyze(m, torch.randn(2, 5, dtype=torch.float64))
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        b = lightning_edge.analyze(m, torch.randn(2, 5, dtype=torch.float64))
    finally:
        torch.set_default_dtype(prev)
    # arange is int64 either way here, but the add's output dtype and the bytes moved must match a fresh analysis
    counter._SHAPES.clear()
    torch.set_default_dtype(torch.float64)
    try:
        fresh = lightning_edge.analyze(m, torch.randn(2, 5, dtype=torch.float64))
    finally:
        torch.set_default_dtype(prev)
    assert b.to_json() == fresh.to_json()
    assert a.total.bytes == fresh.total.bytes
