"""Counting a model's cost at the aten-op level, attributed to the innermost module running it.

How it works:

* The model runs once on the *meta* device through ``torch.func.functional_call`` with meta
  copies of its parameters, buffers and inputs: shapes and dtypes flow, no arithmetic runs and
  no weight is materialised; the model object itself is left as it was (its train/eval flags
  are restored, its parameters are never replaced for longer than the call).
* A ``TorchDispatchMode`` sees every aten op (so functional calls such as ``F.conv2d``,
  ``q @ k.transpose(-1, -2)`` or ``torch.cat`` inside a ``forward`` are counted) and charges it
  to the module on top of a stack kept by forward pre/post hooks on every sub-module.
* Backward ops (``training=True``) are charged through the autograd graph: after each module's
  forward, the autograd nodes it created are recorded as that module's (the rule of
  ``cost/nodes.py``, which the timing hooks share), and during backward the node being executed
  (``torch._C._current_autograd_node()``) says whose gradient is being computed. This is exact
  for residual branches and in-place ops, where a stack of backward hooks is not.
* ``F.scaled_dot_product_attention`` is routed to one fused attention op (as the real backends
  run it) so that forward and backward count one fused kernel each, not the math decomposition.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import Counter

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from lightning_edge._compat import dtype_name, removeprefix
from lightning_edge._torchcompat import (
    META_ARG_CHECKS,
    TorchDispatchMode,
    autocast_on_meta,
    checkpoint_on_meta,
    current_autograd_node,
    force_eager,
    has_aten_op,
    no_cyclic_gc,
    no_torch_function,
    reparametrize,
    run_backward,
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_unflatten,
)
from lightning_edge.cost import nodes
from lightning_edge.cost.capture import (
    Captured,
    CaptureError,
    has_uninitialized_params,
    is_compiled,
    not_captured,
    tensors_of,
    tree_map_tensors,
)
from lightning_edge.cost.formulas import (
    ELEMENTWISE_FLOP,
    is_free,
    numel,
    op_cost,
    op_kernels,
    op_key,
    op_name,
)
from lightning_edge.cost.model_cost import ModelCost
from lightning_edge.cost.ops import BATCH_NORM_OPS, CONV_OPS
from lightning_edge.cost.types import Cost, LayerCost

#: accepted spellings of ``dtype=``
DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp64": torch.float64, "float64": torch.float64, "double": torch.float64,
}


_warned: set[str] = set()
META = torch.device("meta")


def resolve_dtype(dtype) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    key = removeprefix(str(dtype).lower(), "torch.")
    if key not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported: expected one of {sorted(set(DTYPES))} or a torch.dtype")
    return DTYPES[key]


def _to_meta(t: torch.Tensor, dtype: torch.dtype | None, requires_grad: bool = False) -> torch.Tensor:
    dt = dtype if (dtype is not None and t.is_floating_point()) else t.dtype
    return torch.empty(t.shape, dtype=dt, device=META, requires_grad=requires_grad and dt.is_floating_point)


class _Recorder:
    """Shared state of one ``analyze`` run."""

    def __init__(self, model: nn.Module, fold_bn: bool, formulas: dict | None = None, on_op=None):
        self.formulas = formulas or {}  # per-call overrides, keyed by op_key
        self.on_op = on_op  # analyze(on_op=...): sees every counted forward op (latency models' op units)
        self.names: dict[nn.Module, str] = {m: n for n, m in model.named_modules()}
        self.root = model
        self.fold_bn = fold_bn
        self.layers: dict[str, LayerCost] = {}
        self.modules: dict[str, nn.Module] = {}
        self.stack: list[str] = []
        self.marks: list[int] = []  # the autograd sequence number at each stack entry's start
        self.backward = False
        self.suppress = 0
        self.internal = 0  # > 0 while autocast casts an argument: kernels issued from C++, no Python dispatch
        self.node_owner: dict[int, str] = {}
        self._memo: dict[int, tuple] = {}  # cost/nodes.py: claim_nodes' memo, which keeps owned nodes alive
        self.uncounted: Counter = Counter()
        self.counted_ops: set[str] = set()  # layers that got at least one non-free op
        # fold_bn bookkeeping
        self.conv_out: dict[int, tuple[str, torch.Tensor, bool]] = {}
        self.folded: set[str] = set()
        self.extra_params: Counter = Counter()
        self._biased: set[str] = set()
        self._seen_params: set[int] = set()
        # known values: id(meta tensor) -> (the meta tensor, its CPU value) for small integer/bool tensors and
        # what is computed from them alone (masks, positions), so data-dependent Python (``if mask.all():``) runs
        self.values: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.recomputed: set[str] = set()  # layers whose forward ran again inside the backward (checkpointing)
        self.opaque: set[str] = set()  # modules compiled with torch.compile: one layer each, their inside unseen
        # this torch lacks the fused CPU attention op (before 2.2): it is emulated, counted the same
        self.emulate_attention = not has_aten_op(FUSED_ATTENTION_OP)

    # -- module stack -------------------------------------------------------------------
    def layer(self, name: str) -> LayerCost:
        lc = self.layers.get(name)
        if lc is None:
            mod = self.modules.get(name)
            kind = type(mod).__name__ if mod is not None else "(functional)"
            # a tied parameter (shared embedding/decoder) counts once, where first used; a compiled module is one
            # opaque layer and holds every parameter inside it
            own = [] if mod is None else [p for p in mod.parameters(recurse=name in self.opaque)
                                          if id(p) not in self._seen_params]
            self._seen_params.update(id(p) for p in own)
            lc = self.layers[name] = LayerCost(name=name, kind=kind, params=sum(p.numel() for p in own))
        return lc

    def pre_hook(self, module, args, kwargs):
        name = self.names.get(module)
        if name is None:
            return
        self.modules.setdefault(name, module)
        self.stack.append(name)
        self.marks.append(nodes.mark())
        if not self.backward:
            self.layer(name).calls += 1

    def post_hook(self, module, args, output):
        name = self.names.get(module)
        if name is None:
            return
        since = 0
        if name in self.stack:  # on top, or below frames an exception unwound
            i = len(self.stack) - 1 - self.stack[::-1].index(name)
            since = self.marks[i]
            del self.stack[i:], self.marks[i:]
        if torch.is_grad_enabled():  # the autograd nodes this call created are its own (cost/nodes.py)
            nodes.claim_nodes([t.grad_fn for t in tensors_of(output)], since, self.node_owner, name, self._memo)

    def current(self) -> str:
        if self.backward and self.stack:  # a forward recomputed inside the backward (activation checkpointing)
            self.recomputed.add(self.stack[-1])
            return self.stack[-1]
        if self.backward:
            node = current_autograd_node()
            return "" if node is None else self.node_owner.get(id(node), "")
        return self.stack[-1] if self.stack else ""

    # -- ops --------------------------------------------------------------------------------
    def record(self, func, args, kwargs, out) -> None:
        name = op_name(func)
        if self.suppress or is_free(name, args):
            return
        where = self.current()
        if not self.backward and self.fold_bn:
            if name in CONV_OPS and isinstance(out, torch.Tensor):
                bias = args[2] if len(args) > 2 else kwargs.get("bias")
                self.conv_out[id(out)] = (where, out, bias is not None)
            elif name in BATCH_NORM_OPS and args and id(args[0]) in self.conv_out:
                self.fold_into_conv(where, args[0])
                return
        cost = op_cost(func, args, kwargs, out, self.formulas)
        if self.on_op is not None and not self.backward:
            self.on_op(where, name, args, kwargs, out, cost)
        lc = self.layer(where)
        lc.ops[name] += 1
        lc.kernels.update(op_kernels(name, args, kwargs, out, cost, backward=self.backward,
                                     internal=self.internal > 0))
        self.counted_ops.add(where)
        if cost is None:
            self.uncounted[name] += 1
            return
        c = lc.backward if self.backward else lc.forward
        c += Cost(*cost)

    def fold_into_conv(self, bn_layer: str, conv_output: torch.Tensor) -> None:
        """BatchNorm after a convolution: the BN disappears and the conv gains a bias."""
        conv_layer, out, had_bias = self.conv_out[id(conv_output)]
        self.folded.add(bn_layer)
        if had_bias:
            return  # the conv's own bias absorbs the BN shift: nothing more to count
        lc = self.layer(conv_layer)
        c_out = out.shape[1]
        lc.forward.flops += numel(out)  # one bias add per output element
        lc.forward.bytes_read += c_out * out.dtype.itemsize  # the bias vector
        if conv_layer not in self._biased:
            self._biased.add(conv_layer)
            self.extra_params[conv_layer] += c_out


_SCALARS = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


def _signature(obj):
    """A hashable description of an op argument (tensors by shape/stride/dtype), or raise TypeError."""
    if isinstance(obj, torch.Tensor):
        return (obj.shape, obj.stride(), obj.dtype, obj.device.type)
    if isinstance(obj, (list, tuple)):
        return tuple(_signature(o) for o in obj)
    if isinstance(obj, _SCALARS):
        return obj
    raise TypeError


class _CountMode(TorchDispatchMode):
    """Counts every op; also a shape cache in front of the meta kernels.

    Many meta kernels are Python decompositions (~1 ms an element-wise op). An op that returns fresh
    tensors (no aliasing, no mutation) gives the same output shapes for the same input shapes, so
    repeated calls (RNN time steps, repeated blocks) get empty meta tensors of the cached shapes.
    An in-place element-wise op returns its (unchanged) first argument without running its kernel.
    """

    def __init__(self, rec: _Recorder, cache: dict):
        super().__init__()
        self.rec = rec
        self.cache = cache
        self.adopted: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(real tensor) -> (it, its meta twin)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # below the Python API: the function modes (fused attention, autocast) must not see the ops the meta kernels
        # and decompositions call (torch 2.1 hands them garbled arguments)
        with no_torch_function():
            return self._dispatch(func, args, kwargs or {})

    def _dispatch(self, func, args, kwargs):
        tensors = _arg_tensors(args, kwargs)
        if any(t.device.type != "meta" for t in tensors):
            # a real tensor made inside forward without device= (a causal mask on the default device): it joins the
            # meta world, with its value when small
            flat, spec = tree_flatten((args, kwargs))
            flat = [self._adopt(x) for x in flat]
            args, kwargs = tree_unflatten(flat, spec)
            tensors = _arg_tensors(args, kwargs)
        if META_ARG_CHECKS:  # a check this torch's meta kernel skips (torch 2.8: an embedding's float indices)
            check = META_ARG_CHECKS.get(func.overloadpacket)
            if check is not None:
                check(*args, **kwargs)
        if self.rec.values:
            known = self._known(func, args, kwargs, tensors)
            if known is not _UNKNOWN:
                return known
        out = self._fast(func, args, kwargs)
        self.rec.record(func, args, kwargs, out)
        return out

    def _adopt(self, x):
        if not isinstance(x, torch.Tensor) or x.device.type == "meta":
            return x
        hit = self.adopted.get(id(x))
        if hit is not None and hit[0] is x:
            return hit[1]
        m = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=META)
        if x.numel() <= KNOWN_MAX_NUMEL:
            with torch.inference_mode(False):
                self.rec.values[id(m)] = (m, x.detach().clone())
        self.adopted[id(x)] = (x, m)
        return m

    def _known(self, func, args, kwargs, tensors):
        """Run ``func`` on known values when every tensor argument has one (or, for a factory op, none is
        given); the meta result gets the real result's value. Returns ``_UNKNOWN`` otherwise."""
        values = self.rec.values
        if tensors:
            if not all(id(t) in values for t in tensors):
                return _UNKNOWN
        elif kwargs.get("device") != META or not func._schema.returns:
            return _UNKNOWN
        else:  # a factory op (arange, ones, full): only small results get a value
            out = self._fast(func, args, kwargs)
            if not all(isinstance(o, torch.Tensor) and o.numel() <= FACTORY_MAX_NUMEL for o in tree_leaves(out)):
                self.rec.record(func, args, kwargs, out)
                return out

        def real(x):
            if isinstance(x, torch.Tensor):
                return values[id(x)][1]
            if isinstance(x, torch.device) and x.type == "meta":
                return torch.device("cpu")
            return x

        r_args, r_kwargs = tree_map(real, (args, kwargs))
        try:
            r_out = func(*r_args, **r_kwargs)
        except Exception:  # noqa: BLE001 - the value cannot be had: count the op as usual on the meta device
            return _UNKNOWN
        r_flat, spec = tree_flatten(r_out)
        if not any(isinstance(x, torch.Tensor) for x in r_flat):
            return r_out  # a Python scalar (.item(), equal): the real one
        if func._schema.is_mutable or any(r.alias_info is not None for r in func._schema.returns):
            out = self._fast(func, args, kwargs)  # in-place and views: the meta op keeps aliasing right
            outs = tree_leaves(out)
        else:
            outs = [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=META)
                    if isinstance(x, torch.Tensor) else x for x in r_flat]
            out = tree_unflatten(outs, spec)
        for m, v in zip(outs, r_flat):
            if isinstance(m, torch.Tensor) and isinstance(v, torch.Tensor) and v.numel() <= KNOWN_MAX_NUMEL:
                values[id(m)] = (m, v)
        self.rec.record(func, args, kwargs, out)
        return out

    def _fast(self, func, args, kwargs):
        schema = func._schema
        if schema.is_mutable:
            if (args and isinstance(args[0], torch.Tensor) and args[0].device.type == "meta"
                    and _inplace_elementwise(func)):
                return args[0]
            return func(*args, **kwargs)
        cacheable = all(r.alias_info is None for r in schema.returns) and schema.returns
        if not cacheable:
            return func(*args, **kwargs)
        try:
            key = (func, _signature(args), tuple((k, _signature(v)) for k, v in kwargs.items()),
                   torch.get_default_dtype())  # factory ops without dtype= follow it
        except TypeError:
            return func(*args, **kwargs)
        spec = self.cache.get(key)
        if spec is None:
            out = func(*args, **kwargs)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            if all(isinstance(o, torch.Tensor) and o.device.type == "meta" for o in outs):
                self.cache[key] = (isinstance(out, (tuple, list)),
                                   [(o.shape, o.stride(), o.dtype) for o in outs])
            return out
        is_seq, metas = spec
        outs = [torch.empty_strided(sh, st, dtype=dt, device=META) for sh, st, dt in metas]
        return tuple(outs) if is_seq else outs[0]


