"""Measurements for the latency models: single layers (microbenchmarks), whole networks and their layers, and the
per-layer times ``EnergyProfiler`` wrote to ``layers.json``.

* one layer: built with torch (``nn.Conv2d``, ``nn.Linear`` ...) on the device, timed forward under
  ``torch.inference_mode`` with ``lightning_edge.calibrate.microbench.time_callable`` (median of ``repeats`` timed
  blocks after warm-up; CUDA events on a GPU, ``perf_counter_ns`` on the CPU);
* a network: its forward wall time by the same ``time_callable``, its layers' self times by the profiler's
  ``LayerTimer`` (forward hooks), median over steps;
* ``layers.json``: the forward self time (``fwd_ms``) of each layer, joined by name with the layer's shapes from
  the model the user profiled (``describe``).

The CUDA paths are written with synchronisation through ``time_callable`` and ``LayerTimer`` but have been run on
the CPU only in this repository; ``benchmarks/latency_models.py --device cuda`` checks them on a GPU.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_edge.latency.features import LayerDesc
from lightning_edge.latency.stepwise import Dim

__all__ = ["clock", "use_clock", "ClassSpec", "SPECS", "measure_layer", "layer_desc_for", "point_for", "sample_layers",
           "time_network", "time_layers", "training_from_layers_json", "Sample", "host_meta"]


_CLOCK = {"name": "wall"}


def clock() -> str:
    """The clock CPU timings use: ``"wall"`` (``perf_counter_ns``, default) or ``"thread"``."""
    return _CLOCK["name"]


def use_clock(name: str) -> None:
    """``"wall"``: wall time. ``"thread"``: the calling thread's CPU time (``thread_time_ns``), which leaves out the
    time the OS gave to other processes. Use it only with ``torch.set_num_threads(1)`` (then every op runs in the
    calling thread) to measure on a machine shared with other work; a model fitted on it predicts time on a
    quiet machine. CUDA timings always use CUDA events."""
    import torch

    if name not in ("wall", "thread"):
        raise ValueError(f"clock {name!r}: expected 'wall' or 'thread'")
    if name == "thread" and torch.get_num_threads() != 1:
        raise ValueError("the thread clock needs torch.set_num_threads(1): with more threads ops run on other "
                         "threads whose CPU time it does not see")
    _CLOCK["name"] = name


def _clock_ns():
    import time

    return time.thread_time_ns if _CLOCK["name"] == "thread" else time.perf_counter_ns


LINEAR = (1,)  # output pixels, rows and element counts are iterated over, not mapped onto parallel resources


def _squares(n: int, lo: int = 1) -> tuple[int, ...]:
    return tuple(s * s for s in range(lo, n + 1))


#: the largest square map a class's representative layer uses; beyond side*side output pixels the batch grows
#: (batch folded into pixels: (b, c, side, side), P = b * side * side), as a network's larger batches do
_SIDE = {"conv": 32, "conv1x1": 32, "dwconv": 64}


def _pixels(side: int, batches: int) -> tuple[int, ...]:
    """Output-pixel values: the square maps 2x2 .. side x side (batch 1), then batches 2 .. ``batches`` of the
    side x side map (so a batch-8 layer of a 64x64-input network is measured, not extrapolated)."""
    return _squares(side, 2) + tuple(b * side * side for b in range(2, batches + 1))


def _nchw_pixels(p: int, side: int) -> tuple[int, int]:
    """(batch, s) of the representative input for P = ``p`` output pixels: a square map while one fits in
    side x side, else batch ceil(p / side^2) of side x side maps (P values from ``_pixels`` are exact)."""
    p = max(1, int(p))
    if p <= side * side:
        return 1, _isqrt_exact(p)
    return math.ceil(p / (side * side)), side


@dataclass(frozen=True)
class ClassSpec:
    """A layer class of the step-wise model: its dimensions (ranges measured) and the representative layer."""

    cls: str
    dims: tuple[Dim, ...]
    what: str


#: the step-wise model's layer classes on a CPU-sized budget (dimension values are what is measured; layers
#: beyond them are extrapolated along the generated function and reported as such). Channel ranges start at
#: the smallest widths networks use (8; 3 input channels for a first convolution): later phases interpolate
#: between the ends of earlier dimensions, and on a CPU a 1-channel layer is far less efficient than an 8-channel
#: one, so starting at 1 makes every small layer look cheaper than it is.
SPECS: dict[str, ClassSpec] = {
    "conv": ClassSpec("conv", (Dim.range("f", 8, 512, 256), Dim.range("c", 3, 512, 256), Dim("P", _pixels(32, 8), 256, LINEAR)),
                      "Conv2d 3x3, stride 1, pad 1 on (b, c, s, s), P = b*s*s output pixels (b > 1 only at s = 32) (s >= 2: on a 1x1 map "
                      "only the centre tap works and the CPU takes another path); other kernels scale c "
                      "by kh*kw/9, groups run f/groups filters groups times"),
    "conv1x1": ClassSpec("conv1x1", (Dim.range("f", 8, 1024, 256), Dim.range("c", 8, 1024, 256),
                                     Dim("P", _pixels(32, 8), 256, LINEAR)),
                         "Conv2d 1x1 on (b, c, s, s), P = b*s*s output pixels (b > 1 only at s = 32; s >= 2: a 1x1 map takes another, faster path)"),
    "dwconv": ClassSpec("dwconv", (Dim.range("c", 8, 1024, 512), Dim("P", _pixels(64, 4), 256, LINEAR)),
                        "depthwise Conv2d 3x3, pad 1 on (b, c, s, s), P = b*s*s (b > 1 only at s = 64); other kernels scale P by kh*kw/9"),
    "linear": ClassSpec("linear", (Dim.range("f", 8, 3072, 1024), Dim.range("c", 8, 3072, 1024),
                                   Dim.range("rows", 1, 256, 16, LINEAR)),
                        "Linear(c, f) on (rows, c)"),
    "pool": ClassSpec("pool", (Dim("n", tuple(64 * s * s for s in range(1, 129)), 64 * 32 * 32, LINEAR),),
                      "MaxPool2d(3, 2, 1) on (1, 64, s, s), n = input elements"),
    "norm": ClassSpec("norm", (Dim("n", tuple(64 * s * s for s in range(1, 129)), 64 * 32 * 32, LINEAR),),
                      "BatchNorm2d (eval) on (1, 64, s, s), n = input elements"),
    # Small-channel boxes of the same classes (key "<class>/small"): a layer whose channel dimensions all fall in
    # one is predicted from its function instead of the full box's. The later phases interpolate between the ends
    # of each earlier dimension, so over 8..1024 channels a small layer (f = 96, c = 16: half of MobileNet) gets
    # the large corner's efficiency and comes out too cheap; over 8..128 the ends are layers of its own size.
    "conv/small": ClassSpec("conv", (Dim.range("f", 8, 128, 64), Dim.range("c", 3, 128, 64),
                                     Dim("P", _pixels(32, 8), 256, LINEAR)),
                            "as conv, channels up to 128"),
    "conv1x1/small": ClassSpec("conv1x1", (Dim.range("f", 8, 128, 64), Dim.range("c", 8, 128, 64),
                                           Dim("P", _pixels(32, 8), 256, LINEAR)),
                               "as conv1x1, channels up to 128"),
    "dwconv/small": ClassSpec("dwconv", (Dim.range("c", 8, 128, 64), Dim("P", _pixels(64, 4), 256, LINEAR)),
                              "as dwconv, channels up to 128"),
    "eltwise": ClassSpec("eltwise", (Dim("n", tuple(64 * s * s for s in range(1, 129)), 64 * 32 * 32, LINEAR),),
                         "ReLU on (1, 64, s, s), n = elements moved (bytes / 8, read + write of fp32)"),
}


@dataclass
class Sample:
    """One measured layer: what it is, its forward time per forward pass (all its calls), and where the number
    came from."""

    layer: LayerDesc
    time_s: float
    source: str = "microbench"

    def to_dict(self) -> dict:
        return {"layer": self.layer.to_dict(), "time_s": self.time_s, "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> Sample:
        return cls(LayerDesc.from_dict(d["layer"]), float(d["time_s"]), str(d.get("source", "")))


def host_meta(device: str, dtype: str = "float32") -> dict:
    import platform

    import torch

    from lightning_edge.calibrate.microbench import _device_name

    return {"device": device, "device_name": _device_name(device), "threads": torch.get_num_threads(),
            "clock": clock() if device == "cpu" else "cuda events",
            "dtype": dtype, "torch": torch.__version__, "python": platform.python_version(),
            "machine": platform.machine()}


# ------------------------------------------------------------------------------------------ one layer
def _isqrt_exact(p: int) -> int:
    return max(1, math.isqrt(int(p)))


def build_layer(cls: str, point: Sequence[int], device: str = "cpu", dtype: Any = None):
    """(module, input) of the representative layer of ``cls`` at ``point`` (one value per SPECS dim)."""
    import torch
    from torch import nn

    dtype = dtype or torch.float32
    kw = {"device": device, "dtype": dtype}
    if cls in ("conv", "conv1x1"):
        f, c, p = (int(v) for v in point)
        b, s = _nchw_pixels(p, _SIDE[cls])
        k = 3 if cls == "conv" else 1
        mod = nn.Conv2d(c, f, k, padding=k // 2, bias=False, **kw)
        x = torch.randn(b, c, s, s, **kw)
    elif cls == "dwconv":
        c, p = (int(v) for v in point)
        b, s = _nchw_pixels(p, _SIDE[cls])
        mod = nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False, **kw)
        x = torch.randn(b, c, s, s, **kw)
    elif cls == "linear":
        f, c, rows = (int(v) for v in point)
        mod = nn.Linear(c, f, **kw)
        x = torch.randn(rows, c, **kw)
    elif cls in ("pool", "norm", "eltwise"):
        (n,) = (int(v) for v in point)
        s = _isqrt_exact(max(1, n // 64))
        mod = {"pool": lambda: nn.MaxPool2d(3, 2, 1), "norm": lambda: nn.BatchNorm2d(64, **kw),
               "eltwise": lambda: nn.ReLU()}[cls]()
        x = torch.randn(1, 64, s, s, **kw)
    else:
        raise ValueError(f"no representative layer for class {cls!r}; expected one of {', '.join(SPECS)}")
    mod.eval()
    return mod, x


def measure_layer(cls: str, point: Sequence[int], device: str = "cpu", repeats: int = 5, warmup: int = 2,
                  dtype: Any = None, cold: bool = True) -> float:
    """Median forward seconds per call of the representative ``cls`` layer at ``point`` (``cold``: weights not in
    cache, as in a network; see ``time_layer``)."""
    mod, x = build_layer(cls, point, device, dtype)
    return time_layer(mod, x, device, repeats, warmup, cold)


def time_layer(mod: Any, x: Any, device: str = "cpu", repeats: int = 5, warmup: int = 2, cold: bool = True) -> float:
    """Median forward seconds per call of ``mod(x)``. ``cold``: the call cycles through copies of the module whose
    weights together exceed twice the last-level cache (at most 128 copies), so each call reads its weights from
    memory as a layer in a network does, instead of finding them in cache from the previous repeat; the input
    stays hot (in a network the previous layer just wrote it)."""
    import copy

    from lightning_edge.calibrate.microbench import _llc_bytes

    mods = [mod]
    if cold:
        wbytes = sum(t.numel() * t.element_size() for t in [*mod.parameters(), *mod.buffers()])
        if wbytes > 0 and _weights_matter(mod, x, wbytes, device):
            llc = _llc_bytes(device) or 32 * 2 ** 20
            n = min(128, max(1, math.ceil(2 * llc / wbytes)))
            mods += [copy.deepcopy(mod) for _ in range(n - 1)]
    if len(mods) == 1:
        return time_module(mod, (x,), device, repeats, warmup)

    class _Cycle:
        def eval(self):
            return self

        def __call__(self, x):
            for m in mods:
                m(x)

    return time_module(_Cycle(), (x,), device, repeats, warmup) / len(mods)


#: a conservative memory bandwidth for deciding whether a layer's weights are worth reading cold (bytes/s)
_COLD_BW = 5e9


def _weights_matter(mod: Any, x: Any, wbytes: int, device: str) -> bool:
    """Whether reading the weights from memory could change one call by more than 2 %: one warm call is timed,
    and copies are cycled only if ``wbytes / _COLD_BW`` exceeds 2 % of it. A large layer (a 3x3 convolution on a
    batch of maps) takes seconds per call; cycling 8 copies of it would cost 8 times the measuring time for a
    difference below the noise."""
    import torch

    if device.startswith("cuda"):
        return True
    with torch.inference_mode():
        mod(x)                                       # first call: allocation, weight packing
        t0 = _clock_ns()()
        mod(x)
        t = (_clock_ns()() - t0) * 1e-9
    return wbytes / _COLD_BW > 0.02 * t


def time_module(mod: Any, args: tuple, device: str = "cpu", repeats: int = 5, warmup: int = 2,
                kwargs: dict | None = None) -> float:
    """Median seconds per call of ``mod(*args, **kwargs)`` under ``torch.inference_mode`` (``time_callable``)."""
    import torch

    from lightning_edge.calibrate.microbench import time_callable

    kwargs = kwargs or {}

    def fn():
        return mod(*args, **kwargs)

    with torch.inference_mode():
        t, _inner = time_callable(fn, device, repeats=repeats, warmup=warmup, min_block_s=1e-3,
                                  clock_ns=_clock_ns())
    return float(t)


def point_for(layer: LayerDesc) -> tuple[str, tuple[int, ...], float] | None:
    """(class, point in that class's dims, multiplier) for a network layer, per call, or None (no function)."""
    cls = layer.cls
    calls = max(1, layer.calls)
    if cls in ("conv", "conv1x1"):
        g = max(1, layer.groups)
        f = max(1, layer.f // g)
        c = max(1, layer.c // g)
        if cls == "conv":
            c = max(1, round(c * layer.kh * layer.kw / 9))
        return cls, (f, c, max(1, layer.out_pixels)), float(g)
    if cls == "dwconv":
        p = max(1, round(layer.out_pixels * layer.kh * layer.kw / 9))
        return cls, (max(1, layer.c), p), 1.0
    if cls == "linear":
        return cls, (max(1, layer.f), max(1, layer.c), max(1, layer.rows)), 1.0
    if cls == "pool":
        return cls, (max(1, layer.n_in or round(layer.bytes / calls / 5)),), 1.0
    if cls == "norm":
        return cls, (max(1, layer.n_in or round(layer.bytes / calls / 8)),), 1.0
    if cls == "eltwise":
        return cls, (max(1, round(layer.bytes / calls / 8)),), 1.0
    return None


def layer_desc_for(cls: str, point: Sequence[int]) -> LayerDesc:
    """The LayerDesc of the representative layer (costs from ``analyze``, as for any network layer)."""
    from lightning_edge.latency.features import describe

    mod, x = build_layer(cls, point, device="meta")
    layers, _ = describe(mod, x)
    return layers[0]


# ------------------------------------------------------------------------------------------ random layers
def sample_layers(budget_s: float, device: str = "cpu", repeats: int = 5, seed: int = 0,
                  log: Callable[[str], None] | None = None, deadline: float | None = None) -> list[Sample]:
    """Measure random layers of every class (shapes like those of CNNs and transformers) for ``budget_s`` seconds:
    the statistical model's own training set."""
    import random
    import time

    import torch
    from torch import nn

    from lightning_edge.latency.features import describe

    log = log or (lambda _m: None)
    rng = random.Random(seed)
    end = time.monotonic() + budget_s if deadline is None else min(deadline, time.monotonic() + budget_s)
    chans = [3, 8, 16, 24, 32, 40, 48, 64, 72, 96, 112, 120, 128, 144, 160, 192, 240, 256, 320, 384, 480, 512,
             576, 672, 960, 1024, 1280, 2048]
    out: list[Sample] = []
    kinds = ["conv", "conv1x1", "dwconv", "linear", "pool", "norm", "eltwise", "conv", "conv1x1", "dwconv"]
    i = 0
    while time.monotonic() < end:
        kind = kinds[i % len(kinds)]
        i += 1
        batch = rng.choice([1, 1, 2, 4, 8])
        s = rng.choice([2, 4, 7, 8, 14, 16, 28, 32, 56, 64])
        if kind in ("conv", "conv1x1"):
            c, f = rng.choice(chans), rng.choice(chans)
            k = 1 if kind == "conv1x1" else rng.choice([3, 3, 3, 5, 7])
            stride = rng.choice([1, 1, 2])
            if c * f * k * k * s * s * batch > 4e8:
                continue
            mod = nn.Conv2d(c, f, k, stride, k // 2, bias=False)
            x = torch.randn(batch, c, s, s)
        elif kind == "dwconv":
            c = rng.choice(chans[1:])
            k = rng.choice([3, 3, 5])
            stride = rng.choice([1, 1, 2])
            mod = nn.Conv2d(c, c, k, stride, k // 2, groups=c, bias=False)
            x = torch.randn(batch, c, s, s)
        elif kind == "linear":
            c, f = rng.choice(chans[2:] + [768, 3072]), rng.choice(chans[2:] + [768, 1000, 3072])
            rows = batch * rng.choice([1, 1, 8, 32, 128])
            if c * f * rows > 4e8:
                continue
            mod = nn.Linear(c, f)
            x = torch.randn(rows, c)
        else:
            c = rng.choice(chans[1:])
            if c * s * s * batch > 8e6:
                continue
            mod = {"pool": lambda c=c: rng.choice([nn.MaxPool2d(3, 2, 1), nn.AdaptiveAvgPool2d(1)]),
                   "norm": lambda c=c: nn.BatchNorm2d(c),
                   "eltwise": lambda c=c: rng.choice([nn.ReLU(), nn.Hardswish(), nn.SiLU(), nn.ReLU6()])}[kind]()
            x = torch.randn(batch, c, s, s)
        mod.eval()
        if device != "cpu":
            mod, x = mod.to(device), x.to(device)
        t = time_layer(mod, x, device, repeats)
        desc = describe(mod.to("meta"), x.to("meta"))[0][0]
        out.append(Sample(desc, t, "microbench"))
    log(f"  statistical: {len(out)} random layers measured")
    return out


# ------------------------------------------------------------------------------------------ networks
def time_network(model: Any, inputs: tuple, device: str = "cpu", repeats: int = 10, warmup: int = 2,
                 kwargs: dict | None = None) -> float:
    """Median forward wall seconds of ``model(*inputs, **kwargs)`` (eval, inference mode)."""
    model.eval()
    return time_module(model, tuple(inputs), device, repeats, warmup, kwargs)


def time_layers(model: Any, inputs: tuple, steps: int = 5, kwargs: dict | None = None) -> dict[str, float]:
    """Median forward self time (seconds) of every module over ``steps`` forward passes, named as in
    ``model.named_modules()`` (the root is ``""``), measured by the profiler's ``LayerTimer``."""
    import torch

    from lightning_edge.profiling.hooks import LayerTimer

    kwargs = kwargs or {}
    model.eval()
    root = "(root)"
    timer = LayerTimer(model, backward=False, root_name=root, clock_ns=_clock_ns())
    per: dict[str, list[float]] = {}
    with torch.inference_mode():
        model(*inputs, **kwargs)  # warm-up
        for _ in range(max(1, steps)):
            with timer.step() as st:
                model(*inputs, **kwargs)
            for name, ls in st.timing.exclusive().items():
                per.setdefault("" if name == root else name, []).append(ls.fwd_ns / 1e9)
    return {k: statistics.median(v) for k, v in per.items()}


#: the size limit on a layers.json read back (a few KB per layer and stage: far above a large network's)
LAYERS_JSON_MAX_BYTES = 64 << 20


def training_from_layers_json(path: str | Path, model: Any, *inputs: Any, stage: str | None = None,
                              **kwargs: Any) -> list[Sample]:
    """Training samples from an ``EnergyProfiler`` ``layers.json``: each layer's forward self time per step
    (``fwd_ms``), joined by name with its shapes from ``describe(model, *inputs)``; ``inputs`` must be one step's
    batch as profiled. Layers without a forward time are skipped."""
    from lightning_edge._jsonfile import one_line, read_json
    from lightning_edge.latency.features import describe

    p = Path(path)
    what = "expected the layers.json EnergyProfiler writes"
    try:
        data = read_json(p, lambda why: ValueError(f"{p} {why}; {what}"), limit=LAYERS_JSON_MAX_BYTES)
    except FileNotFoundError:
        raise FileNotFoundError(f"{p}: no such layers.json; EnergyProfiler writes it to the run's log dir") from None
    if not isinstance(data, dict) or data.get("schema") != "lightning_edge.energy_profile":
        raise ValueError(f"{p}: not an EnergyProfiler layers.json (schema 'lightning_edge.energy_profile' expected)")

    def bad(field: str, expected: str, got: Any) -> ValueError:
        shown = repr(got) if isinstance(got, (int, float)) and not isinstance(got, bool) else type(got).__name__
        return ValueError(f"{p}: {one_line(field)}: expected {expected}, got {one_line(shown, 40)}; {what}")

    stages = data.get("stages") or {}
    if not isinstance(stages, dict):
        raise bad("stages", "an object of stages (train, validate, predict ...)", stages)
    if stage is None:
        stage = "predict" if "predict" in stages else ("train" if "train" in stages else next(iter(stages), None))
    if stage not in stages:
        raise ValueError(f"{p}: no stage {one_line(repr(stage), 40)}; it has {one_line(repr(sorted(stages)))}")
    if not isinstance(stages[stage], dict):
        raise bad(f"stages.{stage}", "an object with a list of layers", stages[stage])
    rows = stages[stage].get("layers", [])
    if not isinstance(rows, list):
        raise bad(f"stages.{stage}.layers", "a list of layers", rows)
    for i, row in enumerate(rows):
        field = f"stages.{stage}.layers[{i}]"
        if not isinstance(row, dict):
            raise bad(field, "an object {layer, fwd_ms, ...}", row)
        if not isinstance(row.get("layer"), str):
            raise bad(f"{field}.layer", "a layer name", row.get("layer"))
        fwd = row.get("fwd_ms")
        if fwd is not None and (isinstance(fwd, bool) or not isinstance(fwd, (int, float)) or not fwd <= 1e7):
            raise bad(f"{field}.fwd_ms", "a forward time of at most 1e7 ms, or null", fwd)
    descs, _ = describe(model, *inputs, **kwargs)
    by_name = {d.name: d for d in descs}
    out = []
    for row in rows:
        d = by_name.get(row["layer"])
        fwd = row.get("fwd_ms")
        if d is None or fwd is None or not math.isfinite(fwd) or fwd <= 0:
            continue
        out.append(Sample(d, fwd / 1e3, f"layers.json:{p.name}:{stage}"))
    if not out:
        raise ValueError(f"{p}: no layer of stage {stage!r} matched the model's layers by name with a forward time; "
                         "pass the model and the inputs that were profiled")
    return out
