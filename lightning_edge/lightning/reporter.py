"""``EnergyReporter``: everything ``EnergyProfiler`` does, without Lightning (the callback is thin glue over it, as
Lightning's ``ThroughputMonitor`` is over ``Throughput``).

A plain loop drives it the way the callback does::

    from lightning_edge.lightning.reporter import EnergyReporter

    rep = EnergyReporter(model, device="sim:orin-agx", log_dir="runs/energy")
    rep.begin_run("fit", expected={"train": len(loader)})
    for i, batch in enumerate(loader):
        rep.step_begin("train", batch, global_step=i)
        loss = loss_fn(model(batch)); rep.mark("(backward)", "bwd"); loss.backward()
        rep.mark("(optimizer)"); opt.step(); opt.zero_grad()
        rep.step_end("train", global_step=i)
    rep.epoch_end("train")
    report = rep.finish("fit")          # TensorBoard, layers.csv/json, the trace, the printed summary
    rep.close()

It owns the :class:`~lightning_edge.lightning.session.EnergySession` (steps, attribution) and subscribes to it: every
resolved step and every closed epoch goes to TensorBoard and to the Trainer's other loggers
(:class:`~lightning_edge.lightning.tb.TrainerWriter`: the host's ``TensorBoardLogger`` when ``begin_run`` is given a
Trainer, else its own ``SummaryWriter`` under ``log_dir``; ``CSVLogger``, W&B, MLflow through their
``log_metrics``), every attributed profiled step's layers to TensorBoard. It makes the reports (one section per power
mode: the mode the run ended in first) and owns the overhead budget it spends
(:class:`~lightning_edge.lightning.budget.OverheadBudget`, one object handed to the session and its scheduler;
every method of the reporter charges its own time to it, so the overhead it reports is measured, all of it).
"""

from __future__ import annotations

import math
import os
import re
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from lightning_edge.lightning.budget import OverheadBudget
from lightning_edge.lightning.config import TB_LAYERS, ProfilerConfig, configure
from lightning_edge.lightning.session import EnergySession, Epoch, ProfiledStep
from lightning_edge.lightning.steps import TUNER
from lightning_edge.lightning.tb import TensorBoardWriter, TrainerWriter
from lightning_edge.profiling.report import ENDED_IN, TRAINED_IN, ModeReport, RunOverhead, mode_report
from lightning_edge.records import Measurement, merge, over_budget

if TYPE_CHECKING:
    from lightning.pytorch import Trainer
    from torch import nn

    from lightning_edge.cost.types import LayerCost
    from lightning_edge.energy.base import LayerEnergy
    from lightning_edge.profiling.attribution import LayerStats
    from lightning_edge.profiling.report import ProfileReport, StageReport

__all__ = ["EnergyReporter", "ReportWriteWarning", "TB_LAYERS", "region_tag", "write_scalars"]


class ReportWriteWarning(UserWarning):
    """A report file or the TensorBoard run could not be written (a full or read-only disk): the run went on, the
    report is kept in memory (``EnergyProfiler.report``)."""
#: the stages a Trainer entry point runs (for the end-of-run summary)
FN_STAGES = {"fit": ("train", "validate"), "validate": ("validate",), "test": ("test",), "predict": ("predict",)}


def write_scalars(writer: TensorBoardWriter, items: list[tuple[str, float]], step: int,
                  descriptions: dict[str, str] | None = None) -> None:
    """Scalars at one step, as ``add_scalar`` writes them (``simple_value`` per tag, same run, same tags), but in one
    event: ~200 per-layer values cost about 1 ms instead of about 20 ms of ``add_scalar`` calls. ``descriptions``:
    ``{tag: text}`` shown on the card (TensorBoard reads a tag's description from its first event: pass it once).
    Falls back to ``add_scalar`` for writers without a file writer (never ``add_scalars``, which makes a run per
    key)."""
    items = [(t, float(v)) for t, v in items if v is not None and math.isfinite(v)]
    if not items:
        return
    descriptions = descriptions or {}
    get = getattr(writer, "_get_file_writer", None)
    if get is not None:
        try:
            from tensorboard.compat.proto.summary_pb2 import Summary
            from tensorboard.plugins.scalar.metadata import create_summary_metadata

            def value(t: str, v: float) -> Summary.Value:
                d = descriptions.get(t)
                if d is None:
                    return Summary.Value(tag=t, simple_value=v)
                return Summary.Value(tag=t, simple_value=v, metadata=create_summary_metadata(t, d))

            summary = Summary(value=[value(t, v) for t, v in items])
            get().add_summary(summary, int(step))
            return
        except Exception:  # noqa: BLE001 - any other writer: the public API
            pass
    for t, v in items:
        writer.add_scalar(t, v, step)


