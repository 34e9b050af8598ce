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
``OrinTwin.predict`` then evaluates it on any number of modes at once. Nothing here imports torch.

:class:`SimWorkload` is the adapter tuners use: ``train(mode)`` / ``infer(mode, batch_size)`` give a
:class:`Measurement` (``time_s``, ``power_w``, ``label="simulated"``) with seeded measurement noise.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from lightning_edge.cost import ModelCost
    from lightning_edge.devices.sim.twin import OrinTwin

__all__ = [
    "UNITS", "WorkloadProfile", "compile_workload", "classify_layer", "reduction_depth", "Measurement",
    "SimWorkload",
]

UNITS: tuple[str, ...] = ("tc", "cuda", "dw", "elt")
"""Execution units of a step's FLOP: TF32 tensor-core conv, FP32 CUDA-core matmul, depthwise conv, element-wise."""

_CONV_OPS = {"convolution", "convolution_backward", "conv2d", "conv1d", "conv3d", "_convolution",
             "cudnn_convolution", "conv_transpose2d"}
_GEMM_OPS = {"addmm", "mm", "bmm", "matmul", "linear", "baddbmm", "addbmm", "addmv", "mv", "dot",
             "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_flash_attention_for_cpu", "scaled_dot_product_attention",
             "_scaled_dot_product_attention_math", "_scaled_dot_product_cudnn_attention", "einsum"}
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
        out_elems = max(layer.forward.bytes_written / elem_size, 1.0)
        reduction = layer.forward.macs / out_elems
        return "dw" if reduction < _DEPTHWISE_REDUCTION else "tc"
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

    @property
    def n_steps(self) -> int:
        return len(self.names)

    @property
    def total_flops(self) -> float:
        return float(self.flops.sum())

    @property
    def total_bytes(self) -> float:
        return float(self.bytes.sum())

    @property
    def fp16(self) -> bool:
        return _elem_size(self.dtype) == 2

    def summary(self) -> dict:
        by_unit = {u: float(self.flops[:, i].sum()) for i, u in enumerate(UNITS)}
        return {"model": self.model, "kind": self.kind, "batch_size": self.batch_size, "steps": self.n_steps,
                "flops": self.total_flops, "bytes": self.total_bytes, "flops_by_unit": by_unit,
                "kernels": int(self.kernels.sum()), "cpu_ops": int(self.cpu_ops.sum())}


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
        input_mb=in_bytes / 1e6, notes=notes,
    )


# ---------------------------------------------------------------------------------------------- tuner adapter
@dataclass(frozen=True)
class Measurement:
    """One profiled minibatch on the twin: mean time per minibatch (s) and mean power (W).

    ``label`` is always ``"simulated"``: never present it as a measurement of a real board.
    """

    time_s: float
    power_w: float
    label: str = "simulated"
    mode: Any = None
    batch_size: int | None = None

    @property
    def energy_j(self) -> float:
        return self.time_s * self.power_w