#: output shapes of meta kernels by (op, argument signature), shared by every analysis in the process (a meta
#: kernel is a pure function of its arguments' shapes, strides, dtypes and scalars): a second analysis of the same
#: model (fit then validate, the tuner and the profiler, a sweep) skips the Python decompositions. Bounded.
_SHAPES: dict = {}
_SHAPES_MAX = 50_000


def _shape_cache() -> dict:
    if len(_SHAPES) > _SHAPES_MAX:
        _SHAPES.clear()
    return _SHAPES


def _arg_tensors(args, kwargs) -> list:
    """The tensors of an aten op's arguments (tensors or lists of tensors; no deeper nesting in aten schemas)."""
    return [b for a in (*args, *kwargs.values()) for b in (a if isinstance(a, (list, tuple)) else (a,))
            if isinstance(b, torch.Tensor)]


_UNKNOWN = object()
#: tensors computed from known values keep theirs up to this many elements
KNOWN_MAX_NUMEL = 1 << 22
#: a factory op on the meta device (``torch.arange(n, device=x.device)``) gets a value up to this many elements
FACTORY_MAX_NUMEL = 1 << 16


def _inplace_elementwise(func) -> bool:
    name = op_name(func)
    return name.endswith("_") and name[:-1] in ELEMENTWISE_FLOP


