"""``PowerModeTuner``: pick the board's power mode during ``trainer.fit`` under a power budget.

::

    from lightning.pytorch import Trainer
    import lightning_edge
    trainer = Trainer(callbacks=[lightning_edge.PowerModeTuner(power_budget_w=25, strategy="gmd")])
    trainer = Trainer(callbacks=[lightning_edge.PowerModeTuner(25, device="sim:orin-agx")])   # the Orin twin

    import pytorch_lightning as pl                                  # the other Lightning package
    from lightning_edge.lightning.pl import PowerModeTuner

The behaviour lives in :class:`PowerModeTunerMixin` (no Lightning import) and in the engine,
:class:`~lightning_edge.tuning.online.OnlineTuner` (profiling windows, the strategy thread, re-tuning, restore).
This module adds the Lightning plumbing: the device, the workload key from the module and the first batch, the
model's step loop (:mod:`lightning_edge.lightning.steps`: with an ``EnergyProfiler`` in the same Trainer the tuner
switches modes before the profiler's step starts and trains its windows on the profiler's measurement of each step,
read from the board's one meter; it tags its windows so the profiler reports them apart), TensorBoard and the
Trainer's other loggers, the printed summary, checkpoint state, and restoring the board at the end, on an exception
and on an interrupt (``KeyboardInterrupt`` reaches ``on_exception``). A process killed outright leaves the
controller's state file, and the next controller of that board to start restores the original mode.

TensorBoard tags (``<label>`` is ``simulated`` on the twin, ``measured`` on a board):
``tuner/<label>/step_time_ms``, ``tuner/<label>/power_w``, ``tuner/<label>/energy_j`` (cumulative),
``tuner/power_budget_w``, ``tuner/mode/{cores,cpu_mhz,gpu_mhz,mem_mhz}`` and ``tuner/phase`` per logged step;
``tuner/<label>/profile_time_ms`` and ``tuner/<label>/profile_power_w`` per profiled mode (step = profile
index); ``tuner/<label>/epoch_time_s`` and ``tuner/<label>/epoch_energy_j`` per epoch; text ``tuner/profiles``
(every profiled mode), ``tuner/solution`` and ``tuner/summary``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lightning_edge.devices.board import Board, get_board
from lightning_edge.lightning.config import TunerConfig, configure
from lightning_edge.lightning.console import end_progress_bar
from lightning_edge.lightning.steps import TUNER, StepLoop, shared_loop
from lightning_edge.lightning.tb import TrainerWriter
from lightning_edge.tuning.online import (
    PHASES,
    THOROUGH_AFTER_STEPS,
    OnlineTuner,
    StepRecord,
    TuningProgress,
    TuningSummary,
    WindowSpec,
    module_fingerprint,
)
from lightning_edge.twin.workload import count_param_tensors

if TYPE_CHECKING:
    from lightning.pytorch import LightningModule, Trainer
    from lightning.pytorch.utilities.types import STEP_OUTPUT

    from lightning_edge.cost.model_cost import ModelCost
    from lightning_edge.cost.shared import CapturedStep, FirstStep
    from lightning_edge.tuning.problems import Solution
    from lightning_edge.twin.board_files import BoardFile
    from lightning_edge.twin.model import OrinTwin

__all__ = ["PowerModeTunerMixin", "format_summary"]


def _describe(board: Board) -> str:
    if board.simulated:
        # the board the twin plays: the papers' AGX Orin, another catalogued module, or a board file's
        twin: OrinTwin | None = board.twin
        bf: BoardFile | None = twin.board if twin is not None else None
        what = str((bf.name if bf is not None else "") or "Jetson AGX Orin")
        src = f", board file {bf.path}" if bf is not None and bf.path else ""
        return (f"{board.label}: twin of the {what}{src} (minibatch time and power are the twin's for this model on "
                "that board; the training itself ran on this machine)")
    return f"measured: {board.name}"


def _budget_w(power_budget_w: float) -> float:
    budget = float(power_budget_w)
    if not (math.isfinite(budget) and budget > 0):
        raise ValueError(f"power_budget_w must be a power in W > 0, got {power_budget_w!r}")
    return budget


def _planned_steps(trainer: Trainer) -> float | None:
    """The minibatches the Trainer plans (``None`` when it cannot say: no loader yet, an iterable of unknown length,
    no limit)."""
    try:
        n = float(trainer.estimated_stepping_batches)
    except Exception:  # noqa: BLE001 - not known
        return None
    return n if math.isfinite(n) else None


def _planned_int(trainer: Trainer) -> int | None:
    """The minibatches this fit has left to run (``None`` when the Trainer cannot say): its planned optimizer steps
    less those done (a resumed fit), times the minibatches per optimizer step (``accumulate_grad_batches``)."""
    n = _planned_steps(trainer)
    if n is None:
        return None
    try:
        done = int(getattr(trainer, "global_step", 0) or 0)
        acc = int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
    except (TypeError, ValueError):
        done, acc = 0, 1
    return max(int(n) - done, 0) * max(acc, 1)


def _planned_long(trainer: Trainer) -> bool:
    """The Trainer plans at least ``THOROUGH_AFTER_STEPS`` minibatches (False when it cannot say)."""
    n = _planned_steps(trainer)
    return n is not None and n >= THOROUGH_AFTER_STEPS


def _planned_short(trainer: Trainer) -> bool:
    """The Trainer plans fewer than ``THOROUGH_AFTER_STEPS`` minibatches (False when it cannot say)."""
    n = _planned_steps(trainer)
    return n is not None and n < THOROUGH_AFTER_STEPS


def _batch_size_of(batch: Any, cost: ModelCost) -> int:
    """The minibatch's size: the first dimension of its first tensor, else of the cost's first input, else 1."""
    from lightning_edge.cost.capture import batch_size

    return batch_size(batch) or next((int(s[0]) for s in cost.inputs if len(s)), 1)


def _precision_of(trainer: Trainer | None, given: str | None) -> str:
    if given:
        return given
    p = str((trainer.precision if trainer is not None else None) or "32")
    return "fp16" if "16" in p and "bf16" not in p else ("bf16" if "bf16" in p else "fp32")


def format_summary(s: TuningSummary, device_text: str) -> str:
    """The end-of-fit summary printed by the callback (``s`` from :meth:`OnlineTuner.summary`)."""
    lab = s.label
    lines = [f"lightning_edge PowerModeTuner ({device_text})"]
    cost = f"{s.profiling_steps} minibatches, {s.profiling_time_s:.1f} s, {s.profiling_energy_j:.0f} J {lab}"
    if s.profiles_used or s.new_profiles:
        lines.append(f"  budget {s.budget_w:g} W, strategy {s.strategy}: the search used {s.profiles_used} profiles "
                     f"(from the store or measured); {s.new_profiles} were measured in this run ({cost})")
    else:
        lines.append(f"  budget {s.budget_w:g} W, strategy {s.strategy}: no search finished in this run "
                     f"(profiling windows: {cost})")
    lines.extend(_progress_lines(s.progress))
    ob = s.over_budget
    if ob is not None:
        lines.append(f"  while tuning: {ob.describe('minibatches')}; at MAXN after tuning began: {s.maxn_steps} "
                     "minibatches (MAXN is never run for a comparison)")
    if s.mode:
        lines.append(f"  chosen mode {s.mode}: {s.time_s * 1e3:.1f} ms/minibatch, {s.power_w:.1f} W (profile, "
                     f"{s.mode_label or lab})")
        lines.append(f"  (a mode reads CORESc/CPU/GPU/MEMORY: online CPU cores, then the CPU, GPU and memory clock caps "
                     f"in MHz; {s.mode} = {_describe_mode(s.mode)})")
        if s.measured_tuned_time_s is not None:
            n = s.measured_tuned_steps
            what = f"{n} minibatches" if n else "minibatches"
            how = ("settled: the settling after the switch left out" if s.measured_tuned_settled else
                   "none settled yet: the power still moved after the switch")
            lines.append(f"  while training in it ({what}, {how}): "
                         f"{s.measured_tuned_time_s * 1e3:.1f} ms/minibatch, {s.measured_tuned_power_w:.1f} W ({lab})")
    elif s.phase == "infeasible":
        lines.append("  no profiled mode meets the budget: trained in the lowest-power mode profiled")
    if s.maxn_time_s is None and s.maxn_label and s.mode:
        lines.append(f"  vs MAXN: no comparison (MAXN's profile is {s.maxn_label}: its readings missed a rail, and a "
                     "full reading is never compared with a partial one)")
    if s.maxn_time_s is not None and s.mode:
        thr, en = s.throughput_vs_maxn, s.energy_vs_maxn
        lines.append(f"  vs MAXN ({s.maxn_time_s * 1e3:.1f} ms, {s.maxn_power_w:.1f} W: {s.maxn_source}; not run): "
                     f"throughput x{thr:.2f} ({(thr - 1) * 100:+.1f} %), energy per minibatch {(en - 1) * 100:+.1f} %")
    if s.retunes:
        lines.append(f"  re-tuned {s.retunes} time(s) (budget changes or power drift; drift scale x{s.drift_scale:.3f})")
    if s.restored:
        lines.append(f"  board restored to {s.restored}")
    return "\n".join(lines)


def _describe_mode(mode: str) -> str:
    try:
        from lightning_edge.modes import PowerMode

        return PowerMode.parse(str(mode)).describe()
    except Exception:  # noqa: BLE001 - a mode outside the notation: shown as it is
        return str(mode)


def _progress_lines(p: TuningProgress) -> list[str]:
    """Where tuning stands (from :meth:`OnlineTuner.progress`): never a bare count of zero profiles."""
    est = " (estimated from the step times)" if p.per_profile_estimated else ""
    per = (f"{p.minibatches_per_profile:.0f} minibatches per profile{est}: {p.settle_steps:.0f} while the "
           f"power settles, {p.warmup_steps:.0f} warm-up, {p.window_steps:.0f} measured")
    out = [f"  tuning: {p.profiles_done} profiles done of {p.profiles_planned} planned (at most); {per}"]
    if p.tuning_steps is not None:
        out.append(f"  tuning took {p.tuning_steps} minibatches, then training went on in the chosen mode")
    elif p.more_steps_needed:
        out.append(f"  tuning did not finish: the run would have needed about {p.more_steps_needed} more "
                   "minibatches (profiles done are kept in the store: a longer or a second run finishes it)")
    if p.stopped:
        out.append(f"  {p.stopped}")
    if p.prior:
        out.append(f"  prior: {p.prior} ({p.prior_time_s:.2f} s); nothing is chosen on a prediction, only on a profile")
    elif p.prior_note:
        out.append(f"  {p.prior_note}")
    return out


class PowerModeTunerMixin:
    """Profiles power modes on the real training minibatches, drives GMD or ALS through the profile store, trains
    on in the chosen mode; restores the board at the end (see the module docstring).

    Args:
        power_budget_w: the power budget (W): the chosen mode's profiled power stays within it.
        strategy: ``"gmd"`` (Fulcrum's GMD: at most 4 profiles from the prior, 10 without one, 14 with
            ``thorough``), ``"als"`` (at most 50), another name registered in
            :data:`~lightning_edge.tuning.search.STRATEGIES` (the baselines) or a Strategy instance.
        device: ``"auto"`` (a Jetson), ``"sim:orin-agx"`` (the twin), a ``SimulatedOrin`` (share one board with
            an ``EnergyProfiler``), ``"nvml"``, or an object with ``controller`` and ``sensor``.
        store: the profile store: ``"default"`` (SQLite in the user cache dir), an Optuna storage URL
            (``postgresql://...`` for a fleet), a ``ProfileStore``, or ``None`` (in memory, not kept).
        space: the modes to search (default: Fulcrum's 441 modes on an Orin AGX, else the controller's space).
        window: a :class:`~lightning_edge.tuning.online.WindowSpec` or a dict of its fields (settling time,
            warm-up minibatches, min/max measured minibatches, stability target).
        switch_at: ``"window"`` (modes change between profiling windows, inside epochs) or ``"epoch"``.
        baseline: compare the chosen mode with MAXN in the summary: MAXN's profile from the store, else the prior's
            prediction (labelled so). MAXN is never run for it: a budget holds while tuning.
        drift_window, drift_tolerance, drift_patience: re-tune when the mean power of ``drift_window`` steps in
            the chosen mode exceeds the budget by ``drift_tolerance`` ``drift_patience`` times in a row.
        workload_id: the workload's key in the store (default: module class, parameter count, batch shapes,
            precision).
        precision: ``fp32``/``fp16`` for the twin's model (default: from the Trainer's precision).
        log_every_n_steps: TensorBoard scalars every N training steps.
        cost: the training step's :class:`~lightning_edge.cost.ModelCost` (``analyze(model, ..., training=True)``)
            for the twin; by default it is captured from the first training step (any call form: keyword
            arguments, dict batches, modules without ``forward``, Lazy modules), which is then not tuned.
        print_summary: print the summary at the end of fit; ``log_dir``: own SummaryWriter's directory when the
            Trainer has no TensorBoardLogger.
        prior: ``True`` (default): on the twin, start the search from the modes' predicted time and power
            (:mod:`lightning_edge.tuning.prior`; applied from the second minibatch); ``False``: Fulcrum's search
            as published; or a :class:`~lightning_edge.tuning.prior.Prior`.
        thorough: with a prior, go on with GMD's full search after the prior's profiles (at most 4 + 10). ``None``
            (default): when the Trainer plans at least ``THOROUGH_AFTER_STEPS`` (2000) minibatches
            (``trainer.estimated_stepping_batches``), where a slightly slower mode costs more than the profiles.
    """

    def __init__(self, power_budget_w: float, config: TunerConfig | None = None, *, device: Any = "auto",
                 **options: Any) -> None:
        super().__init__()
        budget = _budget_w(power_budget_w)
        cfg = self.config = configure(config, TunerConfig, **options)
        self.power_budget_w = budget
        self.device = device
        self.tuner: OnlineTuner | None = None
        self.board: Board | None = None  # the board tuned
        self.summary_text: str | None = None
        self._tbw = TrainerWriter("tuner", cfg.log_dir)
        self._trainer: Trainer | None = None
        self._module: LightningModule | None = None
        self._loop: StepLoop | None = None
        self._batch: Any = None
        self._driver = _Driver(self)
        # the workload's cost model, from the shared capture of the first training step
        # (lightning_edge.cost.capture) or given as cost=; notes say what could not be modelled
        self.workload_cost: ModelCost | None = cfg.cost
        self.capture_notes: list[str] = []
        self._capture: FirstStep | None = None
        self._pre_steps = 0  # minibatches trained before the tuner started (the capture step)
        self._restored: str | None = None  # the mode the board was put back to at the end
        self._energy_j = 0.0
        self._epoch = {"time_s": 0.0, "energy_j": 0.0, "steps": 0}
        self._pending_state: dict | None = None
        self._events: list[tuple[str, dict]] = []

    # ------------------------------------------------------------------ public
    @property
    def state_key(self) -> str:
        return type(self).__qualname__  # not the budget: it may change during fit

    def set_power_budget(self, power_budget_w: float) -> None:
        """Change the budget during fit: the tuner solves again (stored profiles are reused) and switches."""
        budget = _budget_w(power_budget_w)
        self.power_budget_w = budget
        if self.tuner is not None:
            self.tuner.set_power_budget(budget)

    @property
    def window(self) -> WindowSpec | None:
        """The profiling window's settings (:class:`~lightning_edge.tuning.online.WindowSpec`; None: the defaults)."""
        return self.config.window

    @property
    def solution(self) -> Solution | None:
        return None if self.tuner is None else self.tuner.solution

    def summary(self) -> TuningSummary | None:
        """The tuner's summary (None before the fit set it up); ``tuning_steps`` counts every minibatch before
        training ran in the chosen mode, the capture step included (``capture_steps``)."""
        if self.tuner is None:
            return None
        s = self.tuner.summary()
        took = s.progress.tuning_steps
        return replace(s, capture_steps=self._pre_steps, restored=self._restored,
                       progress=replace(s.progress, tuning_steps=None if took is None else int(took) + self._pre_steps))

    # ------------------------------------------------------------------ set-up
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._trainer = trainer
        if stage != "fit" or self.tuner is not None:
            return
        world = trainer.world_size
        if world > 1:
            raise RuntimeError(
                f"PowerModeTuner does not coordinate distributed ranks (world_size={world}): each rank would profile "
                "and switch its own board's power mode from its own measurements, and the ranks would diverge. Tune "
                "on one device (Trainer(devices=1, ...) with PowerModeTuner), then give every board the tuned mode "
                "(PowerModeTuner.solution.mode; on each board: lightning-edge mode set <mode>).")
        c = self.config
        prec = _precision_of(trainer, c.precision)
        self.board = board = get_board(self.device, control="write", seed=c.seed)
        if board.controller is None:
            raise TypeError(f"device {board.name!r}: PowerModeTuner needs a board whose power mode it can switch (a "
                            "mode controller): 'sim:orin-agx', 'auto', 'jetson', 'nvpmodel', 'nvml', a SimulatedOrin, "
                            "or an object with .controller and .sensor")
        # the model's step loop: the profiler of the same Trainer measures each step once, from the same meter
        self._module = pl_module
        self._loop = shared_loop(pl_module)
        self._loop.attach(self._driver, TUNER)
        meter = self._loop.twin_meter(board, seed=c.seed, precision=prec) if board.twin is not None \
            else board.meter()
        self.tuner = OnlineTuner(
            self.power_budget_w, board.controller, meter, strategy=c.strategy, space=c.space if c.space is not None else board.tuning_space,
            store=c.store,
            fingerprint=c.workload_id, device_model=board.store_key, window=c.window, switch_at=c.switch_at,
            baseline=c.baseline, on_event=self._on_event, prior="auto" if c.prior is True else c.prior,
            thorough=_planned_long(trainer) if c.thorough is None else bool(c.thorough),
            short_run=_planned_short(trainer) and not c.thorough, planned_steps=_planned_int(trainer),
            drift_window=c.drift_window, drift_tolerance=c.drift_tolerance, drift_patience=c.drift_patience)
        # a SIGTERM the Trainer caught ends a wait for other processes' profiles at once
        self.tuner.interrupted = lambda: trainer.received_sigterm
        if self._pending_state:
            self.tuner.load_state_dict(self._pending_state)
            self._pending_state = None

    # ------------------------------------------------------------------ steps
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if self._loop is not None and not trainer.sanity_checking:
            self._loop.begin("train", trainer, batch)  # the model's steps, begun once for every callback

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: STEP_OUTPUT, batch: Any,
                           batch_idx: int) -> None:
        if self._loop is not None and not trainer.sanity_checking:
            self._loop.end("train", trainer)

    def _before(self, trainer: Trainer | None, batch: Any) -> None:
        """Before the step (and before a profiler of the same model starts its clock): the mode may switch."""
        t = self.tuner
        self._batch = batch
        pl_module = self._module
        if t is None or t.phase == "closed":
            return
        if not t.started:
            # the first training step is captured for the cost model, by the model's shared capture (one
            # capture and one analysis for every callback of the Trainer; a step it already holds is used at once);
            # on the twin, and with Lazy modules, tuning starts at the next step
            sim = t.meter.simulated
            if self._capture is None and self.workload_cost is None and not self.capture_notes:
                from lightning_edge.cost.shared import FirstStep

                first = FirstStep(pl_module)
                known = first.begin()
                if known is not None:
                    self._use_step(known, batch, pl_module)
                else:
                    self._capture = first
            if sim and not t.meter.bound and self.workload_cost is not None:
                t.meter.bind_cost(self.workload_cost, _batch_size_of(batch, self.workload_cost),
                                  param_tensors=count_param_tensors(pl_module))
            from lightning_edge.cost.capture import has_uninitialized_params

            # a real Orin AGX with the prior on waits for the capture step too: the prior is the twin's calibrated
            # model of the captured cost (OnlineTuner.bind_model)
            board_prior = t.wants_board_prior
            if self._capture is not None and (sim or board_prior or has_uninitialized_params(pl_module)):
                self._pre_steps += 1  # the capture step: trained, not tuned
                return
            if sim and not t.meter.bound:
                return  # the twin could not model this workload: said in capture_notes, nothing is tuned
            if board_prior and self.workload_cost is not None:
                t.bind_model(self.workload_cost, batch_size=_batch_size_of(batch, self.workload_cost))
            prec = _precision_of(trainer, self.config.precision)
            t.bind(self.config.workload_id or module_fingerprint(pl_module, batch, prec))
            t.start()
        t.before_step()

    def _after(self, trainer: Trainer | None) -> None:
        """After the step (and after a profiler of the same model measured it): the step goes to the tuner."""
        t = self.tuner
        pl_module, batch = self._module, self._batch
        if t is None:
            return
        if self._capture is not None and not t.started:
            self._bind_twin(pl_module, batch)
        if not t.started:
            return
        loop = self._loop
        # with a profiler of the same model attached, the step is the one it measured
        reading = loop.measured if loop is not None and loop.session is not None else None
        rec = t.after_step(reading)
        if self._capture is not None:  # a real board tuned from step 0: analysed after the step's measurement
            self._bind_twin(pl_module, batch)
        if rec is None:
            return
        if rec.window is not None and loop is not None and loop.measured_by is not None \
                and loop.measured_index is not None:
            loop.measured_by.tag_window("train", loop.measured_index, f"tuning window {rec.window + 1}")
        if rec.m.has_power:
            self._energy_j += rec.energy_j
            self._epoch["energy_j"] += rec.energy_j
        self._epoch["time_s"] += rec.time_s
        self._epoch["steps"] += 1
        if rec.step % self.config.log_every_n_steps == 0:
            self._log_step(trainer, rec)

    def _bind_twin(self, pl_module: LightningModule, batch: Any) -> None:
        """The captured first step -> the workload's cost model (shared capture); the twin's meter is bound
        to it. What cannot be modelled is said (``capture_notes``, the summary) instead of raised."""
        home, self._capture = self._capture, None
        self._use_step(home.end(), batch, pl_module)

    def _use_step(self, step: CapturedStep | None, batch: Any, pl_module: LightningModule) -> None:
        """The shared capture's training step -> the workload's cost model (analysed once, by whichever callback
        asks first); what cannot be modelled is said instead of raised."""
        from lightning_edge.cost.capture import CaptureError

        sim = self.tuner is not None and self.tuner.meter.simulated
        try:
            if step is None:
                raise CaptureError("no call of the model's modules was captured in the first training step")
            cost = step.cost()
        except Exception as exc:  # noqa: BLE001 - said, never raised: training goes on
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if sim:
                described = step.captured.describe() if step is not None else "nothing"
                text = (f"the twin needs a cost model of the training step and none could be had ({msg}); captured: "
                        f"{described}. Nothing is tuned in this run (the board stays in its mode). Pass "
                        "PowerModeTuner(..., cost=lightning_edge.analyze(model, *inputs, training=True, **kw_inputs))")
            else:
                text = f"no cost model of the training step ({msg}): tuned from measurements only"
            self.capture_notes.append(text)
            import warnings

            warnings.warn(f"PowerModeTuner: {text}", stacklevel=2)
            return
        self.workload_cost = cost
        self.capture_notes.extend(n for n in cost.notes if n not in self.capture_notes)
        if sim and not self.tuner.meter.bound:
            self.tuner.meter.bind_cost(cost, _batch_size_of(batch, cost), param_tensors=count_param_tensors(pl_module))

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        t = self.tuner
        if t is None or not t.started:
            return
        t.epoch_boundary()
        if self._epoch["steps"]:
            lab = t.label
            ep = trainer.current_epoch
            items = {f"tuner/{lab}/epoch_time_s": self._epoch["time_s"],
                     f"tuner/{lab}/epoch_energy_j": self._epoch["energy_j"]}
            self._tbw.log_metrics(trainer, items, trainer.global_step)
            w = self._tbw.get(trainer)
            if w is not None:
                for k, v in items.items():
                    w.add_scalar(k, v, ep)
        self._epoch = {"time_s": 0.0, "energy_j": 0.0, "steps": 0}

    # ------------------------------------------------------------------ logging
    def _log_step(self, trainer: Trainer | None, rec: StepRecord) -> None:
        from lightning_edge.lightning.reporter import write_scalars

        lab = rec.label
        m = rec.mode
        items = [
            (f"tuner/{lab}/step_time_ms", rec.time_s * 1e3), (f"tuner/{lab}/power_w", rec.power_w),
            (f"tuner/{lab}/energy_j", self._energy_j), ("tuner/power_budget_w", self.tuner.problem.power_budget_w),
            ("tuner/mode/cores", m.cores), ("tuner/mode/cpu_mhz", m.cpu_mhz), ("tuner/mode/gpu_mhz", m.gpu_mhz),
            ("tuner/mode/mem_mhz", m.mem_mhz), ("tuner/phase", PHASES.index(rec.phase) if rec.phase in PHASES else -1),
        ]
        self._tbw.log_metrics(trainer, dict(items), rec.step)
        w = self._tbw.get(trainer)
        if w is not None:
            write_scalars(w, items, rec.step)

    def _on_event(self, kind: str, info: dict) -> None:
        self._events.append((kind, info))
        trainer = self._trainer
        w = self._tbw.get(trainer) if trainer is not None else None
        if w is None:
            return
        lab = self.tuner.label  # events come from the tuner, which exists by then
        if kind == "profile":
            i = int(info["index"])
            w.add_scalar(f"tuner/{lab}/profile_time_ms", info["time_s"] * 1e3, i)
            w.add_scalar(f"tuner/{lab}/profile_power_w", info["power_w"], i)
            w.add_text("tuner/profiles", self._profiles_table(), i)
        elif kind in ("solution", "infeasible"):
            sol = info.get("solution")
            text = (f"{sol.describe()} (budget {info['budget_w']:g} W, {info['reason']})" if sol is not None else
                    f"no profiled mode meets {info['budget_w']:g} W: running in {info.get('mode')} "
                    "(the lowest-power mode profiled)")
            w.add_text("tuner/solution", text, self.tuner.step)
        elif kind in ("retune", "drift"):
            w.add_text("tuner/retunes", ", ".join(f"{k}={v}" for k, v in info.items()), self.tuner.step)

    def _profiles_table(self) -> str:
        t = self.tuner
        rows = ["| # | mode | ms/minibatch | power (W) | measured minibatches | discarded | within budget |",
                "|---|---|---|---|---|---|---|"]
        for p in t.profiles:
            rows.append(f"| {p['index']} | {p['mode']} | {p['time_s'] * 1e3:.1f} | {p['power_w']:.2f} | "
                        f"{p['steps']} | {p['discarded']} | {'yes' if p['within_budget'] else 'no'} |")
        return f"{t.label} profiles\n\n" + "\n".join(rows)

    # ------------------------------------------------------------------ ending
    def _close(self, trainer: Trainer, reason: str) -> None:
        t = self.tuner
        if t is None or t.phase == "closed":
            return
        if self._capture is not None:  # a capture this callback began and no step ended
            self._capture.abort()
            self._capture = None
        try:
            restored = t.close(reason)
        finally:
            if self.board is not None:
                self.board.close()
        if restored is not None or t.original_mode is not None:
            self._restored = str(t.original_mode)
        self.summary_text = format_summary(self.summary(), _describe(self.board))
        if self.capture_notes:  # what the cost model could not see, or how it counted
            self.summary_text += "".join(f"\n  note: {n}" for n in self.capture_notes)
        w = self._tbw.get(trainer)
        if w is not None:
            w.add_text("tuner/summary", "    " + self.summary_text.replace("\n", "\n    "), t.step)
            self._tbw.flush()
        if self.config.print_summary and reason == "end":
            end_progress_bar(trainer)
            print(self.summary_text)

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._close(trainer, "end")

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        if self._loop is not None:
            self._loop.abort()
        self._close(trainer, f"{type(exception).__name__}")

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "fit":
            self._close(trainer, "end")
            self._tbw.close()
            if self._loop is not None:
                self._loop.detach(self._driver)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        if self.tuner is None:
            return {"budget_w": self.power_budget_w}
        return self.tuner.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "budget_w" in state_dict:
            self.power_budget_w = float(state_dict["budget_w"])
        if self.tuner is not None:
            self.tuner.load_state_dict(state_dict)
        else:
            self._pending_state = dict(state_dict)


class _Driver:
    """The tuner's place in the model's step loop (:class:`~lightning_edge.lightning.steps.StepLoop`): training
    steps only."""

    def __init__(self, cb: PowerModeTunerMixin) -> None:
        self.cb = cb

    def begin(self, stage: str, trainer: Trainer | None, batch: Any) -> None:
        if stage == "train":
            self.cb._before(trainer, batch)

    def end(self, stage: str, trainer: Trainer | None) -> None:
        if stage == "train":
            self.cb._after(trainer)

    @property
    def power_budget_w(self) -> float:
        """The budget a profiler of the same model checks the steps against."""
        return self.cb.power_budget_w
