"""Per-layer time and energy reports: ``layers.csv``, ``layers.json``, a markdown table, an end-of-run summary.

Pure Python over the attribution results (no torch, no Lightning)::

    report = ProfileReport.build({"train": step_energies}, costs={"train": costs}, device="sim:orin-agx: ...",
                                 source="simulated", mode="12c/2201.6/1300.5/3199", roofline="twin roofline ...")
    report.write_csv(log_dir / "layers.csv"); report.write_json(log_dir / "layers.json")
    print(report.summary())                     # top layers by energy, total, methods, overhead
    report.markdown("train", top=20)            # for TensorBoard's add_text

Every figure describes one power mode: a stage's report is a :class:`ModeReport` per mode it ran in (``modes``:
the mode the run ended in first, the other modes it trained in, a tuner's profiling windows apart), each with its
step (the mean over the mode's steps) and its layers (from its profiled steps); the stage's headline (``step``,
``layers``) is the mode it ended in. Only totals (energy and time over every step) span modes, and say so.

Every row says how its energy was obtained (``method``: ``measured``, ``apportioned``, ``estimated``,
``simulated-measured``, ``simulated-apportioned``, ``simulated``; `` (partial)`` appended when the power readings
behind a number missed a rail, had a rail value rejected from the total, or a read failed); with the twin the report
states that time, power and energy are simulated for a Jetson AGX Orin (``twin_times``: the twin's per-layer model;
this machine's times in ``host_time``), or, when the twin could not model the workload, that power and energy are
while the timings are this machine's.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lightning_edge._jsonfile import write_output
from lightning_edge.profiling.attribution import LayerStats, StepEnergy, StepStats, aggregate, aggregate_steps
from lightning_edge.records import Measurement, OverBudget, settled

__all__ = ["ProfileReport", "StageReport", "ModeReport", "CSV_FIELDS", "simulated_statement", "bar_chart",
           "ENDED_IN", "TRAINED_IN"]

#: a mode's role in a stage's report
ENDED_IN, TRAINED_IN = "ended in", "trained in"

CSV_FIELDS = ("stage", "mode", "role", "layer", "kind", "method", "steps", "calls", "time_ms", "time_ms_std", "fwd_ms", "bwd_ms",
              "energy_mj", "energy_mj_std", "power_w", "power_w_std", "energy_share", "model_energy_mj",
              "flops", "bytes", "intensity", "host_time_ms")


def simulated_statement(mode: str | None, twin_times: bool = False) -> str:
    if twin_times:
        return (f"time, power and energy are SIMULATED for a Jetson AGX Orin (the twin's model of this workload) in "
                f"mode {mode or '?'}; this machine's measured times are host_time (layers.csv/json)")
    return (f"power and energy are SIMULATED for a Jetson AGX Orin (the twin) in mode {mode or '?'}; "
            "the timings are measured on this machine")


@dataclass
class ModeReport:
    """One power mode of a stage (or one profiling window of a tuner): ``total`` (the steps its figure is over,
    merged: one :class:`~lightning_edge.records.Measurement`; per step: ``step_time_s``, ``step_energy_j``,
    ``power_w``): its settled steps (``settled``), or all of them when none had settled (a run shorter than the
    power's settling after a change); ``all_steps``: every step it ran; ``layers`` (per-layer statistics over its
    ``profiled`` steps; ``scaled``: the twin's rows scaled to this mode's step, so they sum to it), its ``role``
    (``ended in``, ``trained in``, or the window's name) and first step."""

    mode: str
    role: str
    first_step: int
    total: Measurement
    layers: dict[str, LayerStats]
    profiled: StepStats
    scaled: bool = False
    all_steps: int = 0
    settled: bool = True

    @property
    def steps(self) -> int:
        """The steps the figure is over."""
        return self.total.steps

    @property
    def step_time_s(self) -> float:
        return self.total.time_per_step_s

    @property
    def step_energy_j(self) -> float:
        return self.total.energy_per_step_j

    @property
    def power_w(self) -> float:
        return self.total.power_w

    @property
    def label(self) -> str:
        return self.total.shown_label

    @property
    def window(self) -> bool:
        return self.role not in (ENDED_IN, TRAINED_IN)

    def ranked(self, key: str = "energy_j") -> list[LayerStats]:
        return sorted(self.layers.values(), key=lambda s: -_nz(getattr(s, key)))

    def to_dict(self) -> dict:
        t = self.total
        return {"mode": self.mode, "role": self.role, "first_step": self.first_step,
                "steps": self.all_steps or self.steps, "settled_steps": self.steps if self.settled else 0,
                "step": {"time_s": _f(self.step_time_s), "energy_j": _f(self.step_energy_j),
                         "power_w": _f(self.power_w), "method": self.label,
                         "host_time_s": _f(t.host_time_s / t.steps if t.host_time_s is not None else None)},
                "profiled_steps": self.profiled.steps, "layers_scaled_to_step": self.scaled}


def mode_report(mode: str, role: str, first_step: int, steps: list[Measurement], profiled: list[StepEnergy],
                costs: Mapping[str, Any] | None = None, scale: bool = False) -> ModeReport:
    """A :class:`ModeReport` from the mode's steps (its figure: the settled ones, :func:`~lightning_edge.records.
    settled`) and its profiled steps; ``scale``: scale the layers' time and energy (and their spread) so that they
    sum to the mode's mean step (the twin's model of the mode, whose level is the step's)."""
    total, ok = settled(steps)
    layers = aggregate(profiled, costs)
    stats = aggregate_steps(profiled)
    scaled = False
    if scale and profiled and layers:
        lt = math.fsum(_nz(x.time_s) for x in layers.values())
        le = math.fsum(_nz(x.energy_j) for x in layers.values())
        if lt > 0 and le > 0 and total.has_power:
            rt, re_ = total.time_per_step_s / lt, total.energy_per_step_j / le
            layers = {n: _scaled(x, rt, re_) for n, x in layers.items()}
            scaled = True
    return ModeReport(mode, role, int(first_step), total, layers, stats, scaled, sum(m.steps for m in steps), ok)


def _scaled(x: LayerStats, rt: float, re_: float) -> LayerStats:
    from dataclasses import replace

    return replace(x, time_s=x.time_s * rt, time_s_std=x.time_s_std * rt, energy_j=x.energy_j * re_,
                   energy_j_std=x.energy_j_std * re_, power_w=(x.energy_j * re_) / (x.time_s * rt)
                   if x.time_s > 0 and rt > 0 else x.power_w, fwd_s=x.fwd_s * rt, bwd_s=x.bwd_s * rt)


@dataclass
class StageReport:
    """One stage (train, validate, test, predict): its modes (:class:`ModeReport`, the one it ended in first), the
    headline's per-layer statistics and profiled-step statistics (``layers``, ``steps``: the mode it ended in, or
    every profiled step when the report was built without modes), its step totals over every mode, its epochs."""

    stage: str
    layers: dict[str, LayerStats]
    steps: StepStats
    total_steps: int = 0
    total_energy_j: float = math.nan
    total_time_s: float = math.nan
    total_samples: int = 0
    total_label: str = ""
    epochs: list[dict] = field(default_factory=list)
    optimizer_steps: int | None = None  # the Trainer's optimizer steps in these batches (when known)
    min_batches: int | None = None  # batches a stage needs before one is profiled per layer
    min_reason: str | None = None  # why, when not the warm-up (the overhead budget)
    modes: list[ModeReport] = field(default_factory=list)
    over_budget: OverBudget | None = None  # what of its steps ran over a power budget, when one was set (a tuner's)

    @property
    def headline(self) -> ModeReport | None:
        """The mode the stage ended in (None: built without modes)."""
        return self.modes[0] if self.modes else None

    @property
    def profiled_steps(self) -> int:
        return sum(m.profiled.steps for m in self.modes) if self.modes else self.steps.steps

    def ranked(self, key: str = "energy_j") -> list[LayerStats]:
        return sorted(self.layers.values(), key=lambda s: -_nz(getattr(s, key)))

    def method_counts(self) -> Counter:
        """Layer-steps per label over the stage's profiled steps (every mode's)."""
        c: Counter = Counter()
        for layers in ([m.layers for m in self.modes] if self.modes else [self.layers]):
            for s in layers.values():
                c.update(s.labels)
        return c


def _nz(x: float | None) -> float:
    return x if x is not None and math.isfinite(x) else 0.0


def _f(x: float | None, scale: float = 1.0, nd: int = 6) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return round(x * scale, nd)


@dataclass(frozen=True)
class RunOverhead:
    """What profiling cost a run. Per-layer profiling, from the schedule: ``fraction`` of the step time,
    ``every_n_steps`` (``auto``: adapted), the profiled steps' extra time ``excess_s``, their attribution and logging
    ``work_s``, figures and tables ``epoch_work_s``, the cost analysis ``setup_s``, all steps ``steps_s``, the power
    sampler's ``sampler_cpu_percent`` of one core. The whole run, measured at its end: ``run_overhead_s`` of
    ``run_wall_s`` (``run_fraction`` of the run without it), of which the cost analysis ``analysis_s``, and the
    sampler thread's CPU time ``sampler_cpu_s``. None: not known (yet)."""

    fraction: float | None = None
    every_n_steps: int | None = None
    auto: bool | None = None
    excess_s: float | None = None
    work_s: float | None = None
    epoch_work_s: float | None = None
    setup_s: float | None = None
    steps_s: float | None = None
    sampler_cpu_percent: float | None = None
    run_wall_s: float | None = None
    run_overhead_s: float | None = None
    run_fraction: float | None = None
    analysis_s: float | None = None
    sampler_cpu_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ProfileReport:
    """Everything the profiler found, by stage, with the device and how the numbers were obtained."""

    stages: dict[str, StageReport]
    device: str = ""
    source: str = "model"  # measured | simulated | model
    mode: str | None = None
    roofline: str = ""
    overhead: RunOverhead = field(default_factory=RunOverhead)
    notes: list[str] = field(default_factory=list)
    twin_times: bool = False  # times are the twin's model of the workload (host times apart)
    _rows: dict[str, list[dict]] = field(default_factory=dict, init=False, repr=False, compare=False)  # rows() per stage, once

    @classmethod
    def build(cls, steps: Mapping[str, Iterable[StepEnergy]], *, costs: Mapping[str, Mapping[str, Any]] | None = None,
              totals: Mapping[str, Mapping[str, Any]] | None = None, epochs: Iterable[Mapping] = (),
              modes: Mapping[str, list[ModeReport]] | None = None, **kw: Any) -> ProfileReport:
        """From each stage's attributed steps (and optional ``{stage: {layer: LayerCost}}`` costs,
        ``{stage: {"steps", "energy_j", "time_s", "samples", "label"}}`` totals over every step, and
        ``{stage: [ModeReport, ...]}``: its modes, the one it ended in first, whose layers are the headline's)."""
        costs = costs or {}
        totals = totals or {}
        modes = modes or {}
        epochs = list(epochs)
        out: dict[str, StageReport] = {}
        for stage, lst in steps.items():
            lst = list(lst)
            if not lst and stage not in totals:
                continue
            tot = totals.get(stage, {})
            ms = list(modes.get(stage) or [])
            layers, stats = (ms[0].layers, ms[0].profiled) if ms else (aggregate(lst, costs.get(stage)),
                                                                        aggregate_steps(lst))
            out[stage] = StageReport(
                stage, layers, stats,
                int(tot.get("steps", len(lst))), float(tot.get("energy_j", math.nan)),
                float(tot.get("time_s", math.nan)), int(tot.get("samples", 0) or 0), str(tot.get("label", "")),
                [dict(e) for e in epochs if e.get("stage") == stage],
                tot.get("optimizer_steps"), tot.get("min_batches"), tot.get("min_reason"), ms,
                tot.get("over_budget"),
            )
        return cls(out, **kw)

    # ------------------------------------------------------------------ tables
    @property
    def simulated(self) -> bool:
        return self.source == "simulated"

    def rows(self, stage: str | None = None, every_mode: bool = False) -> list[dict]:
        """One dict per (stage, layer) of the stage's headline (the mode it ended in), ranked by energy (fields:
        :data:`CSV_FIELDS`); ``every_mode``: every mode's rows, the headline's first."""
        if stage is None:
            return [r for name in self.stages for r in self.rows(name, every_mode)]
        st = self.stages.get(stage)
        if st is None:
            return []
        if every_mode and st.modes:
            return [r for i in range(len(st.modes)) for r in self._mode_rows(st, i)]
        return self._mode_rows(st, 0 if st.modes else None)

    def mode_rows(self, stage: str, i: int) -> list[dict]:
        """The layer rows of the stage's ``i``-th mode (0: the one it ended in)."""
        st = self.stages.get(stage)
        return [] if st is None else self._mode_rows(st, i)

    def _mode_rows(self, st: StageReport, i: int | None) -> list[dict]:
        key = f"{st.stage}#{i}"
        hit = self._rows.get(key)
        if hit is not None:
            return list(hit)
        rows: list[dict] = []
        mr = st.modes[i] if i is not None else None
        layers = mr.layers if mr is not None else st.layers
        mode = mr.mode if mr is not None else (self.mode or "")
        role = mr.role if mr is not None else ""
        if layers:
            total = sum(_nz(s.energy_j) for s in layers.values())
            for s in sorted(layers.values(), key=lambda x: -_nz(x.energy_j)):
                rows.append({
                    "stage": st.stage, "mode": mode, "role": role, "layer": s.name, "kind": s.kind, "method": s.label, "steps": s.steps,
                    "calls": _f(s.calls, nd=3), "time_ms": _f(s.time_s, 1e3), "time_ms_std": _f(s.time_s_std, 1e3),
                    "fwd_ms": _f(s.fwd_s, 1e3), "bwd_ms": _f(s.bwd_s, 1e3),
                    "energy_mj": _f(s.energy_j, 1e3), "energy_mj_std": _f(s.energy_j_std, 1e3),
                    "power_w": _f(s.power_w, nd=4), "power_w_std": _f(s.power_w_std, nd=4),
                    "energy_share": _f(s.energy_j / total if total > 0 else math.nan, nd=5),
                    "model_energy_mj": _f(s.model_energy_j, 1e3),
                    "flops": s.flops, "bytes": s.bytes, "intensity": _f(s.intensity, nd=4),
                    "host_time_ms": _f(s.host_time_s, 1e3),
                })
        self._rows[key] = rows
        return list(rows)

    def write_csv(self, path: str | Path) -> Path:
        """Write ``layers.csv`` atomically (:func:`lightning_edge._jsonfile.write_file`: a full or read-only disk
        leaves an earlier file whole, never an empty one); ``OSError`` naming the path when it cannot."""
        import io

        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        f = io.StringIO(newline="")
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in self.rows(every_mode=True):
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})
        return write_output(p, f.getvalue(), what="report")

    def to_dict(self) -> dict:
        stages = {}
        for name, st in self.stages.items():
            head = st.headline
            if head is not None:  # the mode the stage ended in: every step of it
                step = {**head.to_dict()["step"], "mode": head.mode, "role": head.role, "steps": head.steps,
                        "profiled_steps": head.profiled.steps}
            else:
                step = {"time_s": _f(st.steps.time_s), "time_s_std": _f(st.steps.time_s_std),
                        "host_time_s": _f(st.steps.host_time_s), "energy_j": _f(st.steps.energy_j),
                        "energy_j_std": _f(st.steps.energy_j_std), "power_w": _f(st.steps.power_w),
                        "method": st.steps.label}
            ob = st.over_budget
            stages[name] = {
                "profiled_steps": st.profiled_steps, "total_steps": st.total_steps,
                "optimizer_steps": st.optimizer_steps,
                "step": step,
                "total": {"energy_j": _f(st.total_energy_j), "time_s": _f(st.total_time_s),
                          "samples": st.total_samples, "method": st.total_label, "modes": len(st.modes) or None,
                          "j_per_sample": _f(st.total_energy_j / st.total_samples if st.total_samples else None)},
                "modes": [{**m.to_dict(), "layers": self.mode_rows(name, i)} for i, m in enumerate(st.modes)],
                "over_budget": None if ob is None else {
                    "budget_w": ob.budget_w, "steps": ob.steps, "of_steps": ob.of_steps, "time_s": _f(ob.time_s),
                    "worst_w": _f(ob.worst_w)},
                "epochs": st.epochs,
                "methods": dict(st.method_counts()),
                "layers": self.rows(name),
            }
        return {
            "schema": "lightning_edge.energy_profile", "version": 2,
            "device": self.device, "source": self.source, "mode": self.mode, "roofline": self.roofline,
            "statement": simulated_statement(self.mode, self.twin_times) if self.simulated else None,
            "overhead": self.overhead.to_dict(), "notes": list(self.notes), "stages": stages,
        }

    def write_json(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        # compact: json's C encoder (indent= selects the pure-Python one, a few ms per run); python -m json.tool reads it
        return write_output(p, json.dumps(_clean(self.to_dict()), separators=(",", ":"), allow_nan=False,
                                          default=_json_default), what="report")

    def method_line(self) -> str:
        if self.source == "model":
            return ("estimated: no power sensor, every energy is the roofline model's "
                    f"({self.roofline or 'no roofline'}) with this machine's timings")
        if self.simulated:
            return simulated_statement(self.mode, self.twin_times)
        return f"measured with {self.device}; layers shorter than the sensor resolves are apportioned"

    def markdown(self, stage: str, top: int | None = 30) -> str:
        """The stage in markdown (TensorBoard's text plugin renders it): the mode it ended in and its layers, then a
        table of every mode (the tuning windows apart)."""
        st = self.stages.get(stage)
        if st is None:
            return f"no profiled {stage} steps"
        head = [f"**{stage}**: {st.profiled_steps} profiled steps of {st.total_steps}. "
                f"**Energy: {self.method_line()}.**", ""]
        m0 = st.headline
        if m0 is not None:
            head.append(f"Ended in mode **{m0.mode}**: {m0.all_steps} steps, {m0.step_time_s * 1e3:.3g} ms, "
                        f"{m0.step_energy_j:.4g} J, {m0.power_w:.3g} W per step [{m0.label}] ({_over(m0)}); layers from "
                        f"{m0.profiled.steps} profiled step(s)" + (", scaled to the mode's step" if m0.scaled else ""))
            head.append("")
        elif st.steps.steps:
            head.append(f"Step: {st.steps.time_s * 1e3:.2f} ms, {st.steps.energy_j:.4g} J "
                        f"(sd {st.steps.energy_j_std:.2g} J), {st.steps.power_w:.3g} W [{st.steps.label}]")
            head.append("")
        cols = ["layer", "kind", "method", "time ms", "fwd ms", "bwd ms", "energy mJ", "sd mJ", "power W", "share %",
                "GFLOP", "FLOP/B"]
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        rows = self.rows(stage)
        for r in rows[:top] if top else rows:
            gflop = None if r["flops"] is None else r["flops"] / 1e9
            lines.append("| " + " | ".join([
                f"`{r['layer']}`", r["kind"], r["method"], _s(r["time_ms"]), _s(r["fwd_ms"]), _s(r["bwd_ms"]),
                _s(r["energy_mj"]), _s(r["energy_mj_std"]), _s(r["power_w"]),
                _s(None if r["energy_share"] is None else 100 * r["energy_share"], 3), _s(gflop), _s(r["intensity"]),
            ]) + " |")
        if top and len(rows) > top:
            lines.append(f"\n{len(rows) - top} more layers in layers.csv")
        if len(st.modes) > 1:
            lines += ["", "**Every mode** (the one it ended in first; a tuner's profiling windows apart; each row one "
                      "mode, never a mean over modes)", "",
                      "| mode | role | steps | ms/step | J/step | W | method | profiled |", "|---|---|---|---|---|---|---|---|"]
            for m in st.modes:
                lines.append(f"| {m.mode} | {m.role} | {m.all_steps} | {_s(m.step_time_s * 1e3)} | {_s(m.step_energy_j)} "
                             f"| {_s(m.power_w)} | {m.label}, {_over(m)} | {m.profiled.steps} |")
        if st.over_budget is not None:
            lines += ["", st.over_budget.describe("steps")]
        return "\n".join(head + lines)

    def summary(self, top: int = 5, stages: Iterable[str] | None = None) -> str:
        """The short end-of-run print: top layers by energy, totals, methods, overhead (``stages``: only these)."""
        out = ["lightning_edge EnergyProfiler summary", f"  device: {self.device}", f"  energy: {self.method_line()}"]
        if self.roofline:
            out.append(f"  model for apportioning/estimates: {self.roofline}")
        wanted = None if stages is None else set(stages)
        for st in self.stages.values():
            if wanted is not None and st.stage not in wanted:
                continue
            opt = ""
            if st.optimizer_steps is not None and st.optimizer_steps != st.total_steps:
                opt = f" ({st.optimizer_steps} optimizer steps: the Trainer's step count)"
            out.append(f"  [{st.stage}] {st.profiled_steps} of {st.total_steps} batches profiled per layer{opt}")
            if st.profiled_steps == 0 and st.min_batches:
                why = st.min_reason or (f"the first {st.min_batches - 1} are warm-up, one captures the inputs for the "
                                        "cost model")
                out.append(f"    too short to profile per layer: a stage needs at least {st.min_batches} batches ({why}); "
                           f"this run had {st.total_steps}. Its totals below are from every batch.")
            if math.isfinite(st.total_energy_j):
                per = (f", {st.total_energy_j / st.total_samples * 1e3:.3g} mJ/sample"
                       if st.total_samples else "")
                every = f", every mode ({len(st.modes)})" if len(st.modes) > 1 else ""
                out.append(f"    total energy {st.total_energy_j:.4g} J over {st.total_time_s:.3g} s{per}{every} "
                           f"[{st.total_label}]")
            m0 = st.headline
            if m0 is not None:
                host = (f" (this machine: {m0.total.host_time_s / m0.steps * 1e3:.3g} ms)" if self.twin_times and
                        m0.total.host_time_s is not None else "")
                out.append(f"    {m0.role} mode {m0.mode}: {m0.all_steps} batches, per batch {m0.step_time_s * 1e3:.3g} ms"
                           f"{host}, {m0.step_energy_j:.4g} J, {m0.power_w:.3g} W [{m0.label}] ({_over(m0)})")
            elif st.steps.steps:
                host = (f" (this machine: {st.steps.host_time_s * 1e3:.3g} ms)" if self.twin_times and
                        math.isfinite(st.steps.host_time_s) else "")
                out.append(f"    per profiled batch: {st.steps.time_s * 1e3:.3g} ms{host}, {st.steps.energy_j:.4g} J, "
                           f"{st.steps.power_w:.3g} W [{st.steps.label}]")
            total = sum(_nz(s.energy_j) for s in st.layers.values())
            ranked = [s for s in st.ranked() if _nz(s.energy_j) > 0][:top]
            if ranked:
                of = ""
                if m0 is not None:
                    of = (f" in {m0.mode}, from {m0.profiled.steps} profiled batch(es)"
                          + (", scaled to its batch" if m0.scaled else ""))
                out.append(f"    top {len(ranked)} layers by energy (mean per step{of}):")
                w = max(len(s.name) for s in ranked)
                for s in ranked:
                    share = 100 * s.energy_j / total if total > 0 else math.nan
                    out.append(f"      {s.name:<{w}}  {s.kind:<12} {s.time_s * 1e3:8.3f} ms  "
                               f"{s.energy_j * 1e3:9.3f} mJ  {share:5.1f} %  {s.label}")
            others = [m for m in st.modes[1:] if not m.window]
            windows = [m for m in st.modes[1:] if m.window]
            for title, ms in (("also trained in", others), ("tuning windows (each apart)", windows)):
                if ms:
                    out.append(f"    {title}:")
                    for m in ms:
                        out.append(f"      {m.mode:<24} {m.role:<18} {m.all_steps:6d} batches  {m.step_time_s * 1e3:8.3f} ms  "
                                   f"{m.power_w:6.2f} W  [{m.label}] ({_over(m)})")
            if st.over_budget is not None:
                out.append(f"    power budget: {st.over_budget.describe('batches')}")
            counts = st.method_counts()
            if counts:
                out.append("    methods (layer-steps): " + ", ".join(f"{n} {k}" for k, n in counts.most_common()))
        o = self.overhead
        parts = []
        if o.run_wall_s:
            parts.append(f"{o.run_overhead_s:.3g} s of this {o.run_wall_s:.3g} s run "
                         f"(+{100 * (o.run_fraction or 0.0):.2g} % wall time), measured: every hook of the "
                         "callback, the layer timer, cost analysis, tables, figures, reports")
        if o.fraction is not None:
            every = f", profiling every {o.every_n_steps} steps" if o.every_n_steps is not None else ""
            parts.append(f"per-layer profiling {100 * o.fraction:.2f} % of the step time{every}")
        elif o.every_n_steps is not None:
            parts.append(f"every {o.every_n_steps} steps")
        if o.epoch_work_s:
            parts.append(f"figures {o.epoch_work_s:.2g} s")
        if o.sampler_cpu_percent is not None:
            parts.append(f"power sampler {o.sampler_cpu_percent:.2f} % of one core")
        if o.setup_s:
            parts.append(f"cost analysis {o.setup_s:.2g} s once")
        if parts:
            out.append("  overhead: " + "; ".join(parts))
        for n in self.notes:
            out.append(f"  note: {n}")
        return "\n".join(out)


def bar_chart(names: list[str], panels: list[tuple[str, list[float]]], title: str = "", row_px: int = 18,
              panel_px: int = 300) -> Any:
    """A horizontal bar chart as an RGB ``PIL.Image``: one row per name, one panel of bars per ``(label, values)``,
    each bar with its value. Pillow only (matplotlib's own dependency): a few milliseconds, where a matplotlib
    figure costs about a second."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default()
    label_px = min(max((len(n) for n in names), default=8) * 7 + 16, 360)
    head, foot = 40, 8
    width = label_px + len(panels) * (panel_px + 20)
    height = head + row_px * len(names) + foot
    img = Image.new("RGB", (width, height), "white")
    d = ImageDraw.Draw(img)
    d.text((8, 6), title, fill="black", font=font)
    colors = ["#c0504d", "#4f81bd", "#9bbb59", "#8064a2"]
    for i, n in enumerate(names):
        d.text((8, head + i * row_px + 3), n[-(label_px // 7):], fill="#222222", font=font)
    for k, (label, values) in enumerate(panels):
        x0 = label_px + k * (panel_px + 20)
        d.text((x0, 22), label, fill="#333333", font=font)
        finite = [v for v in values if v is not None and math.isfinite(v) and v > 0]
        top = max(finite) if finite else 1.0
        for i, v in enumerate(values):
            if v is None or not math.isfinite(v) or v <= 0:
                continue
            y = head + i * row_px + 2
            bar = int((panel_px - 70) * v / top)
            d.rectangle([x0, y, x0 + max(bar, 1), y + row_px - 5], fill=colors[k % len(colors)])
            d.text((x0 + bar + 4, y + 1), f"{v:.3g}", fill="#222222", font=font)
    return img


def _font(size: int) -> Any:
    """Pillow's default font at ``size`` px (its scalable Aileron with FreeType; the small bitmap font without)."""
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except (TypeError, ImportError, OSError):  # Pillow < 10.1 or no FreeType
        return ImageFont.load_default()


#: the rows outside the layers, coloured apart in the stacked bar (the layers are blue)
REGION_COLORS = ["#c0504d", "#9bbb59", "#8064a2", "#f79646", "#4bacc6", "#7f7f7f", "#c9a227", "#d16ba5"]
LAYER_COLOR = "#4f81bd"


def energy_chart(rows: list[tuple[str, bool, float, float]], title: str, subtitle: str = "", top: int = 15,
                 width: int = 1200) -> Any:
    """Where a step's energy goes, as one RGB ``PIL.Image`` ``width`` px wide (TensorBoard shows an image at its
    own size when asked to, so it is drawn large, with 15-22 px text): a stacked bar of the step's energy split
    into the layers (all of them, together) and each row outside them (``(optimizer)``, ``(backward)``, ...), with
    their joules and shares; below it, the ``top`` layers by energy as sorted horizontal bars (energy per step in J
    with its share of the step, and self time per step in ms), each named. ``rows``: ``(name, outside the layers,
    energy_j, time_ms)`` per row. Pillow only: some 20-40 ms."""
    from PIL import Image, ImageDraw

    fin = [(n, bool(r), float(e), float(t)) for n, r, e, t in rows if e is not None and math.isfinite(e) and e >= 0]
    total = sum(e for _, _, e, _ in fin)
    layers = sorted([x for x in fin if not x[1]], key=lambda x: -x[2])
    regions = sorted([x for x in fin if x[1]], key=lambda x: -x[2])
    shown = [x for x in layers if x[2] > 0][:top]
    f_title, f_text, f_small = _font(22), _font(16), _font(14)
    pad, row_px = 16, 28
    label_px = min(max([int(f_text.getlength(n)) for n, *_ in shown] or [120]) + 2 * pad, width // 3)
    legend = [("layers" + (f" (all {len(layers)})" if layers else ""), sum(x[2] for x in layers), LAYER_COLOR)]
    legend += [(n, e, REGION_COLORS[i % len(REGION_COLORS)]) for i, (n, _, e, _) in enumerate(regions)]
    legend_rows = math.ceil(len(legend) / 3)
    stack_y = pad + 34 + (24 if subtitle else 0)
    bars_y = stack_y + 36 + 10 + legend_rows * 24 + 40
    height = bars_y + 30 + max(len(shown), 1) * row_px + 34
    img = Image.new("RGB", (width, height), "white")
    d = ImageDraw.Draw(img)
    d.text((pad, pad), title, fill="black", font=f_title)
    if subtitle:
        d.text((pad, pad + 32), subtitle, fill="#444444", font=f_small)

    # the step's energy, stacked: the layers together, then each row outside them
    x0, x1 = pad, width - pad
    x = float(x0)
    for _name, e, color in legend:
        if total <= 0 or e <= 0:
            continue
        w = (x1 - x0) * e / total
        d.rectangle([int(x), stack_y, max(int(x + w) - 1, int(x)), stack_y + 36], fill=color)
        x += w
    d.rectangle([x0, stack_y, x1, stack_y + 36], outline="#333333")
    col_w = (x1 - x0) // 3
    for i, (name, e, color) in enumerate(legend):
        lx, ly = x0 + (i % 3) * col_w, stack_y + 46 + (i // 3) * 24
        d.rectangle([lx, ly + 3, lx + 14, ly + 17], fill=color)
        share = f"{100 * e / total:.1f} %" if total > 0 else "-"
        d.text((lx + 20, ly), f"{name}: {e:.3g} J ({share})", fill="#222222", font=f_text)

    # the top layers, sorted: energy (J, share of the step) and self time (ms)
    panel_e = int((width - label_px - 2 * pad) * 0.62)
    panel_t = width - label_px - 2 * pad - panel_e - 20
    ex, tx = label_px, label_px + panel_e + 20
    head = f"top {len(shown)} of {len(layers)} layers by energy per step" if layers else "no layer energy"
    d.text((pad, bars_y - 30), head, fill="black", font=f_text)
    d.text((ex, bars_y), "energy per step, J (share of the step)", fill="#333333", font=f_small)
    d.text((tx, bars_y), "self time per step, ms", fill="#333333", font=f_small)
    top_e = max([x[2] for x in shown] or [1.0]) or 1.0
    top_t = max([x[3] for x in shown if math.isfinite(x[3])] or [1.0]) or 1.0
    for i, (name, _, e, t) in enumerate(shown):
        y = bars_y + 26 + i * row_px
        if i % 2:
            d.rectangle([pad, y - 2, width - pad, y + row_px - 4], fill="#f3f5f8")
        label = name
        while f_text.getlength(label) > label_px - pad - 6 and len(label) > 4:
            label = "…" + label[2:]
        d.text((pad, y + 2), label, fill="#222222", font=f_text)
        bw = int((panel_e - 150) * e / top_e)
        d.rectangle([ex, y + 3, ex + max(bw, 1), y + row_px - 7], fill=LAYER_COLOR)
        share = f" ({100 * e / total:.1f} %)" if total > 0 else ""
        d.text((ex + bw + 6, y + 3), f"{e:.3g}{share}", fill="#222222", font=f_small)
        if math.isfinite(t) and t > 0:
            tw = int((panel_t - 70) * t / top_t)
            d.rectangle([tx, y + 3, tx + max(tw, 1), y + row_px - 7], fill="#a5a5a5")
            d.text((tx + tw + 6, y + 3), f"{t:.3g}", fill="#222222", font=f_small)
    d.text((pad, height - 26), "lightning_edge EnergyProfiler: layers.csv and the Text tab's table have every row",
           fill="#666666", font=f_small)
    return img


def _over(m: ModeReport) -> str:
    """Which of the mode's steps its figure is over."""
    if not m.settled:
        return "none settled: the power still moved after the start or a mode change"
    left = m.all_steps - m.steps
    return f"over its {m.steps} settled steps" + (f", {left} while the power settled left out" if left else "")


def _s(x: float | None, nd: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{nd}g}"


def _clean(o: Any) -> Any:
    """Non-finite floats -> None (JSON has no nan), recursively."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, Mapping):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def _json_default(o: Any) -> Any:
    if isinstance(o, Counter):
        return dict(o)
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
    except ImportError:  # pragma: no cover
        pass
    return str(o)

