"""The formula registry: one pure function of shapes and dtypes per aten op (or op family).

A formula receives the op's positional arguments (tensors are only looked at for ``.shape`` and
``.dtype``; meta tensors are the usual input), its keyword arguments, and ``out`` (the op's
result), and returns an :class:`OpCost`. ``OpCost.bytes_read`` / ``bytes_written`` left as
``None`` mean "the generic rule": every tensor argument is read once and every tensor result
is written once, each at its own element size. Formulas override the rule where an op touches
less (embedding reads only the gathered rows) or different memory (``copy_`` does not read its
destination).

Conventions (docs/cost-model.md has them with a worked example):

* FLOP = 2 x MAC for multiply-accumulates, plus one FLOP per output element for a bias add.
* Element-wise ops cost ``c`` FLOP per output element, with the per-element costs of Pagoda
  (ReLU 1, Sigmoid 4, Tanh 5, HardSigmoid 4, HardSwish 5, SiLU 5, GELU/erf 8, Softmax 7).
* Views and reshapes move nothing and cost nothing (``FREE_OPS``).
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from lightning_edge._compat import dtype_name, removesuffix
from lightning_edge._torchcompat import OpOverload, OpOverloadPacket
from lightning_edge.cost.ops import ATTENTION_OPS
from lightning_edge.cost.types import KernelCost

# --------------------------------------------------------------------------------------------
# helpers


@dataclass
class OpCost:
    """What one call of one op costs. ``None`` bytes mean: apply the generic byte rule."""

    flops: int = 0
    macs: int = 0
    bytes_read: int | None = None
    bytes_written: int | None = None


Formula = typing.Callable[..., OpCost]  # runtime alias: Python 3.8's typing

#: qualified op name (``aten::mm``) or one overload of one (``aten::mm.default``) -> formula
REGISTRY: dict[str, Formula] = {}

#: ops that move no data and do no arithmetic: views, reshapes, allocation without a fill
FREE_OPS = frozenset(
    """
    view _unsafe_view _reshape_alias reshape view_as expand expand_as permute transpose t
    squeeze unsqueeze slice select as_strided alias detach unbind split split_with_sizes
    unsafe_split unsafe_split_with_sizes chunk unsafe_chunk narrow diagonal movedim
    lift_fresh lift_fresh_copy empty empty_like empty_strided new_empty new_empty_strided
    _local_scalar_dense sym_size sym_stride sym_numel sym_storage_offset set_ resize_
    is_same_size _has_compatible_shallow_copy_type item dim size stride numel
    _nested_tensor_from_mask_left_aligned resolve_conj resolve_neg _conj _neg_view
    view_as_real view_as_complex unflatten flatten _unsafe_index_put
    """.split()
)

def is_free(name: str, args: tuple) -> bool:
    """Whether one call of ``name`` moves nothing: a view or reshape (:data:`FREE_OPS`), or the gradient of a slice
    that kept its whole input (``x[:, :n]`` with ``n`` the full length: torch before 2.6 runs ``slice_backward`` for
    it, a full-size copy; later ones pass the gradient through), so that a model counts the same on every torch."""
    if name in FREE_OPS or name.startswith("profiler::"):  # record_function's markers (Lightning's PyTorchProfiler)
        return True
    if name == "slice_backward" and len(args) > 1 and isinstance(args[0], torch.Tensor):
        return tuple(args[0].shape) == tuple(int(s) for s in args[1])
    return False


def _split(text: str) -> tuple[str, str, str]:
    """``"ns::name.overload"`` -> (ns, name, overload); a bare ``"name"`` is aten's."""
    ns, _, rest = text.rpartition("::")
    name, _, overload = rest.partition(".")
    return ns or "aten", name, overload


