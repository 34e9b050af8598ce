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
of its own; the logic lives in :class:`EnergyProfilerMixin` (this module, no Lightning import) and two thin
subclasses add each package's ``Callback`` base: ``lightning_edge.lightning.pytorch.EnergyProfiler``
(``lightning.pytorch``; also ``lightning_edge.EnergyProfiler``) and ``lightning_edge.lightning.pl.EnergyProfiler``
(``pytorch_lightning``).

What it does (docs/profiler.md): times every module forward and backward on every N-th step
(:mod:`lightning_edge.profiling.hooks`), reads the power sensor in the background, attributes each profiled step's
energy to its layers (:mod:`lightning_edge.profiling.attribution`), and writes:

* TensorBoard (the Trainer's ``TensorBoardLogger``, else its own ``SummaryWriter`` under
  ``<default_root_dir>/lightning_logs/energy/version_N``): ``time/<layer>_ms``, ``energy/<layer>_mj``,
  ``power/<layer>_w`` per profiled step; ``time/step_ms``, ``energy/step_j``, ``power/step_w`` per step;
  ``energy/epoch_j``, ``energy/j_per_sample``, ``intensity/<layer>`` per epoch, and what the power readings were
  worth (``readings/epoch_partial``, ``readings/epoch_rejected``, ``readings/epoch_failed``); a roofline figure
  (``roofline/<stage>``) and a per-layer markdown table (``energy/<stage>_layers``) per epoch. Stages other than
  training put their short name after the prefix (``energy/val/step_j``).
* ``layers.csv`` and ``layers.json`` in the log dir, a Chrome/Perfetto trace under
  ``<log dir>/plugins/profile/energy/``, and a short summary printed at the end of the run.