#: the fused attention op the cost model counts ``F.scaled_dot_product_attention`` as (the CPU flash kernel; its
#: formula is the fused kernel's whatever the backend)
FUSED_ATTENTION_OP = "_scaled_dot_product_flash_attention_for_cpu"


def _fused_sdpa(rec: _Recorder, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
    if not rec.emulate_attention:
        return getattr(torch.ops.aten, FUSED_ATTENTION_OP)(
            query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale
        )[0]
    _check_sdpa_shapes(query, key, value, attn_mask)
    return _EmulatedFusedAttention.apply(rec, query, key, value, attn_mask, float(dropout_p), bool(is_causal), scale)


def _check_sdpa_shapes(q, k, v, mask) -> None:
    """Raise RuntimeError for the shapes the fused kernel refuses (as the real op would)."""
    ok = (all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (q, k, v))
          and q.shape[:2] == k.shape[:2] == v.shape[:2] and k.shape[2] == v.shape[2] and q.shape[3] == k.shape[3])
    if ok and mask is not None:
        try:
            torch.broadcast_shapes(tuple(mask.shape), (q.shape[0], q.shape[1], q.shape[2], k.shape[2]))
        except RuntimeError:
            ok = False
    if not ok:
        raise RuntimeError("shapes the fused attention kernel does not take")