def op_key(op) -> str:
    """The registry key of ``op``: an op overload packet (``torch.ops.aten.mm``, ``torch.ops.mylib.mm``), one
    overload (``torch.ops.aten.mm.default``), or its qualified name (``"aten::mm"``, ``"mylib::mm.default"``; a
    bare name is aten's). Raises ``ValueError`` when torch knows no such op."""
    if isinstance(op, OpOverload):
        ns, name = op._schema.name.split("::", 1)
        return f"{ns}::{name}.{op._overloadname}"
    if isinstance(op, OpOverloadPacket):
        return op._qualified_op_name
    if not isinstance(op, str) or not op:
        raise ValueError(f"a formula is registered for an op: torch.ops.<namespace>.<name>[.<overload>] or its "
                         f"name 'namespace::name[.overload]', got {op!r}")
    ns, name, overload = _split(op)
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        if overload:
            getattr(packet, overload)
    except (AttributeError, RuntimeError):
        raise ValueError(f"no op {ns}::{name}{'.' + overload if overload else ''} is registered with torch: check "
                         f"the name (torch.ops.{ns}.{name}), or define the op (torch.library) before registering "
                         "its formula") from None
    return f"{ns}::{name}" + (f".{overload}" if overload else "")


def register_formula(op, fn: Formula | None = None, *, override: bool = False):
    """Register ``fn`` as the formula of ``op`` (see :func:`op_key`); a decorator when ``fn`` is not given.

    ``fn(*args, out=..., **kwargs) -> OpCost`` receives the op's arguments and its result (meta tensors: look at
    shapes and dtypes only). A formula for a packet (``torch.ops.mylib.mm``) counts every overload and the in-place
    variant (``mylib::mm_``) unless those have their own; one for an overload (``torch.ops.mylib.mm.default``)
    counts that overload only. Replacing a formula needs ``override=True``; for one analysis only, pass
    ``analyze(..., formulas={op: fn})`` instead."""
    key = op_key(op)

    def deco(f: Formula) -> Formula:
        if key in REGISTRY and not override:
            raise ValueError(f"{key} already has a formula ({REGISTRY[key].__name__}): pass override=True to "
                             "replace it, or analyze(..., formulas={op: fn}) for one analysis")
        REGISTRY[key] = f
        return f

    return deco if fn is None else deco(fn)


#: every aten op name a built-in formula is written for, whether or not the running torch has it (tests check
#: each against the op names of every supported torch: a misspelling is caught there, not at a user's import)
BUILTIN_OPS: set[str] = set()
#: built-in formulas for ops the running torch does not have (an op of a newer or older torch), by op name: never
#: looked up, since this torch cannot dispatch them; ``lightning_edge.analyze`` works the same without them
ABSENT_OPS: dict[str, Formula] = {}


def register(*names: str) -> Callable[[Formula], Formula]:
    """Register ``fn`` as the formula of the aten ops called ``names`` (the built-in formulas). An op the running
    torch lacks (``_fused_rms_norm`` before torch 2.8, ``_scaled_dot_product_flash_attention_for_cpu`` before
    2.2...) is set aside in :data:`ABSENT_OPS`, never an error: the formulas cover every supported torch at once."""

    def deco(fn: Formula) -> Formula:
        for n in names:
            BUILTIN_OPS.add(n)
            try:
                register_formula(n, fn)
            except ValueError:
                if f"aten::{n}" in REGISTRY:  # registered twice: a real mistake, whatever torch runs
                    raise
                ABSENT_OPS[n] = fn
        return fn

    return deco


def op_name(func) -> str:
    """How an op is named in costs: ``aten.add_.Tensor`` -> ``add_``; another namespace's op keeps its namespace
    (``mylib::mm``), so that it is never mistaken for aten's. A qualified name (``"aten::mm"``) is taken as given
    (an op the counter emulates on a torch that lacks it)."""
    name = func if isinstance(func, str) else func._schema.name
    return name[6:] if name.startswith("aten::") else name


def _keys(op) -> list[str]:
    """Registry keys to try for ``op`` (an OpOverload, or a name as :func:`op_name` gives it), most specific first;
    an in-place ``op_`` falls back to ``op``'s formula."""
    if isinstance(op, OpOverload):
        ns, name = op._schema.name.split("::", 1)
        keys = [f"{ns}::{name}.{op._overloadname}", f"{ns}::{name}"]
    else:
        ns, name, overload = _split(op)
        keys = ([f"{ns}::{name}.{overload}"] if overload else []) + [f"{ns}::{name}"]
    if name.endswith("_") and not name.endswith("__"):
        keys.append(f"{ns}::{name[:-1]}")
    return keys


