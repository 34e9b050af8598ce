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
:class:`~lightning_edge.twin.timeline.TwinWorkload`; this module holds the board: its physics, its space, its
rooflines and, for the simulated power sensor, the live board. Everything it returns is labelled ``simulated``.
The twin plays a live board: it knows the current mode (its own, or a controller's), what is running
(:meth:`OrinTwin.running`: a TwinWorkload's power), and shows the 2-3 s power settling after a change plus seeded
noise.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lightning_edge import catalog
from lightning_edge._compat import data_dir
from lightning_edge._jsonfile import kind_of, one_line, read_json
from lightning_edge.catalog.storekey import StoreKey
from lightning_edge.modes import PowerMode, PowerModeSpace
from lightning_edge.roofline.model import Roofline
from lightning_edge.twin.physics import Physics
from lightning_edge.twin.timeline import HostCPU, LayerTimes, Prediction, TwinWorkload, as_knobs
from lightning_edge.twin.workload import (
    FULCRUM_OPTIMIZER,
    WorkloadProfile,
    count_param_tensors,
    is_cost,
    optimizer_run,
    precision_of,
)

__all__ = ["OrinTwin", "Prediction", "LayerTimes", "TwinWorkload", "Activity", "TWIN_PROFILE", "load_twin_params",
           "UserRun"]

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

    ``host``: the CPU work outside the layers measured on this machine (:class:`~lightning_edge.twin.timeline.
    HostCPU`); ``optimizer_steps``: optimizer steps per minibatch (``1 / accumulate_grad_batches``; what a manual
    optimisation steps per batch as a share of the parameters); ``how``: how that share was found; ``optimizer``:
    the optimizer the run steps (an :class:`~lightning_edge.twin.workload.OptimizerRun`; None: unknown, Fulcrum's
    is modelled)."""

    host: HostCPU | None = None
    optimizer_steps: float = 1.0
    how: str = ""
    optimizer: Any = None


@dataclass
class Activity:
    """What the twin is running (for the live sensor): a workload's average power and, optionally, its layers."""

    name: str
    kind: str
    batch_size: int
    workload: TwinWorkload | None = None
    power_fn: Callable[[PowerMode], float] | None = None
    layer: str | None = None

    @property
    def profile(self) -> WorkloadProfile | None:
        """The running workload's compiled rows."""
        return None if self.workload is None else self.workload.profile


class OrinTwin:
    """The simulated Jetson AGX Orin (32 GB, JetPack 5): see the module docstring.

    - ``params``: override fitted coefficients (names in ``physics.PARAM_DOCS``);
    - ``controller``: a :class:`~lightning_edge.devices.sim.controller.SimModeController` whose current
      mode the twin follows (otherwise the twin keeps its own mode: :meth:`set_mode`);
    - ``noise``/``power_noise``/``seed``: gaussian noise (relative sd) on live power readings;
    - ``settling``/``settle_tau_s``: after a mode change or a workload start/stop the live power moves to
      the new level exponentially (tau 0.8 s: within 5 % after 2.4 s);
    - ``tf32_matmul``: run FP32 matmuls on TF32 tensor cores (PyTorch's ``allow_tf32=True``); the default
      is CUDA cores, PyTorch's default since 1.12 and what the papers' PyTorch 1.12 did;
    - ``board``: a :class:`~lightning_edge.twin.boards.BoardFile` (a catalogued module's, or one read from a file):
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
        controller: Any = None,
        clock: Callable[[], float] = time.monotonic,
        noise: bool = True,
        settling: bool = True,
        seed: int | None = 0,
        power_noise: float = 0.02,
        settle_tau_s: float = 0.8,
        initial: Any = None,
        tf32_matmul: bool = False,
        board: Any = None,
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
        self.controller = controller
        self.clock = clock
        self.noise = bool(noise)
        self.settling = bool(settling)
        self.power_noise = float(power_noise)
        self.settle_tau_s = float(settle_tau_s)
        self.tf32_matmul = bool(tf32_matmul)
        self._rng = np.random.default_rng(seed)
        self._lock = threading.RLock()
        self._mode = self.space.coerce(initial) if initial is not None else (
            self.space.coerce(catalog.ORIN_AGX_MAXN) if self.space.name == "orin-agx" else self.space.max_mode())
        self._activity: Activity | None = None
        self._cost_cache: dict[tuple, Any] = {}
        self._profile_cache: dict[tuple, Any] = {}
        self.runs: dict[str, UserRun] = {}  # kind -> the user's run (set_run): a captured cost's defaults
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
        """The one model of a workload on this twin (:class:`~lightning_edge.twin.timeline.TwinWorkload`),
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
        self._profile_cache[key] = (cost, wl)  # type: ignore[assignment]
        return wl

    def set_run(self, kind: str, *, host: HostCPU | None = None, optimizer_steps: float = 1.0,
                how: str = "", optimizer: Any = None) -> UserRun:
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

    def layer_times(self, cost: Any, mode: Any = None, *, kind: str | None = None, batch_size: int | None = None,
                    precision: str | None = None, dataloader: bool | None = None,
                    param_tensors: int | None = None) -> LayerTimes:
        """``workload(cost, ...).layers(mode)``: the per-layer table of one minibatch on one mode (default: the
        current one); its rows sum to the step."""
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
        args, kwargs = (inputs.args, inputs.kwargs) if hasattr(inputs, "kwargs") else (tuple(inputs), {})  # i17cost
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
        """Tell the twin a workload starts running (``Activity``, a :class:`TwinWorkload`, a ModelCost /
        WorkloadProfile, or a zoo name): the live power follows that workload's model."""
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
        if isinstance(what, TwinWorkload):
            return Activity(what.name, what.kind, what.batch_size, what)
        if isinstance(what, str):
            bs = batch_size or (16 if kind == "train" else 1)
            return Activity(what, kind, bs, self.workload(what, bs, kind))
        wl = self.workload(what, batch_size, None if isinstance(what, WorkloadProfile) else kind)
        return Activity(wl.name, wl.kind, wl.batch_size, wl)

    def target_power(self, mode: PowerMode | None = None) -> float:
        """The settled (noise-free) power of the board now: static when idle, else the running workload's step
        (:meth:`TwinWorkload.step`), or the rows of the layer running now (:meth:`set_layer`)."""
        mode = self.current_mode() if mode is None else mode
        act = self._activity
        if act is None:
            return float(self.physics.static_power(*np.array(mode.as_tuple(), dtype=float)))
        if act.power_fn is not None:
            return float(act.power_fn(mode))
        key = ("pw", id(act.workload), act.layer, mode)
        cached = self._profile_cache.get(key)
        if cached is not None:
            return cached  # type: ignore[return-value]
        wl = act.workload
        if act.layer is not None and wl is not None and act.layer in wl.profile.names:
            lt = wl.layers(mode)
            rows = [i for i, n in enumerate(lt.names) if n == act.layer]
            g = float(sum(lt.gpu_s[i] for i in rows))
            e = float(sum(lt.energy_j[i] for i in rows))
            value = e / g if g > 0 else lt.power_w
        elif wl is not None:
            value = float(wl.step(mode).power_w)
        else:
            value = float(self.physics.static_power(*np.array(mode.as_tuple(), dtype=float)))
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
        """Settled split of the current power, W: ``static``, ``gpu`` (dynamic), ``cpu`` (dynamic), ``mem``: the
        running workload's step energy parts over its time (:data:`~lightning_edge.twin.timeline.ENERGY_PARTS`),
        so they sum to its power; idle, the mode's static power alone."""
        mode = self.current_mode()
        act = self._activity
        if act is None or act.workload is None:
            static = float(self.physics.static_power(*np.array(mode.as_tuple(), dtype=float)))
            return {"static": static, "gpu": 0.0, "cpu": 0.0, "mem": 0.0}
        key = ("parts", id(act.workload), mode)
        cached = self._profile_cache.get(key)
        if cached is not None:
            return dict(cached)  # type: ignore[call-overload]
        step = act.workload.step(mode)
        t = float(step.time_s)
        parts = {name: float(step.parts[f"{name}_j"]) / t for name in ("static", "gpu", "cpu", "mem")}
        self._profile_cache[key] = parts  # type: ignore[assignment]
        return dict(parts)

    def __repr__(self) -> str:
        return f"OrinTwin({self.space!r}, mode {self.current_mode()}, {self.label})"