def _like_fused(q: torch.Tensor, last: int) -> torch.Tensor:
    """An empty (batch, heads, length, ``last``) result laid out as the fused CPU kernel lays out its output: in the
    query's layout (``empty_like``), or (batch, length, heads, dim) transposed where the query has none to share."""
    b, h, lq, d = q.shape
    if last == d:
        return torch.empty_like(q)
    return q.new_empty((b, lq, h, last)).transpose(1, 2)


class _EmulatedFusedAttention(torch.autograd.Function):
    """The fused CPU attention op (:data:`FUSED_ATTENTION_OP`) and its backward, emulated where torch lacks it (before
    torch 2.2): the same op names, arguments and results (shapes, dtypes, layouts) as the real meta kernels, recorded
    with the same formulas, so that the counts are those of a newer torch. ``tests/cost/test_attention_emulation.py``
    checks it against the real op on every torch that has one."""

    @staticmethod
    def forward(ctx, rec, q, k, v, mask, dropout_p, is_causal, scale):
        out = _like_fused(q, v.shape[-1])
        lse_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
        # results made from the query (new_empty), never by a factory call: a factory's meta result would get a
        # known value (counter, "known values") that the real kernel's results do not have
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=lse_dtype).transpose(1, 2)
        rec.record(f"aten::{FUSED_ATTENTION_OP}", (q, k, v, dropout_p, is_causal),
                   {"attn_mask": mask, "scale": scale}, (out, lse))
        ctx.rec, ctx.call = rec, (dropout_p, is_causal, scale)
        ctx.save_for_backward(q, k, v, mask if mask is not None else q.new_empty(0), out, lse)
        ctx.has_mask = mask is not None
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, mask, out, lse = ctx.saved_tensors
        dropout_p, is_causal, scale = ctx.call

        def grad_like(t):  # the CPU kernel's gradient layout: (batch, length, heads, dim), transposed
            return t.new_empty((t.shape[0], t.shape[2], t.shape[1], t.shape[3])).transpose(1, 2)

        grads = (grad_like(q), grad_like(k), grad_like(v))
        ctx.rec.record(f"aten::{FUSED_ATTENTION_OP}_backward", (grad_out, q, k, v, out, lse, dropout_p, is_causal),
                       {"attn_mask": mask if ctx.has_mask else None, "scale": scale}, grads)
        return (None, *grads, None, None, None, None)


