"""The Jetson AGX Orin twin: rooflines, minibatch time and power of any workload on any of the 18,096 modes.

    >>> from lightning_edge.twin.model import OrinTwin
    >>> twin = OrinTwin()
    >>> twin.roofline("12c/2201.6/1300.5/3199").peak_flops          # 14.7e12 (simulated)
    >>> pred = twin.predict_workload("resnet18", 16, "train")   # all 18,096 modes, < 1 s
    >>> pred.time_s.shape, pred.power_w.max()

The model (docs/twin.md has the equations and where each coefficient comes from):

- the roofline of a mode is a smooth function of the GPU and EMC clocks (CPU knobs do not move it);
- a minibatch is a sequence of steps (layers, forward then backward, loss, optimizer); the CPU issues
  them (PyTorch dispatch cost ~ 1/f_cpu) while the GPU runs them (per-step roofline time at an achieved
  efficiency per execution unit), asynchronously: the minibatch ends when both have finished, exactly
  ``max(cpu_total, max_k(cpu_issue_k + gpu_time_{k..end}))``; training also waits for the data loader;
- power = static(mode) + GPU busy power + FLOP and byte energy / time + busy CPU cores, capped at ~67 W.

Everything it returns is labelled ``simulated``. The twin also plays a live board for the simulated
power sensor: it knows the current mode (its own, or a controller's), what is running
(:meth:`OrinTwin.running`), and shows the 2-3 s power settling after a change plus seeded noise.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from lightning_edge import catalog
from lightning_edge.modes import PowerMode, PowerModeSpace
from lightning_edge.roofline.model import Roofline
from lightning_edge.twin.physics import Physics
from lightning_edge.twin.workload import WorkloadProfile, compile_workload

__all__ = ["OrinTwin", "Prediction", "LayerTimes", "Activity", "TWIN_PROFILE", "load_twin_params"]

TWIN_PROFILE = "orin-agx-twin"
"""Name of the shipped twin profile (``lightning_edge/data/orin-agx-twin.json``)."""

LABEL = "simulated"


def load_twin_params(path: str | Path | None = None) -> tuple[dict[str, float], dict]:
    """The fitted coefficients (``fit.params``) and the whole profile dict of the twin's JSON file."""
    if path is None:
        text = (resources.files("lightning_edge") / "data" / f"{TWIN_PROFILE}.json").read_text()
    else:
        text = Path(path).read_text()
    data = json.loads(text)
    fit = data.get("fit") or {}
    params = fit.get("params")
    if not isinstance(params, dict):
        raise ValueError(f"twin profile {path or TWIN_PROFILE!r} has no fit.params section: regenerate it with "
                         "`python -m lightning_edge.twin.calibrate`")
    return {k: float(v) for k, v in params.items()}, data


@dataclass
class Prediction:
    """The twin's prediction for one workload on one or more modes (``label`` is always ``simulated``).

    Arrays have one entry per mode (0-d for a single mode, so ``float(pred.time_s)`` works):
    ``time_s`` per minibatch, ``power_w`` average board power, ``energy_j`` per minibatch, and the parts:
    ``static_w`` (pi_0 of the mode), ``gpu_s`` (GPU busy time), ``cpu_s`` (CPU dispatch time), ``data_s``
    (data loader time per minibatch; 0 without it) and ``bound`` (``"gpu"``, ``"cpu"`` or ``"data"``).
    ``layers`` holds the per-step breakdown when one mode was asked for with ``detail=True``.
    """

    time_s: np.ndarray
    power_w: np.ndarray
    energy_j: np.ndarray
    static_w: np.ndarray
    gpu_s: np.ndarray
    cpu_s: np.ndarray
    data_s: np.ndarray
    bound: np.ndarray
    modes: np.ndarray
    workload: str = ""
    kind: str = "infer"
    batch_size: int = 1
    precision: str = "fp32"
    label: str = LABEL
    layers: LayerTimes | None = None

    @property
    def throughput(self) -> np.ndarray:
        """Samples per second."""
        return self.batch_size / self.time_s

    def __len__(self) -> int:
        return int(np.asarray(self.time_s).size)

    def at(self, i: int) -> dict:
        """One mode's values as a dict of floats (``i`` indexes the modes asked for)."""
        m = np.asarray(self.modes).reshape(-1, 4)[i]
        out: dict = {"mode": PowerMode(int(m[0]), m[1], m[2], m[3])}
        for k in ("time_s", "power_w", "energy_j", "static_w", "gpu_s", "cpu_s", "data_s", "bound"):
            out[k] = np.asarray(getattr(self, k)).reshape(-1)[i].item()
        return {**out, "label": self.label}


