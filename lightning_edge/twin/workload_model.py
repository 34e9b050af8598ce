"""One workload on the twin, one model of it: :class:`TwinWorkload` (``step(modes)``, ``layers(mode)``).

    >>> from lightning_edge.twin.model import OrinTwin
    >>> twin = OrinTwin()
    >>> wl = twin.workload(cost, batch_size=16, kind="train", param_tensors=62)   # a ModelCost -> TwinWorkload
    >>> wl.step()                    # every mode at once: Prediction (time_s, power_w, energy_j, parts), simulated
    >>> wl.layers("15W")             # one mode's per-layer table: LayerTimes, its rows sum to wl.step("15W")

Every caller that wants the twin's time or power of a workload asks a ``TwinWorkload``: the profiler's per-layer
table (``lightning.twin_driver``), the tuner's steps and prior (``devices.meter.TwinMeter``, ``tuning.prior``),
serving and the interleaver (through :class:`~lightning_edge.twin.sim_workload.SimWorkload`) and the live simulated
board (:meth:`LiveTwin.begin <lightning_edge.devices.sim.live.LiveTwin.begin>`). There is no second step model to keep
in line with this one. A workload knows no board's current mode: :meth:`TwinWorkload.layers` is told its mode.

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

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_edge.modes import PowerMode, PowerModeSpace
from lightning_edge.twin.physics import F_CPU_MAX, GPU_SMS
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
    ``layers`` holds the per-layer table when one mode was asked for with ``detail=True``; ``notes`` what it assumed
    where it was not told (``OrinTwin.predict``: a training step's optimizer).
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
    notes: list[str] = field(default_factory=list)  # what the prediction assumed (OrinTwin.predict: the optimizer)

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
    notes: list[str] = field(default_factory=list)

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


@dataclass(frozen=True)
class HostCPU:
    """The CPU work of the user's own run that the twin does not model op by op: the time outside the layers that
    this machine measured per minibatch (the input pipeline: fetching and collating the batch, the training loop's
    Python between steps), and this machine's CPU clock. The twin runs it on the Orin's CPU
    (:meth:`TwinWorkload.step`): ``cpu_s x host_mhz / 2201.6`` at MAXN (the clock ratio: the twin has no figure for
    how much more or less a core of this machine does per clock than the Orin's Cortex-A78AE, so it takes them
    equal), times the twin's CPU factor of the mode (``1 / f_cpu``, slower at low EMC clocks), on the main thread,
    after the GPU's last kernel of the step (the papers' minibatch ends with a synchronisation).

    ``how``: where the number came from (the profiler: "median of N gaps between training steps on this machine").
    """

    cpu_s: float
    host_mhz: float | None = None
    how: str = "measured on this machine"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.cpu_s) and self.cpu_s >= 0):
            raise ValueError(f"HostCPU.cpu_s must be a finite number of seconds >= 0, got {self.cpu_s!r}")
        if self.host_mhz is not None and not (math.isfinite(self.host_mhz) and self.host_mhz > 0):
            raise ValueError(f"HostCPU.host_mhz must be a positive clock in MHz or None, got {self.host_mhz!r}")

    @property
    def scale(self) -> float:
        """This machine's seconds -> the Orin's at MAXN CPU: the clock ratio (1 when this machine's clock is unknown)."""
        return (self.host_mhz / F_CPU_MAX) if self.host_mhz else 1.0

    @property
    def orin_s(self) -> float:
        """The work's seconds on the Orin's CPU at MAXN."""
        return self.cpu_s * self.scale

    def describe(self) -> str:
        clock = (f"x {self.scale:.2f} (this CPU's {self.host_mhz:.0f} MHz / the Orin's {F_CPU_MAX:g} MHz; the "
                 "twin has no figure for their speed per clock: taken equal)" if self.host_mhz else
                 "x 1 (this CPU's clock unknown: taken as the Orin's top clock)")
        return (f"{self.cpu_s * 1e3:.3g} ms per minibatch outside the layers ({self.how}) {clock} "
                f"= {self.orin_s * 1e3:.3g} ms at MAXN, x the mode's CPU factor (1/f_cpu, memory latency)")


LOADERS = ("decode",)
"""The data loaders the twin can model itself: ``"decode"``, Fulcrum's and Pagoda's ImageNet pipeline (4 worker
processes decoding and augmenting JPEGs, the batch fetched on the main thread)."""


class TwinWorkload:
    """One workload's minibatch on the twin: the one model that every caller asks (module docstring).

    ``TwinWorkload(cost, twin, *, batch_size=None, kind=None, precision=None, param_tensors=None,
    dataloader=None, host=None, optimizer_steps=1.0)``: ``cost`` a :class:`~lightning_edge.cost.ModelCost` (or a
    compiled ``WorkloadProfile``); ``kind`` ``"train"``/``"infer"`` (default: from the cost); ``batch_size``
    (default: the cost's first input's first dimension); ``precision``: None (default) times every kernel at the
    dtype the cost counted it in (an autocast's matmuls in bf16, its element-wise ops in fp32); ``"fp16"`` or
    ``"fp32"`` forces every kernel to that precision (the label is :func:`~lightning_edge.twin.workload.precision_of`
    the cost otherwise); ``param_tensors`` the optimizer's parameter tensors (one kernel per op per tensor; count
    them with :func:`~lightning_edge.twin.workload.count_param_tensors`, default a guess of 2 per layer with
    parameters); ``optimizer_steps``: optimizer steps per minibatch (``1 / accumulate_grad_batches``), the
    ``(optimizer)`` row's share of one step.

    The CPU work outside the layers: ``host`` (a :class:`HostCPU`: what the user's own run measured on this machine,
    run on the Orin's CPU) and/or ``dataloader`` (``"decode"`` or True: Fulcrum's image-decoding loader, for
    reproducing the papers' workloads; False/None: none). With neither, the step is the layers' kernels, their
    dispatch and the synchronisation.

    ``twin``: whose physics, space and matmul setting (an ``OrinTwin``); :meth:`on` gives the same workload on
    another twin. ``OrinTwin.workload(...)`` builds one and memoises it per cost and arguments. Nothing here is cached:
    the twin's physics may be swapped (calibration) and every call reads it.
    """

    def __init__(self, cost: Any, twin: OrinTwin, *, batch_size: int | None = None,
                 kind: str | None = None, precision: str | None = None, param_tensors: int | None = None,
                 dataloader: bool | str | None = None, host: HostCPU | None = None,
                 optimizer_steps: float = 1.0, **compile_kw: Any) -> None:
        self.twin = twin
        self.cost = cost
        if isinstance(cost, WorkloadProfile):
            prof = cost
            if kind is not None and kind != prof.kind:
                raise ValueError(f"a compiled {prof.kind} profile cannot be modelled as {kind!r}: compile the cost")
        else:
            prof = compile_workload(cost, kind=kind, batch_size=batch_size, param_tensors=param_tensors,
                                    optimizer_steps=optimizer_steps, **compile_kw)
        self.profile: WorkloadProfile = prof
        self.param_tensors = param_tensors
        own = precision_of(prof)
        if precision not in (None, "fp32", "fp16"):
            raise ValueError(f"precision must be None (each kernel's own), 'fp32' or 'fp16', got {precision!r}")
        self.precision = own if precision is None else str(precision)
        # a precision asked for that is not the cost's own: every kernel at that precision
        self._half = None if precision is None or precision == own else precision == "fp16"
        if dataloader not in (None, False, True, *LOADERS):
            raise ValueError(f"dataloader must be None/False (none), True or 'decode' (Fulcrum's image-decoding "
                             f"loader), got {dataloader!r}")
        self.dataloader = "decode" if dataloader is True else (dataloader or None)
        if host is not None and not isinstance(host, HostCPU):
            raise TypeError(f"host must be a HostCPU (the CPU time outside the layers measured on this machine), "
                            f"got {type(host).__name__}")
        self.host = host

    @property
    def label(self) -> str:
        """The twin's label (``simulated``; ``extrapolated`` on an extrapolated board): every number it gives."""
        return self.twin.label

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

    def layers(self, mode: Any) -> LayerTimes:
        """The per-layer table of one mode (a PowerMode or its label); its rows sum to :meth:`step`. The mode is the
        caller's to say: the model knows no board's current mode."""
        if mode is None:
            raise ValueError("layers() takes one mode (a PowerMode or its label): the model knows no current mode")
        knobs, _ = as_knobs(mode, self.twin.space)
        if knobs.shape[0] != 1:
            raise ValueError("layers() takes one mode; step() takes many")
        res = self._run(knobs, rows=True)
        return self._table(res, knobs[0], self._prediction(res, knobs, True))

    def __repr__(self) -> str:
        return (f"TwinWorkload({self.name}, {self.kind}, bs {self.batch_size}, {self.precision}, "
                f"{len(self.profile.names)} rows, simulated)")

    # ------------------------------------------------------------------ stage 1: kernels
    def _combo_rates(self, fg: np.ndarray, fm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Large-kernel FLOP/s and bandwidth (B/s) of every (unit, 16-bit?) pair on each (GPU, EMC) clock pair, shape
        (len(fg), 8), column ``2 * unit + half`` (:data:`~lightning_edge.twin.workload.UNITS` order). Convolutions:
        TF32 tensor cores; matmuls and attention: FP32 CUDA cores (TF32 with ``tf32_matmul``); both at the 16-bit
        tensor-core peak when they compute in fp16 or bf16 (the twin has Pagoda's FP16 figures only: bf16 runs at the
        FP16 rate, as on Ampere); depthwise and element-wise on CUDA cores, twice the rate in 16 bits."""
        ph = self.twin.physics
        p = ph.p
        tf32 = ph.peak_flops(fg, fm, "fp32")
        cuda = tf32 * p["cuda_fp32_ratio"]
        tc16 = tf32 * p["fp16_peak_ratio"]
        mm = tf32 * p["eff_tc"] if self.twin.tf32_matmul else cuda * p["eff_cuda"]
        rates = [tf32 * p["eff_tc"], tc16 * p["eff_tc"], mm, tc16 * p["eff_tc"],
                 cuda * p["eff_dw"], 2 * cuda * p["eff_dw"], cuda * p["eff_elt"], 2 * cuda * p["eff_elt"]]
        bw = ph.bandwidth(fg, fm, "fp32") * p["eff_mem"]
        bw16 = ph.bandwidth(fg, fm, "fp16") * p["eff_mem"]
        return np.stack(rates, axis=-1), np.stack([bw, bw16] * 4, axis=-1)

    def _combo_energy(self) -> np.ndarray:
        """Energy per FLOP at the top GPU voltage (J) of every (unit, 16-bit?) pair, shape (8,): a kernel computing in
        16 bits spends half the energy per FLOP of its unit (tensor cores for matmuls)."""
        p = self.twin.physics.p
        mm = "tc" if self.twin.tf32_matmul else "cuda"
        e = [p["e_flop_tc_pj"], p["e_flop_tc_pj"] / 2, p[f"e_flop_{mm}_pj"], p["e_flop_tc_pj"] / 2,
             p["e_flop_dw_pj"], p["e_flop_dw_pj"] / 2, p["e_flop_elt_pj"], p["e_flop_elt_pj"] / 2]
        return np.array(e) * 1e-12

    def _kernels(self, fg: np.ndarray, fm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """GPU time of every row on every (gpu, mem) pair, shape (len(fg), n_rows), and the part of it spent
        computing (the rest stalls on memory). Per-kernel efficiency: here, kernel by kernel, then summed per row.

        A kernel of ``W`` FLOP, ``Q`` bytes and reduction depth ``r`` on a unit of large-kernel rate ``R`` (the unit's
        peak x its efficiency, at the kernel's precision) and bandwidth ``B`` (x ``eff_mem``) takes

            t = launch(f_g) + max(t_c, t_m),   t_m = (Q + q_half) / B,
            t_c = W / R + ((W / r) * r_half + min(w_half, 16 W)) / R_tc   (matmuls, convolutions, attention)
            t_c = W / R                                                     (depthwise, element-wise)

        ``(W / r) * r_half / R_tc``: every output element (``W / 2r`` of them) costs its tile a fixed overhead (the
        prologue that fills the reduction's pipeline, the epilogue that stores it) worth ``r_half`` multiply-adds at
        the TF32 tensor-core rate ``R_tc`` whichever unit sums (a shallow reduction, ``r`` small, pays it on few
        FLOP: the depth-8 matmul of a LoRA adapter is bound by writing its outputs, not by its arithmetic);
        ``min(w_half, 16 W) / R_tc`` and ``q_half / B``: the time a kernel takes to fill and drain the GPU (its first
        and last waves: loads and pipeline latency, not arithmetic, so at the same rate whichever unit sums), paid once
        per kernel; a matmul under one tile per SM (16 SMs) pays its own tiles' time.
        Element-wise kernels are memory-bound unless they compute a lot per byte. No penalty multiplies another: a
        small kernel pays its fill once, a shallow one its depth once."""
        ph = self.twin.physics
        p = ph.p
        prof = self.profile
        rates, bws = self._combo_rates(fg, fm)                          # (U, 8)
        combo = 2 * prof.k_unit + self._k_half()                         # (K,)
        r = rates[:, combo]                                              # (U, K)
        b = bws[:, combo]
        r_tc = rates[:, :1]                                              # TF32 tensor cores (U, 1)
        w, q, d = prof.k_flops, prof.k_bytes, prof.k_depth
        gemm = prof.k_unit <= 1                                          # tc, cuda: tiled GEMM-like kernels
        per_out = np.where(gemm & (d > 0), w / np.where(d > 0, d, 1.0), 0.0) * p["half_reduction"]
        fill = np.where(gemm, np.minimum(p["half_mflop"] * 1e6, GPU_SMS * w), 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            t_c = np.where(w > 0, w / r + (per_out + fill) / r_tc, 0.0)
            t_m = np.where(q > 0, (q + p["half_mbyte"] * 1e6) / b, 0.0)
        launch = ph.k_overhead(fg)[:, None]
        t = np.maximum(t_c, t_m) + launch
        comp = np.minimum(t_c + launch, t)
        return self._to_rows(t * prof.k_count), self._to_rows(comp * prof.k_count)

    def _k_half(self) -> np.ndarray:
        """1 for every kernel that computes in 16 bits (its own dtype, or the precision asked for), else 0."""
        if self._half is None:
            return self.profile.k_half.astype(np.int64)
        return np.full(len(self.profile.k_half), int(self._half), dtype=np.int64)

    def _to_rows(self, x: np.ndarray) -> np.ndarray:
        """Sum (..., n_kernels) over each row's kernels -> (..., n_rows) (kernels are stored row by row)."""
        prof = self.profile
        n = len(prof.names)
        if not hasattr(self, "_bounds"):
            self._bounds = (np.searchsorted(prof.k_row, np.arange(n), "left"),
                            np.searchsorted(prof.k_row, np.arange(n), "right"))
        lo, hi = self._bounds
        cs = np.concatenate([np.zeros(x.shape[:-1] + (1,)), np.cumsum(x, axis=-1)], axis=-1)
        return cs[..., hi] - cs[..., lo]

    def _row_flop_energy(self) -> np.ndarray:
        """Every row's FLOP energy at the top GPU voltage (J), by its kernels' units and precisions."""
        prof = self.profile
        e = self._combo_energy()[2 * prof.k_unit + self._k_half()]
        return self._to_rows(e * prof.k_flops * prof.k_count)

    # ------------------------------------------------------------------ stage 2: dispatch
    def _dispatch(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """Every row's CPU dispatch time, when its first kernel is launched and when its last one is, at MAXN CPU
        speed (s); and the minibatch's total dispatch time."""
        p = self.twin.physics.p
        prof = self.profile
        c_steps = (prof.cpu_ops * p["t_op_us"] + prof.cpu_calls * p["t_module_us"]
                   + prof.cpu_internal * p["t_internal_us"]) * 1e-6
        c_end = np.cumsum(c_steps)
        launches = np.maximum(prof.cpu_ops + prof.cpu_internal, 1.0)
        c_start = c_end - c_steps + c_steps / launches
        return c_steps, c_start, c_end, (float(c_end[-1]) if len(c_end) else 0.0)

    def _segments(self, g: np.ndarray, c_first: np.ndarray, c_last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row as two segments of the GPU's FIFO queue: all of its kernels but one's share of its GPU time,
        issued with its first launch, and the last share, issued with its last launch. For kernels launched at a
        steady pace that is exact: the row ends at ``max(start + g, last launch + g / n)``, so a row can never end
        before the CPU has launched it. ``g``: (U, S) GPU time per row; returns the segments' issue times (2S,) and
        GPU times (U, 2S), row k's segments at 2k and 2k+1."""
        last = g / np.maximum(self.profile.kernels, 1.0)
        work = np.empty(g.shape[:-1] + (2 * g.shape[-1],))
        work[..., 0::2] = g - last
        work[..., 1::2] = last
        issue = np.empty(2 * len(c_first))
        issue[0::2] = c_first
        issue[1::2] = c_last
        return issue, work

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
        # --- stage 2 at MAXN speed
        c_steps, c_first, c_last, c_total = self._dispatch()
        c_start, seg = self._segments(g_steps, c_first, c_last)           # (2S,), (U, 2S)
        suffix = np.cumsum(seg[:, ::-1], axis=1)[:, ::-1]                 # GPU work left from segment k on
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
        host_s = np.zeros_like(t_iter)
        if self.host is not None:
            # the user's own CPU work outside the layers (measured on this machine), on the Orin's CPU at this mode:
            # on the main thread after the step's synchronisation, not overlapped with the GPU
            host_s = self.host.orin_s * cfm
            t_iter = t_iter + host_s
            cpu_s = cpu_s + host_s
        if self.dataloader == "decode":
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
        e_rows = self._row_flop_energy()                                    # (S,) at the top voltage
        v2 = ph.v_gpu(gm[:, 0]) ** 2                                        # (U,)
        af = ph.active_frac(gm[:, 0], gm[:, 1])
        active = compute_total * af                                         # SMs computing, the rest stalls
        busy = active + p["gpu_stall_frac"] * (g_total - active)
        p_act = ph.p_gpu_active(gm[:, 0])
        e_gpu = p_act * busy + v2 * float(e_rows.sum())
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
                 "wait_s": gpu_end - gpu_s, "tail_s": t_iter - gpu_end, "loader_s": time_s - t_iter,
                 "host_s": host_s}
        res = {"time_s": time_s, "power_w": power, "energy_j": energy_j, "static_w": static, "gpu_s": gpu_s,
               "cpu_s": cpu_s, "data_s": data_s, "bound": bound, "cpu_w": p_cpu, "parts": parts}
        if rows:  # one mode: its rows, from the same arrays (U = triplets = 1)
            g, cp = g_steps[0], c_part[0] * af[0]
            ends = gpu_ends(cf[0] * c_start, suffix[0], rows=True)[1::2]   # a row ends with its last segment
            prev = np.concatenate([[0.0], ends[:-1]])
            start = np.maximum(cf[0] * c_first, prev)                       # its first kernel starts
            rb = cp + p["gpu_stall_frac"] * (g - cp)
            res["rows"] = {
                "gpu_s": g, "cpu_s": c_steps * cf[0], "start_s": start, "end_s": ends, "wait_s": ends - prev - g,
                "dyn_j": p_act[0] * rb + v2[0] * e_rows, "mem_j": e_b[0] * prof.bytes,
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
        """The per-layer table of one mode: the timeline's rows, then the idle row (module docstring). A kernel row
        lasts from the end of the row before it to its own end: its GPU time plus the time the GPU waited for the CPU
        to launch it (in a launch-bound step, its dispatch); the idle row holds what follows the last kernel."""
        r = res["rows"]
        prof = self.profile
        g, scale = r["gpu_s"], r["scale"]
        wait = np.maximum(r["wait_s"], 0.0)
        static, on = r["static_w"], r["on_w"]
        t = float(res["time_s"][0])
        power = float(res["power_w"][0])
        p_cpu = float(res["cpu_w"][0])
        wall = g + wait
        last = float(r["end_s"][-1]) if len(g) else 0.0
        idle_s = t - last
        energy = r["dyn_j"] + r["mem_j"] + (static + on + p_cpu) * wall
        parts = {"static_j": static * wall, "gpu_j": r["dyn_j"] + on * wall, "mem_j": r["mem_j"],
                 "cpu_j": p_cpu * wall}
        idle = {"static_j": static * idle_s, "gpu_j": on * idle_s, "mem_j": 0.0, "cpu_j": p_cpu * idle_s}
        idle_e = idle["static_j"] + idle["gpu_j"] + idle["cpu_j"]

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
            wall_s=row(wall, idle_s), wait_s=row(wait, 0.0), label=self.label,
            parts={k: row(np.asarray(parts[k], dtype=float), float(idle[k])) for k in ENERGY_PARTS}, step=step,
            notes=self._idle_notes(res, idle_s, float(wait.sum())))

    def _idle_notes(self, res: dict, idle_s: float, wait_s: float) -> list[str]:
        """How the table's last row was formed, and what the layers' times hold (the profiler prints these)."""
        parts = res["parts"]
        host = float(parts["host_s"][0])
        loader = float(parts["loader_s"][0])
        rest = idle_s - host - loader
        cpu = (f"{host * 1e3:.3g} ms of CPU work outside the layers: {self.host.describe()}" if self.host is not None
               else "no CPU work outside the layers (none measured for this workload, no data loader modelled)")
        lines = [f"{IDLE_ROW} = {idle_s * 1e3:.3g} ms after the GPU's last kernel: {rest * 1e3:.3g} ms the step's "
                 f"synchronisation and the CPU finishing its dispatch, {cpu}"
                 + (f", {loader * 1e3:.3g} ms waiting for the image-decoding data loader (Fulcrum's)" if loader > 0
                    else "") + "; and the CPU's power over the step's other rows is theirs"]
        if wait_s > 0:
            lines.append(f"each layer's time includes the time the GPU waited for the CPU to launch its kernels "
                         f"({wait_s * 1e3:.3g} ms in all: a launch-bound step shows its dispatch in its layers)")
        if self.profile.optimizer_steps != 1.0 and "(optimizer)" in self.profile.names:
            s = self.profile.optimizer_steps
            lines.append(f"(optimizer): one optimizer step's kernels apportioned over the {1 / s:.3g} minibatches "
                         f"between steps ({s:.3g} of a step per minibatch)" if s > 0 else
                         "(optimizer): no optimizer step is taken in these minibatches")
        return lines
