"""A workload's compiled rows: a :class:`~lightning_edge.cost.ModelCost` turned into GPU kernels and CPU work (what
the workload model, :mod:`lightning_edge.twin.workload_model`, evaluates on modes).

A minibatch is a sequence of *steps* (one per layer and direction: the forward pass in execution
order, then, for training, the backward pass in reverse order, the loss and the optimizer step).
Each step carries what the twin needs to time it on any power mode:

- ``flops`` split by execution unit: ``tc`` (convolutions on TF32 tensor cores), ``cuda`` (FP32
  matmuls on CUDA cores, PyTorch's default since 1.12: ``torch.backends.cuda.matmul.allow_tf32 = False``),
  ``dw`` (depthwise / grouped convolutions with a short reduction, which run far below peak) and
  ``elt`` (everything else: normalisation, activations, pooling, element-wise);
- ``bytes`` moved (the cost model's analytical count) and the number of GPU kernels;
- CPU work: PyTorch ops dispatched from Python (each ~ one kernel launch), module calls, and
  launches issued from C++ inside fused library calls (cuDNN RNN).

:func:`compile_workload` builds a :class:`WorkloadProfile` (numpy arrays over steps) once per model;
the one model of the workload, :class:`~lightning_edge.twin.workload_model.TwinWorkload`, evaluates it on any number
of modes at once (``step``) and per row (``layers``). Nothing here imports torch. The noisy measurements tuners
take (``SimWorkload``) are in :mod:`lightning_edge.twin.sim_workload`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_edge._compat import dtype_name, removesuffix
from lightning_edge.cost.ops import ATTENTION_OPS, CONV_OPS, GEMM_OPS

if TYPE_CHECKING:  # pragma: no cover
    from lightning_edge.cost import ModelCost

__all__ = [
    "UNITS", "WorkloadProfile", "OptimizerRun", "FULCRUM_OPTIMIZER", "optimizer_run", "compile_workload", "classify_layer", "reduction_depth", "count_param_tensors",
    "precision_of", "is_cost",
]

UNITS: tuple[str, ...] = ("tc", "cuda", "dw", "elt")
"""Execution units of a step's FLOP: TF32 tensor-core conv, FP32 CUDA-core matmul, depthwise conv, element-wise."""

_CONV_OPS = CONV_OPS | {"convolution_backward"}
_GEMM_OPS = GEMM_OPS | ATTENTION_OPS
_BACKWARD_EXTRA = {"mm", "sum", "add_"}  # ops that, in a training layer, belong to its backward pass
_FUSED_RNN_KINDS = {"LSTM", "GRU", "RNN"}
_DEPTHWISE_REDUCTION = 32  # MACs per output element below which a convolution counts as depthwise-like


def _elem_size(dtype: str) -> int:
    d = str(dtype).lower()
    if any(s in d for s in ("16", "half")):
        return 2
    if "64" in d or "double" in d:
        return 8
    return 4


def reduction_depth(layer: Any, elem_size: int = 4) -> float:
    """MACs per output element of a layer's forward pass (``C_in/groups x K x K`` for a conv, ``K`` for a
    matmul): the GEMM reduction depth that decides how well tensor cores and tiles are used (0: none)."""
    if not layer.forward.macs:
        return 0.0
    out_elems = max(layer.forward.bytes_written / elem_size, 1.0)
    return float(layer.forward.macs / out_elems)


def classify_layer(layer: Any, elem_size: int = 4) -> str:
    """The execution unit of a layer's FLOP: ``tc``, ``cuda``, ``dw`` or ``elt`` (see :data:`UNITS`).

    Convolutions whose reduction (MACs per output element, ``C_in/groups x K x K``) is under 32 are
    depthwise-like (3x3 or 5x5 depthwise: 9 or 25); they run far below peak on any GPU.
    """
    ops = set(layer.ops)
    if ops & _CONV_OPS:
        return "dw" if reduction_depth(layer, elem_size) < _DEPTHWISE_REDUCTION else "tc"
    if ops & _GEMM_OPS or layer.kind in _FUSED_RNN_KINDS:
        return "cuda"
    return "elt"


