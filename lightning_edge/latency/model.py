"""``LatencyModel``: the latency models of Jantsch behind one interface, fitted on the device you have.

``LatencyModel`` is an abstract base class with one subclass per kind; ``LatencyModel(kind, ...)``,
``LatencyModel.fit(kind=...)`` and ``LatencyModel.load(path)`` return the kind's class (``model_class(kind)``), and
``model.kind`` names it (a class attribute; the ``kind`` field of a saved file). Kinds (T: a unit's forward time;
f its FLOP, D its bytes, both from ``lightning_edge.analyze``):

* ``roofline`` (``RooflineLatencyModel``): T = max(f / P_peak, D / B_peak), peaks measured by
  ``lightning_edge.roofline``'s microbenchmarks;
* ``refined`` (``RefinedRooflineLatencyModel``): T = max(f / (P_peak u_eff), D / B_peak)
  (``lightning_edge.energy.refined``), u_eff from the layer's GEMM tiling on this device (CPU: a 6 x 2*SIMD
  micro-kernel over the threads);
* ``statistical`` (``StatisticalLatencyModel``): T = T_roof / u_stat, u_stat predicted by a random forest from
  features that carry across shapes (the slides' h, w, c, f, kh, kw, stride, #ops, #in, #out, #weights; the roofline
  terms; the GEMM per image; channels per group; data against the cache sizes; the convolution backend; the op),
  trained on units this device measured in a network's context (``measure.sample_units``);
* ``mixed`` (``MixedLatencyModel``): T = T_ref / u_stat, the forest trained on what the refined roofline leaves
  over (so the efficiencies multiply: f / (P_peak u_eff u_stat) where compute bounds the unit);
* ``stepwise`` (``StepwiseLatencyModel``): per class, a step-wise linear function of its dimensions generated from
  a few points measured in a network's context (``lightning_edge.latency.stepwise``).

The two roofline kinds share ``FormulaLatencyModel`` (a formula per layer); the fitted kinds ``UnitLatencyModel``
(units measured in a network's context, call overheads, disturbance, and the network calibration: a factor and a
cost per layer call fitted on the zoo's networks timed whole, ``network_calibration``), the two forest kinds
``ForestLatencyModel`` (which differ only in the base time the forest divides).

A layer is predicted from its units (``features.units_of``): a Conv2d or Linear module is one unit, any other layer
the sum of its ops (plus its module call). Units without MACs (activations, norms, pools, adds, concatenations)
get a second forest that learns their time directly: their time is mostly a per-call cost that a ratio to the
roofline does not carry across sizes.

Where the roofline says a unit is memory-bound, u_stat scales the whole roofline time, not only the compute term
as on the slides: on a CPU, units whose data stay in cache run faster than DRAM bandwidth allows, which
max(f / (P u), D / B) cannot express.

Every prediction is labelled ``estimated``. A saved model records the conditions it was fitted under (device,
threads, clock, dtype, torch version, cache sizes, load average) and the points it was fitted on, and
``predict`` warns when it is used outside them.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import statistics
import time
import warnings
from abc import ABC, ABCMeta, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, NamedTuple

import numpy as np

from lightning_edge._compat import dtype_name
from lightning_edge._jsonfile import is_json_file, one_line, read_json, write_file
from lightning_edge.latency.features import (
    CLASSES,
    FEATURE_NAMES,
    MODULE_CLASSES,
    SAVED_FIELDS,
    LayerDesc,
    describe,
    unit_features,
    units_of,
)
from lightning_edge.latency.forest import Forest, check_forest
from lightning_edge.latency.measure import (
    COLD_MIN_BYTES,
    NETWORK_BATCHES,
    NETWORK_CASES,
    PATHS,
    SPECS,
    ClassSpec,
    Sample,
    disturbance_factor,
    host_meta,
    loadavg,
    network_label,
    point_for,
    unit_path,
)
from lightning_edge.latency.stepwise import ANCHOR_LOG2, ANCHOR_PRIOR, Generation

if TYPE_CHECKING:
    from torch import nn

    from lightning_edge.energy.refined import RefinedRoofline
    from lightning_edge.roofline.model import Roofline

__all__ = ["KINDS", "LatencyModel", "LatencyModelError", "ModelLatency", "LayerLatency", "MAX_SAMPLES", "model_class",
           "UnitEstimate", "FormulaLatencyModel", "RooflineLatencyModel", "RefinedRooflineLatencyModel",
           "UnitLatencyModel", "StepwiseLatencyModel", "ForestLatencyModel", "StatisticalLatencyModel",
           "MixedLatencyModel"]

#: unit classes whose forest learns the ratio to the roofline time (they have MACs); the others learn the time
RATIO_CLASSES = MODULE_CLASSES + ("matmul",)
SCHEMA = "lightning_edge.latency_model"

#: limits on a latency-model file (``LatencyModel.load``), far above what ``fit`` writes (a step-wise model:
#: a few hundred KB, about 50 class functions of at most 4 dimensions; a statistical or mixed one: a few thousand
#: measured units and a forest of 48 trees). A model is never built with more samples than a file may hold:
#: ``LatencyModel(...)``, ``with_samples`` and ``fit`` refuse them, so whatever ``save`` writes, ``load`` reads.
MAX_FILE_BYTES = 48 << 20
MAX_SAMPLES = 10_000
MAX_DIMS = 8
MAX_DIM_VALUES = 1 << 16
MAX_POINTS = 1 << 16
MAX_CLASSES = 256
#: the network calibration (``UnitLatencyModel.network_calibration``): the factor's bounds (a model whose units
#: are off by more than 2x is not corrected but refitted), the rounds a fit times the networks in (one before
#: the units, the others after them), the budget it keeps for them (at most that many seconds and that share of
#: its budget; a round takes about 7 s on one quiet CPU thread, 15-20 s of wall time beside a CPU-bound process:
#: a round cut short by its share loses its last networks), and the least budget that times them at all
#: the model file's version: 2 since the grouped convolution's first dimension became cc = cg * cg and the
#: depthwise one's (c, hw, b) became (planes, hw) (``_point_in`` reads the files of version 1); 3 since boxes of a
#: kernel path (``measure.PATHS``: ``conv/im2col``, ``dwconv/ragged`` ...) are only for the units of that path (a
#: reader of version 2 would predict a depthwise convolution of 64 channels from a ragged box, twice too long). A
#: file of any version is read with today's choice of box where none holds a unit (``generation_for``: one that
#: holds its images, then the nearest; before, the largest); 4 since the strided convolutions oneDNN runs have boxes
#: of their own (``conv1x1/s2`` ...: a reader of version 3 would take them for stride-1 boxes)
FILE_VERSION = 4
NETWORK_FACTOR_RANGE = (0.5, 2.0)
NETWORK_CALL_MAX_S = 1e-3
NETWORK_ROUNDS = 3
NETWORK_RESERVE_S = 45.0
NETWORK_RESERVE_SHARE = 0.15
NETWORK_MIN_BUDGET_S = 60.0
#: a pass's weights come from memory once its weights and activations take half the effective last-level cache
#: (``UnitLatencyModel.dram_share``; from a quarter of it in part). Measured on a CPU (the layers with 64 KB of
#: weights or more, timed in the network against ``time_unit`` with warm and with cold weights): at batch 1 the
#: zoo's MobileNetV2 and V3 at 48 px and YOLOv8n at 64 and 96 px (9-17 MB of weights, a measured cache of 16 MB)
#: took 0.92-1.57 times the cold time's extra over the warm time (a second measurement of MobileNetV2 at 48 px:
#: 0.90), where the rule before (0 at half the cache, 1 at one and a half) gave them 0.29-0.69. A pass touches
#: more than its weights and outputs (each convolution's weights reordered for the kernel, its inputs, the
#: allocator's blocks), and the cache fills from what the core evicts. The footprint adds every output a pass
#: writes, not what is live at once: at batch 1 the latency benchmark's held-out networks get a share of 0.97-1.0
#: by this rule.
DRAM_SHARE_FROM = 0.25
DRAM_SHARE_FULL = 0.5


class LatencyModelError(ValueError):
    """A latency-model file that cannot be used: one line naming the file, the field and what was expected."""


@dataclass
class LayerLatency:
    """One layer's estimated forward time (all its calls in one forward pass)."""

    name: str
    kind: str
    time_s: float
    how: str
    cls: str = ""
    calls: int = 1
    label: str = "estimated"

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "cls": self.cls, "calls": self.calls, "time_s": self.time_s,
                "how": self.how, "label": self.label}


@dataclass
class ModelLatency:
    """A network's estimated forward latency: ``total_s`` and one ``LayerLatency`` per layer (named as in
    ``analyze``), plus the Python call overhead of container modules."""

    layers: list[LayerLatency]
    model_kind: str
    device: str
    model: str = ""
    inputs: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    label: str = "estimated"

    @property
    def total_s(self) -> float:
        return float(sum(la.time_s for la in self.layers))

    def layer(self, name: str) -> LayerLatency:
        for la in self.layers:
            if la.name == name:
                return la
        raise KeyError(f"no layer named {name!r}")

    def to_dict(self) -> dict:
        return {"schema": "lightning_edge.model_latency", "version": 1, "label": self.label,
                "latency_model": self.model_kind, "device": self.device, "model": self.model,
                "inputs": [list(s) for s in self.inputs], "total_s": self.total_s, "notes": list(self.notes),
                "layers": [la.to_dict() for la in self.layers]}

    def table(self, top: int | None = None) -> str:
        rows = self.layers if top is None else sorted(self.layers, key=lambda la: -la.time_s)[:top]
        w = min(48, max([len(la.name or "(root)") for la in rows] + [5]))
        out = [f"{self.model}: forward latency ESTIMATED by the {self.model_kind} model for {self.device} "
               f"(inputs {self.inputs})", f"{'layer':<{w}}  {'kind':<18} {'class':<8} {'ms':>9}  how"]
        for la in rows:
            n = la.name or "(root)"
            n = n if len(n) <= w else "..." + n[-(w - 3):]
            out.append(f"{n:<{w}}  {la.kind:<18} {la.cls:<8} {la.time_s * 1e3:9.4f}  {la.how}")
        out.append(f"{'TOTAL':<{w}}  {'':<18} {'':<8} {self.total_s * 1e3:9.4f}  estimated")
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out)

    def __str__(self) -> str:
        return self.table()


def _cpu_simd_lanes() -> int:
    """fp32 lanes of the widest vector unit this CPU reports (AVX-512: 16, AVX/AVX2: 8, else 4)."""
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((ln for ln in fh if ln.startswith("flags")), "")
    except OSError:
        return 4
    return 16 if " avx512f" in flags else 8 if " avx" in flags else 4


def _check_samples(n: int) -> None:
    if n > MAX_SAMPLES:
        raise ValueError(f"{n} measured units: a latency model holds at most {MAX_SAMPLES} (a larger one could be "
                         "saved but not loaded); measure for less time or pass fewer samples")


class _ByKind(ABCMeta):
    """The metaclass of ``LatencyModel``: ``LatencyModel(kind, meta, peak_flops, bandwidth, ...)`` builds the class
    that ``kind`` names (``model_class``) from the other arguments, so code written when one class held every kind
    keeps working. A subclass is built from its own arguments: ``MixedLatencyModel(meta, peak_flops, bandwidth,
    samples=...)``."""

    def __call__(cls, *args: object, **kwargs: object) -> LatencyModel:
        if cls is not LatencyModel:
            return super().__call__(*args, **kwargs)
        if "kind" in kwargs:
            kind = kwargs.pop("kind")
        elif args and not isinstance(args[0], dict):  # a dict: the meta of a subclass's arguments
            kind, args = args[0], args[1:]
        else:
            raise TypeError("LatencyModel is abstract: name a kind, LatencyModel(kind, meta, peak_flops, bandwidth, "
                            f"...) with kind one of {', '.join(KINDS)}, or build its class "
                            f"({', '.join(c.__name__ for c in _CLASSES.values())})")
        return model_class(kind)(*args, **kwargs)


