"""One capture of a model's real calls, for the cost model: the profiler, the tuner and serving all use it.

The cost model (:func:`~lightning_edge.cost.analyze`) needs the inputs of a call. Users call their models in
every way there is: ``model(x)``, ``model(input_ids=..., labels=...)``, ``model(**batch)`` with a dict or a
Hugging Face ``BatchEncoding``, a LightningModule with no ``forward`` whose ``training_step`` calls
``self.encoder(...)`` and ``self.head(...)``, a module called twice a step. Rather than guess inputs from the
batch, :class:`CallCapture` records the *outermost* calls of the model's modules while a real step runs (its
positional and keyword arguments, as meta tensors: shapes and dtypes, no memory), and :func:`~lightning_edge.cost.counter.step_cost`
analyses each call and merges them into one :class:`~lightning_edge.cost.ModelCost` for the step, its layers
named as in ``model.named_modules()``::

    from lightning_edge.cost.capture import CallCapture
    from lightning_edge.cost.counter import step_cost
    with CallCapture(model) as cap:          # hooks only inside the block
        loss = training_step(batch); loss.backward()
    cost = step_cost(model, cap.captured)    # training=True when a call ran with gradients
    cost.notes                               # e.g. "2 calls of 'encoder' per step"

**One capture per module per step, shared**: the profiler, the tuner and the interleaver of one Trainer do not use
this class themselves; they ask the model's shared capture (:func:`lightning_edge.cost.shared.shared_capture`), which
runs one :class:`CallCapture` for all of them and analyses the step once.

What "outermost" means: a call of one of the model's modules made while no other module of the model is
running. With a ``forward``, that is the root (once); without one, the submodules ``training_step`` calls.
A root called inside its own call (DDP runs ``training_step`` through ``forward``) gives the inner call.

Values that decide control flow are kept: integer and boolean tensors (token ids, attention masks, labels)
of at most :data:`VALUE_MAX_NUMEL` elements are kept as CPU copies, so code such as ``if mask.all():`` (Hugging
Face's mask builders) runs on the meta device as it ran for real (see ``counter.py``, "known values").

Tensor trees are walked with ``torch.utils._pytree`` (through ``lightning_edge._torchcompat``: tuples, lists, dicts, namedtuples, ``ModelOutput`` /
``BatchEncoding`` where registered); dataclass batches and mappings that are not registered are walked by
:func:`tree_map_tensors` too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
from torch import nn

from lightning_edge._compat import dtype_name
from lightning_edge._torchcompat import autocast_dtype, current_autograd_node, is_compiling, tree_children

__all__ = [
    "VALUE_MAX_NUMEL", "Call", "Captured", "CallCapture", "CaptureError", "capture", "to_meta",
    "tree_map_tensors", "tensors_of", "has_uninitialized_params", "has_forward",
]

#: integer / bool tensors up to this many elements keep their values in a capture (ids, masks, labels)
VALUE_MAX_NUMEL = 1 << 20
#: calls recorded per capture at most (a loop over a module is summarised by its first calls)
MAX_CALLS = 64


class _Depth(threading.local):
    """How deep this thread is in :func:`not_captured` blocks (0: in none)."""

    depth = 0


_quiet = _Depth()


@contextlib.contextmanager
def not_captured() -> Iterator[None]:
    """Calls made inside this block (``analyze``'s own meta run of a model) are not captured by any
    :class:`CallCapture`: analysing a model during a captured step (the tuner's callback runs inside the profiler's
    step) must not look like another call of it."""
    _quiet.depth += 1
    try:
        yield
    finally:
        _quiet.depth -= 1


class CaptureError(ValueError):
    """No cost model could be had for the captured calls (the message says why, in one line)."""


# ---------------------------------------------------------------------------------------------- tensor trees
def tree_map_tensors(fn: Callable[[torch.Tensor], Any], obj: Any) -> Any:
    """``fn`` applied to every tensor of ``obj`` (pytree containers, plus dataclasses and mappings pytree does not
    know, e.g. a user's batch dataclass or a ``BatchEncoding`` where it is not registered); other values kept."""
    def walk(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return fn(x)
        node = tree_children(x)  # a registered container (tuple, list, dict, namedtuple, ModelOutput...)
        if node is not None:
            children, rebuild = node
            return rebuild([walk(c) for c in children])
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            try:
                return dataclasses.replace(x, **{f.name: walk(getattr(x, f.name)) for f in dataclasses.fields(x)
                                                 if f.init and hasattr(x, f.name)})
            except Exception:  # noqa: BLE001 - a frozen or odd dataclass: a plain dict of its fields
                return {f.name: walk(getattr(x, f.name)) for f in dataclasses.fields(x) if hasattr(x, f.name)}
        if isinstance(x, Mapping):
            items = {k: walk(v) for k, v in x.items()}
            try:
                return type(x)(items)
            except Exception:  # noqa: BLE001 - BatchEncoding and friends take other constructor arguments
                return items
        return x

    return walk(obj)


def tensors_of(obj: Any) -> list[torch.Tensor]:
    """Every tensor in ``obj`` (same walk as :func:`tree_map_tensors`), in order."""
    out: list[torch.Tensor] = []
    tree_map_tensors(out.append, obj)
    return out


def batch_size(batch: Any) -> int | None:
    """The leading dimension of the first tensor of ``batch`` that has one (walked as :func:`tensors_of`), or None.
    Called on every step: tensors, lists, tuples and mappings are walked in place and the walk stops at the first
    answer (same order as :func:`tensors_of`); other containers take the full walk."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if isinstance(batch, (list, tuple, Mapping)):
        for x in batch.values() if isinstance(batch, Mapping) else batch:
            n = batch_size(x)
            if n is not None:
                return n
        return None
    return next((int(t.shape[0]) for t in tensors_of(batch) if t.dim() > 0), None)


def _keeps_values(t: torch.Tensor) -> bool:
    return (not t.is_floating_point() and not t.is_complex() and t.device.type != "meta"
            and t.numel() <= VALUE_MAX_NUMEL)


def to_meta(obj: Any, keep_values: bool = True) -> Any:
    """``obj`` with every tensor replaced by a meta tensor of its shape and dtype; with ``keep_values`` small
    integer/bool tensors become CPU copies instead (their values can decide control flow: attention masks)."""
    def conv(t: torch.Tensor) -> torch.Tensor:
        if keep_values and _keeps_values(t):
            with torch.inference_mode(False):
                return t.detach().to("cpu", copy=True)
        return torch.empty(t.shape, dtype=t.dtype, device="meta")

    return tree_map_tensors(conv, obj)


def has_forward(module: nn.Module | Callable[..., Any]) -> bool:
    """False for a module whose class defines no ``forward`` of its own (``nn.Module``'s and ``LightningModule``'s
    raise): Lightning allows them, their steps call submodules."""
    fwd = getattr(type(module), "forward", None)
    if fwd is None:
        return callable(module)
    owner = getattr(fwd, "__qualname__", "").split(".")[0]
    return owner not in ("Module", "LightningModule")


def has_uninitialized_params(module: nn.Module) -> bool:
    """True while a Lazy module (``LazyLinear``...) has not seen its first input."""
    from torch.nn.parameter import is_lazy

    return any(is_lazy(p) for p in module.parameters()) or any(is_lazy(b) for b in module.buffers())


# ---------------------------------------------------------------------------------------------- records
@dataclass
class Call:
    """One outermost call of one of the model's modules, as it ran.

    ``module``: its qualified name in the model (``""``: the root); ``args`` / ``kwargs``: its arguments, tensors
    as meta tensors (small integer/bool tensors as CPU copies); ``grad``: gradients were enabled (a backward
    follows); ``autocast``: the autocast dtype it ran under (``"bfloat16"``, ``"float16"``) or None."""

    module: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    grad: bool = False
    autocast: str | None = None

    @property
    def shown(self) -> str:
        return self.module or "(root)"

    def shapes(self) -> list[tuple[int, ...]]:
        return [tuple(t.shape) for t in tensors_of((self.args, self.kwargs))]

    def batch_size(self) -> int | None:
        return batch_size((self.args, self.kwargs))

    def describe(self) -> str:
        parts = [_describe(a) for a in self.args] + [f"{k}={_describe(v)}" for k, v in self.kwargs.items()]
        return f"{self.shown}({', '.join(parts)})"

    def resized(self, batch_size: int) -> Call:
        """The same call with the batch dimension (the leading one, where it equals this call's batch size) set to
        ``batch_size``; values kept for integer tensors are repeated/cut to fit."""
        bs = self.batch_size()
        if bs is None or bs == batch_size:
            return self

        def conv(t: torch.Tensor) -> torch.Tensor:
            if t.dim() == 0 or t.shape[0] != bs:
                return t
            if t.device.type == "meta":
                return torch.empty((batch_size, *t.shape[1:]), dtype=t.dtype, device="meta")
            reps = -(-batch_size // bs)
            return t.repeat(reps, *([1] * (t.dim() - 1)))[:batch_size]

        return Call(self.module, tree_map_tensors(conv, self.args), tree_map_tensors(conv, self.kwargs), self.grad,
                    self.autocast)


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"{dtype_name(x.dtype)}{list(x.shape)}"
    ts = tensors_of(x)
    if ts:
        return f"{type(x).__name__}({len(ts)} tensors)"
    r = repr(x)
    return r if len(r) <= 20 else r[:17] + "..."


@dataclass
class Captured:
    """What a :class:`CallCapture` saw: the outermost ``calls`` in order, and ``notes`` (calls beyond
    :data:`MAX_CALLS`)."""

    calls: list[Call] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dropped: int = 0
    module_calls: int = 0  # every call of the model's modules in the step, nested ones included
    hook_ns: int = 0  # wall time spent inside the capture's hooks

    def __bool__(self) -> bool:
        return bool(self.calls)

    @property
    def training(self) -> bool:
        return any(c.grad for c in self.calls)

    def describe(self) -> str:
        if not self.calls:
            return "no call of the model's modules"
        return "; ".join(c.describe() for c in self.calls[:4]) + (
            f"; ... ({len(self.calls) - 4} more)" if len(self.calls) > 4 else "")


# ---------------------------------------------------------------------------------------------- capture
def _autocast_dtype() -> str | None:
    dt = autocast_dtype()
    return dtype_name(dt) if dt is not None else None


class CallCapture:
    """Records the outermost calls of ``model``'s modules while active (see the module docstring).

    ``CallCapture(model, max_calls=64)``; use as a context manager or with :meth:`start` / :meth:`stop`;
    :attr:`captured` holds the result. Per-module hooks (with keyword arguments) exist only while active.
    Calls traced by Dynamo (``torch.compile``) are not recorded from inside the compiled code: a compiled module
    is recorded by its outer, eager call."""

    def __init__(self, model: nn.Module, max_calls: int = MAX_CALLS) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"CallCapture needs a torch.nn.Module, got {type(model).__name__}")
        self.model = model
        self.max_calls = int(max_calls)
        self.captured = Captured()
        self._names: dict[nn.Module, str] = {}
        self._handles: list[Any] = []
        self._depth = 0
        self._open: list[bool] = []
        self._root_open: int | None = None  # index in calls of the root call in progress

    @property
    def active(self) -> bool:
        return bool(self._handles)

    def start(self) -> CallCapture:
        if self.active:
            return self
        self.captured = Captured()
        self._depth = 0
        self._open: list[bool] = []  # per open call: does it count in the depth (not a recompute in the backward)
        self._root_open = None
        self._names = {}
        for name, mod in self.model.named_modules():
            self._names.setdefault(mod, name)
        try:
            for mod in self._names:
                self._handles.append(mod.register_forward_pre_hook(self._pre, with_kwargs=True))
                self._handles.append(mod.register_forward_hook(self._post, always_call=True))
        except Exception:
            self.stop()
            raise
        return self

    def stop(self) -> Captured:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self.captured.dropped:
            self.captured.notes.append(f"{self.captured.dropped} more call(s) in the step were not captured "
                                       f"(at most {self.max_calls})")
        return self.captured

    def __enter__(self) -> CallCapture:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _pre(self, mod: nn.Module, args: tuple, kwargs: dict) -> None:
        if is_compiling():
            return
        c0 = time.perf_counter_ns()
        try:
            self._pre_call(mod, args, kwargs)
        finally:
            self.captured.hook_ns += time.perf_counter_ns() - c0

    def _pre_call(self, mod: nn.Module, args: tuple, kwargs: dict) -> None:
        name = self._names.get(mod)
        if name is None:
            return
        self.captured.module_calls += 1
        if _quiet.depth or current_autograd_node() is not None:
            # analyze's own meta run (not_captured), or a forward recomputed inside the backward (activation
            # checkpointing): part of the calls already captured, whose analysis counts the recomputation
            self._open.append(False)
            return
        self._open.append(True)
        depth = self._depth
        self._depth += 1
        calls = self.captured.calls
        if depth == 0 or (depth == 1 and name == "" and self._root_open is not None):
            call = Call(name, to_meta(tuple(args)), to_meta(dict(kwargs)), torch.is_grad_enabled(), _autocast_dtype())
            if depth == 1:  # the root called inside its own call (DDP's forward -> training_step -> self(x))
                calls[self._root_open] = call
                self._root_open = None
                return
            if len(calls) >= self.max_calls:
                self.captured.dropped += 1
                return
            calls.append(call)
            if name == "":
                self._root_open = len(calls) - 1

    def _post(self, mod: nn.Module, args: tuple, output: Any) -> None:
        if is_compiling():
            return
        c0 = time.perf_counter_ns()
        if mod in self._names and self._open and self._open.pop() and self._depth > 0:
            self._depth -= 1
            if self._depth == 0:
                self._root_open = None
        self.captured.hook_ns += time.perf_counter_ns() - c0


def capture(model: nn.Module, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Captured, Any]:
    """Run ``fn(*args, **kwargs)`` (a step: ``training_step``, ``model(**batch)``...) and capture ``model``'s
    outermost calls; returns ``(captured, fn's result)``."""
    with CallCapture(model) as cap:
        out = fn(*args, **kwargs)
    return cap.captured, out


def is_compiled(module: nn.Module) -> bool:
    """A module compiled with ``torch.compile(module)`` (an ``OptimizedModule``) or ``module.compile()``."""
    return type(module).__name__ == "OptimizedModule" or getattr(module, "_compiled_call_impl", None) is not None


# ---------------------------------------------------------------------------------------------- cost
