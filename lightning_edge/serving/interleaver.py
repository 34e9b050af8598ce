"""``Interleaver``: serve latency-bound inference requests during ``trainer.fit`` by managed interleaving
(Fulcrum sections 3-4, Fig. 4), as a Lightning callback.

::

    import lightning.pytorch as L
    from lightning_edge.serving.pytorch import Interleaver          # pytorch_lightning: lightning_edge.serving.pl
    from lightning_edge.tuning import ConcurrentProblem

    problem = ConcurrentProblem(power_budget_w=25, latency_budget_s=0.1, arrival_rps=60)
    il = Interleaver(problem, device="sim:orin-agx", infer_model=detector)   # default: the model being trained
    L.Trainer(max_steps=200, callbacks=[il]).fit(model, loader)
    print(il.report.describe())    # per-request latency percentiles, misses, training throughput, power, energy

At the first training batch the callback tunes the power mode, the inference minibatch size ``bs`` and ``tau``
(training minibatches per inference minibatch) for the :class:`~lightning_edge.tuning.ConcurrentProblem` with GMD
(``tuner="gmd"``, 15 profiles at most), ALS (``"als"``), the oracle (``"exhaustive"``), a ``ProfileTable`` or a
given ``solution=``; applies the mode; then before every training step serves the inference minibatches the
schedule calls for (:class:`~lightning_edge.serving.interleaving_engine.InterleavingEngine`): the model runs in eval mode
under ``torch.no_grad()`` on real request tensors, then goes back to training mode.

On the twin (``device="sim:orin-agx"``): training steps really run on this CPU, but the schedule's clock is
simulated: each training step takes the twin's time for that model and batch at the mode (with its noise),
requests arrive in simulated time, and every latency, throughput, power and energy is labelled ``simulated``. On
real hardware the same schedule runs on the wall clock (``solution=`` or ``workload=`` required to tune).

Two concurrent inferences (section 5.4, 7.5): ``trainer.predict(model, loader)`` with this callback runs the
*non-urgent* throughput inference (the predict loop's minibatches) interleaved with the *urgent* requests the same
way: the problem's throughput is then non-urgent minibatches/s, maximised within the urgent deadline and the power
budget (``InterleavingEngine`` does the same without Lightning).

TensorBoard (the Trainer's ``TensorBoardLogger``): ``serving/latency_p50_ms``, ``.../p95``, ``.../p99``,
``.../max``, ``serving/within_budget``, ``serving/background_per_s``, ``serving/power_w`` at every epoch end and at
the end, and a text summary ``serving/summary``.

``lightning.pytorch`` and ``pytorch_lightning`` are separate hierarchies; the behaviour is this mixin and the
callbacks are ``lightning_edge.serving.pytorch.Interleaver`` and ``lightning_edge.serving.pl.Interleaver``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Union

from lightning_edge.cost.capture import tensors_of
from lightning_edge.devices.board import get_board
from lightning_edge.serving.arrivals import ArrivalProcess, ConstantArrivals
from lightning_edge.serving.engine import (
    ConcurrentWorkload,
    ModelRunner,
    NonUrgentInference,
    Plan,
    RequestInputs,
)
from lightning_edge.serving.interleaving_engine import InterleavingEngine, InterleavingReport
from lightning_edge.serving.tune import Retuner, tuner_name
from lightning_edge.tuning.problems import ConcurrentProblem, Solution

if TYPE_CHECKING:
    import lightning.pytorch as L
    import pytorch_lightning as pl
    import torch
    from torch import nn

    from lightning_edge.cost.model_cost import ModelCost
    from lightning_edge.cost.shared import CapturedStep, FirstStep
    from lightning_edge.devices.board import Board
    from lightning_edge.devices.meter import StepMeter
    from lightning_edge.modes import PowerModeSpace
    from lightning_edge.tuning.problems import Workload
    from lightning_edge.tuning.search import Strategy
    from lightning_edge.tuning.store import StoreSpec
    from lightning_edge.tuning.table import ProfileTable

    # the mixin serves both Lightning packages' Trainers (lightning.pytorch and pytorch_lightning)
    Trainer = Union[L.Trainer, pl.Trainer]
    LightningModule = Union[L.LightningModule, pl.LightningModule]

__all__ = ["InterleaverMixin"]


def _first_tensor(batch: Any) -> Any:
    """The batch's input: its first tensor, depth first, dict entries in the order they were written."""
    found = tensors_of(batch)
    if found:
        return found[0]
    raise TypeError(f"Interleaver: cannot find the input tensor in a batch of type {type(batch).__name__}; pass "
                    "request_inputs= and a twin workload, or a solution=")


