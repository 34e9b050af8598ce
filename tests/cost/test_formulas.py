"""Golden tests of the formula registry: the arithmetic is written beside every expected value."""

import pytest
import torch

from lightning_edge.cost.formulas import (
    ELEMENTWISE_FLOP,
    FREE_OPS,
    _causal_pairs,
    lookup,
    op_cost,
)

M = torch.device("meta")


def t(*shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device=M)


def cost(name, *args, out, **kwargs):
    flops, macs, read, written = op_cost(name, args, kwargs, out)
    return {"flops": flops, "macs": macs, "read": read, "written": written}


def test_mm():
    a, b, o = t(4, 6), t(6, 5), t(4, 5)
    c = cost("mm", a, b, out=o)
    assert c["macs"] == 4 * 6 * 5  # = 120
    assert c["flops"] == 2 * 4 * 6 * 5  # = 240
    assert c["read"] == (4 * 6 + 6 * 5) * 4  # = 216
    assert c["written"] == 4 * 5 * 4  # = 80


def test_addmm_adds_one_flop_per_output_for_the_bias():
    bias, a, b, o = t(5), t(4, 6), t(6, 5), t(4, 5)
    c = cost("addmm", bias, a, b, out=o)
    assert c["macs"] == 120
    assert c["flops"] == 2 * 120 + 4 * 5  # = 260
    assert c["read"] == (5 + 24 + 30) * 4  # bias + a + b = 236


def test_bmm_and_baddbmm():
    a, b, o = t(3, 4, 6), t(3, 6, 5), t(3, 4, 5)
    assert cost("bmm", a, b, out=o)["macs"] == 3 * 4 * 6 * 5  # = 360
    c = cost("baddbmm", t(3, 4, 5), a, b, out=o)
    assert c["flops"] == 2 * 360 + 3 * 4 * 5  # = 780


def test_conv2d_plain():
    # N=2, Cin=3, 8x8 -> Cout=4, 3x3 kernel, padding 1: out 2x4x8x8
    x, w, b, o = t(2, 3, 8, 8), t(4, 3, 3, 3), t(4), t(2, 4, 8, 8)
    c = cost("convolution", x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, out=o)
    assert c["macs"] == 2 * 4 * 8 * 8 * 3 * 3 * 3  # N*Cout*Hout*Wout*Cin*K*K = 13824
    assert c["flops"] == 2 * 13824 + 2 * 4 * 8 * 8  # + bias add per output = 28160
    assert c["read"] == (2 * 3 * 8 * 8 + 4 * 3 * 3 * 3 + 4) * 4  # input + weight + bias = 1972
    assert c["written"] == 2 * 4 * 8 * 8 * 4  # = 2048


def test_conv2d_strided_dilated_no_bias():
    # 1x3x9x9, 2 filters 3x3, stride 2, dilation 2, no padding: out = floor((9 - 2*2 - 1)/2) + 1 = 3
    x, w, o = t(1, 3, 9, 9), t(2, 3, 3, 3), t(1, 2, 3, 3)
    c = cost("convolution", x, w, None, [2, 2], [0, 0], [2, 2], False, [0, 0], 1, out=o)
    assert c["macs"] == 1 * 2 * 3 * 3 * 3 * 3 * 3  # = 486
    assert c["flops"] == 2 * 486  # no bias


def test_depthwise_conv():
    # depthwise: groups = C = 8, weight 8x1x3x3; out 1x8x4x4
    x, w, o = t(1, 8, 4, 4), t(8, 1, 3, 3), t(1, 8, 4, 4)
    c = cost("convolution", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 8, out=o)
    assert c["macs"] == 1 * 8 * 4 * 4 * 1 * 3 * 3  # N*Cout*H*W*(Cin/groups)*K*K = 1152


def test_grouped_conv1d_and_conv3d():
    x, w, o = t(2, 4, 10), t(6, 2, 3), t(2, 6, 8)  # groups=2: Cin/g = 2
    assert cost("convolution", x, w, None, [1], [0], [1], False, [0], 2, out=o)["macs"] == 2 * 6 * 8 * 2 * 3  # 576
    x, w, o = t(1, 2, 4, 4, 4), t(3, 2, 3, 3, 3), t(1, 3, 2, 2, 2)
    assert cost("convolution", x, w, None, [1] * 3, [0] * 3, [1] * 3, False, [0] * 3, 1, out=o)["macs"] == 8 * 3 * 54


