"""LayerTimer: forward and backward intervals, exclusive times, and the awkward cases (in-place ops, shared modules,
no_grad / inference_mode, exceptions, autocast). Timing is checked with an injected clock that only moves when a
test module "works", so expected self times are exact."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.modules import module as nn_module

from lightning_edge.profiling.hooks import DEFAULT_REGION, LayerTimer


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000

    def __call__(self) -> int:
        return self.t


class _BusyFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, clock, fwd_ns, bwd_ns):
        clock.t += fwd_ns
        ctx.clock, ctx.bwd_ns = clock, bwd_ns
        return x * 1.0

    @staticmethod
    def backward(ctx, g):
        ctx.clock.t += ctx.bwd_ns
        return g, None, None, None


class Busy(nn.Module):
    """Advances the fake clock by ``fwd_ns`` in forward and ``bwd_ns`` in backward."""

    def __init__(self, clock: Clock, fwd_ns: int, bwd_ns: int) -> None:
        super().__init__()
        self.clock, self.fwd_ns, self.bwd_ns = clock, fwd_ns, bwd_ns
        self.w = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return _BusyFn.apply(x * self.w, self.clock, self.fwd_ns, self.bwd_ns)


class Block(nn.Module):
    """A residual block with a downsample branch: the case where marker-based backward timing goes wrong."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.a = Busy(clock, 10, 100)
        self.b = Busy(clock, 20, 200)
        self.ds = Busy(clock, 30, 300)

    def forward(self, x):
        return self.b(self.a(x)) + self.ds(x)


class Net(nn.Module):
    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.stem = Busy(clock, 1, 2)
        self.block1 = Block(clock)
        self.block2 = Block(clock)
        self.head = Busy(clock, 5, 7)

    def forward(self, x):
        return self.head(self.block2(self.block1(self.stem(x))))


def _no_global_hooks() -> bool:
    return not nn_module._global_forward_hooks and not nn_module._global_forward_pre_hooks


def test_residual_blocks_exact_self_times():
    clock = Clock()
    net = Net(clock)
    timer = LayerTimer(net, clock_ns=clock)
    with timer.step() as s:
        net(torch.randn(4, 3)).sum().backward()
    t = s.timing
    ex = t.exclusive()
    expect = {"stem": (1, 2), "head": (5, 7)}
    for blk in ("block1", "block2"):
        expect.update({f"{blk}.a": (10, 100), f"{blk}.b": (20, 200), f"{blk}.ds": (30, 300)})
    for name, (f, b) in expect.items():
        assert ex[name].fwd_ns == f, name
        assert ex[name].bwd_ns == b, name
    # containers do nothing themselves; the self times tile the step
    assert ex.get("block1") is None or ex["block1"].self_ns == 0
    assert sum(v.self_ns for v in ex.values()) == t.duration_ns == sum(f + b for f, b in expect.values())
    assert t.has_backward
    assert _no_global_hooks()


def test_inclusive_intervals_nest_and_hull_backward():
    clock = Clock()
    net = Net(clock)
    timer = LayerTimer(net, clock_ns=clock, root_name="net")
    with timer.step() as s:
        net(torch.randn(2, 3)).sum().backward()
    inc = {(iv.name, iv.phase): iv for iv in s.timing.inclusive() if iv.kind == "module"}
    blk = inc[("block1", "fwd")]
    for child in ("a", "b", "ds"):
        c = inc[(f"block1.{child}", "fwd")]
        assert blk.t0_ns <= c.t0_ns <= c.t1_ns <= blk.t1_ns
    bb = inc[("block1", "bwd")]
    assert bb.t1_ns - bb.t0_ns == 600  # the hull of its three children's backward nodes
    root = inc[("net", "fwd")]
    assert root.depth == 0 and root.duration_ns == 1 + 2 * 60 + 5
    assert inc[("block1.a", "fwd")].depth == 2


def test_regions_receive_time_outside_modules():
    clock = Clock()
    net = Busy(clock, 10, 20)
    timer = LayerTimer(net, clock_ns=clock)
    with timer.step("(forward)") as s:
        clock.t += 3  # e.g. the data moved to the device
        loss = net(torch.ones(2)).sum()
        s.mark("(backward)", "bwd")
        loss.backward()
        s.mark("(optimizer)", "opt")
        clock.t += 7
    ex = s.timing.exclusive()
    assert ex["(forward)"].self_ns == 3 and ex["(forward)"].kind == "region"
    assert ex["(optimizer)"].self_ns == 7
    assert ex["Busy"].fwd_ns == 10 and ex["Busy"].bwd_ns == 20
    assert "(backward)" not in ex or ex["(backward)"].self_ns == 0
    assert sum(v.self_ns for v in ex.values()) == s.timing.duration_ns == 40


