"""Per-layer timing hooks: every module's forward and backward time, one step at a time.

::

    timer = LayerTimer(model, depth=None, include=None)   # every module; or depth=2, include=r"conv|fc"
    with timer.step() as step:                            # hooks exist only inside the block
        loss = model(x).sum(); loss.backward(); opt.step()
    t = step.timing                                       # StepTiming (after the block)
    t.exclusive()["layer1.0.conv1"].self_ns               # its own time, forward + backward, ns
    t.inclusive()                                         # one Interval per module call and phase

How it times (the ModuleTracker pattern of ``torch/utils/module_tracker.py`` and
``torch/distributed/_tools/mod_tracker.py``, with node-exact backward):

* **Forward**: process-wide forward pre/post hooks (``register_module_forward_pre_hook`` and
  ``register_module_forward_hook(always_call=True)``), filtered to the model's modules by a dict lookup.
  Global hooks rather than one hook per module because they are registered only for the profiled step (one
  registration instead of one per module, and no cost at all on the other steps) and because
  ``always_call=True`` runs the post hook even when a forward raises, so the module stack stays consistent.
* **Backward**: no full backward hooks (they break on in-place ops). After each module's forward, the autograd
  nodes it created (walked back from its outputs, stopping at nodes older by sequence number than the call) are
  recorded as that module's, the innermost one owning them, by the rule the cost counter charges backward FLOP
  with (``lightning_edge/cost/nodes.py``); each owned node gets a pre-hook and a post-hook
  (``Node.register_prehook`` / ``Node.register_hook``), so a backward interval is the node's own execution.
  This is exact across residual branches and in-place ops. Marker pairs from
  ``torch.autograd.graph.register_multi_grad_hook`` ("grads of the outputs arrived" .. "grads of all inputs
  computed"), as ModTracker uses them, are not: a tensor consumed by two branches gets its gradient only when
  both branches are done, so a downsample branch's interval would span the whole main path of its block.
  A container's backward interval is the hull of its own and its descendants' nodes.
* **Self (exclusive) time**: a sweep over the step: a backward node belongs to its owner; elsewhere the
  innermost active module (the latest-started, then the deepest) gets the time; time outside every module goes
  to the current *region* (``"(other)"`` by default; the Lightning callback marks ``"(forward)"``,
  ``"(backward)"``, ``"(optimizer)"``). Self times therefore partition the step: they sum to its duration.
* **Clocks**: on the CPU ``clock_ns`` (``time.perf_counter_ns``, the power sampler's clock). On CUDA every stamp
  is a pooled ``torch.cuda.Event`` and the step is resolved with one ``torch.cuda.synchronize()`` at its end,
  anchored to the host clock at that synchronisation. **The CUDA path is written but has only been exercised
  on the CPU in this repository's tests.**

Handles shared modules (one name, several calls), modules called several times (``call`` index),
exceptions (hooks are always removed), ``torch.no_grad``/``torch.inference_mode`` (forward only), autocast and
``torch.compile``d submodules (timed whole).
"""

from __future__ import annotations

import contextlib
import re
import time
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from lightning_edge._torchcompat import is_compiling, tree_flatten
from lightning_edge.cost.nodes import claim_nodes, mark
from lightning_edge.profiling.trace import mark_step

if TYPE_CHECKING:
    from torch.autograd.graph import Node

    from lightning_edge.cost.capture import CallCapture, Captured

__all__ = ["Interval", "LayerSelf", "LayerTimer", "StepTiming", "exclusive_times", "DEFAULT_REGION"]

#: the region that receives step time spent outside every module when nothing else was marked
DEFAULT_REGION = "(other)"
FWD, BWD = "fwd", "bwd"

# sweep priorities: a backward node's time is exact; then modules (innermost); then regions
_P_REGION, _P_MODULE, _P_NODE = 0, 1, 2


@dataclass(frozen=True)
class Interval:
    """One timed span: a module call (``kind="module"``), one backward node's execution (``"node"``) or a
    region of the step (``"region"``). ``phase`` is ``"fwd"`` or ``"bwd"`` for modules and nodes, the region's
    own phase otherwise; ``call`` numbers the module's forward calls in the step (0, 1, ...); ``depth`` is the
    number of dots in the qualified name plus one (the root is 0, regions -1)."""

    name: str
    phase: str
    t0_ns: int
    t1_ns: int
    call: int = 0
    depth: int = 0
    kind: str = "module"

    @property
    def duration_ns(self) -> int:
        return self.t1_ns - self.t0_ns


