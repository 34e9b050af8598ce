"""One workload on the twin, one model of it: :class:`TwinWorkload` (``step(modes)``, ``layers(mode)``).

    >>> from lightning_edge.twin.model import OrinTwin
    >>> twin = OrinTwin()
    >>> wl = twin.workload(cost, batch_size=16, kind="train", param_tensors=62)   # a ModelCost -> TwinWorkload
    >>> wl.step()                    # every mode at once: Prediction (time_s, power_w, energy_j, parts), simulated
    >>> wl.layers("15W")             # one mode's per-layer table: LayerTimes, its rows sum to wl.step("15W")

Every caller that wants the twin's time or power of a workload asks a ``TwinWorkload``: the profiler's per-layer
table (``lightning.twin_driver``), the tuner's steps and prior (``devices.meter.TwinMeter``, ``tuning.prior``),
serving and the interleaver (through :class:`~lightning_edge.twin.live.SimWorkload`) and the live simulated board
(``OrinTwin.begin``). There is no second step model to keep in line with this one.

The timeline
------------
A minibatch is the rows of its :class:`~lightning_edge.twin.workload.WorkloadProfile` (the input copy, each
layer's forward pass, the loss, each layer's backward pass, the optimizer), each a group of GPU kernels that the
CPU launches. On a mode the engine computes, in this order (each stage one function below; all vectorised over
modes, so one sweep of the 18,096 modes is one pass):

1. **kernels** (:meth:`TwinWorkload._kernels`): every row's GPU time ``g`` on each (GPU, EMC) clock pair:
   ``max(compute, memory) + kernels x launch overhead``, compute per execution unit at an achieved efficiency
   (large-kernel efficiency x a size factor x a GEMM-depth factor), memory at the bandwidth x a size factor; and
   the part of ``g`` spent computing (the SMs' busy power follows it). *Per-kernel efficiency models belong here
   and only here*: the rest of the engine sees ``g`` and its computing part.
2. **dispatch** (:meth:`TwinWorkload._dispatch`): every row's CPU time to launch its kernels at MAXN CPU speed
   (ops, module calls, C++-issued launches) and when its first kernel is launched; scaled by the mode's CPU factor.
3. **GPU timeline** (:func:`gpu_ends`): row k starts when the GPU finished row k-1 or when the CPU launched it,
   whichever is later; in closed form ``end_k = cummax_j<=k(issue_j + S_j) - S_k+1`` with ``S_j`` the GPU work
   from row j on. The step's GPU end is the last ``end_k`` (the same expression's maximum).
4. **step** (:meth:`TwinWorkload._run`): ``max(GPU end + sync, CPU dispatch + sync)``, plus the batch fetch and
   the data loader for training; ``bound`` says which side set it.
5. **energy**: static power x time, GPU power (busy while computing, ``gpu_stall_frac`` of it while stalled,
   ``p_gpu_on`` while a workload runs) + energy per FLOP by execution unit, DRAM energy per byte, busy CPU cores;
   capped at ``p_cap_w`` (every part scaled alike when the cap binds).

The per-layer table (:class:`LayerTimes`) is stage 3's rows for one mode plus one row, :data:`IDLE_ROW`, for the
time the GPU does not run any row (waiting for launches, the sync, the CPU's tail, the data loader) and for the CPU's
energy: each kernel row holds its GPU time, its kernels' energy and the static and GPU-on power over its GPU time.
The rows' times sum to the step's time and their energies (and each energy part) to the step's, by construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_edge.modes import PowerMode, PowerModeSpace
from lightning_edge.twin.workload import WorkloadProfile, compile_workload, precision_of

if TYPE_CHECKING:  # pragma: no cover
    from lightning_edge.twin.model import OrinTwin

__all__ = ["TwinWorkload", "Prediction", "LayerTimes", "IDLE_ROW", "ENERGY_PARTS", "as_knobs", "gpu_ends"]

LABEL = "simulated"

IDLE_ROW = "(idle and CPU)"
"""The per-layer table's row for what no layer's kernels hold: the time the GPU is idle within the step (launch
waits, the sync, the CPU after the GPU's last kernel, the data loader) at static and GPU-on power, plus the CPU's
energy over the whole step."""

ENERGY_PARTS: tuple[str, ...] = ("static_j", "gpu_j", "mem_j", "cpu_j")
"""How a step's (and each row's) energy splits: the mode's static power over the time, the GPU (busy and stalled
power, energy per FLOP, on power), DRAM traffic, the busy CPU cores. They sum to ``energy_j``."""


@dataclass
class Prediction:
    """The twin's step for one workload on one or more modes (``label`` is always ``simulated``).

    Arrays have one entry per mode (0-d for a single mode, so ``float(pred.time_s)`` works):
    ``time_s`` per minibatch, ``power_w`` average board power, ``energy_j`` per minibatch, and the parts:
    ``static_w`` (pi_0 of the mode), ``gpu_s`` (GPU busy time), ``cpu_s`` (CPU dispatch time), ``data_s``
    (data loader time per minibatch; 0 without it) and ``bound`` (``"gpu"``, ``"cpu"`` or ``"data"``).
    ``parts``: the energy split (:data:`ENERGY_PARTS`, summing to ``energy_j``) and where the GPU's idle time goes
    (``wait_s``: waiting for the CPU's launches between rows, ``tail_s``: after its last row (sync, the CPU's rest,
    the batch fetch), ``loader_s``: waiting for the data loader; ``gpu_s + wait_s + tail_s + loader_s = time_s``).
    ``layers`` holds the per-layer table when one mode was asked for with ``detail=True``.
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
    parts: dict[str, np.ndarray] = field(default_factory=dict)

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
        for k, v in self.parts.items():
            out[k] = np.asarray(v).reshape(-1)[i].item()
        return {**out, "label": self.label}