class _FusedAttentionMode(TorchFunctionMode):
    """Route ``F.scaled_dot_product_attention`` to one fused attention op, as real backends do.

    Grouped-query attention (``enable_gqa=True``: fewer key/value heads than query heads) runs as one fused
    kernel too: the key/value heads are repeated for the fused op without counting the repeat (flash kernels
    index the shared heads; they do not copy them), so the FLOP are those of the query heads, causal pairs
    halved as for plain SDPA."""

    def __init__(self, rec: _Recorder):
        super().__init__()
        self.rec = rec
        self.fallbacks = 0
        self.gqa = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            q = args[0] if args else kwargs.get("query")
            if isinstance(q, torch.Tensor) and q.dim() == 4:
                call = dict(zip(("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                                 "enable_gqa"), args))
                call.update(kwargs)
                try:
                    if call.pop("enable_gqa", False):
                        call["key"], call["value"] = self._repeat_kv(q, call["key"], call["value"])
                        self.gqa += 1
                    return _fused_sdpa(self.rec, **call)
                except (RuntimeError, TypeError, NotImplementedError, KeyError):
                    self.fallbacks += 1  # shapes the fused op does not take: count the math path
        return func(*args, **kwargs)

    def _repeat_kv(self, q, k, v):
        hq, hk = q.shape[-3], k.shape[-3]
        if hk == hq:
            return k, v
        if hk == 0 or hq % hk:
            raise RuntimeError("query heads are not a multiple of key/value heads")
        self.rec.suppress += 1
        try:
            return k.repeat_interleave(hq // hk, dim=-3), v.repeat_interleave(hq // hk, dim=-3)
        finally:
            self.rec.suppress -= 1


def _autocast_functions() -> frozenset:
    """The functions autocast runs in lower precision (torch's autocast "lower_precision_fp" list, at the level
    where models call them)."""
    T = torch.Tensor
    return frozenset({
        F.linear, F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d,
        F.scaled_dot_product_attention, F.bilinear, F.prelu,
        torch.matmul, torch.mm, torch.bmm, torch.baddbmm, torch.addmm, torch.addbmm, torch.addmv, torch.mv,
        torch.einsum, torch.chain_matmul, torch.conv1d, torch.conv2d, torch.conv3d,
        T.matmul, T.__matmul__, T.mm, T.bmm, T.baddbmm, T.addmm, T.addbmm, T.mv, T.addmv,
    })


class _AutocastMode(TorchFunctionMode):
    """Autocast on the meta device (torch's autocast does not act on meta tensors): the functions autocast
    runs in lower precision get their floating-point arguments cast to ``dtype`` (the casts are counted, as
    they run); every other op runs at the dtype of its inputs."""

    def __init__(self, dtype: torch.dtype, rec: _Recorder | None = None):
        super().__init__()
        self.dtype = dtype
        self.rec = rec
        self.functions = _autocast_functions()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.functions:
            dt = self.dtype

            def cast(t):
                if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != dt and t.dtype != torch.float64:
                    if self.rec is None:
                        return t.to(dt)
                    self.rec.internal += 1  # autocast's casts are issued from C++ (KernelCost.internal)
                    try:
                        return t.to(dt)
                    finally:
                        self.rec.internal -= 1
                return t

            args, kwargs = tree_map(cast, (args, kwargs))
            self.calls += 1
        return func(*args, **kwargs)


def analyze(model: nn.Module, *example_inputs, training: bool = False, fold_bn: bool = False,
            dtype=None, autocast=None, formulas: dict | None = None, on_op=None, **example_kwargs) -> ModelCost:
    """Per-layer FLOP, MAC, bytes and arithmetic intensity of ``model(*example_inputs, **example_kwargs)``.

    Nothing real is computed and no weight is materialised: the model runs on the meta device.

    Args:
        model: any ``nn.Module`` (LightningModules included), on any device, meta included.
        example_inputs: inputs for one forward call (their shapes and dtypes are what matter;
            meta tensors are fine), positional and keyword (``analyze(model, **batch)`` for a
            Hugging Face model). Integer and boolean tensors keep their values (token ids, attention
            masks): code that branches on them (``if mask.all():``) runs as it would for real.
        training: also count the backward pass (input and weight gradients), attributed to
            the module whose forward produced them; ``LayerCost.forward/backward`` keep them apart.
            The forward then runs in train mode (BatchNorm batch statistics, dropout). A forward
            recomputed during the backward (activation checkpointing, reentrant or not) counts
            again, in the backward of its layers (``notes`` says so).
        fold_bn: count the model as an inference engine runs it after folding every BatchNorm
            that follows a convolution into it (Pagoda's ONNX convention): the BN disappears and
            the conv gains a bias. Inference only.
        dtype: count the model cast to this floating dtype (``"fp16"``, ``"bf16"``, ``torch.float16``...);
            integer inputs (token ids) keep theirs.
        autocast: count the model as it runs under ``torch.autocast(dtype=autocast)`` (``"bf16"``,
            ``"fp16"``): matmuls, convolutions and attention in that dtype (with their input casts), the rest
            at its inputs' dtype.
        formulas: formulas for this analysis only, ``{op: fn}`` (keys as for
            :func:`~lightning_edge.cost.formulas.register_formula`: ``torch.ops.mylib.mm``, ``"aten::mm"``...),
            tried before the registry.
        on_op: ``on_op(layer, op, args, kwargs, out, cost)`` is called for every counted forward op (views
            and other free ops excluded): the layer it is charged to, the aten op name, its meta arguments and
            output, and its ``(flops, macs, bytes_read, bytes_written)`` or None. The latency models use it to
            split a layer into ops (``lightning_edge.latency.features``).

    Returns:
        a :class:`ModelCost` with one :class:`LayerCost` per module, in execution order.
        A module compiled with ``torch.compile`` is one opaque layer (its inner modules are not
        separated), as the profiler times it; ``notes`` says so.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"analyze() expects a torch.nn.Module, got {type(model).__name__}")
    if training and fold_bn:
        raise ValueError("fold_bn=True describes an inference engine (BatchNorm folded into the conv); "
                         "it cannot be combined with training=True: drop one of them")
    if not example_inputs and not example_kwargs:
        raise ValueError("analyze() needs example inputs: analyze(model, torch.randn(1, 3, 224, 224)) or, for a "
                         "model called with keyword arguments, analyze(model, **batch); zoo models provide them, "
                         "e.g. lightning_edge.zoo.get('resnet50').inputs(batch_size=1)")
    target = resolve_dtype(dtype)
    amp = resolve_dtype(autocast)
    if amp is not None and not amp.is_floating_point:
        raise ValueError(f"autocast must be a floating dtype such as 'bf16' or 'fp16', got {autocast!r}")
    if has_uninitialized_params(model):
        raise ValueError(f"{type(model).__name__} has uninitialized (Lazy) parameters: run one real step first "
                         "(the profiler and the tuner capture the cost after it), then analyze")

    # meta copies of parameters and buffers (tied tensors stay tied)
    memo: dict[int, torch.Tensor] = {}
    state: dict[str, torch.Tensor] = {}
    named = [(n, p, training and p.requires_grad) for n, p in model.named_parameters(remove_duplicate=False)]
    named += [(n, b, False) for n, b in model.named_buffers(remove_duplicate=False)]
    for n, t, grad in named:
        if id(t) not in memo:
            memo[id(t)] = _to_meta(t, target, requires_grad=grad)
        state[n] = memo[id(t)]

    rec = _Recorder(model, fold_bn, {op_key(op): fn for op, fn in (formulas or {}).items()}, on_op)
    opaque = [n for n, m in model.named_modules() if is_compiled(m)]  # compiled with torch.compile
    rec.opaque = set(opaque)
    if opaque:  # the inside of a compiled module is charged to it: one opaque layer
        rec.names = {m: n for m, n in rec.names.items()
                     if not any(n.startswith(p + ".") if p else n != "" for p in opaque)}

    def meta_input(t: torch.Tensor) -> torch.Tensor:
        m = _to_meta(t, target, requires_grad=training and t.requires_grad)
        if t.device.type != "meta" and not t.is_floating_point() and not t.is_complex() \
                and t.numel() <= KNOWN_MAX_NUMEL:
            with torch.inference_mode(False):
                rec.values[id(m)] = (m, t.detach().to("cpu", copy=True))
        return m

    meta_args = tree_map_tensors(meta_input, example_inputs)
    meta_kwargs = tree_map_tensors(meta_input, example_kwargs)

    rec.modules[""] = model
    modes = [(m, m.training) for m in model.modules()]
    handles = []
    attention = _FusedAttentionMode(rec)
    amp_mode = _AutocastMode(amp, rec) if amp is not None else contextlib.nullcontext()
    eager = force_eager() if opaque else contextlib.nullcontext()
    try:
        model.train(training)
        for m in model.modules():
            handles.append(m.register_forward_pre_hook(rec.pre_hook, with_kwargs=True))
            handles.append(m.register_forward_hook(rec.post_hook, always_call=True))
        cache = _shape_cache()
        # the meta parameters stay in place for the backward too: a checkpointed forward is recomputed in it
        # inference_mode (Lightning's eval loops) skips the decompositions the formulas expect: leave it
        with no_cyclic_gc(), reparametrize(model, state), eager, checkpoint_on_meta(), autocast_on_meta(), \
                torch.inference_mode(False), not_captured():
            with torch.set_grad_enabled(training), attention, amp_mode, _CountMode(rec, cache):
                out = model(*meta_args, **meta_kwargs)
            if training:
                outs = [t for t in tensors_of(out) if t.requires_grad]
                if not outs:
                    raise ValueError("training=True but no output of the model requires grad: are all "
                                     "parameters frozen (requires_grad=False)?")
                grads = [torch.ones_like(t) for t in outs]
                rec.backward = True
                with attention, amp_mode, _CountMode(rec, cache):
                    # the engine directly: torch.autograd.backward would pass through the function modes, which
                    # are switched off while they handle a call, and a recomputed forward needs them on
                    run_backward(outs, grads)
    finally:
        for h in handles:
            h.remove()
        for m, flag in modes:
            m.training = flag

    # keep leaves (every layer shows, even at zero cost) and any module that ran ops itself
    layers = []
    for name, lc in rec.layers.items():
        mod = rec.modules.get(name)
        is_leaf = mod is not None and (next(iter(mod.children()), None) is None or name in opaque)
        if name in rec.folded and not lc.ops:
            continue  # a BatchNorm folded away
        if not (is_leaf or name in rec.counted_ops):
            continue
        lc.params += rec.extra_params.get(name, 0)
        layers.append(lc)
    # a module never called whose weights the model still holds (a parent reads them directly: Whisper's positional
    # embedding in transformers 4.x): a zero-cost row, so that the layers' parameters add up to the model's
    uncalled = []
    for name, mod in model.named_modules():
        if name in rec.layers or name in rec.folded or any(name.startswith(p + ".") if p else name for p in opaque):
            continue
        own = [memo[id(p)] for p in mod.parameters(recurse=False) if id(p) in memo]  # as the run saw them
        new = [m for m in own if id(m) not in rec._seen_params]  # a tied weight counts once, where first used
        if new:
            rec._seen_params.update(id(m) for m in new)
            layers.append(LayerCost(name=name, kind=type(mod).__name__, params=sum(m.numel() for m in new)))
            uncalled.append(name)

    if rec.uncounted:
        new = sorted(set(rec.uncounted) - _warned)
        if new:
            _warned.update(new)
            warnings.warn(
                "lightning_edge.analyze: no cost formula for ops "
                + ", ".join(f"{n} (x{rec.uncounted[n]})" for n in new)
                + "; they count as zero and are listed in cost.uncounted",
                stacklevel=2,
            )
    notes = []
    if attention.fallbacks:
        notes.append(f"{attention.fallbacks} attention call(s) counted through the math decomposition "
                     "(shapes the fused kernel does not take)")
    if attention.gqa:
        notes.append(f"{attention.gqa} grouped-query attention call(s) (enable_gqa=True) counted as one fused "
                     "kernel each (FLOP of the query heads, key/value heads shared)")
    if rec.recomputed:
        notes.append(f"activation checkpointing: the forward of {len(rec.recomputed)} layer(s) runs again during "
                     "the backward (recomputed) and is counted there, in their backward cost")
    if opaque:
        notes.append("compiled with torch.compile: " + ", ".join(p or "(root)" for p in opaque)
                     + " counted as one opaque layer each (as the profiler times it)")
    if amp is not None:
        notes.append(f"autocast {dtype_name(amp)}: matmuls, convolutions and attention counted at "
                     f"that dtype ({getattr(amp_mode, 'calls', 0)} call(s), input casts included); other ops at "
                     "their inputs' dtype")
    if fold_bn:
        notes.append(f"{len(rec.folded)} BatchNorm layer(s) folded into the preceding convolution")
    if uncalled:
        notes.append(f"{len(uncalled)} module(s) never called, their parameters read by other code ("
                     + ", ".join(uncalled[:3]) + (", ..." if len(uncalled) > 3 else "") + "): listed at zero cost")
    return ModelCost(
        layers=layers,
        uncounted=rec.uncounted,
        training=training,
        fold_bn=fold_bn,
        dtype=dtype_name(target or _infer_dtype(model)),
        autocast=dtype_name(amp) if amp is not None else None,
        model=type(model).__name__,
        inputs=[tuple(t.shape) for t in tensors_of((example_inputs, example_kwargs))],
        notes=notes,
    )


def _infer_dtype(model: nn.Module) -> torch.dtype:
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.get_default_dtype())


__all__ = ["analyze", "step_cost", "Cost", "LayerCost", "ModelCost"]


def step_cost(model: nn.Module, captured: Captured, *, training: bool | None = None, dtype: torch.dtype | str | None = None,
              strict: bool = False) -> ModelCost:
    """One :class:`~lightning_edge.cost.ModelCost` for the captured step: every call analysed (with a backward
    where it ran with gradients, unless ``training`` says otherwise), layers named as in ``model.named_modules()``
    and summed over calls. Calls that cannot be analysed are named in ``notes``; :class:`CaptureError` when none
    can (or, with ``strict``, when any cannot)."""
    if not captured.calls:
        raise CaptureError(f"no call of {type(model).__name__}'s modules was captured: the cost model needs the "
                           "step to call the model (or one of its submodules)")
    merged: dict[str, LayerCost] = {}
    notes: list[str] = list(captured.notes)
    failed: list[str] = []
    per_module: dict[str, int] = {}
    costs = []
    for call in captured.calls:
        per_module[call.module] = per_module.get(call.module, 0) + 1
        module = model.get_submodule(call.module) if call.module else model
        tr = call.grad if training is None else (training and call.grad)
        try:
            with torch.inference_mode(False):
                cost = analyze(module, *call.args, training=tr, dtype=dtype, autocast=call.autocast, **call.kwargs)
        except Exception as exc:  # noqa: BLE001 - reported, and the other calls still count
            msg = str(exc).splitlines()[0] if str(exc) else ""
            failed.append(f"{call.shown} ({type(exc).__name__}: {msg})")
            if strict:
                raise CaptureError(f"cost model failed on {call.describe()}: {type(exc).__name__}: {msg}") from exc
            continue
        costs.append((call, cost))
        for lc in cost.layers:
            full = f"{call.module}.{lc.name}" if call.module and lc.name else (call.module or lc.name)
            have = merged.setdefault(full, LayerCost(full, lc.kind, lc.params))
            have.forward += lc.forward
            have.backward += lc.backward
            have.calls += lc.calls
            have.ops.update(lc.ops)
            have.kernels.update(lc.kernels)
        for n in cost.notes:
            note = f"{call.shown}: {n}" if call.module else n
            if note not in notes:
                notes.append(note)
    if not costs:
        raise CaptureError("cost model failed on every captured call: " + "; ".join(failed))
    if failed:
        notes.append("no cost model for " + "; ".join(failed) + ": those calls count as zero")
    repeated = {m: n for m, n in per_module.items() if n > 1}
    if repeated:
        notes.append("several calls per step, summed: " + ", ".join(f"{m or '(root)'} x{n}"
                                                                   for m, n in repeated.items()))
    uncounted = sum((c.uncounted for _, c in costs), start=type(costs[0][1].uncounted)())
    first = costs[0][1]
    inputs = [s for call, _ in costs for s in call.shapes()]
    return ModelCost(layers=list(merged.values()), uncounted=uncounted,
                     training=any(c.training for _, c in costs), dtype=first.dtype,
                     model=type(model).__name__, inputs=inputs, notes=notes,
                     autocast=next((c.autocast for _, c in costs if c.autocast), None))
