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
  ``<default_root_dir>/lightning_logs/energy/version_N``): ``time_ms/<stage>/step``, ``energy_j/<stage>/step``,
  ``power_w/<stage>/step`` every step; ``.../layer/<layer>`` for the top ``tb_layers`` layers per profiled step;
  ``.../epoch`` and ``energy_j/<stage>/per_sample`` per epoch, and what the power readings were worth
  (``readings/<stage>/epoch_partial``, ``.../epoch_rejected``, ``.../epoch_failed``, ``.../epoch_samples``).
  Tags start with ``sim/`` (the twin's numbers),
  ``estimated/`` (the roofline model, no sensor) or ``host/`` (this machine's times beside the twin's), and every
  card carries a description saying so. Once per run a custom scalars layout; once per Trainer call the markdown
  table ``energy/<stage>_layers`` and, within the overhead budget, the images ``layers/<stage>`` and
  ``roofline/<stage>``.
* ``layers.csv`` and ``layers.json`` in the log dir, a Chrome/Perfetto trace under
  ``<log dir>/plugins/profile/energy/`` (and the same layers and power added to the traces of Lightning's
  ``PyTorchProfiler``), and a short summary of each Trainer call printed at its end.

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
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from lightning_edge.lightning.schedule import END_OF_RUN_S
from lightning_edge.lightning.session import EnergySession, EpochTotals, ProfiledStep, StepTotal
from lightning_edge.lightning.tb import TrainerWriter
from lightning_edge.profiling.attribution import DEFAULT_K
from lightning_edge.profiling.report import RunOverhead

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
                       readings=tot.readings, host_time_s=tot.host_time_s)


#: per-layer scalars go to TensorBoard for this many layers per stage (the top ones by energy in the stage's first
#: profiled step); every layer is in the markdown table and layers.csv
TB_LAYERS = 10
#: what one figure (roofline or layer chart) is assumed to cost before one has been drawn in this process (s);
#: afterwards the last measured cost is used
FIGURE_COST_S = {"first": 1.5, "next": 0.5}
#: what a layer bar chart costs until one has been measured in this process
BARS_COST_S = 0.02
_figure_cost_measured: list[float] = []
_bars_cost_measured: list[float] = []
#: what the Chrome trace costs per layer span (s): assumed until one has been written in this process, then measured
_trace_cost_measured: list[float] = [20e-6]