class LatencyModel(ABC, metaclass=_ByKind):
    """Forward latency of a network's layers on one device; ``LatencyModel.fit(kind=..., device=..., budget_s=...)``
    measures this machine. One subclass per kind (``model_class``; the module docstring says what each is):
    ``LatencyModel(kind, ...)``, ``fit`` and ``load`` return it. A subclass says how a layer is predicted
    (``_layer_rows``); what every kind shares (the roofline terms, the conditions it was fitted under, the file)
    is here."""

    #: the kind's name, as a model file, ``fit`` and the messages give it (one of ``KINDS``)
    kind: ClassVar[str]
    #: whether the kind predicts (or describes) units through the refined roofline, which tiles a layer over
    #: ``tile["units"]`` parallel units (``meta["threads"]`` by default): a file must give one of them
    uses_tiles: ClassVar[bool] = True

    def __init__(self, meta: dict, peak_flops: float, bandwidth: float, *, tile: dict | None = None,
                 container_s: float = 0.0, module_s: float = 0.0, stepwise: dict[str, Generation] | None = None,
                 samples: list[Sample] | None = None, fit_cost: dict | None = None, notes: list[str] | None = None):
        self.meta = dict(meta)
        self.peak_flops = float(peak_flops)
        self.bandwidth = float(bandwidth)
        self.tile = dict(tile or {})
        self.container_s = float(container_s)
        self.module_s = float(module_s)
        self.stepwise = dict(stepwise or {})
        self.samples = list(samples or [])
        _check_samples(len(self.samples))
        self.fit_cost = dict(fit_cost or {})
        self.notes = list(notes or [])

    # ------------------------------------------------------------------ roofline pieces
    @property
    def roofline(self) -> Roofline:
        from lightning_edge.roofline.model import Roofline

        return Roofline(self.peak_flops, self.bandwidth, label=self.meta.get("device_name"), source="measured")

    def _refined(self) -> RefinedRoofline:
        from lightning_edge.energy.refined import RefinedRoofline

        return RefinedRoofline(tile_m=int(self.tile.get("tile_m", 6)), tile_n=int(self.tile.get("tile_n", 16)),
                               sm_count=int(self.tile.get("units", self.meta.get("threads", 1))))

    def t_roof(self, d: LayerDesc) -> float:
        return float(max(d.flops / self.peak_flops, d.bytes / self.bandwidth))

    def u_eff(self, d: LayerDesc) -> float:
        if d.cls in RATIO_CLASSES and d.flops > 0:
            try:
                return float(self._refined().u_eff(d)[0])
            except (AttributeError, ValueError, ZeroDivisionError):
                return 1.0
        return 1.0

    def t_ref(self, d: LayerDesc) -> float:
        from lightning_edge.energy.refined import RefinedRoofline

        return float(RefinedRoofline.time(self.roofline, d.flops, d.bytes, self.u_eff(d)))

    # ------------------------------------------------------------------ prediction
    def predict(self, model: nn.Module, *inputs: object, **kwargs: object) -> ModelLatency:
        """Estimated forward latency of ``model(*inputs, **kwargs)`` per layer (nothing is run: the model goes
        through ``analyze`` on the meta device)."""
        from lightning_edge.cost.capture import tensors_of

        with self._fitted_threads():
            descs, containers = describe(model, *inputs, **kwargs)
        out = self.predict_layers(descs, containers)
        out.model = type(model).__name__
        out.inputs = [tuple(t.shape) for t in tensors_of((inputs, kwargs))]
        self._check_context(model, out)
        return out

    @contextlib.contextmanager
    def _fitted_threads(self) -> Iterator[None]:
        """The convolution backend PyTorch picks depends on the thread count: within this, torch has the fitted
        one (CPU models), to ask it for the backend a layer would get."""
        import torch

        threads = self.meta.get("threads")
        prev = torch.get_num_threads()
        try:
            if threads and str(self.meta.get("device", "cpu")).startswith("cpu"):
                torch.set_num_threads(int(threads))
            yield
        finally:
            torch.set_num_threads(prev)

    def predict_layers(self, descs: list[LayerDesc], containers: dict[str, int] | None = None) -> ModelLatency:
        """Per-layer predictions of layers from ``describe`` (and the container calls it counted)."""
        rows, outside = self._layer_rows(descs, containers)
        notes = []
        if outside:
            notes.append(f"{len(outside)} layer(s) outside the fitted points (extrapolated): "
                         + ", ".join(n or "(root)" for n in outside[:6]) + (" ..." if len(outside) > 6 else ""))
        notes += self._how_notes()   # not warnings: how this kind predicted
        return ModelLatency(rows, self.kind, self.meta.get("device_name") or self.meta.get("device", "?"),
                            notes=notes)

    def _how_notes(self) -> list[str]:
        """Notes every prediction of this model carries (how it was made, not a warning)."""
        return []

    def _own_notes(self) -> list[str]:
        """How this kind predicts beyond its functions (``describe`` and every prediction's notes)."""
        return []

    @abstractmethod
    def _layer_rows(self, descs: list[LayerDesc],
                    containers: dict[str, int] | None) -> tuple[list[LayerLatency], list[str]]:
        """One row per layer (plus any rows of calls outside the layers), and the names of the layers predicted
        outside the points the model was fitted on."""

    def conditions(self) -> list[str]:
        """How the conditions now differ from those the model was fitted under (empty: the same)."""
        import torch

        from lightning_edge.calibrate.microbench import _device_name

        msgs = []
        m = self.meta
        cpu = str(m.get("device", "cpu")).startswith("cpu")
        if m.get("threads") and torch.get_num_threads() != m["threads"] and cpu:
            msgs.append(f"fitted with {m['threads']} CPU threads, now {torch.get_num_threads()}")
        if m.get("torch") and torch.__version__ != m["torch"]:
            msgs.append(f"fitted with torch {m['torch']}, now {torch.__version__}")
        if cpu and m.get("device_name"):
            here = _device_name("cpu")
            if here != m["device_name"]:
                msgs.append(f"fitted on {m['device_name']}, this is {here}")
        return msgs

    def _check_context(self, model: nn.Module, out: ModelLatency) -> None:
        msgs = self.conditions()
        dt = next((dtype_name(p.dtype) for p in model.parameters() if p.is_floating_point()), None)
        if dt and self.meta.get("dtype") and dt != self.meta["dtype"]:
            msgs.append(f"fitted for {self.meta['dtype']}, the model is {dt}")
        msgs += [n for n in out.notes if "outside the fitted points" in n]
        if msgs:
            out.notes.extend(m for m in msgs if m not in out.notes)
            warnings.warn("LatencyModel used outside what it was fitted on: " + "; ".join(msgs), stacklevel=3)

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(cls, kind: str | None = None, device: str = "cpu", budget_s: float = 300.0, *,
            threads: int | None = None, samples: Iterable[Sample] = (), classes: Iterable[str] | None = None,
            repeats: int = 5, log: Callable[[str], None] | None = None, base: LatencyModel | None = None,
            tol: float = 0.05, max_points: int = 8, clock: str | None = None, seed: int = 0) -> LatencyModel:
        """Measure this machine and fit a ``kind`` model within about ``budget_s`` seconds (wall time, everything
        included: microbenchmarks, call overheads, the class functions or the sweep). ``kind``: default
        ``"stepwise"`` (``LatencyModel.fit``), the class's own (``MixedLatencyModel.fit``).

        ``threads``: ``torch.set_num_threads`` for the measurements (recorded; default: torch's current setting).
        ``samples``: extra measured units for the statistical and mixed models (``training_from_layers_json``).
        ``classes``: the classes the step-wise model generates functions for (default all). ``base``: reuse another
        model's roofline peaks and call overheads instead of measuring them again. ``clock``: ``"thread"`` times
        the CPU with the thread's CPU time (needs ``threads=1``; for a machine shared with other work, see
        ``measure.use_clock``). ``seed``: the statistical sweep's random draws.
        """
        import torch

        kcls = cls._fit_class(kind)
        if not (budget_s > 0):
            raise ValueError(f"budget_s must be a positive number of seconds, got {budget_s!r}")
        if not (device == "cpu" or device.startswith("cuda")):
            raise ValueError(f"device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError(f"device {device!r}: no CUDA device in this torch build or machine; use device='cpu'")
        kcls._check_fit_needs()  # before measuring for minutes
        extra = list(samples)
        _check_samples(len(extra))
        from lightning_edge.latency import measure

        log = log or (lambda _m: None)
        prev_threads = torch.get_num_threads()
        prev_clock = measure.clock()
        t0 = time.monotonic()
        cpu0 = time.process_time()
        deadline = t0 + budget_s
        calls0 = measure.preemption_counts()
        prev_dist = measure._DISTURBANCE["curve"]
        prev_speed = measure._SPEED["track"]
        try:
            if threads is not None:
                if threads < 1:
                    raise ValueError(f"threads must be >= 1, got {threads}")
                torch.set_num_threads(int(threads))
            if clock is not None:
                measure.use_clock(clock)
            meta = {**host_meta(device), **kcls._fit_meta()}
            # the machine as it is (another process on this CPU?), before and after the measurements (below); the
            # second probe's time is kept out of the measurements' share of the budget
            probe = ({} if budget_s >= 60 else {"lengths": (4, 16, 64), "rounds": 1, "passes": 3} if budget_s >= 10
                     else {"lengths": (4, 16, 48), "rounds": 1, "passes": 2})
            p0 = time.monotonic()
            dist0 = measure.disturbance(device, **probe)
            measure.use_disturbance(dist0["pass_s"], dist0["factor"])
            deadline -= time.monotonic() - p0
            # the machine's speed through the fit, probed every few seconds: what is timed while a burst of other
            # work slows the machine is corrected to its usual speed (``measure.SpeedTrack``; CUDA: not tracked)
            # (waited out first, within a share of the budget)
            wait_s = measure.speed_wait_s(budget_s, float(dist0.get("preempt_hz") or 0.0))
            speed = measure.SpeedTrack(device, wait_s=wait_s, wait_until=t0 + budget_s) if device == "cpu" else None
            measure.use_speed_track(speed)
            if speed is not None:
                speed.factor()   # the first probe, guarded as every other (a failing probe ends the tracking)
            if base is not None:
                peak, bw = base.peak_flops, base.bandwidth
                container_s, module_s = base.container_s, base.module_s
                bench_s = 0.0
            else:
                from lightning_edge.calibrate.microbench import run_microbench

                log(f"roofline microbenchmarks on {device} ({torch.get_num_threads()} threads) ...")
                mb = run_microbench(device, quick=budget_s < 600, precisions=["fp32"], log=log)
                p = mb.precisions["fp32"]
                peak, bw = float(p["peak_flops"]), float(p["bandwidth"])
                module_s, container_s = measure.call_overheads(device)
                bench_s = mb.elapsed_s
            lanes = _cpu_simd_lanes() if device == "cpu" else 0
            tile = ({"tile_m": 6, "tile_n": 2 * lanes, "units": torch.get_num_threads(), "mapping": "cpu micro-kernel"}
                    if device == "cpu" else {"tile_m": 128, "tile_n": 64,
                                             "units": torch.cuda.get_device_properties(device).multi_processor_count,
                                             "mapping": "gpu thread-block tiles over SMs"})
            cost: dict = {"microbench_s": round(bench_s, 2)}
            # a full fit of a unit kind ends by timing the zoo's calibration networks whole (``network_factor``):
            # their share of the budget is kept from the units'
            calibrate = classes is None and issubclass(kcls, UnitLatencyModel) and budget_s >= NETWORK_MIN_BUDGET_S
            # in NETWORK_ROUNDS rounds, one before the units and the others after them (the machine drifts over a
            # fit), each network's pass the median of its rounds (``network_passes``; all kept in the fit cost)
            rounds: list[list[tuple[str, float]]] = []
            if calibrate:
                per_round = min(NETWORK_RESERVE_S, NETWORK_RESERVE_SHARE * budget_s) / NETWORK_ROUNDS
                log("calibration networks (the zoo's, whole passes), first round ...")
                n0 = time.monotonic()
                try:
                    rounds.append(measure.time_networks(device, deadline=n0 + per_round,
                                                        layers=network_layer_cache(device)))
                except (RuntimeError, MemoryError) as e:   # out of memory on a small board: the units still count
                    calibrate = False
                    cost["network_calibration"] = f"not calibrated: {type(e).__name__}: {one_line(str(e))[:200]}"
                    log(cost["network_calibration"])
                n1 = time.monotonic()
                deadline -= (per_round * (NETWORK_ROUNDS - 1) if calibrate else 0.0) + (n1 - n0)
            job = _FitJob(device=device, budget_s=budget_s, deadline=deadline, classes=classes, repeats=repeats,
                          log=log, tol=tol, max_points=max_points, seed=seed, samples=extra)
            gens, train = kcls._measure(job, cost)
            nets: list[tuple[str, float]] = []
            if calibrate:
                log(f"calibration networks, {NETWORK_ROUNDS - 1} more rounds ...")
                n2 = time.monotonic()
                # the networks the first round timed (the others would be left out of the passes), each round
                # within its share of one end (a round overruns it by at most one network)
                names = list(dict.fromkeys(measure.network_name(k) for k, _s in rounds[0]))
                failed = ""
                for i in range(1, NETWORK_ROUNDS):
                    try:
                        rounds.append(measure.time_networks(device, deadline=n2 + i * per_round, names=names,
                                                            layers=network_layer_cache(device)))
                    except (RuntimeError, MemoryError) as e:   # the minutes of units and the rounds timed are kept
                        failed = f"{type(e).__name__}: {one_line(str(e))[:200]}"
                        break
                if len(rounds) >= 2:
                    nets = network_passes(rounds)
                    each = [dict(r) for r in rounds]
                    cost["network_rounds_s"] = {k: [round(d[k], 7) for d in each] for k, _s in nets}
                if failed:
                    cost["network_calibration"] = (f"calibrated on {len(rounds)} rounds of {NETWORK_ROUNDS}: "
                                                   if nets else "not calibrated: ") + failed
                    log(cost["network_calibration"])
                cost["networks_s"] = round(n1 - n0 + time.monotonic() - n2, 2)
            if speed is not None:
                cost["speed"] = speed.summary()
                measure.use_speed_track(None)   # the measurements are over
            la = loadavg()
            meta["load_after"] = [round(v, 2) for v in la] if la else None
            dist1 = measure.disturbance(device, **probe)
            meta.update(_disturbance_meta(dist0, dist1))
            done = measure.preemption_counts()
            meta["unit_calls_preempted"] = [done["preempted"] - calls0["preempted"], done["timed"] - calls0["timed"]]
            cost["measure_elapsed_s"] = round(time.monotonic() - t0, 2)
            lm = kcls(meta, peak, bw, tile=tile, container_s=container_s, module_s=module_s, stepwise=gens,
                      samples=train, fit_cost=cost)
            if nets:  # predicted with the fitted thread count (describe asks torch for the backend it would pick)
                lm.meta.update(lm.network_calibration(nets))
        finally:
            torch.set_num_threads(prev_threads)
            measure._CLOCK["name"] = prev_clock
            measure._DISTURBANCE["curve"] = prev_dist
            measure.use_speed_track(prev_speed)
        lm.fit_cost["elapsed_s"] = round(time.monotonic() - t0, 2)
        lm.fit_cost["cpu_s"] = round(time.process_time() - cpu0, 2)
        return lm

    @classmethod
    def _fit_class(cls, kind: str | None) -> type[LatencyModel]:
        """The class ``cls.fit(kind)`` fits: the kind's (default ``stepwise``) where ``cls`` is abstract, else
        ``cls`` itself (``kind``, if given, must be its own)."""
        if inspect.isabstract(cls):
            kcls = model_class("stepwise" if kind is None else kind)
            if not issubclass(kcls, cls):
                raise ValueError(f"{cls.__name__}.fit cannot fit a {kcls.kind} model: call LatencyModel.fit(kind="
                                 f"{kcls.kind!r})")
            return kcls
        if kind is not None and kind != cls.kind:
            model_class(kind)  # an unknown kind says which there are
            raise ValueError(f"{cls.__name__}.fit fits a {cls.kind} model, not a {kind} one: call "
                             f"LatencyModel.fit(kind={kind!r})")
        return cls

    @classmethod
    def _fit_meta(cls) -> dict:
        """What a fit of this kind records of how it predicts (``meta`` fields), beside the host's."""
        return {}

    @classmethod
    def _check_fit_needs(cls) -> None:
        """Raise ImportError where a package this kind's fit needs is missing (the roofline and step-wise kinds
        need none beyond torch)."""

    @classmethod
    def _measure(cls, job: _FitJob, cost: dict) -> tuple[dict[str, Generation], list[Sample]]:
        """What ``fit`` measures for this kind within ``job.deadline``, after the roofline peaks and call overheads:
        the step-wise functions and the samples the model is built with (``job.samples`` where it measures none);
        what it cost goes into ``cost``. The roofline kinds measure nothing more."""
        return {}, list(job.samples)

    def with_samples(self, samples: Iterable[Sample], kind: str | None = None) -> LatencyModel:
        """A statistical or mixed model trained on this model's samples plus ``samples`` (nothing is measured).
        Refused beyond ``MAX_SAMPLES`` in all (such a model could be saved but not loaded)."""
        both = self.samples + list(samples)
        _check_samples(len(both))
        lm = model_class(kind or self.kind)(self.meta, self.peak_flops, self.bandwidth, tile=self.tile,
                                            container_s=self.container_s, module_s=self.module_s,
                                            stepwise=self.stepwise, samples=both, fit_cost=self.fit_cost,
                                            notes=self.notes)
        nets = network_measurements(self.meta)
        if nets and isinstance(lm, UnitLatencyModel):  # its own predictions of the same passes: its own factor
            lm.meta.update(lm.network_calibration(nets))
        return lm

    # ------------------------------------------------------------------ files
    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA, "version": FILE_VERSION, "kind": self.kind, "label": "fitted on measurements",
            "meta": self.meta, "peak_flops": self.peak_flops, "bandwidth": self.bandwidth, "tile": self.tile,
            "container_s": self.container_s, "module_s": self.module_s, "fit_cost": self.fit_cost,
            "notes": self.notes, "stepwise": {c: g.to_dict() for c, g in self.stepwise.items()},
            "samples": [s.to_dict() for s in self.samples],
        }

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        if p.is_dir():
            raise ValueError(f"{p} is a directory: give a file name such as {p / 'latency.json'}")
        _check_samples(len(self.samples))
        d = self.to_dict()
        _ModelFile(p).check(d)  # what load checks: a file save writes always loads
        text = json.dumps(d, separators=(",", ":"), allow_nan=False)
        if len(text) > MAX_FILE_BYTES:
            raise ValueError(f"the model is {len(text)} bytes as JSON, more than a file may hold ({MAX_FILE_BYTES})")
        # atomically (a reader sees the old file or the new one), never through a symbolic link nor over a file
        # that is not JSON (a mistyped path must not destroy another file): _jsonfile.write_file
        return write_file(p, text, lambda why: ValueError(f"{p}: {why}"), ours=is_json_file, what="latency model")

    @classmethod
    def load(cls, path: str | Path) -> LatencyModel:
        """A model saved by ``save``, of the class its kind names (``LatencyModel.load``: any kind; a subclass's
        ``load``: that kind only). The file is checked before anything is built from it (size, types, ranges,
        array sizes, the forests' trees: ``MAX_FILE_BYTES``, ``MAX_SAMPLES`` ...); a file that fails is one
        ``LatencyModelError`` naming the file, the field and what was expected. A statistical or mixed model
        predicts with the forests stored in the file; scikit-learn is needed only to fit one, or to load a file
        written without forests (which trains them again)."""
        p = Path(path)
        try:
            d = read_json(p, lambda why: LatencyModelError(f"{p} {why}; expected a latency model file written by "
                                                           "`lightning-edge latency fit --out FILE`"),
                          limit=MAX_FILE_BYTES)
        except FileNotFoundError:
            raise FileNotFoundError(f"{p}: no such latency model file; make one with "
                                    "`lightning-edge latency fit --out FILE`") from None
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise LatencyModelError(f"{p}: not a latency model file (schema {SCHEMA!r} expected)")
        _ModelFile(p).check(d)
        kcls = model_class(d["kind"])
        if not issubclass(kcls, cls):
            raise LatencyModelError(f"{p}: holds a {kcls.kind} latency model, not a {cls.__name__}; load it with "
                                    "LatencyModel.load")
        try:
            return kcls._from_dict(d)
        except (KeyError, TypeError, ValueError) as exc:
            raise LatencyModelError(f"{p}: latency model file is incomplete or damaged ({exc!r})") from None

    @classmethod
    def _from_dict(cls, d: dict) -> LatencyModel:
        """The model a checked file (``_ModelFile.check``) holds."""
        return cls(d["meta"], d["peak_flops"], d["bandwidth"], tile=d.get("tile"),
                   container_s=d.get("container_s", 0.0), module_s=d.get("module_s", 0.0),
                   stepwise={c: Generation.from_dict(g) for c, g in (d.get("stepwise") or {}).items()},
                   samples=[Sample.from_dict(s) for s in d.get("samples") or []], fit_cost=d.get("fit_cost"),
                   notes=d.get("notes"), **cls._own_fields(d))

    @classmethod
    def _own_fields(cls, d: dict) -> dict:
        """The constructor arguments, from a checked file, that only this kind takes (none for most)."""
        return {}

    @classmethod
    def _check_file(cls, d: dict, f: _ModelFile) -> None:
        """Raise ``f.fail(...)`` where a file of this kind lacks what the kind cannot be built without (``d``'s
        fields have been checked for types and ranges). The roofline kinds need nothing more."""

    def describe(self) -> str:
        m = self.meta
        lines = [f"{self.kind} latency model for {m.get('device_name')} ({m.get('device')}, {m.get('threads')} threads, "
                 f"{m.get('dtype')}, torch {m.get('torch')}, clock {m.get('clock')})",
                 f"  roofline: P_peak {self.peak_flops / 1e9:.1f} GFLOP/s, B_peak {self.bandwidth / 1e9:.2f} GB/s "
                 "(measured)",
                 f"  call overheads in a network's context: module {self.module_s * 1e6:.1f} us, container "
                 f"{self.container_s * 1e6:.1f} us"]
        if m.get("load_before") or m.get("load_after"):
            lines.append(f"  load average while fitting: before {m.get('load_before')}, after {m.get('load_after')} "
                         f"({m.get('cpus')} CPUs)")
        for c, g in self.stepwise.items():
            lines.append(f"  {c}: {g.formula()}  [{g.n_points} points of {g.full_sweep_points} "
                         f"({100 * g.n_points / g.full_sweep_points:.4f} %), {g.elapsed_s:.1f} s]")
        if self.samples:
            lines.append(f"  random forests trained on {len(self.samples)} measured units")
        lines += [f"  {n}" for n in self._own_notes()]
        if m.get("network_factor") is not None:
            lines.append(f"  network calibration: every layer x {m['network_factor']:.3f} + "
                         f"{float(m.get('network_call_s') or 0) * 1e6:.1f} us per call, from "
                         f"{len(m.get('network_cases') or [])} zoo network passes (ratios "
                         f"{min(m.get('network_ratios') or [0]):.2f}-"
                         f"{max(m.get('network_ratios') or [0]):.2f}); leave-one-network-out error "
                         f"{m.get('network_error_pct')} % (what to expect on a network it did not time)")
        sp = self.fit_cost.get("speed") if self.fit_cost else None
        if isinstance(sp, dict):
            n, of = (sp.get("corrected") or [0, 0])[:2]
            lines.append(f"  the machine's speed through the fit: {sp.get('n_probes', len(sp.get('probes') or []))} "
                         f"probes, usual {sp.get('usual_ms')} ms, {100 * float(sp.get('off_share') or 0):.0f} % of them "
                         f"more than {100 * float(sp.get('band') or 0):.0f} % off; {n} of {of} measurements corrected"
                         + (f" (factors {sp['factor_range'][0]}-{sp['factor_range'][1]})" if sp.get("factor_range")
                            else "") + _waited(sp.get("waited"))
                         + (f"; tracking stopped: {sp['stopped']}" if sp.get("stopped") else ""))
        if self.fit_cost:
            cost = {k: v for k, v in self.fit_cost.items() if k != "speed"}
            lines.append(f"  fit cost: {cost}")
        return "\n".join(lines)


