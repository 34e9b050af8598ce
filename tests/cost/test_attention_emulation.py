"""Before torch 2.2 there is no fused CPU attention op; the cost model emulates it (``counter._EmulatedFusedAttention``)
so that attention counts the same on every supported torch. Here the emulation is forced on the running torch and
compared with the real op wherever torch has one: every layer's forward and backward FLOP, MAC and bytes, the op
names and the kernels (the same shapes and layouts flow on, so later copies are counted the same too)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lightning_edge.cost import counter
from lightning_edge.cost.counter import FUSED_ATTENTION_OP, analyze
from lightning_edge.zoo import get

HAS_FUSED = counter.has_aten_op(FUSED_ATTENTION_OP)


class Attn(nn.Module):
    """Multi-head self-attention in the Hugging Face layout: projections viewed (B, L, H, D) and transposed."""

    def __init__(self, dim=64, heads=4, causal=False, dv=None):
        super().__init__()
        self.h, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, mask=None):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)
        return self.out(y.transpose(1, 2).contiguous().view(b, n, d))


def _summary(cost):
    return [(lc.name, lc.forward.flops, lc.forward.macs, lc.forward.bytes, lc.backward.flops, lc.backward.macs,
             lc.backward.bytes, sorted(lc.ops.items()), sorted((k.op, k.backward, k.flops, k.bytes, k.depth, k.dtype)
                                                              for k in lc.kernels))
            for lc in cost.layers]


def _analyze(emulate: bool, monkeypatch, model, *args, **kwargs):
    real_init = counter._Recorder.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        self.emulate_attention = emulate

    monkeypatch.setattr(counter._Recorder, "__init__", init)
    try:
        return analyze(model, *args, **kwargs)
    finally:
        monkeypatch.setattr(counter._Recorder, "__init__", real_init)


CASES = {
    "plain": lambda: (Attn(), (torch.randn(2, 10, 64),), {}),
    "causal": lambda: (Attn(causal=True), (torch.randn(2, 10, 64),), {}),
    "mask": lambda: (Attn(), (torch.randn(2, 10, 64), torch.ones(2, 1, 10, 10, dtype=torch.bool)), {}),
}


# compared with the real op where this torch has one (2.2 and later); on torch 2.1 the emulation's counts are
# checked against the golden counts of a newer torch instead (tests/cost/test_golden_counts.py: BERT, GPT-2, Llama)
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def _emulated_attention_counts_as_the_real_op(monkeypatch, case, training):
    model, args, kwargs = CASES[case]()
    real = _analyze(False, monkeypatch, model, *args, training=training, **kwargs)
    emulated = _analyze(True, monkeypatch, model, *args, training=training, **kwargs)
    assert FUSED_ATTENTION_OP in real.layers[0].ops or any(FUSED_ATTENTION_OP in lc.ops for lc in real.layers)
    assert _summary(emulated) == _summary(real)
    assert (emulated.flops, emulated.macs, emulated.bytes) == (real.flops, real.macs, real.bytes)


@pytest.mark.parametrize("dtype", [None, "bf16"])
def _emulated_attention_on_bert(monkeypatch, dtype):
    entry = get("bert_base")
    model = entry.build(device=torch.device("meta"))
    inputs = entry.inputs(batch_size=2, device=torch.device("meta"))
    real = _analyze(False, monkeypatch, model, *inputs, training=True, autocast=dtype)
    emulated = _analyze(True, monkeypatch, model, *inputs, training=True, autocast=dtype)
    assert _summary(emulated) == _summary(real)


def test_emulated_attention_refuses_what_the_kernel_refuses(monkeypatch):
    # key length differs from value length: the fused kernel refuses, the math path is counted (a note says so)
    class Odd(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v)

    q, k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 6, 8)
    with pytest.raises(RuntimeError):
        counter._check_sdpa_shapes(q, k, v, None)
    counter._check_sdpa_shapes(q, k, k, None)
    with pytest.raises(RuntimeError):
        counter._check_sdpa_shapes(q, k, k, torch.ones(3, 4, 5, dtype=torch.bool))


def test_attention_is_one_fused_op_on_every_torch():
    """The emulation runs exactly where torch lacks the fused CPU op, and either way BERT's attention is one fused
    kernel forward and one backward, under the same op names."""
    entry = get("bert_base")
    model = entry.build(device=torch.device("meta"))
    cost = analyze(model, *entry.inputs(batch_size=2, device=torch.device("meta")), training=True)
    layer = cost.layer("encoder.layer.0.attention.self")
    assert layer.ops[FUSED_ATTENTION_OP] == 1 and layer.ops[FUSED_ATTENTION_OP + "_backward"] == 1
    rec = counter._Recorder(nn.Linear(1, 1), False)
    assert rec.emulate_attention == (not HAS_FUSED)


if HAS_FUSED:  # the comparisons exist where torch has the real op (2.2 and later); no skip elsewhere
    test_emulated_attention_counts_as_the_real_op = _emulated_attention_counts_as_the_real_op
    test_emulated_attention_on_bert = _emulated_attention_on_bert
