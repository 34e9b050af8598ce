"""``EnergyProfiler``: the time and energy of every layer, in TensorBoard, from one callback.

::

    from lightning.pytorch import Trainer
    import lightning_edge
    trainer = Trainer(callbacks=[lightning_edge.EnergyProfiler()])        # works with no arguments
    trainer = Trainer(callbacks=[lightning_edge.EnergyProfiler(device="sim:orin-agx")])   # the Orin twin

    import pytorch_lightning as pl                                          # the other package
    from lightning_edge.lightning.pl import EnergyProfiler
    trainer = pl.Trainer(callbacks=[EnergyProfiler()])

``lightning`` and ``pytorch_lightning`` are separate class hierarchies and each Trainer accepts only callbacks
of its own; the glue lives in :class:`EnergyProfilerMixin` (this module, no Lightning import) and two thin
subclasses add each package's ``Callback`` base: ``lightning_edge.lightning.pytorch.EnergyProfiler``
(``lightning.pytorch``; also ``lightning_edge.EnergyProfiler``) and ``lightning_edge.lightning.pl.EnergyProfiler``
(``pytorch_lightning``).

The callback is glue, as Lightning's ``ThroughputMonitor`` is over ``Throughput``: what it does is
:class:`~lightning_edge.lightning.reporter.EnergyReporter`'s (a plain class a loop without Lightning drives the same
way), and the callback reads the Trainer for it: which call it is, how many batches each stage has, the global step,
the rank, ``log_every_n_steps``, the TensorBoardLogger, DDP's epoch totals, Lightning's ``PyTorchProfiler`` traces.

What it does (docs/profiler.md): times every module forward and backward on every N-th step
(:mod:`lightning_edge.profiling.hooks`), reads the power sensor in the background, attributes each profiled step's
energy to its layers (:mod:`lightning_edge.profiling.attribution`), and writes:

* TensorBoard (the Trainer's ``TensorBoardLogger``, else its own ``SummaryWriter`` under
  ``<default_root_dir>/lightning_logs/energy/version_N``): ``energy_j/<stage>/step``, ``.../cumulative``,
  ``time_ms/<stage>/step``, ``power_w/<stage>/step`` every profiled step and every ``log_every_n_steps``;
  ``energy_j_layer/<stage>/<layer>`` and ``time_ms_layer/...`` for the top ``tb_layers`` layers per profiled step,
  ``energy_j_region/<stage>/optimizer`` for the rows outside the layers; ``.../epoch`` and
  ``energy_j/<stage>/per_sample`` per epoch, and what the power readings were worth
  (``readings/<stage>/epoch_partial``, ``.../epoch_rejected``, ``.../epoch_failed``, ``.../epoch_samples``). A tag's
  first part says what its numbers are: ``energy_j_sim`` (the twin's), ``energy_j_estimated`` (the roofline model,
  no sensor), ``time_ms_host`` (this machine's times beside the twin's), and every card carries a description saying
  so; the energy groups sort first in TensorBoard. Once per run a custom scalars layout; once per Trainer call the
  layer chart ``layers/<stage>`` (1200 px wide; every run with a profiled step), the markdown table
  ``energy/<stage>_layers`` and, within the overhead budget, the image ``roofline/<stage>``.
* ``layers.csv`` and ``layers.json`` in the log dir, a Chrome/Perfetto trace under
  ``<log dir>/plugins/profile/energy/`` (and the same layers and power added to the traces of Lightning's
  ``PyTorchProfiler``), and a short summary of each Trainer call printed at its end.

What it may cost: at most 5 % of the run or 1 s, whichever is larger (:mod:`lightning_edge.lightning.budget`): every
run gets its step totals and, when it lasts a few seconds or more, a profiled step with its per-layer table.

On the twin every time and energy is the Orin's, from the twin's per-layer model of the captured workload
(docs/profiler.md, "The twin"); this machine's times are kept as ``host_time_s``.

Under DDP only rank 0 writes. Epoch totals cover every rank (:func:`combine_rank_totals`): samples add up, energy
adds up over energy domains (a board's sensor read by several ranks counts once; ``energy/epoch_domains`` says
how many were summed). Per-step and per-layer figures are rank 0's.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_edge.lightning.budget import OverheadBudget
from lightning_edge.lightning.config import ProfilerConfig, configure
from lightning_edge.lightning.console import end_progress_bar
from lightning_edge.lightning.reporter import EnergyReporter, write_scalars
from lightning_edge.lightning.session import EnergySession, Epoch
from lightning_edge.lightning.steps import SESSION, TUNER, StepLoop, shared_loop
from lightning_edge.profiling.report import RunOverhead
from lightning_edge.records import Measurement

if TYPE_CHECKING:
    from lightning.pytorch import LightningModule, Trainer
    from lightning.pytorch.profilers import Profiler
    from lightning.pytorch.utilities.types import STEP_OUTPUT
    from torch import Tensor

    from lightning_edge.profiling.report import ProfileReport

__all__ = ["EnergyProfilerMixin", "SHORT_STAGE", "write_scalars", "combine_rank_totals", "expected_batches"]

SHORT_STAGE = {"train": "", "validate": "val", "test": "test", "predict": "predict"}


def combine_rank_totals(ep: Epoch, parts: list[tuple[str, float, float, int]]) -> Epoch:
    """One epoch's totals over DDP ranks from every rank's ``(energy domain, energy_j, time_s, samples)``.

    Samples add up. Energy adds up over *energy domains*, not ranks: ranks that read one sensor (every rank on a
    Jetson reads the board's INA3221 rails; RAPL is the node's package) each measured that board over nearly the
    same wall window, so it counts once, as the largest of their readings (the widest window). Ranks with their
    own device (one GPU each through NVML, a board each) add up. The time is the longest rank's window."""
    by_domain: dict[str, float] = {}
    for domain, energy_j, _, _ in parts:
        known = [e for e in (by_domain.get(domain, math.nan), float(energy_j)) if math.isfinite(e)]
        by_domain[domain] = max(known) if known else math.nan
    energy = sum(by_domain.values())  # nan if a domain has no energy at all: the total is then unknown
    time_s = max(float(p[2]) for p in parts)
    t = ep.total
    total = Measurement(time_s, float(energy) / time_s, t.label, t.trusted and math.isfinite(energy), t.mode,
                        t.t0_ns, t.t1_ns, t.host_time_s, t.steps, int(sum(int(p[3]) for p in parts)), t.readings)
    return Epoch(ep.stage, ep.epoch, total, ep.runs, ranks=len(parts), domains=len(by_domain))


