"""``LatencyModel``: the latency models of seed 003 behind one interface, fitted on the device you have.

Kinds (T: a layer's forward time; f: its FLOP, D: its bytes, both from ``lightning_edge.analyze``):

* ``roofline``:    T = max(f / P_peak, D / B_peak), peaks measured by ``lightning_edge.roofline``'s microbenchmarks;
* ``refined``:     T = max(f / (P_peak u_eff), D / B_peak) (``lightning_edge.energy.refined``), u_eff from the
                   layer's GEMM tiling on this device (CPU: a 6 x 2*SIMD micro-kernel over the threads);
* ``statistical``: T = T_roof / u_stat, u_stat predicted by a random forest from the slides' features (h, w, c, f,
                   kh, kw, stride, #ops, #in, #out, #weights, ...), trained on measured layers;
* ``mixed``:       T = T_ref / u_stat, the forest trained on what the refined roofline leaves over (so the
                   efficiencies multiply: f / (P_peak u_eff u_stat) where compute bounds the layer);
* ``stepwise``:    per layer class, a step-wise linear function of its dimensions generated from a few measured
                   points (``lightning_edge.latency.stepwise``).

Where the roofline says a layer is memory-bound, u_stat scales the whole roofline time, not only the compute term
as on the slides: on a CPU, layers whose data stay in cache run faster than DRAM bandwidth allows, which
max(f / (P u), D / B) cannot express.

Every prediction is labelled ``estimated``. A saved model records the device, threads, dtype, torch version and
the points it was fitted on, and ``predict`` warns when it is used outside them.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from lightning_edge._jsonfile import one_line, read_json
from lightning_edge.latency.features import CLASSES, FEATURES, LayerDesc, describe
from lightning_edge.latency.measure import SPECS, Sample, host_meta, point_for
from lightning_edge.latency.stepwise import Generation

__all__ = ["KINDS", "LatencyModel", "LatencyModelError", "ModelLatency", "LayerLatency"]

KINDS = ("roofline", "refined", "statistical", "mixed", "stepwise")

#: layer classes without MACs: the statistical and mixed models' forest learns their time directly (``_group``)
NO_MAC = ("eltwise", "norm", "pool")
SCHEMA = "lightning_edge.latency_model"

#: limits on a latency-model file (``LatencyModel.load``), far above what ``fit`` writes (a step-wise model: about
#: 100 KB, 10 layer-class functions of at most 3 dimensions with at most 3072 values each; a statistical or mixed
#: one: hundreds to a few thousand measured layers, whose random forest is trained again on loading: 10000 take
#: about 12 s on one core)
MAX_FILE_BYTES = 16 << 20
MAX_SAMPLES = 10_000
MAX_DIMS = 8
MAX_DIM_VALUES = 1 << 16
MAX_POINTS = 1 << 16


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


class LatencyModel:
    """Forward latency of a network's layers on one device; ``LatencyModel.fit(kind=..., device=..., budget_s=...)``
    measures this machine. See the module docstring for the kinds."""

    def __init__(self, kind: str, meta: dict, peak_flops: float, bandwidth: float, *, tile: dict | None = None,
                 container_s: float = 0.0, stepwise: dict[str, Generation] | None = None,
                 samples: list[Sample] | None = None, fit_cost: dict | None = None, notes: list[str] | None = None):
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r} not understood: expected one of {', '.join(KINDS)}")
        self.kind = kind
        self.meta = dict(meta)
        self.peak_flops = float(peak_flops)
        self.bandwidth = float(bandwidth)
        self.tile = dict(tile or {})
        self.container_s = float(container_s)
        self.stepwise = dict(stepwise or {})
        self.samples = list(samples or [])
        self.fit_cost = dict(fit_cost or {})
        self.notes = list(notes or [])
        self._forests: dict[str, Any] = {}
        if kind in ("statistical", "mixed"):
            if not self.samples:
                raise ValueError(f"a {kind} model needs measured layers to train its random forest")
            self._train()
        if kind == "stepwise" and not self.stepwise:
            raise ValueError("a stepwise model needs at least one generated layer-class function")

    # ------------------------------------------------------------------ roofline pieces
    @property
    def roofline(self):
        from lightning_edge.roofline.model import Roofline

        return Roofline(self.peak_flops, self.bandwidth, label=self.meta.get("device_name"), source="measured")

    def _refined(self):
        from lightning_edge.energy.refined import RefinedRoofline

        return RefinedRoofline(tile_m=int(self.tile.get("tile_m", 6)), tile_n=int(self.tile.get("tile_n", 16)),
                               sm_count=int(self.tile.get("units", self.meta.get("threads", 1))))

    def t_roof(self, d: LayerDesc) -> float:
        return float(max(d.flops / self.peak_flops, d.bytes / self.bandwidth))

    def u_eff(self, d: LayerDesc) -> float:
        if d.cls in ("conv", "conv1x1", "dwconv", "linear") and d.flops > 0:
            return float(self._refined().u_eff(d)[0])
        return 1.0

    def t_ref(self, d: LayerDesc) -> float:
        from lightning_edge.energy.refined import RefinedRoofline

        return float(RefinedRoofline.time(self.roofline, d.flops, d.bytes, self.u_eff(d)))

    # ------------------------------------------------------------------ statistical
    def _group(self, d: LayerDesc) -> str:
        """Which forest a layer belongs to: ``"ratio"`` (layers with MACs: the forest learns log u_stat, the
        roofline's share of the measured time) or ``"time"`` (classes without MACs, ``NO_MAC``: the forest learns
        log T itself). Such a layer's time is a per-call cost that its bytes barely move: a ratio learned on
        larger ones, applied to an unfamiliar small layer's tiny roofline time, made a YOLOv8n C2f's chunk and
        concat 10 times too slow."""
        return "time" if d.cls in NO_MAC else "ratio"

    def _target(self, d: LayerDesc, t: float) -> float:
        if self._group(d) == "time":
            return math.log(max(t, 1e-12))
        base = self.t_ref(d) if self.kind == "mixed" else self.t_roof(d)
        return math.log(max(base, 1e-12) / max(t, 1e-12))

    def _train(self) -> None:
        try:
            from sklearn.ensemble import RandomForestRegressor
        except ImportError as exc:  # the core package does not depend on scikit-learn
            raise ImportError("the statistical and mixed latency models need scikit-learn: "
                              "pip install 'lightning-edge[latency]'") from exc
        X = np.array([self._features(s.layer) for s in self.samples])
        y = np.array([self._target(s.layer, s.time_s) for s in self.samples])
        groups = np.array([self._group(s.layer) for s in self.samples])
        self._forests = {}
        for g in ("ratio", "time"):
            sel = groups == g
            if sel.any():
                rf = RandomForestRegressor(n_estimators=200, min_samples_leaf=1, random_state=0, n_jobs=1)
                rf.fit(np.array([self._group_features(s.layer, g) for s in self.samples])[sel], y[sel])
                self._forests[g] = rf
        self._xrange = (X.min(axis=0), X.max(axis=0))
        # the targets seen per layer class: a prediction is kept inside them (a forest averages training targets,
        # but a layer class it saw little of should not borrow another class's extremes)
        self._urange = {}
        for s, t in zip(self.samples, y):
            lo, hi = self._urange.get(s.layer.cls, (t, t))
            self._urange[s.layer.cls] = (min(lo, t), max(hi, t))

    def _features(self, d: LayerDesc) -> list[float]:
        """The slides' features (``features.FEATURES``, log-scaled sizes, class one-hot) stacked with the log of
        the roofline and refined-roofline times (ANNETTE stacks its models the same way)."""
        return _x(d) + [math.log(max(self.t_roof(d), 1e-12)), math.log(max(self.t_ref(d), 1e-12))]

    def _group_features(self, d: LayerDesc, group: str) -> list[float]:
        """The features a group's forest sees. ``"time"`` (no MACs): only the data moved (log #in, #out, bytes and
        the roofline time): such a layer's channels, kernel and weights describe its children when it is a
        container (a C2f's chunk and concat), and on them the forest matched YOLOv8n's 24 KB concatenations to
        5 MB activations."""
        if group == "time":
            return [math.log1p(d.n_in), math.log1p(d.n_out), math.log1p(d.bytes),
                    math.log(max(self.t_roof(d), 1e-12))]
        return self._features(d)

    def u_stat(self, descs: list[LayerDesc]) -> np.ndarray:
        """u_stat of each layer: the roofline time (refined, for ``mixed``) over the forest's time. For a layer
        without MACs the forest predicts the time itself, and u_stat is what that time implies."""
        if not descs:
            return np.zeros(0)
        out = np.empty(len(descs))
        for g, rf in self._forests.items():
            idx = [i for i, d in enumerate(descs)
                   if self._group(d) == g or self._group(d) not in self._forests]
            if not idx:
                continue
            pred = rf.predict(np.array([self._group_features(descs[i], g) for i in idx]))
            for i, v in zip(idx, pred):
                d = descs[i]
                r = self._urange.get(d.cls)
                if r is not None and self._group(d) == g:
                    v = min(max(v, r[0]), r[1])
                base = self.t_ref(d) if self.kind == "mixed" else self.t_roof(d)
                if g == "time":                    # v = log T  ->  u = base / T
                    v = math.log(max(base, 1e-12)) - v
                out[i] = math.exp(v)
        return out

    # ------------------------------------------------------------------ prediction
    def predict(self, model: Any, *inputs: Any, **kwargs: Any) -> ModelLatency:
        """Estimated forward latency of ``model(*inputs, **kwargs)`` per layer (nothing is run: the model goes
        through ``analyze`` on the meta device)."""
        descs, containers = describe(model, *inputs, **kwargs)
        out = self.predict_layers(descs, containers)
        from lightning_edge.cost.capture import tensors_of

        out.model = type(model).__name__
        out.inputs = [tuple(t.shape) for t in tensors_of((inputs, kwargs))]
        self._check_context(model, out)
        return out

    def predict_layers(self, descs: list[LayerDesc], containers: dict[str, int] | None = None) -> ModelLatency:
        rows: list[LayerLatency] = []
        outside: list[str] = []
        if self.kind in ("statistical", "mixed") and descs:
            u = self.u_stat(descs)
            lo, hi = self._xrange
            for d, ui in zip(descs, u):
                base = self.t_ref(d) if self.kind == "mixed" else self.t_roof(d)
                x = np.array(self._features(d))
                if ((x < lo) | (x > hi)).any():
                    outside.append(d.name)
                how = (f"{'refined roofline' if self.kind == 'mixed' else 'roofline'} / u_stat={ui:.3g} "
                       "(random forest)")
                rows.append(LayerLatency(d.name, d.kind, base / ui, how, d.cls, d.calls))
        else:
            for d in descs:
                rows.append(self._layer(d, outside))
        if containers and self.kind in ("statistical", "mixed", "stepwise") and self.container_s > 0:
            n = sum(containers.values())
            rows.append(LayerLatency("(containers)", "Python calls", n * self.container_s,
                                     f"{n} container module calls x {self.container_s * 1e6:.1f} us (measured)",
                                     "call", n))
        notes = []
        if outside:
            notes.append(f"{len(outside)} layer(s) outside the fitted points (extrapolated): "
                         + ", ".join(n or "(root)" for n in outside[:6]) + (" ..." if len(outside) > 6 else ""))
        return ModelLatency(rows, self.kind, self.meta.get("device_name") or self.meta.get("device", "?"),
                            notes=notes)

    def _layer(self, d: LayerDesc, outside: list[str]) -> LayerLatency:
        if self.kind == "roofline":
            return LayerLatency(d.name, d.kind, self.t_roof(d), "roofline max(f/P, D/B)", d.cls, d.calls)
        if self.kind == "refined":
            u = self.u_eff(d)
            return LayerLatency(d.name, d.kind, self.t_ref(d), f"refined roofline, u_eff={u:.3g}", d.cls, d.calls)
        pf = point_for(d)
        gen = self.generation_for(pf[0], pf[1]) if pf is not None else None
        if gen is None:
            return LayerLatency(d.name, d.kind, self.t_ref(d), "refined roofline (no step-wise function for its "
                                f"class {d.cls!r})", d.cls, d.calls)
        cls, point, mult = pf
        if any(p < dim.lo or p > dim.hi for p, dim in zip(point, gen.dims)):
            outside.append(d.name)
        per_call = max(gen(point), 0.0) * mult
        dims = ", ".join(f"{dim.name}={p}" for dim, p in zip(gen.dims, point))
        how = f"step-wise {cls}({dims})" + (f" x {mult:g} groups" if mult != 1 else "")
        if d.calls > 1:
            how += f" x {d.calls} calls"
        return LayerLatency(d.name, d.kind, per_call * d.calls, how, d.cls, d.calls)

    def generation_for(self, cls: str, point: Sequence[int]) -> Generation | None:
        """The step-wise function for a layer of ``cls`` at ``point``: among the class's boxes (``cls`` and its
        sub-boxes ``cls/...``, e.g. ``conv1x1/small``) the smallest that contains the point, else the class's own
        (extrapolated), else None."""
        boxes = [g for key, g in self.stepwise.items() if key.split("/", 1)[0] == cls]
        inside = [g for g in boxes if all(dim.lo <= p <= dim.hi for p, dim in zip(point, g.dims))]
        if inside:
            return min(inside, key=lambda g: g.full_sweep_points)
        return self.stepwise.get(cls) or (boxes[0] if boxes else None)

    def _check_context(self, model: Any, out: ModelLatency) -> None:
        import torch

        msgs = []
        if self.meta.get("threads") and torch.get_num_threads() != self.meta["threads"] and \
                str(self.meta.get("device", "cpu")).startswith("cpu"):
            msgs.append(f"fitted with {self.meta['threads']} CPU threads, now {torch.get_num_threads()}")
        if self.meta.get("torch") and torch.__version__ != self.meta["torch"]:
            msgs.append(f"fitted with torch {self.meta['torch']}, now {torch.__version__}")
        dt = next((str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.is_floating_point()), None)
        if dt and self.meta.get("dtype") and dt != self.meta["dtype"]:
            msgs.append(f"fitted for {self.meta['dtype']}, the model is {dt}")
        if out.notes:
            msgs.append(out.notes[0])
        if msgs:
            out.notes.extend(m for m in msgs if m not in out.notes)
            warnings.warn("LatencyModel used outside what it was fitted on: " + "; ".join(msgs), stacklevel=3)

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(cls, kind: str = "stepwise", device: str = "cpu", budget_s: float = 600.0, *,
            threads: int | None = None, samples: Iterable[Sample] = (), classes: Iterable[str] | None = None,
            repeats: int = 5, log: Callable[[str], None] | None = None, base: LatencyModel | None = None,
            tol: float = 0.05, max_points: int = 8, clock: str | None = None) -> LatencyModel:
        """Measure this machine and fit a ``kind`` model within about ``budget_s`` seconds.

        ``threads``: ``torch.set_num_threads`` for the measurements (recorded; default: torch's current setting).
        ``samples``: extra measured layers for the statistical and mixed models (``training_from_layers_json``,
        or the layers of your own networks timed by ``measure.time_layers``). ``classes``: the layer classes the
        step-wise model generates functions for (default all). ``base``: reuse another model's roofline peaks
        and container overhead instead of measuring them again. ``clock``: ``"thread"`` times the CPU with the
        thread's CPU time (needs ``threads=1``; for a machine shared with other work, see ``measure.use_clock``).
        """
        import torch

        if kind not in KINDS:
            raise ValueError(f"kind {kind!r} not understood: expected one of {', '.join(KINDS)}")
        if not (budget_s > 0):
            raise ValueError(f"budget_s must be a positive number of seconds, got {budget_s!r}")
        if not (device == "cpu" or device.startswith("cuda")):
            raise ValueError(f"device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'")
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError(f"device {device!r}: no CUDA device in this torch build or machine; use device='cpu'")
        from lightning_edge.latency import measure

        log = log or (lambda _m: None)
        prev_threads = torch.get_num_threads()
        prev_clock = measure.clock()
        t0 = time.monotonic()
        deadline = t0 + budget_s
        try:
            if threads is not None:
                if threads < 1:
                    raise ValueError(f"threads must be >= 1, got {threads}")
                torch.set_num_threads(int(threads))
            if clock is not None:
                measure.use_clock(clock)
            meta = host_meta(device)
            if base is not None:
                peak, bw, container_s = base.peak_flops, base.bandwidth, base.container_s
                bench_s = 0.0
            else:
                from lightning_edge.calibrate.microbench import run_microbench

                log(f"roofline microbenchmarks on {device} ({torch.get_num_threads()} threads) ...")
                mb = run_microbench(device, quick=budget_s < 300, precisions=["fp32"], log=log)
                p = mb.precisions["fp32"]
                peak, bw = float(p["peak_flops"]), float(p["bandwidth"])
                container_s = _container_overhead(device)
                bench_s = mb.elapsed_s
            lanes = _cpu_simd_lanes() if device == "cpu" else 0
            tile = ({"tile_m": 6, "tile_n": 2 * lanes, "units": torch.get_num_threads(), "mapping": "cpu micro-kernel"}
                    if device == "cpu" else {"tile_m": 128, "tile_n": 64,
                                             "units": torch.cuda.get_device_properties(device).multi_processor_count,
                                             "mapping": "gpu thread-block tiles over SMs"})
            gens: dict[str, Generation] = {}
            train = list(samples)
            cost = {"microbench_s": round(bench_s, 2)}
            if kind == "stepwise":
                gens = _fit_stepwise(device, deadline, classes, repeats, log, tol, max_points)
                n = sum(g.n_points for g in gens.values())
                full = sum(g.full_sweep_points for g in gens.values())
                cost.update({"points": n, "full_sweep_points": full,
                             "measure_s": round(sum(g.elapsed_s for g in gens.values()), 2),
                             "per_class": {c: {"points": g.n_points, "full_sweep_points": g.full_sweep_points,
                                               "elapsed_s": round(g.elapsed_s, 2)} for c, g in gens.items()}})
            elif kind in ("statistical", "mixed"):
                from lightning_edge.latency.measure import sample_layers

                left = max(5.0, deadline - time.monotonic())
                own = sample_layers(left, device, repeats, log=log)
                train = own + train
                cost.update({"points": len(own), "extra_samples": len(train) - len(own)})
            cost["elapsed_s"] = round(time.monotonic() - t0, 2)
        finally:
            torch.set_num_threads(prev_threads)
            measure._CLOCK["name"] = prev_clock
        return cls(kind, meta, peak, bw, tile=tile, container_s=container_s, stepwise=gens, samples=train,
                   fit_cost=cost)

    def with_samples(self, samples: Iterable[Sample], kind: str | None = None) -> LatencyModel:
        """A statistical or mixed model trained on this model's samples plus ``samples`` (nothing is measured)."""
        k = kind or self.kind
        return LatencyModel(k, self.meta, self.peak_flops, self.bandwidth, tile=self.tile,
                            container_s=self.container_s, stepwise=self.stepwise,
                            samples=self.samples + list(samples), fit_cost=self.fit_cost, notes=self.notes)

    # ------------------------------------------------------------------ files
    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA, "version": 1, "kind": self.kind, "label": "fitted on measurements",
            "meta": self.meta, "peak_flops": self.peak_flops, "bandwidth": self.bandwidth, "tile": self.tile,
            "container_s": self.container_s, "fit_cost": self.fit_cost, "notes": self.notes,
            "stepwise": {c: g.to_dict() for c, g in self.stepwise.items()},
            "samples": [s.to_dict() for s in self.samples],
        }

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        if p.is_dir():
            raise ValueError(f"{p} is a directory: give a file name such as {p / 'latency.json'}")
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1, allow_nan=False))
        tmp.replace(p)
        return p

    @classmethod
    def load(cls, path: str | Path) -> LatencyModel:
        """A model saved by ``save``. The file is checked before anything is built from it (size, types, ranges,
        array sizes: ``MAX_FILE_BYTES``, ``MAX_SAMPLES`` ...); a file that fails is one ``LatencyModelError``
        naming the file, the field and what was expected."""
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
        try:
            return cls(d["kind"], d["meta"], d["peak_flops"], d["bandwidth"], tile=d.get("tile"),
                       container_s=d.get("container_s", 0.0),
                       stepwise={c: Generation.from_dict(g) for c, g in (d.get("stepwise") or {}).items()},
                       samples=[Sample.from_dict(s) for s in d.get("samples") or []], fit_cost=d.get("fit_cost"),
                       notes=d.get("notes"))
        except (KeyError, TypeError, ValueError) as exc:
            raise LatencyModelError(f"{p}: latency model file is incomplete or damaged ({exc!r})") from None

    def describe(self) -> str:
        m = self.meta
        lines = [f"{self.kind} latency model for {m.get('device_name')} ({m.get('device')}, {m.get('threads')} threads, "
                 f"{m.get('dtype')}, torch {m.get('torch')})",
                 f"  roofline: P_peak {self.peak_flops / 1e9:.1f} GFLOP/s, B_peak {self.bandwidth / 1e9:.2f} GB/s "
                 "(measured)", f"  container call overhead {self.container_s * 1e6:.1f} us"]
        for c, g in self.stepwise.items():
            lines.append(f"  {c}: {g.formula()}  [{g.n_points} points of {g.full_sweep_points} "
                         f"({100 * g.n_points / g.full_sweep_points:.4f} %), {g.elapsed_s:.1f} s]")
        if self.samples:
            lines.append(f"  random forest trained on {len(self.samples)} measured layers")
        if self.fit_cost:
            lines.append(f"  fit cost: {self.fit_cost}")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------ file checks