def test_segments_are_exact_windows():
    clock = Clock()
    net = Net(clock)
    timer = LayerTimer(net, clock_ns=clock)
    with timer.step() as s:
        net(torch.randn(2, 3)).sum().backward()
    ex = s.timing.exclusive()
    segs = sorted(seg for v in ex.values() for seg in v.segments)
    assert segs[0][0] == s.timing.t0_ns and segs[-1][1] == s.timing.t1_ns
    for (_a0, a1), (b0, _b1) in zip(segs, segs[1:]):
        assert a1 <= b0  # disjoint
    for v in ex.values():
        assert sum(b - a for a, b in v.segments) == v.self_ns


def test_inplace_relu_and_inplace_add():
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            y = self.relu(self.bn(self.conv(x)))
            z = self.conv2(y)
            z += y  # in-place residual add
            return self.relu(z)

    m = M()
    timer = LayerTimer(m)
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    with timer.step() as s:
        m(x).sum().backward()
    ex = s.timing.exclusive()
    assert x.grad is not None and m.conv.weight.grad is not None
    for name in ("conv", "bn", "relu", "conv2"):
        assert ex[name].fwd_ns > 0 and ex[name].bwd_ns > 0, name
    assert s.timing.calls["relu"] == 2
    assert _no_global_hooks()


def test_shared_module_called_several_times():
    lin = nn.Linear(4, 4)

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first = lin
            self.again = lin  # the same module under a second name

        def forward(self, x):
            return self.again(self.first(self.first(x)))

    m = M()
    timer = LayerTimer(m)
    with timer.step() as s:
        m(torch.randn(2, 4)).sum().backward()
    t = s.timing
    assert t.calls == {"M": 1, "first": 3}
    assert [iv.call for iv in t.modules if iv.name == "first"] == [0, 1, 2]
    owners = {(iv.name, iv.call) for iv in t.nodes}
    assert {("first", 0), ("first", 1), ("first", 2)} <= owners
    assert t.exclusive()["first"].bwd_ns > 0


@pytest.mark.parametrize("ctx", [torch.no_grad, torch.inference_mode])
def test_no_grad_and_inference_mode(ctx):
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True), nn.Linear(3, 1))
    timer = LayerTimer(m)
    with ctx(), timer.step() as s:
        m(torch.randn(2, 3))
    t = s.timing
    assert not t.nodes and not t.has_backward
    assert {iv.name for iv in t.modules} == {"Sequential", "0", "1", "2"}
    assert all(v.bwd_ns == 0 for v in t.exclusive().values())
    assert _no_global_hooks()


def test_exception_in_forward_removes_hooks_and_timer_is_reusable():
    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    m = nn.Sequential(nn.Linear(3, 3), Boom())
    timer = LayerTimer(m)
    with pytest.raises(ValueError, match="boom"), timer.step():
        m(torch.randn(2, 3))
    assert _no_global_hooks() and not timer.active
    # the post hook ran for the failing modules too (always_call): nothing stays on the stack
    ok = nn.Sequential(nn.Linear(3, 3))
    timer2 = LayerTimer(ok)
    with timer2.step() as s:
        ok(torch.randn(2, 3)).sum().backward()
    assert s.timing.exclusive()["0"].bwd_ns > 0
    # a step stopped by hand after a swallowed exception keeps what it saw
    timer.start_step()
    try:
        m(torch.randn(2, 3))
    except ValueError:
        pass
    t = timer.stop_step()
    assert {iv.name for iv in t.modules} >= {"0", "1"}
    assert _no_global_hooks()


def test_exception_in_backward_removes_node_hooks():
    class BadGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            raise RuntimeError("bad grad")

    class M(nn.Module):
        def forward(self, x):
            return BadGrad.apply(x)

    m = nn.Sequential(nn.Linear(3, 3), M())
    timer = LayerTimer(m)
    with pytest.raises(RuntimeError, match="bad grad"), timer.step():
        m(torch.randn(2, 3)).sum().backward()
    assert _no_global_hooks() and not timer.active and not timer._node_handles


def test_autocast_bf16_on_cpu():
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    timer = LayerTimer(m)
    with timer.step() as s:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = m(torch.randn(4, 8))
        assert out.dtype == torch.bfloat16
        out.float().sum().backward()
    ex = s.timing.exclusive()
    for name in ("0", "1", "2"):
        assert ex[name].fwd_ns > 0 and ex[name].bwd_ns > 0
    assert m[0].weight.grad is not None