def lookup(op, formulas: dict[str, Formula] | None = None) -> Formula | None:
    """The formula for ``op`` (an OpOverload or an op name): ``formulas`` (keyed by :func:`op_key`) first, then
    the registry; None when there is none."""
    for key in _keys(op):
        fn = (formulas or {}).get(key) or REGISTRY.get(key)
        if fn is not None:
            return fn
    if isinstance(op, str):  # an op this torch lacks, emulated by the counter (fused attention before torch 2.2)
        ns, name, _ = _split(op)
        return ABSENT_OPS.get(name) if ns == "aten" else None
    return None


def numel(t) -> int:
    return math.prod(t.shape)


def nbytes(t) -> int:
    """Bytes of a tensor's own elements (a view counts its own size, not its storage's)."""
    return math.prod(t.shape) * t.dtype.itemsize


def tensors_in(obj) -> Iterable[torch.Tensor]:
    """Tensors in an argument (a tensor, or a list/tuple of them, nested)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from tensors_in(o)


def sum_bytes(obj) -> int:
    return sum(nbytes(t) for t in tensors_in(obj))


def _first_tensor(obj) -> torch.Tensor | None:
    return next(iter(tensors_in(obj)), None)


# --------------------------------------------------------------------------------------------
# matrix products


@register("mm", "bmm")
def mm_cost(a, b, *args, out=None, **kwargs) -> OpCost:
    # (M, K) @ (K, N): M*K*N MAC; batched, (B, M, K) @ (B, K, N): B*M*K*N MAC
    macs = math.prod(a.shape) * b.shape[-1]
    return OpCost(flops=2 * macs, macs=macs)


@register("addmm", "baddbmm")
def addmm_cost(bias, a, b, *args, out=None, beta=1, **kwargs) -> OpCost:
    # bias + (M, K) @ (K, N): M*K*N MAC, plus M*N bias adds (batched: B times both)
    macs = math.prod(a.shape) * b.shape[-1]
    return OpCost(flops=2 * macs + (math.prod(a.shape[:-1]) * b.shape[-1] if beta != 0 else 0), macs=macs)


@register("linear")
def linear_cost(x, w, bias=None, *args, out=None, **kwargs) -> OpCost:
    # x (..., K) @ w^T (K, N): rows*K*N MAC, plus rows*N bias adds (seen when linear is not decomposed)
    rows = math.prod(x.shape[:-1])
    n, k = w.shape
    macs = rows * k * n
    return OpCost(flops=2 * macs + (rows * n if bias is not None else 0), macs=macs)


@register("dot", "vdot", "mv")
def dot_cost(a, b, *args, out=None, **kwargs) -> OpCost:
    # every element of a (the vector, or the matrix of mv) meets one element of b
    macs = numel(a)
    return OpCost(flops=2 * macs, macs=macs)


@register("addmv")
def addmv_cost(bias, a, v, *args, out=None, **kwargs) -> OpCost:
    macs = numel(a)
    return OpCost(flops=2 * macs + a.shape[0], macs=macs)


# --------------------------------------------------------------------------------------------
# convolution


def conv_macs(x_shape, w_shape, out_shape, transposed: bool) -> int:
    """MACs of a (possibly grouped, dilated, strided, transposed) convolution.

    Every weight element meets every output position of its group once: for a forward
    convolution ``weight = (C_out, C_in/groups, *k)`` and MAC = N * prod(out spatial) * numel(weight).
    A transposed convolution scatters every *input* position: weight = (C_in, C_out/groups, *k)
    and MAC = N * prod(in spatial) * numel(weight).
    """
    n = x_shape[0]
    spatial = x_shape[2:] if transposed else out_shape[2:]
    return n * math.prod(spatial) * math.prod(w_shape)


@register("convolution", "_convolution", "conv1d", "conv2d", "conv3d", "cudnn_convolution",
          "mkldnn_convolution", "convolution_overrideable")
def convolution_cost(x, w, bias=None, stride=None, padding=None, dilation=None, transposed=False,
                     *args, out=None, **kwargs) -> OpCost:
    # the conv1d/2d/3d names take (x, w, bias, stride, padding, dilation, groups): no transposed flag
    transposed = bool(transposed) if isinstance(transposed, bool) else False
    macs = conv_macs(x.shape, w.shape, out.shape, transposed)
    flops = 2 * macs + (numel(out) if bias is not None else 0)
    return OpCost(flops=flops, macs=macs)


@register("convolution_backward")
def convolution_backward_cost(grad_out, x, w, bias_sizes, stride, padding, dilation, transposed,
                              output_padding, groups, output_mask, *args, out=None, **kwargs) -> OpCost:
    # grad_input = conv_transpose(grad_out, w): as many MAC as the forward, when asked for;
    # grad_weight = conv(x, grad_out): as many MAC as the forward, when asked for;
    # grad_bias = grad_out summed over N and spatial: numel(grad_out) adds.
    fwd_macs = conv_macs(x.shape, w.shape, grad_out.shape, bool(transposed))
    macs = fwd_macs * (int(bool(output_mask[0])) + int(bool(output_mask[1])))
    flops = 2 * macs + (numel(grad_out) if output_mask[2] else 0)
    # reads grad_out always, the weight for the input gradient, the input for the weight gradient
    read = nbytes(grad_out) + (nbytes(w) if output_mask[0] else 0) + (nbytes(x) if output_mask[1] else 0)
    return OpCost(flops=flops, macs=macs, bytes_read=read)


# --------------------------------------------------------------------------------------------
# attention


def _causal_pairs(lq: int, lk: int) -> int:
    """(query, key) pairs kept by torch's causal mask (top-left aligned: query i sees keys <= i)."""
    full_rows = max(0, lq - lk)  # rows i >= lk see all lk keys
    partial = min(lq, lk)        # rows 0..partial-1 see i+1 keys
    return partial * (partial + 1) // 2 + full_rows * lk