_MISSING = object()
_MAX_TIME_S = 1e6           # seconds: a layer, a measured point, a step-wise function's parameters
_MAX_INT = 1 << 48          # a layer's sizes, a dimension's values
_MAX_WIDTH = 1 << 30        # a step width


def _show(v: Any) -> str:
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

    def fail(self, field: str, what: str, got: Any = _MISSING) -> LatencyModelError:
        return LatencyModelError(f"{self.where}: {one_line(field)}: expected {what}, got {_show(got)}; the file is "
                                 "incomplete or damaged: fit the model again (`lightning-edge latency fit`)")

    # -- types
    def obj(self, v: Any, field: str, what: str = "an object", max_keys: int = 1000) -> dict:
        if not isinstance(v, dict):
            raise self.fail(field, what, v)
        if len(v) > max_keys:
            raise self.fail(field, f"{what} of at most {max_keys} fields", f"{len(v)} fields")
        return v

    def lst(self, v: Any, field: str, max_len: int, what: str = "a list") -> list:
        if not isinstance(v, list):
            raise self.fail(field, what, v)
        if len(v) > max_len:
            raise self.fail(field, f"{what} of at most {max_len}", f"{len(v)}")
        return v

    def num(self, v: Any, field: str, lo: float, hi: float, what: str = "a number") -> float:
        # ints are compared as ints: float() of a 400-digit integer raises OverflowError
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v <= hi):
            raise self.fail(field, f"{what} from {lo:g} to {hi:g}", v)
        return v

    def integer(self, v: Any, field: str, lo: int, hi: int, what: str = "an integer") -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not (lo <= v <= hi):
            raise self.fail(field, f"{what} from {lo} to {hi}", v)
        return v

    def text(self, v: Any, field: str, max_len: int = 1000, *, null: bool = False) -> str | None:
        if v is None and null:
            return v
        if not isinstance(v, str) or len(v) > max_len:
            raise self.fail(field, f"a string of at most {max_len} characters" + (" or null" if null else ""), v)
        return v

    def plain(self, v: Any, field: str, depth: int) -> None:
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
        if version != 1 or isinstance(version, bool):
            raise self.fail("version", "1 (a newer lightning_edge may have written this file: upgrade)", version)
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
        if d.get("fit_cost") is not None:
            self.plain(self.obj(d["fit_cost"], "fit_cost"), "fit_cost", 4)
        if d.get("notes") is not None:
            for i, n in enumerate(self.lst(d["notes"], "notes", 1000, "a list of strings")):
                self.text(n, f"notes[{i}]", 10_000)
        gens = d.get("stepwise") or {}
        self.obj(gens, "stepwise", "an object of layer-class functions", max_keys=64)
        classes = sorted({c.split("/", 1)[0] for c in SPECS})
        for key, g in gens.items():
            base = key.split("/", 1)[0]
            if len(key) > 64:
                raise self.fail("stepwise", "layer-class names of at most 64 characters", key)
            if base not in classes:
                raise self.fail(f"stepwise.{key}", f"a layer class ({', '.join(classes)}, or CLASS/BOX)", key)
            self.generation(g, f"stepwise.{key}", len(SPECS[base].dims))
        samples = d.get("samples") or []
        for i, s in enumerate(self.lst(samples, "samples", MAX_SAMPLES, "a list of measured layers")):
            self.sample(s, f"samples[{i}]")
        if kind == "stepwise" and not gens:
            raise self.fail("stepwise", "at least one layer-class function in a stepwise model", gens)
        if kind in ("statistical", "mixed") and not samples:
            raise self.fail("samples", f"measured layers to train a {kind} model's random forest on", samples)
        if kind != "roofline" and "units" not in (d.get("tile") or {}) and meta.get("threads", 1) is None:
            raise self.fail("tile.units", "the parallel units the refined roofline tiles over (or meta.threads)")

    def generation(self, g: Any, field: str, ndims: int) -> None:
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

    def dim(self, dd: Any, field: str) -> None:
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

    def tree(self, t: Any, field: str, ndims: int, parent: int) -> None:
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

    def phase(self, ph: Any, field: str) -> None:
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

    def sample(self, s: Any, field: str) -> None:
        s = self.obj(s, field, "a measured layer {layer, time_s, source}")
        self.num(s.get("time_s", _MISSING), f"{field}.time_s", 0.0, _MAX_TIME_S, "a number of seconds")
        self.text(s.get("source", ""), f"{field}.source")
        lay = self.obj(s.get("layer", _MISSING), f"{field}.layer", "a layer object")
        kinds = {f.name: f.type for f in fields(LayerDesc)}
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
                "dwconv": ("batch", "ho", "wo", "f"), "linear": ("rows", "f")}.get(lay["cls"], ())
        if lay["flops"] > 0:
            for k in gemm:
                if lay.get(k, 1) < 1:
                    raise self.fail(f"{field}.layer.{k}", f"at least 1 in a {lay['cls']} layer with FLOPs", lay[k])


