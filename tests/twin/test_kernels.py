"""The twin times every kernel on its own (issue 27): per-op detail from the cost counter, efficiency per kernel
(reduction depth, fill and launch once each), fused attention as one kernel, element-wise ops memory-bound, the
precision of each kernel from autocast, the optimizer per optimizer step, and the CPU work outside the layers from the
user's own run. Plain torch modules (the Hugging Face models are in tests/compat/test_twin_plausibility.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lightning_edge._torchcompat import SDPA_TAKES_GQA
from lightning_edge.cost import analyze
from lightning_edge.twin.model import OrinTwin
from lightning_edge.twin.validation import MAXN

LOW_CPU = MAXN.replace(cpu_mhz=729.6)


@pytest.fixture(scope="module")
def twin() -> OrinTwin:
    return OrinTwin(settling=False)


class RotaryAttention(nn.Module):
    """What a Llama/Qwen2 attention module runs itself (its projections are children): rotary embedding (element-wise
    mul, neg, cat, add) on q and k, then fused attention with grouped key/value heads and a causal mask."""

    def __init__(self, hidden: int = 64, heads: int = 4, kv_heads: int = 2):
        super().__init__()
        self.h, self.kv, self.d = heads, kv_heads, hidden // heads
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, kv_heads * self.d)
        self.v = nn.Linear(hidden, kv_heads * self.d)
        self.o = nn.Linear(hidden, hidden, bias=False)

    @staticmethod
    def rotate(x, cos, sin):
        a, b = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-b, a), dim=-1) * sin

    def forward(self, x):
        b, n, _ = x.shape
        q = self.q(x).view(b, n, self.h, self.d).transpose(1, 2)
        k = self.k(x).view(b, n, self.kv, self.d).transpose(1, 2)
        v = self.v(x).view(b, n, self.kv, self.d).transpose(1, 2)
        pos = torch.arange(n, device=x.device, dtype=x.dtype)[:, None] / 100.0
        cos, sin = pos.cos(), pos.sin()
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        if SDPA_TAKES_GQA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # torch < 2.5: the model repeats its key/value heads, as Hugging Face's repeat_kv does
            g = self.h // self.kv
            y = F.scaled_dot_product_attention(q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, n, -1))


def _rows(lt, name: str) -> list[int]:
    return [i for i, n in enumerate(lt.names) if n == name]


def test_the_counter_keeps_every_kernel_with_its_depth_and_dtype():
    """LayerCost.kernels: each op's kernel with its own reduction depth, dtype and direction; fused attention is one
    kernel whose depth is the head dimension; a convolution's backward runs its data and weight gradients as two
    kernels; autocast's input casts are C++-issued."""
    att = RotaryAttention()
    cost = analyze(att, torch.randn(2, 16, 64), training=True, autocast="bf16")
    own = cost.layer("").kernels  # the attention module's own ops (its projections are children)
    sdpa = [k for k in own if "scaled_dot_product" in k.op]
    assert {k.backward for k in sdpa} == {False, True} and all(k.depth == 16 for k in sdpa)
    assert all(k.dtype == "bfloat16" for k in sdpa)
    assert any(k.op == "mul" and k.depth == 0 for k in own)  # rotary: element-wise, no reduction
    q = cost.layer("q").kernels
    mm = [k for k in q if k.op in ("addmm", "mm")]
    assert {k.depth for k in mm} == {64.0, 32.0}  # forward and input gradient K=64, weight gradient K=tokens
    assert all(k.dtype == "bfloat16" for k in mm)
    casts = [k for k in q if k.op == "_to_copy" and not k.backward]
    assert casts and all(k.internal for k in casts)
    assert sum(q.values()) == sum(cost.layer("q").ops.values())

    conv = analyze(nn.Conv2d(8, 16, 3, bias=False), torch.randn(2, 8, 12, 12, requires_grad=True), training=True)
    ks = [k for k, n in conv.layer("").kernels.items() for _ in range(n) if k.op == "convolution_backward"]
    assert len(ks) == 2 and ks[0].flops == ks[1].flops  # data gradient and weight gradient, as cuDNN runs them
    assert sorted(k.depth for k in ks) == [16 * 9 * 100 / 144, 2 * 100]  # C_out k^2 (per input) and N H_out W_out
    assert [k.internal for k in ks] == [False, True]  # one op dispatched, its second kernel launched from C++