def _keyword_inputs(batch: Mapping[str, Any]) -> dict:
    """the tensors of a dict batch (``model(**batch)``), on the CPU."""
    import torch

    return {k: v.detach().cpu() for k, v in batch.items() if isinstance(v, torch.Tensor)}


def _as_called(batch: Mapping, step: CapturedStep | None, model: nn.Module, infer_model: nn.Module) -> Any:
    """A dict batch's tensors as the inference model was called with them in the captured training step: the
    tensor its one positional argument was (matched by shape: ``self(batch["pixel_values"])``), or the keywords it
    took; None when the step holds no such call (then the batch is taken as keywords, ``model(**batch)``)."""
    import torch

    if step is None or not step.captured.calls:
        return None
    # its own call when the step made it outermost; else the model's (a submodule given as infer_model= runs
    # inside the step's forward, on what the forward was given: forward(x) -> self.net(x))
    name = next((n for n, m in model.named_modules() if m is infer_model), None)
    calls = step.captured.calls
    call = next((c for c in calls if c.module == name), None) or next((c for c in calls if c.module == ""), calls[0])
    tensors = {k: v for k, v in batch.items() if isinstance(v, torch.Tensor)}
    if call.kwargs:
        got = {k: tensors[k].detach().cpu() for k in call.kwargs if k in tensors}
        return got or None
    args = [a for a in call.args if isinstance(a, torch.Tensor)]
    if len(args) == 1 and len(call.args) == 1:
        same = [v for v in tensors.values() if tuple(v.shape) == tuple(args[0].shape) and v.dtype == args[0].dtype]
        if len(same) == 1:
            return same[0].detach().cpu()
    return None