def _x(d: LayerDesc) -> list[float]:
    f = d.features()
    # log-scale the sizes (a forest splits on ranks, but this keeps the features' ranges comparable to read)
    return [math.log1p(v) if i < len(FEATURES) else v for i, v in enumerate(f)]


def _container_overhead(device: str) -> float:
    """Seconds one container module call adds (``Sequential(Identity)`` minus ``Identity``)."""
    import torch
    from torch import nn

    from lightning_edge.latency.measure import time_module

    x = torch.zeros(1, device=device)
    inner = nn.Identity()
    outer = nn.Sequential(nn.Identity())
    a = min(time_module(outer, (x,), device, 7, 2) for _ in range(3))
    b = min(time_module(inner, (x,), device, 7, 2) for _ in range(3))
    return max(0.0, a - b)


def _fit_stepwise(device: str, deadline: float, classes: Iterable[str] | None, repeats: int,
                  log: Callable[[str], None], tol: float, max_points: int) -> dict[str, Generation]:
    from lightning_edge.latency.measure import measure_layer
    from lightning_edge.latency.stepwise import generate

    todo = list(SPECS)
    if classes is not None:
        want = list(classes)
        for c in want:
            if c not in SPECS:
                raise ValueError(f"layer class {c!r}: expected one of {', '.join(SPECS)}")
        # a class brings its sub-boxes ("conv1x1" -> "conv1x1/small") unless only some boxes were asked for
        todo = [k for k in SPECS if k in want or (k.split("/", 1)[0] in want and "/" in k)]
    # cheap classes first: what they leave of their share goes to the expensive ones measured later
    cheap = ("eltwise", "norm", "pool", "dwconv/small", "dwconv", "linear", "conv1x1/small", "conv/small",
             "conv1x1", "conv")
    todo.sort(key=lambda c: cheap.index(c) if c in cheap else len(cheap))
    gens = {}
    for i, c in enumerate(todo):
        share = (deadline - time.monotonic()) / (len(todo) - i)
        spec = SPECS[c]
        log(f"step-wise {c}: {spec.what}")
        g = generate(spec.dims, lambda p, c=spec.cls: measure_layer(c, p, device, repeats), tol=tol,
                     max_points=max_points, min_points=5, deadline=time.monotonic() + share)
        log(f"  {c}: {g.formula()}  ({g.n_points} points, {g.elapsed_s:.1f} s)")
        gens[c] = g
    return gens