@dataclass
class LayerSelf:
    """A layer's exclusive time in one step: ``self_ns`` in total and by phase, and the exact time segments
    (sorted, merged) during which it, and nothing nested in it, was running."""

    name: str
    kind: str
    self_ns: int = 0
    by_phase: dict[str, int] = field(default_factory=dict)
    segments: list[tuple[int, int]] = field(default_factory=list)
    calls: int = 0

    @property
    def self_s(self) -> float:
        return self.self_ns / 1e9

    @property
    def fwd_ns(self) -> int:
        return self.by_phase.get(FWD, 0)

    @property
    def bwd_ns(self) -> int:
        return self.by_phase.get(BWD, 0)


@dataclass
class StepTiming:
    """The raw record of one profiled step (all times in ns on the timer's clock).

    ``modules``: forward intervals (one per module call); ``nodes``: backward node executions with their owner
    (``name``, ``call``) and the owner's ancestors' calls (``chains[i]``); ``regions``: the step's regions, which
    tile ``[t0_ns, t1_ns]``; ``kinds``: module class per name; ``calls``: forward calls per name;
    ``inputs``: the positional inputs of the first outermost call of each module (``{name: (args as meta
    tensors)}``); ``captured``: every outermost call with its keyword arguments
    (:class:`~lightning_edge.cost.capture.Captured`, the cost model's input).
    """

    t0_ns: int
    t1_ns: int
    modules: list[Interval] = field(default_factory=list)
    nodes: list[Interval] = field(default_factory=list)
    chains: list[tuple[tuple[str, int], ...]] = field(default_factory=list)
    regions: list[Interval] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    inputs: dict[str, tuple] = field(default_factory=dict)
    depths: dict[str, int] = field(default_factory=dict)
    qualified: dict[str, str] = field(default_factory=dict)
    device: str = "cpu"
    captured: Captured | None = None  # the step's outermost calls (the cost model's input) when captured
    hook_calls: int = 0
    hook_ns: int = 0  # wall time spent inside the timer's hooks and its start/stop (the timer's own cost)
    _exclusive: dict[str, LayerSelf] | None = field(default=None, repr=False)

    @property
    def duration_ns(self) -> int:
        return self.t1_ns - self.t0_ns

    @property
    def duration_s(self) -> float:
        return self.duration_ns / 1e9

    @property
    def has_backward(self) -> bool:
        """A backward ran in the step: timed nodes, or a backward region (a timer without node hooks)."""
        return bool(self.nodes) or any(r.phase == BWD for r in self.regions)

    def backward_hulls(self) -> list[Interval]:
        """One backward interval per module call that owns (itself or through a descendant) a backward node:
        the hull of those nodes' executions."""
        hull: dict[tuple[str, int], list[int]] = {}
        for iv, chain in zip(self.nodes, self.chains):
            for key in ((iv.name, iv.call), *chain):
                h = hull.get(key)
                if h is None:
                    hull[key] = [iv.t0_ns, iv.t1_ns]
                else:
                    if iv.t0_ns < h[0]:
                        h[0] = iv.t0_ns
                    if iv.t1_ns > h[1]:
                        h[1] = iv.t1_ns
        depths = self.depths
        return [Interval(n, BWD, a, b, c, depths.get(n, _depth(n)), "module") for (n, c), (a, b) in hull.items()]

    def inclusive(self) -> list[Interval]:
        """Every module call's forward interval and backward hull, plus the regions, sorted by start."""
        out = [*self.modules, *self.backward_hulls(), *self.regions]
        out.sort(key=lambda iv: (iv.t0_ns, -iv.t1_ns, iv.depth))
        return out

    def exclusive(self) -> dict[str, LayerSelf]:
        """Self time of every layer and region (sums to the step's duration); cached."""
        if self._exclusive is None:
            self._exclusive = exclusive_times(self.modules, self.backward_hulls(), self.nodes, self.regions,
                                              self.t0_ns, self.t1_ns, self.kinds, self.calls)
        return self._exclusive

    def self_times_s(self) -> dict[str, float]:
        return {k: v.self_s for k, v in self.exclusive().items()}


def _depth(name: str) -> int:
    return 0 if name == "" else name.count(".") + 1