Under DDP only rank 0 writes. Epoch totals cover every rank (:func:`combine_rank_totals`): samples add up, energy
adds up over energy domains (a board's sensor read by several ranks counts once; ``energy/epoch_domains`` says
how many were summed). Per-step and per-layer figures are rank 0's.
"""

from __future__ import annotations

import math
import os
import socket
import time
from pathlib import Path
from typing import Any

from lightning_edge.lightning.session import EnergySession, EpochTotals, ProfiledStep
from lightning_edge.lightning.tb import TrainerWriter
from lightning_edge.profiling.attribution import DEFAULT_K

__all__ = ["EnergyProfilerMixin", "SHORT_STAGE", "write_scalars"]

SHORT_STAGE = {"train": "", "validate": "val", "test": "test", "predict": "predict"}
#: the stages a Trainer entry point runs (for the end-of-run summary)
FN_STAGES = {"fit": ("train", "validate"), "validate": ("validate",), "test": ("test",), "predict": ("predict",)}


def combine_rank_totals(tot: EpochTotals, parts: list[tuple[str, float, float, int]]) -> EpochTotals:
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
    return EpochTotals(tot.stage, tot.epoch, float(energy), max(float(p[2]) for p in parts), tot.steps,
                       int(sum(int(p[3]) for p in parts)), tot.label, ranks=len(parts), domains=len(by_domain),
                       readings=tot.readings)


def _prefix(metric: str, stage: str) -> str:
    short = SHORT_STAGE.get(stage, stage)
    return f"{metric}/{short}/" if short else f"{metric}/"


def write_scalars(writer: Any, items: list[tuple[str, float]], step: int) -> None:
    """Scalars at one step, as ``add_scalar`` writes them (``simple_value`` per tag, same run, same tags), but in one
    event: ~200 per-layer values cost about 1 ms instead of about 20 ms of ``add_scalar`` calls. Falls back to
    ``add_scalar`` for writers without a file writer (never ``add_scalars``, which makes a run per key)."""
    items = [(t, float(v)) for t, v in items if v is not None and math.isfinite(v)]
    if not items:
        return
    get = getattr(writer, "_get_file_writer", None)
    if get is not None:
        try:
            from tensorboard.compat.proto.summary_pb2 import Summary

            summary = Summary(value=[Summary.Value(tag=t, simple_value=v) for t, v in items])
            get().add_summary(summary, int(step))
            return
        except Exception:  # noqa: BLE001 - any other writer: the public API
            pass
    for t, v in items:
        writer.add_scalar(t, v, step)


class EnergyProfilerMixin:
    """The callback's behaviour, independent of the Lightning package (see the module docstring).

    Args:
        device: ``"auto"`` (Jetson sysfs > jtop > NVML > RAPL > none), a name (``"sim:orin-agx"``, ``"jetson"``,
            ``"rapl"``, ``"nvml:0"``, ``"none"``), a device object with a ``.sensor`` (``SimulatedOrin``), or a sensor.
        every_n_steps: profile every N-th step per layer; ``"auto"`` adapts N so the measured overhead stays below
            ``overhead_target`` (default 3 %).
        warmup_steps: never profile the first steps of a stage, nor the steps right after a power-mode change.
        depth, include: which modules are timed (see :class:`~lightning_edge.profiling.hooks.LayerTimer`).
        k: a layer is measured on its own when its self time spans ``k`` sensor periods, else apportioned.
        roofline: the roofline whose energy model apportions/estimates (default: the twin's in the current mode, else
            the published Orin AGX profile).
        cost: a precomputed ``ModelCost`` (names relative to the LightningModule); ``analyze``: run the cost model on
            the captured inputs of the first step (default True).
        log_layers: log per-layer scalars to TensorBoard; ``figure``/``table``: the roofline figure and the markdown
            table per epoch; ``trace``: write the Chrome/Perfetto trace (``trace_steps`` profiled steps at most);
            ``report``: write ``layers.csv``/``layers.json``; ``print_summary``: print the summary (``top`` layers).
        log_dir: where the own SummaryWriter, reports and trace go when the Trainer has no TensorBoardLogger.
    """

    def __init__(self, device: Any = "auto", *, every_n_steps: int | str = "auto", warmup_steps: int = 2,
                 depth: int | None = None, include: Any = None, k: float = DEFAULT_K, roofline: Any = None,
                 cost: Any = None, analyze: bool = True, overhead_target: float = 0.03, settle_s: float | None = None,
                 log_layers: bool = True, figure: bool = True, table: bool = True, trace: bool = True,
                 trace_steps: int = 20, report: bool = True, print_summary: bool = True, top: int = 5,
                 log_dir: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        self._session_kw = dict(every_n_steps=every_n_steps, warmup_steps=warmup_steps, depth=depth,
                                include=include, k=k, roofline=roofline, cost=cost, analyze=analyze,
                                overhead_target=overhead_target, settle_s=settle_s, keep_timings=trace_steps)
        if every_n_steps != "auto" and (not isinstance(every_n_steps, int) or every_n_steps < 1):
            raise ValueError(f"every_n_steps must be 'auto' or an integer >= 1, got {every_n_steps!r}")
        self.device = device
        self.log_layers = log_layers
        self.figure = figure
        self.table = table
        self.trace = trace
        self.trace_steps = int(trace_steps)
        self.write_report = report
        self.print_summary = print_summary
        self.top = int(top)
        self.log_dir_arg = None if log_dir is None else str(log_dir)
        self.session: EnergySession | None = None
        self.log_dir: str | None = None
        self.report: Any = None
        self.trace_file: Path | None = None
        self.summary_text: str | None = None
        self._writer: Any = None
        self._tbw = TrainerWriter("energy", log_dir)
        self._logged_totals: dict[str, int] = {}
        self._trainer: Any = None

    # ------------------------------------------------------------------ plumbing
    @property
    def state_key(self) -> str:
        return f"{type(self).__qualname__}[device={self.device!r}]"

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._trainer = trainer
        if self.session is None or self.session.model is not pl_module:
            if self.session is not None:
                self.session.close()
            self.session = EnergySession(pl_module, self.device, **self._session_kw)
        self.session.start()

    def _rank_zero(self, trainer: Any) -> bool:
        return bool(getattr(trainer, "is_global_zero", True))

    def _tb(self, trainer: Any) -> Any:
        """The Trainer's TensorBoardLogger experiment, else an own SummaryWriter (rank 0 only)."""
        w = self._tbw.get(trainer)
        self._writer, self.log_dir = w, self._tbw.log_dir or self.log_dir
        return w

    def _begin(self, stage: str, trainer: Any, batch: Any) -> None:
        if getattr(trainer, "sanity_checking", False) or self.session is None:
            return
        self.session.step_begin(stage, batch)

    def _end(self, stage: str, trainer: Any) -> None:
        s = self.session
        if s is None or getattr(trainer, "sanity_checking", False):
            return
        gstep = getattr(trainer, "global_step", None) if stage == "train" else None
        s.step_end(stage, gstep)
        w0 = time.perf_counter_ns()
        s.flush(record_work=False)
        done = s.consume()
        if self._rank_zero(trainer):
            self._log_steps(trainer, done)
        if done:  # attribution + logging of the profiled step(s): feeds the overhead and "auto" every-N
            s.add_work_ns(time.perf_counter_ns() - w0)

    # ------------------------------------------------------------------ Lightning hooks
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._begin("train", trainer, batch)

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self.session is not None:
            self.session.mark("(backward)", "bwd")

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        if self.session is not None:
            self.session.mark("(optimizer)", "other")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._end("train", trainer)

    def on_validation_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        self._begin("validate", trainer, batch)

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        self._end("validate", trainer)

    def on_test_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        self._begin("test", trainer, batch)

    def on_test_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        self._end("test", trainer)

    def on_predict_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                               dataloader_idx: int = 0) -> None:
        self._begin("predict", trainer, batch)

    def on_predict_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int,
                             dataloader_idx: int = 0) -> None:
        self._end("predict", trainer)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._epoch_end("train", trainer)

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if not getattr(trainer, "sanity_checking", False):
            self._epoch_end("validate", trainer)

    def on_test_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._epoch_end("test", trainer)

    def on_predict_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._epoch_end("predict", trainer)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.session is None:
            return
        try:
            self._finish(trainer, stage)
        finally:
            self.session.close()
            self._tbw.close()
            self._writer = None

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self.session is not None:
            self.session.abort_step()
            self.session.close()

    # ------------------------------------------------------------------ logging
    def _log_steps(self, trainer: Any, done: list[ProfiledStep]) -> None:
        w = self._tb(trainer)
        s = self.session
        if w is None or s is None:
            return
        for step in done:
            if not self.log_layers:
                break
            t_pre, e_pre, p_pre = _prefix("time", step.stage), _prefix("energy", step.stage), _prefix("power",
                                                                                                     step.stage)
            items: list[tuple[str, float]] = []
            for name, le in step.energy.layers.items():
                if le.time_s <= 0:
                    continue
                items.append((f"{t_pre}{name}_ms", le.time_s * 1e3))
                if math.isfinite(le.energy_j):
                    items.append((f"{e_pre}{name}_mj", le.energy_j * 1e3))
                    items.append((f"{p_pre}{name}_w", le.power_w))
            write_scalars(w, items, step.global_step)
        for stage, totals in s.totals.items():
            i = self._logged_totals.get(stage, 0)
            while i < len(totals) and math.isfinite(totals[i].energy_j):
                t = totals[i]
                write_scalars(w, [(f"{_prefix('time', stage)}step_ms", t.time_s * 1e3),
                                  (f"{_prefix('energy', stage)}step_j", t.energy_j),
                                  (f"{_prefix('power', stage)}step_w",
                                   t.energy_j / t.time_s if t.time_s > 0 else math.nan)], t.global_step)
                i += 1
            self._logged_totals[stage] = i

    def _reduce(self, trainer: Any, tot: EpochTotals) -> EpochTotals:
        """The epoch's totals over DDP ranks (a collective: every rank calls it): see :func:`combine_rank_totals`."""
        world = int(getattr(trainer, "world_size", 1) or 1)
        if world <= 1:
            return tot
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            msg = (f"world_size is {world} but no torch.distributed process group is initialised: the epoch totals are "
                   "this rank's alone")
            if msg not in self.session.notes:
                self.session.notes.append(msg)
            return tot
        parts: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(parts, (self._energy_domain(), tot.energy_j, tot.time_s, tot.samples))
        return combine_rank_totals(tot, parts)

    def _energy_domain(self) -> str:
        """This rank's energy domain, unique per host: ``<hostname>/<sensor's energy_domain>``; without a sensor
        (estimated energy) every rank is its own."""
        dev = self.session.device if self.session is not None else None
        if dev is None or not dev.has_sensor:
            return f"{socket.gethostname()}/model:{os.getpid()}"
        return f"{socket.gethostname()}/{dev.sensor.energy_domain}"

    def _epoch_end(self, stage: str, trainer: Any) -> None:
        s = self.session
        if s is None:
            return
        tot = s.epoch_end(stage)
        if tot is None:
            return
        tot = self._reduce(trainer, tot)
        if tot.ranks > 1 and s.epochs and s.epochs[-1].stage == stage:
            s.epochs[-1] = tot  # the reports (layers.json) show the totals over ranks too
        if not self._rank_zero(trainer):
            return
        w0 = time.perf_counter_ns()
        w = self._tb(trainer)
        self._log_steps(trainer, s.consume())
        if w is not None:
            e_pre = _prefix("energy", stage)
            items = [(f"{_prefix('time', stage)}epoch_s", tot.time_s), (f"{e_pre}epoch_j", tot.energy_j),
                     (f"{e_pre}j_per_sample", tot.j_per_sample),
                     (f"{_prefix('power', stage)}epoch_w", tot.energy_j / tot.time_s if tot.time_s > 0 else math.nan)]
            if tot.ranks > 1:
                items.append((f"{e_pre}epoch_domains", float(tot.domains)))
            q = tot.readings  # what the readings were worth: partial ones, rejected rail values, failed reads
            if q is not None:
                q_pre = _prefix("readings", stage)
                items += [(f"{q_pre}epoch_partial", float(q.partial)), (f"{q_pre}epoch_rejected", float(q.rejected)),
                          (f"{q_pre}epoch_failed", float(q.failed)), (f"{q_pre}epoch_samples", float(q.samples))]
            report = self._build_report()
            st = report.stages.get(stage)
            if st is not None and st.layers:
                i_pre = _prefix("intensity", stage)
                items += [(f"{i_pre}{ls.name}", ls.intensity) for ls in st.layers.values()
                          if ls.intensity is not None]
            write_scalars(w, items, tot.epoch)
            if st is not None and st.layers:
                if self.table:
                    w.add_text(f"energy/{stage}_layers", report.markdown(stage), tot.epoch)
                if self.figure:
                    self._add_figure(w, stage, st, tot.epoch)
        s.add_work_ns(time.perf_counter_ns() - w0, per_step=False)

    def _add_figure(self, w: Any, stage: str, st: Any, epoch: int) -> None:
        s = self.session
        roof, desc = s.roofline(s._last_mode)
        if roof is None:
            return
        total_t = sum(ls.time_s for ls in st.layers.values() if math.isfinite(ls.time_s))
        # a layer's time is placed on the roofline only when it was measured on that device (a Jetson); timings
        # from another machine (the twin, no sensor) leave the point on the roof, sized by its share of the time
        on_device = s.source == "measured" and s.device is not None and s.device.controller is not None
        pts = [{"name": ls.name, "kind": ls.kind, "flops": ls.flops, "bytes": ls.bytes,
                "time_s": ls.time_s if on_device else None,
                "time_share": ls.time_s / total_t if total_t > 0 else None, "energy_j": ls.energy_j}
               for ls in st.layers.values() if ls.flops and ls.bytes]
        try:
            from lightning_edge.roofline.plot import plot_rooflines

            fig = plot_rooflines(roof, layers=pts or None, title=f"{stage}: layers on the {desc}")
            w.add_figure(f"roofline/{stage}", fig, epoch, close=True)
        except Exception as exc:  # noqa: BLE001 - a figure must never stop training
            s.notes.append(f"roofline figure failed: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ the end of the run
    def _build_report(self) -> Any:
        from lightning_edge.profiling.report import ProfileReport

        s = self.session
        assert s is not None
        steps = {stage: [p.energy for p in lst] for stage, lst in s.profiled.items()}
        costs = {stage: s.costs_for(stage == "train") for stage in steps}
        totals = {}
        for stage, lst in s.totals.items():
            vals = [t.energy_j for t in lst if math.isfinite(t.energy_j)]
            labels = {t.label for t in lst if math.isfinite(t.energy_j)}
            totals[stage] = {"steps": len(lst), "energy_j": sum(vals) * len(lst) / len(vals) if vals else math.nan,
                             "time_s": sum(t.time_s for t in lst), "samples": sum(t.samples or 0 for t in lst),
                             "label": "/".join(sorted(labels)) if labels else ""}
        epochs = [{"stage": e.stage, "epoch": e.epoch, "energy_j": e.energy_j, "time_s": e.time_s,
                   "steps": e.steps, "samples": e.samples, "j_per_sample": e.j_per_sample, "method": e.label,
                   **({"ranks": e.ranks, "energy_domains": e.domains} if e.ranks > 1 else {}),
                   **({"readings": {"samples": e.readings.samples, "partial": e.readings.partial,
                                    "rejected": e.readings.rejected, "failed": e.readings.failed,
                                    "missing_rails": list(e.readings.missing_rails),
                                    "rejected_rails": list(e.readings.rejected_rails)}}
                      if e.readings is not None else {})}
                  for e in s.epochs]
        so = s.sampler_overhead()
        overhead = {"fraction": _finite_or_none(s.overhead_fraction()), "every_n_steps": s.every_n_steps,
                    "auto": s.auto, "excess_s": s.excess_ns / 1e9, "work_s": s.work_ns / 1e9,
                    "epoch_work_s": s.epoch_work_ns / 1e9, "setup_s": s.setup_ns / 1e9, "steps_s": s.run_ns / 1e9,
                    "sampler_cpu_percent": so.cpu_percent if so is not None else None}
        dev = s.device
        notes = list(dict.fromkeys([*(dev.notes if dev else []), *s.cost_notes, *s.notes]))
        mode = s._last_mode
        roof_desc = s.roofline(mode)[1] if dev is not None else s.roofline_desc
        return ProfileReport.build(steps, costs=costs, totals=totals, epochs=epochs,
                                   device=dev.describe() if dev else "", source=s.source, mode=mode,
                                   roofline=roof_desc, overhead=overhead, notes=notes)

    def _finish(self, trainer: Any, fn: str | None = None) -> None:
        s = self.session
        assert s is not None
        s.flush(wait=True)
        if not self._rank_zero(trainer) or not any(s.totals.values()):
            return
        self._log_steps(trainer, s.consume())
        report = self.report = self._build_report()
        self._tb(trainer)
        log_dir = Path(self.log_dir or self.log_dir_arg or ".")
        if self.write_report:
            report.write_csv(log_dir / "layers.csv")
            report.write_json(log_dir / "layers.json")
        if self.trace:
            self._write_trace(log_dir)
        if self._writer is not None:
            self._writer.flush()
        self.summary_text = report.summary(self.top, FN_STAGES.get(str(fn)) if fn else None)
        if self.print_summary:
            print(self.summary_text)

    def _write_trace(self, log_dir: Path) -> None:
        from lightning_edge.profiling.trace import chrome_trace, trace_path, write_trace

        s = self.session
        assert s is not None
        chosen = []
        for lst in s.profiled.values():
            chosen += [p for p in lst if p.timing.modules or p.timing.nodes][: self.trace_steps]
        if not chosen:
            return
        chosen.sort(key=lambda p: p.timing.t0_ns)
        power = None
        if s.sampler is not None:
            hold = s.sampler.hold_ns
            power = lambda a, b: s.sampler.samples(a - hold, b + hold)  # noqa: E731
        doc = chrome_trace(
            [(p.timing, p.energy, f"{p.stage} step {p.index}") for p in chosen], power=power,
            costs=lambda t: s.costs_for(t.has_backward),
            metadata={"device": s.device.describe() if s.device else "", "source": s.source,
                      "mode": s._last_mode, "method": "lightning_edge.EnergyProfiler"})
        if self.trace_file is None:
            self.trace_file = trace_path(log_dir)
        write_trace(doc, self.trace_file)


def _finite_or_none(x: float) -> float | None:
    return x if x is not None and math.isfinite(x) else None