@dataclass
class _FitJob:
    """What ``LatencyModel.fit`` was asked to measure, as a kind's ``_measure`` reads it."""

    device: str
    budget_s: float
    deadline: float                 # time.monotonic() by which the measurements end
    classes: Iterable[str] | None
    repeats: int
    log: Callable[[str], None]
    tol: float
    max_points: int
    seed: int
    samples: list[Sample]           # measured units given to fit (layers.json)


# ------------------------------------------------------------------------------------------ the roofline kinds
class FormulaLatencyModel(LatencyModel):
    """A roofline kind: each layer's time is a formula of its FLOPs and bytes and the measured peaks (nothing else
    is measured); no call overheads, no disturbance (a bound stays a bound)."""

    def _layer_rows(self, descs: list[LayerDesc],
                    containers: dict[str, int] | None) -> tuple[list[LayerLatency], list[str]]:
        return [self._layer(d) for d in descs], []

    @abstractmethod
    def _layer(self, d: LayerDesc) -> LayerLatency:
        """The layer's row."""


class RooflineLatencyModel(FormulaLatencyModel):
    """``roofline``: T = max(f / P_peak, D / B_peak)."""

    kind = "roofline"
    uses_tiles = False

    def _layer(self, d: LayerDesc) -> LayerLatency:
        return LayerLatency(d.name, d.kind, self.t_roof(d), "roofline max(f/P, D/B)", d.cls, d.calls)