@dataclass
class LayerTimes:
    """One mode's per-layer table of a minibatch (``label`` ``simulated``): the workload's rows in GPU order, then
    :data:`IDLE_ROW`. The rows' ``wall_s`` sum to ``time_s`` and their ``energy_j`` (and each of ``parts``) to the
    step's energy ``time_s * power_w``, by construction (module docstring).

    Arrays over rows: ``names``, ``phase`` (``input``/``forward``/``loss``/``backward``/``optimizer``; ``idle`` for
    the last row), ``wall_s`` (the row's share of the step's time: a kernel row's GPU time; the idle row's, the time
    the GPU runs no row), ``gpu_s`` (GPU busy time; 0 for the idle row), ``wait_s`` (how long the GPU waited for the
    CPU to launch the row, counted in the idle row's ``wall_s``), ``cpu_s`` (CPU dispatch time), ``start_s``/``end_s``
    (when the GPU runs the row, from the start of the minibatch; the idle row: from the GPU's last kernel to the end
    of the step), ``energy_j``, ``parts`` (:data:`ENERGY_PARTS`, per row), ``flops``, ``bytes``. ``time_s`` /
    ``power_w``: the step's (``step``, the :class:`Prediction` of this mode, has the rest).
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
    wall_s: np.ndarray | None = None
    wait_s: np.ndarray | None = None
    parts: dict[str, np.ndarray] = field(default_factory=dict)
    step: Prediction | None = None

    @property
    def kernel_rows(self) -> slice:
        """The rows that run kernels (every row but the idle row)."""
        return slice(0, len(self.names) - 1)

    @property
    def energy_total_j(self) -> float:
        """The step's energy, J (the sum of the rows' ``energy_j``)."""
        return self.time_s * self.power_w

    def table(self, top: int | None = None) -> list[dict]:
        """The rows as dicts (``time_s`` is the row's ``wall_s``); ``top``: the ``top`` longest rows."""
        rows = [{"name": n, "phase": ph, "time_s": float(w), "gpu_s": float(g), "wait_s": float(wt),
                 "cpu_s": float(c), "start_s": float(s), "end_s": float(e), "energy_j": float(en),
                 **{k: float(self.parts[k][i]) for k in self.parts}}
                for i, (n, ph, w, g, wt, c, s, e, en) in enumerate(zip(
                    self.names, self.phase, self.wall_s, self.gpu_s, self.wait_s, self.cpu_s, self.start_s,
                    self.end_s, self.energy_j))]
        if top is not None:
            rows = sorted(rows, key=lambda r: r["time_s"], reverse=True)[:top]
        return rows


def as_knobs(modes: Any, space: PowerModeSpace) -> tuple[np.ndarray, bool]:
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


def gpu_ends(issue: np.ndarray, suffix: np.ndarray, *, rows: bool = False) -> np.ndarray:
    """The GPU timeline (stage 3 of the module docstring). ``issue``: when the CPU launches each row's first kernel,
    ``suffix``: the GPU work from each row to the end, both (..., n_rows). Without ``rows``: when the GPU finishes
    the minibatch's last row, ``max_k(issue_k + suffix_k)`` (...,); with ``rows``: when it finishes every row,
    ``cummax_j<=k(issue_j + suffix_j) - suffix_k+1`` (..., n_rows), whose last entry is exactly the former."""
    if issue.shape[-1] == 0:
        return np.zeros(issue.shape[:-1] + ((0,) if rows else ()))
    bound = issue + suffix
    if not rows:
        return bound.max(axis=-1)
    after = np.concatenate([suffix[..., 1:], np.zeros(suffix.shape[:-1] + (1,))], axis=-1)
    return np.maximum.accumulate(bound, axis=-1) - after


class TwinWorkload:
    """One workload's minibatch on the twin: the one model that every caller asks (module docstring).

    ``TwinWorkload(cost, twin, *, batch_size=None, kind=None, precision=None, param_tensors=None,
    dataloader=None)``: ``cost`` a :class:`~lightning_edge.cost.ModelCost` (or a compiled ``WorkloadProfile``);
    ``kind`` ``"train"``/``"infer"`` (default: from the cost); ``batch_size`` (default: the cost's first input's
    first dimension); ``precision`` ``"fp32"``/``"fp16"`` (default :func:`~lightning_edge.twin.workload.precision_of`
    the cost: fp16 for 16-bit tensors or a 16-bit autocast); ``param_tensors`` the optimizer's parameter tensors (one
    kernel per op per tensor; count them with :func:`~lightning_edge.twin.workload.count_param_tensors`, default a
    guess of 2 per layer with parameters); ``dataloader``: include the data loader (default: for training).
    ``twin``: whose physics, space and matmul setting (an ``OrinTwin``); :meth:`on` gives the same workload on
    another twin. ``OrinTwin.workload(...)`` builds one and memoises it per cost and arguments. Nothing here is cached: the twin's
    physics may be swapped (calibration) and every call reads it.
    """

    def __init__(self, cost: Any, twin: OrinTwin, *, batch_size: int | None = None,
                 kind: str | None = None, precision: str | None = None, param_tensors: int | None = None,
                 dataloader: bool | None = None, **compile_kw: Any) -> None:
        self.twin = twin
        self.cost = cost
        if isinstance(cost, WorkloadProfile):
            prof = cost
            if kind is not None and kind != prof.kind:
                raise ValueError(f"a compiled {prof.kind} profile cannot be modelled as {kind!r}: compile the cost")
        else:
            prof = compile_workload(cost, kind=kind, batch_size=batch_size, param_tensors=param_tensors,
                                    **compile_kw)
        self.profile: WorkloadProfile = prof
        self.param_tensors = param_tensors
        self.precision = precision_of(prof) if precision is None else str(precision)
        self.dataloader = (prof.kind == "train") if dataloader is None else bool(dataloader)

    @property
    def label(self) -> str:
        """The twin's label (``simulated``; ``extrapolated`` on an extrapolated board): every number it gives."""
        return getattr(self.twin, "label", LABEL)

    @property
    def kind(self) -> str:
        return self.profile.kind

    @property
    def batch_size(self) -> int:
        return self.profile.batch_size

    @property
    def name(self) -> str:
        return self.profile.model or "workload"

    def on(self, twin: OrinTwin) -> TwinWorkload:
        """The same workload (the same compiled rows, precision and data loader) on another twin's physics."""
        other = object.__new__(TwinWorkload)
        other.__dict__.update(self.__dict__)
        other.twin = twin
        return other

    # ------------------------------------------------------------------ the public model
    def step(self, modes: Any = None) -> Prediction:
        """The minibatch on ``modes`` (``None``: every mode of the twin's space; a PowerMode or label, a list, an
        (M, 4) array or a PowerModeSpace): a :class:`Prediction`, 0-d arrays for one mode."""
        knobs, single = as_knobs(modes, self.twin.space)
        return self._prediction(self._run(knobs), knobs, single)

    def layers(self, mode: Any = None) -> LayerTimes:
        """The per-layer table of one mode (default: the twin's current mode); its rows sum to :meth:`step`."""
        mode = self.twin.current_mode() if mode is None else mode
        knobs, _ = as_knobs(mode, self.twin.space)
        if knobs.shape[0] != 1:
            raise ValueError("layers() takes one mode; step() takes many")
        res = self._run(knobs, rows=True)
        return self._table(res, knobs[0], self._prediction(res, knobs, True))

    def __repr__(self) -> str:
        return (f"TwinWorkload({self.name}, {self.kind}, bs {self.batch_size}, {self.precision}, "
                f"{len(self.profile.names)} rows, simulated)")

    # ------------------------------------------------------------------ stage 1: kernels
    def _unit_rates(self, fg: np.ndarray, fm: np.ndarray) -> np.ndarray:
        """Large-kernel FLOP/s per execution unit, shape (len(fg), 4) in UNITS order."""
        ph = self.twin.physics
        p = ph.p
        tf32 = ph.peak_flops(fg, fm, "fp32")
        cuda = tf32 * p["cuda_fp32_ratio"]
        if self.precision == "fp16":
            tc = tf32 * p["fp16_peak_ratio"]
            rates = [tc * p["eff_tc"], tc * p["eff_tc"], 2 * cuda * p["eff_dw"], 2 * cuda * p["eff_elt"]]
        else:
            mm = tf32 * p["eff_tc"] if self.twin.tf32_matmul else cuda * p["eff_cuda"]
            rates = [tf32 * p["eff_tc"], mm, cuda * p["eff_dw"], cuda * p["eff_elt"]]
        return np.stack(rates, axis=-1)

    def _unit_energy(self, fg: np.ndarray) -> np.ndarray:
        """Marginal J/FLOP per execution unit, shape (len(fg), 4)."""
        ph = self.twin.physics
        fp16 = self.precision == "fp16"
        units = ["tc", "tc" if (self.twin.tf32_matmul or fp16) else "cuda", "dw", "elt"]
        e = np.stack([ph.e_flop(u, fg) for u in units], axis=-1)
        if fp16:
            e = e * 0.5
        return e

    def _kernels(self, fg: np.ndarray, fm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """GPU time of every row on every (gpu, mem) pair, shape (len(fg), n_rows), and the part of it spent
        computing (the rest stalls on memory). Per-kernel efficiency: here."""
        ph = self.twin.physics
        p = ph.p
        prof = self.profile
        k = np.maximum(prof.kernels, 1.0)
        rates = self._unit_rates(fg, fm)                                  # (U, 4)
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
        bw = ph.bandwidth(fg, fm, "fp16" if self.precision == "fp16" else "fp32") * p["eff_mem"]
        with np.errstate(divide="ignore", invalid="ignore"):
            t_m = np.where(prof.bytes[None] > 0, prof.bytes[None] / (bw[:, None] * np.maximum(size_m[None], 1e-9)), 0.0)
        launch = prof.kernels[None] * ph.k_overhead(fg)[:, None]
        g = np.maximum(t_c, t_m) + launch
        return g, np.minimum(t_c + launch, g)

    # ------------------------------------------------------------------ stage 2: dispatch
    def _dispatch(self) -> tuple[np.ndarray, np.ndarray, float]:
        """Every row's CPU dispatch time and when its first kernel is launched, at MAXN CPU speed (s); and the
        minibatch's total dispatch time."""
        p = self.twin.physics.p
        prof = self.profile
        c_steps = (prof.cpu_ops * p["t_op_us"] + prof.cpu_calls * p["t_module_us"]
                   + prof.cpu_internal * p["t_internal_us"]) * 1e-6
        c_end = np.cumsum(c_steps)
        launches = np.maximum(prof.cpu_ops + prof.cpu_internal, 1.0)
        c_start = c_end - c_steps + c_steps / launches
        return c_steps, c_start, (float(c_end[-1]) if len(c_end) else 0.0)

    def _sample_s(self) -> float:
        """Data-loader CPU time per sample at MAXN CPU speed, s."""
        p = self.twin.physics.p
        prof = self.profile
        if prof.sample_mpix > 0:
            per = p["t_decode_train_ms_per_mpix"] if prof.kind == "train" else p["t_decode_infer_ms_per_mpix"]
            return per * 1e-3 * prof.sample_mpix
        return p["t_token_sample_us"] * 1e-6

    # ------------------------------------------------------------------ stages 3-5: the step
    def _run(self, knobs: np.ndarray, *, rows: bool = False) -> dict:
        """The step on every mode of ``knobs`` (M, 4); with ``rows`` (one mode) also the rows of its timeline, from
        the same arrays."""
        ph = self.twin.physics
        p = ph.p
        prof = self.profile
        cores, fc, fg, fm = (knobs[:, i] for i in range(4))
        # --- stage 1, once per distinct (gpu, mem) pair
        gm, gm_inv = np.unique(knobs[:, 2:4], axis=0, return_inverse=True)
        gm_inv = gm_inv.reshape(-1)
        g_steps, c_part = self._kernels(gm[:, 0], gm[:, 1])              # (U, S)
        g_total = g_steps.sum(axis=1)                                     # (U,)
        compute_total = c_part.sum(axis=1)
        suffix = np.cumsum(g_steps[:, ::-1], axis=1)[:, ::-1]             # GPU work left from row k on
        # --- stage 2 at MAXN speed
        c_steps, c_start, c_total = self._dispatch()
        t_sync = p["t_sync_us"] * 1e-6
        # --- stage 3, once per distinct (cpu, gpu, mem): cpu factor x issue times against the GPU's backlog
        trip, trip_inv = np.unique(knobs[:, 1:4], axis=0, return_inverse=True)
        trip_inv = trip_inv.reshape(-1)
        # the distinct (gpu, mem) pairs of the triplets are exactly ``gm`` (same set, same order)
        trip_gm = np.unique(trip[:, 1:3], axis=0, return_inverse=True)[1].reshape(-1)
        cf = ph.cpu_factor(trip[:, 0], trip[:, 2])
        end = np.empty(len(trip))
        chunk = max(1, 4_000_000 // max(len(c_start), 1))
        for a in range(0, len(trip), chunk):
            sl = slice(a, a + chunk)
            end[sl] = gpu_ends(cf[sl, None] * c_start[None, :], suffix[trip_gm[sl]])
        # --- stage 4
        cpu_trip = cf * (c_total + t_sync)
        iter_trip = np.maximum(end + cf * t_sync, cpu_trip)
        t_iter = iter_trip[trip_inv]
        cpu_s = cpu_trip[trip_inv]
        gpu_s = g_total[gm_inv]
        cfm = ph.cpu_factor(fc, fm)
        if self.dataloader:
            # fetching the batch from the workers (unpickle, pin, copy) runs on the main thread, not overlapped
            fetch = p["t_fetch_ms_per_mb"] * 1e-3 * prof.input_mb * cfm
            t_iter = t_iter + fetch
            cpu_s = cpu_s + fetch
            d_total = prof.batch_size * self._sample_s() * cfm              # core-seconds per minibatch
            workers = np.minimum(p["loader_workers"], np.maximum(cores - 1.0, 0.0))
            data_s = np.where(workers >= 1.0, d_total / np.maximum(workers, 1.0), d_total + cpu_s)
            contention = (cpu_s + d_total) / cores
            time_s = np.maximum.reduce([t_iter, data_s, contention])
        else:
            d_total = np.zeros_like(t_iter)
            data_s = np.zeros_like(t_iter)
            time_s = t_iter
        gpu_end = end[trip_inv]
        bound = np.where(time_s > t_iter * (1 + 1e-9), "data", np.where(gpu_end >= cpu_s, "gpu", "cpu"))
        # --- stage 5: power
        static = ph.static_power(cores, fc, fg, fm)
        e_unit = self._unit_energy(gm[:, 0])                                # (U, 4)
        w_units = prof.flops.sum(axis=0)                                    # (4,)
        af = ph.active_frac(gm[:, 0], gm[:, 1])
        active = compute_total * af                                         # SMs computing, the rest stalls
        busy = active + p["gpu_stall_frac"] * (g_total - active)
        p_act = ph.p_gpu_active(gm[:, 0])
        e_gpu = p_act * busy + e_unit @ w_units
        e_b = ph.e_byte(gm[:, 0], gm[:, 1])
        e_mem = e_b * prof.total_bytes
        on = ph.p_gpu_on(fg)
        dyn_gpu = (e_gpu + e_mem)[gm_inv] / time_s + on
        u_main = np.minimum(cpu_s / time_s, 1.0)
        u_main = u_main + p["spin_util"] * (1.0 - u_main)
        u_workers = np.minimum(d_total / time_s, np.maximum(cores - 1.0, 0.0) + (cores < 2) * 1.0)
        p_cpu = ph.p_core_busy(fc) * (u_main + u_workers)
        uncapped = static + dyn_gpu + p_cpu
        power = np.minimum(uncapped, p["p_cap_w"])
        scale = np.where(uncapped > p["p_cap_w"], power / uncapped, 1.0)   # the cap: every part alike
        energy_j = time_s * power
        parts = {"static_j": static * time_s * scale, "gpu_j": (e_gpu[gm_inv] + on * time_s) * scale,
                 "mem_j": e_mem[gm_inv] * scale, "cpu_j": p_cpu * time_s * scale,
                 "wait_s": gpu_end - gpu_s, "tail_s": t_iter - gpu_end, "loader_s": time_s - t_iter}
        res = {"time_s": time_s, "power_w": power, "energy_j": energy_j, "static_w": static, "gpu_s": gpu_s,
               "cpu_s": cpu_s, "data_s": data_s, "bound": bound, "cpu_w": p_cpu, "parts": parts}
        if rows:  # one mode: its rows, from the same arrays (U = triplets = 1)
            g, cp = g_steps[0], c_part[0] * af[0]
            issue = cf[0] * c_start
            ends = gpu_ends(issue, suffix[0], rows=True)
            prev = np.concatenate([[0.0], ends[:-1]])
            start = np.maximum(issue, prev)
            e_unit0 = e_unit[0]
            rb = cp + p["gpu_stall_frac"] * (g - cp)
            res["rows"] = {
                "gpu_s": g, "cpu_s": c_steps * cf[0], "start_s": start, "end_s": ends, "wait_s": start - prev,
                "dyn_j": p_act[0] * rb + prof.flops @ e_unit0, "mem_j": e_b[0] * prof.bytes,
                "static_w": float(static[0]), "on_w": float(on[0]), "scale": float(scale[0]),
            }
        return res

    def _prediction(self, res: dict, knobs: np.ndarray, single: bool) -> Prediction:
        arrays = {k: _out(res[k], single) for k in ("time_s", "power_w", "energy_j", "static_w", "gpu_s", "cpu_s",
                                                     "data_s", "bound")}
        return Prediction(**arrays, modes=knobs, workload=self.profile.model, kind=self.kind,
                          batch_size=self.batch_size, precision=self.precision, label=self.label,
                          parts={k: _out(v, single) for k, v in res["parts"].items()})

    def _table(self, res: dict, knob: np.ndarray, step: Prediction) -> LayerTimes:
        """The per-layer table of one mode: the timeline's rows, then the idle row (module docstring)."""
        r = res["rows"]
        prof = self.profile
        g, scale = r["gpu_s"], r["scale"]
        static, on = r["static_w"], r["on_w"]
        t = float(res["time_s"][0])
        power = float(res["power_w"][0])
        idle_s = t - float(res["gpu_s"][0])
        p_cpu = float(res["cpu_w"][0])
        energy = r["dyn_j"] + r["mem_j"] + (static + on) * g
        parts = {"static_j": static * g, "gpu_j": r["dyn_j"] + on * g, "mem_j": r["mem_j"], "cpu_j": np.zeros_like(g)}
        idle = {"static_j": static * idle_s, "gpu_j": on * idle_s, "mem_j": 0.0, "cpu_j": p_cpu * t}
        idle_e = idle["static_j"] + idle["gpu_j"] + idle["cpu_j"]
        last = float(r["end_s"][-1]) if len(g) else 0.0

        def row(a: np.ndarray, v: float) -> np.ndarray:
            return np.append(a, v)

        if scale != 1.0:
            energy, idle_e = energy * scale, idle_e * scale
            parts = {k: v * scale for k, v in parts.items()}
            idle = {k: v * scale for k, v in idle.items()}
        m = PowerMode(int(knob[0]), knob[1], knob[2], knob[3])
        return LayerTimes(
            names=[*prof.names, IDLE_ROW], phase=[*prof.phase, "idle"], gpu_s=row(g, 0.0), cpu_s=row(r["cpu_s"], 0.0),
            start_s=row(r["start_s"], last), end_s=row(r["end_s"], t), energy_j=row(energy, idle_e),
            flops=row(prof.flops.sum(axis=1), 0.0), bytes=row(prof.bytes, 0.0), time_s=t, power_w=power, mode=m,
            wall_s=row(g, idle_s), wait_s=row(r["wait_s"], 0.0), label=self.label,
            parts={k: row(np.asarray(parts[k], dtype=float), float(idle[k])) for k in ENERGY_PARTS}, step=step)