def write_scalars(writer: Any, items: list[tuple[str, float]], step: int,
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

            def value(t: str, v: float) -> Any:
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


def expected_batches(trainer: Any, stage: str) -> int | None:
    """How many ``stage`` batches this Trainer call will run (one validation pass for ``validate`` inside a fit);
    None when the Trainer cannot tell (an iterable dataset without a length, a time limit)."""
    try:
        if stage == "train":
            if getattr(trainer, "max_time", None) is not None:
                return None
            n = float(trainer.estimated_stepping_batches) * max(int(getattr(trainer, "accumulate_grad_batches", 1)), 1)
        else:
            attr = {"validate": "num_val_batches", "test": "num_test_batches", "predict": "num_predict_batches"}[stage]
            got = getattr(trainer, attr)
            n = float(sum(got) if isinstance(got, (list, tuple)) else got)
    except Exception:  # noqa: BLE001 - a Trainer without these (or not set up yet): unknown
        return None
    return int(n) if math.isfinite(n) and n > 0 else None


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
            the captured inputs of the first step: ``True`` always, ``False`` never, ``"auto"`` (default) when its
            expected cost fits ``overhead_target`` of the run (the Trainer says how many batches; a run too short
            for it gets a note, and layers apportioned by time); on the twin always (its numbers are its model of
            the analysed workload).
        log_layers: log per-layer scalars to TensorBoard; ``figure``/``table``: the roofline figure and the markdown
            table per epoch; ``trace``: write the Chrome/Perfetto trace (``trace_steps`` profiled steps at most):
            ``True`` always, ``False`` never, ``"auto"`` (default) when its expected cost fits the call's overhead
            budget, like ``figure`` (the traces of Lightning's ``PyTorchProfiler`` get the layers in any case but
            ``False``);
            ``report``: write ``layers.csv``/``layers.json``; ``print_summary``: print the summary (``top`` layers).
        log_dir: where the own SummaryWriter, reports and trace go when the Trainer has no TensorBoardLogger.
    """

    def __init__(self, device: Any = "auto", *, every_n_steps: int | str = "auto", warmup_steps: int = 2,
                 depth: int | None = None, include: Any = None, k: float = DEFAULT_K, roofline: Any = None,
                 cost: Any = None, analyze: bool | str = "auto", overhead_target: float = 0.03,
                 settle_s: float | None = None,
                 log_layers: bool | str = True, tb_layers: int = TB_LAYERS, layer_power: bool = False,
                 figure: bool | str = "auto", table: bool = True, trace: bool | str = "auto",
                 trace_steps: int = 20, report: bool = True, print_summary: bool = True, top: int = 5,
                 log_dir: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        self._session_kw = dict(every_n_steps=every_n_steps, warmup_steps=warmup_steps, depth=depth,
                                include=include, k=k, roofline=roofline, cost=cost, analyze=analyze,
                                overhead_target=overhead_target, settle_s=settle_s, keep_timings=trace_steps)
        if every_n_steps != "auto" and (not isinstance(every_n_steps, int) or every_n_steps < 1):
            raise ValueError(f"every_n_steps must be 'auto' or an integer >= 1, got {every_n_steps!r}")
        for opt, val in (("figure", figure), ("trace", trace)):
            if val not in (True, False, "auto"):
                raise ValueError(f"{opt} must be True (always), False (never) or 'auto' (when the overhead budget "
                                 f"allows), got {val!r}")
        if log_layers not in (True, False, "all"):
            raise ValueError(f"log_layers must be True (the top tb_layers layers), 'all' or False, got {log_layers!r}")
        self.device = device
        self.log_layers = log_layers
        self.tb_layers = int(tb_layers)
        self.layer_power = bool(layer_power)
        self.figure = figure
        self.table = table
        self.trace = trace
        self.trace_steps = int(trace_steps)
        self.write_report = report
        self.print_summary = print_summary
        self.top = int(top)
        self.overhead_target = float(overhead_target)
        self.log_dir_arg = None if log_dir is None else str(log_dir)
        self.session: EnergySession | None = None
        self.log_dir: str | None = None
        self.report: Any = None
        self.call_report: Any = None
        self.trace_file: Path | None = None
        self.summary_text: str | None = None
        self._writer: Any = None
        self._tbw = TrainerWriter("energy", log_dir)
        self._logged_totals: dict[str, int] = {}
        self._trainer: Any = None
        self._tb_names: dict[str, list[str]] = {}  # stage -> the layers with per-layer scalars
        self._described: set[str] = set()
        self._layout_written: str | None = None
        self._cb_ns = 0  # wall time spent in this callback's hooks (the whole fit's overhead, measured)
        self._call: dict[str, Any] | None = None
        self.overhead = RunOverhead()  # the last Trainer call's, measured at its end

    # ------------------------------------------------------------------ plumbing
    @property
    def state_key(self) -> str:  # Lightning asks on every hook call
        key = self.__dict__.get("_state_key")
        if key is None:
            key = self._state_key = f"{type(self).__qualname__}[device={self.device!r}]"
        return key

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        t0 = time.perf_counter_ns()
        self._trainer = trainer
        if self.session is None or self.session.model is not pl_module:
            if self.session is not None:
                self.session.close()
            self.session = EnergySession(pl_module, self.device, **self._session_kw)
        s = self.session
        self._cb_ns = 0
        # what this Trainer call covers: its summary counts only what came after this mark
        self._call = {"fn": stage, "t0": t0, "gstep0": None,  # set at the first batch (after a checkpoint loads)
                      "profiled": {k: len(v) for k, v in s.profiled.items()},
                      "totals": {k: len(v) for k, v in s.totals.items()}, "epochs": len(s.epochs),
                      "excess_ns": s.schedule.excess_ns, "setup_ns": s.schedule.setup_ns, "figures_ns": 0}
        s.new_run()
        s.start()
        self._note_torch_profiler(trainer)
        self._cb_ns += time.perf_counter_ns() - t0

    def _note_torch_profiler(self, trainer: Any) -> None:
        """A ``torch.profiler.profile`` the user runs around the Trainer writes its trace after the call returns:
        say how to add the layers and power to it (Lightning's ``PyTorchProfiler`` is handled by itself)."""
        try:
            import torch.autograd.profiler as tap

            running = bool(getattr(tap, "_is_profiler_enabled", False))
        except Exception:  # noqa: BLE001
            running = False
        if running and type(getattr(trainer, "profiler", None)).__name__ != "PyTorchProfiler" and self.trace:
            msg = ("a torch.profiler is running: after exporting its trace, call "
                   "EnergyProfiler.merge_into_trace(path) to add the layers' FLOP, bytes, energy and the power tracks")
            if self.session is not None and msg not in self.session.notes:
                self.session.notes.append(msg)

    def _rank_zero(self, trainer: Any) -> bool:
        return bool(getattr(trainer, "is_global_zero", True))

    def _tb(self, trainer: Any) -> Any:
        """The Trainer's TensorBoardLogger experiment, else an own SummaryWriter (rank 0 only)."""
        w = self._tbw.get(trainer)
        self._writer, self.log_dir = w, self._tbw.log_dir or self.log_dir
        if w is not None and self._layout_written != self.log_dir:
            self._write_layout(w)
        return w

    def _begin(self, stage: str, trainer: Any, batch: Any) -> None:
        if getattr(trainer, "sanity_checking", False) or self.session is None:
            return
        t0 = time.perf_counter_ns()
        if stage == "train" and self._call is not None and self._call["gstep0"] is None:
            self._call["gstep0"] = int(getattr(trainer, "global_step", 0) or 0)
        if stage not in self.session.expected_batches:  # once per stage and Trainer call (setup starts a new run)
            self.session.expect(stage, expected_batches(trainer, stage))
        self.session.step_begin(stage, batch)
        self._cb_ns += time.perf_counter_ns() - t0

    def _end(self, stage: str, trainer: Any) -> None:
        s = self.session
        if s is None or getattr(trainer, "sanity_checking", False):
            return
        c0 = time.perf_counter_ns()
        gstep = getattr(trainer, "global_step", None) if stage == "train" else None
        s.step_end(stage, gstep)
        w0 = time.perf_counter_ns()
        s.flush(record_work=False)
        done = s.consume()
        if self._rank_zero(trainer):
            self._log_steps(trainer, done)
        now = time.perf_counter_ns()
        if done:  # attribution + logging of the profiled step(s): feeds the overhead and "auto" every-N
            s.schedule.add_work_ns(now - w0)
        self._cb_ns += now - c0

    def _mark(self, region: str, phase: str) -> None:
        if self.session is not None:
            t0 = time.perf_counter_ns()
            self.session.mark(region, phase)
            self._cb_ns += time.perf_counter_ns() - t0

    # ------------------------------------------------------------------ Lightning hooks
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._begin("train", trainer, batch)

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self._mark("(backward)", "bwd")

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        self._mark("(optimizer)", "other")

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

    # ------------------------------------------------------------------ TensorBoard
    def _labels(self) -> tuple[str, str, str]:
        """Tag prefixes ``(time, energy and power, what the energy is)``: ``sim/`` for the twin's numbers,
        ``estimated/`` for the roofline model's (no sensor), none for measured ones."""
        s = self.session
        src = s.source if s is not None else "model"
        e = {"simulated": "sim/", "model": "estimated/"}.get(src, "")
        t = "sim/" if s is not None and s.twin_times else ""
        return t, e, src

    def _describe(self, tag: str, what: str) -> str | None:
        """The card's description, once per tag: what it shows, its unit, and whether it is simulated."""
        if tag in self._described:
            return None
        self._described.add(tag)
        s = self.session
        src = s.source if s is not None else "model"
        if tag.startswith("host/"):
            how = "measured on this machine (the host that ran the training), not on the simulated device"
        elif tag.startswith("sim/"):
            times = "time, power and energy" if s is not None and s.twin_times else "power and energy"
            how = (f"SIMULATED: {times} of a Jetson AGX Orin (the twin's model of this workload) in mode "
                   f"{s.mode if s is not None else '?'}")
        elif tag.startswith("estimated/"):
            how = "ESTIMATED by the roofline model (no power sensor) from this machine's timings"
        elif "time_ms" in tag:
            how = "measured on this machine"
        else:
            how = f"measured ({src}) with {s.device.describe() if s is not None and s.device else 'the sensor'}"
        return f"{what}. {how}. lightning_edge EnergyProfiler."

    def _scalars(self, w: Any, items: list[tuple[str, float, str]], step: int) -> None:
        desc = {}
        for tag, _, what in items:
            d = self._describe(tag, what)
            if d is not None:
                desc[tag] = d
        write_scalars(w, [(t, v) for t, v, _ in items], step, desc)

    def _write_layout(self, w: Any) -> None:
        """The custom-scalars layout (once per run): step and epoch totals, the top layers' energy and time."""
        self._layout_written = self.log_dir
        self._described = set()  # a new run: its cards get their descriptions again
        tp, ep, _ = self._labels()
        kind = {"sim/": " (simulated)", "estimated/": " (estimated)"}.get(ep, "")
        layout = {f"lightning_edge energy{kind}": {
            "step energy (J)": ["Multiline", [rf"^{ep}energy_j/[^/]+/step$"]],
            "epoch energy (J)": ["Multiline", [rf"^{ep}energy_j/[^/]+/epoch$"]],
            "energy per sample (J)": ["Multiline", [rf"^{ep}energy_j/[^/]+/per_sample$"]],
            "step time (ms)": ["Multiline", [rf"^{tp}time_ms/[^/]+/step$"]],
            "top layers by energy: train (J)": ["Multiline", [rf"^{ep}energy_j/train/layer/"]],
            "top layers by energy: time (ms)": ["Multiline", [rf"^{tp}time_ms/train/layer/"]],
        }}
        try:
            w.add_custom_scalars(layout)
        except Exception as exc:  # noqa: BLE001 - a writer without the plugin
            if self.session is not None:
                self.session.notes.append(f"TensorBoard custom scalars layout not written: {exc}")

    def _log_steps(self, trainer: Any, done: list[ProfiledStep]) -> None:
        s = self.session
        if s is None:
            return
        every = int(getattr(trainer, "log_every_n_steps", 1) or 0)
        rows: list[StepTotal] = []
        for stage, totals in s.totals.items():
            i = self._logged_totals.get(stage, 0)
            while i < len(totals) and math.isfinite(totals[i].energy_j):
                t = totals[i]
                i += 1
                if t.profiled or (every > 0 and (t.index + 1) % every == 0):
                    rows.append(t)  # a plain step's totals at the Trainer's log_every_n_steps, as its own metrics
            self._logged_totals[stage] = i
        if not rows and not (done and self.log_layers):
            return
        w = self._tb(trainer)
        if w is None:
            return
        tp, ep, _ = self._labels()
        for step in done:
            if not self.log_layers:
                break
            st = step.stage
            names = self._tb_names.get(st)
            if names is None:  # fixed per stage: the cards stay the same through the run
                ranked = sorted(step.energy.layers.values(), key=lambda le: -le.energy_j
                                if math.isfinite(le.energy_j) else 0.0)
                names = self._tb_names[st] = [le.name for le in ranked if le.time_s > 0][
                    : None if self.log_layers == "all" else self.tb_layers]
            items: list[tuple[str, float, str]] = []
            for name in names:
                le = step.energy.layers.get(name)
                if le is None:
                    continue
                items.append((f"{tp}time_ms/{st}/layer/{name}", le.time_s * 1e3, f"self time of {name} per step, ms"))
                items.append((f"{ep}energy_j/{st}/layer/{name}", le.energy_j, f"energy of {name} per step, J"))
                if self.layer_power:
                    items.append((f"{ep}power_w/{st}/layer/{name}", le.power_w, f"mean power of {name}, W"))
                if s.twin_times:
                    items.append((f"host/time_ms/{st}/layer/{name}", le.host_s * 1e3,
                                  f"self time of {name} on this machine, ms"))
            self._scalars(w, items, step.global_step)
        for t in rows:
            stage = t.stage
            items = [(f"{tp}time_ms/{stage}/step", t.time_s * 1e3, f"{stage} step time, ms"),
                     (f"{ep}energy_j/{stage}/step", t.energy_j, f"{stage} step energy, J"),
                     (f"{ep}power_w/{stage}/step", t.energy_j / t.time_s if t.time_s > 0 else math.nan,
                      f"{stage} step mean power, W")]
            if t.sim_time_s is not None:
                items.append((f"host/time_ms/{stage}/step", t.host_time_s * 1e3,
                              f"{stage} step time on this machine, ms"))
            self._scalars(w, items, t.global_step)

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
        """The epoch's totals as scalars (cheap): tables and figures are drawn once, at the end of the Trainer
        call (:meth:`_finish`), so short epochs cost no more than long ones."""
        s = self.session
        if s is None:
            return
        c0 = time.perf_counter_ns()
        tot = s.epoch_end(stage)
        if tot is None:
            self._cb_ns += time.perf_counter_ns() - c0
            return
        tot = self._reduce(trainer, tot)
        if tot.ranks > 1 and s.epochs and s.epochs[-1].stage == stage:
            s.epochs[-1] = tot  # the reports (layers.json) show the totals over ranks too
        if self._rank_zero(trainer):
            w = self._tb(trainer)
            self._log_steps(trainer, s.consume())
            if w is not None:
                tp, ep, _ = self._labels()
                items = [(f"{tp}time_ms/{stage}/epoch", tot.time_s * 1e3, f"{stage} epoch time, ms"),
                         (f"{ep}energy_j/{stage}/epoch", tot.energy_j, f"{stage} epoch energy, J"),
                         (f"{ep}energy_j/{stage}/per_sample", tot.j_per_sample, f"{stage} energy per sample, J"),
                         (f"{ep}power_w/{stage}/epoch", tot.energy_j / tot.time_s if tot.time_s > 0 else math.nan,
                          f"{stage} epoch mean power, W")]
                if tot.ranks > 1:
                    items.append((f"{ep}energy_j/{stage}/epoch_domains", float(tot.domains),
                                  "energy domains summed in the epoch's energy (count)"))
                q = tot.readings  # what the readings were worth: partial ones, rejected rail values, failed reads
                if q is not None:
                    items += [(f"readings/{stage}/epoch_partial", float(q.partial),
                               f"{stage}: power readings that missed a rail or a read (count)"),
                              (f"readings/{stage}/epoch_rejected", float(q.rejected),
                               f"{stage}: rail values rejected as implausible (count)"),
                              (f"readings/{stage}/epoch_failed", float(q.failed), f"{stage}: failed sensor reads (count)"),
                              (f"readings/{stage}/epoch_samples", float(q.samples), f"{stage}: power readings (count)")]
                if s.twin_times and math.isfinite(tot.host_time_s):
                    items.append((f"host/time_ms/{stage}/epoch", tot.host_time_s * 1e3,
                                  f"{stage} epoch time on this machine, ms"))
                self._scalars(w, items, tot.epoch)
        self._cb_ns += time.perf_counter_ns() - c0

    # ------------------------------------------------------------------ figures (end of a Trainer call)
    def _figure_budget_s(self) -> float:
        """Seconds of overhead this call can still spend within ``overhead_target`` of its wall time."""
        call = self._call or {}
        wall_s = (time.perf_counter_ns() - call.get("t0", time.perf_counter_ns())) / 1e9
        return self.overhead_target * wall_s - self._spent_s()

    def _spent_s(self) -> float:
        s, call = self.session, self._call or {}
        excess = (s.schedule.excess_ns - call.get("excess_ns", 0)) if s is not None else 0
        return (self._cb_ns + excess) / 1e9

    def _figures(self, w: Any, report: Any, stages: list[str], step: int) -> None:
        """Each stage's layer bar chart (Pillow, some 20 ms) and roofline figure (matplotlib, about 0.5 s), when
        ``figure`` allows: always (True), never (False), or ``"auto"``: each only when its expected cost fits the
        overhead budget of this call (the bar chart first), with a note when it does not."""
        todo = [st for st in stages if report.stages.get(st) is not None and report.stages[st].layers]
        if not self.figure or not todo:
            return
        import sys

        if self._affordable(len(todo) * (_bars_cost_measured[-1] if _bars_cost_measured else BARS_COST_S),
                            "layer bar charts"):
            for st in todo:
                f0 = time.perf_counter()
                self._add_bars(w, st, report.stages[st], step)
                _bars_cost_measured.append(time.perf_counter() - f0)
        each = (_figure_cost_measured[-1] if _figure_cost_measured else
                FIGURE_COST_S["next" if "matplotlib.pyplot" in sys.modules else "first"])
        need = len(todo) * each if _figure_cost_measured else FIGURE_COST_S["first"] + (len(todo) - 1) * each
        if not self._affordable(need, "roofline figures"):
            return
        for st in todo:
            f0 = time.perf_counter()
            self._add_figure(w, st, report.stages[st], step)
            _figure_cost_measured.append(time.perf_counter() - f0)

    def _affordable(self, need_s: float, what: str, option: str = "figure") -> bool:
        """Whether the ``option`` setting (``figure`` or ``trace``) lets ``what`` cost ``need_s`` now; a note says
        why not."""
        if getattr(self, option) != "auto" or need_s <= self._figure_budget_s():
            return True
        msg = (f"{what} not {'drawn' if option == 'figure' else 'written'}: about {need_s:.2g} s, over the "
               f"{100 * self.overhead_target:.3g} % overhead budget of this {self._call_wall_s():.3g} s run "
               f"(EnergyProfiler({option}=True) always {'draws' if option == 'figure' else 'writes'} them; "
               "layers.csv has every layer)")
        if msg not in self.session.notes:
            self.session.notes.append(msg)
        return False

    def _call_wall_s(self) -> float:
        call = self._call or {}
        return (time.perf_counter_ns() - call.get("t0", time.perf_counter_ns())) / 1e9

    def _add_figure(self, w: Any, stage: str, st: Any, epoch: int) -> None:
        s = self.session
        roof, desc = s.roofline(s.mode)
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
            s.notes.append(f"roofline figure failed: {type(exc).__name__}: {exc}")

    def _add_bars(self, w: Any, stage: str, st: Any, epoch: int) -> None:
        """A bar chart of the stage's top layers: energy (J) and time (ms) per step, labelled simulated or not.
        Drawn with Pillow (tens of milliseconds where a matplotlib figure takes about half a second)."""
        s = self.session
        ranked = [ls for ls in st.ranked() if math.isfinite(ls.energy_j) and ls.energy_j > 0][: max(self.top, 10)]
        if not ranked:
            return
        try:
            import numpy as np

            from lightning_edge.profiling.report import bar_chart

            kind = {"simulated": "SIMULATED (Orin twin)", "model": "ESTIMATED (roofline model)"}.get(s.source,
                                                                                                  "measured")
            tkind = "SIMULATED (Orin twin)" if s.twin_times else "this machine"
            img = bar_chart([ls.name for ls in ranked], [("energy per step, J: " + kind, [ls.energy_j for ls in ranked]),
                                                         ("time per step, ms: " + tkind,
                                                          [ls.time_s * 1e3 for ls in ranked])],
                            title=f"{stage}: top {len(ranked)} layers by energy")
            w.add_image(f"layers/{stage}", np.asarray(img), epoch, dataformats="HWC")
        except Exception as exc:  # noqa: BLE001
            s.notes.append(f"layer bar chart failed: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ the end of the run
    def _build_report(self, call: dict[str, Any] | None = None) -> Any:
        """The report over the whole session, or (``call``: a mark from :meth:`setup`) over one Trainer call."""
        from lightning_edge.profiling.report import ProfileReport

        s = self.session
        assert s is not None
        p0 = (call or {}).get("profiled", {})
        t0 = (call or {}).get("totals", {})
        e0 = (call or {}).get("epochs", 0)
        profiled = {stage: lst[p0.get(stage, 0):] for stage, lst in s.profiled.items()}
        all_totals = {stage: lst[t0.get(stage, 0):] for stage, lst in s.totals.items()}
        steps = {stage: [p.energy for p in lst] for stage, lst in profiled.items() if lst or all_totals.get(stage)}
        costs = {stage: s.costs_for(stage == "train") for stage in steps}
        totals = {}
        for stage, lst in all_totals.items():
            if not lst:
                continue
            vals = [t.energy_j for t in lst if math.isfinite(t.energy_j)]
            labels = {t.label for t in lst if math.isfinite(t.energy_j)}
            totals[stage] = {"steps": len(lst), "energy_j": sum(vals) * len(lst) / len(vals) if vals else math.nan,
                             "time_s": sum(t.time_s for t in lst), "samples": sum(t.samples or 0 for t in lst),
                             "label": "/".join(sorted(labels)) if labels else "",
                             "min_batches": s.schedule.warmup_steps + 1}
            need = s.schedule.stages[stage].min_batches if stage in s.schedule.stages else 0
            if need:
                totals[stage].update(min_batches=need, min_reason="to pay for one profiled step within "
                                     "overhead_target: see the notes")
            if call is not None and stage == "train" and self._trainer is not None:
                opt = int(getattr(self._trainer, "global_step", 0) or 0) - (call.get("gstep0") or 0)
                totals[stage]["optimizer_steps"] = opt
        epochs = [{"stage": e.stage, "epoch": e.epoch, "energy_j": e.energy_j, "time_s": e.time_s,
                   "steps": e.steps, "samples": e.samples, "j_per_sample": e.j_per_sample, "method": e.label,
                   **({"host_time_s": e.host_time_s} if e.label == "simulated" else {}),
                   "modes": e.modes,
                   **({"ranks": e.ranks, "energy_domains": e.domains} if e.ranks > 1 else {}),
                   **({"readings": {"samples": e.readings.samples, "partial": e.readings.partial,
                                    "rejected": e.readings.rejected, "failed": e.readings.failed,
                                    "missing_rails": list(e.readings.missing_rails),
                                    "rejected_rails": list(e.readings.rejected_rails),
                                    "coverage": e.readings.coverage}}
                      if e.readings is not None else {})}
                  for e in s.epochs[e0:]]
        so = s.sampler_overhead()
        sch = s.schedule
        overhead = replace(self.overhead, fraction=_finite_or_none(sch.overhead_fraction()),
                           every_n_steps=sch.every_n_steps, auto=sch.auto, excess_s=sch.excess_ns / 1e9,
                           work_s=sch.work_ns / 1e9, epoch_work_s=sch.epoch_work_ns / 1e9, setup_s=sch.setup_ns / 1e9,
                           steps_s=sch.run_ns / 1e9, sampler_cpu_percent=so.cpu_percent if so is not None else None)
        dev = s.device
        notes = list(dict.fromkeys([*(dev.notes if dev else []), *s.cost_notes, *s.notes]))
        mode = s.mode
        roof_desc = s.roofline(mode)[1] if dev is not None else s.roofline_desc
        return ProfileReport.build(steps, costs=costs, totals=totals, epochs=epochs,
                                   device=dev.describe() if dev else "", source=s.source, mode=mode,
                                   roofline=roof_desc, overhead=overhead, notes=notes, twin_times=s.twin_times)

    def _finish(self, trainer: Any, fn: str | None = None) -> None:
        c0 = time.perf_counter_ns()
        figures_ns = 0
        s = self.session
        assert s is not None
        s.flush(wait=True)
        call = self._call or {}
        ran = any(len(v) > call.get("totals", {}).get(k, 0) for k, v in s.totals.items())
        if not self._rank_zero(trainer) or not ran:
            return
        self._log_steps(trainer, s.consume())
        stages = [st for st in FN_STAGES.get(str(fn), tuple(s.totals)) if st in s.totals]
        self.call_report = self._build_report(call)
        w = self._tb(trainer)
        log_dir = Path(self.log_dir or self.log_dir_arg or ".")
        if w is not None:
            step = int(getattr(trainer, "global_step", 0) or 0)
            if self.table:
                for st in stages:
                    if st in self.call_report.stages:
                        w.add_text(f"energy/{st}_layers", self.call_report.markdown(st), step)
            f0 = time.perf_counter_ns()
            self._figures(w, self.call_report, stages, step)
            figures_ns = time.perf_counter_ns() - f0
            s.schedule.add_work_ns(figures_ns, per_step=False)
        # the session's report: the call's own when this call is the session's first (one build, not two)
        first = not (any(call.get("profiled", {}).values()) or any(call.get("totals", {}).values())
                     or call.get("epochs"))
        report = self.report = self.call_report if first else self._build_report()
        if self.write_report:
            report.write_csv(log_dir / "layers.csv")
        if self.trace:
            self._write_trace(log_dir)
            self._merge_profiler_traces(trainer, later=True)
        for r in {id(self.call_report): self.call_report, id(report): report}.values():  # the notes of the above
            r.notes = list(dict.fromkeys([*r.notes, *s.notes]))
        if self._writer is not None:
            self._writer.flush()
        # the whole call's overhead, measured: every hook of this callback (attribution, logging, cost analysis,
        # tables, figures, reports, the trace) plus the profiled steps' extra time in the layer timer's hooks
        end_ns = time.perf_counter_ns() - c0
        self._cb_ns += end_ns
        END_OF_RUN_S[0] = (end_ns - figures_ns) / 1e9  # what the next run's budget reserves (figures are budgeted apart)
        wall = self._call_wall_s()
        spent = self._spent_s()
        so = s.sampler_overhead()
        run = {"run_wall_s": wall, "run_overhead_s": spent,
               "run_fraction": spent / max(wall - spent, 1e-9) if wall > 0 else None,
               "analysis_s": (s.schedule.setup_ns - call.get("setup_ns", 0)) / 1e9,
               "sampler_cpu_s": (so.cpu_fraction * wall) if so is not None else None}
        self.overhead = self.call_report.overhead = replace(self.call_report.overhead, **run)
        report.overhead = replace(report.overhead, **run)
        if self.write_report:  # last: it carries the overhead (all but this write)
            report.write_json(log_dir / "layers.json")
        self.summary_text = self.call_report.summary(self.top, stages)
        if self.print_summary:
            print(self.summary_text)

    def _trace_steps(self) -> list[ProfiledStep]:
        s = self.session
        chosen = []
        for lst in s.profiled.values():
            chosen += [p for p in lst if p.timing.modules or p.timing.nodes][-self.trace_steps:]
        chosen.sort(key=lambda p: p.timing.t0_ns)
        return chosen

    def merge_into_trace(self, path: str | os.PathLike[str]) -> int:
        """Add this session's layer spans (FLOP, bytes, energy) and power counters to a trace ``torch.profiler``
        wrote (``export_chrome_trace`` or ``tensorboard_trace_handler``), as a process of their own; returns the
        events added (0 when its window holds none of this session's steps). Done by itself for the traces of
        Lightning's ``PyTorchProfiler``; call it for a ``torch.profiler.profile`` you run yourself."""
        from lightning_edge.profiling.trace import merge_into

        s = self.session
        assert s is not None
        power = None
        if s.sampler is not None:
            power = s.sampler.samples
        return merge_into(path, [(p.timing, p.energy, f"{p.stage} step {p.index}") for p in self._trace_steps()],
                          epoch_offset_ns=_EPOCH_OFFSET_NS, power=power,
                          costs=lambda t: s.costs_for(t.has_backward),
                          metadata={"source": s.source, "mode": s.mode})

    def _merge_profiler_traces(self, trainer: Any, later: bool = False) -> None:
        """Lightning's ``PyTorchProfiler``: merge into the traces it wrote during this call; its last trace is
        written after the callbacks' teardown (``describe``), so that one is merged when it has been written."""
        prof = getattr(trainer, "profiler", None)
        dirpath = getattr(prof, "dirpath", None)
        if prof is None or type(prof).__name__ != "PyTorchProfiler" or dirpath is None:
            return
        t0_epoch = ((self._call or {}).get("t0", 0) + _EPOCH_OFFSET_NS) / 1e9
        done: set[str] = set()

        def merge_new() -> None:
            from lightning_edge.profiling.trace import TRACE_SUFFIX

            for f in sorted(Path(dirpath).rglob(f"*{TRACE_SUFFIX}*")):
                if str(f) in done or f.stat().st_mtime < t0_epoch - 1:
                    continue
                done.add(str(f))
                try:
                    self.merge_into_trace(f)
                except Exception as exc:  # noqa: BLE001 - someone else's file: never fail the run over it
                    if self.session is not None:
                        self.session.notes.append(f"could not add energy to {f.name}: {exc}")

        merge_new()
        describe = getattr(prof, "describe", None)
        if later and describe is not None and not getattr(describe, "_lightning_edge", False):
            def describe_then_merge(*a: Any, **k: Any) -> Any:
                try:
                    return describe(*a, **k)
                finally:
                    prof.describe = describe  # once: give the profiler its own method back
                    merge_new()

            describe_then_merge._lightning_edge = True  # type: ignore[attr-defined]
            prof.describe = describe_then_merge

    def _write_trace(self, log_dir: Path) -> None:
        from lightning_edge.profiling.trace import chrome_trace, trace_path, write_trace

        s = self.session
        assert s is not None
        chosen = self._trace_steps()
        spans = sum(len(p.timing.modules) + len(p.timing.nodes) for p in chosen)
        if not chosen or not self._affordable(spans * _trace_cost_measured[-1], "the Chrome trace", "trace"):
            return
        t0 = time.perf_counter()
        power = None
        if s.sampler is not None:
            hold = s.sampler.hold_ns
            power = lambda a, b: s.sampler.samples(a - hold, b + hold)  # noqa: E731
        doc = chrome_trace(
            [(p.timing, p.energy, f"{p.stage} step {p.index}") for p in chosen], power=power,
            costs=lambda t: s.costs_for(t.has_backward),
            metadata={"device": s.device.describe() if s.device else "", "source": s.source,
                      "mode": s.mode, "method": "lightning_edge.EnergyProfiler",
                      "times": "the twin's (simulated)" if s.twin_times else "this machine's"})
        if self.trace_file is None:
            self.trace_file = trace_path(log_dir)
        write_trace(doc, self.trace_file)
        _trace_cost_measured.append((time.perf_counter() - t0) / max(spans, 1))


#: time.time_ns() - time.perf_counter_ns(): puts this process's step clock on the epoch clock of Kineto's traces
_EPOCH_OFFSET_NS = time.time_ns() - time.perf_counter_ns()


def _finite_or_none(x: float) -> float | None:
    return x if x is not None and math.isfinite(x) else None