class RefinedRooflineLatencyModel(FormulaLatencyModel):
    """``refined``: T = max(f / (P_peak u_eff), D / B_peak), u_eff from the layer's GEMM tiling on this device."""

    kind = "refined"

    def _layer(self, d: LayerDesc) -> LayerLatency:
        u = self.u_eff(d)
        return LayerLatency(d.name, d.kind, self.t_ref(d), f"refined roofline, u_eff={u:.3g}", d.cls, d.calls)


# ------------------------------------------------------------------------------------------ the fitted kinds
class UnitEstimate(NamedTuple):
    """A unit's predicted time (all its calls), how it was predicted, and whether outside the fitted points."""

    time_s: float
    how: str
    extrapolated: bool


class UnitLatencyModel(LatencyModel):
    """A fitted kind: a layer is predicted from its units (``features.units_of``), each measured in a network's
    context, plus the module calls a layer of ops makes, the container modules' calls, and the disturbance of the
    machine as it was fitted. A subclass predicts the units (``_predict_units``)."""

    @abstractmethod
    def _predict_units(self, units: list[LayerDesc]) -> list[UnitEstimate]:
        """One estimate per unit."""

    def _layer_rows(self, descs: list[LayerDesc], containers: dict[str, int] | None, *,
                    calibrated: bool = True) -> tuple[list[LayerLatency], list[str]]:
        """(``calibrated=False``: without the network calibration's terms, what ``network_calibration`` fits them
        on.)"""
        rows: list[LayerLatency] = []
        outside: list[str] = []
        per_layer = [units_of(d) for d in descs]
        flat = [u for us in per_layer for u in us]
        share = self.dram_share(descs)
        for u in flat:
            u.cold = share if 4 * u.params >= COLD_MIN_BYTES else 0.0
        got = self._predict_units(flat)
        k = 0
        for d, us in zip(descs, per_layer):
            parts = got[k:k + len(us)]
            k += len(us)
            if any(p.extrapolated for p in parts):
                outside.append(d.name)
            if d.cls in MODULE_CLASSES:
                t, how = parts[0].time_s, parts[0].how
            else:  # ops: each was timed inside one module call; the layer makes `calls` of them
                t = sum(p.time_s for p in parts) + (d.calls - len(us)) * self.module_s
                t = max(t, d.calls * self.module_s if not us else 0.25 * sum(p.time_s for p in parts))
                how = (" + ".join(p.how for p in parts[:3]) + (f" + {len(parts) - 3} more" if len(parts) > 3 else "")
                       if parts else f"{d.calls} module call(s) without ops x {self.module_s * 1e6:.1f} us")
            rows.append(LayerLatency(d.name, d.kind, float(t), how, d.cls, d.calls))
        if containers and self.container_s > 0:
            n = sum(containers.values())
            rows.append(LayerLatency("(containers)", "Python calls", n * self.container_s,
                                     f"{n} container module calls x {self.container_s * 1e6:.1f} us (measured)",
                                     "call", n))
        # the machine as it was fitted: a pass that long is f times its undisturbed parts; and what the units'
        # context misses of a network, measured on the zoo's (network_calibration): a factor and a cost per call
        f = self.disturbance(sum(r.time_s for r in rows)) * (self.network_factor if calibrated else 1.0)
        per_call = self.network_call_s if calibrated else 0.0
        for r in rows:
            r.time_s *= f
            if per_call and r.cls != "call":
                r.time_s += per_call * max(1, r.calls)
        return rows, outside

    def _how_notes(self) -> list[str]:
        notes = self._own_notes()
        if self.meta.get("network_factor") is None:
            return notes
        return notes + [f"every layer x {self.network_factor:.3f} + {self.network_call_s * 1e6:.1f} us per call: the "
                        "network calibration (the zoo's networks timed whole by the fit; leave-one-network-out error "
                        f"{self.meta.get('network_error_pct')} %)"]

    @property
    def network_factor(self) -> float:
        """The network calibration's factor (``network_calibration``); 1 where the model has none (a fit of some
        classes only, a file written before it)."""
        return float(self.meta.get("network_factor") or 1.0)

    @property
    def network_call_s(self) -> float:
        """The network calibration's seconds per layer call (``network_calibration``); 0 where it has none."""
        return float(self.meta.get("network_call_s") or 0.0)

    def network_calibration(self, nets: Sequence[tuple[str, float]]) -> dict:
        """What takes this model's predictions of the zoo's calibration networks (``measure.network_cases``) to
        their passes ``nets`` (``[(label, seconds)]``, ``measure.time_networks``): a factor ``a`` on every layer and
        a cost ``c`` per layer call, ``pass = a * predicted + c * calls``, least squares in relative error (``a``
        within ``NETWORK_FACTOR_RANGE``, ``c`` from 0 to ``NETWORK_CALL_MAX_S``; where ``c`` would be negative, the
        geometric mean of the ratios alone).

        What the units' context cannot see of a network is measured here on networks: the code and data its other
        layers leave in the caches, the Python between layers, the passes another process preempts. Two terms,
        because the shortfall was larger at batch 1 than at batch 8 on the zoo and the held-out networks alike (one
        factor left the held-out networks 7-18 % under at batch 1 and 7-14 % over at batch 8; with the cost per
        call, held-out MAPE 7.5 -> 6.6 % and 11.0 -> 8.9 % in two fits); not one factor per class, which predicted
        the held-out networks worse (9.8-14.8 % against 8.3 %, by ridge regression on twelve passes). None of
        the held-out benchmark networks is among them.

        Returns the meta fields: ``network_factor``, ``network_call_s``, the labels and seconds of the passes, each
        pass's ratio to the uncalibrated prediction, and ``network_error_pct``, the leave-one-network-out error
        (each zoo network, all its cases and batches, predicted with the terms fitted on the others: what to expect
        on a network the fit did not time)."""
        from lightning_edge.latency import measure

        secs = dict(nets)
        with self._fitted_threads():
            layers = network_layers(self.meta.get("device") or "cpu", list(secs))
        cases: dict[str, tuple[float, float, float]] = {}   # label -> (seconds, uncalibrated prediction, calls)
        for label, (descs, containers) in layers.items():
            calls = float(sum(max(1, d.calls) for d in descs))
            p = sum(r.time_s for r in self._layer_rows(descs, containers, calibrated=False)[0])
            if p > 0 and secs[label] > 0:
                cases[label] = (float(secs[label]), p, calls)
        if len(cases) < 2:
            return {}
        a, c = _calibration_terms(list(cases.values()))
        errs = []
        nets_of = {k: measure.network_family(k) for k in cases}
        for net in set(nets_of.values()):
            others = [v for k, v in cases.items() if nets_of[k] != net]
            if others:
                ao, co = _calibration_terms(others)
                errs += [abs((ao * p + co * n) / t - 1) for k, (t, p, n) in cases.items() if nets_of[k] == net]
        labels = list(cases)
        return {"network_factor": round(a, 4), "network_call_s": round(c, 9), "network_cases": labels,
                "network_s": [round(cases[k][0], 7) for k in labels],
                "network_ratios": [round(cases[k][0] / cases[k][1], 4) for k in labels],
                "network_error_pct": round(100 * statistics.mean(errs), 1) if errs else None}

    def disturbance(self, t: float) -> float:
        """The factor by which a pass of ``t`` undisturbed seconds was longer on the machine as it was fitted
        (``measure.disturbance``: about 1 quiet; another process on the same CPU preempts every pass longer than its
        time slice, and the pass reads again what that process evicted from the caches). 1 where the model has no
        curve (fitted before it was measured)."""
        m = self.meta
        dp, df = m.get("disturbance_pass_s"), m.get("disturbance_factor")
        if not dp or not df or len(dp) != len(df):
            return 1.0
        return disturbance_factor(t, dp, df)

    def dram_share(self, descs: list[LayerDesc]) -> float:
        """The share of a network's weights read from memory rather than the last-level cache: 0 while its
        weights and the activations it writes in a pass take at most ``DRAM_SHARE_FROM`` of the cache (on a CPU
        the effective one the fit measured; on a GPU its L2, unmeasured), 1 from ``DRAM_SHARE_FULL`` of it, linear
        between. An estimate of the cache's state, not a measurement: the statistical and step-wise models blend
        their warm and cold weight times by it."""
        llc = float(self.meta.get("llc_bytes") or 32 << 20)
        foot = sum(4.0 * d.params + 4.0 * d.n_out * max(1, d.calls) for d in descs)
        lo, hi = DRAM_SHARE_FROM * llc, DRAM_SHARE_FULL * llc
        return float(min(1.0, max(0.0, (foot - lo) / (hi - lo))))