def test_small_attention_costs_its_kernels_not_a_multiplied_penalty(twin):
    """Issue 27: a tiny attention module (rotary element-wise ops + fused GQA causal attention, 0.3 MFLOP) took
    65 ms of GPU time at MAXN: the module's reduction depth (element-wise ops mixed in: 3.7) times the small-kernel
    penalty. Per kernel it is its launches plus tiny work."""
    att = RotaryAttention()
    cost = analyze(att, torch.randn(2, 16, 64), training=True)
    lt = twin.workload(cost, 2, "train").layers(MAXN)
    (fwd, bwd) = _rows(lt, "(root)")
    prof = twin.workload(cost, 2, "train").profile
    n = float(sum(c for r, c in zip(prof.k_row, prof.k_count) if r in (fwd, bwd)))
    gpu = float(lt.gpu_s[fwd] + lt.gpu_s[bwd])
    assert gpu < n * 25e-6  # each kernel under 25 us: a launch and a fill
    assert gpu < 1e-3


def test_element_wise_kernels_are_memory_bound(twin):
    """A module that runs a small matmul and large element-wise ops itself: the element-wise kernels take their bytes
    at the bandwidth; the matmul's depth is its own (the module's, element-wise outputs mixed in, was ~0, which
    charged every FLOP of the module at a vanishing matmul efficiency)."""

    class ScaleAndMix(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(64, 64))

        def forward(self, x, h):
            return x * 2.0 + 1.0 + (h @ self.w).sum()

    x, h = torch.randn(64, 1024, 1024), torch.randn(16, 64)
    cost = analyze(ScaleAndMix(), x, h)
    lt = twin.workload(cost, 64, "infer").layers(MAXN)
    (row,) = _rows(lt, "(root)")
    bw = float(twin.roofline(MAXN).bandwidth)
    q = float(lt.bytes[row])
    assert q / bw < lt.gpu_s[row] < 1.6 * q / bw  # at the achievable bandwidth (eff_mem), not at a FLOP rate


def test_bf16_matmuls_run_on_tensor_cores_and_fp32_element_wise_ops_stay_fp32(twin):
    """Autocast's dtype reaches the twin per kernel: a large Linear under bf16 is at least 4x faster than in fp32
    (FP32 CUDA cores, PyTorch's default), while the LayerNorm before it (an fp32 input) still computes in fp32."""
    net = nn.Sequential(nn.LayerNorm(1024), nn.Linear(1024, 4096))
    x = torch.randn(512, 1024)
    c32, c16 = analyze(net, x, training=True), analyze(net, x, training=True, autocast="bf16")
    l32, l16 = (twin.workload(c, 512, "train").layers(MAXN) for c in (c32, c16))
    lin32 = sum(l32.gpu_s[i] for i in _rows(l32, "1"))
    lin16 = sum(l16.gpu_s[i] for i in _rows(l16, "1"))
    assert lin16 < lin32 / 4
    wl = twin.workload(c16, 512, "train")
    norm = [i for i, r in enumerate(wl.profile.k_row) if wl.profile.names[r] == "0"]
    assert norm and not wl.profile.k_half[norm].any()  # the LayerNorm reads and writes fp32 under autocast
    lin = [i for i, r in enumerate(wl.profile.k_row) if wl.profile.names[r] == "1" and wl.profile.k_unit[i] == 1]
    assert lin and wl.profile.k_half[lin].all()


def test_a_shallow_matmul_is_bound_by_its_outputs_not_its_depth(twin):
    """A rank-8 LoRA-like projection (4096 tokens, 8 -> 4096): 0.27 GFLOP of depth 8, 64 MB written. Its time is
    of the order of writing its outputs, far under its work at a 5 % efficiency floor."""
    up = nn.Linear(8, 4096, bias=False)
    cost = analyze(up, torch.randn(4096, 8))
    lt = twin.workload(cost, 4096, "infer").layers(MAXN)
    (row,) = _rows(lt, "(root)")
    bw = float(twin.roofline(MAXN).bandwidth)
    cuda_peak = float(twin.roofline(MAXN, "fp32_cuda").peak_flops)
    assert lt.gpu_s[row] < 2.5 * float(lt.bytes[row]) / bw
    assert lt.gpu_s[row] < float(lt.flops[row]) / (0.05 * cuda_peak)


