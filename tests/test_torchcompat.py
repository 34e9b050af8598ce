"""Every gate of ``lightning_edge._torchcompat`` on the running torch (the CI matrix runs this on torch 2.1, 2.3, 2.5 and
the newest): each private or version-dependent API works, or its fallback does the same job."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from lightning_edge import _torchcompat as tc
from lightning_edge import analyze

ROOT = Path(__file__).resolve().parents[1]


def test_version_parses_nvidia_wheels():
    assert tc._version("2.3.0a0+40ec155e58.nv24.03") == (2, 3)
    assert tc._version("2.1.0a0+41361538.nv23.06") == (2, 1)
    assert tc._version("2.13.0+cpu") == (2, 13)
    assert tc.TORCH_VERSION >= (2, 1)


Pair = collections.namedtuple("Pair", "a b")


@pytest.mark.parametrize("tree", [(1, 2), [1, [2, 3]], {"x": 1, "y": (2,)}, Pair(1, 2)])
def test_tree_children_rebuilds_one_level(tree):
    children, rebuild = tc.tree_children(tree)
    assert rebuild(children) == tree and type(rebuild(children)) is type(tree)
    assert len(children) == len(tree)


def test_tree_children_of_a_leaf_is_none():
    assert tc.tree_children(torch.zeros(1)) is None
    assert tc.tree_children(3) is None


def test_autocast_dtype_is_read_on_the_cpu():
    # on torch 2.3, torch.get_autocast_dtype did not exist: bf16 autocast was silently recorded as none (the CPU's
    # autocast takes bf16 on every supported torch; fp16 only from 2.3)
    assert tc.autocast_dtype() is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert tc.autocast_dtype() == torch.bfloat16
    assert tc.autocast_dtype() is None


def test_a_captured_call_under_cpu_autocast_records_its_dtype():
    from lightning_edge.cost.capture import CallCapture

    model = nn.Linear(4, 4)
    with CallCapture(model) as cap, torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randn(2, 4))
    assert cap.captured.calls[0].autocast == "bfloat16"


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.out = nn.Linear(4, 10, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, ids):
        return self.out(self.emb(ids))


@pytest.mark.parametrize("training", [False, True])
def test_analyze_leaves_tied_weights_tied(training):
    # torch 2.3 to 2.5 restored tied weights as two tensors after a reparametrized call
    model = Tied()
    cost = analyze(model, torch.randint(0, 10, (2, 3)), training=training)
    assert model.out.weight is model.emb.weight
    assert cost.params == 40 == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("training", [False, True])
def test_an_embedding_refuses_float_indices_on_meta_as_on_the_cpu(training):
    # torch 2.8's meta kernel of aten::embedding took float indices: a language model analysed with float inputs
    # (``--input-shape`` without ``--input-dtype long``) was counted, its embedding reading nothing
    emb = nn.Embedding(10, 4)
    with pytest.raises(RuntimeError, match="scalar types: Long, Int"):
        emb(torch.zeros(2, 3))  # the CPU kernel
    with pytest.raises(RuntimeError, match="scalar types: Long, Int"):
        analyze(emb, torch.zeros(2, 3), training=training)
    for dt in (torch.long, torch.int32):
        assert analyze(emb, torch.zeros(2, 3, dtype=dt), training=training).bytes > 0
    assert (torch.ops.aten.embedding in tc.META_ARG_CHECKS) is not tc._meta_embedding_checks_indices()


def test_run_backward_fallback_counts_the_same(monkeypatch):
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(3, 8)
    native = analyze(model, x, training=True)
    monkeypatch.delattr(torch.autograd.graph, "_engine_run_backward", raising=False)  # torch < 2.4
    fallback = analyze(model, x, training=True)
    assert (fallback.flops, fallback.bytes, fallback.backward.flops) == (native.flops, native.bytes,
                                                                          native.backward.flops) != (0, 0, 0)


def test_force_eager_runs_a_compiled_module_in_python():
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU())
    compiled = torch.compile(model)
    cost = analyze(compiled, torch.randn(2, 8), training=True)
    assert cost.flops == analyze(model, torch.randn(2, 8), training=True).flops > 0
    assert any("torch.compile" in n for n in cost.notes)


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointing_runs_on_meta(reentrant):
    from torch.utils.checkpoint import checkpoint

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(8, 8), nn.Tanh())

        def forward(self, x):
            return checkpoint(self.inner, x, use_reentrant=reentrant).sum(-1)

    x = torch.randn(2, 8, requires_grad=reentrant)
    cost = analyze(M(), x, training=True)
    assert any("checkpointing" in n for n in cost.notes)


def test_autocast_on_meta_is_taken_as_the_cpus():
    with tc.autocast_on_meta():
        with torch.autocast(device_type="meta", enabled=False):
            x = torch.empty(2, device="meta") * 2
    assert x.device.type == "meta"


def test_is_compiling_outside_compiled_code():
    assert tc.is_compiling() is False


def test_conv_backend_name_answers_on_the_cpu():
    name = tc.conv_backend_name(torch.empty(1, 3, 8, 8), torch.empty(4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1)
    assert name is None or isinstance(name, str) and name


def test_no_torch_function_hides_modes():
    from torch.overrides import TorchFunctionMode

    seen = []

    class Spy(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Spy():
        with tc.no_torch_function():
            torch.add(torch.ones(1), 1)
        assert not seen
        torch.add(torch.ones(1), 1)
    assert seen


def test_the_backward_survives_the_garbage_collector():
    """On torch 2.1 a cyclic collection during an analysed backward freed tensors the engine still held (a
    Counter or a torch.Size arrived as native_batch_norm_backward's input, or the process crashed). Python's debug
    allocator poisons freed memory, so the failure is certain where it can happen."""
    script = textwrap.dedent("""
        import gc
        import torch
        from torch import nn
        from lightning_edge import analyze
        m = nn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 8, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        for threshold in (100, 150, 200, 300, 700):  # each crashed torch 2.1 without the fix
            gc.set_threshold(threshold, 1, 1)
            for _ in range(3):
                c = analyze(m, torch.randn(2, 3, 16, 16), training=True)
        print("flops", c.flops)
    """)
    env = {**os.environ, "PYTHONMALLOC": "debug", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "flops" in r.stdout, (r.returncode, r.stderr[-2000:])