def sdpa_shapes(q, k, v, is_causal: bool) -> tuple[int, int, int]:
    """(batch*heads, query-key pairs per batch-head, head dims (dq, dv)) of an attention call."""
    *batch, lq, dq = q.shape
    lk = k.shape[-2]
    dv = v.shape[-1]
    bh = math.prod(batch)
    pairs = _causal_pairs(lq, lk) if is_causal else lq * lk
    return bh, pairs, (dq, dv)


#: softmax per element, as in Pagoda (max, sub, exp, sum, div, ...)
SOFTMAX_FLOP = 7


def sdpa_forward_cost(q, k, v, is_causal: bool) -> OpCost:
    # S = Q K^T (pairs*dq MAC), P = softmax(S * scale) (1 + 7 FLOP a pair), O = P V (pairs*dv MAC)
    bh, pairs, (dq, dv) = sdpa_shapes(q, k, v, is_causal)
    macs = bh * pairs * (dq + dv)
    return OpCost(flops=2 * macs + bh * pairs * (1 + SOFTMAX_FLOP), macs=macs)


def sdpa_backward_macs(q, k, v, is_causal: bool) -> int:
    # recompute S = Q K^T; dV = P^T dO; dP = dO V^T; dQ = dS K; dK = dS^T Q  (as torch's counter)
    bh, pairs, (dq, dv) = sdpa_shapes(q, k, v, is_causal)
    return bh * pairs * (3 * dq + 2 * dv)


@register("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
          "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
          "_scaled_dot_product_fused_attention_overrideable")
def sdpa_cost(q, k, v, *args, out=None, is_causal=False, **kwargs) -> OpCost:
    # positional is_causal sits after dropout_p for flash/_for_cpu; after attn_bias/compute_lse for the others
    causal = bool(is_causal) or any(a is True for a in args[:3] if isinstance(a, bool))
    return sdpa_forward_cost(q, k, v, causal)


