"""The shared capture (``lightning_edge.cost.capture``, issue 17 item 1): every call form, kept integer values,
modules without ``forward``, several calls per step, autocast and Lazy modules captured from the real call."""

from __future__ import annotations

import dataclasses
from collections import namedtuple

import pytest
import torch
from torch import nn

from lightning_edge.cost import analyze
from lightning_edge.cost.capture import Call, CallCapture, Captured, CaptureError, capture, to_meta
from lightning_edge.cost.counter import step_cost


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x=None, scale=1.0, mask=None):
        h = self.fc1(x) * scale
        if mask is not None and not bool(mask.all()):  # data-dependent on an integer input, as HF mask builders are
            h = h * mask
        return self.fc2(h)


FC_MACS = 8 * 16 + 16 * 4  # per row


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    y: torch.Tensor


# ---------------------------------------------------------------------------------------------- CallCapture
@pytest.mark.parametrize("call", ["positional", "keyword", "dict", "tuple", "dataclass", "namedtuple",
                                  "batch_encoding"])
def test_every_call_form_is_captured_and_costed(call):
    net = Net()
    x = torch.randn(5, 8)
    if call == "positional":
        fn = lambda: net(x)  # noqa: E731
    elif call == "keyword":
        fn = lambda: net(x=x, scale=2.0)  # noqa: E731
    elif call == "dict":
        fn = lambda: net(**{"x": x})  # noqa: E731
    elif call == "tuple":
        fn = lambda: net(*(x,))  # noqa: E731
    elif call == "dataclass":
        b = Batch(x, torch.zeros(5))
        fn = lambda: net(b.x)  # noqa: E731
    elif call == "namedtuple":
        NT = namedtuple("NT", "x y")
        b = NT(x, torch.zeros(5))
        fn = lambda: net(b.x)  # noqa: E731
    else:
        transformers = pytest.importorskip("transformers")
        enc = transformers.BatchEncoding({"x": x, "mask": torch.ones(5, 16, dtype=torch.long)})
        fn = lambda: net(**enc)  # noqa: E731
    captured, _ = capture(net, fn)
    assert [c.module for c in captured.calls] == [""]
    cost = step_cost(net, captured, training=False)
    assert cost.macs == 5 * FC_MACS
    assert cost.layer("fc1").forward.macs == 5 * 8 * 16


def test_keyword_values_of_integer_inputs_are_kept_for_control_flow():
    # HF mask builders branch on `mask.all()`: the meta device cannot answer that, a kept value can
    net = Net()
    x = torch.randn(3, 8)
    mask = torch.ones(3, 16, dtype=torch.long)
    mask[0, 0] = 0
    cap, _ = capture(net, lambda: net(x=x, mask=mask))
    (call,) = cap.calls
    assert call.kwargs["x"].device.type == "meta"
    assert call.kwargs["mask"].device.type == "cpu" and int(call.kwargs["mask"].sum()) == 47
    partial = step_cost(net, cap, training=False)
    full = analyze(net, x=x, mask=torch.ones(3, 16, dtype=torch.long))
    assert partial.flops - full.flops == 3 * 16  # the masking multiply ran, as it did for real


def test_submodule_calls_of_a_module_without_forward_and_several_calls():
    class NoForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = Net()
            self.head = nn.Linear(4, 2)

        def step(self, a, b):
            return self.head(self.enc(x=a)).sum() + self.head(self.enc(b)).sum()

    m = NoForward()
    a, b = torch.randn(2, 8), torch.randn(6, 8)
    with CallCapture(m) as cap:
        m.step(a, b).backward()
    c = cap.captured
    assert [x.module for x in c.calls] == ["enc", "head", "enc", "head"]
    assert c.training and c.calls[0].kwargs["x"].shape == (2, 8)
    cost = step_cost(m, c)
    assert cost.training
    assert cost.layer("enc.fc1").forward.macs == (2 + 6) * 8 * 16
    assert cost.layer("enc.fc1").calls == 2
    assert cost.layer("head").forward.macs == (2 + 6) * 4 * 2
    assert cost.layer("head").backward.flops > 0
    assert any("several calls per step" in n and "enc x2" in n for n in cost.notes)
    # gradients off: the same capture counted as inference
    assert not step_cost(m, c, training=False).training