def expected_batches(trainer: Trainer, stage: str) -> int | None:
    """How many ``stage`` batches this Trainer call will run (one validation pass for ``validate`` inside a fit);
    None when the Trainer cannot tell (an iterable dataset without a length, a time limit)."""
    try:
        if stage == "train":
            if _time_limited(trainer):
                return None
            n = float(trainer.estimated_stepping_batches) * max(int(trainer.accumulate_grad_batches), 1)
        else:
            if stage == "validate":
                got = trainer.num_val_batches
            elif stage == "test":
                got = trainer.num_test_batches
            elif stage == "predict":
                got = trainer.num_predict_batches
            else:
                return None
            n = float(sum(got) if isinstance(got, (list, tuple)) else got)
    except Exception:  # noqa: BLE001 - a Trainer without these (or not set up yet): unknown
        return None
    return int(n) if math.isfinite(n) and n > 0 else None


def _time_limited(trainer: Trainer) -> bool:
    """Whether the run stops at a time limit (``Trainer(max_time=...)``, or a ``Timer`` callback given by hand): the
    Trainer keeps the limit in that callback, not in an attribute, and the batches it will run are then unknown."""
    return any(type(cb).__name__ == "Timer" and callable(getattr(cb, "time_remaining", None))
               for cb in trainer.callbacks)