@register("_scaled_dot_product_flash_attention_for_cpu_backward",
          "_scaled_dot_product_flash_attention_backward",
          "_scaled_dot_product_efficient_attention_backward",
          "_scaled_dot_product_cudnn_attention_backward",
          "_scaled_dot_product_fused_attention_overrideable_backward")
def sdpa_backward_cost(grad_out, q, k, v, *args, out=None, is_causal=False, **kwargs) -> OpCost:
    causal = bool(is_causal) or any(a is True for a in args if isinstance(a, bool))
    macs = sdpa_backward_macs(q, k, v, causal)
    bh, pairs, _ = sdpa_shapes(q, k, v, causal)
    # softmax backward: dS = P * (dP - rowsum(dO * O)): 4 FLOP a pair
    return OpCost(flops=2 * macs + 4 * bh * pairs, macs=macs)


# --------------------------------------------------------------------------------------------
# element-wise


#: FLOP per output element. Activations follow Pagoda; plain arithmetic is 1.
ELEMENTWISE_FLOP: dict[str, int] = {
    # arithmetic
    "add": 1, "sub": 1, "rsub": 1, "mul": 1, "div": 1, "neg": 1, "abs": 1, "reciprocal": 1,
    "remainder": 1, "fmod": 1, "floor_divide": 1, "maximum": 1, "minimum": 1, "sign": 1,
    "square": 1, "addcmul": 2, "addcdiv": 2, "lerp": 2, "where": 1, "masked_fill": 1,
    "clamp": 1, "clamp_min": 1, "clamp_max": 1, "round": 1, "floor": 1, "ceil": 1, "trunc": 1,
    "eq": 1, "ne": 1, "lt": 1, "le": 1, "gt": 1, "ge": 1, "logical_not": 1, "logical_and": 1,
    "logical_or": 1, "bitwise_and": 1, "bitwise_or": 1, "bitwise_not": 1, "isnan": 1,
    # transcendental (one FLOP each, as hardware special-function units do)
    "exp": 1, "exp2": 1, "expm1": 1, "log": 1, "log2": 1, "log1p": 1, "sqrt": 1, "rsqrt": 1,
    "pow": 1, "sin": 1, "cos": 1,
    # activations (Pagoda's per-element costs)
    "relu": 1, "threshold": 1, "hardtanh": 1, "relu6": 1, "leaky_relu": 1, "prelu": 1,
    "_prelu_kernel": 1, "elu": 4,
    "sigmoid": 4, "tanh": 5, "hardsigmoid": 4, "hardswish": 5, "silu": 5, "mish": 8,
    "gelu": 8, "erf": 8, "softplus": 4, "log_sigmoid_forward": 5,
    # activation gradients (ours: the derivative's arithmetic times the incoming gradient)
    "threshold_backward": 1, "hardtanh_backward": 1, "leaky_relu_backward": 1,
    "sigmoid_backward": 3, "tanh_backward": 3, "hardsigmoid_backward": 2,
    "hardswish_backward": 4, "silu_backward": 8, "gelu_backward": 14, "elu_backward": 4,
    "softplus_backward": 5, "mish_backward": 12,
    # dropout: mask draw + scale
    "native_dropout": 2, "native_dropout_backward": 2, "bernoulli": 1,
}


def _elementwise(per_element: int) -> Formula:
    def cost(*args, out=None, **kwargs) -> OpCost:
        t = _first_tensor(out)
        n = numel(t) if t is not None else 0
        return OpCost(flops=per_element * n)

    cost.__name__ = f"elementwise_{per_element}_flop"
    return cost


for _name, _c in ELEMENTWISE_FLOP.items():
    register(_name)(_elementwise(_c))


@register("_softmax", "_log_softmax", "_safe_softmax", "softmax", "log_softmax")
def softmax_cost(x, *args, out=None, **kwargs) -> OpCost:
    return OpCost(flops=SOFTMAX_FLOP * numel(x))