class StepwiseLatencyModel(UnitLatencyModel):
    """``stepwise``: per class, a step-wise linear function of its dimensions generated from a few points measured
    in a network's context (``lightning_edge.latency.stepwise``); a unit no function covers gets the refined
    roofline."""

    kind = "stepwise"

    def __init__(self, meta: dict, peak_flops: float, bandwidth: float, *, tile: dict | None = None,
                 container_s: float = 0.0, module_s: float = 0.0, stepwise: dict[str, Generation] | None = None,
                 samples: list[Sample] | None = None, fit_cost: dict | None = None, notes: list[str] | None = None):
        super().__init__(meta, peak_flops, bandwidth, tile=tile, container_s=container_s, module_s=module_s,
                         stepwise=stepwise, samples=samples, fit_cost=fit_cost, notes=notes)
        if not self.stepwise:
            raise ValueError("a stepwise model needs at least one generated class function")

    @classmethod
    def _check_file(cls, d: dict, f: _ModelFile) -> None:
        gens = d.get("stepwise") or {}
        if not gens:
            raise f.fail("stepwise", "at least one layer-class function in a stepwise model", gens)

    @classmethod
    def _fit_meta(cls) -> dict:
        # its network calibration is fitted on the anchored functions (``anchor``)
        return {"anchor_log2": ANCHOR_LOG2, "anchor_prior": ANCHOR_PRIOR}

    @classmethod
    def _measure(cls, job: _FitJob, cost: dict) -> tuple[dict[str, Generation], list[Sample]]:
        skipped: list[str] = []
        revisited: list[str] = []
        gens = _fit_stepwise(job.device, job.deadline, job.classes, job.repeats, job.log, job.tol, job.max_points,
                             skipped, revisited)
        n = sum(g.n_points for g in gens.values())
        full = sum(g.full_sweep_points for g in gens.values())
        cost.update({"points": n, "full_sweep_points": full, "skipped_boxes": skipped, "revisited_boxes": revisited,
                     "measure_s": round(sum(g.elapsed_s for g in gens.values()), 2),
                     "per_class": {c: {"points": g.n_points, "full_sweep_points": g.full_sweep_points,
                                       "elapsed_s": round(g.elapsed_s, 2)} for c, g in gens.items()}})
        return gens, list(job.samples)

    def _predict_units(self, units: list[LayerDesc]) -> list[UnitEstimate]:
        return [self._unit(u) for u in units]

    def _unit(self, u: LayerDesc) -> UnitEstimate:
        pf = point_for(u)
        path = unit_path(u)
        key = self._box_key(pf[0], pf[1], path=path) if pf is not None else None
        if pf is None or key is None:
            what = u.op or u.cls
            return UnitEstimate(self.t_ref(u), f"{what}: refined roofline (no step-wise function)", True)
        gen = self.stepwise[key]
        cls, unit_point, mult = pf
        point = _point_in(gen, cls, unit_point, u)
        out = any(p < dim.lo or p > dim.hi for p, dim in zip(point, gen.dims))
        calls = max(1, u.calls)
        per_call = max(self._value(gen, point), 0.0)
        cold_key = self._box_key(cls, unit_point, dram=True, path=path) if u.cold > 0 else None
        cold = self.stepwise[cold_key] if cold_key is not None else None
        cold_point = _point_in(cold, cls, unit_point, u) if cold is not None else point
        # a cold box far from the point, or of another kernel path (the fit past its deadline left the path's cold
        # boxes out: cold boxes go last), is not used
        cold_used = (cold is not None and cold is not gen and _holds(cold, cold_point)
                     and _box_path(cold_key) == _box_path(key))
        if cold_used:
            per_call = (1 - u.cold) * per_call + u.cold * max(self._value(cold, cold_point), 0.0)
        per_call *= mult
        dims = ", ".join(f"{dim.name}={p}" for dim, p in zip(gen.dims, point))
        how = f"step-wise {cls}({dims})" + (f" {path}" if path and _box_path(key) == path else "") + \
            (f" x {mult:g}" if mult != 1 else "") + \
            (f" x {calls} calls" if calls > 1 else "") + (f", {u.cold:.0%} weights from memory" if cold_used else "")
        return UnitEstimate(per_call * calls, how, out)

    def _own_notes(self) -> list[str]:
        a = self.anchor
        return [f"each class function anchored on the points its generation measured (weights exp(-d^2 / {a[0]:g}^2) "
                f"over the log2 distance, {a[1]:g} the tree's own)"] if a else []

    @property
    def anchor(self) -> tuple[float, float] | None:
        """``(log2, prior)`` of ``Generation.anchored`` where the fit calibrated this model on anchored functions
        (``meta`` ``anchor_log2``, ``anchor_prior``, which ``fit`` records); None for a file fitted before (its
        network calibration was fitted on the trees alone, which it keeps) and for a model built from generations
        without them."""
        a, p = self.meta.get("anchor_log2"), self.meta.get("anchor_prior")
        return (float(a), float(p)) if a is not None and p is not None else None

    def _value(self, gen: Generation, point: Sequence[int]) -> float:
        anchor = self.anchor
        return gen.anchored(point, *anchor) if anchor else gen(point)

    def generation_for(self, cls: str, point: Sequence[int], dram: bool = False, path: str = "") -> Generation | None:
        """The step-wise function for a unit of ``cls`` at ``point``: among the class's boxes (``cls`` and its
        sub-boxes ``cls/...``, e.g. ``conv1x1/small``; ``dram``: those measured with the weights in memory,
        ``cls/dram`` and ``cls/BOX-dram``, where the class has them; ``path``: those of the unit's kernel path,
        ``measure.unit_path``, where the file has them) the smallest that contains the point, else the box it
        leaves in the fewest dimensions, of those one that holds its images (``b``: a batch-1 unit is not
        extrapolated from batches 2-8, which put batch 1 18 % short to 37 % long), the nearest (by the ratio of each
        value to the box's range), then the largest of them (extrapolated), else None."""
        key = self._box_key(cls, point, dram, path)
        return self.stepwise[key] if key is not None else None

    def _box_key(self, cls: str, point: Sequence[int], dram: bool = False, path: str = "") -> str | None:
        """The name of the box ``generation_for`` chooses (what a prediction labels and compares paths by)."""
        keys = [k for k in self.stepwise if k.split("/", 1)[0] == cls]
        cold = [k for k in keys if k.endswith("dram")]
        keys = cold if (dram and cold) else [k for k in keys if not k.endswith("dram")] or keys
        # a file fitted before a path had none of its boxes: PyTorch's usual path's (not another path's)
        keys = [k for k in keys if _box_path(k) == path] or [k for k in keys if not _box_path(k)] or keys
        if not keys:
            return None

        def outside(g: Generation) -> tuple[int, bool, float]:
            off = [abs(math.log(max(p, 1) / min(max(p, dim.lo), dim.hi))) for p, dim in zip(point, g.dims)]
            return sum(o > 0 for o in off), any(o > 0 for o, d in zip(off, g.dims) if d.name == "b"), sum(off)

        def rank(g: Generation) -> tuple:
            off = outside(g)   # the smallest box that holds the point; else the nearest of those it leaves in
            return off, g.full_sweep_points if off[0] == 0 else -g.full_sweep_points   # the fewest, the largest

        return min(keys, key=lambda k: rank(self.stepwise[k]))