@dataclass
class LayerTimes:
    """Per-step timeline of one minibatch on one mode (``label`` ``simulated``).

    Arrays over steps: ``names``, ``phase``, ``gpu_s`` (GPU time), ``cpu_s`` (CPU dispatch time),
    ``start_s``/``end_s`` (when the GPU runs the step, from the start of the minibatch),
    ``energy_j`` (dynamic GPU + memory energy of the step plus static power over its GPU time),
    ``flops``, ``bytes``. ``time_s``/``power_w``: the minibatch's totals.
    """

    names: list[str]
    phase: list[str]
    gpu_s: np.ndarray
    cpu_s: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    energy_j: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    time_s: float
    power_w: float
    mode: PowerMode | None = None
    label: str = LABEL

    def table(self, top: int | None = None) -> list[dict]:
        rows = [{"name": n, "phase": ph, "gpu_s": float(g), "cpu_s": float(c), "start_s": float(s),
                 "end_s": float(e), "energy_j": float(en)}
                for n, ph, g, c, s, e, en in zip(self.names, self.phase, self.gpu_s, self.cpu_s, self.start_s,
                                                 self.end_s, self.energy_j)]
        if top is not None:
            rows = sorted(rows, key=lambda r: r["gpu_s"], reverse=True)[:top]
        return rows


@dataclass
class Activity:
    """What the twin is running (for the live sensor): a workload's average power and, optionally, its layers."""

    name: str
    kind: str
    batch_size: int
    profile: WorkloadProfile | None = None
    power_fn: Callable[[PowerMode], float] | None = None
    layer: str | None = None


def _as_knobs(modes: Any, space: PowerModeSpace) -> tuple[np.ndarray, bool]:
    """Modes -> (M, 4) float array (cores, cpu, gpu, mem) and whether a single mode was given."""
    if modes is None or isinstance(modes, PowerModeSpace):
        return (space if modes is None else modes).to_numpy().astype(float), False
    if isinstance(modes, PowerMode):
        return np.array([modes.as_tuple()], dtype=float), True
    if isinstance(modes, (str, dict)):  # a label, or {"cores": 8, "gpu": 726.75, ...}
        return np.array([space.coerce(modes).as_tuple()], dtype=float), True
    if isinstance(modes, np.ndarray):
        arr = np.asarray(modes, dtype=float)
        if arr.ndim == 1 and arr.shape[0] == 4:
            return arr.reshape(1, 4), True
        if arr.ndim == 2 and arr.shape[1] == 4:
            return arr, False
        raise ValueError(f"mode array must have shape (4,) or (M, 4) [cores, cpu, gpu, mem MHz], got {arr.shape}")
    if isinstance(modes, tuple) and len(modes) == 4 and all(isinstance(x, (int, float)) for x in modes):
        return np.array([modes], dtype=float), True
    rows = [space.coerce(m).as_tuple() if not isinstance(m, PowerMode) else m.as_tuple() for m in modes]
    return np.array(rows, dtype=float).reshape(-1, 4), False


def _out(a: np.ndarray, single: bool) -> np.ndarray:
    return a.reshape(()) if single else a