@register("_softmax_backward_data", "_log_softmax_backward_data")
def softmax_backward_cost(grad_out, y, *args, out=None, **kwargs) -> OpCost:
    # grad_in = y * (g - sum(g * y)): mul, sum, sub, mul
    return OpCost(flops=4 * numel(y))


# --------------------------------------------------------------------------------------------
# normalisation

#: FLOP per element. Inference BN: (x - mean) * invstd * gamma + beta. Training BN / LN / GN
#: also computes the mean (1) and the variance (3) of what it normalises.
NORM_FLOP_INFER = 4
NORM_FLOP_TRAIN = 8
NORM_BACKWARD_FLOP = 10


@register("native_batch_norm", "_native_batch_norm_legit", "batch_norm", "cudnn_batch_norm",
          "miopen_batch_norm", "_batch_norm_with_update", "_batch_norm_no_update",
          "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training")
def batch_norm_cost(x, weight=None, bias=None, running_mean=None, running_var=None, training=None,
                    *args, out=None, **kwargs) -> OpCost:
    # _native_batch_norm_legit[_functional](x, w, b, rm, rv, training, ...) and native_batch_norm(x, w, b, rm, rv,
    # training, ...); _native_batch_norm_legit_no_training(x, w, b, rm, rv, momentum, eps) has no training flag
    train = bool(training) if isinstance(training, bool) else False
    per = NORM_FLOP_TRAIN if train else NORM_FLOP_INFER
    return OpCost(flops=per * numel(x))


@register("native_layer_norm", "native_group_norm", "_fused_rms_norm", "layer_norm", "group_norm")
def layer_norm_cost(x, *args, out=None, **kwargs) -> OpCost:
    return OpCost(flops=NORM_FLOP_TRAIN * numel(x))


@register("native_batch_norm_backward", "batch_norm_backward", "cudnn_batch_norm_backward",
          "native_layer_norm_backward", "native_group_norm_backward", "_fused_rms_norm_backward")
def norm_backward_cost(grad_out, x, *args, out=None, **kwargs) -> OpCost:
    return OpCost(flops=NORM_BACKWARD_FLOP * numel(x))


# --------------------------------------------------------------------------------------------
# pooling and reductions


def _kernel_area(kernel_size, dims: int) -> int:
    ks = list(kernel_size) if isinstance(kernel_size, (list, tuple)) else [kernel_size]
    if len(ks) == 1:
        ks = ks * dims
    return math.prod(ks)


@register("max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
          "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
          "mkldnn_max_pool2d")
def pool_cost(x, kernel_size, *args, out=None, **kwargs) -> OpCost:
    # one comparison (max) or add (avg) per window element of every output
    o = _first_tensor(out)
    dims = max(1, len(o.shape) - 2)
    return OpCost(flops=numel(o) * _kernel_area(kernel_size, dims))


@register("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward",
          "avg_pool2d_backward", "avg_pool3d_backward", "_adaptive_avg_pool2d_backward",
          "_adaptive_avg_pool3d_backward", "adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward")
def pool_backward_cost(grad_out, x, *args, out=None, **kwargs) -> OpCost:
    # scatter-add of every output gradient into the input gradient (written whole)
    return OpCost(flops=numel(x))


@register("upsample_nearest1d_backward", "upsample_nearest2d_backward", "upsample_nearest3d_backward",
          "upsample_bilinear2d_backward", "upsample_bicubic2d_backward", "upsample_linear1d_backward")
def upsample_backward_cost(grad_out, *args, out=None, **kwargs) -> OpCost:
    # every output gradient is added into the input position(s) it came from
    return OpCost(flops=numel(grad_out))


@register("_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
          "adaptive_max_pool2d", "adaptive_max_pool1d", "adaptive_max_pool3d")
def adaptive_pool_cost(x, *args, out=None, **kwargs) -> OpCost:
    # every input element is added (or compared) once; one division per output (avg)
    return OpCost(flops=numel(x) + numel(_first_tensor(out)))


@register("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "any", "all",
          "logsumexp", "linalg_vector_norm", "norm", "cumsum", "nansum", "count_nonzero")