class InterleaverMixin:
    """The callback's behaviour, independent of the Lightning package (see the module docstring).

    Args:
        problem: a :class:`~lightning_edge.tuning.ConcurrentProblem` (power budget, latency budget, arrival rate,
            candidate batch sizes). Optional when ``solution`` carries one.
        solution: a concurrent ``Solution`` or a :class:`~lightning_edge.serving.engine.Plan`: skip tuning.
        tuner: ``"gmd"`` (default), ``"als"``, ``"exhaustive"`` or any other name
            :func:`~lightning_edge.serving.tune.tuner_names` lists, a ``ProfileTable`` or a tuning ``Strategy``.
        device: ``"sim:orin-agx"`` (default), a ``SimulatedOrin``, ``"cpu"``, ``"jetson"`` or a device object.
        arrivals: the urgent requests' arrival process (default: constant at ``problem.arrival_rps``).
        infer_model: the model serving requests (default: the LightningModule being trained/predicted).
        request_inputs: a tensor of request samples (first dimension = samples); default: the samples of the first
            batch (real data from the loader).
        workload: what the tuner profiles (default on the twin: the pair of twin workloads built from the first
            batch); space: modes to tune over (default: Fulcrum's 441 on the twin); store: profile store (memory).
        safety: relative margin on the expected minibatch times in the deadline checks.
        restore: restore the power mode at the end (default True).
        print_summary: print the report at the end of the run.
    """

    def __init__(self, problem: ConcurrentProblem | None = None, *, solution: Solution | Plan | None = None,
                 tuner: str | ProfileTable | Strategy = "gmd", device: Any = "sim:orin-agx",
                 arrivals: ArrivalProcess | None = None, infer_model: nn.Module | None = None,
                 request_inputs: RequestInputs | torch.Tensor | Mapping[str, torch.Tensor] | None = None,
                 workload: Workload | None = None, space: PowerModeSpace | None = None, store: StoreSpec = None,
                 safety: float = 0.05, restore: bool = True, print_summary: bool = False, seed: int | None = 0) -> None:
        super().__init__()
        if solution is not None and problem is None:
            source = solution.solution if isinstance(solution, Plan) else solution
            problem = source.problem if isinstance(source, Solution) else None
        if not isinstance(problem, ConcurrentProblem):
            raise TypeError("Interleaver needs a ConcurrentProblem (or a concurrent solution=), got "
                            f"{type(problem).__name__}")
        self.problem = problem
        self.solution = solution
        self.tuner = tuner_name(tuner) if isinstance(tuner, str) else tuner  # a misspelt name fails here
        self.device_arg = device
        self.arrivals = arrivals if arrivals is not None else ConstantArrivals(problem.arrival_rps)
        if not isinstance(self.arrivals, ArrivalProcess):
            raise TypeError(f"arrivals: expected an ArrivalProcess, got {type(self.arrivals).__name__}")
        self.infer_model = infer_model
        self.request_inputs = request_inputs
        self.workload = workload
        self.space = space
        self.store = store
        self.safety = float(safety)
        self.restore = bool(restore)
        self.print_summary = bool(print_summary)
        self.seed = seed
        self.device: Board | None = None
        self.engine: InterleavingEngine | None = None
        self.plan: Plan | None = None
        self.report: InterleavingReport | None = None
        self.new_profiles = 0
        self._meter: StepMeter | None = None
        self._writer: Any = None
        self._stage: str | None = None
        self._capture: FirstStep | None = None  # the model's shared capture while it captures the first training step
        self._train_step: CapturedStep | None = None  # the captured training step (CapturedStep): its cost and how it called
        self._train_cost: ModelCost | None = None

    # ------------------------------------------------------------------------------------------ setup
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        from lightning_edge.cost.capture import has_forward

        if self.infer_model is None and not has_forward(pl_module):  # said before training starts
            raise TypeError(f"Interleaver: {type(pl_module).__name__} has no forward, so it cannot serve requests: "
                            "pass infer_model= (the module that serves them, e.g. Interleaver(..., "
                            "infer_model=model.net))")
        if self.device is None:
            self.device = get_board("cpu" if self.device_arg is None else self.device_arg, control="write", seed=self.seed)
        if self.store is not None:  # a store that cannot be used fails here, in one line, before the run
            from lightning_edge.tuning.search import open_backend

            self.store = open_backend(self.store)

    def _build(self, trainer: Trainer, pl_module: LightningModule, batch: Any, stage: str) -> None:
        dev = self.device or get_board("cpu" if self.device_arg is None else self.device_arg, control="write", seed=self.seed)
        self.device = dev
        infer_model = self.infer_model if self.infer_model is not None else pl_module
        # requests are the inference model's inputs as the training step called it (the shared capture: a dict
        # batch unpacked by the step, self(batch["pixel_values"])); without such a call, a dict batch is taken as
        # keywords (model(**batch)) and any other batch by its first tensor
        keyword = isinstance(batch, Mapping)
        called = _as_called(batch, self._train_step, pl_module, infer_model) if keyword else None
        x = (called if called is not None else _keyword_inputs(batch) if keyword
             else _first_tensor(batch).detach().cpu()) if self.request_inputs is None or dev.simulated else None
        pool = x if self.request_inputs is None else self.request_inputs
        inputs = pool if isinstance(pool, RequestInputs) else RequestInputs(pool)
        bg_wl = in_wl = None
        if dev.simulated:
            from lightning_edge.twin.sim_workload import SimWorkload
            from lightning_edge.twin.workload import count_param_tensors

            twin = dev.twin
            example = x if isinstance(x, Mapping) else (x,)  # x: this batch's inputs (always read on the twin)
            bs = RequestInputs(x).n
            if stage == "fit" and self._train_cost is not None:  # the training step as it ran (shared capture)
                bg_wl = SimWorkload(self._train_cost, twin, train_batch_size=bs, seed=self.seed,
                                    param_tensors=count_param_tensors(pl_module))
            elif stage == "fit":
                bg_wl = SimWorkload(pl_module, twin, example_inputs=example, train_batch_size=bs, seed=self.seed)
            else:
                bg_wl = NonUrgentInference(SimWorkload(pl_module, twin, example_inputs=example, seed=self.seed), bs)
            head = inputs.head(1)
            in_wl = SimWorkload(infer_model, twin, example_inputs=head if inputs.keyword else (head,),
                                seed=None if self.seed is None else self.seed + 1)
        if self.solution is not None:
            plan = self.solution if isinstance(self.solution, Plan) else Plan.from_solution(self.solution)
        else:
            workload = self.workload
            if dev.simulated and workload is None:
                workload = ConcurrentWorkload(bg_wl, in_wl)
            if workload is None:
                raise ValueError(f"Interleaver on {dev.name}: pass solution= (a concurrent Solution or Plan) or "
                                 "workload= (something that measures both models at a mode) to tune")
            space = self.space
            if space is None:
                space = dev.tuning_space
            sol, self.new_profiles = Retuner(self.tuner, space, workload, store=self.store, seed=self.seed).solve(
                self.problem)
            if sol is None:
                raise RuntimeError(f"Interleaver: no feasible mode / batch size for {self.problem.describe()} "
                                   f"(tuner {self.tuner!r}); relax a budget or lower the arrival rate")
            plan = Plan.from_solution(sol)
        if plan.mode is None and dev.simulated and dev.controller is not None:
            plan = dataclasses.replace(plan, mode=dev.controller.current())  # "the current mode" is a mode on the twin
        self.plan = plan
        runner = ModelRunner(infer_model, inputs)
        if self._meter is not None:  # a second run (fit, then predict): the last one's sampler stops
            self._meter.close()
        # serving does not model the power's settling after the mode is applied (the tuner's windows do)
        self._meter = dev.meter(seed=None if self.seed is None else self.seed + 101, settling=False, wait=False,
                                **({"train": bg_wl, "infer": in_wl} if dev.simulated else {}))
        self._meter.open()
        self.engine = InterleavingEngine(plan, self.arrivals, self.problem.latency_budget_s, meter=self._meter,
                                         runner=runner, controller=dev.controller, restore=self.restore,
                                         safety=self.safety).start()
        self._stage = stage

    # ------------------------------------------------------------------------------------------ hooks
    def _before(self, trainer: Trainer, pl_module: LightningModule, batch: Any, stage: str) -> None:
        if self.engine is None or self.engine.finished is not None:
            dev = self.device or get_board("cpu" if self.device_arg is None else self.device_arg, control="write", seed=self.seed)
            if (stage == "fit" and dev.simulated and self._train_cost is None and self.solution is None
                    and self.workload is None):
                # the twin's training workload is the training step as it ran, from the model's shared capture (one
                # capture and one analysis for every callback of the Trainer): a step it already holds is used at
                # once, else this step is captured and interleaving starts at the next one
                from lightning_edge.cost.shared import FirstStep

                first = FirstStep(pl_module)
                known = first.begin()
                if known is None:
                    self._capture = first
                    return
                self._train_step = known
                self._train_cost = known.cost()
            self.engine = None
            self.report = None
            self._build(trainer, pl_module, batch, stage)
        self.engine.before_background()  # type: ignore[union-attr]

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        self._before(trainer, pl_module, batch, "fit")

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self._capture is not None:  # the capture step: its cost (analysed once, by whoever asks first)
            from lightning_edge.cost.capture import CaptureError

            home, self._capture = self._capture, None
            step = home.end()
            if step is None:
                raise CaptureError(f"Interleaver: no call of {type(pl_module).__name__}'s modules was captured in the "
                                   "first training step: the twin needs the training step's cost (pass workload= or "
                                   "solution=)")
            self._train_step = step
            self._train_cost = step.cost()
            return
        if self.engine is not None and self.engine._bg_start is not None:
            self.engine.after_background()

    def on_predict_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int,
                               dataloader_idx: int = 0) -> None:
        self._before(trainer, pl_module, batch, "predict")

    def on_predict_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                             batch_idx: int, dataloader_idx: int = 0) -> None:
        if self.engine is not None and self.engine._bg_start is not None:
            self.engine.after_background()

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.engine is not None and self.engine.finished is None:
            self._log(trainer, self.engine.report(), int(trainer.global_step))

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._finish(trainer)

    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._finish(trainer)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if self._capture is not None:
            self._capture.abort()
            self._capture = None
        self._finish(trainer, log=False)

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._meter is not None:
            self._meter.close()
            self._meter = None
        if self.device is not None and self.engine is not None and self.engine.finished is not None:
            self.device.close()

    # ------------------------------------------------------------------------------------------ results
    def _finish(self, trainer: Trainer, log: bool = True) -> None:
        if self.engine is None or self.engine.finished is not None:
            return
        self.report = self.engine.finish()
        if log:
            self._log(trainer, self.report, int(trainer.global_step), text=True)
        if self.print_summary:
            print(self.report.describe())

    def _tb(self, trainer: Trainer) -> Any:
        if self._writer is not None:
            return self._writer
        for lg in trainer.loggers:
            exp = getattr(lg, "experiment", None)
            if exp is not None and hasattr(exp, "add_scalar"):
                self._writer = exp
                return exp
        return None

    def _log(self, trainer: Trainer, rep: InterleavingReport, step: int, text: bool = False) -> None:
        if trainer.global_rank != 0:
            return
        w = self._tb(trainer)
        if w is None:
            return
        lat = rep.latency
        vals = {"serving/latency_p50_ms": lat.p50_s * 1e3, "serving/latency_p95_ms": lat.p95_s * 1e3,
                "serving/latency_p99_ms": lat.p99_s * 1e3, "serving/latency_max_ms": lat.max_s * 1e3,
                "serving/within_budget": lat.within_budget, "serving/background_per_s": rep.background_throughput,
                "serving/power_w": rep.mean_power_w}
        for tag, v in vals.items():
            if v is not None and math.isfinite(v):
                w.add_scalar(tag, float(v), step)
        if text and hasattr(w, "add_text"):
            w.add_text("serving/summary", rep.describe(), step)
        flush = getattr(w, "flush", None)
        if flush is not None:
            flush()