class ForestLatencyModel(UnitLatencyModel):
    """A statistical kind: T = T_base / u_stat, u_stat predicted by a random forest from features that carry across
    shapes, trained on units this device measured in a network's context (``measure.sample_units``). Units without
    MACs get a second forest that learns their time directly. A subclass says what the base time is
    (``base_time``)."""

    #: what ``base_time`` is, as a prediction's ``how`` names it
    base_name: ClassVar[str]

    def __init__(self, meta: dict, peak_flops: float, bandwidth: float, *, tile: dict | None = None,
                 container_s: float = 0.0, module_s: float = 0.0, stepwise: dict[str, Generation] | None = None,
                 samples: list[Sample] | None = None, fit_cost: dict | None = None, notes: list[str] | None = None,
                 forests: dict[str, Forest] | None = None):
        """``forests``: the forests a file stored (else they are trained on ``samples``, which needs
        scikit-learn)."""
        super().__init__(meta, peak_flops, bandwidth, tile=tile, container_s=container_s, module_s=module_s,
                         stepwise=stepwise, samples=samples, fit_cost=fit_cost, notes=notes)
        self._forests: dict[str, Forest] = {}
        self._range: dict[str, tuple[float, float]] = {}
        if not self.samples:
            raise ValueError(f"a {self.kind} model needs measured units to train its random forest")
        self._ranges()
        if forests:
            self._forests = dict(forests)
        else:
            self._train()

    @abstractmethod
    def base_time(self, d: LayerDesc) -> float:
        """The roofline time the forest's u_stat divides (all the unit's calls)."""

    @staticmethod
    def _group(d: LayerDesc) -> str:
        """Which forest a unit belongs to: ``"ratio"`` (units with MACs: the forest learns log u_stat, the roofline's
        share of the measured time) or ``"time"`` (units without MACs: the forest learns log T itself). Such a
        unit's time is a per-call cost that its bytes barely move: a ratio learned on larger ones, applied to an
        unfamiliar small unit's tiny roofline time, made a YOLOv8n C2f's chunk and concat 10 times too slow."""
        return "ratio" if d.cls in RATIO_CLASSES else "time"

    def _target(self, d: LayerDesc, t: float) -> float:
        """What the forest learns: log(base / T) (a ratio unit) or log T (per call)."""
        t = max(t / max(1, d.calls), 1e-12)
        if self._group(d) == "time":
            return math.log(t)
        return math.log(max(self.base_time(d) / max(1, d.calls), 1e-12) / t)

    def _features(self, d: LayerDesc) -> list[float]:
        calls = max(1, d.calls)
        return unit_features(d, peak_flops=self.peak_flops, bandwidth=self.bandwidth, t_ref=self.t_ref(d) / calls,
                             l2=float(self.meta.get("l2_bytes") or 1 << 20),
                             llc=float(self.meta.get("llc_bytes") or 32 << 20),
                             lanes=max(1, int(self.tile.get("tile_n", 32)) // 2))

    def _key(self, d: LayerDesc) -> str:
        return f"{d.cls}:{d.op}"

    def _ranges(self) -> None:
        """The targets seen per unit class and op: a prediction is kept inside them (a forest averages training
        targets, but a class it saw little of should not borrow another class's extremes)."""
        self._range = {}
        for s in self.samples:
            t = self._target(s.layer, s.time_s)
            lo, hi = self._range.get(self._key(s.layer), (t, t))
            self._range[self._key(s.layer)] = (min(lo, t), max(hi, t))

    def _train(self) -> None:
        X = np.array([self._features(s.layer) for s in self.samples])
        y = np.array([self._target(s.layer, s.time_s) for s in self.samples])
        groups = np.array([self._group(s.layer) for s in self.samples])
        self._forests = {}
        for g in ("ratio", "time"):
            sel = groups == g
            if sel.any():
                self._forests[g] = Forest.fit(X[sel], y[sel])

    def unit_times(self, units: list[LayerDesc]) -> np.ndarray:
        """Seconds per unit (all its calls) predicted by the forests."""
        if not units:
            return np.zeros(0)
        X = np.array([self._features(u) for u in units])
        out = np.empty(len(units))
        for g in ("ratio", "time"):
            idx = [i for i, u in enumerate(units) if self._group(u) == g]
            if not idx:
                continue
            rf = self._forests.get(g) or next(iter(self._forests.values()))
            pred = rf.predict(X[idx])
            for i, v in zip(idx, pred):
                u = units[i]
                r = self._range.get(self._key(u))
                if r is not None:
                    v = min(max(v, r[0]), r[1])
                calls = max(1, u.calls)
                t = math.exp(v) if g == "time" else max(self.base_time(u) / calls, 1e-12) / math.exp(v)
                out[i] = t * calls
        return out

    def u_stat(self, units: list[LayerDesc]) -> np.ndarray:
        """u_stat of each unit: its base time (``base_time``) over the forest's time."""
        t = self.unit_times(units)
        return np.array([self.base_time(u) / max(ti, 1e-15) for u, ti in zip(units, t)])

    def _predict_units(self, units: list[LayerDesc]) -> list[UnitEstimate]:
        times = self.unit_times(units)
        return [UnitEstimate(t, self._how(u, t), self._key(u) not in self._range) for u, t in zip(units, times)]

    def _how(self, u: LayerDesc, t: float) -> str:
        what = u.op or u.cls
        if self._group(u) == "time":
            return f"{what}: forest time"
        return f"{what}: {self.base_name} / u_stat={self.base_time(u) / max(t, 1e-15):.3g}"

    @classmethod
    def _check_fit_needs(cls) -> None:
        try:
            import sklearn  # noqa: F401
        except ImportError as exc:
            raise ImportError("fitting the statistical and mixed latency models needs scikit-learn: "
                              "pip install 'lightning-edge[latency]'") from exc

    @classmethod
    def _measure(cls, job: _FitJob, cost: dict) -> tuple[dict[str, Generation], list[Sample]]:
        from lightning_edge.latency import measure

        # the forest is trained after the sweep: leave it its share of the budget
        left = max(5.0, job.deadline - time.monotonic() - _train_reserve_s(job.budget_s))
        own = measure.sample_units(left, job.device, job.repeats, seed=job.seed, log=job.log)
        own = own[:MAX_SAMPLES - len(job.samples)]
        train = own + list(job.samples)
        cost.update({"points": len(own), "extra_samples": len(train) - len(own), "seed": job.seed})
        return {}, train

    @classmethod
    def _check_file(cls, d: dict, f: _ModelFile) -> None:
        samples = d.get("samples") or []
        if not samples:
            raise f.fail("samples", f"measured units to train a {cls.kind} model's random forest on", samples)

    @classmethod
    def _own_fields(cls, d: dict) -> dict:
        forests = None  # forests for other features (another version's) are trained again from the samples
        if d.get("forests") and d.get("features") == list(FEATURE_NAMES):
            forests = {g: Forest.from_dict(f) for g, f in d["forests"].items()}
        return {"forests": forests}

    def to_dict(self) -> dict:
        d = super().to_dict()
        if self._forests:
            d["features"] = list(FEATURE_NAMES)
            d["forests"] = {g: f.to_dict() for g, f in self._forests.items()}
        return d


class StatisticalLatencyModel(ForestLatencyModel):
    """``statistical``: T = T_roof / u_stat, the forest's u_stat the share of the roofline time a unit reaches."""

    kind = "statistical"
    base_name = "roofline"

    def base_time(self, d: LayerDesc) -> float:
        return self.t_roof(d)


class MixedLatencyModel(ForestLatencyModel):
    """``mixed``: T = T_ref / u_stat, the forest trained on what the refined roofline leaves over (so the
    efficiencies multiply: f / (P_peak u_eff u_stat) where compute bounds the unit)."""

    kind = "mixed"
    base_name = "refined roofline"

    def base_time(self, d: LayerDesc) -> float:
        return self.t_ref(d)


_CLASSES: dict[str, type[LatencyModel]] = {c.kind: c for c in (
    RooflineLatencyModel, RefinedRooflineLatencyModel, StatisticalLatencyModel, MixedLatencyModel,
    StepwiseLatencyModel)}

#: the kinds' names, as ``fit``, files and the command line give them
KINDS = tuple(_CLASSES)


def model_class(kind: str) -> type[LatencyModel]:
    """The class of the ``kind`` model (one of ``KINDS``)."""
    try:
        return _CLASSES[kind]
    except (KeyError, TypeError):  # TypeError: not a name (unhashable)
        raise ValueError(f"kind {kind!r} not understood: expected one of {', '.join(KINDS)}") from None


def _disturbance_meta(a: dict, b: dict) -> dict:
    """The disturbance measured before and after a fit's measurements, for the model file: the pass lengths of the
    first, the mean of both factors (the conditions over the fit), the preemption rate of each."""
    pass_s = list(a.get("pass_s") or [])
    fa, fb = list(a.get("factor") or []), list(b.get("factor") or [])
    factor = [round((x + y) / 2, 4) for x, y in zip(fa, fb)] if len(fa) == len(fb) else fa
    return {"disturbance_pass_s": pass_s, "disturbance_factor": factor,
            "preempt_hz": [a.get("preempt_hz"), b.get("preempt_hz")]}


def _calibration_terms(cases: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """``(a, c)`` of ``seconds = a * predicted + c * calls`` over ``cases`` of ``(seconds, predicted, calls)``,
    least squares in relative error, within ``NETWORK_FACTOR_RANGE`` and ``[0, NETWORK_CALL_MAX_S]``; the geometric
    mean of the ratios (``c = 0``) where two terms do not fit (one case, a negative cost)."""
    lo, hi = NETWORK_FACTOR_RANGE
    g = math.exp(statistics.mean(math.log(t / p) for t, p, _n in cases))
    if len(cases) >= 3:
        A = np.array([[p / t, n / t] for t, p, n in cases])
        (a, c), *_ = np.linalg.lstsq(A, np.ones(len(cases)), rcond=None)
        if 0 <= c <= NETWORK_CALL_MAX_S and lo <= a <= hi:
            return float(a), float(c)
    return float(min(hi, max(lo, g))), 0.0


def network_passes(rounds: Sequence[Sequence[tuple[str, float]]]) -> list[tuple[str, float]]:
    """Each calibration network's pass over a fit's rounds of ``measure.time_networks`` (``[(label, seconds)]``
    each): the median of its rounds (of two, their mean), for the networks every round timed, in the first round's
    order.

    Neither the least nor the mean of the rounds: a shared host's other tenants slow the machine in bursts of
    seconds (on this repository's 2-CPU virtual machine a ResNeXt-like pass ran 4.0-4.6 ms, then 5.9-6.8 ms for
    seconds at a time). A user's passes, like the benchmark's references (the median of rounds), are taken with
    the bursts in them, so the least of the rounds is too short: on eight fits' two rounds (4-31 % apart) it put
    the held-out networks at 9.0 % MAPE on average, the mean at 8.2 %. But the mean of two takes half of a burst
    that slowed one round. In one quiet fit, MobileNetV2 and V3 at batch 1 passed 24 % slower than in the fit
    before it on the same host, 24-29 % slower than the units predicted (7-13 % in the fit before), and the
    calibration put that on every network: a depthwise-separable held-out network came out 19 % over. The median
    of three rounds leaves out a round a burst slowed alone (not one that lasted two rounds; the two after the
    units run back to back)."""
    if not rounds:
        return []
    each = [dict(r) for r in rounds]
    common = set.intersection(*(set(d) for d in each))
    return [(k, statistics.median(d[k] for d in each)) for k, _s in rounds[0] if k in common]


#: the calibration networks' layers (``describe``), per device and thread count (describe asks torch for the
#: backend it would pick), label: what a fit's ``measure.time_networks`` described, for its ``network_calibration``
#: and any ``with_samples`` after it, so the zoo's networks are built once a process
_NETWORK_LAYERS: dict[tuple[str, int], dict[str, tuple[list[LayerDesc], dict[str, int]]]] = {}


def network_layers(device: str, labels: Sequence[str]) -> dict[str, tuple[list[LayerDesc], dict[str, int]]]:
    """``{label: (layers, container calls)}`` of the calibration networks ``labels`` (``measure.network_cases``)
    on ``device`` at the current thread count, built and described only where this process has not yet."""
    from lightning_edge.latency import measure

    known = network_layer_cache(device)
    missing = sorted({measure.network_name(k) for k in labels if k not in known})
    if missing:
        for label, model, inputs in measure.network_cases(device, missing):
            known.setdefault(label, describe(model, *inputs))
    return {k: known[k] for k in labels if k in known}


def network_layer_cache(device: str) -> dict[str, tuple[list[LayerDesc], dict[str, int]]]:
    """The calibration networks' layers this process described on ``device`` at the current thread count (what
    ``measure.time_networks(layers=...)`` fills)."""
    import torch

    return _NETWORK_LAYERS.setdefault((str(device), torch.get_num_threads()), {})


def network_measurements(meta: dict) -> list[tuple[str, float]]:
    """The calibration networks' passes a fit recorded in ``meta`` (``[(label, seconds)]``; empty if none)."""
    cases, secs = meta.get("network_cases") or [], meta.get("network_s") or []
    return list(zip(cases, secs)) if len(cases) == len(secs) else []


#: dimension counts a class had in files written before it changed (``_point_in`` maps a point onto them)
_LEGACY_NDIMS: dict[str, tuple[int, ...]] = {"dwconv": (3,)}


def _point_in(gen: Generation, cls: str, point: tuple[int, ...], unit: LayerDesc) -> tuple[int, ...]:
    """``point`` (``measure.point_for``) in ``gen``'s own dimensions: a grouped convolution's first one was its
    channels per group (cg) in the models fitted before it became cc = cg * cg (the time of a 3x3 grouped
    convolution at cg = 8 was predicted 2-6 times too long, interpolated along cg between 2 and 64 channels); a
    depthwise convolution's were channels, pixels and images before its planes (channels x images) took the place
    of the first and last (16 channels of 64x64 at batch 8 were predicted 94 % too long, interpolated between
    batches at the corners of the box, where 128 channels at batch 8 stream 33 MB): such a box gets the unit's
    own channels, pixels and images, as it was fitted to.

    A file written since either change has ``version`` 2 (a reader of version 1 would query a ``cc`` box at cg and
    predict a grouped convolution 8 times too short; it refuses the file instead)."""
    if cls == "gconv" and gen.dims and gen.dims[0].name == "cg":
        return (max(1, round(math.sqrt(point[0]))),) + tuple(point[1:])
    if cls == "dwconv" and len(gen.dims) == 3:   # (c, hw, b) before the batch was folded into the planes
        return (max(1, unit.c), point[1], max(1, unit.batch))
    return point


def _waited(w: object) -> str:
    """``describe()``'s words for a speed tracker's waits (``SpeedTrack.summary()["waited"]``)."""
    if not isinstance(w, dict) or not w.get("bursts"):
        return ""
    return f"; waited {w.get('waited_s')} s for {w.get('bursts')} bursts ({w.get('ended')} ended in time)"


def _box_path(key: str) -> str:
    """The kernel path a box was measured on (``measure.ClassSpec.path``), from its name: ``conv/small-im2col-dram``
    -> ``"im2col"``."""
    parts = key.split("/", 1)[-1].replace("-", "/").split("/") if "/" in key else []
    return next((p for p in parts if p in PATHS), "")


def _paths_apply(device: str) -> bool:
    """Whether units on ``device`` can take the kernel paths of ``measure.PATHS`` (im2col against oneDNN, oneDNN's
    strided and ragged depthwise kernels): the CPU of a torch with oneDNN."""
    import torch

    return device == "cpu" and bool(torch.backends.mkldnn.is_available())


def _holds(gen: Generation, point: Sequence[int]) -> bool:
    return all(dim.lo <= p <= dim.hi for p, dim in zip(point, gen.dims))


def _train_reserve_s(budget_s: float) -> float:
    """Seconds of a statistical fit's budget kept for training the forests after the sweep."""
    return min(30.0, 0.1 * budget_s)


# ------------------------------------------------------------------------------------------ file checks
_MISSING = object()
_MAX_TIME_S = 1e6           # seconds: a layer, a measured point, a step-wise function's parameters
_MAX_INT = 1 << 48          # a layer's sizes, a dimension's values
_MAX_WIDTH = 1 << 30        # a step width


def _show(v: object) -> str:
    """A value as an error message shows it: short, whatever it is."""
    if v is _MISSING:
        return "nothing (the field is missing)"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return f"a list of {len(v)}"
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    if isinstance(v, int) and abs(v) >= 10 ** 15:
        return f"an integer of {len(str(abs(v)))} digits"
    return one_line(repr(v), 40)


class _ModelFile:
    """The checks of a latency-model file's fields, before anything is built from them (``LatencyModel.load``):
    types, finite numbers in sane ranges, bounded lists and nesting, sizes known before anything is allocated, no
    zero divisor. ``check`` raises ``LatencyModelError`` at the first field that fails."""

    def __init__(self, where: Path):
        self.where = where

    def fail(self, field: str, what: str, got: object = _MISSING) -> LatencyModelError:
        return LatencyModelError(f"{self.where}: {one_line(field)}: expected {what}, got {_show(got)}; the file is "
                                 "incomplete or damaged: fit the model again (`lightning-edge latency fit`)")

    # -- types
    def obj(self, v: object, field: str, what: str = "an object", max_keys: int = 1000) -> dict:
        if not isinstance(v, dict):
            raise self.fail(field, what, v)
        if len(v) > max_keys:
            raise self.fail(field, f"{what} of at most {max_keys} fields", f"{len(v)} fields")
        return v

    def lst(self, v: object, field: str, max_len: int, what: str = "a list") -> list:
        if not isinstance(v, list):
            raise self.fail(field, what, v)
        if len(v) > max_len:
            raise self.fail(field, f"{what} of at most {max_len}", f"{len(v)}")
        return v

    def num(self, v: object, field: str, lo: float, hi: float, what: str = "a number") -> float:
        # ints are compared as ints: float() of a 400-digit integer raises OverflowError
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v <= hi):
            raise self.fail(field, f"{what} from {lo:g} to {hi:g}", v)
        return v

    def integer(self, v: object, field: str, lo: int, hi: int, what: str = "an integer") -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not (lo <= v <= hi):
            raise self.fail(field, f"{what} from {lo} to {hi}", v)
        return v

    def text(self, v: object, field: str, max_len: int = 1000, *, null: bool = False) -> str | None:
        if v is None and null:
            return v
        if not isinstance(v, str) or len(v) > max_len:
            raise self.fail(field, f"a string of at most {max_len} characters" + (" or null" if null else ""), v)
        return v

    def plain(self, v: object, field: str, depth: int) -> None:
        """Free-form JSON (meta, fit_cost, extra): finite numbers, bounded strings and lists, at most ``depth``
        levels of lists and objects."""
        if v is None or isinstance(v, bool):
            return
        if isinstance(v, str):
            self.text(v, field, 10_000)
            return
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if not (-1e300 <= v <= 1e300):
                raise self.fail(field, "a finite number", v)
            return
        if isinstance(v, (dict, list)):
            if depth < 1:
                raise self.fail(field, "a number, a string or null (nested too deeply)", v)
            items = self.obj(v, field).items() if isinstance(v, dict) else \
                enumerate(self.lst(v, field, 10_000))
            for k, x in items:
                self.plain(x, f"{field}.{k}" if isinstance(v, dict) else f"{field}[{k}]", depth - 1)
            return
        raise self.fail(field, "a number, a string or null", v)

    # -- the file
    def check(self, d: dict) -> None:
        version = d.get("version", 1)
        if version not in range(1, FILE_VERSION + 1) or isinstance(version, bool):
            raise self.fail("version", f"1 to {FILE_VERSION} (a newer lightning_edge may have written this file: "
                            "upgrade)", version)
        kind = d.get("kind", _MISSING)
        if not isinstance(kind, str) or kind not in KINDS:
            raise self.fail("kind", f"one of {', '.join(KINDS)}", kind)
        self.text(d.get("label"), "label", null=True)
        meta = self.obj(d.get("meta", _MISSING), "meta", max_keys=64)
        for k, v in meta.items():
            self.plain(v, f"meta.{k}", 1)
        if meta.get("threads") is not None:
            self.integer(meta["threads"], "meta.threads", 1, 4096, "a number of threads")
        for k in ("device", "device_name", "clock", "dtype", "torch"):
            self.text(meta.get(k), f"meta.{k}", null=True)
        dp, df = meta.get("disturbance_pass_s"), meta.get("disturbance_factor")
        if dp is not None or df is not None:
            dp = self.lst(dp, "meta.disturbance_pass_s", 16, "a list of pass seconds")
            df = self.lst(df, "meta.disturbance_factor", 16, "a list of factors")
            if len(dp) != len(df):
                raise self.fail("meta.disturbance_factor", f"a factor for each of the {len(dp)} pass lengths", df)
            for i, v in enumerate(dp):
                self.num(v, f"meta.disturbance_pass_s[{i}]", 1e-9, 1e3, "a number of seconds")
            for i, v in enumerate(df):
                self.num(v, f"meta.disturbance_factor[{i}]", 0.5, 20.0, "a factor between 0.5 and 20")
        if meta.get("anchor_log2") is not None or meta.get("anchor_prior") is not None:
            self.num(meta.get("anchor_log2"), "meta.anchor_log2", 0.05, 16.0, "a length in log2 units")
            self.num(meta.get("anchor_prior"), "meta.anchor_prior", 1e-6, 1000.0, "a weight")
        if meta.get("network_factor") is not None:
            lo, hi = NETWORK_FACTOR_RANGE
            self.num(meta["network_factor"], "meta.network_factor", lo, hi, "a factor")
        if meta.get("network_call_s") is not None:
            self.num(meta["network_call_s"], "meta.network_call_s", 0, NETWORK_CALL_MAX_S, "seconds per layer call")
        if meta.get("network_cases") is not None or meta.get("network_s") is not None:
            cases = self.lst(meta.get("network_cases"), "meta.network_cases", 64, "a list of network labels")
            secs = self.lst(meta.get("network_s"), "meta.network_s", 64, "a list of pass seconds")
            if len(cases) != len(secs):
                raise self.fail("meta.network_s", f"a pass time for each of the {len(cases)} networks", secs)
            known = [network_label(case, b) for case, _n, _s, _o in NETWORK_CASES for b in NETWORK_BATCHES]
            for i, v in enumerate(cases):
                if v not in known:   # with_samples builds the networks it names
                    raise self.fail(f"meta.network_cases[{i}]", f"one of the calibration networks {', '.join(known)}",
                                    v)
            for i, v in enumerate(secs):
                self.num(v, f"meta.network_s[{i}]", 1e-9, 1e3, "a number of seconds")
        self.num(d.get("peak_flops", _MISSING), "peak_flops", 1e3, 1e18, "a number of FLOP/s")
        self.num(d.get("bandwidth", _MISSING), "bandwidth", 1e3, 1e16, "a number of bytes/s")
        if d.get("tile") is not None:
            tile = self.obj(d["tile"], "tile", max_keys=64)
            for k, v in tile.items():
                self.plain(v, f"tile.{k}", 1)
            for k in ("tile_m", "tile_n", "units"):
                if k in tile:
                    self.integer(tile[k], f"tile.{k}", 1, 1 << 20)
        self.num(d.get("container_s", 0.0), "container_s", 0.0, 1.0, "a number of seconds")
        self.num(d.get("module_s", 0.0), "module_s", 0.0, 1.0, "a number of seconds")
        if d.get("fit_cost") is not None:
            self.plain(self.obj(d["fit_cost"], "fit_cost"), "fit_cost", 4)
        if d.get("notes") is not None:
            for i, n in enumerate(self.lst(d["notes"], "notes", 1000, "a list of strings")):
                self.text(n, f"notes[{i}]", 10_000)
        gens = d.get("stepwise") or {}
        self.obj(gens, "stepwise", "an object of class functions", max_keys=MAX_CLASSES)
        classes = sorted({c.split("/", 1)[0] for c in SPECS})
        for key, g in gens.items():
            base = key.split("/", 1)[0]
            if len(key) > 64:
                raise self.fail("stepwise", "layer-class names of at most 64 characters", key)
            if base not in classes:
                raise self.fail(f"stepwise.{key}", f"a layer class ({', '.join(classes)}, or CLASS/BOX)", key)
            ndims = len(SPECS[base].dims)
            got = len(g.get("dims") or []) if isinstance(g, dict) and isinstance(g.get("dims"), list) else ndims
            self.generation(g, f"stepwise.{key}", got if got in _LEGACY_NDIMS.get(base, ()) else ndims)
        samples = d.get("samples") or []
        for i, s in enumerate(self.lst(samples, "samples", MAX_SAMPLES, "a list of measured layers")):
            self.sample(s, f"samples[{i}]")
        kcls = model_class(kind)
        kcls._check_file(d, self)
        feats = d.get("features")
        if feats is not None:
            for i, n in enumerate(self.lst(feats, "features", 4096, "a list of feature names")):
                self.text(n, f"features[{i}]", 200)
        if d.get("forests") is not None:
            forests = self.obj(d["forests"], "forests", "an object of forests (ratio, time)", max_keys=2)
            if feats is None:
                raise self.fail("features", "the feature names the stored forests were trained on")
            for g, f in forests.items():
                if g not in ("ratio", "time"):
                    raise self.fail(f"forests.{g}", "a forest named ratio or time", g)
                check_forest(f, f"forests.{g}", len(feats), self.fail)
        if kcls.uses_tiles and "units" not in (d.get("tile") or {}) and meta.get("threads", 1) is None:
            raise self.fail("tile.units", "the parallel units the refined roofline tiles over (or meta.threads)")

    def generation(self, g: object, field: str, ndims: int) -> None:
        g = self.obj(g, field)
        dims = self.lst(g.get("dims", _MISSING), f"{field}.dims", MAX_DIMS, "a list of dimensions")
        if len(dims) != ndims:
            raise self.fail(f"{field}.dims", f"{ndims} dimension(s), as the layer class has", f"{len(dims)}")
        for i, dd in enumerate(dims):
            self.dim(dd, f"{field}.dims[{i}]")
        self.tree(g.get("tree", _MISSING), f"{field}.tree", ndims, -1)
        for i, pv in enumerate(self.lst(g.get("points", _MISSING), f"{field}.points", MAX_POINTS)):
            pf = f"{field}.points[{i}]"
            if not isinstance(pv, list) or len(pv) != 2:
                raise self.fail(pf, "a [point, seconds] pair", pv)
            for j, x in enumerate(self.lst(pv[0], f"{pf}[0]", ndims, f"a point of {ndims} integers")):
                self.integer(x, f"{pf}[0][{j}]", 1, _MAX_INT)
            if len(pv[0]) != ndims:
                raise self.fail(f"{pf}[0]", f"a point of {ndims} integers", pv[0])
            self.num(pv[1], f"{pf}[1]", -_MAX_TIME_S, _MAX_TIME_S, "a number of seconds")
        for i, ph in enumerate(self.lst(g.get("phases", _MISSING), f"{field}.phases", MAX_DIMS)):
            self.phase(ph, f"{field}.phases[{i}]")
        self.num(g.get("elapsed_s", 0.0), f"{field}.elapsed_s", 0.0, 1e9, "a number of seconds")
        self.text(g.get("formula"), f"{field}.formula", 100_000, null=True)

    def dim(self, dd: object, field: str) -> None:
        dd = self.obj(dd, field)
        self.text(dd.get("name", _MISSING), f"{field}.name", 64)
        for k in ("lo", "hi", "n_values"):
            if dd.get(k) is not None:
                self.integer(dd[k], f"{field}.{k}", 1, _MAX_INT)
        vals = dd.get("values")
        if vals:  # Generation.from_dict: the values, else every integer from lo to hi
            for i, v in enumerate(self.lst(vals, f"{field}.values", MAX_DIM_VALUES, "a list of integers")):
                self.integer(v, f"{field}.values[{i}]", 1, _MAX_INT)
        else:  # the number of values is known before they are made
            lo = self.integer(dd.get("lo", _MISSING), f"{field}.lo", 1, _MAX_INT)
            hi = self.integer(dd.get("hi", _MISSING), f"{field}.hi", lo, _MAX_INT, "an integer (at least lo)")
            if hi - lo >= MAX_DIM_VALUES:
                raise self.fail(field, f"at most {MAX_DIM_VALUES} values from lo to hi", f"{hi - lo + 1}")
        ref = dd.get("ref")
        if ref is not None and (isinstance(ref, bool) or not isinstance(ref, int)
                                or not (ref in set(vals) if vals else lo <= ref <= hi)):
            raise self.fail(f"{field}.ref", "one of the dimension's values", ref)
        if dd.get("widths"):
            for i, w in enumerate(self.lst(dd["widths"], f"{field}.widths", 64, "a list of step widths")):
                self.integer(w, f"{field}.widths[{i}]", 1, _MAX_WIDTH, "a step width")

    def tree(self, t: object, field: str, ndims: int, parent: int) -> None:
        """A number, or a node ``{dim, name, w, a, h}`` whose ``a`` and ``h`` are trees of later dimensions (so
        the tree is at most ``ndims`` deep)."""
        if not isinstance(t, dict):
            self.num(t, field, -_MAX_TIME_S, _MAX_TIME_S, "a number of seconds")
            return
        if parent + 1 >= ndims:
            raise self.fail(field, f"seconds (a node here would be deeper than the class's {ndims} dimension(s))", t)
        dim = self.integer(t.get("dim", _MISSING), f"{field}.dim", parent + 1, ndims - 1, "a dimension index")
        self.text(t.get("name", _MISSING), f"{field}.name", 64)
        self.integer(t.get("w", _MISSING), f"{field}.w", 1, _MAX_WIDTH, "a step width")
        self.tree(t.get("a", _MISSING), f"{field}.a", ndims, dim)
        self.tree(t.get("h", _MISSING), f"{field}.h", ndims, dim)

    def phase(self, ph: object, field: str) -> None:
        ph = self.obj(ph, field)
        self.text(ph.get("dim", _MISSING), f"{field}.dim", 64)
        for i, x in enumerate(self.lst(ph.get("points", _MISSING), f"{field}.points", MAX_POINTS)):
            self.integer(x, f"{field}.points[{i}]", 1, _MAX_INT)
        ncomp = 1 << MAX_DIMS
        for c, vs in enumerate(self.lst(ph.get("values", _MISSING), f"{field}.values", ncomp)):
            for i, v in enumerate(self.lst(vs, f"{field}.values[{c}]", MAX_POINTS)):
                self.num(v, f"{field}.values[{c}][{i}]", -_MAX_TIME_S, _MAX_TIME_S, "a number of seconds")
        for c, fn in enumerate(self.lst(ph.get("fns", _MISSING), f"{field}.fns", ncomp)):
            fn = self.obj(fn, f"{field}.fns[{c}]")
            self.num(fn.get("a", _MISSING), f"{field}.fns[{c}].a", -_MAX_TIME_S, _MAX_TIME_S, "a number of seconds")
            self.integer(fn.get("w", _MISSING), f"{field}.fns[{c}].w", 1, _MAX_WIDTH, "a step width")
            self.num(fn.get("h", _MISSING), f"{field}.fns[{c}].h", -_MAX_TIME_S, _MAX_TIME_S, "a number of seconds")
        for c, r in enumerate(self.lst(ph.get("residuals", _MISSING), f"{field}.residuals", ncomp)):
            self.num(r, f"{field}.residuals[{c}]", 0.0, 1e300, "a relative residual")
        for c, lab in enumerate(self.lst(ph.get("labels", []), f"{field}.labels", ncomp)):
            self.text(lab, f"{field}.labels[{c}]", 1000)

    def sample(self, s: object, field: str) -> None:
        s = self.obj(s, field, "a measured layer {layer, time_s, source}")
        self.num(s.get("time_s", _MISSING), f"{field}.time_s", 0.0, _MAX_TIME_S, "a number of seconds")
        self.text(s.get("source", ""), f"{field}.source")
        lay = self.obj(s.get("layer", _MISSING), f"{field}.layer", "a layer object")
        kinds = {f.name: f.type for f in fields(LayerDesc) if f.name in SAVED_FIELDS}
        for k, v in lay.items():
            lf = f"{field}.layer.{k}"
            t = kinds.get(k)
            if t is None:
                raise self.fail(lf, f"only a layer's fields ({', '.join(kinds)})", "an unknown field")
            if t == "str":
                self.text(v, lf)
            elif t == "float":
                self.num(v, lf, 0.0, 1e21)
            elif t == "int":
                self.integer(v, lf, 0, _MAX_INT)
            else:
                self.plain(self.obj(v, lf), lf, 2)
        for k in ("name", "kind", "cls", "flops", "bytes", "macs"):
            if k not in lay:
                raise self.fail(f"{field}.layer.{k}", "a value: every layer has it")
        if lay["cls"] not in CLASSES:
            raise self.fail(f"{field}.layer.cls", f"one of {', '.join(CLASSES)}", lay["cls"])
        if lay.get("calls", 1) < 1:
            raise self.fail(f"{field}.layer.calls", "at least 1", lay["calls"])
        # the refined roofline tiles a layer with FLOPs as an (M x N) GEMM: both must be at least 1
        gemm = {"conv": ("batch", "ho", "wo", "f"), "conv1x1": ("batch", "ho", "wo", "f"),
                "dwconv": ("batch", "ho", "wo", "f"), "gconv": ("batch", "ho", "wo", "f"), "linear": ("rows", "f"),
                "matmul": ("rows", "f", "batch")}.get(lay["cls"], ())
        if lay["flops"] > 0:
            for k in gemm:
                if lay.get(k, 1) < 1:
                    raise self.fail(f"{field}.layer.{k}", f"at least 1 in a {lay['cls']} layer with FLOPs", lay[k])




#: a step-wise fit measures each point on two visits, the second once every box has had its first, and keeps the
#: lesser time (``_fit_stepwise``): a shared host slows this machine in bursts of seconds to minutes that every call
#: of one visit falls into, and other work only ever slows a call. Over four quiet fits' boxes, a point's time lay
#: 9 % from the median of the fits that measured it (17 % of the points more than 20 %). Measured again on two
#: saved fits' every point (with the fits' repeats) and kept the lesser, the held-out networks' MAPE went
#: 6.5 -> 4.1 and 5.3 -> 4.4 %; the second measurement alone 9.0 % (it fell into the host's bursts). Each visit makes
#: half the fit's calls per point (``visit_calls``), the second without warm-up calls (the least call is kept: a
#: cold first call is not it)
REVISIT_WARMUP = 0


def visit_calls(repeats: int) -> int:
    """The timed calls of a point on each of a step-wise fit's two visits, for ``repeats`` in all."""
    return max(1, (int(repeats) + 1) // 2)


def _fit_stepwise(device: str, deadline: float, classes: Iterable[str] | None, repeats: int,
                  log: Callable[[str], None], tol: float, max_points: int,
                  skipped: list[str] | None = None, revisited: list[str] | None = None) -> dict[str, Generation]:
    """Generate the classes' functions within ``deadline`` (``time.monotonic()``), the cheapest boxes first (the
    product of their dimensions' largest values), those with the weights in memory last: what a box leaves of its
    share goes to the expensive ones. Once the deadline has passed, a box whose class already has one is not
    started (it is listed in ``skipped``, and its units are predicted from the class's other boxes).

    Then, in the same order and while the time left is at least what a box's first visit took, each box is
    generated again (listed in ``revisited``): its points measured a second time (``REVISIT_WARMUP``), each taken as
    the lesser of its two times, a point it had not measured measured as on the first visit. Each visit times
    ``visit_calls(repeats)`` calls per point. A revisit the deadline cut short keeps the first visit's function."""
    from lightning_edge.latency.measure import measure_point
    from lightning_edge.latency.stepwise import generate

    todo = list(SPECS)
    if classes is not None:
        want = list(classes)
        for c in want:
            if c not in SPECS:
                raise ValueError(f"class {c!r}: expected one of {', '.join(SPECS)}")
        # a class brings its sub-boxes ("conv1x1" -> "conv1x1/small") unless only some boxes were asked for
        todo = [k for k in SPECS if k in want or (k.split("/", 1)[0] in want and "/" in k)]

    def rank(key: str) -> tuple:
        spec = SPECS[key]
        return (spec.cold, math.prod(d.hi for d in spec.dims), key)

    # a kernel path's boxes only where its units can take it (``unit_path``: PyTorch's CPU kernels with oneDNN)
    todo = [k for k in todo if not SPECS[k].path or _paths_apply(device)]
    todo.sort(key=rank)
    calls = visit_calls(repeats)

    def timed(spec: ClassSpec, **kw: int) -> Callable[[tuple[int, ...]], float]:
        return lambda p: measure_point(spec.cls, p, device, calls, cold=spec.cold, path=spec.path, **kw)

    gens = {}
    for i, c in enumerate(todo):
        if time.monotonic() > deadline and any(k.split("/", 1)[0] == c.split("/", 1)[0] for k in gens):
            if skipped is not None:
                skipped.append(c)
            continue
        share = max(0.0, deadline - time.monotonic()) / (len(todo) - i)
        spec = SPECS[c]
        g = generate(spec.dims, timed(spec), tol=tol, max_points=max_points, min_points=3,
                     deadline=time.monotonic() + share)
        log(f"  step-wise {c}: {g.formula()}  ({g.n_points} points, {g.elapsed_s:.1f} s)")
        gens[c] = g
    for c in list(gens):   # in the first visits' order
        g1 = gens[c]
        if deadline - time.monotonic() < g1.elapsed_s:
            continue
        was, once, twice = dict(g1.points), timed(SPECS[c]), timed(SPECS[c], warmup=REVISIT_WARMUP)

        def again(p: tuple[int, ...], was: dict = was, once: Callable = once, twice: Callable = twice) -> float:
            return min(was[p], twice(p)) if p in was else once(p)

        g2 = generate(SPECS[c].dims, again, tol=tol, max_points=max_points, min_points=3, deadline=deadline)
        if time.monotonic() > deadline:   # cut short: its phases may have fewer points than the first visit's
            log(f"  step-wise {c}: revisit cut by the deadline, first visit kept")
            gens[c] = replace(g1, elapsed_s=g1.elapsed_s + g2.elapsed_s)   # its time spent all the same
            continue
        gens[c] = replace(g2, elapsed_s=g1.elapsed_s + g2.elapsed_s)
        if revisited is not None:
            revisited.append(c)
        log(f"  step-wise {c} revisited: {g2.formula()}  ({g2.n_points} points, {g2.elapsed_s:.1f} s)")
    return gens