def test_root_called_inside_its_own_call_gives_the_inner_call():
    class Wrapped(nn.Module):  # DDP runs training_step through forward; training_step calls self(x)
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 3)
            self.inner = False

        def forward(self, *args, **kw):
            if self.inner:
                return self.fc(args[0])
            self.inner = True
            try:
                batch, _idx = args
                return self(batch[0])
            finally:
                self.inner = False

    m = Wrapped()
    cap, _ = capture(m, lambda: m((torch.randn(4, 8), torch.zeros(4)), 0))
    (call,) = cap.calls
    assert call.module == "" and call.args[0].shape == (4, 8)


def test_capture_limits_calls_and_says_so():
    net = Net()
    with CallCapture(net, max_calls=3) as cap:
        for _ in range(5):
            net(torch.randn(1, 8))
    assert len(cap.captured.calls) == 3 and cap.captured.dropped == 2
    assert any("2 more call(s)" in n for n in cap.captured.notes)


def test_step_cost_names_what_failed_and_raises_when_nothing_can_be_counted():
    class Bad(nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent on float values: no meta answer
                return x
            return -x

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.bad, self.good = Bad(), nn.Linear(4, 4)

    m = Two()
    with CallCapture(m) as cap:
        m.good(torch.randn(2, 4))
        m.bad(torch.randn(2, 4))
    cost = step_cost(m, cap.captured)
    assert cost.layer("good").forward.macs == 2 * 16
    assert any("no cost model for bad" in n for n in cost.notes)
    with pytest.raises(CaptureError, match="every captured call"):
        step_cost(m, Captured([c for c in cap.captured.calls if c.module == "bad"]))
    with pytest.raises(CaptureError, match="no call"):
        step_cost(m, Captured())


def test_call_resized_keeps_values_and_shapes():
    call = Call("", (torch.empty(4, 3, device="meta"),), {"ids": torch.arange(8).reshape(4, 2), "n": 3}, True)
    r = call.resized(6)
    assert r.args[0].shape == (6, 3) and r.kwargs["ids"].shape == (6, 2) and r.kwargs["n"] == 3
    assert r.kwargs["ids"][4].tolist() == [0, 1]
    assert "ids=int64[4, 2]" in call.describe()


def test_to_meta_keeps_only_small_integer_values():
    out = to_meta({"f": torch.randn(2), "i": torch.ones(3, dtype=torch.long), "b": torch.ones(2, dtype=torch.bool)})
    assert out["f"].device.type == "meta" and out["i"].device.type == "cpu" and out["b"].device.type == "cpu"
    assert to_meta(torch.ones(3, dtype=torch.long), keep_values=False).device.type == "meta"


def test_autocast_captured_from_the_real_call():
    net = nn.Sequential(nn.Linear(64, 64))
    with CallCapture(net) as cap, torch.autocast("cpu", dtype=torch.bfloat16):
        net(torch.randn(4, 64))
    assert cap.captured.calls[0].autocast == "bfloat16"
    assert step_cost(net, cap.captured, training=False).autocast == "bfloat16"


def test_a_lazy_module_is_costed_after_its_first_step_with_a_clear_error_before():
    m = nn.Sequential(nn.LazyLinear(4))
    with pytest.raises(ValueError, match="uninitialized .*Lazy.*run one real step first"):
        analyze(m, torch.randn(2, 3))
    cap, _ = capture(m, m, torch.randn(2, 3))  # the first call initialises it
    assert step_cost(m, cap, training=False).macs == 2 * 3 * 4


def test_a_forward_recomputed_in_the_backward_is_not_another_call():
    from torch.utils.checkpoint import checkpoint

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.pre, self.block = nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))

        def forward(self, x):
            return checkpoint(self.block, self.pre(x), use_reentrant=False)

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = M()

    o = Outer()
    with CallCapture(o) as cap:
        o.m(torch.randn(4, 8)).sum().backward()
    assert [c.module for c in cap.captured.calls] == ["m"]  # not also "m.block" (its recomputation)
    cost = step_cost(o, cap.captured)
    first = cost.layer("m.block.0")  # recomputed once in the backward: input grad + weight grad + forward again
    assert first.backward.macs == 3 * first.forward.macs and first.calls == 1


def test_analyzing_during_a_captured_step_is_not_another_call():
    # the tuner analyses its capture at the end of the first step, inside the profiler's captured step
    net = Net()
    with CallCapture(net) as cap:
        net(torch.randn(2, 8))
        analyze(net, torch.randn(2, 8), training=True)
    assert len(cap.captured.calls) == 1