class EnergyProfilerMixin:
    """The callback's glue, independent of the Lightning package (see the module docstring).

    Args:
        device: ``"auto"`` (Jetson sysfs > jtop > NVML > RAPL > none), a name (``"sim:orin-agx"``, ``"jetson"``,
            ``"rapl"``, ``"nvml:0"``, ``"none"``), a device object with a ``.sensor`` (``SimulatedOrin``), or a sensor.
        config: a :class:`~lightning_edge.lightning.config.ProfilerConfig`; its fields may also be given as keyword
            arguments (``EnergyProfiler(every_n_steps=5, log_dir="runs")``): the config's docstring says what each
            does (the steps profiled per layer, the cost model, the overhead target, what is written where).
        budget: an :class:`~lightning_edge.lightning.budget.OverheadBudget` instead of ``overhead_target`` (its own
            fraction and floor; kept across this callback's Trainer calls, with what it measured work to cost).
    """

    def __init__(self, device: Any = "auto", config: ProfilerConfig | None = None, *,
                 budget: OverheadBudget | None = None, **options: Any) -> None:
        super().__init__()
        self.config = configure(config, ProfilerConfig, **options)
        self.device = device
        self.budget = budget if budget is not None else OverheadBudget(self.config.overhead_target)
        self.overhead_target = self.budget.fraction
        self.reporter: EnergyReporter | None = None
        self._fn: str | None = None
        self._loop: StepLoop | None = None
        self._driver = _Driver(self)

    # ------------------------------------------------------------------ what the reporter found
    @property
    def session(self) -> EnergySession | None:
        return self.reporter.session if self.reporter is not None else None

    @property
    def report(self) -> ProfileReport | None:
        return self.reporter.report if self.reporter is not None else None

    @property
    def call_report(self) -> ProfileReport | None:
        return self.reporter.call_report if self.reporter is not None else None

    @property
    def summary_text(self) -> str | None:
        return self.reporter.summary_text if self.reporter is not None else None

    @property
    def log_dir(self) -> str | None:
        return self.reporter.log_dir if self.reporter is not None else None

    @property
    def trace_file(self) -> Path | None:
        return self.reporter.trace_file if self.reporter is not None else None

    @property
    def overhead(self) -> RunOverhead:
        """The last Trainer call's overhead, measured at its end."""
        return self.reporter.overhead if self.reporter is not None else RunOverhead()

    def merge_into_trace(self, path: str | os.PathLike[str]) -> int:
        """Add this session's layer spans (FLOP, bytes, energy) and power counters to a trace ``torch.profiler``
        wrote (``export_chrome_trace`` or ``tensorboard_trace_handler``), as a process of their own; returns the
        events added (0 when its window holds none of this session's steps). Done by itself for the traces of
        Lightning's ``PyTorchProfiler``; call it for a ``torch.profiler.profile`` you run yourself."""
        assert self.reporter is not None, "merge_into_trace: the callback has not run yet"
        return self.reporter.merge_into_trace(path)

    # ------------------------------------------------------------------ plumbing
    @property
    def state_key(self) -> str:  # Lightning asks on every hook call
        key = self.__dict__.get("_state_key")
        if key is None:
            key = self._state_key = f"{type(self).__qualname__}[device={self.device!r}]"
        return key

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.reporter is None or self.reporter.model is not pl_module:
            if self.reporter is not None:
                self.reporter.close()
            self.reporter = EnergyReporter(pl_module, self.device, self.config, budget=self.budget)
        self._fn = stage
        self._loop = shared_loop(pl_module)
        self._loop.attach(self._driver, SESSION)
        self.reporter.begin_run(stage, trainer, rank_zero=trainer.is_global_zero,
                                log_every_n_steps=int(trainer.log_every_n_steps or 0))
        self._note_torch_profiler(trainer)

    def _note_torch_profiler(self, trainer: Trainer) -> None:
        """A ``torch.profiler.profile`` the user runs around the Trainer writes its trace after the call returns:
        say how to add the layers and power to it (Lightning's ``PyTorchProfiler`` is handled by itself)."""
        try:
            import torch.autograd.profiler as tap

            running = bool(getattr(tap, "_is_profiler_enabled", False))
        except Exception:  # noqa: BLE001
            running = False
        if running and type(trainer.profiler).__name__ != "PyTorchProfiler" and self.config.trace:
            self.reporter.note("a torch.profiler is running: after exporting its trace, call "
                               "EnergyProfiler.merge_into_trace(path) to add the layers' FLOP, bytes, energy and the "
                               "power tracks")

    def _begin(self, stage: str, trainer: Trainer, batch: Any) -> None:
        if self.reporter is not None and self._loop is not None and not trainer.sanity_checking:
            self._loop.begin(stage, trainer, batch)  # the model's steps, begun once for every callback

    def _end(self, stage: str, trainer: Trainer) -> None:
        if self.reporter is not None and self._loop is not None and not trainer.sanity_checking:
            self._loop.end(stage, trainer)

    def _step_begin(self, stage: str, trainer: Trainer | None, batch: Any) -> None:
        """The step's start as the model's step loop runs it (after a tuner's mode switch)."""
        r = self.reporter
        if r is None:
            return
        if not r.expects(stage):  # once per stage and Trainer call (setup starts a new run)
            r.expect(stage, expected_batches(trainer, stage) if trainer is not None else None)
        r.step_begin(stage, batch, trainer.global_step if stage == "train" and trainer is not None else None)

    def _step_end(self, stage: str, trainer: Trainer | None) -> None:
        """The step's end as the model's step loop runs it: measured once; a tuner of the same model is handed the
        measurement (the session resolves it at once when one is attached)."""
        r = self.reporter
        if r is None:
            return
        r.session.sync = bool(self._loop is not None and self._loop.attached(TUNER))
        m = r.step_end(stage, trainer.global_step if stage == "train" and trainer is not None else None)
        if self._loop is not None:
            self._loop.measured = m
            self._loop.measured_index = None if m is None else len(r.session.totals[stage]) - 1
            self._loop.measured_by = r.session

    def _mark(self, region: str, phase: str) -> None:
        if self.reporter is not None:
            self.reporter.mark(region, phase)

    # ------------------------------------------------------------------ Lightning hooks
    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        self._begin("train", trainer, batch)

    def on_before_backward(self, trainer: Trainer, pl_module: LightningModule, loss: Tensor) -> None:
        self._mark("(backward)", "bwd")

    def on_after_backward(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._mark("(optimizer)", "other")

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: STEP_OUTPUT, batch: Any,
                           batch_idx: int) -> None:
        self._end("train", trainer)

    def on_validation_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        self._begin("validate", trainer, batch)

    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: STEP_OUTPUT, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        self._end("validate", trainer)

    def on_test_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        self._begin("test", trainer, batch)

    def on_test_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: STEP_OUTPUT, batch: Any,
                          batch_idx: int, dataloader_idx: int = 0) -> None:
        self._end("test", trainer)

    def on_predict_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int,
                               dataloader_idx: int = 0) -> None:
        self._begin("predict", trainer, batch)

    def on_predict_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                             batch_idx: int, dataloader_idx: int = 0) -> None:
        self._end("predict", trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._epoch_end("train", trainer)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking:
            self._epoch_end("validate", trainer)

    def on_test_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._epoch_end("test", trainer)

    def on_predict_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._epoch_end("predict", trainer)

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        r = self.reporter
        if r is None:
            return
        try:
            if r.config.print_summary and r.rank_zero:
                end_progress_bar(trainer)  # the summary prints below the bar, not inside a stale bar line
            r.finish(self._fn or stage, trainer.global_step)
            if self.config.trace and r.rank_zero:
                self._merge_profiler_traces(trainer, later=True)
        finally:
            r.close()
            if self._loop is not None:
                self._loop.detach(self._driver)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        """An exception or Ctrl-C: every layer measured so far is written (layers.csv, layers.json, the summary),
        labelled a partial run; writing never raises over the run's own exception."""
        if self._loop is not None:
            self._loop.abort()
        r = self.reporter
        if r is None:
            return
        reason = ("Ctrl-C (KeyboardInterrupt)" if isinstance(exception, KeyboardInterrupt)
                  else f"{type(exception).__name__}: {str(exception).splitlines()[0][:120] if str(exception) else ''}")
        try:
            r.abort(reason if r.rank_zero else None)
        finally:
            r.close()

    # ------------------------------------------------------------------ epochs: DDP's totals over ranks
    def _epoch_end(self, stage: str, trainer: Trainer) -> None:
        """The epoch's totals (cheap): tables and figures are made once, at the end of the Trainer call."""
        if self.reporter is not None:
            self.reporter.epoch_end(stage, combine=lambda tot: self._reduce(trainer, tot))

    def _reduce(self, trainer: Trainer, tot: Epoch) -> Epoch:
        """The epoch's totals over DDP ranks (a collective: every rank calls it): see :func:`combine_rank_totals`."""
        world = trainer.world_size
        if world <= 1:
            return tot
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            self.reporter.note(f"world_size is {world} but no torch.distributed process group is initialised: the "
                               "epoch totals are this rank's alone")
            return tot
        parts: list[tuple[str, float, float, int] | None] = [None] * dist.get_world_size()
        dist.all_gather_object(parts, (self._energy_domain(), tot.energy_j, tot.time_s, tot.samples))
        return combine_rank_totals(tot, [p for p in parts if p is not None])  # every rank's, once gathered

    def _energy_domain(self) -> str:
        """This rank's energy domain, unique per host: ``<hostname>/<sensor's energy_domain>``; without a sensor
        (estimated energy) every rank is its own."""
        dev = self.session.device if self.session is not None else None
        if dev is None or not dev.has_sensor:
            return f"{socket.gethostname()}/model:{os.getpid()}"
        return f"{socket.gethostname()}/{dev.sensor.energy_domain}"

    # ------------------------------------------------------------------ Lightning's PyTorchProfiler
    def _merge_profiler_traces(self, trainer: Trainer, later: bool = False) -> None:
        """Lightning's ``PyTorchProfiler``: merge into the traces it wrote during this call; its last trace is
        written after the callbacks' teardown (``describe``), so that one is merged when it has been written."""
        prof = trainer.profiler
        if type(prof).__name__ != "PyTorchProfiler" or prof.dirpath is None:
            return
        dirpath = prof.dirpath
        from lightning_edge.lightning.reporter import EPOCH_OFFSET_NS

        t0_epoch = (self.reporter.budget.t0_ns + EPOCH_OFFSET_NS) / 1e9
        done: set[str] = set()
        reporter = self.reporter

        def merge_new() -> None:
            from lightning_edge.profiling.trace import TRACE_SUFFIX

            for f in sorted(Path(dirpath).rglob(f"*{TRACE_SUFFIX}*")):
                if str(f) in done or f.stat().st_mtime < t0_epoch - 1:
                    continue
                done.add(str(f))
                try:
                    reporter.merge_into_trace(f)
                except Exception as exc:  # noqa: BLE001 - someone else's file: never fail the run over it
                    reporter.note(f"could not add energy to {f.name}: {exc}")

        merge_new()
        if later and not isinstance(prof.describe, _DescribeThenMerge):
            prof.describe = _DescribeThenMerge(prof, merge_new)


class _DescribeThenMerge:
    """A ``PyTorchProfiler``'s ``describe`` (which writes its last trace), then ``merge``: called once, it gives the
    profiler its own method back."""

    def __init__(self, prof: Profiler, merge: Callable[[], None]) -> None:
        self.prof, self.describe, self.merge = prof, prof.describe, merge

    def __call__(self) -> None:
        try:
            self.describe()
        finally:
            self.prof.describe = self.describe  # once: give the profiler its own method back
            self.merge()


class _Driver:
    """The profiler's place in the model's step loop (:class:`~lightning_edge.lightning.steps.StepLoop`)."""

    def __init__(self, cb: EnergyProfilerMixin) -> None:
        self.cb = cb

    def begin(self, stage: str, trainer: Trainer | None, batch: Any) -> None:
        self.cb._step_begin(stage, trainer, batch)

    def end(self, stage: str, trainer: Trainer | None) -> None:
        self.cb._step_end(stage, trainer)

    @property
    def session(self) -> EnergySession | None:
        return self.cb.session