def reduction_cost(x, *args, out=None, **kwargs) -> OpCost:
    # one FLOP per input element (an add or a compare); max(a, b) of two tensors: one per element too
    return OpCost(flops=numel(x))


@register("var", "std", "var_mean", "std_mean")
def variance_cost(x, *args, out=None, **kwargs) -> OpCost:
    # mean (1), then sub, square, add (3) per element
    return OpCost(flops=4 * numel(x))


# --------------------------------------------------------------------------------------------
# gathers, scatters, embedding


@register("embedding")
def embedding_cost(weight, indices, *args, out=None, **kwargs) -> OpCost:
    # reads the indices and only the gathered rows, writes them: no arithmetic
    return OpCost(bytes_read=nbytes(indices) + nbytes(out), bytes_written=nbytes(out))


@register("embedding_dense_backward", "embedding_backward")
def embedding_backward_cost(grad_out, indices, num_weights, *args, out=None, **kwargs) -> OpCost:
    # zero the weight gradient, then scatter-add every row of grad_out into it
    return OpCost(flops=numel(grad_out), bytes_read=nbytes(grad_out) + nbytes(indices),
                  bytes_written=nbytes(out) + nbytes(grad_out))


@register("index_select", "gather", "index", "take_along_dim")
def gather_cost(x, *args, out=None, **kwargs) -> OpCost:
    o = _first_tensor(out)
    idx = sum(nbytes(t) for t in tensors_in(args))
    return OpCost(bytes_read=idx + nbytes(o), bytes_written=nbytes(o))


@register("scatter", "scatter_add", "index_add", "index_put", "index_copy", "index_fill",
          "scatter_reduce", "masked_scatter", "_index_put_impl")
def scatter_cost(x, *args, out=None, **kwargs) -> OpCost:
    src = sum(numel(t) for t in tensors_in(args))
    return OpCost(flops=src)


# --------------------------------------------------------------------------------------------
# data movement: copies, concatenation, fills


@register("cat", "stack", "clone", "_to_copy", "contiguous", "to", "_copy_from",
          "_copy_from_and_resize", "constant_pad_nd", "reflection_pad2d", "replication_pad2d",
          "repeat", "roll", "flip", "tril", "triu", "pixel_shuffle", "pixel_unshuffle", "upsample_nearest2d",
          "upsample_bilinear2d", "col2im", "im2col", "topk", "sort",
          # gradients of views and slicing: write the full-size gradient, copy the slice in
          "slice_backward", "select_backward", "diagonal_backward", "unfold_backward", "as_strided_scatter",
          "slice_scatter", "select_scatter")
def copy_cost(*args, out=None, **kwargs) -> OpCost:
    # pure data movement: generic rule (read the inputs, write the outputs), no arithmetic
    return OpCost()


@register("copy")
def inplace_copy_cost(dst, src, *args, out=None, **kwargs) -> OpCost:
    # dst.copy_(src): reads src, writes dst (does not read dst)
    return OpCost(bytes_read=nbytes(src), bytes_written=nbytes(dst))


@register("fill", "zero", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "new_zeros",
          "new_ones", "new_full", "scalar_tensor", "arange", "linspace", "normal", "uniform",
          "rand", "randn", "randint", "rand_like", "randn_like")
def fill_cost(*args, out=None, **kwargs) -> OpCost:
    # writes its result, reads nothing (a fill_ of a tensor does not read it)
    return OpCost(bytes_read=0)


# --------------------------------------------------------------------------------------------
# losses (rarely inside a model, but LightningModules compute them in forward)


@register("nll_loss_forward", "nll_loss2d_forward", "mse_loss", "l1_loss", "smooth_l1_loss",
          "binary_cross_entropy", "binary_cross_entropy_with_logits", "huber_loss")
def loss_cost(x, *args, out=None, **kwargs) -> OpCost:
    return OpCost(flops=2 * numel(x))


@register("nll_loss_backward", "nll_loss2d_backward", "mse_loss_backward",
          "smooth_l1_loss_backward", "binary_cross_entropy_backward", "huber_loss_backward")