def test_optimizer_charged_per_optimizer_step(twin):
    """With one optimizer step every 4 batches, the (optimizer) row per batch holds a quarter of a step's kernels."""
    net = nn.Sequential(*[nn.Linear(64, 64) for _ in range(8)])
    cost = analyze(net, torch.randn(16, 64), training=True)
    every = twin.workload(cost, 16, "train", param_tensors=16).layers(MAXN)
    fourth = twin.workload(cost, 16, "train", param_tensors=16, optimizer_steps=0.25).layers(MAXN)
    i, j = every.names.index("(optimizer)"), fourth.names.index("(optimizer)")
    assert fourth.gpu_s[j] == pytest.approx(every.gpu_s[i] / 4, rel=1e-9)
    assert fourth.wall_s[j] == pytest.approx(every.wall_s[i] / 4, rel=0.05)
    assert fourth.time_s < every.time_s
    assert any("apportioned" in n for n in fourth.notes)


def test_cpu_work_outside_the_layers_comes_from_the_users_run(twin):
    """No JPEG decoder unless asked for: the CPU row is what the user's run measured outside the layers on this
    machine, run on the Orin's CPU at the mode's clock (the clock ratio; the twin has no per-clock figure)."""
    from lightning_edge.twin.workload_model import IDLE_ROW, HostCPU

    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(16, 10))
    cost = analyze(net, torch.randn(16, 3, 224, 224), training=True)
    plain = twin.workload(cost, 16, "train")
    decode = twin.workload(cost, 16, "train", dataloader="decode")
    host = HostCPU(0.004, 2201.6 * 1.5, "test")
    mine = twin.workload(cost, 16, "train", host=host)
    # a captured cost has no decoder by default: Fulcrum's only when asked for
    assert float(decode.step(MAXN).time_s) > float(plain.step(MAXN).time_s) + 0.02
    extra = float(mine.step(MAXN).time_s) - float(plain.step(MAXN).time_s)
    assert extra == pytest.approx(0.004 * 1.5, rel=1e-6)  # the clock ratio at MAXN
    cf = float(twin.physics.cpu_factor(729.6, 3199.0))
    extra_low = float(mine.step(LOW_CPU).time_s) - float(plain.step(LOW_CPU).time_s)
    assert extra_low == pytest.approx(0.006 * cf, rel=0.05)
    lt = mine.layers(MAXN)
    idle = lt.names.index(IDLE_ROW)
    assert lt.wall_s[idle] >= 0.006
    assert any("outside the layers" in n and "4 ms" in n for n in lt.notes)
    assert np.sum(lt.wall_s) == pytest.approx(lt.time_s, rel=1e-12)
    assert np.sum(lt.energy_j) == pytest.approx(lt.time_s * lt.power_w, rel=1e-9)


def test_zoo_names_keep_the_papers_loader(twin):
    """A zoo name stands for the papers' workload: its training minibatches keep Fulcrum's image-decoding loader (the
    validation table reproduces the published figures with it)."""
    wl = twin.workload("resnet18", 16, "train")
    assert wl.dataloader == "decode" and wl.host is None
    assert twin.workload(wl.cost, 16, "train").dataloader is None


def test_a_launch_bound_layer_shows_its_dispatch(twin):
    """In a launch-bound step the GPU waits for the CPU: each layer's time includes that wait (as CUDA events around
    it measure on a board), so the layers, not one idle row, say where the step goes; the rows still sum to it."""
    net = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(12)])
    cost = analyze(net, torch.randn(4, 32), training=True)
    lt = twin.workload(cost, 4, "train").layers(MAXN)
    kernel_rows = lt.kernel_rows
    assert float(np.sum(lt.wall_s[kernel_rows])) > 0.9 * lt.time_s
    assert np.all(lt.wall_s[kernel_rows] >= lt.gpu_s[kernel_rows])
    assert np.sum(lt.wall_s) == pytest.approx(lt.time_s, rel=1e-12)
    assert math.isclose(float(np.sum(lt.energy_j)), lt.time_s * lt.power_w, rel_tol=1e-9)