def test_transposed_conv():
    # ConvTranspose2d(4 -> 2, k=2, stride 2): weight (Cin=4, Cout=2, 2, 2); in 1x4x3x3 -> out 1x2x6x6
    # every input position is scattered through the whole kernel: MAC = N*H_in*W_in*Cin*Cout*K*K
    x, w, o = t(1, 4, 3, 3), t(4, 2, 2, 2), t(1, 2, 6, 6)
    c = cost("convolution", x, w, None, [2, 2], [0, 0], [1, 1], True, [0, 0], 1, out=o)
    assert c["macs"] == 1 * 3 * 3 * 4 * 2 * 2 * 2  # = 288


def test_conv_backward_respects_output_mask():
    go, x, w = t(2, 4, 8, 8), t(2, 3, 8, 8), t(4, 3, 3, 3)
    fwd = 2 * 4 * 8 * 8 * 3 * 3 * 3  # 13824 MAC
    outs = (t(2, 3, 8, 8), t(4, 3, 3, 3), t(4))
    c = cost("convolution_backward", go, x, w, [4], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
             [True, True, True], out=outs)
    assert c["macs"] == 2 * fwd  # grad input + grad weight
    assert c["flops"] == 4 * fwd + 2 * 4 * 8 * 8  # + grad bias = sum over grad_out
    assert c["read"] == (2 * 4 * 64 + 4 * 27 + 2 * 3 * 64) * 4
    # first layer: no input gradient wanted -> only the weight gradient, the weight is not read
    outs = (None, t(4, 3, 3, 3), None)
    c = cost("convolution_backward", go, x, w, [4], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
             [False, True, False], out=outs)
    assert c["macs"] == fwd
    assert c["read"] == (2 * 4 * 64 + 2 * 3 * 64) * 4
    assert c["written"] == 4 * 27 * 4


def test_sdpa_dense_and_causal():
    # B=2, H=3, L=S=4, D=8: QK^T 4*4*8 MAC + PV 4*4*8 MAC per (b, h)
    q = t(2, 3, 4, 8)
    c = cost("_scaled_dot_product_flash_attention_for_cpu", q, q, q, 0.0, False, out=(t(2, 3, 4, 8), t(2, 3, 4)))
    assert c["macs"] == 6 * 16 * (8 + 8)  # = 1536
    assert c["flops"] == 2 * 1536 + 6 * 16 * (1 + 7)  # + scale and softmax per score = 3840
    # causal keeps 1+2+3+4 = 10 of the 16 (query, key) pairs
    assert _causal_pairs(4, 4) == 10
    c = cost("_scaled_dot_product_flash_attention_for_cpu", q, q, q, 0.0, True, out=(t(2, 3, 4, 8), t(2, 3, 4)))
    assert c["macs"] == 6 * 10 * 16
    assert _causal_pairs(2, 5) == 1 + 2  # more keys than queries: row i sees i+1 keys
    assert _causal_pairs(5, 2) == 1 + 2 + 3 * 2


def test_sdpa_backward_counts_five_products():
    q = t(1, 2, 4, 8)
    c = cost("_scaled_dot_product_flash_attention_for_cpu_backward", t(1, 2, 4, 8), q, q, q, t(1, 2, 4, 8),
             t(1, 2, 4), 0.0, False, out=(q, q, q))
    assert c["macs"] == 2 * 16 * (3 * 8 + 2 * 8)  # recompute S, dV, dP, dQ, dK = 1280


@pytest.mark.parametrize("name, per", [("relu", 1), ("sigmoid", 4), ("tanh", 5), ("hardsigmoid", 4),
                                       ("hardswish", 5), ("silu", 5), ("gelu", 8), ("erf", 8)])
def test_activation_costs_follow_pagoda(name, per):
    x = t(2, 10)
    c = cost(name, x, out=t(2, 10))
    assert c["flops"] == per * 20
    assert c["read"] == 80 and c["written"] == 80


def test_softmax_seven_per_element():
    assert cost("_softmax", t(3, 10), -1, False, out=t(3, 10))["flops"] == 7 * 30


def test_inplace_ops_use_the_out_of_place_formula():
    assert lookup("relu_") is lookup("relu")
    assert lookup("add_") is lookup("add")
    x = t(4, 4)
    c = cost("add_", x, t(4, 4), out=x)
    assert c["flops"] == 16 and c["read"] == 2 * 64 and c["written"] == 64