def loss_backward_cost(grad_out, x, *args, out=None, **kwargs) -> OpCost:
    return OpCost(flops=2 * numel(x))


# --------------------------------------------------------------------------------------------


def op_cost(op, args: tuple, kwargs: dict, out, formulas: dict[str, Formula] | None = None,
            ) -> tuple[int, int, int, int] | None:
    """(flops, macs, bytes_read, bytes_written) of one call of ``op`` (an OpOverload or an op name), or None when
    no formula exists (``formulas``: per-call overrides, keyed by :func:`op_key`)."""
    fn = lookup(op, formulas)
    if fn is None:
        return None
    c = fn(*args, out=out, **kwargs)
    read = sum_bytes(args) + sum(sum_bytes(v) for v in kwargs.values()) if c.bytes_read is None else c.bytes_read
    written = sum_bytes(out) if c.bytes_written is None else c.bytes_written
    return c.flops, c.macs, read, written


def _dtype_of(out, args) -> str:
    """The dtype an op computes in: its first floating result's, else its first floating argument's."""
    for t in (*tensors_in(out), *tensors_in(args)):
        if t.is_floating_point():
            return dtype_name(t.dtype)
    return "float32"


def op_kernels(op: str, args: tuple, kwargs: dict, out, cost: tuple[int, int, int, int] | None, *,
               backward: bool = False, internal: bool = False) -> list[KernelCost]:
    """The GPU kernels one call of ``op`` (a name as :func:`op_name` gives it) runs, with ``cost`` its
    ``(flops, macs, bytes_read, bytes_written)`` from :func:`op_cost` (None: no formula, a kernel of zero work).

    One kernel per op, except ``convolution_backward``, which runs as cuDNN does: a data-gradient kernel (the
    transposed convolution), a weight-gradient kernel (reduction over the batch and the output positions) and a
    bias-gradient reduction, each for the gradients asked for, each reading what it needs; the first is the op's
    dispatch, the others are launched from C++ (``internal``). The depth of a kernel is
    its multiply-accumulates per output element (``K`` of a matmul, ``C_in/groups x k x k`` of a convolution); fused
    attention's is the head dimension (each score is a dot product of that length)."""
    dtype = _dtype_of(out, args)
    if cost is None:
        return [KernelCost(op, backward, 0, 0, 0.0, dtype, internal)]
    flops, macs, read, written = cost
    if op == "convolution_backward" and len(args) >= 11:
        grad_out, x, w = args[0], args[1], args[2]
        transposed, mask = bool(args[7]), list(args[10])
        fwd = conv_macs(x.shape, w.shape, grad_out.shape, transposed)
        g, bx, bw_ = nbytes(grad_out), nbytes(x), nbytes(w)
        ks = []
        if mask[0]:
            ks.append(KernelCost(op, backward, 2 * fwd, g + bw_ + bx, fwd / max(numel(x), 1), dtype, internal))
        if mask[1]:
            ks.append(KernelCost(op, backward, 2 * fwd, g + bx + bw_, fwd / max(numel(w), 1), dtype, internal))
        if len(mask) > 2 and mask[2]:
            ks.append(KernelCost(op, backward, numel(grad_out), g + grad_out.shape[1] * grad_out.dtype.itemsize,
                                 0.0, dtype, internal))
        if ks:  # one op dispatched: its first kernel; cuDNN launches the others from C++
            return ks[:1] + [KernelCost(k.op, k.backward, k.flops, k.bytes, k.depth, k.dtype, True) for k in ks[1:]]
    depth = 0.0
    base = removesuffix(op, "_backward")
    if op in ATTENTION_OPS or base in ATTENTION_OPS:
        t = _first_tensor(args)
        depth = float(t.shape[-1]) if t is not None and t.dim() else 0.0
    elif macs:
        o = _first_tensor(out)
        depth = macs / max(numel(o), 1) if o is not None else 0.0
    return [KernelCost(op, backward, int(flops), int(read + written), float(depth), dtype, internal)]