@dataclass
class WorkloadProfile:
    """A minibatch as arrays over its rows (steps) and their kernels (see the module docstring). Built by
    :func:`compile_workload`.

    Row arrays (length ``n_steps``): ``flops`` (n_steps, 4) by unit in :data:`UNITS` order, ``bytes``,
    ``kernels`` (GPU kernels launched), ``cpu_ops`` (ops dispatched from Python), ``cpu_calls`` (module calls),
    ``cpu_internal`` (launches issued from C++: fused calls, autocast's casts, a convolution backward's second
    kernel); ``names`` and ``phase`` (``input``/``forward``/``loss``/``backward``/``optimizer``) per row.

    Kernel arrays (one entry per distinct kernel of a row, ``k_count`` launches of it per minibatch): ``k_row`` (its
    row), ``k_unit`` (index in :data:`UNITS`), ``k_half`` (computes in 16 bits: fp16 or bf16), ``k_flops`` and
    ``k_bytes`` (of one launch), ``k_depth`` (reduction depth: MACs per output element, the head dimension of fused
    attention; 0 where nothing is reduced). The twin times every kernel on its own (``TwinWorkload._kernels``) and
    sums them into their rows.
    """

    model: str
    kind: str
    batch_size: int
    names: list[str]
    phase: list[str]
    flops: np.ndarray
    bytes: np.ndarray
    kernels: np.ndarray
    cpu_ops: np.ndarray
    cpu_calls: np.ndarray
    cpu_internal: np.ndarray
    k_row: np.ndarray
    k_unit: np.ndarray
    k_half: np.ndarray
    k_flops: np.ndarray
    k_bytes: np.ndarray
    k_depth: np.ndarray
    k_count: np.ndarray
    sample_mpix: float = 0.0
    """Megapixels of one image sample (0 for token inputs): drives the image-decoding loader's cost."""
    dtype: str = "float32"
    input_mb: float = 0.0
    """Megabytes of the minibatch's input tensors (fetched from the loader by the main thread)."""
    notes: list[str] = field(default_factory=list)
    autocast: str | None = None
    """The autocast dtype the cost was counted under (``"float16"``, ``"bfloat16"``) or None."""
    optimizer_steps: float = 1.0
    """Optimizer steps per minibatch the ``(optimizer)`` row holds (1/4 with ``accumulate_grad_batches=4``)."""
    optimizer: Any = None
    """The :class:`OptimizerRun` the ``(optimizer)`` row models (None: :data:`FULCRUM_OPTIMIZER`)."""
    per_kernel: bool = True
    """False when the cost kept no per-op detail (a ModelCost built by hand): each layer's work is then split evenly
    over its ops, at the layer's unit and reduction depth."""

    @property
    def total_bytes(self) -> float:
        return float(self.bytes.sum())

    @property
    def fp16(self) -> bool:
        """16-bit tensors, or matmuls and convolutions under a 16-bit autocast (:func:`precision_of`)."""
        return _elem_size(self.dtype) == 2 or (self.autocast is not None and _elem_size(self.autocast) == 2)


def precision_of(cost: Any) -> str:
    """The twin's precision of a ModelCost or WorkloadProfile, ``"fp16"`` or ``"fp32"``: fp16 when its tensors are
    16-bit or it was counted under a 16-bit autocast (a ``16-mixed`` run: tensor-core rates for its matmuls and
    convolutions), else fp32. The one rule every caller's workload follows unless it asks for a precision."""
    dtype = str(getattr(cost, "dtype", "float32"))
    amp = getattr(cost, "autocast", None)
    return "fp16" if _elem_size(dtype) == 2 or (amp is not None and _elem_size(str(amp)) == 2) else "fp32"


def is_cost(x: Any) -> bool:
    """A ModelCost (or anything shaped like one: ``layers`` and no ``parameters()``), not an ``nn.Module`` that
    happens to have a ``layers`` attribute (a transformer's ``self.layers = nn.ModuleList(...)``)."""
    return hasattr(x, "layers") and not callable(getattr(x, "parameters", None))