class OrinTwin:
    """The simulated Jetson AGX Orin (32 GB, JetPack 5): see the module docstring.

    - ``params``: override fitted coefficients (names in ``physics.PARAM_DOCS``);
    - ``controller``: a :class:`~lightning_edge.devices.sim.controller.SimModeController` whose current
      mode the twin follows (otherwise the twin keeps its own mode: :meth:`set_mode`);
    - ``noise``/``power_noise``/``seed``: gaussian noise (relative sd) on live power readings;
    - ``settling``/``settle_tau_s``: after a mode change or a workload start/stop the live power moves to
      the new level exponentially (tau 0.8 s: within 5 % after 2.4 s);
    - ``tf32_matmul``: run FP32 matmuls on TF32 tensor cores (PyTorch's ``allow_tf32=True``); the default
      is CUDA cores, PyTorch's default since 1.12 and what the papers' PyTorch 1.12 did.
    """

    name = "sim:orin-agx"
    label = LABEL

    def __init__(
        self,
        params: dict[str, float] | None = None,
        *,
        profile_path: str | Path | None | bool = None,
        space: PowerModeSpace | None = None,
        controller: Any = None,
        clock: Callable[[], float] = time.monotonic,
        noise: bool = True,
        settling: bool = True,
        seed: int | None = 0,
        power_noise: float = 0.02,
        settle_tau_s: float = 0.8,
        initial: Any = None,
        tf32_matmul: bool = False,
    ) -> None:
        if profile_path is False:  # calibration: start from the defaults, no file
            from lightning_edge.twin.physics import DEFAULT_PARAMS

            fitted, self.profile = dict(DEFAULT_PARAMS), {}
        else:
            fitted, self.profile = load_twin_params(profile_path)
        if params:
            fitted.update(params)
        self.physics = Physics(fitted)
        self.space = space or catalog.orin_agx_space()
        self.controller = controller
        self.clock = clock
        self.noise = bool(noise)
        self.settling = bool(settling)
        self.power_noise = float(power_noise)
        self.settle_tau_s = float(settle_tau_s)
        self.tf32_matmul = bool(tf32_matmul)
        self._rng = np.random.default_rng(seed)
        self._lock = threading.RLock()
        self._mode = self.space.coerce(initial) if initial is not None else self.space.coerce(catalog.ORIN_AGX_MAXN)
        self._activity: Activity | None = None
        self._cost_cache: dict[tuple, Any] = {}
        self._profile_cache: dict[tuple, Any] = {}
        # live power state: the level being approached, where the last transition started, and when
        self._target_key: tuple | None = None
        self._from_w: float | None = None
        self._change_s: float | None = None
        self._ctl_change_s: float | None = None

    # ================================================================== roofline
    def roofline(self, modes: Any = None, precision: str = "fp32") -> Roofline:
        """The roofline of one mode, a list of modes, an (M, 4) array or a space (default: every mode).

        ``precision``: ``fp32`` (TF32 tensor cores, Pagoda's roofline), ``fp16`` or ``fp32_cuda``
        (CUDA cores, tensor cores off). Coefficients are arrays over the modes (scalars for one mode);
        ``source="simulated"``.
        """
        knobs, single = _as_knobs(modes, self.space)
        ph = self.physics
        c, fc, fg, fm = knobs.T
        peak = ph.peak_flops(fg, fm, precision)
        bw = ph.bandwidth(fg, fm, precision)
        eflop = ph.eps_flop(fg, fm, "fp16" if precision == "fp16" else "fp32")
        emop = ph.eps_mop(fg, fm, precision)
        if precision == "fp32_cuda":
            eflop = ph.e_flop("cuda", fg) + ph.p_gpu_active(fg) / peak
        static = ph.static_power(c, fc, fg, fm)
        if single:
            m = PowerMode(int(c[0]), fc[0], fg[0], fm[0])
            return Roofline(float(peak[0]), float(bw[0]), float(eflop[0]), float(emop[0]), float(static[0]),
                            label=str(m), source=LABEL)
        return Roofline(peak, bw, eflop, emop, static, source=LABEL)

    def static_power(self, modes: Any = None) -> np.ndarray:
        """pi_0 (W) of one or more modes: the board idle at that mode."""
        knobs, single = _as_knobs(modes, self.space)
        return _out(self.physics.static_power(*knobs.T), single)

    # ================================================================== workloads
    def compile(self, cost: Any, *, kind: str | None = None, batch_size: int | None = None, **kw) -> WorkloadProfile:
        """ModelCost -> WorkloadProfile (cached by object identity and arguments)."""
        if isinstance(cost, WorkloadProfile):
            return cost
        key = ("compile", id(cost), kind, batch_size, tuple(sorted(kw.items())))
        hit = self._profile_cache.get(key)
        if hit is not None and hit[0] is cost:  # the cost is kept alive with it: ids cannot be reused
            return hit[1]
        prof = compile_workload(cost, kind=kind, batch_size=batch_size, **kw)
        self._profile_cache[key] = (cost, prof)  # type: ignore[assignment]
        return prof

    def predict(
        self,
        cost: Any,
        modes: Any = None,
        batch_size: int | None = None,
        kind: str | None = None,
        dataloader: bool | None = None,
        *,
        precision: str | None = None,
        detail: bool = False,
    ) -> Prediction:
        """Minibatch time and average power of ``cost`` (a ModelCost or WorkloadProfile) on ``modes``.

        ``modes``: ``None`` (all 18,096), a PowerMode or label, a list, an (M, 4) array or a PowerModeSpace.
        ``kind``: ``"train"`` or ``"infer"`` (default: from the cost). ``dataloader``: include the data
        loader (4 workers) in the minibatch time and CPU power; default on for training, off for inference
        (the papers time inference minibatches around the forward pass). ``detail=True`` with one mode adds
        the per-step breakdown (``Prediction.layers``).
        """
        prof = self.compile(cost, kind=kind, batch_size=batch_size)
        knobs, single = _as_knobs(modes, self.space)
        if dataloader is None:
            dataloader = prof.kind == "train"
        if precision is None:
            precision = "fp16" if prof.fp16 else "fp32"
        res = self._evaluate(prof, knobs, dataloader=dataloader, precision=precision)
        layers = None
        if detail:
            if knobs.shape[0] != 1:
                raise ValueError("detail=True needs exactly one mode; use layer_times(cost, mode)")
            layers = self._timeline(prof, knobs[0], precision, res)
        arrays = {k: _out(res[k], single) for k in ("time_s", "power_w", "static_w", "gpu_s", "cpu_s", "data_s",
                                                     "bound")}
        return Prediction(**arrays, energy_j=_out(res["time_s"] * res["power_w"], single), modes=knobs,
                          workload=prof.model, kind=prof.kind, batch_size=prof.batch_size, precision=precision,
                          layers=layers)

    def layer_times(self, cost: Any, mode: Any = None, *, kind: str | None = None, batch_size: int | None = None,
                    precision: str | None = None, dataloader: bool | None = None) -> LayerTimes:
        """Per-step GPU/CPU times, GPU timeline and energy of one minibatch on one mode (default: current)."""
        mode = self.current_mode() if mode is None else mode
        pred = self.predict(cost, mode, batch_size=batch_size, kind=kind, dataloader=dataloader,
                            precision=precision, detail=True)
        assert pred.layers is not None
        return pred.layers

    def workload_cost(self, name_or_model: Any, batch_size: int, kind: str = "infer", seq_len: int | None = None,
                      precision: str = "fp32", inputs: tuple | None = None):
        """ModelCost of a zoo model (by name) or an nn.Module (with ``inputs``), cached per (model, batch, kind)."""
        training = kind == "train"
        dtype = "fp16" if precision == "fp16" else None
        if isinstance(name_or_model, str):
            key = (name_or_model, int(batch_size), kind, seq_len, dtype)
            cost = self._cost_cache.get(key)
            if cost is None:
                import torch

                from lightning_edge import zoo
                from lightning_edge.cost import analyze

                entry = zoo.get(name_or_model)
                meta = torch.device("meta")
                model = entry.build(device=meta)
                kw = {"seq_len": seq_len} if seq_len is not None else {}
                cost = analyze(model, *entry.inputs(batch_size=batch_size, device=meta, **kw),
                               training=training, dtype=dtype)
                cost.model = cost.model or entry.name
                n_tensors = sum(1 for _ in model.parameters())
                self._cost_cache[key] = cost
                self._cost_cache[key + ("tensors",)] = n_tensors
            return cost, self._cost_cache.get(key + ("tensors",))
        if hasattr(name_or_model, "layers"):  # a ModelCost already
            return name_or_model, None
        if inputs is None:
            raise ValueError("predict_workload(model, ...) with an nn.Module needs inputs=(example inputs,); "
                             "or pass a zoo model name such as 'resnet18'")
        args, kwargs = (inputs.args, inputs.kwargs) if hasattr(inputs, "kwargs") else (tuple(inputs), {})  # i17cost
        from lightning_edge.cost.capture import tensors_of

        shapes = tuple((tuple(x.shape), str(x.dtype)) for x in tensors_of((args, kwargs))) + tuple(sorted(kwargs))
        key = (id(name_or_model), shapes, int(batch_size), kind, seq_len, dtype)
        cost = self._cost_cache.get(key)
        if cost is None:
            from lightning_edge.cost import analyze

            cost = analyze(name_or_model, *args, training=training, dtype=dtype, **kwargs)
            self._cost_cache[key] = cost
        n_tensors = sum(1 for _ in name_or_model.parameters())
        return cost, n_tensors

    def predict_workload(
        self,
        name_or_model: Any,
        batch_size: int = 1,
        kind: str = "infer",
        modes: Any = None,
        seq_len: int | None = None,
        precision: str = "fp32",
        *,
        inputs: tuple | None = None,
        dataloader: bool | None = None,
        detail: bool = False,
    ) -> Prediction:
        """``predict`` for a zoo model name (or an nn.Module with ``inputs``): runs ``analyze`` once per
        (model, batch size, kind, seq_len, precision) and caches it. ``seq_len`` goes to text models
        (BERT default 128, LSTM default 35; the papers' LSTM inference is one token: ``seq_len=1``)."""
        if kind not in ("train", "infer"):
            raise ValueError(f"kind must be 'train' or 'infer', got {kind!r}")
        cost, n_tensors = self.workload_cost(name_or_model, batch_size, kind, seq_len, precision, inputs)
        prof = self.compile(cost, kind=kind, batch_size=batch_size, param_tensors=n_tensors)
        return self.predict(prof, modes, dataloader=dataloader, precision=precision, detail=detail)

    # ------------------------------------------------------------------ the engine
    def _unit_rates(self, fg: np.ndarray, fm: np.ndarray, precision: str) -> np.ndarray:
        """Large-kernel FLOP/s per execution unit, shape (len(fg), 4) in UNITS order."""
        ph = self.physics
        p = ph.p
        tf32 = ph.peak_flops(fg, fm, "fp32")
        cuda = tf32 * p["cuda_fp32_ratio"]
        if precision == "fp16":
            tc = tf32 * p["fp16_peak_ratio"]
            rates = [tc * p["eff_tc"], tc * p["eff_tc"], 2 * cuda * p["eff_dw"], 2 * cuda * p["eff_elt"]]
        else:
            mm = tf32 * p["eff_tc"] if self.tf32_matmul else cuda * p["eff_cuda"]
            rates = [tf32 * p["eff_tc"], mm, cuda * p["eff_dw"], cuda * p["eff_elt"]]
        return np.stack(rates, axis=-1)

    def _unit_energy(self, fg: np.ndarray, precision: str) -> np.ndarray:
        """Marginal J/FLOP per execution unit, shape (len(fg), 4)."""
        ph = self.physics
        units = ["tc", "tc" if (self.tf32_matmul or precision == "fp16") else "cuda", "dw", "elt"]
        e = np.stack([ph.e_flop(u, fg) for u in units], axis=-1)
        if precision == "fp16":
            e = e * 0.5
        return e

    def _gpu_steps(self, prof: WorkloadProfile, fg: np.ndarray, fm: np.ndarray, precision: str,
                   with_compute: bool = False):
        """GPU time of every step on every (gpu, mem) pair: shape (len(fg), n_steps); with ``with_compute``
        also the part of it spent computing (the rest stalls on memory)."""
        ph = self.physics
        p = ph.p
        k = np.maximum(prof.kernels, 1.0)
        rates = self._unit_rates(fg, fm, precision)                       # (U, 4)
        w_per_k = prof.flops / k[:, None]                                 # (S, 4)
        size_c = w_per_k / (w_per_k + p["half_mflop"] * 1e6)              # (S, 4) efficiency from size
        size_c[:, 2:] = 1.0                                               # dw / elt: no tiling occupancy loss
        if prof.reduction is not None and p["half_reduction"] > 0:        # shallow GEMMs use tensor cores badly
            r = prof.reduction
            size_c[:, :2] *= np.where(r > 0, r / (r + p["half_reduction"]), 1.0)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            t_c = np.where(prof.flops[None] > 0,
                           prof.flops[None] / (rates[:, None, :] * np.maximum(size_c[None], 1e-9)), 0.0).sum(-1)
        q_per_k = prof.bytes / k
        size_m = q_per_k / (q_per_k + p["half_mbyte"] * 1e6)
        bw = ph.bandwidth(fg, fm, "fp16" if precision == "fp16" else "fp32") * p["eff_mem"]
        with np.errstate(divide="ignore", invalid="ignore"):
            t_m = np.where(prof.bytes[None] > 0, prof.bytes[None] / (bw[:, None] * np.maximum(size_m[None], 1e-9)), 0.0)
        g = np.maximum(t_c, t_m) + prof.kernels[None] * ph.k_overhead(fg)[:, None]
        if with_compute:
            return g, np.minimum(t_c + prof.kernels[None] * ph.k_overhead(fg)[:, None], g)
        return g

    def _cpu_steps(self, prof: WorkloadProfile) -> np.ndarray:
        """CPU dispatch time of every step at MAXN CPU speed, s."""
        p = self.physics.p
        return (prof.cpu_ops * p["t_op_us"] + prof.cpu_calls * p["t_module_us"]
                + prof.cpu_internal * p["t_internal_us"]) * 1e-6

    def _sample_s(self, prof: WorkloadProfile) -> float:
        """Data-loader CPU time per sample at MAXN CPU speed, s."""
        p = self.physics.p
        if prof.sample_mpix > 0:
            per = p["t_decode_train_ms_per_mpix"] if prof.kind == "train" else p["t_decode_infer_ms_per_mpix"]
            return per * 1e-3 * prof.sample_mpix
        return p["t_token_sample_us"] * 1e-6

    def _evaluate(self, prof: WorkloadProfile, knobs: np.ndarray, *, dataloader: bool, precision: str) -> dict:
        ph = self.physics
        p = ph.p
        cores, fc, fg, fm = (knobs[:, i] for i in range(4))
        # --- GPU side: one row per distinct (gpu, mem) pair
        gm, gm_inv = np.unique(knobs[:, 2:4], axis=0, return_inverse=True)
        gm_inv = gm_inv.reshape(-1)
        g_steps, c_part = self._gpu_steps(prof, gm[:, 0], gm[:, 1], precision, True)  # (U, S)
        g_total = g_steps.sum(axis=1)                                     # (U,)
        compute_total = c_part.sum(axis=1)
        suffix = np.cumsum(g_steps[:, ::-1], axis=1)[:, ::-1]             # work left from step k on
        # --- CPU side at MAXN speed
        c_steps = self._cpu_steps(prof)
        c_end = np.cumsum(c_steps)
        launches = np.maximum(prof.cpu_ops + prof.cpu_internal, 1.0)
        c_start = c_end - c_steps + c_steps / launches                     # first launch of each step
        c_total = float(c_end[-1]) if len(c_end) else 0.0
        t_sync = p["t_sync_us"] * 1e-6
        # --- iteration time for each distinct (cpu, gpu, mem): cpu factor x issue times + GPU backlog
        trip, trip_inv = np.unique(knobs[:, 1:4], axis=0, return_inverse=True)
        trip_inv = trip_inv.reshape(-1)
        # the distinct (gpu, mem) pairs of the triplets are exactly ``gm`` (same set, same order)
        trip_gm = np.unique(trip[:, 1:3], axis=0, return_inverse=True)[1].reshape(-1)
        cf = ph.cpu_factor(trip[:, 0], trip[:, 2])
        end = np.empty(len(trip))
        chunk = max(1, 4_000_000 // max(len(c_start), 1))
        for a in range(0, len(trip), chunk):
            sl = slice(a, a + chunk)
            end[sl] = (cf[sl, None] * c_start[None, :] + suffix[trip_gm[sl]]).max(axis=1) if len(c_start) else 0.0
        cpu_trip = cf * (c_total + t_sync)
        iter_trip = np.maximum(end + cf * t_sync, cpu_trip)
        t_iter = iter_trip[trip_inv]
        cpu_s = cpu_trip[trip_inv]
        gpu_s = g_total[gm_inv]
        # --- data loader (workers are processes on the other online cores)
        cfm = ph.cpu_factor(fc, fm)
        if dataloader:
            # fetching the batch from the workers (unpickle, pin, copy) runs on the main thread, not overlapped
            fetch = p["t_fetch_ms_per_mb"] * 1e-3 * prof.input_mb * cfm
            t_iter = t_iter + fetch
            cpu_s = cpu_s + fetch
            d_total = prof.batch_size * self._sample_s(prof) * cfm              # core-seconds per minibatch
            workers = np.minimum(p["loader_workers"], np.maximum(cores - 1.0, 0.0))
            data_s = np.where(workers >= 1.0, d_total / np.maximum(workers, 1.0), d_total + cpu_s)
            contention = (cpu_s + d_total) / cores
            time_s = np.maximum.reduce([t_iter, data_s, contention])
        else:
            d_total = np.zeros_like(t_iter)
            data_s = np.zeros_like(t_iter)
            time_s = t_iter
        bound = np.where(time_s > t_iter * (1 + 1e-9), "data", np.where(end[trip_inv] >= cpu_s, "gpu", "cpu"))
        # --- power
        static = ph.static_power(cores, fc, fg, fm)
        e_unit = self._unit_energy(gm[:, 0], precision)                     # (U, 4)
        w_units = prof.flops.sum(axis=0)                                    # (4,)
        active = compute_total * ph.active_frac(gm[:, 0], gm[:, 1])         # SMs computing, the rest stalls
        busy = active + p["gpu_stall_frac"] * (g_total - active)
        e_gpu = ph.p_gpu_active(gm[:, 0]) * busy + e_unit @ w_units
        e_mem = ph.e_byte(gm[:, 0], gm[:, 1]) * prof.total_bytes
        dyn_gpu = (e_gpu + e_mem)[gm_inv] / time_s + ph.p_gpu_on(fg)
        u_main = np.minimum(cpu_s / time_s, 1.0)
        u_main = u_main + p["spin_util"] * (1.0 - u_main)
        u_workers = np.minimum(d_total / time_s, np.maximum(cores - 1.0, 0.0) + (cores < 2) * 1.0)
        p_cpu = ph.p_core_busy(fc) * (u_main + u_workers)
        power = np.minimum(static + dyn_gpu + p_cpu, p["p_cap_w"])
        return {"time_s": time_s, "power_w": power, "static_w": static, "gpu_s": gpu_s, "cpu_s": cpu_s,
                "data_s": data_s, "bound": bound, "cpu_w": p_cpu, "gpu_dyn_w": dyn_gpu}

    def _timeline(self, prof: WorkloadProfile, knob: np.ndarray, precision: str, res: dict) -> LayerTimes:
        ph = self.physics
        fg, fm = np.array([knob[2]]), np.array([knob[3]])
        g, cp = self._gpu_steps(prof, fg, fm, precision, True)
        g, cp = g[0], cp[0]
        cf = float(ph.cpu_factor(knob[1], knob[3]))
        c = self._cpu_steps(prof) * cf
        c_end = np.cumsum(c)
        launches = np.maximum(prof.cpu_ops + prof.cpu_internal, 1.0)
        c_start = c_end - c + c / launches
        start = np.empty_like(g)
        endt = np.empty_like(g)
        prev = 0.0
        for i in range(len(g)):
            start[i] = max(c_start[i], prev)
            endt[i] = prev = start[i] + g[i]
        e_unit = self._unit_energy(fg, precision)[0]
        p_act = float(ph.p_gpu_active(fg)[0])
        e_b = float(ph.e_byte(fg, fm)[0])
        static = float(np.asarray(res["static_w"]).reshape(-1)[0])
        cp = cp * float(ph.active_frac(fg, fm)[0])
        busy = cp + ph.p["gpu_stall_frac"] * (g - cp)
        on = float(ph.p_gpu_on(fg)[0])
        energy = p_act * busy + prof.flops @ e_unit + e_b * prof.bytes + (static + on) * g
        m = PowerMode(int(knob[0]), knob[1], knob[2], knob[3])
        return LayerTimes(list(prof.names), list(prof.phase), g, c, start, endt, energy, prof.flops.sum(axis=1),
                          prof.bytes.copy(), float(np.asarray(res["time_s"]).reshape(-1)[0]),
                          float(np.asarray(res["power_w"]).reshape(-1)[0]), m)

    # ================================================================== the live board (for the sensor)
    def current_mode(self) -> PowerMode:
        """The mode the simulated board is in: the controller's, if the twin follows one, else its own."""
        if self.controller is not None:
            return self.controller.current()
        return self._mode

    def set_mode(self, mode: Any) -> PowerMode:
        """Switch the twin's own mode (when it follows no controller); starts the power settling."""
        if self.controller is not None:
            self.controller.apply(mode)
            return self.controller.current()
        with self._lock:
            now = self.clock()
            self._begin_transition(now)
            self._mode = self.space.coerce(mode)
            self._target_key = None
            return self._mode

    def begin(self, activity: Activity | Any, kind: str = "infer", batch_size: int | None = None) -> Activity:
        """Tell the twin a workload starts running (``Activity``, a ModelCost/WorkloadProfile, or a zoo name)."""
        if not isinstance(activity, Activity):
            activity = self._make_activity(activity, kind, batch_size)
        with self._lock:
            now = self.clock()
            self._begin_transition(now)
            for k in [k for k in self._profile_cache if k and k[0] in ("pw", "parts")]:
                del self._profile_cache[k]
            self._activity = activity
            self._target_key = None
        return activity

    def end(self) -> None:
        """The workload stopped: power settles back to the mode's static power."""
        with self._lock:
            now = self.clock()
            self._begin_transition(now)
            self._activity = None
            self._target_key = None

    @contextlib.contextmanager
    def running(self, cost: Any, kind: str = "infer", batch_size: int | None = None) -> Iterator[Activity]:
        """``with twin.running(cost, "train", 16): ...``: the live power follows that workload meanwhile."""
        act = self.begin(cost, kind, batch_size)
        try:
            yield act
        finally:
            self.end()

    def set_layer(self, name: str | None) -> None:
        """Which step is running now (a profiler may tell): the live power then follows that step."""
        with self._lock:
            if self._activity is not None:
                self._activity.layer = name

    @property
    def activity(self) -> Activity | None:
        return self._activity

    def _make_activity(self, what: Any, kind: str, batch_size: int | None) -> Activity:
        if isinstance(what, str):
            bs = batch_size or (16 if kind == "train" else 1)
            cost, n_t = self.workload_cost(what, bs, kind)
            prof = compile_workload(cost, kind=kind, batch_size=bs, param_tensors=n_t)
            return Activity(what, kind, bs, prof)
        prof = self.compile(what, kind=kind, batch_size=batch_size)
        return Activity(prof.model or "workload", prof.kind, prof.batch_size, prof)

    def target_power(self, mode: PowerMode | None = None) -> float:
        """The settled (noise-free) power of the board now: static when idle, else the running workload's."""
        mode = self.current_mode() if mode is None else mode
        act = self._activity
        if act is None:
            return float(self.physics.static_power(*np.array(mode.as_tuple(), dtype=float)))
        if act.power_fn is not None:
            return float(act.power_fn(mode))
        key = ("pw", id(act.profile), act.layer, mode)
        cached = self._profile_cache.get(key)
        if cached is not None:
            return cached  # type: ignore[return-value]
        if act.layer is not None and act.profile is not None and act.layer in act.profile.names:
            lt = self.layer_times(act.profile, mode)
            rows = [i for i, n in enumerate(lt.names) if n == act.layer]
            g = float(sum(lt.gpu_s[i] for i in rows))
            e = float(sum(lt.energy_j[i] for i in rows))
            value = e / g if g > 0 else lt.power_w
        else:
            value = float(self.predict(act.profile, mode).power_w)
        self._profile_cache[key] = value  # type: ignore[assignment]
        return value

    def _settled_level(self, now: float) -> float:
        """Power now without noise, following the exponential settling."""
        mode = self.current_mode()
        key = (mode, id(self._activity), getattr(self._activity, "layer", None))
        target = self.target_power(mode)
        if self.controller is not None:
            ctl_change = getattr(self.controller, "last_change_s", None)
            if ctl_change is not None and ctl_change != self._ctl_change_s:
                # the controller switched modes: settle from the level we were showing
                self._ctl_change_s = ctl_change
                if self._target_key is not None:
                    self._from_w = self._level_at(ctl_change, self._last_target)
                    self._change_s = ctl_change
        self._target_key = key
        self._last_target = target
        return self._level_at(now, target)

    def settling_w(self, from_w: float, target_w: float, t0_s: float, t1_s: float | None = None) -> float:
        """The power settling curve after a change from ``from_w`` towards ``target_w`` (noise-free, W): its value
        ``t0_s`` seconds after the change, or with ``t1_s`` its exact mean over ``[t0_s, t1_s]``. Exponential with
        time constant ``settle_tau_s`` (within 5 % after 3 tau = 2.4 s); the target at once with ``settling=False``.
        The one home of the curve: the live board (:meth:`power_now`) and the tuner's simulated steps
        (:class:`~lightning_edge.devices.meter.TwinMeter`) both read it."""
        tau = self.settle_tau_s
        if not self.settling or tau <= 0:
            return float(target_w)
        a = max(float(t0_s), 0.0)
        if t1_s is None or t1_s <= a:
            return target_w + (from_w - target_w) * math.exp(-a / tau)
        b = float(t1_s)
        return target_w + (from_w - target_w) * tau * (math.exp(-a / tau) - math.exp(-b / tau)) / (b - a)

    def _level_at(self, t: float, target: float) -> float:
        if not self.settling or self._from_w is None or self._change_s is None:
            return target
        return self.settling_w(self._from_w, target, t - self._change_s)

    def _begin_transition(self, now: float) -> None:
        if self._target_key is None and self._from_w is None:
            self._from_w = self.target_power()
        else:
            self._from_w = self._level_at(now, getattr(self, "_last_target", self.target_power()))
        self._change_s = now

    def power_now(self, *, noise: bool | None = None) -> float:
        """The board's instantaneous power (W, simulated): settling after changes, plus seeded noise."""
        with self._lock:
            now = self.clock()
            level = self._settled_level(now)
            if (self.noise if noise is None else noise) and self.power_noise > 0:
                level *= 1.0 + self.power_noise * float(self._rng.standard_normal())
            return max(level, 0.0)

    def power_parts_now(self) -> dict[str, float]:
        """Settled split of the current power: static, GPU (dynamic), CPU (dynamic), memory share, W."""
        mode = self.current_mode()
        knobs = np.array([mode.as_tuple()], dtype=float)
        static = float(self.physics.static_power(*knobs.T)[0])
        act = self._activity
        if act is None or act.profile is None:
            return {"static": static, "gpu": 0.0, "cpu": 0.0, "mem": 0.0}
        key = ("parts", id(act.profile), mode)
        cached = self._profile_cache.get(key)
        if cached is not None:
            return dict(cached)  # type: ignore[call-overload]
        res = self._evaluate(act.profile, knobs, dataloader=act.profile.kind == "train",
                             precision="fp16" if act.profile.fp16 else "fp32")
        t = float(res["time_s"][0])
        fg, fm = knobs[:, 2], knobs[:, 3]
        mem = float(self.physics.e_byte(fg, fm)[0]) * act.profile.total_bytes / t
        parts = {"static": static, "gpu": max(float(res["gpu_dyn_w"][0]) - mem, 0.0), "cpu": float(res["cpu_w"][0]),
                 "mem": mem}
        self._profile_cache[key] = parts  # type: ignore[assignment]
        return dict(parts)

    def __repr__(self) -> str:
        return f"OrinTwin({self.space!r}, mode {self.current_mode()}, simulated)"
