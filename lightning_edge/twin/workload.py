"""The twin's workload model: a :class:`~lightning_edge.cost.ModelCost` turned into GPU kernels and CPU work.

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
the one model of the workload, :class:`~lightning_edge.twin.timeline.TwinWorkload`, evaluates it on any number
of modes at once (``step``) and per row (``layers``). Nothing here imports torch. The noisy measurements tuners
take (``SimWorkload``) are in :mod:`lightning_edge.twin.live`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_edge.cost.ops import ATTENTION_OPS, CONV_OPS, GEMM_OPS

if TYPE_CHECKING:  # pragma: no cover
    from lightning_edge.cost import ModelCost

__all__ = [
    "UNITS", "WorkloadProfile", "compile_workload", "classify_layer", "reduction_depth", "count_param_tensors",
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
    """A minibatch as arrays over its steps (see the module docstring). Built by :func:`compile_workload`.

    Arrays (length ``n_steps``): ``flops`` (n_steps, 4) by unit in :data:`UNITS` order, ``bytes``,
    ``kernels`` (GPU kernels), ``cpu_ops`` (ops dispatched from Python), ``cpu_calls`` (module calls),
    ``cpu_internal`` (launches issued from C++ inside fused calls); ``names`` and ``phase``
    (``forward``/``backward``/``loss``/``optimizer``/``input``) per step.
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
    reduction: np.ndarray | None = None
    """GEMM reduction depth per step (MACs per output element; 0 where it does not apply)."""
    sample_mpix: float = 0.0
    """Megapixels of one image sample (0 for token inputs): drives the data-loader cost."""
    dtype: str = "float32"
    input_mb: float = 0.0
    """Megabytes of the minibatch's input tensors (fetched from the loader by the main thread)."""
    notes: list[str] = field(default_factory=list)
    autocast: str | None = None
    """The autocast dtype the cost was counted under (``"float16"``, ``"bfloat16"``) or None."""

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
    """(forward, backward) op counts of a layer; the cost model keeps only their sum."""
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


def compile_workload(
    cost: ModelCost,
    *,
    kind: str | None = None,
    batch_size: int | None = None,
    param_tensors: int | None = None,
    sample_mpix: float | None = None,
    tokens: int | None = None,
) -> WorkloadProfile:
    """Turn a ModelCost into the steps of one minibatch on the twin.

    Args:
        cost: from :func:`lightning_edge.analyze` (``training=True`` for a training step).
        kind: ``"train"`` or ``"infer"`` (default: from ``cost.training``).
        batch_size: default: the first dimension of the first input recorded in ``cost.inputs``.
        param_tensors: number of parameter tensors (optimizer kernels); default estimated from the layers.
        sample_mpix: megapixels of one image sample for the data loader; default from a 4-D input.
        tokens: tokens per minibatch (for fused RNN layers); default from a 2-D integer input.
    """
    if kind not in (None, "train", "infer"):
        raise ValueError(f"kind must be 'train' or 'infer', got {kind!r}")
    training = bool(cost.training) if kind is None else kind == "train"
    if training and not cost.training:
        raise ValueError("kind='train' needs a ModelCost with the backward pass: "
                         "analyze(model, *inputs, training=True)")
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

    names: list[str] = []
    phase: list[str] = []
    flops: list[np.ndarray] = []
    nbytes: list[float] = []
    kernels: list[float] = []
    cpu_ops: list[float] = []
    cpu_calls: list[float] = []
    cpu_internal: list[float] = []
    reduction: list[float] = []
    notes: list[str] = []

    def add(name, ph, unit_flops, b, k, ops, calls, internal=0.0, red=0.0):
        names.append(name)
        phase.append(ph)
        flops.append(unit_flops)
        nbytes.append(float(b))
        kernels.append(float(k))
        cpu_ops.append(float(ops))
        cpu_calls.append(float(calls))
        cpu_internal.append(float(internal))
        reduction.append(float(red))

    def unit_vec(unit: str, f: float) -> np.ndarray:
        v = np.zeros(len(UNITS))
        v[UNITS.index(unit)] = float(f)
        return v

    # the input batch: one host-to-device copy (unified memory: a DRAM copy kernel)
    in_bytes = sum(math.prod(s) * (8 if len(s) == 2 else es) for s in shapes) if shapes else 0
    add("(input)", "input", np.zeros(len(UNITS)), 2 * in_bytes, 1, 1, 0)

    layers = list(cost.layers)
    backward: list[tuple] = []
    fused = 0
    for lc in layers:
        unit = classify_layer(lc, es)
        red = reduction_depth(lc, es) if unit in ("tc", "cuda") else 0.0
        n_f, n_b = _split_ops(lc, training)
        internal = 0.0
        if lc.kind in _FUSED_RNN_KINDS:
            # nn.LSTM/GRU run as one cuDNN call: one Python-level op, the rest launched from C++
            internal = float(_rnn_internal(lc, batch_size, tokens))
            fused += 1
            k_f, ops_f = internal, 1.0
            k_b, ops_b = (internal * 2.0, 1.0) if n_b else (0.0, 0.0)
        else:
            k_f, ops_f = float(n_f), float(n_f)
            k_b, ops_b = float(n_b), float(n_b)
        if n_f or lc.forward.flops or lc.forward.bytes:
            add(lc.name or "(root)", "forward", unit_vec(unit, lc.forward.flops), lc.forward.bytes,
                k_f, ops_f, lc.calls, internal, red)
        if training and (n_b or lc.backward.flops or lc.backward.bytes):
            backward.append((lc.name or "(root)", unit_vec(unit, lc.backward.flops), lc.backward.bytes,
                             k_b, ops_b, internal * 2.0 if internal else 0.0, red))
    if fused:
        notes.append(f"{fused} recurrent layer(s) run as fused cuDNN calls (1 Python op, C++-issued kernels)")

    if training:
        # loss (cross-entropy on the logits: log_softmax + nll, forward and backward)
        last = layers[-1] if layers else None
        logits = last.forward.bytes_written if last is not None else 0
        add("(loss)", "loss", unit_vec("elt", 8 * logits / es), 6 * logits, 6, 6, 1)
        for name, fv, b, k, ops, internal, red in reversed(backward):
            add(name, "backward", fv, b, k, ops, 0, internal, red)
        n_params = float(cost.params)
        if param_tensors is None:
            param_tensors = sum(2 if lc.params else 0 for lc in layers)
        # SGD with momentum and zero_grad, one kernel per op per tensor (PyTorch 1.12: no foreach):
        # zero_ (grad), add_ (weight decay), mul_+add_ (momentum), add_ (update)
        add("(optimizer)", "optimizer", unit_vec("elt", 6 * n_params), 11 * es * n_params,
            5 * param_tensors, 5 * param_tensors, 1)

    return WorkloadProfile(
        model=cost.model, kind=kind, batch_size=int(batch_size), names=names, phase=phase,
        flops=np.array(flops, dtype=float).reshape(-1, len(UNITS)), bytes=np.array(nbytes),
        kernels=np.array(kernels), cpu_ops=np.array(cpu_ops), cpu_calls=np.array(cpu_calls),
        cpu_internal=np.array(cpu_internal), reduction=np.array(reduction), sample_mpix=float(sample_mpix), dtype=str(cost.dtype),
        input_mb=in_bytes / 1e6, notes=notes, autocast=getattr(cost, "autocast", None),
    )