def test_depth_and_include_filters():
    clock = Clock()
    net = Net(clock)
    timer = LayerTimer(net, clock_ns=clock, depth=1)
    with timer.step() as s:
        net(torch.randn(2, 3)).sum().backward()
    ex = s.timing.exclusive()
    assert ex["block1"].fwd_ns == 60 and ex["block1"].bwd_ns == 600  # children counted in the block
    assert "block1.a" not in ex

    timer = LayerTimer(net, clock_ns=clock, include=r"\.ds$")
    with timer.step() as s:
        net(torch.randn(2, 3)).sum().backward()
    ex = s.timing.exclusive()
    assert set(ex) == {"block1.ds", "block2.ds", DEFAULT_REGION}
    assert ex["block1.ds"].bwd_ns == 300
    assert ex[DEFAULT_REGION].self_ns == s.timing.duration_ns - 2 * 330

    timer = LayerTimer(net, clock_ns=clock, include=lambda name, mod: isinstance(mod, Block))
    assert {n for n, _d, _q in timer.selected().values()} == {"block1", "block2"}


def test_capture_inputs_as_meta():
    m = nn.Sequential(nn.Linear(3, 5))
    timer = LayerTimer(m, capture_inputs=True)
    with timer.step() as s:
        m(torch.randn(7, 3))
    (x,) = s.timing.inputs["Sequential"]
    assert x.device.type == "meta" and tuple(x.shape) == (7, 3)
    assert s.timing.qualified["Sequential"] == "" and s.timing.qualified["0"] == "0"


def test_capture_inputs_of_a_model_called_inside_its_own_call():
    """Lightning under DDP runs training_step through the module's forward (the batch and its index), and
    training_step calls the model: the inputs to capture are the inner call's."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 5)

        def forward(self, x):
            return self.lin(x)

    m = Net()
    forward = m.forward

    def training_step_through_forward(batch, batch_idx):  # as Lightning's _LightningModuleWrapperBase does
        m.forward = forward
        return m(batch[0]).sum()

    m.forward = training_step_through_forward
    timer = LayerTimer(m, capture_inputs=True)
    with timer.step() as s:
        m((torch.randn(7, 3), torch.zeros(7)), 0)
    (x,) = s.timing.inputs["Net"]
    assert x.device.type == "meta" and tuple(x.shape) == (7, 3)


def test_other_modules_are_ignored_and_steps_do_not_nest():
    m = nn.Linear(2, 2)
    other = nn.Linear(2, 2)
    timer = LayerTimer(m)
    with timer.step() as s:
        other(m(torch.randn(1, 2))).sum().backward()
        with pytest.raises(RuntimeError, match="already"):
            timer.start_step()
    assert {iv.name for iv in s.timing.modules} == {"Linear"}
    with pytest.raises(RuntimeError, match="no step"):
        timer.stop_step()


class _Scaled(nn.Module):
    """``x * w * scale``, then busy for 10 ns forward and 100 ns backward; ``scale`` by keyword or as an attribute."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.w = nn.Parameter(torch.ones(8))
        self.scale = None

    def forward(self, x, scale=None):
        s = self.scale if scale is None else scale
        return _BusyFn.apply(x * self.w * s, self.clock, 10, 100)


class _MakesScale(nn.Module):
    """Runs an op of its own (busy 3 ns forward, 40 ns backward) and hands the result to its child."""

    def __init__(self, clock: Clock, how: str) -> None:
        super().__init__()
        self.clock, self.how = clock, how
        self.gamma = nn.Parameter(torch.ones(8))
        self.child = _Scaled(clock)

    def forward(self, x):
        x = x * 1.0  # the child's input is newer than the scale: a bound taken from its inputs misses the scale
        scale = _BusyFn.apply(self.gamma.exp(), self.clock, 3, 40)
        if self.how == "keyword":
            return self.child(x, scale=scale)
        self.child.scale = scale
        return self.child(x)


@pytest.mark.parametrize("how", ["keyword", "attribute"])
def test_a_node_belongs_to_the_module_call_that_created_it_in_the_timer_and_the_cost_counter(how):
    """One rule (lightning_edge.cost.nodes): an op a parent runs and hands to its child (by keyword, or through an
    attribute) is the parent's in backward as in forward, for the timer's backward time and the cost counter's
    backward FLOP alike. They used to differ: the timer gave the keyword case to the child (its bound saw only
    positional inputs), the counter gave the attribute case to the child (it claimed only the inputs' history)."""
    from lightning_edge.cost import analyze

    clock = Clock()
    net = nn.Sequential(_MakesScale(clock, how))
    with LayerTimer(net, clock_ns=clock).step() as s:
        net(torch.randn(4, 8)).sum().backward()
    ex = s.timing.exclusive()
    assert (ex["0"].fwd_ns, ex["0"].bwd_ns) == (3, 40)
    assert (ex["0.child"].fwd_ns, ex["0.child"].bwd_ns) == (10, 100)
    cost = analyze(nn.Sequential(_MakesScale(Clock(), how)), torch.randn(4, 8), training=True)
    layers = {lc.name: lc for lc in cost.layers}
    assert layers["0"].backward.flops == 8  # exp's backward: grad * exp(gamma)
    assert layers["0.child"].backward.flops == 160
