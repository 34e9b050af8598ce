"""``analyze`` on what real training code does (issue 17 item 1): activation checkpointing, ``torch.compile``,
grouped-query SDPA, autocast. Each failed (or miscounted without a note) before."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from lightning_edge._torchcompat import SDPA_TAKES_GQA
from lightning_edge.cost import analyze


class Checkpointed(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.a = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.1)
        self.bn = nn.BatchNorm1d(8)
        self.mode = mode

    def block(self, y):
        return self.bn(self.drop(self.a(y)))

    def forward(self, x):
        x = self.pre(x)
        if self.mode is None:
            return self.block(x)
        return checkpoint(self.block, x, use_reentrant=self.mode == "reentrant")


@pytest.mark.parametrize("mode", ["reentrant", "non-reentrant"])
def test_activation_checkpointing_counts_the_recomputed_forward_once_more(mode):
    # before (non-reentrant): "Tensor on device cpu is not on the expected device meta!"
    plain = analyze(Checkpointed(None), torch.randn(4, 8), training=True)
    ck = analyze(Checkpointed(mode), torch.randn(4, 8), training=True)
    block_fwd = sum(plain.layer(n).forward.flops for n in ("a", "drop", "bn"))
    assert ck.flops == plain.flops + block_fwd
    for n in ("a", "drop", "bn"):  # recomputed where it runs: in the backward, of the same layers
        assert ck.layer(n).forward.flops == plain.layer(n).forward.flops
        assert ck.layer(n).backward.flops == plain.layer(n).backward.flops + plain.layer(n).forward.flops
    assert ck.layer("pre").backward.flops == plain.layer("pre").backward.flops
    assert any("activation checkpointing" in n and "3 layer(s)" in n for n in ck.notes)
    assert not any("checkpointing" in n for n in plain.notes)


class Attention(nn.Module):
    def __init__(self, gqa):
        super().__init__()
        self.gqa = gqa

    def forward(self, q, k, v):
        if self.gqa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        g = q.shape[1] // k.shape[1]
        return F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1),
                                              is_causal=True)


@pytest.mark.skipif(not SDPA_TAKES_GQA, reason=f"torch {torch.__version__}'s scaled_dot_product_attention has no "
                    "enable_gqa (added in torch 2.5): no model can ask it for grouped-query attention")
def test_grouped_query_sdpa_is_one_fused_causal_kernel():
    # before: MAC 8,454,144 without GQA, 16,777,216 with it (math decomposition, causal pairs not halved), no note
    q, kv = torch.randn(1, 8, 128, 64), torch.randn(1, 2, 128, 64)
    plain = analyze(Attention(False), q, kv, kv)
    gqa = analyze(Attention(True), q, kv, kv)
    pairs = 128 * 129 // 2
    assert plain.macs == gqa.macs == 8 * pairs * (64 + 64) == 8_454_144
    assert any("grouped-query" in n for n in gqa.notes)
    # the repeat of the shared heads is not a cost of the fused kernel; training works too
    assert gqa.bytes < plain.bytes
    assert analyze(Attention(True), q.requires_grad_(), kv, kv, training=True).backward.macs > 0


def test_a_torch_compiled_submodule_is_one_opaque_layer():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = torch.compile(nn.Sequential(nn.Linear(8, 16), nn.ReLU()), backend="eager")
            self.head = nn.Linear(16, 2)

        def forward(self, x):
            return self.head(self.enc(x))

    cost = analyze(M(), torch.randn(4, 8), training=True)
    assert [lc.name for lc in cost.layers] == ["enc", "head"]
    assert cost.layer("enc").forward.macs == 4 * 8 * 16 and cost.layer("enc").backward.flops > 0
    assert cost.layer("enc").params == 8 * 16 + 16 and cost.params == 8 * 16 + 16 + 16 * 2 + 2  # its inside's
    assert any("torch.compile" in n and "opaque" in n for n in cost.notes)


def test_autocast_counts_matmuls_at_the_autocast_dtype():
    net = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
    x = torch.randn(512, 256)
    fp32 = analyze(net, x)
    amp = analyze(net, x, autocast="bf16")
    assert amp.flops == fp32.flops and amp.autocast == "bfloat16" and amp.dtype == "float32"
    # the second Linear writes a bf16 output (2 bytes an element) and its weights cast to bf16 (counted: they run);
    # it reads the bf16 activation instead of an fp32 one
    assert amp.layer("2").bytes_written == 512 * 256 * 2 + 2 * (256 * 256 + 256)
    assert amp.layer("2").ops["_to_copy"] == 2
    assert amp.layer("2").bytes_read < fp32.layer("2").bytes_read
    assert any("autocast bfloat16" in n for n in amp.notes)
    assert "autocast bfloat16" in amp.table() and amp.to_dict()["autocast"] == "bfloat16"




def test_a_tensor_made_inside_forward_without_device_joins_the_meta_run():
    # a causal mask built on the default device (no device=): before, "Tensor on device meta is not on the expected
    # device cpu!"
    class Causal(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)

        def forward(self, x):
            mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
            return self.layer(x, src_mask=mask, is_causal=True)

    cost = analyze(Causal(), torch.randn(2, 8, 16), training=True)
    assert cost.layer("layer.linear1").forward.macs == 2 * 8 * 16 * 32 and cost.backward.flops > 0