def count_param_tensors(module: Any) -> int:
    """The parameter tensors of ``module`` (``module.parameters()``): the optimizer runs its element-wise kernels once
    per tensor (:func:`compile_workload`'s ``param_tensors``). The one count every caller that has the module uses
    (the profiler, the tuner, serving, zoo workloads)."""
    return sum(1 for _ in module.parameters())


def _split_ops(layer: Any, training: bool) -> tuple[int, int]:
    """(forward, backward) op counts of a layer without per-op detail (the cost model keeps only their sum)."""
    total = sum(layer.ops.values())
    if not training:
        return total, 0
    bwd = sum(n for op, n in layer.ops.items() if "backward" in op or op in _BACKWARD_EXTRA)
    if layer.backward.flops == 0 and layer.backward.bytes == 0:
        return total, 0
    fwd = max(total - bwd, 1 if total else 0)
    return fwd, total - fwd


def _rnn_internal(layer: Any, batch_size: int, n_tokens: int) -> int:
    """Kernels a fused cuDNN RNN call launches: per layer one input GEMM plus one recurrent step per token."""
    adds = layer.ops.get("addmm", 0) + layer.ops.get("mm", 0)
    seq = max(n_tokens // max(batch_size, 1), 1)
    # the decomposed count has ~2 addmm per layer per token: recover num_layers from it
    num_layers = max(int(round(adds / max(2 * seq, 1))), 1)
    return num_layers * (1 + seq)


def _is_half(dtype: str) -> bool:
    return dtype_name(dtype) in ("float16", "bfloat16", "half")


def kernel_unit(op: str, depth: float, depthwise: bool = False) -> str:
    """The execution unit of one kernel (:data:`UNITS`): convolutions ``tc`` (``dw`` for a depthwise-like layer,
    one whose forward convolution reduces fewer than 32 MACs per output), matmuls and fused attention ``cuda`` (their
    rate and precision are resolved per kernel: FP32 CUDA cores, TF32 or 16-bit tensor cores), everything else
    ``elt`` (element-wise, normalisation, reductions, copies: memory-bound kernels)."""
    if op in _CONV_OPS:
        return "dw" if depthwise or 0 < depth < _DEPTHWISE_REDUCTION else "tc"
    if op in _GEMM_OPS or removesuffix(op, "_backward") in ATTENTION_OPS:
        return "cuda"
    return "elt"


def _kernel_rows(lc: Any, training: bool) -> tuple[list, list]:
    """A layer's forward and backward kernels, each ``(unit, half, flops, bytes, depth, count, internal)``, from the
    cost's per-op detail (``LayerCost.kernels``)."""
    fwd_convs = [k.depth for k in lc.kernels if not k.backward and k.op in _CONV_OPS and k.depth > 0]
    depthwise = bool(fwd_convs) and min(fwd_convs) < _DEPTHWISE_REDUCTION
    fwd: list = []
    bwd: list = []
    for k, n in lc.kernels.items():
        if k.backward and not training:
            continue
        unit = kernel_unit(k.op, k.depth, depthwise)
        depth = k.depth if unit in ("tc", "cuda") else 0.0
        (bwd if k.backward else fwd).append(
            (unit, _is_half(k.dtype), float(k.flops), float(k.bytes), float(depth), float(n), bool(k.internal)))
    return fwd, bwd


def _even_kernels(unit: str, half: bool, flops: float, nbytes: float, n: float, depth: float = 0.0,
                  internal: bool = False) -> list:
    """``n`` identical kernels sharing ``flops`` and ``nbytes`` (rows the twin synthesises, layers without per-op
    detail)."""
    if n <= 0:
        return []
    return [(unit, half, flops / n, nbytes / n, depth, float(n), internal)]


#: ``multi_tensor_apply``'s limits in PyTorch's CUDA foreach kernels: tensors per launch (for lists of depth 3-4,
#: the optimizers') and elements per launch (320 blocks of 65536)
FOREACH_TENSORS_PER_LAUNCH = 36
FOREACH_ELEMENTS_PER_LAUNCH = 320 * 65536

#: per optimizer: (Python ops per parameter tensor in the single-tensor loop, FLOP per element, bytes moved per element
#: in units of the parameters' element size), as PyTorch 2.x implements one step (weight decay included)
OPTIMIZER_OPS = {
    # param.add_(grad, alpha=-lr)
    "sgd": (1, 2.0, 3.0),
    # buf.mul_(momentum).add_(grad); param.add_(buf, alpha=-lr)
    "sgd-momentum": (3, 4.0, 8.0),
    # grad.add_(param, alpha=wd), then as sgd-momentum: the papers' optimizer (with its zero_ kernels, the calibrated
    # 5 kernels per tensor, 6 FLOP and 11 bytes per parameter per byte of element)
    "sgd-momentum-wd": (4, 6.0, 10.0),
    # param.mul_(1 - lr wd); m.lerp_(g); v.mul_(b2).addcmul_(g, g); denom = (v.sqrt() / bc2).add_(eps);
    # param.addcdiv_(m, denom)
    "adam": (8, 14.0, 20.0),
}


@dataclass(frozen=True)
class OptimizerRun:
    """The optimizer a run steps, as the twin needs it: ``name`` (``sgd``, ``sgd-momentum``, ``sgd-momentum-wd``
    with weight decay, ``adam``: Adam and AdamW; anything else is modelled as ``adam``), ``impl`` (``loop``: one
    kernel per op per tensor, PyTorch's single-tensor path; ``foreach``: one multi-tensor launch per op for up to
    :data:`FOREACH_TENSORS_PER_LAUNCH` tensors, PyTorch 2.x's default for CUDA tensors; ``fused``: one launch per such
    group for the whole step) and ``zero_grad`` (gradients zeroed by a kernel per tensor,
    ``zero_grad(set_to_none=False)``; PyTorch 2.x sets them to None). :data:`FULCRUM_OPTIMIZER` is the papers'
    (PyTorch 1.12's SGD with momentum and weight decay)."""

    name: str = "sgd-momentum"
    impl: str = "loop"
    zero_grad: bool = True
    how: str = ""

    def __post_init__(self) -> None:
        if self.impl not in ("loop", "foreach", "fused"):
            raise ValueError(f"impl must be 'loop', 'foreach' or 'fused', got {self.impl!r}")
        if self.name not in OPTIMIZER_OPS:
            object.__setattr__(self, "name", "adam")

    def work(self, n_params: float, tensors: float, es: int) -> tuple[float, float, float, float]:
        """One step on ``n_params`` elements in ``tensors`` parameter tensors of ``es``-byte elements:
        ``(flops, bytes, launches, python_ops)``."""
        ops, fpe, bpe = OPTIMIZER_OPS[self.name]
        flops, nbytes = fpe * n_params, bpe * es * n_params
        groups = max(math.ceil(tensors / FOREACH_TENSORS_PER_LAUNCH),
                     math.ceil(n_params / FOREACH_ELEMENTS_PER_LAUNCH), 1) if tensors > 0 else 0
        if self.impl == "loop":
            launches = py_ops = ops * tensors
        elif self.impl == "foreach":
            launches, py_ops = ops * groups, float(ops)
        else:  # fused: the step's element-wise work in one kernel per group of tensors, its bytes read once
            nbytes = (7.0 if self.name == "adam" else 3.0) * es * n_params
            launches, py_ops = float(groups), 1.0
        if self.zero_grad:
            nbytes += es * n_params
            launches += tensors if self.impl == "loop" else groups
            py_ops += tensors if self.impl == "loop" else 1
        return flops, nbytes, float(launches), float(py_ops)

    def describe(self) -> str:
        impl = {"loop": "one kernel per op per tensor", "foreach": "multi-tensor (foreach) kernels",
                "fused": "fused kernels"}[self.impl]
        return (f"{self.name}, {impl}" + (", gradients zeroed by kernels" if self.zero_grad else "")
                + (f" ({self.how})" if self.how else ""))


#: Fulcrum's optimizer (PyTorch 1.12: SGD with momentum, a kernel per op per tensor, zero_grad by kernels): the
#: twin's default for the papers' workloads and whenever the run's optimizer is not known
FULCRUM_OPTIMIZER = OptimizerRun("sgd-momentum-wd", "loop", True, "the papers' PyTorch 1.12 SGD with momentum")


def optimizer_run(optimizer: Any, how: str = "") -> OptimizerRun:
    """An optimizer as the twin models it: an :class:`OptimizerRun` as it is; a name (``"sgd"``,
    ``"sgd-momentum"``, ``"sgd-momentum-wd"``, ``"adam"``, ``"adamw"``, ``"fulcrum"`` for :data:`FULCRUM_OPTIMIZER`;
    PyTorch 2.x's multi-tensor kernels); or a torch optimizer (Lightning's wrapper too): SGD with or without momentum,
    Adam-like (Adam, AdamW and any other), its implementation as PyTorch picks it for CUDA tensors on the board
    (``fused=True``: fused; ``foreach=False``: the single-tensor loop; else foreach, PyTorch 2.x's default),
    gradients set to None by ``zero_grad`` (PyTorch 2.x)."""
    if isinstance(optimizer, OptimizerRun):
        return optimizer
    if isinstance(optimizer, str):
        key = optimizer.strip().lower()
        if key == "fulcrum":
            return FULCRUM_OPTIMIZER
        name = {"adamw": "adam", "sgd-nesterov": "sgd-momentum"}.get(key, key)
        if name not in OPTIMIZER_OPS:
            raise ValueError(f"optimizer {optimizer!r}: expected one of {sorted([*OPTIMIZER_OPS, 'adamw', 'fulcrum'])}, "
                             "an OptimizerRun or a torch optimizer")
        return OptimizerRun(name, "foreach", False, how or f"{optimizer}, PyTorch 2.x multi-tensor kernels")
    inner = getattr(optimizer, "optimizer", optimizer)  # Lightning's LightningOptimizer wraps the torch one
    d = dict(getattr(inner, "defaults", {}) or {})
    cls = type(inner).__name__
    if cls == "SGD":
        name = "sgd-momentum" if float(d.get("momentum", 0) or 0) > 0 else "sgd"
    else:
        name = "adam"
    impl = "fused" if d.get("fused") else ("loop" if d.get("foreach") is False else "foreach")
    return OptimizerRun(name, impl, False, f"{cls}{', ' + how if how else ''}")


def compile_workload(
    cost: ModelCost,
    *,
    kind: str | None = None,
    batch_size: int | None = None,
    param_tensors: int | None = None,
    sample_mpix: float | None = None,
    tokens: int | None = None,
    optimizer_steps: float = 1.0,
    optimizer: OptimizerRun | None = None,
) -> WorkloadProfile:
    """Turn a ModelCost into the rows and kernels of one minibatch on the twin.

    Args:
        cost: from :func:`lightning_edge.analyze` (``training=True`` for a training step).
        kind: ``"train"`` or ``"infer"`` (default: from ``cost.training``).
        batch_size: default: the first dimension of the first input recorded in ``cost.inputs``.
        param_tensors: number of parameter tensors (optimizer kernels); default estimated from the layers.
        sample_mpix: megapixels of one image sample for the image-decoding loader; default from a 4-D input.
        tokens: tokens per minibatch (for fused RNN layers); default from a 2-D integer input.
        optimizer_steps: optimizer steps per minibatch (``1 / accumulate_grad_batches``; what a manual optimisation
            steps per batch, as a share of all the parameters): the ``(optimizer)`` row holds one optimizer step's
            kernels times this, its work apportioned over the batches in between.
        optimizer: the optimizer stepped (:class:`OptimizerRun`); default :data:`FULCRUM_OPTIMIZER`.
    """
    if kind not in (None, "train", "infer"):
        raise ValueError(f"kind must be 'train' or 'infer', got {kind!r}")
    training = bool(cost.training) if kind is None else kind == "train"
    if training and not cost.training:
        raise ValueError("kind='train' needs a ModelCost with the backward pass: "
                         "analyze(model, *inputs, training=True)")
    optimizer_steps = float(optimizer_steps)
    if not (optimizer_steps >= 0 and np.isfinite(optimizer_steps)):
        raise ValueError(f"optimizer_steps must be a finite number >= 0 (optimizer steps per batch), "
                         f"got {optimizer_steps!r}")
    kind = "train" if training else "infer"
    shapes = [tuple(s) for s in (cost.inputs or []) if isinstance(s, (tuple, list))]
    if batch_size is None:
        batch_size = int(shapes[0][0]) if shapes and len(shapes[0]) else 1
    if sample_mpix is None:
        img = [s for s in shapes if len(s) == 4]
        sample_mpix = (img[0][2] * img[0][3] / 1e6) if img else 0.0
    if tokens is None:
        tok = [s for s in shapes if len(s) == 2]
        tokens = int(tok[0][0] * tok[0][1]) if tok else batch_size
    es = _elem_size(cost.dtype)
    half_tensors = es == 2
    amp = getattr(cost, "autocast", None)
    half_gemm = half_tensors or (amp is not None and _elem_size(amp) == 2)

    names: list[str] = []
    phase: list[str] = []
    rows_k: list[list] = []
    cpu_calls: list[float] = []
    cpu_extra: list[float] = []  # C++-issued launches not listed as kernels (none today)
    notes: list[str] = []
    per_kernel = True

    def add(name, ph, kernels, calls, ops=None, internal=None):
        names.append(name)
        phase.append(ph)
        rows_k.append(kernels)
        cpu_calls.append(float(calls))
        cpu_extra.append((ops, internal))

    # the input batch: one host-to-device copy (unified memory: a DRAM copy kernel)
    in_bytes = sum(math.prod(s) * (8 if len(s) == 2 else es) for s in shapes) if shapes else 0
    add("(input)", "input", _even_kernels("elt", False, 0.0, 2 * in_bytes, 1), 0)

    layers = list(cost.layers)
    backward: list[tuple] = []
    fused = 0
    for lc in layers:
        name = lc.name or "(root)"
        if lc.kind in _FUSED_RNN_KINDS or not getattr(lc, "kernels", None):
            # no per-op detail (a hand-built cost) or a fused cuDNN RNN call: the layer's work split evenly over
            # its launches, at the layer's unit and reduction depth
            unit = classify_layer(lc, es)
            red = reduction_depth(lc, es) if unit in ("tc", "cuda") else 0.0
            half = half_tensors or (half_gemm and unit in ("tc", "cuda"))
            n_f, n_b = _split_ops(lc, training)
            if lc.kind in _FUSED_RNN_KINDS:
                # nn.LSTM/GRU run as one cuDNN call: one Python-level op, the rest launched from C++
                internal = float(_rnn_internal(lc, batch_size, tokens))
                fused += 1
                kf = _even_kernels(unit, half, lc.forward.flops, lc.forward.bytes, internal, red, True)
                kb = _even_kernels(unit, half, lc.backward.flops, lc.backward.bytes, 2 * internal, red, True) \
                    if n_b else []
                ops_f, ops_b = 1.0, (1.0 if n_b else 0.0)
            else:
                per_kernel = False
                kf = _even_kernels(unit, half, lc.forward.flops, lc.forward.bytes, n_f, red)
                kb = _even_kernels(unit, half, lc.backward.flops, lc.backward.bytes, n_b, red)
                ops_f = ops_b = None
            if n_f or lc.forward.flops or lc.forward.bytes:
                add(name, "forward", kf, lc.calls, ops_f, 0.0 if ops_f is None else None)
            if training and (n_b or lc.backward.flops or lc.backward.bytes):
                backward.append((name, kb, ops_b))
            continue
        kf, kb = _kernel_rows(lc, training)
        if kf or lc.forward.flops or lc.forward.bytes:
            add(name, "forward", kf, lc.calls)
        if training and (kb or lc.backward.flops or lc.backward.bytes):
            backward.append((name, kb, None))
    if fused:
        notes.append(f"{fused} recurrent layer(s) run as fused cuDNN calls (1 Python op, C++-issued kernels)")
    if not per_kernel:
        notes.append("the cost keeps no per-op detail: each layer's work is split evenly over its ops")

    if training:
        # loss (cross-entropy on the logits: log_softmax + nll, forward and backward)
        last = layers[-1] if layers else None
        logits = last.forward.bytes_written if last is not None else 0
        add("(loss)", "loss", _even_kernels("elt", half_tensors, 8 * logits / es, 6 * logits, 6), 1)
        for name, kb, ops_b in reversed(backward):
            add(name, "backward", kb, 0, ops_b, None)
        n_params = float(cost.params)
        if param_tensors is None:
            param_tensors = sum(2 if lc.params else 0 for lc in layers)
        # the optimizer's element-wise kernels, once per optimizer step (default Fulcrum's: PyTorch 1.12's SGD with
        # momentum, zero_ (grad), add_ (weight decay), mul_+add_ (momentum), add_ (update) per tensor)
        s = optimizer_steps
        opt = FULCRUM_OPTIMIZER if optimizer is None else optimizer
        o_flops, o_bytes, o_launch, o_ops = opt.work(n_params, float(param_tensors), es)
        if opt != FULCRUM_OPTIMIZER:
            notes.append(f"(optimizer): {opt.describe()}, {param_tensors} parameter tensors")
        add("(optimizer)", "optimizer", _even_kernels("elt", half_tensors, o_flops * s, o_bytes * s, o_launch * s), s,
            o_ops * s, max(o_launch - o_ops, 0.0) * s)
        if s != 1.0:
            notes.append(f"(optimizer): one optimizer step every {1 / s:.3g} minibatches" if s > 0 else
                         "(optimizer): no optimizer step in these minibatches")

    # flatten: rows and their kernels
    n = len(names)
    k_row, k_unit, k_half, k_flops, k_bytes, k_depth, k_count, k_int = ([] for _ in range(8))
    for i, ks in enumerate(rows_k):
        for unit, half, f, b, d, c, internal in ks:
            k_row.append(i)
            k_unit.append(UNITS.index(unit))
            k_half.append(bool(half))
            k_flops.append(f)
            k_bytes.append(b)
            k_depth.append(d)
            k_count.append(c)
            k_int.append(internal)
    k_row_a = np.array(k_row, dtype=np.int64)
    k_count_a = np.array(k_count, dtype=float)
    k_flops_a = np.array(k_flops, dtype=float)
    k_bytes_a = np.array(k_bytes, dtype=float)
    k_unit_a = np.array(k_unit, dtype=np.int64)
    k_int_a = np.array(k_int, dtype=bool)
    flops = np.zeros((n, len(UNITS)))
    np.add.at(flops, (k_row_a, k_unit_a), k_flops_a * k_count_a)
    nbytes = np.bincount(k_row_a, weights=k_bytes_a * k_count_a, minlength=n)
    kernels = np.bincount(k_row_a, weights=k_count_a, minlength=n)
    ops = np.bincount(k_row_a, weights=k_count_a * ~k_int_a, minlength=n)
    internal = np.bincount(k_row_a, weights=k_count_a * k_int_a, minlength=n)
    for i, (o, it) in enumerate(cpu_extra):  # fused calls: one Python op, their kernels issued from C++
        if o is not None:
            ops[i] = o
        if it is not None:
            internal[i] = it
    if n and names[0] == "(input)":
        ops[0] = 1.0
    return WorkloadProfile(
        model=cost.model, kind=kind, batch_size=int(batch_size), names=names, phase=phase,
        flops=flops, bytes=nbytes, kernels=kernels, cpu_ops=ops, cpu_calls=np.array(cpu_calls),
        cpu_internal=internal, k_row=k_row_a, k_unit=k_unit_a, k_half=np.array(k_half, dtype=bool),
        k_flops=k_flops_a, k_bytes=k_bytes_a, k_depth=np.array(k_depth, dtype=float), k_count=k_count_a,
        sample_mpix=float(sample_mpix), dtype=str(cost.dtype), input_mb=in_bytes / 1e6, notes=notes,
        autocast=amp, optimizer_steps=float(optimizer_steps), per_kernel=per_kernel,
        optimizer=None if optimizer is None or optimizer == FULCRUM_OPTIMIZER else optimizer,
    )