class EnergyReporter:
    """Per-layer time and energy of a model's steps, written to TensorBoard and reports (module docstring).

    Arguments are those of :class:`~lightning_edge.lightning.EnergyProfiler` (``budget``: an
    :class:`~lightning_edge.lightning.budget.OverheadBudget` to spend; default: one with ``overhead_target`` as its
    fraction). Results: ``report`` (the whole session), ``call_report`` (the last run), ``summary_text``,
    ``overhead`` (the last run's, measured), ``log_dir``, ``trace_file``, ``session``.
    """

    def __init__(self, model: nn.Module, device: Any = "auto", config: ProfilerConfig | None = None, *,
                 budget: OverheadBudget | None = None, **options: Any) -> None:
        clock = {"clock_ns": options.pop("clock_ns")} if "clock_ns" in options else {}
        cfg = self.config = configure(config, ProfilerConfig, **options)
        self.budget = budget if budget is not None else OverheadBudget(cfg.overhead_target, **clock)
        self.session = EnergySession(model, device, cfg, budget=self.budget, **clock)
        self.session.subscribe(on_step=self._on_step, on_profiled=self._log_profiled)
        self.log_dir: str | None = None
        self.report: ProfileReport | None = None
        self.call_report: ProfileReport | None = None
        self.trace_file: Path | None = None
        self.summary_text: str | None = None
        self.overhead = RunOverhead()  # the last run's, measured at its end
        self.rank_zero = True  # only rank 0 writes (the glue says which rank this is)
        self.log_every_n_steps = 50  # a plain step's totals are logged every N batches (the Trainer's own)
        self._host: Trainer | None = None  # where TrainerWriter looks for loggers
        self._tbw = TrainerWriter("energy", cfg.log_dir)
        self._writer: TensorBoardWriter | None = None
        self._cum_j: dict[str, float] = {}  # stage -> the energy of its steps so far (cumulative scalar)
        self._last_gstep: dict[str, int] = {}
        self._tb_names: dict[str, list[str]] = {}  # stage -> the layers with per-layer scalars
        self._described: set[str] = set()
        self._layout_written: str | None = None
        self._call: dict[str, Any] | None = None
        self.write_errors: list[str] = []  # files (or the TensorBoard run) that could not be written, and why
        self.partial_run: str | None = None  # what stopped the run early (an exception, Ctrl-C), when one did
        self._warned_write = False
        self._tb_failed = False
        self._budget_w: float | None = None  # the power budget of a tuner of the same model, as last seen

    @property
    def model(self) -> nn.Module:
        return self.session.model

    def note(self, msg: str) -> None:
        """A note for the reports and the summary (once)."""
        if msg not in self.session.notes:
            self.session.notes.append(msg)

    # ------------------------------------------------------------------ a run
    def begin_run(self, fn: str = "fit", host: Trainer | None = None, *, expected: dict[str, int | None] | None = None,
                  rank_zero: bool = True, log_every_n_steps: int | None = None) -> None:
        """A run starts (a Trainer call: ``fn`` is ``fit``, ``validate``, ``test`` or ``predict``). ``host``: where a
        TensorBoard logger may be found (a Trainer; None: an own ``SummaryWriter``); ``expected``: batches per stage,
        when known (:meth:`expect` later works too)."""
        s = self.session
        self._host = host
        self.rank_zero = bool(rank_zero)
        if log_every_n_steps is not None:
            self.log_every_n_steps = int(log_every_n_steps)
        s.new_run()  # the budget starts its run here: what follows is charged to it
        with self.budget.spend("steps"):
            # what this run covers: its summary counts only what came after this mark
            self._call = {"fn": fn, "gstep0": None,  # set at the first batch (after a checkpoint loads)
                          "profiled": {k: len(v) for k, v in s.profiled.items()},
                          "totals": {k: len(v) for k, v in s.totals.items()}, "epochs": len(s.epochs)}
            for stage, n in (expected or {}).items():
                s.expect(stage, n)
            s.start()

    def expect(self, stage: str, batches: int | None) -> None:
        """How many batches of ``stage`` this run has (None: unknown): what the budget's estimate of the run is
        made of."""
        self.session.expect(stage, batches)

    def expects(self, stage: str) -> bool:
        """Whether this run's length of ``stage`` was announced (known or not)."""
        return stage in self.session.expected_batches

    def step_begin(self, stage: str, batch: Any = None, global_step: int | None = None) -> bool:
        """A step of ``stage`` starts; True when it is profiled per layer."""
        with self.budget.spend("steps"):
            if stage == "train" and self._call is not None and self._call["gstep0"] is None:
                self._call["gstep0"] = int(global_step or 0)
            return self.session.step_begin(stage, batch)

    def mark(self, region: str, phase: str = "other") -> None:
        """Time outside every module now belongs to ``region`` (``"(backward)"``, ``"(optimizer)"``)."""
        s = self.session
        if s.timer.active:  # only a profiled step has regions: the other steps pay nothing
            with self.budget.spend("steps"):
                s.mark(region, phase)

    def step_end(self, stage: str, global_step: int | None = None) -> Measurement | None:
        """The step ends: the session measures it and publishes it (to TensorBoard and the loggers, through this
        reporter's subscription) as soon as its numbers are known; returns its Measurement when that is now."""
        with self.budget.spend("steps"):
            return self.session.step_end(stage, global_step)

    def epoch_end(self, stage: str, combine: Callable[[Epoch], Epoch] | None = None) -> Epoch | None:
        """Close the stage's epoch and log its totals; ``combine``: a function of the epoch's
        :class:`~lightning_edge.lightning.session.Epoch` returning the totals over DDP ranks (the glue's)."""
        s = self.session
        with self.budget.spend("steps"):
            ep = s.epoch_end(stage)
            if ep is None:
                return None
            if combine is not None:
                ep = combine(ep)
                if ep.ranks > 1 and s.epochs and s.epochs[-1].stage == stage:
                    s.epochs[-1] = ep  # the reports (layers.json) show the totals over ranks too
            self._log_epoch(stage, ep)
            return ep

    def abort(self, reason: str | None = None) -> ProfileReport | None:
        """An exception in the run (Ctrl-C included): the step in progress is dropped; with ``reason`` every step
        measured so far is reported (layers.csv, layers.json, the summary), labelled a partial run (a note saying
        what stopped it); then hooks are removed and the device released. Returns that report (None without
        ``reason``, or when nothing was measured). Never raises: the run's own exception is what the user sees."""
        self.session.abort_step()
        report = None
        if reason:
            self.partial_run = reason
            self.session.notes.append(f"PARTIAL RUN: stopped by {reason}; the layers and totals are those of the "
                                      "steps measured before it")
            try:
                report = self.finish()
            except Exception as exc:  # noqa: BLE001 - the run's own exception matters more than its report
                warnings.warn(f"lightning_edge EnergyProfiler: the partial report of the run stopped by {reason} "
                              f"could not be made ({type(exc).__name__}: {exc})", ReportWriteWarning, stacklevel=2)
        self.session.close()
        return report

    def _write_failed(self, path: str | os.PathLike[str] | None, exc: OSError) -> None:
        """A report file or the TensorBoard run could not be written: one warning for the run (naming the path and
        why), the report kept in memory; never an error out of the user's run."""
        why = exc.strerror or str(exc)
        self.write_errors.append(f"{path}: {why}")
        self.note(f"could not write {path} ({why}): kept in memory (EnergyProfiler.report)")
        if self._warned_write:
            return
        self._warned_write = True
        warnings.warn(f"lightning_edge EnergyProfiler: could not write {path} ({why}); training goes on and the "
                      "energy report is kept in memory: EnergyProfiler.report (.write_csv(path), .write_json(path) "
                      "save it elsewhere), or pass log_dir= on a disk with room", ReportWriteWarning, stacklevel=2)

    def _save(self, path: Path, write: Callable[[Path], Path | None]) -> None:
        try:
            write(path)
        except OSError as exc:
            self._write_failed(path, exc)

    def close(self) -> None:
        """Release the device and close an own TensorBoard writer (results stay available)."""
        self.session.close()
        self._tbw.close()
        self._writer = None

    # ------------------------------------------------------------------ TensorBoard
    def _tb(self) -> TensorBoardWriter | None:
        """The host's TensorBoardLogger experiment, else an own SummaryWriter (rank 0 only)."""
        if not self.rank_zero:
            return None
        w = self._tbw.get(self._host)
        self._writer, self.log_dir = w, self._tbw.log_dir or self.log_dir
        if w is None and self._tbw.error is not None and not self._tb_failed:
            self._tb_failed = True
            self._write_failed(self._tbw.error[0], self._tbw.error[1])
        if w is not None and self._layout_written != self.log_dir:
            self._write_layout(w)
        return w

    def _labels(self) -> tuple[str, str, str]:
        """Tag suffixes of the first path component ``(time, energy and power, what the energy is)``: ``_sim`` for
        the twin's numbers, ``_estimated`` for the roofline model's (no sensor), none for measured ones
        (:func:`tag`)."""
        s = self.session
        src = s.source
        e = {"simulated": "_sim", "model": "_estimated"}.get(src, "")
        t = "_sim" if s.twin_times else ""
        return t, e, src

    def _describe(self, tag: str, what: str) -> str | None:
        """The card's description, once per tag: what it shows, its unit, and whether it is simulated."""
        if tag in self._described:
            return None
        self._described.add(tag)
        s = self.session
        src = s.source
        head = tag.split("/", 1)[0]
        if "_host" in head:
            how = "measured on this machine (the host that ran the training), not on the simulated device"
        elif "_sim" in head:
            times = "time, power and energy" if s.twin_times else "power and energy"
            how = f"SIMULATED: {times} of a Jetson AGX Orin (the twin's model of this workload) in mode {s.mode}"
        elif "_estimated" in head:
            how = "ESTIMATED by the roofline model (no power sensor) from this machine's timings"
        elif "time_ms" in tag:
            how = "measured on this machine"
        else:
            how = f"measured ({src}) with {s.device.describe() if s.device else 'the sensor'}"
        return f"{what}. {how}. lightning_edge EnergyProfiler."

    def _scalars(self, w: TensorBoardWriter, items: list[tuple[str, float, str]], step: int) -> None:
        desc = {}
        for tag, _, what in items:
            d = self._describe(tag, what)
            if d is not None:
                desc[tag] = d
        write_scalars(w, [(t, v) for t, v, _ in items], step, desc)

    def _write_layout(self, w: TensorBoardWriter) -> None:
        """The custom-scalars layout (once per run): step, cumulative and epoch energy, step time, the top layers'
        energy and time (one line per layer: TensorBoard colours a run's lines alike and tells them apart by marker
        and by the tag in the chart's *Matches* list), the rows outside the layers on charts of their own."""
        self._layout_written = self.log_dir
        self._described = set()  # a new run: its cards get their descriptions again
        tp, ep, _ = self._labels()
        kind = {"_sim": " (simulated)", "_estimated": " (estimated)"}.get(ep, "")
        e, t = re.escape(f"energy_j{ep}"), re.escape(f"time_ms{tp}")
        layout = {f"lightning_edge energy{kind}": {
            "step energy (J)": ["Multiline", [rf"^{e}/[^/]+/step$"]],
            "cumulative energy (J)": ["Multiline", [rf"^{e}/[^/]+/cumulative$"]],
            "energy per sample (J)": ["Multiline", [rf"^{e}/[^/]+/per_sample$"]],
            "epoch energy (J)": ["Multiline", [rf"^{e}/[^/]+/epoch$"]],
            "step time (ms)": ["Multiline", [rf"^{t}/[^/]+/step$"]],
        }, f"lightning_edge layers{kind}": {
            "train: top layers, energy per step (J)": ["Multiline", [rf"^{e}_layer/train/"]],
            "train: outside the layers, energy per step (J)": ["Multiline", [rf"^{e}_region/train/"]],
            "train: top layers, self time per step (ms)": ["Multiline", [rf"^{t}_layer/train/"]],
            "train: outside the layers, time per step (ms)": ["Multiline", [rf"^{t}_region/train/"]],
            "validate: top layers, energy per step (J)": ["Multiline", [rf"^{e}_layer/validate/"]],
        }}
        try:
            w.add_custom_scalars(layout)
        except Exception as exc:  # noqa: BLE001 - a writer without the plugin
            self.note(f"TensorBoard custom scalars layout not written: {exc}")

    def _log_profiled(self, done: list[ProfiledStep]) -> None:
        """The per-layer scalars of attributed profiled steps (their step totals go with :meth:`_on_step`): the
        top ``tb_layers`` layers of the stage (``..._layer/<stage>/<layer>``) and every row outside the layers
        (``..._region/<stage>/(optimizer)``), each under its own name."""
        if not done or not self.config.log_layers:
            return
        w = self._tb()
        if w is None:
            return
        s = self.session
        tp, ep, _ = self._labels()
        for step in done:
            st = step.stage
            names = self._tb_names.get(st)
            if names is None:  # fixed per stage: the cards stay the same through the run
                ranked = sorted(step.energy.layers.values(), key=lambda le: -le.energy_j
                                if math.isfinite(le.energy_j) else 0.0)
                layers = [le.name for le in ranked if le.time_s > 0 and not _is_region(le)]
                regions = [le.name for le in ranked if le.time_s > 0 and _is_region(le)]
                names = self._tb_names[st] = [*layers[: None if self.config.log_layers == "all" else self.config.tb_layers],
                                              *regions]
            items: list[tuple[str, float, str]] = []
            for name in names:
                le = step.energy.layers.get(name)
                if le is None:
                    continue
                k = "_region" if _is_region(le) else "_layer"
                what = "a row outside the layers (its time is what no layer covers)" if k == "_region" else "a layer"
                leaf = region_tag(name) if k == "_region" else name
                items.append((f"time_ms{tp}{k}/{st}/{leaf}", le.time_s * 1e3,
                              f"self time of {name} per step, ms ({what})"))
                items.append((f"energy_j{ep}{k}/{st}/{leaf}", le.energy_j,
                              f"energy of {name} per step, J ({what})"))
                if self.config.layer_power:
                    items.append((f"power_w{ep}{k}/{st}/{leaf}", le.power_w, f"mean power of {name}, W"))
                # this machine's time of a row the twin models alone ((loss), (idle and CPU)) is 0: not written
                if s.twin_times and le.host_s is not None and math.isfinite(le.host_s) and le.host_s > 0:
                    items.append((f"time_ms_host{k}/{st}/{leaf}", le.host_s * 1e3,
                                  f"self time of {name} on this machine, ms"))
            self._scalars(w, items, step.global_step)

    def _on_step(self, stage: str, index: int, global_step: int, m: Measurement,
                 profiled: ProfiledStep | None) -> None:
        """A resolved step (the session's subscription): a profiled step's totals always, a plain step's every
        ``log_every_n_steps`` batches (as the Trainer writes its own metrics), to TensorBoard and to the Trainer's
        other loggers, with the stage's energy so far (``.../cumulative``)."""
        if stage == "train":
            self._power_budget_w()
        run_j = self._cum_j.get(stage, 0.0) + (m.energy_j if m.has_power else 0.0)
        self._cum_j[stage] = run_j
        self._last_gstep[stage] = int(global_step)
        every = self.log_every_n_steps
        if not (profiled is not None or (every > 0 and (index + 1) % every == 0)) or not self.rank_zero:
            return
        tp, ep, _ = self._labels()
        items = [(f"energy_j{ep}/{stage}/step", m.energy_j, f"{stage} step energy, J"),
                 (f"energy_j{ep}/{stage}/cumulative", run_j,
                  f"{stage} energy of every step so far in this session, J"),
                 (f"time_ms{tp}/{stage}/step", m.time_s * 1e3, f"{stage} step time, ms"),
                 (f"power_w{ep}/{stage}/step", m.power_w, f"{stage} step mean power, W")]
        if m.simulated and m.host_time_s:
            items.append((f"time_ms_host/{stage}/step", m.host_time_s * 1e3, f"{stage} step time on this machine, ms"))
        self._write(items, int(global_step))

    def _write(self, items: list[tuple[str, float, str]], step: int, tb_step: int | None = None) -> None:
        """Scalars to TensorBoard (with their descriptions, at ``tb_step``, default ``step``) and through the
        Trainer's other loggers (at ``step``)."""
        if not self.rank_zero:
            return
        if self.config.loggers and self._host is not None:
            self._tbw.log_metrics(self._host, {t: v for t, v, _ in items}, step)
        w = self._tb()
        if w is not None:
            self._scalars(w, items, step if tb_step is None else tb_step)

    def _log_epoch(self, stage: str, ep_: Epoch) -> None:
        """The epoch's totals: energy, energy per sample, time, mean power (over every mode it ran in: an epoch is a
        total), what the readings were worth; TensorBoard at the epoch's index, the loggers at its last step."""
        s = self.session
        tp, ep, _ = self._labels()
        tot = ep_.total
        items = [(f"energy_j{ep}/{stage}/epoch", tot.energy_j, f"{stage} epoch energy, J"),
                 (f"energy_j{ep}/{stage}/per_sample", ep_.j_per_sample, f"{stage} energy per sample, J"),
                 (f"time_ms{tp}/{stage}/epoch", tot.time_s * 1e3, f"{stage} epoch time, ms"),
                 (f"power_w{ep}/{stage}/epoch", tot.power_w, f"{stage} epoch mean power, W")]
        if ep_.ranks > 1:
            items.append((f"energy_j{ep}/{stage}/epoch_domains", float(ep_.domains),
                          "energy domains summed in the epoch's energy (count)"))
        q = tot.readings  # what the readings were worth: partial ones, rejected rail values, failed reads
        if q is not None:
            items += [(f"readings/{stage}/epoch_partial", float(q.partial),
                       f"{stage}: power readings that missed a rail or a read (count)"),
                      (f"readings/{stage}/epoch_rejected", float(q.rejected),
                       f"{stage}: rail values rejected as implausible (count)"),
                      (f"readings/{stage}/epoch_failed", float(q.failed), f"{stage}: failed sensor reads (count)"),
                      (f"readings/{stage}/epoch_samples", float(q.samples), f"{stage}: power readings (count)")]
        if s.twin_times and tot.host_time_s:
            items.append((f"time_ms_host/{stage}/epoch", tot.host_time_s * 1e3,
                          f"{stage} epoch time on this machine, ms"))
        self._write(items, self._last_gstep.get(stage, ep_.epoch), tb_step=ep_.epoch)

    # ------------------------------------------------------------------ extras, within the budget
    def _extra(self, option: Literal["figure", "trace"], kind: str, n: int, what: str,
               keep_reports: bool = True) -> bool:
        """Whether the ``option`` setting (``figure`` or ``trace``) lets ``what`` (``n`` of ``kind``) be made now:
        always (True), never (False), or ``"auto"``: when its expected cost fits what is left of the run's budget,
        the reports kept; a note says why not."""
        setting = self.config.figure if option == "figure" else self.config.trace
        if setting is not True and setting != "auto":
            return False
        b = self.budget
        need_s = b.need_s(kind, n)
        if setting is True or b.afford(need_s, b.need_s("reports") if keep_reports else 0.0):
            return True
        verb = "drawn" if option == "figure" else "written"
        self.note(f"{what} not {verb}: about {need_s:.2g} s, over what is left of this run's overhead budget "
                  f"({b.allowance_s():.2g} s: the larger of {100 * b.fraction:.3g} % of {b.run_s():.3g} s and "
                  f"{b.floor_s:g} s; {b.spent_s():.2g} s spent) (EnergyProfiler({option}=True) always "
                  f"{'draws' if option == 'figure' else 'writes'} them; layers.csv has every layer)")
        return False

    def _figures(self, w: TensorBoardWriter, report: ProfileReport, stages: list[str], step: int) -> None:
        """Each stage's layer bar chart (Pillow, some 20 ms) and roofline figure (matplotlib, about 0.5 s, more
        the first time in a process), when ``figure`` allows (see :meth:`_extra`); the bar chart first."""
        todo = [st for st in stages if report.stages.get(st) is not None and report.stages[st].layers]
        if not self.config.figure or not todo:
            return
        b = self.budget
        # the bar chart (some 20-40 ms) is part of what the budget keeps for the reports (OverheadBudget.need_s):
        # a run that got its profiled step gets its chart, short runs included
        if self._extra("figure", "bars", len(todo), "layer bar charts", keep_reports=False):
            f0 = b.clock_ns()
            with b.spend("bars"):
                for st in todo:
                    self._add_bars(w, st, report.stages[st], step)
            b.learn("bars", (b.clock_ns() - f0) / 1e9, len(todo))
        if not self._extra("figure", "figure", len(todo), "roofline figures"):
            return
        import sys

        warm = "matplotlib.pyplot" in sys.modules
        f0 = b.clock_ns()
        with b.spend("figure"):
            for st in todo:
                self._add_figure(w, st, report.stages[st], step)
        if warm:  # the first figure in a process pays matplotlib's import, budgeted apart
            b.learn("figure", (b.clock_ns() - f0) / 1e9, len(todo))

    def _add_figure(self, w: TensorBoardWriter, stage: str, st: StageReport, epoch: int) -> None:
        s = self.session
        roof, desc = s.roofline(st.headline.mode if st.headline is not None else s.mode)
        if roof is None:
            return
        total_t = sum(ls.time_s for ls in st.layers.values() if math.isfinite(ls.time_s))
        # a layer's time is placed on the roofline when it is the device's: measured on that device (a Jetson) or
        # the twin's model of it; timings from another machine (no sensor) leave the point on the roof, sized by
        # its share of the time
        on_device = s.twin_times or (s.source == "measured" and s.device is not None and
                                     s.device.controller is not None)
        pts = [{"name": ls.name, "kind": ls.kind, "flops": ls.flops, "bytes": ls.bytes,
                "time_s": ls.time_s if on_device and ls.time_s > 0 else None,
                "time_share": ls.time_s / total_t if total_t > 0 else None, "energy_j": ls.energy_j}
               for ls in st.layers.values() if ls.flops and ls.bytes]
        try:
            from lightning_edge.roofline.plot import plot_rooflines

            fig = plot_rooflines(roof, layers=pts or None, title=f"{stage}: layers on the {desc}",
                                 times="SIMULATED (the twin's model)" if s.twin_times else None)
            w.add_figure(f"roofline/{stage}", fig, epoch, close=True)
        except Exception as exc:  # noqa: BLE001 - a figure must never stop training
            self.note(f"roofline figure failed: {type(exc).__name__}: {exc}")

    def _add_bars(self, w: TensorBoardWriter, stage: str, st: StageReport, epoch: int) -> None:
        """Where the stage's step energy goes, as one image (``layers/<stage>``, 1200 px wide, labelled simulated
        or not): the step split into the layers and each row outside them, then the top layers by energy, named,
        with their time. Drawn with Pillow (some 20-40 ms where a matplotlib figure takes about half a second)."""
        s = self.session
        if not any(math.isfinite(ls.energy_j) and ls.energy_j > 0 for ls in st.layers.values()):
            return
        try:
            import numpy as np

            from lightning_edge.profiling.report import energy_chart

            kind = {"simulated": "SIMULATED (Jetson AGX Orin twin)",
                    "model": "ESTIMATED (roofline model, no sensor)"}.get(s.source, "measured")
            tkind = "SIMULATED (Orin twin)" if s.twin_times else "measured on this machine"
            rows = [(ls.name, _is_region(ls), ls.energy_j, ls.time_s * 1e3) for ls in st.layers.values()]
            m0 = st.headline
            mode = m0.mode if m0 is not None else s.mode
            how = (f"{m0.role} mode {mode}: the mean of {m0.profiled.steps} profiled step(s)"
                   + (" scaled to the mode's step" if m0.scaled else "")) if m0 is not None else \
                f"mode {mode}: the mean of {st.steps.steps} profiled step(s)"
            img = energy_chart(rows, title=f"{stage}: where a step's energy goes, {kind}",
                               subtitle=f"per step in {how}; energy {kind}; times {tkind}",
                               top=max(self.config.top, 15))
            w.add_image(f"layers/{stage}", np.asarray(img), epoch, dataformats="HWC")
        except Exception as exc:  # noqa: BLE001
            self.note(f"layer bar chart failed: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ the end of the run
    def _build_report(self, call: dict[str, Any] | None = None, global_step: int | None = None) -> ProfileReport:
        """The report over the whole session, or (``call``: a mark from :meth:`begin_run`) over one run: per stage,
        one section per power mode (:meth:`_modes`), totals over every step, the epochs."""
        from lightning_edge.profiling.report import ProfileReport

        s = self.session
        p0 = (call or {}).get("profiled", {})
        t0 = (call or {}).get("totals", {})
        e0 = (call or {}).get("epochs", 0)
        profiled = {stage: lst[p0.get(stage, 0):] for stage, lst in s.profiled.items()}
        all_totals = {stage: lst[t0.get(stage, 0):] for stage, lst in s.totals.items()}
        steps = {stage: [p.energy for p in lst] for stage, lst in profiled.items() if lst or all_totals.get(stage)}
        costs = {stage: s.costs_for(stage == "train") for stage in steps}
        budget_w = self._power_budget_w()
        totals, modes = {}, {}
        mode_notes: list[str] = []
        for stage, lst in all_totals.items():
            if not lst:
                continue
            m = merge(lst, mode=None)
            labels = {t.shown_label for t in lst if t.has_power}
            totals[stage] = {"steps": m.steps, "energy_j": m.energy_j, "time_s": m.time_s, "samples": m.samples or 0,
                             "label": "/".join(sorted(labels)) if labels else "",
                             "min_batches": s.schedule.warmup_steps + 1}
            need = s.schedule.stages[stage].min_batches if stage in s.schedule.stages else 0
            sst = s.schedule.stages.get(stage)
            if sst is not None and sst.mode_blocked and not profiled.get(stage) and not need and \
                    len(lst) > s.schedule.warmup_steps:
                # not a short run: the power mode kept changing (a tuner profiling modes), so no step had the warm-up
                # steps in one mode and the settled power a profiled step needs
                totals[stage]["min_batches"] = None
                mode_notes.append(
                    f"[{stage}] 0 of {len(lst)} batches profiled per layer, not because the run is short: the power "
                    f"mode changed while they ran ({sst.mode_blocked} steps due for profiling came right after a "
                    f"change; a profiled step needs {s.schedule.warmup_steps} steps in one mode and its power "
                    "settled). Profile in a fixed mode, or after the tuner has chosen one")
            if need:
                totals[stage].update(min_batches=need, min_reason="to pay for one profiled step within the overhead "
                                     "budget: see the notes")
            if call is not None and stage == "train" and global_step is not None:
                totals[stage]["optimizer_steps"] = int(global_step) - (call.get("gstep0") or 0)
            modes[stage] = self._modes(stage, t0.get(stage, 0), lst, profiled.get(stage, []), costs.get(stage))
            if budget_w is not None:  # (the windows whose profile was over it: the tuner's summary says)
                totals[stage]["over_budget"] = over_budget(lst, budget_w)
        epochs = [{"stage": e.stage, "epoch": e.epoch, "energy_j": e.energy_j, "time_s": e.time_s,
                   "steps": e.steps, "samples": e.samples, "j_per_sample": e.j_per_sample, "method": e.label,
                   **({"host_time_s": e.total.host_time_s} if e.total.simulated else {}),
                   "modes": [{k: v for k, v in r.items() if k != "measurement"} for r in e.runs],
                   **({"ranks": e.ranks, "energy_domains": e.domains} if e.ranks > 1 else {}),
                   **({"readings": {"samples": e.readings.samples, "partial": e.readings.partial,
                                    "rejected": e.readings.rejected, "failed": e.readings.failed,
                                    "missing_rails": list(e.readings.missing_rails),
                                    "rejected_rails": list(e.readings.rejected_rails),
                                    "coverage": e.readings.coverage}}
                      if e.readings is not None else {})}
                  for e in s.epochs[e0:]]
        dev = s.device
        notes = list(dict.fromkeys([*(dev.notes if dev else []), *s.cost_notes, *s.notes, *mode_notes]))
        mode = s.mode
        roof_desc = s.roofline(mode)[1] if dev is not None else s.roofline_desc
        return ProfileReport.build(steps, costs=costs, totals=totals, epochs=epochs, modes=modes,
                                   device=dev.describe() if dev else "", source=s.source, mode=mode,
                                   roofline=roof_desc, overhead=self._overhead(), notes=notes,
                                   twin_times=s.twin_times)

    def _modes(self, stage: str, first: int, steps: list[Measurement], profiled: list[ProfiledStep],
               costs: Mapping[str, LayerCost] | None) -> list[ModeReport]:
        """The stage's steps by power mode: every step of a mode outside a tuner's profiling windows is one group
        (``trained in``), each window its own; the group of the last step first (``ended in``), then the modes
        trained in, then the windows. Each group's layers are its profiled steps' (on the twin scaled to the group's
        mean step: the twin's model of that mode). Never a mean over modes."""
        windows = self.session.windows.get(stage, {})
        groups: dict[tuple, dict] = {}
        for i, m in enumerate(steps, start=first):
            key = (str(m.mode) if m.mode is not None else "unknown", windows.get(i))
            groups.setdefault(key, {"first": i, "ms": [], "prof": []})["ms"].append(m)
        for p in profiled:
            key = (p.mode or "unknown", windows.get(p.index))
            if key in groups:
                groups[key]["prof"].append(p.energy)
        if not groups:
            return []
        last = next((k for k in reversed(list(groups)) if k[1] is None), None)
        last_step = (str(steps[-1].mode) if steps[-1].mode is not None else "unknown",
                     windows.get(first + len(steps) - 1))
        head = last_step if last_step[1] is not None else last
        order = [head] + [k for k in groups if k != head and k[1] is None] + [k for k in groups
                                                                              if k != head and k[1] is not None]
        out = []
        for k in order:
            g = groups[k]
            role = (ENDED_IN if k[1] is None else f"{k[1]}, ended in") if k == head else (k[1] or TRAINED_IN)
            out.append(mode_report(k[0], role, g["first"], g["ms"], g["prof"], costs,
                                   scale=all(m.simulated for m in g["ms"])))
        return out

    def _power_budget_w(self) -> float | None:
        """The power budget a tuner of the same model keeps, or kept at the run's last step (None: no tuner)."""
        for t in self.session.loop.attached(TUNER):
            w = getattr(t, "power_budget_w", None)
            if w is not None:
                self._budget_w = float(w)
        return self._budget_w

    def _overhead(self) -> RunOverhead:
        """What this run spent, measured, from the budget (every part charges it)."""
        s, b = self.session, self.budget
        sch = s.schedule
        so = s.sampler_overhead()
        wall = b.elapsed_s()
        spent = b.spent_s()
        return RunOverhead(
            fraction=_finite_or_none(sch.overhead_fraction()), every_n_steps=sch.every_n_steps, auto=sch.auto,
            excess_s=b.spent_s("profiled", "capture"), work_s=b.spent_s("attribution"),
            epoch_work_s=b.spent_s("reports", "bars", "figure", "trace"), setup_s=b.spent_s("analysis"),
            steps_s=sch.run_ns / 1e9, sampler_cpu_percent=so.cpu_percent if so is not None else None,
            run_wall_s=wall, run_overhead_s=spent, run_fraction=spent / max(wall - spent, 1e-9) if wall > 0 else None,
            analysis_s=b.spent_s("analysis"), sampler_cpu_s=(so.cpu_fraction * wall) if so is not None else None)

    def finish(self, fn: str | None = None, global_step: int | None = None) -> ProfileReport | None:
        """The end of the run: the attributed steps logged, the table, the reports (layers.csv, layers.json), what
        the budget leaves room for (the layer bar chart, the Chrome trace, the roofline figure) and the summary.
        Returns the run's report (None on other ranks, or when the run had no step)."""
        s, b = self.session, self.budget
        with b.spend("reports"):
            r0 = b.clock_ns()
            s.flush(wait=True)
            call = self._call or {}
            ran = any(len(v) > call.get("totals", {}).get(k, 0) for k, v in s.totals.items())
            if not self.rank_zero or not ran:
                return None
            fn = fn or call.get("fn")
            stages = [st for st in FN_STAGES.get(str(fn), tuple(s.totals)) if st in s.totals]
            self.call_report = self._build_report(call, global_step)
            w = self._tb()
            log_dir = Path(self.log_dir or self.config.log_dir or ".")
            step = int(global_step or 0)
            if w is not None and self.config.table:
                for st in stages:
                    if st in self.call_report.stages:
                        w.add_text(f"energy/{st}_layers", self.call_report.markdown(st), step)
            # the session's report: the call's own when this call is the session's first (one build, not two)
            first = not (any(call.get("profiled", {}).values()) or any(call.get("totals", {}).values())
                         or call.get("epochs"))
            report = self.report = self.call_report if first else self._build_report()
            if self.config.report:
                self._save(log_dir / "layers.csv", report.write_csv)
            essentials_s = (b.clock_ns() - r0) / 1e9
            # what the budget leaves room for, most useful first
            if w is not None:
                self._figures(w, self.call_report, stages, step)
            if self.config.trace:
                self._save(log_dir, self._write_trace)
            r1 = b.clock_ns()
            for r in {id(self.call_report): self.call_report, id(report): report}.values():  # the notes above
                r.notes = list(dict.fromkeys([*r.notes, *s.notes]))
            if self._writer is not None:
                try:
                    self._writer.flush()
                except OSError as exc:
                    self._write_failed(self.log_dir, exc)
            self.summary_text = self.call_report.summary(self.config.top, stages)
            essentials_s += (b.clock_ns() - r1) / 1e9
            b.learn("reports", essentials_s)
        # the whole run's overhead, measured: everything charged to the budget (every hook, the profiled steps'
        # extra time, the analysis, the reports, what the extras cost); layers.json, written last, carries it
        self.overhead = self._overhead()
        self.call_report.overhead = self.overhead
        report.overhead = self.overhead
        if self.config.report:
            self._save(log_dir / "layers.json", report.write_json)
        if self.config.print_summary:
            print(self.summary_text)
        return self.call_report

    def traced_steps(self) -> list[ProfiledStep]:
        """The profiled steps a trace shows: the last ``trace_steps`` of each stage with their intervals kept."""
        s = self.session
        chosen = []
        for lst in s.profiled.values():
            chosen += [p for p in lst if p.timing.modules or p.timing.nodes][-self.config.trace_steps:]
        chosen.sort(key=lambda p: p.timing.t0_ns)
        return chosen

    def merge_into_trace(self, path: str | os.PathLike[str]) -> int:
        """Add this session's layer spans (FLOP, bytes, energy) and power counters to a trace ``torch.profiler``
        wrote (``export_chrome_trace`` or ``tensorboard_trace_handler``), as a process of their own; returns the
        events added (0 when its window holds none of this session's steps)."""
        from lightning_edge.profiling.trace import merge_into

        s = self.session
        power = s.sampler.samples if s.sampler is not None else None
        return merge_into(path, [(p.timing, p.energy, f"{p.stage} step {p.index}") for p in self.traced_steps()],
                          epoch_offset_ns=EPOCH_OFFSET_NS, power=power,
                          costs=lambda t: s.costs_for(t.has_backward),
                          metadata={"source": s.source, "mode": s.mode})

    def _write_trace(self, log_dir: Path) -> None:
        from lightning_edge.profiling.trace import chrome_trace, trace_path, write_trace

        s, b = self.session, self.budget
        chosen = self.traced_steps()
        spans = sum(len(p.timing.modules) + len(p.timing.nodes) for p in chosen)
        if not chosen or not self._extra("trace", "trace", spans, "the Chrome trace"):
            return
        t0 = b.clock_ns()
        with b.spend("trace"):
            power = None
            if s.sampler is not None:
                hold = s.sampler.hold_ns
                power = lambda a, b_: s.sampler.samples(a - hold, b_ + hold)  # noqa: E731
            doc = chrome_trace(
                [(p.timing, p.energy, f"{p.stage} step {p.index}") for p in chosen], power=power,
                costs=lambda t: s.costs_for(t.has_backward),
                metadata={"device": s.device.describe() if s.device else "", "source": s.source,
                          "mode": s.mode, "method": "lightning_edge.EnergyProfiler",
                          "times": "the twin's (simulated)" if s.twin_times else "this machine's"})
            if self.trace_file is None:
                self.trace_file = trace_path(log_dir)
            write_trace(doc, self.trace_file)
        b.learn("trace", (b.clock_ns() - t0) / 1e9, max(spans, 1))


#: time.time_ns() - time.perf_counter_ns(): puts this process's step clock on the epoch clock of Kineto's traces
EPOCH_OFFSET_NS = time.time_ns() - time.perf_counter_ns()


def region_tag(name: str) -> str:
    """A row outside the layers as the last part of its tag: ``(idle and CPU)`` -> ``idle_and_CPU``. No parentheses:
    the custom-scalars chart reads a series' run from the last ``(...)`` of ``"<tag> (<run>)"`` and draws nothing
    for a tag holding one; the ``_region`` in the tag's first part says what it is."""
    return name.strip("()").replace(" ", "_") or name


def _is_region(le: LayerEnergy | LayerStats) -> bool:
    """A row outside the layers: ``(forward)``, ``(backward)``, ``(optimizer)``, the twin's ``(loss)`` and
    ``(idle and CPU)``."""
    return le.kind == "region" or str(le.name).startswith("(")


def _finite_or_none(x: float) -> float | None:
    return x if x is not None and math.isfinite(x) else None