class SimWorkload:
    """What a tuner profiles: one model, training and/or inference, on the twin.

    ``SimWorkload("resnet18", twin=None, train_batch_size=16, noise=True, seed=0, time_noise=0.025,
    power_noise=0.02, seq_len=None, precision="fp32", example_inputs=None)``

    ``model`` is a zoo name (``"resnet18"``) or an ``nn.Module``; a module needs ``example_inputs``: one
    minibatch (a tensor or a tuple of tensors, batch dimension first; a dict of tensors for a model called as
    ``model(**batch)``; or a captured :class:`~lightning_edge.cost.capture.Call`). Only their shapes and dtypes are used
    (the twin analyses the module on meta tensors of the same shapes, with the batch dimension set to
    the batch size asked for), so the module's weights are never touched.

    ``train(mode)`` and ``infer(mode, batch_size)`` return a :class:`Measurement`; with ``noise`` each
    call draws seeded gaussian noise (relative sd ``time_noise`` on time, ``power_noise`` on power), so
    the same seed gives the same sequence of measurements. ``noise=False`` returns the model's values.
    ``calls`` counts the profiling calls (a tuner's cost).
    """

    label = "simulated"
    device_model = "sim-orin-agx"
    """Profiles of the twin are stored apart from those of a real Orin AGX (``orin-agx``): never mixed."""

    def __init__(
        self,
        model: Any,
        twin: OrinTwin | None = None,
        *,
        train_batch_size: int | None = None,
        noise: bool = True,
        seed: int | None = 0,
        time_noise: float = 0.025,
        power_noise: float = 0.02,
        seq_len: int | None = None,
        precision: str = "fp32",
        example_inputs: Any = None,
    ) -> None:
        self.example_call = None  # i17cost: a keyword / dict call form (lightning_edge.cost.capture.Call)
        if example_inputs is not None and not isinstance(example_inputs, (tuple, list)) \
                and not hasattr(example_inputs, "shape"):
            from collections.abc import Mapping

            from lightning_edge.cost.capture import Call, tensors_of, to_meta

            if isinstance(example_inputs, Mapping):  # a dict batch: model(**batch)
                example_inputs = Call("", (), dict(example_inputs))
            if isinstance(example_inputs, Call):
                self.example_call = Call(example_inputs.module, to_meta(example_inputs.args),
                                         to_meta(example_inputs.kwargs))
                example_inputs = tuple(tensors_of((self.example_call.args, self.example_call.kwargs)))
                if train_batch_size is None and self.example_call.batch_size() is not None:
                    train_batch_size = self.example_call.batch_size()
        if not isinstance(model, str) and not hasattr(model, "layers"):
            if example_inputs is None:
                raise ValueError(
                    f"SimWorkload({type(model).__name__}): an nn.Module needs example_inputs=(one minibatch,) "
                    "so the twin knows its input shapes; or pass a zoo model name such as 'resnet18'")
            example_inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
            if not example_inputs or not all(hasattr(x, "shape") and len(x.shape) >= 1 for x in example_inputs):
                raise ValueError("example_inputs must be tensors with a batch dimension first, "
                                 f"got {[type(x).__name__ for x in example_inputs]}")
            if train_batch_size is None:
                train_batch_size = int(example_inputs[0].shape[0])
        self.example_inputs = example_inputs
        if train_batch_size is None:
            train_batch_size = 16
        if twin is None:
            from lightning_edge.devices.sim.twin import OrinTwin

            twin = OrinTwin()
        self.twin = twin
        self.model = model
        self.train_batch_size = int(train_batch_size)
        self.noise = bool(noise)
        self.seed = seed
        self.time_noise = float(time_noise)
        self.power_noise = float(power_noise)
        self.seq_len = seq_len
        self.precision = precision
        self.calls = Counter()
        self._rng = np.random.default_rng(seed)
        self._expected: dict[tuple, tuple[float, float]] = {}

    @property
    def space(self):
        return self.twin.space

    @property
    def model_name(self) -> str:
        if isinstance(self.model, str):
            return self.model
        return str(getattr(self.model, "model", None) or type(self.model).__name__)

    @property
    def fingerprint(self) -> str:
        """The key of this workload's profiles in a store: model (and, for a module, its parameter count and input
        shapes), training batch size, precision and sequence length; the same workload gets the same key in
        every process."""
        parts = [self.model_name]
        if self.example_inputs is not None:
            n_params = sum(int(p.numel()) for p in self.model.parameters()) if hasattr(self.model, "parameters") else 0
            shapes = "x".join("-".join(str(int(d)) for d in tuple(x.shape)[1:]) or "0" for x in self.example_inputs)
            parts += [f"p{n_params}", f"in{shapes}"]
        parts += [f"train-bs{self.train_batch_size}", self.precision]
        if self.seq_len is not None:
            parts.append(f"seq{self.seq_len}")
        return "-".join(parts)

    def inputs_for(self, batch_size: int) -> tuple | None:
        """Meta tensors shaped like ``example_inputs`` with ``batch_size`` rows (``None`` for a zoo name)."""
        if self.example_inputs is None:
            return None
        if self.example_call is not None:  # i17cost: keyword inputs, resized (kept integer values repeated)
            return self.example_call.resized(int(batch_size))
        import torch

        return tuple(torch.empty((int(batch_size), *tuple(x.shape)[1:]), dtype=x.dtype, device="meta")
                     for x in self.example_inputs)

    def reset(self, seed: int | None = None) -> None:
        """Restart the noise sequence (same seed: same measurements again)."""
        self._rng = np.random.default_rng(self.seed if seed is None else seed)
        self.calls.clear()

    def expected(self, kind: str, mode: Any, batch_size: int | None = None) -> tuple[float, float]:
        """Noise-free ``(time_s, power_w)`` of one minibatch on ``mode`` (cached per kind, mode and batch size, so
        repeated measurements do not run the twin again). ``batch_size`` defaults to ``train_batch_size``."""
        bs = self.train_batch_size if batch_size is None else int(batch_size)
        key = (kind, self.twin.space.coerce(mode), bs)
        hit = self._expected.get(key)
        if hit is None:
            pred = self.twin.predict_workload(self.model, bs, kind, key[1], seq_len=self.seq_len,
                                              precision=self.precision, inputs=self.inputs_for(bs))
            hit = (float(np.asarray(pred.time_s).reshape(-1)[0]), float(np.asarray(pred.power_w).reshape(-1)[0]))
            self._expected[key] = hit
        return hit

    def _measure(self, kind: str, mode: Any, batch_size: int) -> Measurement:
        t, p = self.expected(kind, mode, batch_size)
        if self.noise:
            t *= max(1.0 + self.time_noise * float(self._rng.standard_normal()), 0.5)
            p *= max(1.0 + self.power_noise * float(self._rng.standard_normal()), 0.5)
        self.calls[kind] += 1
        return Measurement(t, p, "simulated", self.twin.space.coerce(mode), batch_size)

    def train(self, mode: Any) -> Measurement:
        """Time per training minibatch (``train_batch_size``) and power on ``mode``."""
        return self._measure("train", mode, self.train_batch_size)

    def infer(self, mode: Any, batch_size: int = 1) -> Measurement:
        """Time per inference minibatch of ``batch_size`` and power on ``mode``."""
        return self._measure("infer", mode, int(batch_size))

    def sweep(self, kind: str = "train", batch_size: int | None = None, modes: Any = None):
        """Noise-free prediction over many modes (default: the whole space), as a twin ``Prediction``."""
        bs = self.train_batch_size if batch_size is None else batch_size
        return self.twin.predict_workload(self.model, bs, kind, modes, seq_len=self.seq_len,
                                          precision=self.precision, inputs=self.inputs_for(bs))

    def __repr__(self) -> str:
        return f"SimWorkload({self.fingerprint}, simulated)"
