"""The Jetson AGX Orin twin: rooflines, minibatch time and power of any workload on any of the 18,096 modes.

    >>> from lightning_edge.twin.model import OrinTwin
    >>> twin = OrinTwin()
    >>> twin.roofline("12c/2201.6/1300.5/3199").peak_flops          # 14.7e12 (simulated)
    >>> wl = twin.workload("resnet18", 16, "train")    # the one model of a workload (TwinWorkload)
    >>> pred = wl.step()                               # all 18,096 modes, < 0.1 s: time_s, power_w, energy_j, parts
    >>> wl.layers("15W").table()                       # one mode's per-layer table; its rows sum to the step
    >>> twin.predict_workload("resnet18", 16, "train")  # the same as wl.step()

The model (docs/twin.md has the equations and where each coefficient comes from):

- the roofline of a mode is a smooth function of the GPU and EMC clocks (CPU knobs do not move it);
- a minibatch is a sequence of rows (layers, forward then backward, loss, optimizer); the CPU issues
  them (PyTorch dispatch cost ~ 1/f_cpu) while the GPU runs them (per-row roofline time at an achieved
  efficiency per execution unit), asynchronously: the minibatch ends when both have finished, exactly
  ``max(cpu_total, max_k(cpu_issue_k + gpu_time_{k..end}))``; training also waits for the data loader;
- power = static(mode) + GPU busy power + FLOP and byte energy / time + busy CPU cores, capped at ~67 W.

The workload model (the rows' timeline, the step and the per-layer table) is
:class:`~lightning_edge.twin.workload_model.TwinWorkload`; this module holds the board's model: its physics, its
space, its rooflines and its power settling curve (:meth:`OrinTwin.settling_w`). Everything it returns is labelled
``simulated``. It is a pure model: it keeps no mode, no clock, no running workload and draws no noise; every answer
is a function of its arguments (and of the user's run, :meth:`OrinTwin.set_run`). The live simulated board (its
current mode, what is running, the power settling after a change and seeded noise on its readings) is
:class:`~lightning_edge.devices.sim.live.LiveTwin`, which asks this model.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_edge import catalog
from lightning_edge._compat import data_dir
from lightning_edge._jsonfile import kind_of, one_line, read_json
from lightning_edge.catalog.storekey import StoreKey
from lightning_edge.modes import PowerMode, PowerModeSpace
from lightning_edge.roofline.model import Roofline
from lightning_edge.twin.physics import Physics
from lightning_edge.twin.workload import (
    FULCRUM_OPTIMIZER,
    OptimizerRun,
    WorkloadProfile,
    count_param_tensors,
    is_cost,
    optimizer_run,
    precision_of,
)
from lightning_edge.twin.workload_model import HostCPU, LayerTimes, Prediction, TwinWorkload, as_knobs

if TYPE_CHECKING:  # pragma: no cover
    from lightning_edge.twin.board_files import BoardFile

__all__ = ["OrinTwin", "Prediction", "LayerTimes", "TwinWorkload", "TWIN_PROFILE", "load_twin_params", "UserRun"]

TWIN_PROFILE = "orin-agx-twin"
"""Name of the shipped twin profile (``lightning_edge/data/orin-agx-twin.json``)."""

LABEL = "simulated"


def load_twin_params(path: str | Path | None = None) -> tuple[dict[str, float], dict[str, Any]]:
    """The fitted coefficients (``fit.params``) and the whole profile dict of the twin's JSON file (the shipped one
    when ``path`` is None). ``FileNotFoundError`` when there is no such file; ``ValueError``, one line naming the file,
    for one that is not a twin profile."""
    where = f"twin profile {str(path) if path is not None else TWIN_PROFILE!r}"
    regen = "regenerate it with `python -m lightning_edge.twin.calibrate`"
    file = data_dir() / f"{TWIN_PROFILE}.json" if path is None else Path(path)
    data = read_json(file, lambda why: ValueError(f"{where}: the file {why}; {regen}"), expect=dict)
    fit = data.get("fit")
    params = fit.get("params") if isinstance(fit, dict) else None
    if not isinstance(params, dict):
        raise ValueError(f"{where} has no fit.params section: {regen}")
    bad = next((k for k, v in params.items() if isinstance(v, bool) or not isinstance(v, (int, float))), None)
    if bad is not None:
        raise ValueError(f"{where}: fit.params.{one_line(str(bad), 40)}: expected a number, got "
                         f"{kind_of(params[bad])}; {regen}")
    return {k: float(v) for k, v in params.items()}, data


#: The version of the twin's workload model (how a workload becomes kernels, and their times and powers): part of a
#: simulated board's key in a profile store (:attr:`OrinTwin.store_key`), so profiles an older model simulated are
#: not taken for this one's. Bump it whenever a change moves simulated steps.
MODEL_VERSION = "27.2"


@dataclass(frozen=True)
class UserRun:
    """What the user's own run on this machine says about its workload's minibatches, for every caller that models
    that workload on this twin (the profiler sets it, the tuner's steps read it: :meth:`OrinTwin.set_run`).

    ``host``: the CPU work outside the layers measured on this machine (:class:`~lightning_edge.twin.workload_model.
    HostCPU`); ``optimizer_steps``: optimizer steps per minibatch (``1 / accumulate_grad_batches``; what a manual
    optimisation steps per batch as a share of the parameters); ``how``: how that share was found; ``optimizer``:
    the optimizer the run steps (an :class:`~lightning_edge.twin.workload.OptimizerRun`; None: unknown, Fulcrum's
    is modelled)."""

    host: HostCPU | None = None
    optimizer_steps: float = 1.0
    how: str = ""
    optimizer: OptimizerRun | None = None


class OrinTwin:
    """The simulated Jetson AGX Orin (32 GB, JetPack 5): see the module docstring.

    - ``params``: override fitted coefficients (names in ``physics.PARAM_DOCS``);
    - ``settling``/``settle_tau_s``: the power settling curve (:meth:`settling_w`): after a mode change or a
      workload start/stop the power moves to the new level exponentially (tau 0.8 s: within 5 % after 2.4 s);
      ``settling=False``: at once;
    - ``tf32_matmul``: run FP32 matmuls on TF32 tensor cores (PyTorch's ``allow_tf32=True``); the default
      is CUDA cores, PyTorch's default since 1.12 and what the papers' PyTorch 1.12 did;
    - ``board``: a :class:`~lightning_edge.twin.board_files.BoardFile` (a catalogued module's, or one read from a file):
      its coefficients (``params`` still override them), its grid, and its label: a twin of an ``extrapolated``
      board labels everything it computes ``extrapolated`` (``label``), every other twin ``simulated``.
    """

    name = "sim:orin-agx"
    label = LABEL

    def __init__(
        self,
        params: dict[str, float] | None = None,
        *,
        profile_path: str | Path | None | bool = None,
        space: PowerModeSpace | None = None,
        settling: bool = True,
        settle_tau_s: float = 0.8,
        tf32_matmul: bool = False,
        board: BoardFile | None = None,
    ) -> None:
        self.board = board
        if board is not None:
            fitted, self.profile = dict(board.full_params), board.to_dict()
            self.label = "extrapolated" if board.extrapolated else LABEL
            self.name = f"sim:{board.path}" if board.path else f"sim:{board.key}"
            space = space or board.space()
        elif profile_path is False:  # calibration: start from the defaults, no file
            from lightning_edge.twin.physics import DEFAULT_PARAMS

            fitted, self.profile = dict(DEFAULT_PARAMS), {}
        else:
            fitted, self.profile = load_twin_params(profile_path)
        if params:
            fitted.update(params)
        self.physics = Physics(fitted)
        self.space = space or catalog.orin_agx_space()
        self.settling = bool(settling)
        self.settle_tau_s = float(settle_tau_s)
        self.tf32_matmul = bool(tf32_matmul)
        self._cost_cache: dict[tuple, Any] = {}
        self._profile_cache: dict[tuple, tuple[Any, TwinWorkload]] = {}  # workload()'s memo: key -> (source, model)
        self.runs: dict[str, UserRun] = {}  # kind -> the user's run (set_run): a captured cost's defaults

    # ================================================================== roofline
    def roofline(self, modes: Any = None, precision: str = "fp32") -> Roofline:
        """The roofline of one mode, a list of modes, an (M, 4) array or a space (default: every mode).

        ``precision``: ``fp32`` (TF32 tensor cores, Pagoda's roofline), ``fp16`` or ``fp32_cuda``
        (CUDA cores, tensor cores off). Coefficients are arrays over the modes (scalars for one mode);
        ``source``: the twin's :attr:`label` (``simulated``; ``extrapolated`` on an extrapolated board).
        """
        knobs, single = as_knobs(modes, self.space)
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
                            label=str(m), source=self.label)
        return Roofline(peak, bw, eflop, emop, static, source=self.label)

    def static_power(self, modes: Any = None) -> np.ndarray:
        """pi_0 (W) of one or more modes: the board idle at that mode."""
        knobs, single = as_knobs(modes, self.space)
        static = self.physics.static_power(*knobs.T)
        return static.reshape(()) if single else static

    @property
    def store_key(self) -> StoreKey:
        """This twin's key in a profile store: ``sim:<module>+<digest>``, the digest of :data:`MODEL_VERSION`, its
        coefficients and its matmul setting. The one home of a simulated board's key (the Board's, the tuner's and
        the twin workloads'): profiles simulated by another model of the board (an older version, a calibrated or
        what-if board file) are never mixed with this one's, nor with a real board's (``orin-agx``)."""
        blob = json.dumps([MODEL_VERSION, bool(self.tf32_matmul), sorted(self.physics.p.items())])
        digest = hashlib.sha256(blob.encode()).hexdigest()[:8]
        return StoreKey(self.space.name or "orin-agx", simulated=True, digest=digest)

    # ================================================================== workloads
    def workload(
        self,
        source: Any,
        batch_size: int | None = None,
        kind: str | None = None,
        *,
        precision: str | None = None,
        param_tensors: int | None = None,
        dataloader: bool | str | None = None,
        seq_len: int | None = None,
        inputs: Any = None,
        host: HostCPU | None | bool = None,
        optimizer_steps: float | None = None,
        optimizer: Any = None,
    ) -> TwinWorkload:
        """The one model of a workload on this twin (:class:`~lightning_edge.twin.workload_model.TwinWorkload`),
        memoised per source and arguments, so callers that ask for the same workload share one object.

        ``source``: a :class:`~lightning_edge.cost.ModelCost` (``kind`` default from it), a compiled
        ``WorkloadProfile``, a zoo model name or an ``nn.Module`` with ``inputs`` (one minibatch of its forward
        inputs; analysed once per batch size and kind by :meth:`workload_cost`, ``kind`` default ``"infer"``, its
        parameter tensors counted). ``precision`` default: each kernel's own (from the cost); for a name or module
        ``"fp32"`` (``"fp16"`` analyses it in half precision).

        The CPU outside the layers: a zoo *name* stands for the papers' workload, so its training minibatches default
        to their image-decoding data loader (``dataloader="decode"``); a cost or a module defaults to none, and to the
        user's run on this twin (:meth:`set_run`: the CPU time outside the layers the profiler measured, the optimizer
        steps per batch, the optimizer) unless ``host`` / ``optimizer_steps`` / ``optimizer`` (an
        :class:`~lightning_edge.twin.workload.OptimizerRun`) say otherwise (``host=False``: none)."""
        if kind not in (None, "train", "infer"):
            raise ValueError(f"kind must be 'train' or 'infer', got {kind!r}")
        named = isinstance(source, str)
        if isinstance(source, WorkloadProfile) or is_cost(source):
            cost = source
        else:
            kind = kind or "infer"
            batch_size = int(batch_size or 1)
            precision = precision or "fp32"
            cost, n_tensors = self.workload_cost(source, batch_size, kind, seq_len, precision, inputs)
            if param_tensors is None:
                param_tensors = n_tensors
        # the same workload asked in other words (defaults spelled out) is the same object
        if kind is None:
            kind = cost.kind if isinstance(cost, WorkloadProfile) else (
                "train" if getattr(cost, "training", False) else "infer")
        own = precision_of(cost)
        precision = None if precision in (None, own) else precision
        if dataloader is None:
            dataloader = "decode" if named and kind == "train" else False
        dataloader = "decode" if dataloader is True else (dataloader or False)
        run = None if named else self.runs.get(kind)
        if host is False:  # explicitly none, whatever the user's run says
            host = None
        elif host is None and run is not None:
            host = run.host
        if optimizer_steps is None:  # a compiled profile keeps its own
            optimizer_steps = cost.optimizer_steps if isinstance(cost, WorkloadProfile) else (
                run.optimizer_steps if run is not None else 1.0)
        if optimizer is None and not isinstance(cost, WorkloadProfile):
            optimizer = run.optimizer if run is not None else None
        key = ("workload", id(cost), None if batch_size is None else int(batch_size), kind, precision,
               param_tensors, dataloader, host, float(optimizer_steps), optimizer)
        hit = self._profile_cache.get(key)
        if hit is not None and hit[0] is cost:  # the cost is kept alive with it: ids cannot be reused
            return hit[1]
        if isinstance(cost, WorkloadProfile) and float(optimizer_steps) != cost.optimizer_steps:
            raise ValueError("a compiled profile keeps its optimizer steps: compile the cost with optimizer_steps=")
        extra = {} if isinstance(cost, WorkloadProfile) else {"optimizer_steps": float(optimizer_steps),
                                                              "optimizer": optimizer}
        wl = TwinWorkload(cost, self, batch_size=batch_size, kind=kind, precision=precision,
                          param_tensors=param_tensors, dataloader=dataloader, host=host, **extra)
        self._profile_cache[key] = (cost, wl)
        return wl

    def set_run(self, kind: str, *, host: HostCPU | None = None, optimizer_steps: float = 1.0,
                how: str = "", optimizer: OptimizerRun | None = None) -> UserRun:
        """Say what the user's own run measured about its ``kind`` (``"train"``/``"infer"``) minibatches: every
        later :meth:`workload` of a cost or module of that kind on this twin (the profiler's table, the tuner's steps
        on the same board) takes ``host``, ``optimizer_steps`` and ``optimizer`` unless told otherwise (a zoo name never: it is the
        papers' workload). Returns the :class:`UserRun`."""
        if kind not in ("train", "infer"):
            raise ValueError(f"kind must be 'train' or 'infer', got {kind!r}")
        run = UserRun(host, float(optimizer_steps), how, optimizer)
        self.runs[kind] = run
        return run

    def compile(self, cost: Any, *, kind: str | None = None, batch_size: int | None = None,
                param_tensors: int | None = None) -> WorkloadProfile:
        """ModelCost -> WorkloadProfile: the rows of :meth:`workload`'s model of it."""
        if isinstance(cost, WorkloadProfile):
            return cost
        return self.workload(cost, batch_size, kind, param_tensors=param_tensors).profile

    def predict(
        self,
        cost: Any,
        modes: Any = None,
        batch_size: int | None = None,
        kind: str | None = None,
        dataloader: bool | None = None,
        *,
        precision: str | None = None,
        param_tensors: int | None = None,
        optimizer: Any = None,
        detail: bool = False,
    ) -> Prediction:
        """``workload(cost, ...).step(modes)``: minibatch time and average power of ``cost`` (a ModelCost or
        WorkloadProfile) on ``modes`` (``None``: all 18,096; a PowerMode or label, a list, an (M, 4) array or a
        PowerModeSpace). ``kind``: ``"train"`` or ``"infer"`` (default: from the cost). ``dataloader``: ``"decode"``
        (or True) adds Fulcrum's image-decoding data loader (4 workers) to the minibatch time and CPU power; default
        off for a cost (:meth:`workload` says where its CPU work outside the layers comes from). ``optimizer`` (a
        training step): the optimizer it steps: a torch optimizer, a name (``"adamw"``, ``"sgd"``,
        ``"sgd-momentum"``, ``"fulcrum"``) or an :class:`~lightning_edge.twin.workload.OptimizerRun`
        (:func:`~lightning_edge.twin.workload.optimizer_run`); not given, the run's on this twin (:meth:`set_run`),
        else the papers' (PyTorch 1.12's SGD loop), and ``Prediction.notes`` (and a warning) say so. ``detail=True``
        with one mode adds the per-layer table (``Prediction.layers``, :meth:`TwinWorkload.layers`)."""
        opt = None if optimizer is None else optimizer_run(optimizer)
        wl = self.workload(cost, batch_size, kind, precision=precision, param_tensors=param_tensors,
                           dataloader=dataloader, optimizer=opt)
        pred = self._detailed(wl, modes, detail)
        if wl.kind == "train":
            used = wl.profile.optimizer or FULCRUM_OPTIMIZER
            if opt is not None:
                pred.notes.append(f"optimizer: {used.describe()} (given)")
            elif wl.profile.optimizer is not None:
                pred.notes.append(f"optimizer: {used.describe()} (the run's on this twin, OrinTwin.set_run)")
            else:
                text = (f"optimizer not given: {used.describe()} assumed (a kernel per op per parameter tensor; "
                        "PyTorch 2.x's multi-tensor optimizers launch far fewer): pass predict(..., optimizer=) (a "
                        "torch optimizer, 'adamw', 'sgd', ...)")
                pred.notes.append(text)
                warnings.warn(f"OrinTwin.predict: {text}", UserWarning, stacklevel=2)
        return pred

    @staticmethod
    def _detailed(wl: TwinWorkload, modes: Any, detail: bool) -> Prediction:
        if not detail:
            return wl.step(modes)
        knobs, _ = as_knobs(modes, wl.twin.space)
        if knobs.shape[0] != 1:
            raise ValueError("detail=True needs exactly one mode; use layer_times(cost, mode)")
        lt = wl.layers(modes)
        assert lt.step is not None
        lt.step.layers = lt
        return lt.step

    def layer_times(self, cost: Any, mode: Any, *, kind: str | None = None, batch_size: int | None = None,
                    precision: str | None = None, dataloader: bool | None = None,
                    param_tensors: int | None = None) -> LayerTimes:
        """``workload(cost, ...).layers(mode)``: the per-layer table of one minibatch on one mode; its rows sum to
        the step."""
        return self.workload(cost, batch_size, kind, precision=precision, param_tensors=param_tensors,
                             dataloader=dataloader).layers(mode)

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
                n_tensors = count_param_tensors(model)
                self._cost_cache[key] = cost
                self._cost_cache[key + ("tensors",)] = n_tensors
            return cost, self._cost_cache.get(key + ("tensors",))
        if is_cost(name_or_model):  # a ModelCost already
            return name_or_model, None
        if inputs is None:
            raise ValueError("predict_workload(model, ...) with an nn.Module needs inputs=(example inputs,); "
                             "or pass a zoo model name such as 'resnet18'")
        # a captured Call (cost.capture.Call) carries keyword inputs too; a tuple is positional only
        args, kwargs = (inputs.args, inputs.kwargs) if hasattr(inputs, "kwargs") else (tuple(inputs), {})
        from lightning_edge.cost.capture import tensors_of

        shapes = tuple((tuple(x.shape), str(x.dtype)) for x in tensors_of((args, kwargs))) + tuple(sorted(kwargs))
        key = (id(name_or_model), shapes, int(batch_size), kind, seq_len, dtype)
        cost = self._cost_cache.get(key)
        if cost is None:
            from lightning_edge.cost import analyze

            cost = analyze(name_or_model, *args, training=training, dtype=dtype, **kwargs)
            self._cost_cache[key] = cost
        n_tensors = count_param_tensors(name_or_model)
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
        """``workload(name_or_model, ...).step(modes)`` for a zoo model name (or an nn.Module with ``inputs``): runs
        ``analyze`` once per (model, batch size, kind, seq_len, precision) and caches it. ``seq_len`` goes to text
        models (BERT default 128, LSTM default 35; the papers' LSTM inference is one token: ``seq_len=1``)."""
        if kind not in ("train", "infer"):
            raise ValueError(f"kind must be 'train' or 'infer', got {kind!r}")
        wl = self.workload(name_or_model, batch_size, kind, precision=precision, dataloader=dataloader,
                           seq_len=seq_len, inputs=inputs)
        return self._detailed(wl, modes, detail)

    # ================================================================== the power settling curve
    def settling_w(self, from_w: float, target_w: float, t0_s: float, t1_s: float | None = None) -> float:
        """The power settling curve after a change from ``from_w`` towards ``target_w`` (noise-free, W): its value
        ``t0_s`` seconds after the change, or with ``t1_s`` its exact mean over ``[t0_s, t1_s]``. Exponential with
        time constant ``settle_tau_s`` (within 5 % after 3 tau = 2.4 s); the target at once with ``settling=False``.
        A pure function of its arguments, the one home of the curve: the live simulated board
        (:meth:`LiveTwin.power_now <lightning_edge.devices.sim.live.LiveTwin.power_now>`) and the tuner's simulated
        steps (:class:`~lightning_edge.devices.meter.TwinMeter`) both read it."""
        tau = self.settle_tau_s
        if not self.settling or tau <= 0:
            return float(target_w)
        a = max(float(t0_s), 0.0)
        if t1_s is None or t1_s <= a:
            return target_w + (from_w - target_w) * math.exp(-a / tau)
        b = float(t1_s)
        return target_w + (from_w - target_w) * tau * (math.exp(-a / tau) - math.exp(-b / tau)) / (b - a)

    def __repr__(self) -> str:
        return f"OrinTwin({self.space!r}, {self.label})"