def exclusive_times(modules: Sequence[Interval], hulls: Sequence[Interval], nodes: Sequence[Interval],
                    regions: Sequence[Interval], t0_ns: int, t1_ns: int, kinds: dict[str, str] | None = None,
                    calls: dict[str, int] | None = None) -> dict[str, LayerSelf]:
    """Partition ``[t0_ns, t1_ns]`` among layers: at every instant the winner is a running backward node's owner,
    else the latest-started (then deepest) active module interval, else the latest region. Pure function."""
    kinds = kinds or {}
    calls = calls or {}
    ivs: list[tuple[int, int, int, int, int, str, str]] = []  # t0, t1, prio, start, depth, name, phase
    for iv in regions:
        ivs.append((iv.t0_ns, iv.t1_ns, _P_REGION, iv.t0_ns, -1, iv.name, iv.phase))
    for iv in modules:
        ivs.append((iv.t0_ns, iv.t1_ns, _P_MODULE, iv.t0_ns, iv.depth, iv.name, iv.phase))
    for iv in hulls:
        ivs.append((iv.t0_ns, iv.t1_ns, _P_MODULE, iv.t0_ns, iv.depth, iv.name, iv.phase))
    for iv in nodes:
        ivs.append((iv.t0_ns, iv.t1_ns, _P_NODE, iv.t0_ns, iv.depth, iv.name, iv.phase))
    events: list[tuple[int, int, int]] = []  # time, kind (0 = end first), index
    for i, (a, b, *_rest) in enumerate(ivs):
        a, b = max(a, t0_ns), min(b, t1_ns)
        if b <= a:
            continue
        events.append((a, 1, i))
        events.append((b, 0, i))
    events.sort()
    out: dict[str, LayerSelf] = {}
    active: list[int] = []
    prev = t0_ns
    winner: int | None = None

    def credit(idx: int | None, a: int, b: int) -> None:
        if idx is None:
            name, phase, kind = DEFAULT_REGION, "other", "region"
        else:
            _, _, prio, _, _, name, phase = ivs[idx]
            kind = "region" if prio == _P_REGION else kinds.get(name, "module")
        rec = out.get(name)
        if rec is None:
            rec = out[name] = LayerSelf(name, kind, calls=calls.get(name, 0))
        rec.self_ns += b - a
        rec.by_phase[phase] = rec.by_phase.get(phase, 0) + (b - a)
        if rec.segments and rec.segments[-1][1] == a:
            rec.segments[-1] = (rec.segments[-1][0], b)
        else:
            rec.segments.append((a, b))

    keys = [(iv[2], iv[3], iv[4], j) for j, iv in enumerate(ivs)]  # priority, start, depth, order
    for t, kind, i in events:
        if t > prev:
            credit(winner, prev, t)
            prev = t
        if kind == 1:
            active.append(i)
            if winner is None or keys[i] > keys[winner]:
                winner = i
        else:
            active.remove(i)
            if i == winner:
                winner = max(active, key=keys.__getitem__) if active else None
    if t1_ns > prev:
        credit(winner, prev, t1_ns)
    return out


class _EventPool:
    """Reusable ``torch.cuda.Event(enable_timing=True)`` objects (CUDA path; untested here, see module doc)."""

    def __init__(self) -> None:
        self._free: list[torch.cuda.Event] = []
        self._used: list[torch.cuda.Event] = []

    def record(self) -> torch.cuda.Event:
        ev = self._free.pop() if self._free else torch.cuda.Event(enable_timing=True)
        ev.record()
        self._used.append(ev)
        return ev

    def release(self) -> None:
        self._free.extend(self._used)
        self._used.clear()


Include = Union[str, re.Pattern, typing.Callable[[str, nn.Module], bool], None]  # runtime alias: Python 3.8's typing
#: a time stamp of the step: ``clock_ns()`` on the CPU, a recorded CUDA event on a GPU (resolved at the step's end)
Stamp = Union[int, torch.cuda.Event]  # runtime alias: Python 3.8's typing