def test_batch_size_is_the_first_tensors_leading_dimension():
    from lightning_edge.cost.capture import batch_size

    assert batch_size((torch.zeros(5, 2), torch.zeros(5))) == 5
    assert batch_size({"ids": torch.zeros(3, 7)}) == 3
    assert batch_size((torch.tensor(1.0), torch.zeros(4, 2))) == 4  # a scalar has no batch dimension
    assert batch_size([1, 2]) is None


def test_batch_size_fast_walk_agrees_with_the_full_walk_on_every_container():
    """batch_size (called on every step) walks lists, tuples and mappings in place; it must pick the same tensor as
    the full walk of tensors_of, including nested, keyword-style, namedtuple, dataclass and UserDict batches."""
    import collections
    import dataclasses

    from lightning_edge.cost.capture import batch_size, tensors_of

    Pair = collections.namedtuple("Pair", "a b")

    @dataclasses.dataclass
    class Batch:
        meta: str
        x: torch.Tensor

    class Encoding(collections.UserDict):  # like transformers' BatchEncoding
        pass

    batches = [
        {"mask": torch.tensor(1.0), "ids": torch.zeros(6, 3), "y": torch.zeros(2)},
        [("a", None), {"inner": [torch.zeros(0, 1), torch.zeros(7)]}],
        Pair(torch.tensor(2), torch.zeros(9, 1)),
        Batch("m", torch.zeros(4, 4)),
        Encoding(input_ids=torch.zeros(11, 2)),
        {"batch": Batch("m", torch.zeros(12))},
        ("text only", 3),
    ]
    for b in batches:
        full = next((int(t.shape[0]) for t in tensors_of(b) if t.dim() > 0), None)
        assert batch_size(b) == full, b
    assert [batch_size(b) for b in batches] == [6, 0, 9, 4, 11, 12, None]


# ---------------------------------------------------------------------------------------------- the shared capture
def test_one_capture_per_step_shared_by_every_caller_and_analysed_once():
    """issue 26 item 4: callers of one Trainer (the profiler, the tuner, the interleaver) each ask the model's shared
    capture at a step's start and end: one CallCapture runs, every caller gets the same CapturedStep (its calls,
    whether it trained, its batch size, its signature), and its cost is analysed by the first to ask only."""
    from lightning_edge.cost.shared import shared_capture

    torch.manual_seed(0)
    net = Net()
    home = shared_capture(net)
    assert shared_capture(net) is home and shared_capture(Net()) is not home
    assert home.begin() and home.begin()  # three callbacks at the step's start: one capture runs
    assert home.begin()
    net(torch.randn(5, 8)).sum().backward()
    first = home.end()
    assert home.end() is first and home.end() is first  # the others get the same step
    assert home.captures == 1 and home.known(True) is first and home.known(False) is None
    assert first.training and first.batch_size == 5 and first.module_calls == 3  # root, fc1, fc2
    assert first.signature == "(root)(float32[5, 8])" and not first.analysed
    cost = first.cost()
    assert first.analysed and first.cost() is cost and home.analyses == 1
    assert cost.layer("fc1").forward.macs == 5 * 8 * 16 and cost.training
    # a later step of the same shape and kind is the kept one (its cost is not analysed again)
    home.begin()
    net(torch.randn(5, 8)).sum().backward()
    assert home.end() is first and home.captures == 2 and home.analyses == 1
    # an inference step is kept apart
    home.begin()
    with torch.no_grad():
        net(torch.randn(3, 8))
    inf = home.end()
    assert not inf.training and home.known(False) is inf and inf.batch_size == 3


def test_the_shared_capture_goes_with_its_model_and_says_why_it_cannot_cost():
    import gc
    import weakref

    from lightning_edge.cost.shared import shared_capture

    net = Net()
    home = shared_capture(net)
    ref = weakref.ref(net)
    home.begin()
    net(torch.randn(2, 8))
    step = home.end()
    del net
    gc.collect()
    assert ref() is None  # the registry does not keep the model alive
    with pytest.raises(CaptureError, match="no longer exists"):
        step.cost()
    with pytest.raises(TypeError, match="torch.nn.Module"):
        shared_capture(object())
