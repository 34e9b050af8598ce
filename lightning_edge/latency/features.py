"""What the latency models know about a layer: its class, its dimensions, its ops and the features the statistical
models learn from.

``describe(model, *inputs, **kwargs)`` runs the cost model (``lightning_edge.analyze``: nothing is computed, the
model runs on the meta device) and, during that same run, records each module's input and output shapes with
process-wide forward hooks, and each op it runs (``analyze(on_op=...)``). Layers are named, ordered and costed
exactly as ``analyze`` names them.

**Units.** A latency model predicts *units* and sums them per layer (``units_of``):

* a ``Conv2d`` or ``Linear`` module is one unit of its class (``conv``, ``conv1x1``, ``dwconv``, ``gconv``,
  ``linear``), measured and predicted as a module;
* every other layer (activations, norms, pools, embeddings, attention, the own ops of containers such as a
  residual add or a concatenation) is the sum of its ops, each one unit keyed by its op (``OPS``: ``relu``,
  ``gelu``, ``add``, ``cat``, ``softmax``, ``matmul``, ``max_pool`` ...), plus one module call. An op the table does
  not know is a unit of class ``other``, predicted by the roofline and reported as such.

So an attention block written with ``q @ k.transpose(-2, -1)`` and ``torch.softmax`` is two ``matmul`` units and a
``softmax`` unit, whatever the module is called.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = ["LayerDesc", "describe", "CLASSES", "MODULE_CLASSES", "OPS", "OP_KEYS", "FEATURE_NAMES", "classify",
           "units_of", "unit_features", "conv_backend", "op_key"]

#: module classes: measured and predicted as a whole module call
MODULE_CLASSES = ("conv", "conv1x1", "dwconv", "gconv", "linear")
#: every unit class; "other" falls back to the roofline
CLASSES = MODULE_CLASSES + ("matmul", "pool", "norm", "eltwise", "embedding", "other")

#: aten op (as ``analyze`` names it) -> (op key, unit class). In-place variants are their own keys: a ReLU that
#: writes its input allocates nothing and takes about half the time of one that writes a new tensor.
OPS: dict[str, tuple[str, str]] = {}


def _ops(key: str, cls: str, names: str) -> None:
    for n in names.split():
        OPS[n] = (key, cls)


_ops("relu", "eltwise", "relu hardtanh threshold clamp clamp_min clamp_max leaky_relu elu")
_ops("relu_", "eltwise", "relu_ hardtanh_ threshold_ clamp_ clamp_min_ clamp_max_ leaky_relu_ elu_")
_ops("add", "eltwise", "add sub mul div rsub where maximum minimum")
_ops("add_", "eltwise", "add_ sub_ mul_ div_")
_ops("gelu", "eltwise", "gelu gelu_ erf")
_ops("silu", "eltwise", "silu sigmoid exp log sqrt rsqrt pow reciprocal")
_ops("silu_", "eltwise", "silu_ sigmoid_ exp_")
_ops("hardswish", "eltwise", "hardswish hardsigmoid")
_ops("hardswish_", "eltwise", "hardswish_ hardsigmoid_")
_ops("tanh", "eltwise", "tanh tanh_ mish softplus")
_ops("softmax", "eltwise", "_softmax softmax _log_softmax log_softmax _safe_softmax")
_ops("cat", "eltwise", "cat stack")
_ops("copy_t", "eltwise", "(transposed-copy)")  # clone/contiguous of a non-contiguous tensor: a strided gather
_ops("copy", "eltwise", "clone copy_ _to_copy contiguous upsample_nearest2d constant_pad_nd index gather roll "
                        "fill_ zero_ masked_fill masked_fill_ full arange ones zeros zeros_like ones_like")
_ops("mean", "eltwise", "mean sum amax amin _adaptive_avg_pool2d adaptive_avg_pool2d")
_ops("batch_norm", "norm", "native_batch_norm _native_batch_norm_legit_no_training _native_batch_norm_legit "
                           "batch_norm")
_ops("layer_norm", "norm", "native_layer_norm layer_norm native_group_norm group_norm")
_ops("max_pool", "pool", "max_pool2d_with_indices max_pool2d")
_ops("avg_pool", "pool", "avg_pool2d")
_ops("embedding", "embedding", "embedding")
_ops("matmul", "matmul", "bmm mm matmul baddbmm addmm addbmm")
_ops("sdpa", "matmul", "_scaled_dot_product_flash_attention_for_cpu _scaled_dot_product_flash_attention "
                      "_scaled_dot_product_efficient_attention _scaled_dot_product_attention_math "
                      "scaled_dot_product_attention _scaled_dot_product_cudnn_attention")

#: the op keys, in a fixed order (the statistical models' one-hot)
OP_KEYS = tuple(dict.fromkeys(k for k, _c in OPS.values()))

#: convolution backends (``torch._C._select_conv_backend`` on the CPU): im2col + GEMM per image (``slow2d``, PyTorch's
#: choice for 1x1 and small 3x3 convolutions at one thread) or oneDNN (``mkldnn``)
BACKENDS = ("slow2d", "mkldnn", "other")

_NORM = ("BatchNorm", "LayerNorm", "GroupNorm", "InstanceNorm", "LocalResponseNorm", "RMSNorm")
_POOL = ("Pool",)


@dataclass
class LayerDesc:
    """One layer (or one unit of a layer) as the latency models see it (forward only). ``name``/``kind`` as in
    ``analyze``; for an op unit, ``kind`` is the aten op and ``op`` its key in ``OPS``."""

    name: str
    kind: str
    cls: str
    flops: float
    bytes: float
    macs: float
    params: int = 0
    calls: int = 1
    batch: int = 1
    c: int = 0            # input channels / in_features / K of a matmul / normalised size
    f: int = 0            # output channels / out_features / N of a matmul
    h: int = 1            # input height (1 when none)
    w: int = 1            # input width
    ho: int = 1           # output height
    wo: int = 1
    kh: int = 1
    kw: int = 1
    stride: int = 1
    groups: int = 1
    rows: int = 1         # linear: rows of the input matrix (product of the leading dims); matmul: M
    n_in: int = 0         # input elements
    n_out: int = 0        # output elements
    op: str = ""          # op unit: its key in OPS ("" for a module unit or a whole layer)
    backend: str = ""     # convolution: slow2d / mkldnn / other, as PyTorch chooses it for this shape
    cold: float = 0.0     # the share of its weights read from memory rather than the last-level cache (0..1)
    extra: dict = field(default_factory=dict)
    #: a layer's op units (``describe``); not saved with samples (a sample is one unit)
    ops: list = field(default_factory=list, repr=False, compare=False)

    def features(self) -> list[float]:
        """The slides' feature vector (h, w, c, f, kh, kw, stride, #ops, #in, #out, #weights), raw."""
        return [float(v) for v in (self.h, self.w, self.c, self.f, self.kh, self.kw, self.stride, self.flops,
                                   self.n_in, self.n_out, self.params)]

    @property
    def out_pixels(self) -> int:
        """batch x h_out x w_out (the implicit GEMM's M of a convolution)."""
        return self.batch * self.ho * self.wo

    def gemm_dims(self) -> tuple[int, int, int]:
        """(M, N, K) of the layer as a GEMM (for the refined roofline's u_eff)."""
        if self.cls in ("conv", "conv1x1", "dwconv", "gconv"):
            return self.out_pixels, self.f, max(1, self.c // max(1, self.groups) * self.kh * self.kw)
        if self.cls == "linear":
            return self.rows, self.f, self.c
        if self.cls == "matmul":
            return self.rows * self.batch, self.f, self.c
        raise AttributeError("gemm_dims")

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("ops", None)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> LayerDesc:
        return cls(**{k: v for k, v in d.items() if k != "ops"})


#: the fields a saved sample may carry (``LatencyModel.load`` checks them)
SAVED_FIELDS = tuple(f.name for f in fields(LayerDesc) if f.name != "ops")


def _numel(shape) -> int:
    return int(math.prod(shape)) if shape is not None else 0


def classify(module: Any, flops: float, macs: float) -> str:
    """The latency class of a module (its own ops)."""
    from torch import nn

    if isinstance(module, nn.Conv2d):
        g = module.groups
        if g > 1 and g == module.in_channels:
            return "dwconv"
        if g > 1:
            return "gconv"
        if tuple(module.kernel_size) == (1, 1):
            return "conv1x1"
        return "conv"
    if isinstance(module, nn.Linear):
        return "linear"
    name = type(module).__name__
    if any(p in name for p in _NORM):
        return "norm"
    if any(p in name for p in _POOL):
        return "pool"
    if isinstance(module, nn.Embedding):
        return "embedding"
    if macs > 0:
        return "other"
    return "eltwise"


def op_key(name: str) -> tuple[str, str]:
    """(op key, unit class) of an aten op name; unknown ops: ("other:NAME", "other")."""
    return OPS.get(name, (f"other:{name}", "other"))


def _pair(v) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        return (int(v[0]), int(v[-1])) if v else (1, 1)
    return int(v), int(v)


def conv_backend(batch: int, c: int, h: int, w: int, f: int, kh: int, kw: int, stride: int, padding: tuple,
                 groups: int, dilation: int = 1) -> str:
    """The backend PyTorch picks for this convolution on the CPU at the current thread count (``slow2d``:
    im2col and one GEMM per image; ``mkldnn``: oneDNN), asked of PyTorch itself on empty tensors."""
    import torch

    from lightning_edge._torchcompat import conv_backend_name

    x = torch.empty(max(1, batch), max(1, c), max(1, h), max(1, w))
    wt = torch.empty(max(1, f), max(1, c // max(1, groups)), max(1, kh), max(1, kw))
    name = conv_backend_name(x, wt, (stride, stride), padding, (dilation, dilation), groups) or "other"
    return "slow2d" if name == "slow2d" else "mkldnn" if name.startswith("mkldnn") else "other"


def _tshape(t) -> tuple | None:
    import torch

    return tuple(t.shape) if isinstance(t, torch.Tensor) else None


def _op_unit(layer: str, idx: int, name: str, args: tuple, kwargs: dict, out: Any, cost: Any) -> LayerDesc:
    """One op as a unit: its key and class, cost, and the dimensions its key's functions use."""
    import torch

    key, cls = op_key(name)
    tens = [a for a in args if isinstance(a, torch.Tensor)]
    if name in ("cat", "stack") and args and isinstance(args[0], (list, tuple)):
        tens = [a for a in args[0] if isinstance(a, torch.Tensor)]
    outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor)]
    n_out = _numel(_tshape(outs[0])) if outs else 0
    n_in = sum(_numel(_tshape(t)) for t in tens)
    flops, macs, br, bw = cost if cost is not None else (0, 0, 0, 0)
    d = LayerDesc(name=f"{layer}#{idx}", kind=name, cls=cls, flops=float(flops), bytes=float(br + bw),
                  macs=float(macs), n_in=int(n_in), n_out=int(n_out), op=key)
    x = tens[0] if tens else None
    xs = _tshape(x) or ()
    if key == "copy" and x is not None and not x.is_contiguous():
        key = d.op = "copy_t"
    if key == "sdpa" and len(tens) >= 3:  # (..., L, E) queries, (..., S, E) keys: L, E and the batch of heads
        q = tens[0]
        d.rows, d.c, d.f = int(q.shape[-2]), int(q.shape[-1]), int(tens[1].shape[-2])
        d.batch = max(1, _numel(tuple(q.shape[:-2])))
    elif key == "matmul":
        if name in ("addmm", "baddbmm", "addbmm") and len(tens) >= 3:
            a, b = tens[1], tens[2]
        elif len(tens) >= 2:
            a, b = tens[0], tens[1]
        else:
            a = b = None
        if a is not None:
            d.rows, d.c, d.f = int(a.shape[-2]) if a.dim() >= 2 else 1, int(a.shape[-1]), int(b.shape[-1])
            d.batch = max(1, _numel(tuple(a.shape[:-2])))
            d.params = 0
    elif key in ("max_pool", "avg_pool") and len(xs) == 4:
        d.batch, d.c, d.h, d.w = (int(v) for v in xs)
        d.kh, d.kw = _pair(args[1] if len(args) > 1 else kwargs.get("kernel_size", 1))
        st = args[2] if len(args) > 2 else kwargs.get("stride", None)
        d.stride = _pair(st)[0] if st else d.kh
        os_ = _tshape(outs[0]) if outs else None
        if os_ and len(os_) == 4:
            d.f, d.ho, d.wo = int(os_[1]), int(os_[2]), int(os_[3])
    elif key == "embedding" and len(tens) >= 2:
        d.params = _numel(_tshape(tens[0]))
        d.c = int(tens[0].shape[-1])
        d.rows = _numel(_tshape(tens[1]))
        d.n_in = d.rows
    else:
        if len(xs) == 4:
            d.batch, d.c, d.h, d.w = (int(v) for v in xs)
        elif xs:
            d.batch = int(xs[0]) if len(xs) >= 2 else 1
            d.c = int(xs[-1])
            d.rows = max(1, _numel(xs) // max(1, d.c))
        if key in ("batch_norm", "layer_norm"):
            d.params = sum(_numel(_tshape(t)) for t in tens[1:])
    return d


def describe(model: Any, *inputs: Any, **kwargs: Any) -> tuple[list[LayerDesc], dict[str, int]]:
    """``(layers, container_calls)``: one ``LayerDesc`` per layer of ``analyze(model, *inputs, **kwargs)`` (forward
    costs, with its op units in ``.ops``), and the number of calls of every module that ran no op of its own
    (containers, whose only cost is the Python call)."""
    import torch
    from torch.nn.modules.module import register_module_forward_hook

    from lightning_edge.cost import analyze

    names = {m: n for n, m in model.named_modules()}
    first: dict[str, tuple] = {}
    calls: dict[str, int] = {}
    modules: dict[str, Any] = {}
    ops: dict[str, list[LayerDesc]] = {}

    def shape_of(obj):
        if isinstance(obj, torch.Tensor):
            return tuple(obj.shape)
        if isinstance(obj, (list, tuple, dict)):
            items = obj.values() if isinstance(obj, dict) else obj
            return next((s for s in map(shape_of, items) if s is not None), None)
        return None

    def hook(mod, args, out):
        n = names.get(mod)
        if n is None:
            return
        calls[n] = calls.get(n, 0) + 1
        modules.setdefault(n, mod)
        if n not in first:
            first[n] = (shape_of(args), shape_of(out))

    def on_op(where, name, args, kw, out, cost):
        lst = ops.setdefault(where, [])
        lst.append(_op_unit(where, len(lst), name, args, kw, out, cost))

    handle = register_module_forward_hook(hook)
    try:
        cost = analyze(model, *inputs, on_op=on_op, **kwargs)
    finally:
        handle.remove()

    out: list[LayerDesc] = []
    seen = set()
    for lc in cost.layers:
        seen.add(lc.name)
        mod = modules.get(lc.name)
        fw = lc.forward
        ishape, oshape = first.get(lc.name, (None, None))
        cls = classify(mod, fw.flops, fw.macs) if mod is not None else ("other" if fw.macs else "eltwise")
        d = LayerDesc(name=lc.name, kind=lc.kind, cls=cls, flops=float(fw.flops), bytes=float(fw.bytes),
                      macs=float(fw.macs), params=int(lc.params), calls=max(1, int(lc.calls or calls.get(lc.name, 1))),
                      n_in=_numel(ishape), n_out=_numel(oshape))
        d.ops = ops.get(lc.name, [])
        if ishape:
            d.batch = int(ishape[0]) if len(ishape) >= 2 else 1
        if cls in ("conv", "conv1x1", "dwconv", "gconv") and ishape and oshape and len(ishape) == 4:
            d.c, d.h, d.w = int(ishape[1]), int(ishape[2]), int(ishape[3])
            d.f, d.ho, d.wo = int(oshape[1]), int(oshape[2]), int(oshape[3])
            d.kh, d.kw = _pair(mod.kernel_size)
            d.stride = _pair(mod.stride)[0]
            d.groups = int(mod.groups)
            pad = mod.padding if isinstance(mod.padding, (tuple, list)) else (0, 0)
            d.backend = conv_backend(d.batch, d.c, d.h, d.w, d.f, d.kh, d.kw, d.stride, _pair(pad), d.groups,
                                     _pair(mod.dilation)[0]) if _is_cpu(model) else "other"
        elif cls == "linear" and ishape:
            d.c, d.f = int(mod.in_features), int(mod.out_features)
            d.rows = max(1, _numel(ishape) // max(1, d.c))
            d.batch = d.rows
        elif ishape and len(ishape) == 4:
            d.c, d.h, d.w = int(ishape[1]), int(ishape[2]), int(ishape[3])
            if oshape and len(oshape) == 4:
                d.f, d.ho, d.wo = int(oshape[1]), int(oshape[2]), int(oshape[3])
            k = getattr(mod, "kernel_size", None)
            if k is not None:
                d.kh, d.kw = _pair(k)
                d.stride = _pair(getattr(mod, "stride", None) or k)[0]
        out.append(d)
    containers = {n: c for n, c in calls.items() if n not in seen}
    return out, containers


def _is_cpu(model: Any) -> bool:
    p = next((t for t in [*model.parameters(), *model.buffers()]), None)
    return p is None or p.device.type in ("cpu", "meta")


def units_of(d: LayerDesc) -> list[LayerDesc]:
    """The units a layer is predicted from: itself (a Conv2d or Linear module, ``MODULE_CLASSES``) or its ops."""
    if d.cls in MODULE_CLASSES:
        return [d]
    return list(d.ops)


# ------------------------------------------------------------------------------------------ forest features
#: the statistical models' features of a unit (``unit_features``): the slides' vector (h, w, c, f, kh, kw,
#: stride, #ops, #in, #out, #weights) and what carries it across shapes - the roofline times, the GEMM a
#: convolution becomes per image, channels per group, the data against the cache sizes, the backend - plus
#: the class, op and backend one-hots
FEATURE_NAMES: tuple[str, ...] = (
    "h", "w", "c", "f", "kh", "kw", "stride", "ops", "in", "out", "weights",
    "batch", "groups", "c_per_group", "f_per_group", "hw_in", "hw_out", "rows", "bytes",
    "gemm_m", "gemm_n", "gemm_k", "intensity",
    "weights_per_l2", "weights_per_llc", "data_per_l2", "data_per_llc", "image_data_per_l2", "reread_weights_per_llc",
    "t_roof", "t_ref", "t_compute", "t_memory", "cold_weights", "px_rows", "px_rem",
) + tuple(f"cls={c}" for c in CLASSES) + tuple(f"op={k}" for k in OP_KEYS) + tuple(f"backend={b}" for b in BACKENDS)


def unit_features(d: LayerDesc, *, peak_flops: float, bandwidth: float, t_ref: float, l2: float,
                  llc: float, lanes: int = 16) -> list[float]:
    """``FEATURE_NAMES`` of a unit (sizes log-scaled: a forest splits on ranks, but the logs keep the numbers
    readable). ``l2``/``llc``: the cache sizes in bytes of the device the model is for; ``lanes``: its fp32 SIMD
    width (``px_rows``, ``px_rem``: an image's output pixels in full SIMD rows and what is left over: at one
    thread PyTorch's GEMM per image takes longer for 9 columns than for 16)."""
    lg = math.log1p
    g = max(1, d.groups)
    wbytes = 4.0 * d.params
    data = max(0.0, d.bytes - wbytes)
    m, n, k = _gemm(d)
    per_image = data / max(1, d.batch)
    rereads = d.batch if d.backend == "slow2d" else 1
    t_c, t_m = d.flops / peak_flops, d.bytes / bandwidth
    raw = [lg(v) for v in (d.h, d.w, d.c, d.f, d.kh, d.kw, d.stride, d.flops, d.n_in, d.n_out, d.params,
                           d.batch, g, d.c / g, d.f / g, d.h * d.w, d.ho * d.wo, d.rows, d.bytes, m, n, k)]
    raw += [math.log((d.flops + 1.0) / (d.bytes + 1.0)),
            wbytes / l2, wbytes / llc, data / l2, data / llc, per_image / l2, rereads * wbytes / llc,
            math.log(max(max(t_c, t_m), 1e-12)), math.log(max(t_ref, 1e-12)), math.log(max(t_c, 1e-12)),
            math.log(max(t_m, 1e-12)), d.cold * wbytes / llc]
    px = d.ho * d.wo if d.cls in ("conv", "conv1x1", "dwconv", "gconv") else d.rows
    raw += [math.log1p(px // max(1, lanes)), (px % max(1, lanes)) / max(1, lanes)]
    raw += [1.0 if d.cls == c else 0.0 for c in CLASSES]
    raw += [1.0 if d.op == k_ else 0.0 for k_ in OP_KEYS]
    raw += [1.0 if d.backend == b else 0.0 for b in BACKENDS]
    return raw


def _gemm(d: LayerDesc) -> tuple[int, int, int]:
    """Per image (per batch item for a matmul): (M, N, K) of the GEMM a unit becomes, or zeros."""
    g = max(1, d.groups)
    if d.cls in ("conv", "conv1x1", "dwconv", "gconv"):
        return d.ho * d.wo, d.f // g, d.c // g * d.kh * d.kw
    if d.cls in ("linear", "matmul"):
        return d.rows, d.f, d.c
    return 0, 0, 0