class LayerTimer:
    """Times every module of ``model`` (forward and backward), one step at a time; see the module docstring.

    ``LayerTimer(model, depth=None, include=None, clock_ns=time.perf_counter_ns, cuda=None, backward=True,
    root_name=None, capture_inputs=False)``

    - ``depth``: only modules at most this deep (root 0, its children 1, ...); deeper work counts in their
      ancestor at that depth. ``None``: every module.
    - ``include``: a regex (searched in the qualified name) or ``callable(name, module) -> bool``; excluded
      modules' time counts in their nearest included ancestor (or the step's region).
    - ``clock_ns``: the CPU clock (inject a fake one in tests). ``cuda``: ``None`` = auto (the model has CUDA
      parameters), ``True``/``False`` to force the CUDA-event path.
    - ``backward``: also time the backward (node hooks).
    - ``root_name``: the name reported for the root module (default: its class name).
    - ``capture_inputs``: record the outermost module calls of the step, positional and keyword arguments, with the
      shared capture (:class:`~lightning_edge.cost.capture.CallCapture`), so the cost model can be run on exactly
      what ran (``StepTiming.captured``; ``StepTiming.inputs`` keeps the positional ones by name).

    Inside code compiled by ``torch.compile`` the hooks do nothing (Dynamo would trace their bookkeeping): a compiled
    module is timed as one layer, by its outer eager call.
    """

    def __init__(self, model: nn.Module, depth: int | None = None, include: Include = None,
                 clock_ns: Callable[[], int] = time.perf_counter_ns, cuda: bool | None = None,
                 backward: bool = True, root_name: str | None = None, capture_inputs: bool = False) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"LayerTimer needs a torch.nn.Module, got {type(model).__name__}")
        if depth is not None and depth < 0:
            raise ValueError(f"depth must be None or >= 0, got {depth}")
        self.model = model
        self.depth = depth
        self.include = re.compile(include) if isinstance(include, str) else include
        self.clock_ns = clock_ns
        self.cuda = cuda
        self.backward = backward
        self.root_name = root_name or type(model).__name__
        self.capture_inputs = capture_inputs
        self._handles: list[Any] = []
        self._node_handles: list[Any] = []
        self._active = False
        self._pool: _EventPool | None = None
        self.last: StepTiming | None = None
        self._reset()

    # ------------------------------------------------------------------ module selection
    def selected(self) -> dict[nn.Module, tuple[str, int, str]]:
        """``{module: (reported name, depth, qualified name)}`` of the modules this timer hooks (a module
        registered under several names is reported under the first, as ``named_modules`` does)."""
        out: dict[nn.Module, tuple[str, int, str]] = {}
        inc = self.include
        for name, mod in self.model.named_modules():
            d = _depth(name)
            if self.depth is not None and d > self.depth:
                continue
            shown = name or self.root_name
            if inc is not None:
                ok = inc.search(shown) is not None if isinstance(inc, re.Pattern) else bool(inc(shown, mod))
                if not ok:
                    continue
            out[mod] = (shown, d, name)
        return out

    def display_name(self, qualified: str) -> str:
        """The reported name of a module given its qualified name (``""`` is the root)."""
        return qualified or self.root_name

    # ------------------------------------------------------------------ step lifecycle
    def _reset(self) -> None:
        self._mods: dict[nn.Module, tuple[str, int, str]] = {}
        self._stack: list[list] = []  # [name, call, t0, autograd mark, depth]
        self._fwd: list[tuple] = []  # (name, call, t0, t1, depth)
        self._calls: dict[str, int] = {}
        self._owner: dict[int, int] = {}  # id(node) -> its index in _node_meta
        self._memo: dict[int, tuple] = {}  # cost/nodes.py: claim_nodes' memo; keeps owned nodes alive in the step
        self._node_meta: list[tuple[str, int, int, tuple]] = []  # (name, call, depth, chain) per owned node
        self._runs: list[list] = []  # [node index, t0, t1]
        self._open: dict[int, list[int]] = {}
        self._regions: list[list] = []  # [name, phase, t0]
        self._inputs: dict[str, tuple] = {}
        self._capture: CallCapture | None = None  # while capture_inputs
        self._hook_calls = 0
        self._hook_ns = 0
        self._t0: Stamp | None = None
        self._use_cuda = False

    @property
    def active(self) -> bool:
        return self._active

    def _stamp(self) -> Stamp:
        if self._use_cuda:
            assert self._pool is not None
            return self._pool.record()
        return self.clock_ns()

    def start_step(self, region: str = DEFAULT_REGION, phase: str = "other", step_label: str | None = None) -> None:
        """Install the hooks and start a step (prefer ``with timer.step():``). ``step_label``: the step's label, left in a
        running ``torch.profiler``'s trace just before the step's start is read
        (:func:`~lightning_edge.profiling.trace.mark_step`: a merge aligns on it)."""
        if self._active:
            raise RuntimeError("LayerTimer.start_step(): a step is already being timed; call stop_step() first")
        c0 = time.perf_counter_ns()
        self._reset()
        self._mods = self.selected()
        cuda = self.cuda
        if cuda is None:
            p = next(self.model.parameters(), None)
            cuda = bool(p is not None and p.is_cuda)
        self._use_cuda = bool(cuda) and torch.cuda.is_available()
        if self._use_cuda and self._pool is None:
            self._pool = _EventPool()
        self._active = True
        try:
            self._handles.append(register_module_forward_pre_hook(self._pre))
            self._handles.append(register_module_forward_hook(self._post, always_call=True))
            if self.capture_inputs:  # the one shared capture (keyword arguments, no-forward modules)
                from lightning_edge.cost.capture import CallCapture

                self._capture = CallCapture(self.model).start()
        except Exception:
            self._remove_hooks()
            self._active = False
            raise
        if step_label is not None:
            mark_step(step_label)
        self._t0 = self._stamp()
        self._regions.append([region, phase, self._t0])
        self._hook_ns += time.perf_counter_ns() - c0

    def mark(self, region: str, phase: str = "other") -> None:
        """From now on, time outside every module belongs to ``region`` (e.g. ``"(backward)"``)."""
        if self._active:
            self._regions.append([region, phase, self._stamp()])

    def stop_step(self) -> StepTiming:
        """End the step: remove every hook, resolve the clock (one CUDA synchronisation) and return the timing."""
        if not self._active:
            raise RuntimeError("LayerTimer.stop_step(): no step is being timed")
        try:
            t1 = self._stamp()
            c0 = time.perf_counter_ns()
            resolve = self._resolver(t1)
            timing = self._build(resolve, t1)
        finally:
            self._remove_hooks()
            self._active = False
            if self._pool is not None:
                self._pool.release()
            self._memo = {}
        timing.hook_ns = self._hook_ns + time.perf_counter_ns() - c0
        self.last = timing
        return timing

    def abort(self) -> None:
        """Remove the hooks and drop the step (after an exception). Safe to call at any time."""
        self._remove_hooks()
        self._active = False
        if self._pool is not None:
            self._pool.release()
        self._reset()

    @contextlib.contextmanager
    def step(self, region: str = DEFAULT_REGION) -> Iterator[_StepHandle]:
        """``with timer.step() as s: ...``; ``s.timing`` is the :class:`StepTiming` afterwards. On an exception
        the hooks are removed and the step is dropped."""
        handle = _StepHandle(self)
        self.start_step(region)
        try:
            yield handle
        except BaseException:
            self.abort()
            raise
        handle.timing = self.stop_step()

    def _remove_hooks(self) -> None:
        if self._capture is not None:  # the shared capture of the step's inputs ends with the step
            self._capture.stop()
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for h in self._node_handles:
            h.remove()
        self._node_handles.clear()

    def _resolver(self, t_end: Stamp) -> Callable[[Stamp], int]:
        if not self._use_cuda:
            return int
        # CUDA: one synchronisation; every event is placed relative to the last one, anchored at the host time
        # the synchronisation returned (the end event completed at or just before it). UNTESTED on a GPU here.
        torch.cuda.synchronize()
        host_end = int(self.clock_ns())

        def resolve(ev: Stamp) -> int:
            if isinstance(ev, int):
                return ev
            return host_end - int(round(ev.elapsed_time(t_end) * 1e6))

        return resolve

    def _build(self, resolve: Callable[[Stamp], int], t1_raw: Stamp) -> StepTiming:
        t0, t1 = resolve(self._t0), resolve(t1_raw)
        # modules still open (an exception swallowed by the caller): close them at the end of the step
        fwd = list(self._fwd)
        for name, call, a, _mark, depth in self._stack:
            fwd.append((name, call, a, t1_raw, depth))
        modules = [Interval(n, FWD, resolve(a), resolve(b), c, d) for n, c, a, b, d in fwd]
        nodes: list[Interval] = []
        chains: list[tuple] = []
        for idx, a, b in self._runs:
            name, call, depth, chain = self._node_meta[idx]
            nodes.append(Interval(name, BWD, resolve(a), resolve(b if b is not None else t1_raw), call, depth, "node"))
            chains.append(chain)
        regions: list[Interval] = []
        for i, (name, phase, a) in enumerate(self._regions):
            b = self._regions[i + 1][2] if i + 1 < len(self._regions) else t1_raw
            ra, rb = resolve(a), resolve(b)
            if rb > ra:
                regions.append(Interval(name, phase, ra, rb, 0, -1, "region"))
        kinds = {name: type(m).__name__ for m, (name, _d, _q) in self._mods.items()}
        depths = {name: d for name, d, _q in self._mods.values()}
        qualified = {name: q for name, _d, q in self._mods.values()}
        calls = {k: v + 1 for k, v in self._calls.items()}
        captured = None
        if self._capture is not None:  # inputs by reported name, from the shared capture
            captured = self._capture.stop()
            self._capture = None
            for c in captured.calls:
                self._inputs.setdefault(self.display_name(c.module), c.args)
        return StepTiming(t0, t1, modules, nodes, chains, regions, kinds, calls, dict(self._inputs), depths,
                          qualified, "cuda" if self._use_cuda else "cpu", captured, self._hook_calls)

    # ------------------------------------------------------------------ hooks (hot path)
    def _pre(self, mod: nn.Module, args: tuple[Any, ...]) -> None:
        if is_compiling():  # inside torch.compile'd code (the compiled module is timed whole)
            return
        info = self._mods.get(mod)
        if info is None:
            return
        c0 = time.perf_counter_ns()
        self._hook_calls += 1
        name, depth, _q = info
        call = self._calls.get(name, -1) + 1
        self._calls[name] = call
        self._stack.append([name, call, self._stamp(), mark() if self.backward else 0, depth])
        self._hook_ns += time.perf_counter_ns() - c0

    def _post(self, mod: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if is_compiling():  # inside torch.compile'd code: the compiled module is timed whole
            return
        info = self._mods.get(mod)
        if info is None:
            return
        t1 = self._stamp()
        c0 = time.perf_counter_ns()
        try:
            self._post_body(info, t1, output)
        finally:
            self._hook_ns += time.perf_counter_ns() - c0

    def _post_body(self, info: tuple, t1: Stamp, output: Any) -> None:
        name = info[0]
        stack = self._stack
        # pop this module's entry (normally the top; search down after an inconsistency)
        i = len(stack) - 1
        while i >= 0 and stack[i][0] != name:
            i -= 1
        if i < 0:
            return
        entry = stack.pop(i)
        del stack[i:]  # anything opened after it and not closed (exception paths) is dropped
        _, call, t0, since, depth = entry
        self._fwd.append((name, call, t0, t1, depth))
        if output is None or not self.backward or not torch.is_grad_enabled():
            return
        roots = ([output.grad_fn] if isinstance(output, torch.Tensor) else
                 [t.grad_fn for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor)])
        meta_index = len(self._node_meta)
        claimed = claim_nodes(roots, since, self._owner, meta_index, self._memo)  # the nodes this call created
        if claimed:
            self._node_meta.append((name, call, depth, tuple((e[0], e[1]) for e in stack)))
            for node in claimed:
                self._hook_node(node, meta_index)

    def _hook_node(self, node: Node, meta_index: int) -> None:
        runs = self._runs
        opened = self._open
        key = id(node)

        clock = time.perf_counter_ns

        def pre(grad_outputs: tuple[torch.Tensor | None, ...]) -> None:
            c0 = clock()
            runs.append([meta_index, self._stamp(), None])
            opened.setdefault(key, []).append(len(runs) - 1)
            self._hook_ns += clock() - c0

        def post(grad_inputs: tuple[torch.Tensor | None, ...],
                 grad_outputs: tuple[torch.Tensor | None, ...]) -> None:
            t = self._stamp()
            c0 = clock()
            stack = opened.get(key)
            if stack:
                runs[stack.pop()][2] = t
            self._hook_ns += clock() - c0

        self._node_handles.append(node.register_prehook(pre))
        self._node_handles.append(node.register_hook(post))


class _StepHandle:
    """What ``with timer.step() as s`` yields: ``s.timing`` after the block; ``s.mark(region)`` inside it."""

    def __init__(self, timer: LayerTimer) -> None:
        self.timer = timer
        self.timing: StepTiming | None = None

    def mark(self, region: str, phase: str = "other") -> None:
        self.timer.mark(region, phase)