def test_fp16_bytes_are_halved():
    a, b, o = t(4, 6, dtype=torch.float16), t(6, 5, dtype=torch.float16), t(4, 5, dtype=torch.float16)
    c = cost("mm", a, b, out=o)
    assert c["read"] == (24 + 30) * 2 and c["written"] == 20 * 2


def test_int8_bytes():
    x = t(10, dtype=torch.int8)
    assert cost("clone", x, out=t(10, dtype=torch.int8))["read"] == 10


def test_batch_norm_inference_and_training():
    x = t(2, 3, 4, 4)
    stats = (t(3), t(3), t(3), t(3))
    infer = cost("native_batch_norm", x, *stats, False, 0.1, 1e-5, out=(x, t(0), t(0)))
    train = cost("native_batch_norm", x, *stats, True, 0.1, 1e-5, out=(x, t(3), t(3)))
    assert infer["flops"] == 4 * 96  # (x - mean) * invstd * gamma + beta
    assert train["flops"] == 8 * 96  # + mean (1) and variance (3)


def test_layer_norm_and_backward():
    x = t(2, 5, 8)
    assert cost("native_layer_norm", x, [8], t(8), t(8), 1e-5, out=(x, t(2, 5, 1), t(2, 5, 1)))["flops"] == 8 * 80
    assert cost("native_layer_norm_backward", x, x, [8], t(2, 5, 1), t(2, 5, 1), t(8), t(8),
                [True, True, True], out=(x, t(8), t(8)))["flops"] == 10 * 80


def test_pooling():
    # max pool 2x2 over 1x3x8x8 -> 1x3x4x4: 4 comparisons per output = 192
    x = t(1, 3, 8, 8)
    assert cost("max_pool2d_with_indices", x, [2, 2], [2, 2], out=(t(1, 3, 4, 4), t(1, 3, 4, 4)))["flops"] == 48 * 4
    assert cost("avg_pool2d", x, [3, 3], out=t(1, 3, 6, 6))["flops"] == 108 * 9
    # global average: every input added once + one division per output = 192 + 3
    assert cost("_adaptive_avg_pool2d", x, [1, 1], out=t(1, 3, 1, 1))["flops"] == 192 + 3


def test_reductions():
    x = t(4, 10)
    assert cost("sum", x, [1], out=t(4))["flops"] == 40
    assert cost("mean", x, [1], out=t(4))["flops"] == 40
    assert cost("var", x, [1], out=t(4))["flops"] == 160


def test_embedding_reads_only_the_gathered_rows():
    weight, idx = t(30000, 64), t(2, 5, dtype=torch.long)
    c = cost("embedding", weight, idx, out=t(2, 5, 64))
    assert c["flops"] == 0
    assert c["read"] == 10 * 8 + 10 * 64 * 4  # indices + 10 rows, not the 7.7 MB table
    assert c["written"] == 10 * 64 * 4


def test_embedding_backward_writes_the_whole_table_gradient():
    go, idx = t(2, 5, 64), t(2, 5, dtype=torch.long)
    c = cost("embedding_dense_backward", go, idx, 100, -1, False, out=t(100, 64))
    assert c["written"] == 100 * 64 * 4 + 640 * 4
    assert c["flops"] == 640


def test_cat_and_copies_move_bytes_without_flops():
    a, b = t(2, 3), t(4, 3)
    c = cost("cat", [a, b], 0, out=t(6, 3))
    assert c == {"flops": 0, "macs": 0, "read": 18 * 4, "written": 18 * 4}
    dst, src = t(6), t(6, dtype=torch.float16)
    c = cost("copy_", dst, src, out=dst)  # reads the fp16 source, writes the fp32 destination
    assert c["read"] == 12 and c["written"] == 24


def test_fills_write_only():
    c = cost("zeros", [3, 4], out=t(3, 4))
    assert c["read"] == 0 and c["written"] == 48


def test_views_are_free_and_not_in_the_registry():
    for name in ("view", "transpose", "permute", "expand", "_unsafe_view", "unsqueeze"):
        assert name in FREE_OPS
        assert lookup(name) is None


def test_elementwise_table_covers_the_issue_list():
    for name in ("add", "sub", "mul", "div", "relu", "sigmoid", "tanh", "hardsigmoid", "hardswish", "silu",
                 "gelu", "erf", "threshold_backward"):
        assert name in ELEMENTWISE_FLOP


def test_unknown_op_has_no_formula():
    assert op_cost("definitely_not_an_op", (), {}, None) is None
